#!/usr/bin/env bash
# Tests deploy/data/download_mnist.sh without the internet: argument handling,
# --verify-only against the real files, and downloads from file:// mirrors
# (fallback across mirrors, checksum rejection, skipping verified files).
#
# Usage: tests/download_mnist_test.sh [MNIST_DIR]
# MNIST_DIR defaults to $PSCLUSTER_DATA_DIR, then <repo>/../shared/data/mnist;
# the checks that need the real files are skipped (and say so) without it.
# Exit status 0 when every check passed.
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
script="$repo/deploy/data/download_mnist.sh"
data="${1:-${PSCLUSTER_DATA_DIR:-$repo/../shared/data/mnist}}"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

source "$(dirname "${BASH_SOURCE[0]}")/test_lib.sh"   # pass, fail, skip, finish

# run NAME EXPECTED_STATUS PATTERN ARGS...: runs the script, checks its exit
# status and that its combined output matches the extended regex PATTERN.
run() {
  local name="$1" want="$2" pattern="$3"
  shift 3
  local out status
  out="$(bash "$script" "$@" 2>&1)"
  status=$?
  if [[ $status -ne $want ]]; then
    fail "$name: exit status $status, expected $want; output:"$'\n'"$out"
  elif ! grep -Eq -- "$pattern" <<<"$out"; then
    fail "$name: output does not match /$pattern/:"$'\n'"$out"
  else
    pass "$name"
  fi
}

files=(train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz
       t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz)

# Argument handling.
run "--help prints usage" 0 "^Usage: download_mnist.sh" --help
run "-h prints usage" 0 "--verify-only" -h
run "unknown option is a usage error" 2 "unknown option '--frobnicate'" --frobnicate
run "--mirror without URL is a usage error" 2 "--mirror needs a URL" --mirror
run "two directories are a usage error" 2 "more than one directory" a b

# Verification of an empty and of a damaged directory.
mkdir -p "$tmp/empty"
run "--verify-only on an empty dir fails naming the files" 1 \
  "MISSING  $tmp/empty/train-images-idx3-ubyte.gz" --verify-only "$tmp/empty"

if [[ ! -f "$data/t10k-labels-idx1-ubyte.gz" ]]; then
  skip "checks with the real MNIST files: none in '$data'" \
    "(pass a directory or set PSCLUSTER_DATA_DIR)"
else
  data="$(cd "$data" && pwd)"
  run "--verify-only accepts the real files in $data" 0 \
    "all 4 files in .* verified" --verify-only "$data"

  mkdir -p "$tmp/damaged"
  for f in "${files[@]}"; do ln -s "$data/$f" "$tmp/damaged/$f"; done
  rm "$tmp/damaged/t10k-labels-idx1-ubyte.gz"
  cp "$data/t10k-labels-idx1-ubyte.gz" "$tmp/damaged/"
  printf 'x' >>"$tmp/damaged/t10k-labels-idx1-ubyte.gz"
  run "--verify-only rejects a file with a wrong md5" 1 \
    "BAD      $tmp/damaged/t10k-labels-idx1-ubyte.gz: md5 [0-9a-f]{32}, expected ec29112dd5afa0611ce80d1b7f02629c" \
    --verify-only "$tmp/damaged"

  if ! command -v curl >/dev/null 2>&1; then
    skip "download checks: they use file:// mirrors, which need curl"
  else
    # A mirror with wrong content for every file.
    mkdir -p "$tmp/garbage"
    for f in "${files[@]}"; do echo garbage >"$tmp/garbage/$f"; done

    run "download falls back from a missing mirror to a good one" 0 \
      "fetched  $tmp/out/t10k-labels-idx1-ubyte.gz from file://$data/t10k-labels-idx1-ubyte.gz" \
      --mirror "file://$tmp/nowhere/" --mirror "file://$data" "$tmp/out"
    run "downloaded files verify" 0 "all 4 files" --verify-only "$tmp/out"
    run "verified files are kept without downloading" 0 \
      "present  $tmp/out/train-images-idx3-ubyte.gz \(md5 ok\)" \
      --mirror "file://$tmp/nowhere/" "$tmp/out"

    printf 'x' >>"$tmp/out/train-labels-idx1-ubyte.gz"
    run "a stale file is downloaded again" 0 \
      "stale    $tmp/out/train-labels-idx1-ubyte.gz" \
      --mirror "file://$data/" "$tmp/out"

    run "a mirror with wrong checksums is rejected" 1 \
      "BAD      file://$tmp/garbage/train-images-idx3-ubyte.gz: md5" \
      --mirror "file://$tmp/garbage" "$tmp/bad"
    if ls "$tmp/bad"/*.gz >/dev/null 2>&1; then
      fail "files with wrong checksums were left in $tmp/bad"
    else
      pass "no file with a wrong checksum is kept"
    fi
    run "no reachable mirror fails clearly" 1 \
      "could not download t10k-labels-idx1-ubyte.gz with the right checksum" \
      --mirror "file://$tmp/nowhere" "$tmp/none"
  fi
fi

echo "download_mnist_test: checked deploy/data/download_mnist.sh (arguments," \
  "--verify-only, file:// mirror downloads): $passed passed, $failed failed," \
  "$skipped skipped"
[[ $failed -eq 0 ]]
