#!/usr/bin/env bash
# Every check that needs a real GPU, in one run with a time budget: what a
# session lent a GPU machine for a few minutes runs there (docs/gpu.md,
# "Checking a build on a GPU machine"). In order, each part with its own
# limit and skipped when the budget has too little left:
#
#   tests      the pack's run.sh --tests_only (every GPU test)
#   cnn, vgg   gpu_throughput for the CNN and vgg_fashion at batch 128,
#              1024 and 8192 beside PyTorch eager, torch.compile and a
#              CUDA graph on the same card, and inside a 1-ps/1-worker
#              cluster
#   main       the main job (deploy/local/train.sh), sync and async
#   deepfm     DeepFM (deploy/models/ctr_deepfm.json) through 2 ps x 2
#              workers on the GPU and on the CPU, and the same model in
#              PyTorch on the card (tests/bench/ctr_torch.py --device=cuda)
#   sanitizer  compute-sanitizer memcheck of the GPU Embedding test
#
#   tests/bench/gpu_session.sh PACK.tar.xz OUT_DIR [--budget_s=540]
#
# PACK.tar.xz: deploy/gpu/pack.sh --system_cublas --xz --with_data. The
# launcher and the model files come from this repository's deploy/, copied
# into a scratch folder beside the unpacked pack, which is linked there as
# bazel-bin; the copy's package check is skipped (such a machine has no apt
# registry; the pack carries the libraries). The repository is left as it
# is. Writes
# OUT_DIR/session.log (what is printed) and OUT_DIR/logs.tar.xz (every
# part's whole log); exit status 0 when every part that ran passed.
set -uo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
usage() { sed -n '2,28p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
[ "${1:-}" = --help ] || [ "${1:-}" = -h ] && { usage; exit 0; }
[ $# -ge 2 ] || { echo "gpu_session: want PACK.tar.xz OUT_DIR (see --help)" >&2; exit 2; }
pack_tar="$(realpath "$1")"
out="$(realpath -m "$2")"
budget=540
for arg in "${@:3}"; do
  case "$arg" in
    --budget_s=*) budget="${arg#*=}" ;;
    *) echo "gpu_session: unknown argument '$arg' (see --help)" >&2; exit 2 ;;
  esac
done
[[ "$budget" =~ ^[1-9][0-9]*$ ]] || { echo "gpu_session: --budget_s=$budget: a whole number of seconds" >&2; exit 2; }
[ -f "$pack_tar" ] || { echo "gpu_session: $1: no such file" >&2; exit 2; }
mkdir -p "$out/logs"
exec > >(tee "$out/session.log") 2>&1

start=$SECONDS
failed=()
left() { echo $((budget - (SECONDS - start))); }
# part NAME LIMIT_S COMMAND: the shell command COMMAND with at most LIMIT_S
# seconds (less when the budget has less left; timeout ends its whole
# process group), its output in logs/NAME.log. Skipped when under 20 s are
# left.
part() {
  local name="$1" limit="$2" l rc t0=$SECONDS
  shift 2
  l="$(left)"
  if [ "$l" -lt 20 ]; then
    echo "== $name: SKIPPED (${l} s of the budget left)"
    failed+=("$name (not run)")
    return 1
  fi
  [ "$limit" -gt "$l" ] && limit="$l"
  echo "== $name (at $((SECONDS - start)) s, limit $limit s): $*"
  timeout -k 5 "$limit" bash -c "$1" >"$out/logs/$name.log" 2>&1
  rc=$?
  echo "== $name: exit $rc after $((SECONDS - t0)) s$([ "$rc" -eq 124 ] && echo ' (TIMED OUT)')"
  [ "$rc" -eq 0 ] || failed+=("$name (exit $rc)")
  return "$rc"
}

# 1. The pack, as bazel-bin.
work=/tmp/pscluster-gpu-session
rm -rf "$work" && mkdir -p "$work"
tar -xJf "$pack_tar" -C "$work" || { echo "gpu_session: cannot unpack $pack_tar"; exit 1; }
P="$(dirname "$(find "$work" -maxdepth 2 -name MANIFEST | head -1)")"
[ -f "$P/MANIFEST" ] || { echo "gpu_session: $pack_tar holds no MANIFEST"; exit 1; }
# The launcher runs from a copy of deploy/ whose bazel-bin is the pack and
# whose package check passes: the pack carries the libraries, and such a
# machine has no registry to install from.
mkdir -p "$work/repo/tests/bench"
cp -r "$repo/deploy" "$work/repo/"
cp "$repo/tests/bench/ctr_torch.py" "$work/repo/tests/bench/"
ln -s "$P" "$work/repo/bazel-bin"
printf '#!/bin/sh\nexit 0\n' >"$work/repo/deploy/install_deps.sh"
repo="$work/repo"
echo "== pack: $(sed -n 's/^commit: //p' "$P/MANIFEST"), built $(sed -n 's/^built: //p' "$P/MANIFEST")"
date -u
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
echo "cores: $(nproc), python3: $(python3 -c 'import torch; print("torch", torch.__version__)' 2>&1)"
"$P/run.sh" --check_only >"$out/logs/check.log" 2>&1 || { tail -n 5 "$out/logs/check.log"; exit 1; }
cublas="$(sed -n 's/^run.sh: cuBLAS: \([^ ]*\).*/\1/p' "$out/logs/check.log")"
grep -m1 'cuBLAS:' "$out/logs/check.log"
export LD_LIBRARY_PATH="$P/lib${cublas:+:$(dirname "$cublas")}"
export PSCLUSTER_DATA_DIR="$P/data/mnist"
export P repo
unset OPENBLAS_CORETYPE

# 2. The CTR data.
ctr="$work/ctr"
mkdir -p "$ctr"
"$P/deploy/data/criteo_synth" --out="$ctr/data" --buckets=100000 --rows=600000 \
  --ids_per_feature=100 --seed=7 >"$out/logs/criteo_synth.log" 2>&1 ||
  echo "gpu_session: criteo_synth failed: $(tail -n 2 "$out/logs/criteo_synth.log")"
# ctr_models_test's DeepFM: the tables resized to the data's 100,000 buckets.
python3 - "$repo/deploy/models/ctr_deepfm.json" "$ctr/deepfm.json" <<'EOF'
import json, sys
m = json.load(open(sys.argv[1]))
tables = [l for l in m["config"]["layers"] if l["class_name"] == "Embedding"]
base = min(l["config"]["input_dim"] for l in tables)
for l in tables:
    l["config"]["input_dim"] += 100000 - base
json.dump(m, open(sys.argv[2], "w"))
EOF
ctr_flags=(--no_build --no_evaluator --num_ps=2 --num_workers=2 --mode=sync --epochs=1
  --batch_size=256 --optimizer=adam --learning_rate=0.001 --model="$ctr/deepfm.json"
  --data="$ctr/data")

# 3. The tests.
part tests 200 'cd "$P" && ./run.sh --tests_only'
grep -E 'passed .* failed|FAILED|Failure|skipped' "$out/logs/tests.log" | head -40
cp -r "$P/results" "$out/logs/test_results" 2>/dev/null

# 4. Compute only and inside a cluster, beside PyTorch's three ways.
bench='cd "$P" && ./tests/bench/gpu_throughput --batches=128,1024,8192 --seconds=1 --model='
part cnn 170 "${bench}cnn"
grep -vE '^\[|^I[0-9]' "$out/logs/cnn.log" | tail -n 40
part vgg 200 "${bench}vgg_fashion"
grep -vE '^\[|^I[0-9]' "$out/logs/vgg.log" | tail -n 40

# 5. The main job.
for m in sync async; do
  part "main_$m" 60 "\"\$repo/deploy/local/train.sh\" --no_build --data_dir=\"\$P/data/mnist\" --mode=$m --logdir=$work/main_$m"
  grep -E '^final:|wall_s|done:' "$out/logs/main_$m.log" | tail -n 4
done

# 6. DeepFM on the GPU, on the CPU, and PyTorch on the card.
for d in cuda cpu; do
  part "deepfm_$d" 120 "\"\$repo/deploy/local/train.sh\" ${ctr_flags[*]} --device=$d --logdir=$ctr/logs_$d"
  grep -E '^final:|done:' "$out/logs/deepfm_$d.log" | tail -n 3
done
part deepfm_torch 90 "python3 \"\$repo/tests/bench/ctr_torch.py\" --model=$ctr/deepfm.json \
  --data=$ctr/data --batch=256 --learning_rate=0.001 --device=cuda"
grep -E '^final:' "$out/logs/deepfm_torch.log"

# 7. Memory errors in the Embedding kernels, if time is left.
sanitizer="$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)"
part sanitizer 60 'cd "$P" && "'"${sanitizer:-compute-sanitizer}"'" --tool memcheck --error-exitcode=9 \
  ./compute/backend_factory_test --gtest_filter="*Embedding*"'
tail -n 3 "$out/logs/sanitizer.log"

echo "== done after $((SECONDS - start)) s of a $budget s budget"
tar -cJf "$out/logs.tar.xz" -C "$out" logs && rm -rf "$out/logs"
if [ "${#failed[@]}" -gt 0 ]; then
  echo "gpu_session: not passed: ${failed[*]}"
  exit 1
fi
echo "gpu_session: every part passed"
