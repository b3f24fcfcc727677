#!/usr/bin/env bash
# Installs what is missing, builds everything, runs every test, and prints
#   N passed, N failed[, N skipped]
# as its last line (test cases, counted from the gtest XML reports plus the
# shell tests' own checks). Exit status 0 only when nothing failed.
#
#   tests/run_all.sh [extra bazel test flags]
# MNIST for the tests: $PSCLUSTER_DATA_DIR, else data/mnist, else
# ../shared/data/mnist; tests that need it skip and say why without it.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

case "${1:-}" in
  -h|--help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
esac

"$ROOT/deploy/install_deps.sh" || { echo "0 passed, 1 failed"; exit 1; }

if [ -z "${PSCLUSTER_DATA_DIR:-}" ]; then
  for d in "$ROOT/data/mnist" "$ROOT/../shared/data/mnist"; do
    if [ -f "$d/train-images-idx3-ubyte.gz" ]; then PSCLUSTER_DATA_DIR="$(cd "$d" && pwd)"; break; fi
  done
fi
export PSCLUSTER_DATA_DIR="${PSCLUSTER_DATA_DIR:-}"
[ -z "$PSCLUSTER_DATA_DIR" ] && echo "run_all: no MNIST found; tests that need it will skip" >&2

# The machine's environment may force an OpenBLAS core type that halves its
# speed; tests and benchmarks let OpenBLAS detect the CPU.
unset OPENBLAS_CORETYPE

passed=0
failed=0
skipped=0

# count_reports DIR...: adds the test cases of every gtest XML report under
# the folders to passed/failed/skipped, and sets COUNTED to how many.
count_reports() {
  local xml p f s
  COUNTED=0
  while IFS= read -r xml; do
    read -r p f s < <(awk '
      /<testcase / { open = 1; bad = 0; skip = ($0 ~ /result="skipped"/);
                     if ($0 ~ /\/>[[:space:]]*$/) { closecase() } }
      open && /<failure|<error/ { bad = 1 }
      open && /<skipped/ { skip = 1 }
      open && /<\/testcase>/ { closecase() }
      function closecase() { if (bad) f++; else if (skip) s++; else p++; open = 0 }
      END { print p + 0, f + 0, s + 0 }' "$xml")
    passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
    COUNTED=$((COUNTED + p + f + s))
  done < <(find -L "$@" -name test.xml 2>/dev/null)
}

# 0. The CPU-only configuration, as a machine without nvcc builds it
#    (PSCLUSTER_CUDA=0, see third_party/cuda/cuda_configure.bzl): build the
#    worker and the tests, and run the tests whose expectations change
#    without CUDA. Its own output directory (--platform_suffix) and no
#    bazel-* symlinks, so step 1's build and reports are left alone. The
#    build counts as one test case; the tests count their cases.
CPU_ONLY=(--repo_env=PSCLUSTER_CUDA=0 --platform_suffix=cpuonly --symlink_prefix=/)
if bazel build "${CPU_ONLY[@]}" --keep_going //worker/... //tests/...; then
  echo "run_all: CPU-only build (PSCLUSTER_CUDA=0) of //worker/... //tests/...: OK"
  passed=$((passed + 1))
  cpu_logs="$(bazel info "${CPU_ONLY[@]}" bazel-testlogs 2>/dev/null)"
  [ -n "$cpu_logs" ] && rm -rf "$cpu_logs/worker" "$cpu_logs/tests"
  bazel test "${CPU_ONLY[@]}" --test_output=errors \
    //worker:backend_factory_test //worker:device_choice_test //tests:device_flag_test
  cpu_rc=$?
  count_reports "$cpu_logs/worker" "$cpu_logs/tests"
  cpu_counted=$COUNTED
  if [ "$cpu_rc" -ne 0 ] && [ "$cpu_rc" -ne 3 ] || [ "$cpu_counted" -eq 0 ]; then
    echo "run_all: CPU-only tests: bazel exited $cpu_rc" >&2
    failed=$((failed + 1))
  fi
else
  echo "run_all: FAIL: the CPU-only build (bazel build ${CPU_ONLY[*]} //worker/... //tests/...) failed" >&2
  failed=$((failed + 1))
fi

# 1. Bazel: build everything, run every test target.
rm -rf "$ROOT/bazel-testlogs/" 2>/dev/null
bazel test //... --keep_going --test_output=errors \
  --test_env=PSCLUSTER_DATA_DIR="$PSCLUSTER_DATA_DIR" "$@" 2>&1 | tee /tmp/run_all_bazel.$$ 
bazel_rc=${PIPESTATUS[0]}

# Count test cases in every report; a test target that crashed gets a
# report from Bazel with one failed case.
count_reports "$ROOT/bazel-testlogs/"

# Targets that did not build or run have no report: one failure each.
nobuild=$(grep -cE '^//[^ ]+ +(FAILED TO BUILD|NO STATUS)' /tmp/run_all_bazel.$$ || true)
failed=$((failed + nobuild))
if [ "$bazel_rc" -ne 0 ] && [ "$bazel_rc" -ne 3 ] && [ "$failed" -eq 0 ]; then
  echo "run_all: bazel exited $bazel_rc" >&2
  failed=$((failed + 1))
fi
rm -f /tmp/run_all_bazel.$$

# 2. Shell tests, run directly: they count their own checks.
for t in "$ROOT"/tests/*_test.sh; do
  [ -x "$t" ] || continue
  out="$(bash "$t" "$PSCLUSTER_DATA_DIR" 2>&1)"
  echo "$out"
  p=$(grep -c '^PASS: ' <<<"$out"); f=$(grep -c '^FAIL: ' <<<"$out"); s=$(grep -c '^SKIP: ' <<<"$out")
  passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
done

line="$passed passed, $failed failed"
[ "$skipped" -gt 0 ] && line+=", $skipped skipped"
echo "$line"
[ "$failed" -eq 0 ]
