#!/usr/bin/env bash
# Tests deploy/data/criteo_synth's command line: --help, bad flags (exit 2
# naming the flag and the value), an unwritable --out (exit 1 naming it),
# and a small run (the four files, 40 fields a line, criteo.json's buckets,
# the same bytes for the same seed). The data itself is tested by model/criteo_synth_test.
# Needs the binary built (bazel build //deploy/data:criteo_synth).
#
# Usage: tests/criteo_synth_test.sh [MNIST_DIR]   (MNIST is not needed)
set -uo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="$repo/bazel-bin/deploy/data/criteo_synth"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

source "$(dirname "${BASH_SOURCE[0]}")/test_lib.sh"   # pass, fail, skip, finish

[ -x "$bin" ] || { fail "missing $bin (bazel build //deploy/data:criteo_synth)"; finish; }

# run NAME EXPECTED_STATUS PATTERN ARGS...: runs the binary, checks its exit
# status and that its combined output matches the extended regex PATTERN.
run() {
  local name="$1" want="$2" pattern="$3"
  shift 3
  local out status
  out="$("$bin" "$@" 2>&1)"
  status=$?
  if [[ $status -ne $want ]]; then
    fail "$name: exit status $status, expected $want; output:"$'\n'"$out"
  elif ! grep -Eq -- "$pattern" <<<"$out"; then
    fail "$name: output does not match /$pattern/:"$'\n'"$out"
  else
    pass "$name"
  fi
}

run "--help lists the flags" 0 "--ids_per_feature" --help
run "--out is required" 2 "^error: --out is required" --rows=10
run "a --rows that does not parse" 2 "'abc'.*'rows'" --out="$tmp/x" --rows=abc
run "--rows too small" 2 "^error: --rows=1: need >= 2" --out="$tmp/x" --rows=1
run "--test_fraction out of range" 2 "^error: --test_fraction=2: must be in \(0, 1\)" \
  --out="$tmp/x" --test_fraction=2
run "--zipf out of range" 2 "^error: --zipf=-1: must be in \[0, 10\]" --out="$tmp/x" --zipf=-1
run "--ids_per_feature out of range" 2 "^error: --ids_per_feature=0: must be in" \
  --out="$tmp/x" --ids_per_feature=0
run "--buckets negative" 2 "^error: --buckets=-1: must be in \[1, 16777216\].*or 0 for int64 ids" \
  --out="$tmp/x" --buckets=-1
run "--buckets over 2^24" 2 "^error: --buckets=16777217: must be in" --out="$tmp/x" \
  --buckets=16777217
run "--signal_ranks over --ids_per_feature" 2 \
  "^error: --signal_ranks=11: must be in \[0, --ids_per_feature=10\]" \
  --out="$tmp/x" --ids_per_feature=10 --signal_ranks=11
run "an unknown flag" 2 "unknown flag '--frobnicate=1'" --out="$tmp/x" --frobnicate=1
# A tool, not a daemon: the daemons' shared flags are neither listed nor taken.
if "$bin" --help 2>&1 | grep -q -- '--tf_config'; then
  fail "--help lists the daemons' --tf_config"
else
  pass "--help lists no daemon flag"
fi
run "a daemon's flag is unknown here" 2 "unknown flag '--tf_config=x'" --out="$tmp/x" \
  --tf_config=x
run "an unwritable --out" 1 "^error: cannot create $tmp/no/such: " --out="$tmp/no/such" --rows=10

run "a small run" 0 "planted model on the test split: auc=" \
  --out="$tmp/a" --rows=2000 --ids_per_feature=100 --seed=3 --buckets=5000
for f in train.txt test.txt planted.json criteo.json; do
  if [ -s "$tmp/a/$f" ]; then pass "the small run wrote $f"; else fail "no $tmp/a/$f"; fi
done
if [ "$(wc -l <"$tmp/a/train.txt")" -eq 1800 ] &&
   [ "$(wc -l <"$tmp/a/test.txt")" -eq 200 ]; then
  pass "1800 train and 200 test lines"
else
  fail "line counts: $(wc -l "$tmp/a/train.txt" "$tmp/a/test.txt")"
fi
bad="$(awk -F'\t' 'NF != 40' "$tmp/a/train.txt" "$tmp/a/test.txt" | head -1)"
if [ -z "$bad" ]; then
  pass "40 fields on every line"
else
  fail "a line without 40 fields: $bad"
fi

if grep -Eq '^\{"buckets": 5000\}$' "$tmp/a/criteo.json"; then
  pass "criteo.json holds --buckets"
else
  fail "criteo.json: $(cat "$tmp/a/criteo.json")"
fi

"$bin" --out="$tmp/c" --rows=2000 --ids_per_feature=100 --seed=3 --buckets=0 >/dev/null 2>&1
if grep -Eq '^\{"ids": "int64"\}$' "$tmp/c/criteo.json" &&
   cmp -s "$tmp/a/train.txt" "$tmp/c/train.txt"; then
  pass "--buckets=0: criteo.json asks for int64 ids; the lines are the same"
else
  fail "--buckets=0: criteo.json: $(cat "$tmp/c/criteo.json" 2>&1)"
fi

"$bin" --out="$tmp/b" --rows=2000 --ids_per_feature=100 --seed=3 --buckets=5000 >/dev/null 2>&1
if cmp -s "$tmp/a/train.txt" "$tmp/b/train.txt" && cmp -s "$tmp/a/test.txt" "$tmp/b/test.txt" &&
   cmp -s "$tmp/a/planted.json" "$tmp/b/planted.json"; then
  pass "the same seed writes the same bytes"
else
  fail "two runs with --seed=3 differ"
fi
finish
