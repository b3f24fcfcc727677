#!/usr/bin/env bash
# Benchmark (not a test): what a killed ps costs, with --ps_replicas=1 (its
# backup store is promoted and serves its shards from the version it
# holds) and without (every ps goes back to the newest checkpoint)
# (docs/replication.md). Per round, each way: the local cluster (2 ps, 2
# workers; the built-in CNN, 1 epoch, sync, a checkpoint every 100 steps)
# has ps:1 killed with SIGKILL past step 100 (the workers frozen around
# the kill, as in tests/ps_replicas_test.sh; the CNN rather than the mlp,
# which ends before a kill lands), and the script prints the pause: from
# the kill to the next step applied and answered (R=1: the promoted
# store's "first update since is applied" line; R=0: the chief's "ps:1
# restarted" line, right after which the workers resume), the steps
# redone, and the final line's accuracy beside a clean run's. With R=1
# the restarted ps gets its shards back once caught up: that pause too,
# from its store's promotion to the first update it applied and answered
# (its "first update since" line). Medians at the end.
#
#   tests/bench/ps_loss_pause.sh [ROUNDS=5] [MNIST_DIR]
#
# Needs the daemons built in bazel-bin.
set -uo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
rounds="${1:-5}"
data="${2:-${PSCLUSTER_DATA_DIR:-$repo/../shared/data/mnist}}"
train="$repo/deploy/local/train.sh"
tmp="$(mktemp -d)"
trap '[ -n "${KEEP:-}" ] || rm -rf "$tmp"' EXIT
# shellcheck source=tests/launcher_common.sh
. "$repo/tests/launcher_common.sh"

seconds_of_day() { awk -F: '{ printf "%.3f", $1 * 3600 + $2 * 60 + $3 }' <<<"$1"; }

# kill_run REPLICAS OUT: prints "PAUSE_S REDONE ACCURACY MOVED_BACK_MS"
# (the last "-" when the shards did not move back).
kill_run() {
  local replicas="$1" out="$2" pid t_kill t_back redone acc
  "$train" --no_build --data_dir="$data" --model=cnn --epochs=1 --ps_replicas="$replicas" \
    --checkpoint_every_steps=100 --log_every_s=0.5 --logdir="$out.d" > "$out" 2>&1 &
  pid=$!
  for _ in $(seq 1 1200); do
    grep -qE '^\[chief\] .*( epoch 1/1 step [1-9][0-9]{2,} |checkpoint \(periodic\) at step [1-9][0-9]{2,} )' \
      "$out" 2>/dev/null && break
    sleep 0.1
  done
  kill_ps_frozen "$pid" 1
  t_kill="$killed_at"
  wait "$pid" || { echo "ps_loss_pause: the run with --ps_replicas=$replicas failed:" >&2; tail -n 20 "$out" >&2; exit 1; }
  t_back="$(sed -nE 's/^\[ps[0-9]+\] ([0-9:.]+) .*promoted to primary at version .*the first update since is applied.*/\1/p' "$out" | head -n 1)"
  [ -n "$t_back" ] ||
    t_back="$(sed -nE 's/^\[chief\] ([0-9:.]+) W chief:0\] ps:1 restarted.*/\1/p' "$out" | head -n 1)"
  redone="$(sed -nE 's/.*ps:1 restarted: .* ([0-9]+) step\(s\) since that checkpoint are lost and redone.*/\1/p' "$out" | head -n 1)"
  acc="$(tail -n 1 "$out" | sed -nE 's/^final: test_accuracy=([0-9.]+).*/\1/p')"
  if [ -z "${t_kill:-}" ] || [ -z "$t_back" ]; then
    echo "ps_loss_pause: no kill or no restart in the run with --ps_replicas=$replicas" >&2; exit 1
  fi
  back_ms="$(sed -nE 's/.*promoted to primary at version .*the first update since is applied .*, ([0-9]+) ms after the promotion.*/\1/p' "$out" | sed -n 2p)"
  awk -v a="$(seconds_of_day "${t_kill:0:12}")" -v b="$(seconds_of_day "$t_back")" \
    -v r="${redone:-0}" -v acc="$acc" -v m="${back_ms:--}" 'BEGIN { printf "%.2f %d %s %s", b - a, r, acc, m }'
}

clean="$("$train" --no_build --data_dir="$data" --model=cnn --epochs=1 --logdir="$tmp/clean.d" 2>&1 |
  tail -n 1 | sed -nE 's/^final: test_accuracy=([0-9.]+).*/\1/p')"
echo "ps_loss_pause: $(date -u '+%Y-%m-%d %H:%M') UTC, commit $(git -C "$repo" rev-parse --short HEAD), $(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg); clean run's accuracy $clean"
printf '%-6s %22s %22s\n' round "R=1: pause s, redone" "R=0: pause s, redone"
: > "$tmp/r1"; : > "$tmp/r0"; : > "$tmp/m1"
for ((r = 1; r <= rounds; r++)); do
  read -r p1 d1 a1 m1 <<<"$(kill_run 1 "$tmp/k1-$r.out")"
  read -r p0 d0 a0 _ <<<"$(kill_run 0 "$tmp/k0-$r.out")"
  echo "$p1 $d1" >> "$tmp/r1"; echo "$p0 $d0" >> "$tmp/r0"
  [ "$m1" != - ] && echo "$m1" >> "$tmp/m1"
  printf '%-6s %14s s, %3d %14s s, %3d   accuracy %s / %s; R=1 moved back in %s ms\n' \
    "$r" "$p1" "$d1" "$p0" "$d0" "$a1" "$a0" "$m1"
done
median() { sort -n -k"$2" "$1" | awk -v k="$2" '{ v[NR] = $k } END { m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%.2f", m }'; }
printf '%-6s %14s s, %3s %14s s, %3s   R=1 moved back in %s ms\n' median "$(median "$tmp/r1" 1)" \
  "$(median "$tmp/r1" 2)" "$(median "$tmp/r0" 1)" "$(median "$tmp/r0" 2)" \
  "$( [ -s "$tmp/m1" ] && median "$tmp/m1" 1 || echo -)"
