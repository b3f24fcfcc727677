#!/usr/bin/env bash
# Benchmark (not a test): what --ps_replicas=1 costs (docs/replication.md).
# Runs the local cluster (2 ps, 2 workers, the evaluator; the built-in CNN,
# one epoch) without and with replicas, alternately, ROUNDS times, and
# prints per round the workers' images/s (summed) both ways and their
# ratio, and the bytes each ps sent its backup per step beside the least a
# backup can be sent (one update of the ps's shard per step: a float per
# value; forwarding every push instead would be that times the workers).
#
#   tests/bench/replication_cost.sh [ROUNDS=3] [MODE=sync] [MNIST_DIR]
#
# Needs the daemons built in bazel-bin.
set -uo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
rounds="${1:-3}"
mode="${2:-sync}"
data="${3:-${PSCLUSTER_DATA_DIR:-$repo/../shared/data/mnist}}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

run() {  # run REPLICAS OUT
  "$repo/deploy/local/train.sh" --no_build --data_dir="$data" --model=cnn --epochs=1 \
    --mode="$mode" --ps_replicas="$1" --logdir="$tmp/run-$1-$r" > "$2" 2>&1 ||
    { echo "replication_cost: the run with --ps_replicas=$1 failed:"; tail -n 20 "$2"; exit 1; }
}
images_per_s() {  # the workers' images/s, summed
  grep -oE '\] done: .* images_per_s=[0-9.]+' "$1" | sed -E 's/.*images_per_s=//' |
    awk '{ s += $1 } END { printf "%.0f", s }'
}

echo "replication_cost: $(date -u '+%Y-%m-%d %H:%M') UTC, commit $(git -C "$repo" rev-parse --short HEAD), $(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg), mode $mode"
printf '%-6s %14s %14s %7s   %s\n' round "R=0 images/s" "R=1 images/s" ratio "per ps: replicated bytes/step vs minimum"
for ((r = 1; r <= rounds; r++)); do
  run 0 "$tmp/r0.out"
  run 1 "$tmp/r1.out"
  a="$(images_per_s "$tmp/r0.out")"
  b="$(images_per_s "$tmp/r1.out")"
  per_ps=""
  while read -r ps version replicated; do
    # The least a backup can be sent per step: the ps's parameters, a float
    # each (the seed, once, is counted in the replicated bytes too).
    params="$(sed -nE "s/.*\] ${ps} holds [0-9]+ shards, ([0-9]+) parameters.*/\1/p" "$tmp/r1.out" | head -n 1)"
    per_ps+="$(awk -v rep="$replicated" -v v="$version" -v n="$params" -v p="$ps" \
      'BEGIN { printf "%s %.0f B vs %.0f B (%.2fx); ", p, rep * 1e6 / v, n * 4, rep * 1e6 / v / (n * 4) }')"
  done < <(grep -E '^\[chief\] .* ps:[0-9]+ version=.* replicated=' "$tmp/r1.out" |
           sed -nE 's/.* (ps:[0-9]+) version=([0-9]+) .* replicated=([0-9.]+) MB.*/\1 \2 \3/p')
  printf '%-6s %14s %14s %7s   %s\n' "$r" "$a" "$b" "$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.2f", b / a }')" "$per_ps"
done
