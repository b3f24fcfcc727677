#!/usr/bin/env bash
# Downloads the four MNIST .gz files into a directory and verifies their md5s.
# Run with --help for usage.
set -euo pipefail

readonly FILES=(
  train-images-idx3-ubyte.gz
  train-labels-idx1-ubyte.gz
  t10k-images-idx3-ubyte.gz
  t10k-labels-idx1-ubyte.gz
)
readonly MD5S=(
  f68b3c2dcbeaaa9fbdd348bbdeb94873
  d53e105ee54ea40749a09fcbcd1e9432
  9fb629c4189551a2d022fa330f9573f3
  ec29112dd5afa0611ce80d1b7f02629c
)
readonly DEFAULT_MIRRORS=(
  https://storage.googleapis.com/cvdf-datasets/mnist/
  https://ossci-datasets.s3.amazonaws.com/mnist/
)

usage() {
  cat <<EOF
Usage: $(basename "$0") [--mirror URL]... [--verify-only] [DIR]

Downloads the MNIST files (${FILES[*]})
into DIR (default: data/mnist) and checks their md5 checksums. Files already
in DIR with the right checksum are kept; a file with a wrong checksum is
downloaded again.

  DIR            target directory; created if missing
  --mirror URL   base URL to try, in the order given (repeatable; file://
                 works with curl). Default:
                   ${DEFAULT_MIRRORS[*]}
  --verify-only  download nothing; check that DIR holds all four files with
                 the right checksums
  -h, --help     show this help

Exit status: 0 all four files present and verified; 1 a file is missing, has
a wrong checksum, or could not be downloaded; 2 bad usage.
EOF
}

die_usage() {
  echo "download_mnist: $1 (see --help)" >&2
  exit 2
}

md5_of() {
  if command -v md5sum >/dev/null 2>&1; then
    md5sum "$1" | cut -d' ' -f1
  else
    md5 -q "$1"  # macOS
  fi
}

# fetch URL OUT: writes the body to OUT; non-zero on any failure.
fetch() {
  if command -v curl >/dev/null 2>&1; then
    curl --fail --silent --show-error --location --retry 2 \
      --connect-timeout 20 --output "$2" "$1"
  elif command -v wget >/dev/null 2>&1; then
    wget --quiet --tries=3 --timeout=20 --output-document="$2" "$1"
  else
    echo "download_mnist: neither curl nor wget is installed" >&2
    return 1
  fi
}

dir="data/mnist"
dir_given=0
verify_only=0
mirrors=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    -h | --help)
      usage
      exit 0
      ;;
    --verify-only) verify_only=1 ;;
    --mirror)
      [[ $# -ge 2 && -n "$2" ]] || die_usage "--mirror needs a URL"
      mirrors+=("$2")
      shift
      ;;
    --mirror=*)
      [[ -n "${1#--mirror=}" ]] || die_usage "--mirror needs a URL"
      mirrors+=("${1#--mirror=}")
      ;;
    -*) die_usage "unknown option '$1'" ;;
    *)
      [[ $dir_given -eq 0 ]] || die_usage "more than one directory given ('$dir', '$1')"
      dir="$1"
      dir_given=1
      ;;
  esac
  shift
done
if [[ ${#mirrors[@]} -eq 0 ]]; then
  mirrors=("${DEFAULT_MIRRORS[@]}")
fi

if [[ $verify_only -eq 1 ]]; then
  failed=0
  for i in "${!FILES[@]}"; do
    path="$dir/${FILES[$i]}"
    if [[ ! -f "$path" ]]; then
      echo "MISSING  $path" >&2
      failed=1
      continue
    fi
    actual=$(md5_of "$path")
    if [[ "$actual" != "${MD5S[$i]}" ]]; then
      echo "BAD      $path: md5 $actual, expected ${MD5S[$i]}" >&2
      failed=1
    else
      echo "OK       $path"
    fi
  done
  if [[ $failed -ne 0 ]]; then
    echo "download_mnist: verification of $dir failed" >&2
    exit 1
  fi
  echo "download_mnist: all ${#FILES[@]} files in $dir verified"
  exit 0
fi

mkdir -p "$dir" || { echo "download_mnist: cannot create $dir" >&2; exit 1; }
failed=0
for i in "${!FILES[@]}"; do
  name="${FILES[$i]}"
  want="${MD5S[$i]}"
  path="$dir/$name"
  if [[ -f "$path" ]]; then
    actual=$(md5_of "$path")
    if [[ "$actual" == "$want" ]]; then
      echo "present  $path (md5 ok)"
      continue
    fi
    echo "stale    $path: md5 $actual, expected $want; downloading again"
  fi
  part="$path.part"
  done_ok=0
  for mirror in "${mirrors[@]}"; do
    url="${mirror%/}/$name"
    rm -f "$part"
    if ! fetch "$url" "$part"; then
      echo "failed   $url" >&2
      continue
    fi
    actual=$(md5_of "$part")
    if [[ "$actual" != "$want" ]]; then
      echo "BAD      $url: md5 $actual, expected $want" >&2
      continue
    fi
    mv -f "$part" "$path"
    echo "fetched  $path from $url"
    done_ok=1
    break
  done
  rm -f "$part"
  if [[ $done_ok -eq 0 ]]; then
    echo "download_mnist: could not download $name with the right checksum" \
      "from any mirror (${mirrors[*]})" >&2
    failed=1
  fi
done
if [[ $failed -ne 0 ]]; then
  exit 1
fi
echo "download_mnist: all ${#FILES[@]} files in $dir verified"
