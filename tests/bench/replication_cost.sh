#!/usr/bin/env bash
# Benchmark (not a test): what --ps_replicas=R costs (docs/replication.md).
# Runs the local cluster (NUM_PS ps, 2 workers, the evaluator; the built-in
# CNN, one epoch) with R = 0, 1, ..., HIGHEST_R replicas, one after the
# other, ROUNDS times, and prints per round the workers' images/s (summed)
# each way and its ratio to R = 0's, and the bytes each ps sent its backups
# per step (with HIGHEST_R) beside the least they can be sent (one update
# of the ps's shard per step per backup: a float per value; forwarding
# every push instead would be that times the workers).
#
#   tests/bench/replication_cost.sh [ROUNDS=3] [MODE=sync] [MNIST_DIR] [NUM_PS=2] [HIGHEST_R=1]
#
# Needs the daemons built in bazel-bin.
set -uo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
rounds="${1:-3}"
mode="${2:-sync}"
data="${3:-${PSCLUSTER_DATA_DIR:-$repo/../shared/data/mnist}}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

num_ps="${4:-2}"
highest="${5:-1}"

run() {  # run REPLICAS OUT
  "$repo/deploy/local/train.sh" --no_build --data_dir="$data" --model=cnn --epochs=1 \
    --mode="$mode" --num_ps="$num_ps" --ps_replicas="$1" --logdir="$tmp/run-$1-$r" > "$2" 2>&1 ||
    { echo "replication_cost: the run with --ps_replicas=$1 failed:"; tail -n 20 "$2"; exit 1; }
}
images_per_s() {  # the workers' images/s, summed
  grep -oE '\] done: .* images_per_s=[0-9.]+' "$1" | sed -E 's/.*images_per_s=//' |
    awk '{ s += $1 } END { printf "%.0f", s }'
}

echo "replication_cost: $(date -u '+%Y-%m-%d %H:%M') UTC, commit $(git -C "$repo" rev-parse --short HEAD), $(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg), mode $mode, $num_ps ps"
header="$(printf '%-6s' round)"
for ((k = 0; k <= highest; k++)); do
  header+="$(printf ' %14s' "R=$k images/s")"
  [ "$k" -gt 0 ] && header+="$(printf ' %7s' "x R=0")"
done
echo "$header   per ps, R=$highest: replicated bytes/step vs minimum"
for ((r = 1; r <= rounds; r++)); do
  line="$(printf '%-6s' "$r")"
  for ((k = 0; k <= highest; k++)); do
    run "$k" "$tmp/r$k.out"
    ips="$(images_per_s "$tmp/r$k.out")"
    [ "$k" -eq 0 ] && base="$ips"
    line+="$(printf ' %14s' "$ips")"
    [ "$k" -gt 0 ] && line+="$(printf ' %7s' "$(awk -v a="$base" -v b="$ips" 'BEGIN { printf "%.2f", b / a }')")"
  done
  per_ps=""
  last="$tmp/r$highest.out"
  while read -r ps version replicated; do
    # The least the backups can be sent per step: the ps's parameters, a
    # float each, per backup (the seeds, once, are counted in the
    # replicated bytes too).
    params="$(sed -nE "s/.*\] ${ps} holds [0-9]+ shards, ([0-9]+) parameters.*/\1/p" "$last" | head -n 1)"
    per_ps+="$(awk -v rep="$replicated" -v v="$version" -v n="$params" -v p="$ps" -v k="$highest" \
      'BEGIN { printf "%s %.0f B vs %.0f B (%.2fx); ", p, rep * 1e6 / v, n * 4 * k, rep * 1e6 / v / (n * 4 * k) }')"
  done < <(grep -E '^\[chief\] .* ps:[0-9]+ version=.* replicated=' "$last" |
           sed -nE 's/.* (ps:[0-9]+) version=([0-9]+) .* replicated=([0-9.]+) MB.*/\1 \2 \3/p')
  echo "$line   $per_ps"
done
