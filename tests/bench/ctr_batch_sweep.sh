#!/usr/bin/env bash
# Benchmark (not a test): a CTR model through the local cluster beside its
# PyTorch peer (tests/bench/ctr_torch.py) at several global batch sizes,
# alternated, on the same generated data. Per batch it prints the
# cluster's examples/s and PyTorch's, their ratio, each worker's compute
# and communication seconds (the `done:` line's compute_s and comm_s; the
# larger comm / compute of the two workers), and both test AUCs.
#
#   tests/bench/ctr_batch_sweep.sh [--model=deploy/models/ctr_deepfm.json]
#       [--batches=256,512,1024,2048] [--mode=sync|async] [--num_ps=2]
#       [--num_workers=2] [--data=DIR]
#
# The data, unless --data names a criteo_synth folder: `criteo_synth
# --rows=600000 --ids_per_feature=100 --seed=7 --buckets=100000`, the
# ranking models test's (tests/ctr_models_test.sh). Both sides train one
# epoch with Adam 0.001 halving every 1,000 updates (the tables per row, at
# the same rate). The cluster's examples/s are the training rows over the
# chief's wall_s (start-up and the final evaluation included); PyTorch's
# are over its training loop alone. Needs the daemons and criteo_synth
# built in bazel-bin, jq, and python3-torch for /usr/bin/python3.
set -uo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
model="$repo/deploy/models/ctr_deepfm.json"
batches="256,512,1024,2048"
mode=sync
num_ps=2
num_workers=2
data=""
buckets=100000
py="${TEST_PY:-/usr/bin/python3}"

usage() { sed -n '2,20p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
bad() { echo "ctr_batch_sweep: $1" >&2; exit 2; }
for arg in "$@"; do
  case "$arg" in
    --model=*) model="${arg#*=}" ;;
    --batches=*) batches="${arg#*=}" ;;
    --mode=*) mode="${arg#*=}" ;;
    --num_ps=*) num_ps="${arg#*=}" ;;
    --num_workers=*) num_workers="${arg#*=}" ;;
    --data=*) data="${arg#*=}" ;;
    -h | --help) usage; exit 0 ;;
    *) bad "unknown argument '$arg' (--help lists them)" ;;
  esac
done
[ -f "$model" ] || bad "--model=$model: no such file"
[[ "$mode" =~ ^(sync|async)$ ]] || bad "--mode=$mode: sync or async"
[[ "$num_ps" =~ ^[1-9][0-9]*$ ]] || bad "--num_ps=$num_ps: a positive integer"
[[ "$num_workers" =~ ^[1-9][0-9]*$ ]] || bad "--num_workers=$num_workers: a positive integer"
IFS=, read -r -a batch_list <<<"$batches"
for b in "${batch_list[@]}"; do
  [[ "$b" =~ ^[1-9][0-9]*$ ]] || bad "--batches=$batches: '$b' is not a positive integer"
done
for b in "$repo"/bazel-bin/{ps_server/ps_server,worker/worker,chief/chief,deploy/data/criteo_synth}; do
  [ -x "$b" ] || bad "missing $b (bazel build //...)"
done
"$py" -c 'import torch' 2>/dev/null || bad "no torch for $py (apt-get install python3-torch)"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# shellcheck source=tests/launcher_common.sh
source "$repo/tests/launcher_common.sh"
if [ -z "$data" ]; then
  data="$tmp/data"
  echo "ctr_batch_sweep: writing the data (600,000 rows) ..."
  why="$(criteo_data_and_model "$repo/bazel-bin/deploy/data/criteo_synth" "$data" "$model" \
    "$buckets" "$tmp/model.json" --rows=600000 --ids_per_feature=100 --seed=7)" ||
    { echo "ctr_batch_sweep: $why" >&2; exit 1; }
else
  [ -f "$data/criteo.json" ] || bad "--data=$data: no criteo.json (a criteo_synth folder)"
  buckets="$(jq -r '.buckets' "$data/criteo.json")"
  resize_embeddings "$model" "$buckets" "$tmp/model.json" || bad "cannot resize $model's Embedding"
fi
rows="$(jq '.train.rows' "$data/planted.json" 2>/dev/null)"
[[ "$rows" =~ ^[0-9]+$ ]] || rows="$(wc -l <"$data/train.txt")"

field() { sed -nE "s/.* $1=([0-9.]+).*/\1/p" <<<"$2" | tail -n 1; }

echo "ctr_batch_sweep: $(date -u '+%Y-%m-%d %H:%M') UTC, commit $(git -C "$repo" rev-parse --short HEAD)," \
  "$(nproc) cores, $(basename "$model"), $mode, $num_ps ps x $num_workers workers, $rows training rows"
printf '%6s %12s %12s %7s %10s %10s %8s %9s %9s\n' batch "examples/s" "PyTorch's" ratio \
  compute_s comm_s "comm/cmp" "AUC" "PyTorch"
for b in "${batch_list[@]}"; do
  out="$tmp/cluster_$b.out"
  "$repo/deploy/local/train.sh" --no_build --no_evaluator --num_ps="$num_ps" \
    --num_workers="$num_workers" --mode="$mode" --epochs=1 --batch_size="$b" --optimizer=adam \
    --learning_rate=0.001 --model="$tmp/model.json" --data="$data" --logdir="$tmp/logs_$b" \
    >"$out" 2>&1 || { echo "ctr_batch_sweep: the cluster failed at batch $b:"; tail -n 20 "$out"; exit 1; }
  final="$(grep -E '^final: ' "$out" | tail -n 1)"
  rate="$(awk -v n="$rows" -v s="$(field wall_s "$final")" 'BEGIN { printf "%.0f", n / s }')"
  # The worker whose communication is the largest share of its compute.
  read -r compute comm share < <(grep -E '\] done: .*compute_s=' "$out" |
    sed -E 's/.* compute_s=([0-9.]+) comm_s=([0-9.]+).*/\1 \2/' |
    awk '{ r = $2 / $1; if (r > best) { best = r; c = $1; m = $2 } }
         END { printf "%.2f %.2f %.2f\n", c, m, best }')
  peer="$("$py" "$repo/tests/bench/ctr_torch.py" --model="$tmp/model.json" --data="$data" \
    --batch="$b" --learning_rate=0.001 2>&1 | grep -E '^final: ' | tail -n 1)"
  [ -n "$peer" ] || { echo "ctr_batch_sweep: the PyTorch peer failed at batch $b"; exit 1; }
  peer_rate="$(field examples_per_s "$peer")"
  printf '%6s %12s %12s %7s %10s %10s %8s %9s %9s\n' "$b" "$rate" "$peer_rate" \
    "$(awk -v a="$rate" -v b="$peer_rate" 'BEGIN { printf "%.2fx", a / b }')" \
    "$compute" "$comm" "$share" "$(field test_auc "$final")" "$(field test_auc "$peer")"
done
