#!/usr/bin/env bash
# Packs what a GPU machine without our build dependencies needs to run the
# GPU tests and the GPU benchmark: the daemons, the test binaries and the
# benchmark, and every shared library they link that is not part of glibc
# (gRPC, protobuf, abseil, spdlog, fmt, OpenBLAS, libstdc++, cudart, cuBLAS,
# and the build's own per-target libraries of the test binaries), found with
# ldd. The NVIDIA driver (libcuda.so.1) is never packed: it must match the
# machine's kernel module and comes with it.
#
#   deploy/gpu/pack.sh [--out=DIR] [--with_data] [--tar] [--no_build] [-- BAZEL_FLAGS...]
#
#   --out=DIR    the folder to fill (default dist/pscluster-gpu; emptied first)
#   --with_data  also copy MNIST ($PSCLUSTER_DATA_DIR, data/mnist or
#                ../shared/data/mnist) into DIR/data/mnist
#   --tar        also write DIR.tar.gz
#   --no_build   pack what bazel-bin holds (from an earlier build with CUDA)
#   BAZEL_FLAGS  passed to `bazel build`, e.g. --define=cuda_arch=90,100
#
# On the GPU machine: copy the folder (or the tarball), then DIR/run.sh runs
# the tests and the benchmark there and ends with "N passed, N failed".
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"

OUT="$ROOT/dist/pscluster-gpu"
WITH_DATA=0
TAR=0
BUILD=1
BAZEL_FLAGS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --out=*) OUT="$(realpath -m "${1#--out=}")" ;;
    --with_data) WITH_DATA=1 ;;
    --tar) TAR=1 ;;
    --no_build) BUILD=0 ;;
    --) shift; BAZEL_FLAGS=("$@"); break ;;
    -h|--help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "pack.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done

# Paths under bazel-bin; the tests find the daemons by these relative paths.
DAEMONS=(chief/chief ps_server/ps_server worker/worker evaluator/evaluator)
TESTS=(
  compute/kernels/gpu_kernels_test
  compute/kernels/emulated_kernels_test
  compute/fast_device_graph_test
  compute/backend_factory_test
  tests/gpu_backend_test
  tests/device_flag_test
  tests/gpu_cluster_test
)
BENCH=(tests/bench/gpu_throughput)

label() { echo "//${1%/*}:${1##*/}"; }

if [ "$BUILD" -eq 1 ]; then
  targets=()
  for p in "${DAEMONS[@]}" "${TESTS[@]}" "${BENCH[@]}"; do targets+=("$(label "$p")"); done
  bazel build "${BAZEL_FLAGS[@]}" "${targets[@]}"
fi

defs="$(bazel info output_base 2>/dev/null)/external/local_cuda/defs.bzl"
if ! grep -q '^CUDA_ENABLED = True' "$defs" 2>/dev/null; then
  echo "pack.sh: this build has no CUDA backend ($(grep -s '^CUDA_DISABLED_REASON' "$defs" || echo "no $defs")): nothing to pack for a GPU" >&2
  exit 1
fi
cuda_version="$(sed -n 's/^CUDA_VERSION = "\(.*\)"/\1/p' "$defs")"

BIN="$ROOT/bazel-bin"
rm -rf "$OUT"
mkdir -p "$OUT/lib"
for p in "${DAEMONS[@]}" "${TESTS[@]}" "${BENCH[@]}"; do
  [ -x "$BIN/$p" ] || { echo "pack.sh: $BIN/$p is missing: build first" >&2; exit 1; }
  mkdir -p "$OUT/$(dirname "$p")"
  cp -L "$BIN/$p" "$OUT/$p"
done

# glibc's own libraries (and the kernel's vDSO) come from the machine; so
# does the NVIDIA driver. Everything else ldd resolves is packed, under the
# name the binaries ask for (the soname, left of "=>").
SYSTEM='^(linux-vdso\.so|linux-gate\.so|ld-linux[-a-z0-9_]*\.so|libc\.so|libm\.so|libmvec\.so|libpthread\.so|libdl\.so|librt\.so|libutil\.so|libresolv\.so|libanl\.so|libnsl\.so|libBrokenLocale\.so|libcuda\.so|libnvidia-)'
missing=0
for p in "${DAEMONS[@]}" "${TESTS[@]}" "${BENCH[@]}"; do
  while read -r name arrow path _; do
    [ "$arrow" = "=>" ] || continue
    if [ "$path" = "not" ]; then echo "pack.sh: $p: $name not found" >&2; missing=1; continue; fi
    [[ "$name" =~ $SYSTEM ]] && continue
    [ -e "$OUT/lib/$name" ] || cp -L "$path" "$OUT/lib/$name"
  done < <(ldd "$BIN/$p")
done
[ "$missing" -eq 0 ] || exit 1

# The newest glibc symbol version anything packed needs: run.sh checks it.
glibc_needed="$(for f in "$OUT"/lib/* "${DAEMONS[@]/#/$OUT/}" "${TESTS[@]/#/$OUT/}" "${BENCH[@]/#/$OUT/}"; do
  objdump -T "$f" 2>/dev/null | grep -o 'GLIBC_[0-9][0-9.]*' ; done | sed 's/GLIBC_//' | sort -Vu | tail -1)"

printf '%s\n' "${TESTS[@]}" > "$OUT/tests.txt"
cp "$ROOT/deploy/gpu/run.sh" "$OUT/run.sh"
chmod +x "$OUT/run.sh"
{
  echo "pscluster GPU pack"
  echo "commit: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$ROOT" diff --quiet 2>/dev/null || echo ' (with uncommitted changes)')"
  echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -srm)"
  echo "cuda: ${cuda_version} (runtime and cuBLAS packed in lib/; the machine's NVIDIA driver must support it)"
  echo "bazel flags: ${BAZEL_FLAGS[*]:-(none)}"
  echo "glibc_needed: ${glibc_needed}"
} > "$OUT/MANIFEST"

if [ "$WITH_DATA" -eq 1 ]; then
  data=""
  for d in "${PSCLUSTER_DATA_DIR:-}" "$ROOT/data/mnist" "$ROOT/../shared/data/mnist"; do
    if [ -n "$d" ] && [ -f "$d/train-images-idx3-ubyte.gz" ]; then data="$d"; break; fi
  done
  [ -n "$data" ] || { echo "pack.sh: --with_data: no MNIST found (set PSCLUSTER_DATA_DIR)" >&2; exit 1; }
  mkdir -p "$OUT/data/mnist"
  cp -L "$data"/*-ubyte.gz "$OUT/data/mnist/"
fi

if [ "$TAR" -eq 1 ]; then
  tar -C "$(dirname "$OUT")" -czf "$OUT.tar.gz" "$(basename "$OUT")"
  echo "pack.sh: wrote $OUT.tar.gz"
fi
echo "pack.sh: $OUT: $(ls "$OUT/lib" | wc -l) libraries, $(du -sh "$OUT" | cut -f1); needs glibc >= ${glibc_needed} and an NVIDIA driver for CUDA ${cuda_version}"
