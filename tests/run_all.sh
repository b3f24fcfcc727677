#!/usr/bin/env bash
# Installs what is missing, builds everything, runs every test, and prints
#   N passed, N failed[, N skipped]
# as its last line (test cases, counted from the gtest XML reports plus the
# shell tests' own checks). Exit status 0 only when nothing failed.
#
#   tests/run_all.sh [extra bazel test flags]
# MNIST for the tests: $PSCLUSTER_DATA_DIR, else data/mnist, else
# ../shared/data/mnist; tests that need it skip and say why without it.
# With CI=true a skip counts as a failure unless its reason starts with
# "[gpu] " (it depends on the GPUs this machine has or lacks).
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT" || exit 1

case "${1:-}" in
  -h|--help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
esac

# Counting rules. A test case passes, fails, or skips saying why (gtest's
# GTEST_SKIP() message, a shell test's "SKIP: " line). A skip whose reason
# starts with GPU_SKIP_MARKER depends only on the machine's GPUs (no GPU for
# a CUDA case, a GPU present for a case about its absence); on CI (CI=true)
# any other skip -- missing data, a missing tool, no root -- is a failure,
# since CI is the machine that must run everything.
GPU_SKIP_MARKER='[gpu] '
ON_CI=0
[ "${CI:-}" = true ] && ON_CI=1
passed=0
failed=0
skipped=0
PROBLEMS=()  # one line per failure and skip, printed before the totals
TIMES=()  # "N s  what" per phase and shell test, printed before the totals
ALL_STARTED=$SECONDS

# record pass|fail|skip WHAT [REASON]: counts one test case.
record() {
  case "$1" in
    pass) passed=$((passed + 1)) ;;
    fail) failed=$((failed + 1)); PROBLEMS+=("FAILED  $2: $3") ;;
    skip)
      if [ "$ON_CI" = 1 ] && [[ "$3" != "$GPU_SKIP_MARKER"* ]]; then
        failed=$((failed + 1)); PROBLEMS+=("FAILED  $2: skipped on CI, not for the GPU: $3")
      else
        skipped=$((skipped + 1)); PROBLEMS+=("skipped $2: $3")
      fi ;;
  esac
}

# count_reports TESTLOGS [PACKAGE...]: records every test case of the gtest
# XML reports under the Bazel testlogs folder (only under the packages'
# folders when given; Bazel writes a report with one failed case for a
# target that crashed or timed out), and sets COUNTED to how many.
count_reports() {
  local kind what reason
  COUNTED=0
  while IFS=$'\t' read -r kind what reason; do
    record "$kind" "$what" "$reason"
    COUNTED=$((COUNTED + 1))
  done < <(python3 - "$@" <<'EOF'
import os, re, sys
import xml.etree.ElementTree as ET

def one_line(text):
    return " | ".join(l.strip() for l in (text or "").strip().splitlines() if l.strip())[:400]

root = sys.argv[1]
for top in [os.path.join(root, p) for p in sys.argv[2:]] or [root]:
    for dirpath, _, files in sorted(os.walk(top, followlinks=True)):
        if "test.xml" not in files:
            continue
        path = os.path.join(dirpath, "test.xml")
        # bazel-testlogs/tests/cnn_test[/run_1_of_3] -> //tests:cnn_test
        parts = [p for p in os.path.relpath(dirpath, root).split(os.sep)
                 if not re.fullmatch(r"(run|shard)_\d+_of_\d+", p)]
        target = "//%s:%s" % ("/".join(parts[:-1]), parts[-1]) if parts else path
        try:
            cases = list(ET.parse(path).getroot().iter("testcase"))
        except (ET.ParseError, OSError) as e:
            print("fail\t%s\tunreadable report %s: %s" % (target, path, e))
            continue
        for tc in cases:
            case = ".".join(n for n in (tc.get("classname"), tc.get("name")) if n)
            name = "%s %s" % (target, case)
            bad = [c for c in tc if c.tag in ("failure", "error")]
            skip = tc.find("skipped")
            if bad:
                print("fail\t%s\t%s" % (name, one_line(bad[0].get("message") or bad[0].text)))
            elif skip is not None or tc.get("result") == "skipped":
                msg = (skip.get("message") or skip.text or "") if skip is not None else ""
                lines = msg.split("\n")
                if len(lines) > 1 and re.fullmatch(r"\S+:\d+", lines[0].strip()):
                    lines = lines[1:]  # gtest's "file:line"
                print("skip\t%s\t%s" % (name, one_line("\n".join(lines)) or "no reason given"))
            elif tc.get("status") == "notrun":
                print("skip\t%s\tdisabled (DISABLED_ prefix)" % name)
            else:
                print("pass\t%s\t" % name)
EOF
  )
}

# run_shell_tests: runs every tests/*_test.sh and records the PASS:/FAIL:/
# SKIP: lines it prints. A script that is not executable, that exits
# non-zero without a FAIL line, or that prints no result at all is a failure.
run_shell_tests() {
  local t name out rc line p f s started
  for t in "$ROOT"/tests/*_test.sh; do
    [ -e "$t" ] || continue
    name="tests/$(basename "$t")"
    if [ ! -x "$t" ]; then
      record fail "$name" "not executable (chmod +x; in git: git update-index --chmod=+x $name)"
      continue
    fi
    started=$SECONDS
    out="$("$t" "$PSCLUSTER_DATA_DIR" 2>&1)"; rc=$?
    echo "$out"
    TIMES+=("$((SECONDS - started)) s  $name")
    p=0; f=0; s=0
    while IFS= read -r line; do
      case "$line" in
        "PASS: "*) record pass "$name"; p=$((p + 1)) ;;
        "FAIL: "*) record fail "$name" "${line#FAIL: }"; f=$((f + 1)) ;;
        "SKIP: "*) record skip "$name" "${line#SKIP: }"; s=$((s + 1)) ;;
      esac
    done <<<"$out"
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
      record fail "$name" "exited $rc without a FAIL: line"
    elif [ $((p + f + s)) -eq 0 ]; then
      record fail "$name" "printed no PASS:, FAIL: or SKIP: line"
    fi
  done
}

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

# 0. The CPU-only configuration, as a machine without nvcc builds it
#    (PSCLUSTER_CUDA=0, see third_party/cuda/cuda_configure.bzl): build the
#    worker and the tests, and run the tests whose expectations change
#    without CUDA. Its own output directory (--platform_suffix) and no
#    bazel-* symlinks, so step 1's build and reports are left alone. The
#    build is not a test case: a failed build counts as one failure, a good
#    one counts nothing; the tests count their cases.
CPU_ONLY=(--repo_env=PSCLUSTER_CUDA=0 --platform_suffix=cpuonly --symlink_prefix=/)
started=$SECONDS
if bazel build "${CPU_ONLY[@]}" --keep_going //compute/... //worker/... //evaluator/... //tests/...; then
  echo "run_all: CPU-only build (PSCLUSTER_CUDA=0) of //compute/... //worker/... //evaluator/... //tests/...: OK"
  cpu_logs="$(bazel info "${CPU_ONLY[@]}" bazel-testlogs 2>/dev/null)"
  [ -n "$cpu_logs" ] && rm -rf "$cpu_logs/compute" "$cpu_logs/tests"
  bazel test "${CPU_ONLY[@]}" --test_output=errors \
    //compute:backend_factory_test //compute:device_choice_test //tests:device_flag_test
  cpu_rc=$?
  COUNTED=0
  [ -n "$cpu_logs" ] && count_reports "$cpu_logs" compute tests
  if [ "$cpu_rc" -ne 0 ] && [ "$cpu_rc" -ne 3 ] || [ "$COUNTED" -eq 0 ]; then
    record fail "CPU-only tests" "bazel test exited $cpu_rc with $COUNTED test cases reported"
  fi
else
  record fail "CPU-only build" "bazel build ${CPU_ONLY[*]} //compute/... //worker/... //evaluator/... //tests/... failed"
fi
TIMES+=("$((SECONDS - started)) s  the CPU-only build and its tests")

# 1. Bazel: build everything, run every test target.
rm -rf "$ROOT/bazel-testlogs/" 2>/dev/null
started=$SECONDS
bazel_out="$(mktemp)"
bazel test //... --keep_going --test_output=errors \
  --test_env=PSCLUSTER_DATA_DIR="$PSCLUSTER_DATA_DIR" "$@" 2>&1 | tee "$bazel_out"
bazel_rc=${PIPESTATUS[0]}
TIMES+=("$((SECONDS - started)) s  bazel test //... (the build included)")
failed_before=$failed

# Count test cases in every report.
count_reports "$ROOT/bazel-testlogs/"

# Targets that did not build or run have no report: one failure each.
while read -r target status; do
  record fail "$target" "$status"
done < <(sed -nE 's#^(//[^ ]+) +(FAILED TO BUILD|NO STATUS).*#\1 \2#p' "$bazel_out")
if [ "$bazel_rc" -ne 0 ] && [ "$bazel_rc" -ne 3 ] && [ "$failed" -eq "$failed_before" ]; then
  record fail "bazel test //..." "exited $bazel_rc"
fi
rm -f "$bazel_out"

# 2. Shell tests, run directly: they count their own checks.
run_shell_tests

# Where the time went, longest first (the whole command should stay well
# under 40 minutes on a 2-core machine).
TIMES+=("$((SECONDS - ALL_STARTED)) s  in all")
printf '%s\n' "${TIMES[@]}" | sort -rn | sed 's/^/run_all: /'
[ ${#PROBLEMS[@]} -gt 0 ] && printf 'run_all: %s\n' "${PROBLEMS[@]}"
line="$passed passed, $failed failed"
[ "$skipped" -gt 0 ] && line+=", $skipped skipped"
echo "$line"
[ "$failed" -eq 0 ]
