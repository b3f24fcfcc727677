#!/usr/bin/env bash
# Runs the GPU tests and the GPU benchmark of a pack made by
# deploy/gpu/pack.sh, on the machine it was copied to: the packed shared
# libraries come first on LD_LIBRARY_PATH; only glibc, the NVIDIA driver
# and, for a pack made with --system_cublas, cuBLAS come from the machine.
# Writes every test's output and the benchmark's table under results/, and
# ends with "N passed, N failed[, N skipped]" (test cases); exit status 0
# only when nothing failed.
#
#   ./run.sh [--tests_only | --bench_only | --check_only] [gpu_throughput flags...]
#
#   --check_only  only find the libraries (glibc, the machine's cuBLAS, every
#                 packed binary's ldd) and say what was found; runs nothing.
#                 Exit status 1 when something is missing.
#
# cuBLAS, when the MANIFEST says "cuBLAS: the machine's own, by soname S":
# the first folder holding S among $PSCLUSTER_CUBLAS_DIR, `ldconfig -p`,
# $CUDA_HOME/lib64, /usr/local/cuda/lib64, /usr/local/cuda-<major>*/lib64,
# /usr/lib/<arch>-linux-gnu and the nvidia/cu<major>/lib or
# nvidia/cublas/lib of python3's site-packages (pip's nvidia-cublas, as
# PyTorch installs it) goes on LD_LIBRARY_PATH after the pack's lib/.
# PSCLUSTER_CUBLAS_SEARCH=none looks only in $PSCLUSTER_CUBLAS_DIR (for
# tests: a machine without cuBLAS).
#
# MNIST: $PSCLUSTER_DATA_DIR, else the pack's data/mnist (pack.sh
# --with_data); the tests that need it skip without it, saying so.
set -uo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$HERE"   # the tests start the daemons by paths relative to here

RUN_TESTS=1
RUN_BENCH=1
CHECK_ONLY=0
case "${1:-}" in
  --tests_only) RUN_BENCH=0; shift ;;
  --bench_only) RUN_TESTS=0; shift ;;
  --check_only)
    CHECK_ONLY=1; shift
    [ $# -eq 0 ] || { echo "run.sh: --check_only takes no other argument: $1" >&2; exit 2; } ;;
  -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
esac

# give_up MESSAGE...: the run cannot start on this machine.
give_up() {
  echo "run.sh: $*" >&2
  echo "0 passed, 1 failed"
  exit 1
}

# find_cublas SONAME: prints the path of the machine's SONAME, searched as
# the header says; prints nothing when there is none.
find_cublas() {
  local soname="$1" major="${1##*.so.}" d py
  local dirs=()
  [ -n "${PSCLUSTER_CUBLAS_DIR:-}" ] && dirs+=("$PSCLUSTER_CUBLAS_DIR")
  if [ "${PSCLUSTER_CUBLAS_SEARCH:-}" != none ]; then
    # ldconfig's cache: "\tlibcublas.so.13 (libc6,x86-64) => /path/libcublas.so.13"
    while read -r path; do dirs+=("$(dirname "$path")"); done < <(
      { ldconfig -p 2>/dev/null || /sbin/ldconfig -p 2>/dev/null; } |
        awk -v s="$soname" '$1 == s { print $NF }')
    [ -n "${CUDA_HOME:-}" ] && dirs+=("$CUDA_HOME/lib64")
    dirs+=(/usr/local/cuda/lib64 /usr/local/cuda-"$major"*/lib64 "/usr/lib/$(uname -m)-linux-gnu")
    py="$(python3 - "$major" 2>/dev/null <<'EOF'
import os, site, sys
tops = list(getattr(site, "getsitepackages", lambda: [])())
tops += [site.getusersitepackages()] + sys.path
for top in dict.fromkeys(t for t in tops if t):
    for sub in ("nvidia/cu%s/lib" % sys.argv[1], "nvidia/cublas/lib"):
        print(os.path.join(top, sub))
EOF
)"
    while read -r d; do [ -n "$d" ] && dirs+=("$d"); done <<<"$py"
  fi
  for d in "${dirs[@]}"; do
    if [ -e "$d/$soname" ]; then echo "$d/$soname"; return; fi
  done
}

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
  give_up "this machine's glibc $glibc is older than the $needed the binaries need;" \
          "use a newer distribution (Debian 12, Ubuntu 24.04) or a container of one"
fi

echo "== libraries"
cublas_soname="$(sed -n "s/^cuBLAS: the machine's own, by soname //p" MANIFEST)"
if [ -n "$cublas_soname" ]; then
  cublas="$(find_cublas "$cublas_soname")"
  if [ -z "$cublas" ]; then
    searched="ldconfig -p, \$CUDA_HOME/lib64, /usr/local/cuda*/lib64, /usr/lib/$(uname -m)-linux-gnu, python3's nvidia/*/lib"
    [ "${PSCLUSTER_CUBLAS_SEARCH:-}" = none ] && searched="nothing else: PSCLUSTER_CUBLAS_SEARCH=none"
    [ -n "${PSCLUSTER_CUBLAS_DIR:-}" ] && searched="$PSCLUSTER_CUBLAS_DIR, $searched"
    give_up "this pack has no cuBLAS (pack.sh --system_cublas) and this machine has no $cublas_soname" \
            "(searched $searched): install CUDA ${cublas_soname##*.so.}'s cuBLAS (the CUDA toolkit's" \
            "libcublas, e.g. apt's libcublas-${cublas_soname##*.so.}-0, or pip's nvidia-cublas wheel)," \
            "set PSCLUSTER_CUBLAS_DIR to the folder that holds it, or make the pack without --system_cublas"
  fi
  LD_LIBRARY_PATH="$HERE/lib:$(dirname "$cublas")${LD_LIBRARY_PATH#"$HERE/lib"}"
  echo "run.sh: cuBLAS: $cublas (the machine's own)"
fi
# Every packed binary must find every library it links, with the path as
# the tests will have it: ldd names each one it cannot find.
declare -A not_found=()
nbin=0
while IFS= read -r -d '' f; do
  [ "$(head -c 4 "$f" | od -An -c | tr -d ' ')" = '177ELF' ] || continue
  nbin=$((nbin + 1))
  while read -r name; do
    not_found[$name]+=" ${f#./}"
  done < <(ldd "$f" 2>/dev/null | awk '$2 == "=>" && $3 == "not" { print $1 }')
done < <(find . -path ./lib -prune -o -path ./results -prune -o -type f -perm -u+x -print0)
# cuBLAS is opened when a GPU first needs it (not in the binaries' ldd): the
# one the binaries will open, packed or the machine's, must find its own.
cublas_file="${cublas:-$(ls lib/libcublas.so.* 2>/dev/null | head -1)}"
if [ -n "$cublas_file" ]; then
  while read -r name; do
    not_found[$name]+=" ${cublas_file#./}"
  done < <(ldd "$cublas_file" 2>/dev/null | awk '$2 == "=>" && $3 == "not" { print $1 }')
fi
if [ "${#not_found[@]}" -gt 0 ]; then
  for name in "${!not_found[@]}"; do
    echo "run.sh: $name not found (needed by${not_found[$name]})" >&2
  done
  give_up "${#not_found[@]} librar$([ "${#not_found[@]}" -eq 1 ] && echo y || echo ies) not found" \
          "(LD_LIBRARY_PATH=$LD_LIBRARY_PATH)"
fi
echo "run.sh: all $nbin packed binaries find their libraries"
if [ "$CHECK_ONLY" -eq 1 ]; then
  echo "run.sh: --check_only: nothing run"
  exit 0
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
