#!/usr/bin/env bash
# Packs what a GPU machine without our build dependencies needs to run the
# GPU tests and the GPU benchmark: the daemons, the test binaries, the
# benchmark and its PyTorch peers, criteo_synth (the CTR data of the
# DeepFM-on-the-GPU check), and every shared library they link that is not part of glibc
# (gRPC, protobuf, abseil, spdlog, fmt, OpenBLAS, libstdc++, cudart,
# and the build's own per-target libraries of the test binaries), found with
# ldd, and cuBLAS, which the binaries open when a GPU first needs it. The
# NVIDIA driver (libcuda.so.1) is never packed: it must match the machine's
# kernel module and comes with it. Every packed binary and library
# is a stripped copy (strip --strip-unneeded; bazel-bin is left alone).
#
#   deploy/gpu/pack.sh [--out=DIR] [--system_cublas] [--with_data]
#                      [--tar | --xz] [--max_mb=N] [--no_build] [-- BAZEL_FLAGS...]
#
#   --out=DIR        the folder to fill (default dist/pscluster-gpu; emptied first)
#   --system_cublas  leave cuBLAS (libcublas, libcublasLt: 568 MiB) out: run.sh
#                    uses the GPU machine's own, found by soname (ldconfig,
#                    $CUDA_HOME/lib64, /usr/local/cuda*/lib64, a pip wheel);
#                    the MANIFEST says so. cudart is still packed.
#   --with_data      also copy MNIST ($PSCLUSTER_DATA_DIR, data/mnist or
#                    ../shared/data/mnist) into DIR/data/mnist
#   --tar            also write DIR.tar.gz
#   --xz             also write DIR.tar.xz (smaller, slower to write); with
#                    --tar too, only DIR.tar.xz
#   --max_mb=N       fail (exit 1) when the DIR.tar.gz/.tar.xz written is over
#                    N MiB; default 20 with --system_cublas (plus MNIST's size
#                    with --with_data), else no limit. Needs --tar or --xz.
#   --no_build       pack what bazel-bin holds (from an earlier build with CUDA)
#   BAZEL_FLAGS      passed to `bazel build`, e.g. --define=cuda_arch=90,100
#
# Sizes (CUDA 13.0): the whole pack is 643 MiB, cuBLAS 568 MiB of it.
# With --system_cublas: 75 MiB in the folder, 12.9 MiB as .tar.xz (but
# 24.9 MiB as .tar.gz, over the default limit: use --xz).
#
# On the GPU machine: copy the folder (or the tarball), then DIR/run.sh runs
# the tests and the benchmark there and ends with "N passed, N failed"
# (DIR/run.sh --check_only only finds the libraries, cuBLAS included).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"

OUT="$ROOT/dist/pscluster-gpu"
WITH_DATA=0
COMPRESS=""   # "", gz or xz
SYSTEM_CUBLAS=0
MAX_MB=""     # empty: the default for the options given
BUILD=1
BAZEL_FLAGS=()
bad_arg() { echo "pack.sh: $1 (see --help)" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --out=) bad_arg "--out= names no folder" ;;
    --out=*) OUT="$(realpath -m "${1#--out=}")" ;;
    --with_data) WITH_DATA=1 ;;
    --tar) [ "$COMPRESS" = xz ] || COMPRESS=gz ;;
    --xz) COMPRESS=xz ;;
    --system_cublas) SYSTEM_CUBLAS=1 ;;
    --max_mb=*)
      MAX_MB="${1#--max_mb=}"
      [[ "$MAX_MB" =~ ^[1-9][0-9]*$ ]] || bad_arg "$1: not a whole number of MiB above 0" ;;
    --no_build) BUILD=0 ;;
    --) shift; BAZEL_FLAGS=("$@"); break ;;
    -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
    *) bad_arg "unknown argument $1" ;;
  esac
  shift
done
if [ -n "$MAX_MB" ] && [ -z "$COMPRESS" ]; then
  bad_arg "--max_mb=$MAX_MB limits the compressed file: add --tar or --xz"
fi
# The default limit leaves room for the MNIST files of --with_data (already
# gzip'ed: 11 MiB that no compressor shrinks); an explicit one does not.
DEFAULT_MAX=0
if [ -z "$MAX_MB" ] && [ "$SYSTEM_CUBLAS" -eq 1 ]; then MAX_MB=20; DEFAULT_MAX=1; fi

# Paths under bazel-bin; the tests find the daemons by these relative paths.
DAEMONS=(chief/chief ps_server/ps_server worker/worker evaluator/evaluator)
TESTS=(
  compute/kernels/gpu_kernels_test
  compute/kernels/cublas_loader_test
  compute/kernels/emulated_kernels_test
  compute/fused_device_engine_test
  compute/backend_factory_test
  tests/gpu_backend_test
  tests/device_flag_test
  tests/gpu_cluster_test
)
# The benchmarks, and the CTR data writer the DeepFM-on-the-GPU check trains on.
BENCH=(tests/bench/gpu_throughput deploy/data/criteo_synth)

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
# cuBLAS is not linked: the binaries open it by soname when a GPU first
# needs it (compute/kernels/cublas_loader.h), so ldd does not list it. The
# soname is the toolkit's libcublas.so's.
cuda_libdir="$(sed -n 's/^CUDA_LIBDIR = "\(.*\)"/\1/p' "$defs")"
cublas_soname="$(readelf -d "$cuda_libdir/libcublas.so" 2>/dev/null | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')"
if [ -z "$cublas_soname" ]; then
  echo "pack.sh: no soname in $cuda_libdir/libcublas.so (the toolkit's cuBLAS, CUDA_LIBDIR of $defs)" >&2
  exit 1
fi

BIN="$ROOT/bazel-bin"
rm -rf "$OUT"
mkdir -p "$OUT/lib"
for p in "${DAEMONS[@]}" "${TESTS[@]}" "${BENCH[@]}"; do
  [ -x "$BIN/$p" ] || { echo "pack.sh: $BIN/$p is missing: build first" >&2; exit 1; }
  mkdir -p "$OUT/$(dirname "$p")"
  cp -L "$BIN/$p" "$OUT/$p"
done

# glibc's own libraries (and the kernel's vDSO) come from the machine; so
# does the NVIDIA driver, and with --system_cublas cuBLAS. Everything else
# ldd resolves is packed, under the name the binaries ask for (the soname,
# left of "=>").
SYSTEM='^(linux-vdso\.so|linux-gate\.so|ld-linux[-a-z0-9_]*\.so|libc\.so|libm\.so|libmvec\.so|libpthread\.so|libdl\.so|librt\.so|libutil\.so|libresolv\.so|libanl\.so|libnsl\.so|libBrokenLocale\.so|libcuda\.so|libnvidia-)'
CUBLAS='^libcublas(Lt)?\.so'
missing=0
# pack_libraries FILE: packs what ldd resolves for FILE.
pack_libraries() {
  local name arrow path
  while read -r name arrow path _; do
    [ "$arrow" = "=>" ] || continue
    if [ "$path" = "not" ]; then echo "pack.sh: $1: $name not found" >&2; missing=1; continue; fi
    [[ "$name" =~ $SYSTEM ]] && continue
    [ "$SYSTEM_CUBLAS" -eq 1 ] && [[ "$name" =~ $CUBLAS ]] && continue
    [ -e "$OUT/lib/$name" ] || cp -L "$path" "$OUT/lib/$name"
  done < <(ldd "$1")
}
for p in "${DAEMONS[@]}" "${TESTS[@]}" "${BENCH[@]}"; do
  pack_libraries "$BIN/$p"
done
if [ "$SYSTEM_CUBLAS" -eq 0 ]; then
  # Opened at run time: packed by hand, with what it links (libcublasLt).
  cp -L "$cuda_libdir/$cublas_soname" "$OUT/lib/$cublas_soname"
  pack_libraries "$cuda_libdir/$cublas_soname"
fi
[ "$missing" -eq 0 ] || exit 1

# Strip the copies: the symbol tables and debug info are most of the size
# of everything but cuBLAS. The dynamic symbols the loader needs stay.
for f in "$OUT"/lib/* "${DAEMONS[@]/#/$OUT/}" "${TESTS[@]/#/$OUT/}" "${BENCH[@]/#/$OUT/}"; do
  chmod u+w "$f"
  strip --strip-unneeded "$f" || { echo "pack.sh: strip --strip-unneeded $f failed" >&2; exit 1; }
done

# The newest glibc symbol version anything packed needs: run.sh checks it.
glibc_needed="$(for f in "$OUT"/lib/* "${DAEMONS[@]/#/$OUT/}" "${TESTS[@]/#/$OUT/}" "${BENCH[@]/#/$OUT/}"; do
  objdump -T "$f" 2>/dev/null | grep -o 'GLIBC_[0-9][0-9.]*' ; done | sed 's/GLIBC_//' | sort -Vu | tail -1)"

printf '%s\n' "${TESTS[@]}" > "$OUT/tests.txt"
cp "$ROOT/deploy/gpu/run.sh" "$OUT/run.sh"
# The benchmark's PyTorch peer (run with the GPU machine's own python3).
cp "$ROOT/tests/bench/torch_gpu.py" "$ROOT/tests/bench/torch_compute.py" \
  "$ROOT/tests/bench/ctr_torch.py" "$OUT/tests/bench/"
# The reference files the packed tests read, by the same relative paths.
for f in tests/fixtures/tfjs_reference/embedding.json tests/fixtures/masking/masking.json; do
  mkdir -p "$OUT/$(dirname "$f")"
  cp "$ROOT/$f" "$OUT/$f"
done
chmod +x "$OUT/run.sh"
{
  echo "pscluster GPU pack"
  echo "commit: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$ROOT" diff --quiet 2>/dev/null || echo ' (with uncommitted changes)')"
  echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -srm)"
  if [ "$SYSTEM_CUBLAS" -eq 1 ]; then
    echo "cuda: ${cuda_version} (runtime packed in lib/; the machine's NVIDIA driver must support it)"
    # run.sh reads the soname from this line.
    echo "cuBLAS: the machine's own, by soname ${cublas_soname}"
  else
    echo "cuda: ${cuda_version} (runtime and cuBLAS packed in lib/; the machine's NVIDIA driver must support it)"
  fi
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

archive=""
if [ -n "$COMPRESS" ]; then
  archive="$OUT.tar.$COMPRESS"
  rm -f "$OUT.tar.gz" "$OUT.tar.xz"
  if [ "$COMPRESS" = xz ]; then
    tar -C "$(dirname "$OUT")" -cf - "$(basename "$OUT")" | xz -9 -T0 > "$archive"
  else
    tar -C "$(dirname "$OUT")" -czf "$archive" "$(basename "$OUT")"
  fi
  echo "pack.sh: wrote $archive ($(awk -v b="$(stat -c %s "$archive")" 'BEGIN { printf "%.1f MiB", b / 1048576 }'))"
fi
echo "pack.sh: $OUT: $(ls "$OUT/lib" | wc -l) libraries, $(du -sh "$OUT" | cut -f1); needs glibc >= ${glibc_needed} and an NVIDIA driver for CUDA ${cuda_version}$([ "$SYSTEM_CUBLAS" -eq 1 ] && echo ", and the machine's ${cublas_soname}")"
if [ -n "$archive" ] && [ -n "$MAX_MB" ]; then
  bytes="$(stat -c %s "$archive")"
  limit=$((MAX_MB * 1048576))
  why="--max_mb=$MAX_MB"
  if [ "$DEFAULT_MAX" -eq 1 ]; then
    why="the default for --system_cublas"
    if [ "$WITH_DATA" -eq 1 ]; then
      limit=$((limit + $(du -sb "$OUT/data" | cut -f1)))
      why+=", plus MNIST's size"
    fi
  fi
  if [ "$bytes" -gt "$limit" ]; then
    mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }
    echo "pack.sh: $archive is $(mib "$bytes") ($bytes bytes), over the limit of $(mib "$limit")" \
         "($why)$([ "$COMPRESS" = gz ] && echo "; --xz writes a smaller .tar.xz")" >&2
    exit 1
  fi
fi
