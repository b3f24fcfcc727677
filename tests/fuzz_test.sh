#!/usr/bin/env bash
# Builds the libFuzzer targets in fuzz/ with clang (ASan + UBSan, Bazel's
# --config=fuzz) in an output base of their own, so the gcc build's cache
# is left alone, then runs each for a bounded time from a copy of its seed
# corpus (fuzz/corpus/<target>/). PASS per target when libFuzzer ends
# cleanly with no sanitizer report; FAIL with the crash report and the
# saved input otherwise; SKIP, saying why, without bazel, clang or libFuzzer.
#
# Usage: tests/fuzz_test.sh [IGNORED]   (run_all.sh passes the MNIST folder)
#   PSCLUSTER_FUZZ_SECONDS      per target (default 30; the targets run two
#                               at a time, one core each: about
#                               ceil(targets / 2) x that in all)
#   PSCLUSTER_FUZZ_OUTPUT_BASE  Bazel output base (default
#                               $HOME/.cache/pscluster-fuzz; the first build
#                               there takes minutes, later ones seconds)
# Crashing inputs are kept in $TMPDIR/pscluster-fuzz-artifacts (or /tmp).
set -uo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
seconds="${PSCLUSTER_FUZZ_SECONDS:-30}"
base="${PSCLUSTER_FUZZ_OUTPUT_BASE:-$HOME/.cache/pscluster-fuzz}"
artifacts="${TMPDIR:-/tmp}/pscluster-fuzz-artifacts"
targets=(tf_config ps_service data_plane codec chief npy idx safetensors tfrecord ring checkpoint criteo
         keras_model keras_archive event_file hdf5_weights identity)
source "$(dirname "${BASH_SOURCE[0]}")/test_lib.sh"   # pass, fail, skip, finish

if ! command -v bazel >/dev/null; then skip "fuzzers: no bazel"; finish; fi
if ! command -v clang >/dev/null || ! command -v clang++ >/dev/null; then
  skip "fuzzers: no clang (Debian: apt-get install clang)"; finish
fi
tmp="$(mktemp -d)"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT

# libFuzzer ships with clang's compiler-rt; some installs lack it.
printf 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }\n' \
  > "$tmp/probe.cc"
if ! clang++ -fsanitize=fuzzer,address,undefined "$tmp/probe.cc" -o "$tmp/probe" 2>"$tmp/probe.err"; then
  skip "fuzzers: clang cannot link libFuzzer with ASan and UBSan: $(head -c 300 "$tmp/probe.err")"
  finish
fi

# The same startup options for every call, or Bazel restarts its server.
fuzz_bazel() { bazel --output_base="$base" --max_idle_secs=300 "$@"; }
labels=()
for t in "${targets[@]}"; do labels+=("//fuzz:${t}_fuzzer"); done
cd "$repo" || { fail "cd $repo"; finish; }
start=$SECONDS
if ! fuzz_bazel build --config=fuzz "${labels[@]}" >"$tmp/build.log" 2>&1; then
  fail "clang build of the fuzzers (bazel --output_base=$base build --config=fuzz ${labels[*]}):"
  grep -E 'error|ERROR' "$tmp/build.log" | head -20
  finish
fi
echo "fuzz_test: clang build took $((SECONDS - start)) s"
bin="$(fuzz_bazel info --config=fuzz bazel-bin 2>/dev/null)/fuzz"

# Two at a time (the machine's cores), each from a copy of its seed corpus
# (libFuzzer adds to it).
mkdir -p "$artifacts"
start_target() {
  local t="$1"
  mkdir -p "$tmp/$t/corpus" "$tmp/$t/work"
  cp "$repo/fuzz/corpus/${t}_fuzzer/"* "$tmp/$t/corpus/" 2>/dev/null
  # libhdf5's own allocations are not ours to find (fuzz/lsan_suppressions.txt);
  # it mallocs what a malformed file's metadata claims (up to TiBs) and takes
  # malloc's NULL as the error it is, as in the daemons: ASan and libFuzzer
  # must let it (docs/testing.md).
  local asan="${ASAN_OPTIONS:-}" limit=()
  case "$t" in hdf5_weights | keras_archive)
    asan="allocator_may_return_null=1"; limit=(-malloc_limit_mb=1048576) ;;
  esac
  # TMPDIR: the targets' scratch folders (fuzz/fuzz_input.h) go with $tmp.
  (cd "$tmp/$t/work" &&
     TMPDIR="$tmp/$t/work" ASAN_OPTIONS="$asan" LSAN_OPTIONS="suppressions=$repo/fuzz/lsan_suppressions.txt" \
     exec "$bin/${t}_fuzzer" "${limit[@]}" -max_total_time="$seconds" \
     -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
     -artifact_prefix="$artifacts/${t}_" "$tmp/$t/corpus") >"$tmp/$t.log" 2>&1 &
  pids+=($!)
}
report_target() {
  local t="$1" rc="$2"
  local log="$tmp/$t.log"
  runs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")"
  rate="$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")"
  if [ "$rc" -eq 0 ] && ! grep -qE '^==[0-9]+==ERROR|runtime error:|contract broken|^SUMMARY: ' "$log"; then
    pass "${t}_fuzzer: ${runs:-?} runs in ${seconds} s (${rate:-?} exec/s), no crash"
  else
    fail "${t}_fuzzer exited $rc; its report:"
    # The report without libFuzzer's progress lines and the input dumped
    # as bytes (it is saved), lines cut (sanitizer frames are long).
    grep -vE '^#[0-9]|^0x[0-9a-f]+,|^\\|^"' "$log" |
      grep -E -m1 -A30 '==ERROR|runtime error:|contract broken|deadly signal|out-of-memory|timeout' |
      cut -c1-240 || tail -30 "$log" | cut -c1-240
    saved="$(sed -n 's/.*Test unit written to //p' "$log" | head -1)"
    [ -n "$saved" ] && echo "  input: $saved (replay: $bin/${t}_fuzzer $saved)"
  fi
}
for ((i = 0; i < ${#targets[@]}; i += 2)); do
  batch=("${targets[@]:i:2}")
  pids=()
  for t in "${batch[@]}"; do start_target "$t"; done
  for j in "${!batch[@]}"; do
    wait "${pids[$j]}"
    report_target "${batch[$j]}" $?
  done
done
pids=()
finish
