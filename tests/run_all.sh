#!/usr/bin/env bash
# Installs what is missing, builds everything, runs every test, and prints
#   N passed, N failed[, N skipped]
# as its last line (test cases, counted from the gtest XML reports plus the
# shell tests' own checks). Exit status 0 only when nothing failed.
#
#   tests/run_all.sh [--quick] [--jobs=N] [extra bazel test flags]
#     --quick   the edit loop's tier: the unit and in-process tests and the
#               quick shell checks; no cluster of daemons, Docker, fuzzing
#               or kills (docs/testing.md)
#     --jobs=N  tests run side by side (default 2, or $PSCLUSTER_TEST_JOBS)
# MNIST for the tests: $PSCLUSTER_DATA_DIR, else data/mnist, else
# ../shared/data/mnist; tests that need it skip and say why without it.
# With CI=true a skip counts as a failure unless its reason starts with
# "[gpu] " (it depends on the GPUs this machine has or lacks).
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT" || exit 1

QUICK=0
JOBS="${PSCLUSTER_TEST_JOBS:-2}"
BAZEL_TEST_FLAGS=()
for arg in "$@"; do
  case "$arg" in
    -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    --quick) QUICK=1 ;;
    --jobs=*) JOBS="${arg#--jobs=}" ;;
    *) BAZEL_TEST_FLAGS+=("$arg") ;;
  esac
done
if ! [[ "$JOBS" =~ ^[1-9][0-9]?$ ]]; then
  echo "run_all: --jobs=$JOBS (or PSCLUSTER_TEST_JOBS): expected a whole number from 1 to 99" >&2
  exit 2
fi

# The shell tests of the quick tier: checks of files and tools that start
# no cluster, no container and no namespace, each a few seconds.
QUICK_SHELL_TESTS=(layering_test run_all_test install_deps_test deploy_docker_test deploy_compose_test
                   deploy_k8s_test download_mnist_test criteo_synth_test)
# The shell tests that take longest start first, so that the short ones
# fill the slots beside them; the rest follow in name order.
SLOW_SHELL_TESTS=(docker_run_test fuzz_test ps_replicas_test netns_cluster_test readme_test train_sh_test
                  sparse_embeddings_test criteo_train_test ctr_models_test gpu_pack_test netlab_test)

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
SKIPS=()     # one line per skip, printed before the totals
FAILURES=()  # one line per failure, printed after the skips, last before the totals
TIMES=()  # "N s  what" per phase and test job, printed before the totals
ALL_STARTED=$SECONDS
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

# record pass|fail|skip WHAT [REASON]: counts one test case.
record() {
  case "$1" in
    pass) passed=$((passed + 1)) ;;
    fail) failed=$((failed + 1)); FAILURES+=("FAILED  $2: $3") ;;
    skip)
      if [ "$ON_CI" = 1 ] && [[ "$3" != "$GPU_SKIP_MARKER"* ]]; then
        failed=$((failed + 1)); FAILURES+=("FAILED  $2: skipped on CI, not for the GPU: $3")
      else
        skipped=$((skipped + 1)); SKIPS+=("skipped $2: $3")
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

# count_bazel_test OUTPUT RC: counts the reports of a `bazel test` whose
# output is in the file OUTPUT and whose exit status was RC; a target that
# did not build or run has no report and counts as one failure.
count_bazel_test() {
  local out="$1" rc="$2" failed_before=$failed target status
  count_reports "$ROOT/bazel-testlogs/"
  while read -r target status; do
    record fail "$target" "$status"
  done < <(sed -nE 's#^(//[^ ]+) +(FAILED TO BUILD|NO STATUS).*#\1 \2#p' "$out")
  if [ "$rc" -ne 0 ] && [ "$rc" -ne 3 ] && [ "$failed" -eq "$failed_before" ]; then
    record fail "bazel test //..." "exited $rc"
  fi
}

# count_shell_test NAME OUTPUT RC: records the PASS:/FAIL:/SKIP: lines a
# shell test printed. One that exits non-zero without a FAIL line, or that
# prints no result at all, is a failure.
count_shell_test() {
  local name="$1" out="$2" rc="$3" line p=0 f=0 s=0
  while IFS= read -r line; do
    case "$line" in
      "PASS: "*) record pass "$name"; p=$((p + 1)) ;;
      "FAIL: "*) record fail "$name" "${line#FAIL: }"; f=$((f + 1)) ;;
      "SKIP: "*) record skip "$name" "${line#SKIP: }"; s=$((s + 1)) ;;
    esac
  done <"$out"
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
    record fail "$name" "exited $rc without a FAIL: line"
  elif [ $((p + f + s)) -eq 0 ]; then
    record fail "$name" "printed no PASS:, FAIL: or SKIP: line"
  fi
}

# The jobs of the test phase, run side by side, JOBS at a time, in the order
# queued. A job's output goes to a file of its own, printed whole when it
# ends, then counted by its kind: "bazel" (the reports) or "shell".
JOB_NAMES=()
JOB_KINDS=()
JOB_CMDS=()
queue_job() {  # queue_job NAME KIND COMMAND...
  JOB_NAMES+=("$1"); JOB_KINDS+=("$2"); shift 2
  JOB_CMDS+=("$(printf '%q ' "$@")")
}
run_jobs() {
  local -A running=() started=()
  local next=0 pid i rc
  while [ "$next" -lt ${#JOB_NAMES[@]} ] || [ ${#running[@]} -gt 0 ]; do
    while [ ${#running[@]} -lt "$JOBS" ] && [ "$next" -lt ${#JOB_NAMES[@]} ]; do
      i=$next; next=$((next + 1))
      echo "run_all: started ${JOB_NAMES[$i]}"
      eval "${JOB_CMDS[$i]}" >"$WORK/job.$i.out" 2>&1 </dev/null &
      running[$!]=$i; started[$i]=$SECONDS
    done
    pid=""
    wait -n -p pid; rc=$?
    [ -n "$pid" ] && [ -n "${running[$pid]:-}" ] || continue
    i=${running[$pid]}; unset "running[$pid]"
    echo "run_all: ---- ${JOB_NAMES[$i]} (exit $rc, $((SECONDS - started[$i])) s) ----"
    cat "$WORK/job.$i.out"
    TIMES+=("$((SECONDS - started[$i])) s  ${JOB_NAMES[$i]}")
    case "${JOB_KINDS[$i]}" in
      bazel) count_bazel_test "$WORK/job.$i.out" "$rc" ;;
      shell) count_shell_test "${JOB_NAMES[$i]}" "$WORK/job.$i.out" "$rc" ;;
    esac
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

# 1. The CPU-only configuration, as a machine without nvcc builds it
#    (PSCLUSTER_CUDA=0, see third_party/cuda/cuda_configure.bzl): build the
#    worker, the evaluator, the tests and the CPU image's binaries, and run
#    the tests whose expectations change without CUDA. It shares the output
#    tree of step 2: the only action that differs is the compilation of
#    compute/backend_factory.cc (PSCLUSTER_WITH_CUDA), plus the links above
#    it, so step 2 compiles everything else once for both. The build is not
#    a test case: a failed one counts as one failure, a good one nothing.
#    The CPU image's binaries are kept for tests/docker_run_test.sh.
CPU_ONLY=(--repo_env=PSCLUSTER_CUDA=0)
if [ "$QUICK" = 0 ]; then
  started=$SECONDS
  if bazel build "${CPU_ONLY[@]}" --keep_going //compute/... //worker/... //evaluator/... //tests/...; then
    echo "run_all: CPU-only build (PSCLUSTER_CUDA=0) of //compute/... //worker/... //evaluator/... //tests/...: OK"
    rm -rf "$ROOT/bazel-testlogs/compute" "$ROOT/bazel-testlogs/tests"
    bazel test "${CPU_ONLY[@]}" --test_output=errors \
      //compute:backend_factory_test //compute:device_choice_test //tests:device_flag_test
    cpu_rc=$?
    COUNTED=0
    count_reports "$ROOT/bazel-testlogs" compute tests
    if [ "$cpu_rc" -ne 0 ] && [ "$cpu_rc" -ne 3 ] || [ "$COUNTED" -eq 0 ]; then
      record fail "CPU-only tests" "bazel test exited $cpu_rc with $COUNTED test cases reported"
    fi
    # The image's five binaries, as its build stage makes them (it builds
    # the chief and the ps, which the tests' closure lacks).
    if deploy/docker/build_binaries.sh "$WORK/image-cpu" cpu >"$WORK/image-cpu.log" 2>&1; then
      export PSCLUSTER_DOCKER_PREBUILT="$WORK/image-cpu"
    else
      record fail "CPU-only image binaries" "deploy/docker/build_binaries.sh $WORK/image-cpu cpu: $(tail -3 "$WORK/image-cpu.log" | tr '\n' ' ')"
    fi
  else
    record fail "CPU-only build" "bazel build ${CPU_ONLY[*]} //compute/... //worker/... //evaluator/... //tests/... failed"
  fi
  TIMES+=("$((SECONDS - started)) s  the CPU-only build and its tests")
fi

# 2. The build of everything (CUDA where nvcc is found). A target that does
#    not build is reported by step 3's `bazel test` as FAILED TO BUILD.
rm -rf "$ROOT/bazel-testlogs/" 2>/dev/null
started=$SECONDS
bazel build //... --keep_going
TIMES+=("$((SECONDS - started)) s  bazel build //...")

# 3. The tests, side by side: every Bazel test target (itself running
#    several at once), and each tests/*_test.sh, which counts its own checks.
#    Tests reserve the ports they hand out (tests/local_cluster.cc,
#    deploy/local/train.sh) and name their namespaces, bridges and folders
#    uniquely, so none depends on running alone.
BAZEL_TEST=(bazel test //... --keep_going --test_output=errors --local_test_jobs=2
            --test_env=PSCLUSTER_DATA_DIR="$PSCLUSTER_DATA_DIR")
[ "$QUICK" = 1 ] && BAZEL_TEST+=(--test_tag_filters=-cluster)
queue_job "bazel test //...$([ "$QUICK" = 1 ] && echo ' (no cluster tests)')" bazel \
  "${BAZEL_TEST[@]}" "${BAZEL_TEST_FLAGS[@]}"
declare -A queued=()
shell_tests=()
if [ "$QUICK" = 1 ]; then
  shell_tests=("${QUICK_SHELL_TESTS[@]}")
else
  shell_tests=("${SLOW_SHELL_TESTS[@]}")
  for t in "$ROOT"/tests/*_test.sh; do shell_tests+=("$(basename "$t" .sh)"); done
fi
for t in "${shell_tests[@]}"; do
  path="$ROOT/tests/$t.sh"
  name="tests/$t.sh"
  [ -e "$path" ] && [ -z "${queued[$t]:-}" ] || continue
  queued[$t]=1
  if [ ! -x "$path" ]; then
    record fail "$name" "not executable (chmod +x; in git: git update-index --chmod=+x $name)"
    continue
  fi
  queue_job "$name" shell "$path" "$PSCLUSTER_DATA_DIR"
done
started=$SECONDS
run_jobs
TIMES+=("$((SECONDS - started)) s  the tests, $JOBS at a time")

# Where the time went, longest first (the whole command should stay within
# 20 minutes cold on a 2-core machine, --quick within 5 warm).
TIMES+=("$((SECONDS - ALL_STARTED)) s  in all")
printf '%s\n' "${TIMES[@]}" | sort -rn | sed 's/^/run_all: /'
# The failures last, so that the end of a long log (all a CI page may show)
# names every one of them.
[ ${#SKIPS[@]} -gt 0 ] && printf 'run_all: %s\n' "${SKIPS[@]}"
[ ${#FAILURES[@]} -gt 0 ] && printf 'run_all: %s\n' "${FAILURES[@]}"
line="$passed passed, $failed failed"
[ "$skipped" -gt 0 ] && line+=", $skipped skipped"
echo "$line"
[ "$failed" -eq 0 ]
