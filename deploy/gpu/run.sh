#!/usr/bin/env bash
# Runs the GPU tests and the GPU benchmark of a pack made by
# deploy/gpu/pack.sh, on the machine it was copied to: the packed shared
# libraries come first on LD_LIBRARY_PATH; only glibc and the NVIDIA driver
# come from the machine. Writes every test's output and the benchmark's
# table under results/, and ends with "N passed, N failed[, N skipped]"
# (test cases); exit status 0 only when nothing failed.
#
#   ./run.sh [--tests_only | --bench_only] [gpu_throughput flags...]
#
# MNIST: $PSCLUSTER_DATA_DIR, else the pack's data/mnist (pack.sh
# --with_data); the tests that need it skip without it, saying so.
set -uo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$HERE"   # the tests start the daemons by paths relative to here

RUN_TESTS=1
RUN_BENCH=1
case "${1:-}" in
  --tests_only) RUN_BENCH=0; shift ;;
  --bench_only) RUN_TESTS=0; shift ;;
  -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
esac

export LD_LIBRARY_PATH="$HERE/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
unset OPENBLAS_CORETYPE
if [ -z "${PSCLUSTER_DATA_DIR:-}" ] && [ -f "$HERE/data/mnist/train-images-idx3-ubyte.gz" ]; then
  export PSCLUSTER_DATA_DIR="$HERE/data/mnist"
fi
export PSCLUSTER_DATA_DIR="${PSCLUSTER_DATA_DIR:-}"
mkdir -p results

echo "== pack"
cat MANIFEST
echo "== machine"
uname -srm
glibc="$(ldd --version 2>/dev/null | head -1 | grep -o '[0-9]\+\.[0-9]\+$')"
needed="$(sed -n 's/^glibc_needed: //p' MANIFEST)"
echo "glibc ${glibc:-unknown} (the pack needs ${needed:-?})"
if [ -n "$glibc" ] && [ -n "$needed" ] && \
   [ "$(printf '%s\n%s\n' "$needed" "$glibc" | sort -V | head -1)" != "$needed" ]; then
  echo "run.sh: this machine's glibc $glibc is older than the $needed the binaries need;" \
       "use a newer distribution (Debian 12, Ubuntu 24.04) or a container of one" >&2
  echo "0 passed, 1 failed"
  exit 1
fi
gpus=0
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv 2>&1
  gpus="$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)"
else
  echo "nvidia-smi not found: is the NVIDIA driver installed? (the GPU cases will skip)"
fi
[ -n "$PSCLUSTER_DATA_DIR" ] || echo "no MNIST: set PSCLUSTER_DATA_DIR (the training tests and the benchmark will skip)"

passed=0
failed=0
skipped=0
if [ "$RUN_TESTS" -eq 1 ]; then
  echo "== tests"
  while read -r t; do
    [ -n "$t" ] || continue
    name="$(basename "$t")"
    xml="$HERE/results/$name.xml"
    rm -f "$xml"
    "./$t" --gtest_output="xml:$xml" > "results/$name.log" 2>&1
    rc=$?
    if [ -f "$xml" ]; then
      read -r p f s < <(awk '
        /<testcase / { open = 1; bad = 0; skip = ($0 ~ /result="skipped"/);
                       if ($0 ~ /\/>[[:space:]]*$/) { closecase() } }
        open && /<failure|<error/ { bad = 1 }
        open && /<skipped/ { skip = 1 }
        open && /<\/testcase>/ { closecase() }
        function closecase() { if (bad) f++; else if (skip) s++; else p++; open = 0 }
        END { print p + 0, f + 0, s + 0 }' "$xml")
    else
      p=0; f=1; s=0  # crashed before writing a report
    fi
    [ "$rc" -ne 0 ] && [ "$f" -eq 0 ] && f=1
    passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
    printf '%-24s %3d passed %3d failed %3d skipped  (exit %d, log results/%s.log)\n' \
      "$name" "$p" "$f" "$s" "$rc" "$name"
    if [ "$f" -gt 0 ]; then grep -E '^\[  FAILED  \]|Failure|error' "results/$name.log" | head -20; fi
    if [ "$s" -gt 0 ]; then grep -m1 -iE 'CUDA device|no MNIST|built without' "results/$name.log"; fi
  done < tests.txt
  # A GPU the driver shows but CUDA cannot use (a driver older than the
  # packed CUDA runtime, say) must not pass as "skipped".
  if [ "$gpus" -gt 0 ] && grep -lqE 'no usable CUDA device|no CUDA device' results/*.log 2>/dev/null; then
    echo "run.sh: FAIL: nvidia-smi lists $gpus GPU(s) but the CUDA cases skipped:" >&2
    grep -hm1 -E 'no usable CUDA device|no CUDA device' results/*.log | head -1 >&2
    failed=$((failed + 1))
  fi
fi

if [ "$RUN_BENCH" -eq 1 ]; then
  echo "== benchmark"
  ./tests/bench/gpu_throughput "$@" 2>&1 | tee results/gpu_throughput.txt
  rc=${PIPESTATUS[0]}
  if [ "$rc" -ne 0 ]; then
    echo "run.sh: the benchmark failed (exit $rc)" >&2
    failed=$((failed + 1))
  fi
fi

line="$passed passed, $failed failed"
[ "$skipped" -gt 0 ] && line+=", $skipped skipped"
echo "$line"
[ "$failed" -eq 0 ]
