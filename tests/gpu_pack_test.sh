#!/usr/bin/env bash
# Tests deploy/gpu/pack.sh --system_cublas and the library search of
# deploy/gpu/run.sh: packs what bazel-bin holds (--no_build: the CUDA build
# of //... that run_all.sh makes first) with --system_cublas --xz into a
# temporary folder, checks that cuBLAS is left out and cudart kept, that
# every packed ELF file is stripped, the MANIFEST's cuBLAS line and the
# archive's size (<= 20 MiB), then runs the unpacked archive's
# run.sh --check_only (finds libraries, runs no test) on a fake machine
# whose only cuBLAS is a folder of links to the real one
# (PSCLUSTER_CUBLAS_DIR, with PSCLUSTER_CUBLAS_SEARCH=none), on a machine
# with none, and with a packed library missing.
#
# Skips with "[gpu] " when this machine has no CUDA 13 cuBLAS at all; skips
# when bazel-bin holds no CUDA build, except with CI=true, where that fails.
#
# Usage: tests/gpu_pack_test.sh [IGNORED]   (run_all.sh passes the MNIST folder)
# Prints PASS:/FAIL:/SKIP: lines; exit status 0 when nothing failed.
set -uo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
pack="$repo/deploy/gpu/pack.sh"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/test_lib.sh"   # pass, fail, skip, finish

SONAME=libcublas.so.13
MAX_BYTES=$((20 * 1048576))

out="$("$pack" --max_mb=x --xz 2>&1)"; rc=$?
[ "$rc" -eq 2 ] && grep -qF -- '--max_mb=x' <<<"$out" &&
  pass "pack.sh: a malformed --max_mb exits 2 naming it" || fail "pack.sh --max_mb=x: exit $rc: $out"

# The machine's real cuBLAS, for the fake machine below.
real=""
for d in "${CUDA_HOME:-/usr/local/cuda}/lib64" /usr/local/cuda/lib64; do
  [ -e "$d/$SONAME" ] && { real="$d"; break; }
done
[ -n "$real" ] || real="$(dirname "$(ldconfig -p 2>/dev/null | awk -v s="$SONAME" '$1 == s { print $NF; exit }')")"
if [ -z "$real" ] || [ ! -e "$real/$SONAME" ]; then
  skip "[gpu] no CUDA 13 toolkit here ($SONAME in neither \$CUDA_HOME/lib64, /usr/local/cuda/lib64 nor ldconfig): no CUDA build to pack"
  finish
fi

# 1. Pack.
P="$tmp/out/pscluster-gpu"
out="$("$pack" --no_build --system_cublas --xz --out="$P" 2>&1)"; rc=$?
if [ "$rc" -ne 0 ] && grep -qE 'has no CUDA backend|is missing: build first' <<<"$out"; then
  why="bazel-bin holds no CUDA build to pack: $(grep -m1 -E 'has no CUDA backend|is missing' <<<"$out")"
  if [ "${CI:-}" = true ]; then fail "$why (CI=true, and CUDA is installed: build //... first)"; else skip "$why"; fi
  finish
fi
if [ "$rc" -ne 0 ] || [ ! -f "$P.tar.xz" ]; then
  fail "pack.sh --no_build --system_cublas --xz exits $rc, $P.tar.xz $( [ -f "$P.tar.xz" ] && echo written || echo 'not written'): $(tail -n 5 <<<"$out")"
  finish
fi
pass "pack.sh --no_build --system_cublas --xz writes $(basename "$P").tar.xz"

cublas="$(find "$P/lib" -name 'libcublas*' -printf '%f ')"
[ -z "$cublas" ] && pass "lib/ holds no cuBLAS" || fail "lib/ holds cuBLAS: $cublas"
ls "$P"/lib/libcudart.so.* >/dev/null 2>&1 && pass "lib/ holds cudart" || fail "lib/ holds no libcudart.so.*"
# Every reference file a packed test reads, at the path it reads it by.
absent=""
for t in $(cat "$P/tests.txt"); do
  for f in $(grep -ho '"tests/fixtures/[^"]*"' "$repo/$t.cc" 2>/dev/null | tr -d '"' | sort -u); do
    [ -f "$P/$f" ] || absent+=" $f ($t)"
  done
done
[ -z "$absent" ] && pass "the pack holds the reference files its tests read" ||
  fail "the pack lacks reference files:$absent"
# cuBLAS is opened when a GPU first needs it (compute/kernels/cublas_loader.h):
# no packed binary links it, so a start on a CPU does not load it.
linked="$(for f in "$P"/worker/worker "$P"/evaluator/evaluator; do
  readelf -d "$f" 2>/dev/null | grep -q 'NEEDED.*libcublas' && echo -n "${f#"$P"/} "; done)"
[ -z "$linked" ] && pass "the packed worker and evaluator do not link cuBLAS (they open $SONAME on a GPU)" ||
  fail "linked against cuBLAS: $linked"

elves=0; unstripped=()
while IFS= read -r -d '' f; do
  [ "$(head -c 4 "$f" | od -An -c | tr -d ' ')" = '177ELF' ] || continue
  elves=$((elves + 1))
  readelf -S --wide "$f" 2>/dev/null | grep -qE '\] \.(symtab|debug_)' && unstripped+=("${f#"$P"/}")
done < <(find "$P" -type f -print0)
if [ "$elves" -lt 20 ]; then
  fail "only $elves ELF files in the pack"
elif [ ${#unstripped[@]} -eq 0 ]; then
  pass "all $elves packed ELF files are stripped (no .symtab, no .debug_*)"
else
  fail "${#unstripped[@]} of $elves packed ELF files are not stripped: ${unstripped[*]:0:5}"
fi

bytes="$(stat -c %s "$P.tar.xz")"
[ "$bytes" -le "$MAX_BYTES" ] && pass "the .tar.xz is $bytes bytes (<= 20 MiB)" ||
  fail "the .tar.xz is $bytes bytes, over 20 MiB ($MAX_BYTES)"

grep -qxF "cuBLAS: the machine's own, by soname $SONAME" "$P/MANIFEST" &&
  pass "the MANIFEST says cuBLAS is the machine's own, by soname $SONAME" ||
  fail "no \"cuBLAS: the machine's own, by soname $SONAME\" line in the MANIFEST: $(cat "$P/MANIFEST")"

# 2. run.sh --check_only, on the unpacked archive.
mkdir -p "$tmp/machine"
if ! tar -C "$tmp/machine" -xJf "$P.tar.xz"; then
  fail "tar -xJf $P.tar.xz failed"
  finish
fi
R="$tmp/machine/pscluster-gpu/run.sh"
fake="$tmp/fake_cuda/lib64"
mkdir -p "$fake"
ln -s "$real/$SONAME" "$fake/$SONAME"
ln -s "$real/libcublasLt.so.13" "$fake/libcublasLt.so.13"

out="$(PSCLUSTER_CUBLAS_DIR="$fake" PSCLUSTER_CUBLAS_SEARCH=none "$R" --check_only 2>&1)"; rc=$?
if [ "$rc" -eq 0 ] && grep -qxF "run.sh: cuBLAS: $fake/$SONAME (the machine's own)" <<<"$out"; then
  pass "run.sh --check_only uses the fake machine's $SONAME and every binary finds its libraries"
else
  fail "run.sh --check_only with PSCLUSTER_CUBLAS_DIR=$fake: exit $rc: $(tail -n 5 <<<"$out")"
fi

out="$(PSCLUSTER_CUBLAS_SEARCH=none "$R" --check_only 2>&1)"; rc=$?
if [ "$rc" -eq 1 ] && grep -qF "this machine has no $SONAME" <<<"$out" &&
   grep -qF "install CUDA 13's cuBLAS" <<<"$out" && grep -qF "without --system_cublas" <<<"$out"; then
  pass "run.sh --check_only without any cuBLAS exits 1, naming $SONAME and the fixes"
else
  fail "run.sh --check_only with no cuBLAS: exit $rc (want 1): $(tail -n 3 <<<"$out")"
fi

# A packed library missing: run.sh names it (one of the build's own, which
# no system folder holds).
gone="$(find "$tmp/machine/pscluster-gpu/lib" -name 'lib*_S*.so' -printf '%f\n' | sort | head -1)"
rm -f "$tmp/machine/pscluster-gpu/lib/$gone"
out="$(PSCLUSTER_CUBLAS_DIR="$fake" PSCLUSTER_CUBLAS_SEARCH=none "$R" --check_only 2>&1)"; rc=$?
if [ -n "$gone" ] && [ "$rc" -eq 1 ] && grep -qF "run.sh: $gone not found" <<<"$out"; then
  pass "run.sh --check_only names a missing packed library ($gone) and exits 1"
else
  fail "run.sh --check_only without lib/$gone: exit $rc (want 1 and '$gone not found'): $(tail -n 3 <<<"$out")"
fi

# 3. The size limit: a .tar.gz over --max_mb=1 fails, naming its size.
out="$("$pack" --no_build --system_cublas --tar --max_mb=1 --out="$tmp/small/pscluster-gpu" 2>&1)"; rc=$?
if [ "$rc" -eq 1 ] && grep -qE 'pscluster-gpu\.tar\.gz is [0-9.]+ MiB \([0-9]+ bytes\), over the limit of 1\.0 MiB' <<<"$out"; then
  pass "pack.sh --max_mb=1 fails (exit 1) naming the size it wrote"
else
  fail "pack.sh --tar --max_mb=1: exit $rc (want 1 and the size): $(tail -n 3 <<<"$out")"
fi

finish
