#!/usr/bin/env bash
# Benchmark (not a test): the pause a killed ps costs with --ps_replicas=1
# over a network rather than loopback. Every daemon runs in its own network
# namespace with its own address (a veth pair per host into a bridge, as in
# tests/netns_cluster_test.sh), each link shaped to RATE in both directions
# with tbf (the kernel here has no netem: the links add no delay beyond
# the veth's own, and this says nothing of a WAN's latency). The chief
# trains the built-in CNN with 2 ps and 2 workers, sync; ps:1 is killed
# with SIGKILL KILLS times and started again in its namespace at once (as
# Compose or Kubernetes would restart it). Each kill: its backup store on
# ps:0 is promoted, then the restarted ps:1 is seeded as its backup and
# gets its shards back. Printed per kill: the pause from the kill to the
# first update the promoted store applied and answered, the pause of the
# move back (from that promotion to its first update); then the medians
# and the run's final line beside a clean run's on the same network.
#
#   tests/bench/ps_loss_pause_netns.sh [KILLS=5] [RATE=1gbit] [MNIST_DIR]
#
# Needs root, iproute2 with tc, and the daemons built in bazel-bin.
set -uo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
bin="$repo/bazel-bin"
kills="${1:-5}"
rate="${2:-1gbit}"
data="${3:-${PSCLUSTER_DATA_DIR:-$repo/../shared/data/mnist}}"
die() { echo "ps_loss_pause_netns: $*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || die "network namespaces need root"
command -v tc >/dev/null || die "no tc (iproute2)"
[ -f "$data/train-images-idx3-ubyte.gz" ] || die "no MNIST in '$data'"
for b in ps_server/ps_server worker/worker chief/chief; do
  [ -x "$bin/$b" ] || die "missing $bin/$b (build first)"
done

# shellcheck source=tests/netns_common.sh
. "$repo/tests/netns_common.sh"
tag="plp$$"
sw="${tag}sw"
hosts=(chief ps0 ps1 w0 w1)
tmp="$(mktemp -d)"
declare -A pid=()
cleanup() {
  for p in "${pid[@]}"; do kill -KILL "$p" 2>/dev/null; done
  wait 2>/dev/null
  for h in "${hosts[@]}"; do ip netns del "${tag}$h" 2>/dev/null; done
  ip netns del "$sw" 2>/dev/null
  [ -n "${KEEP:-}" ] && echo "logs kept in $tmp" >&2 || rm -rf "$tmp"
}
trap cleanup EXIT

ip netns add "$sw" && ip -n "$sw" link add br0 type bridge && ip -n "$sw" link set br0 up ||
  die "cannot create the switch namespace"
declare -A addr
i=1
for h in "${hosts[@]}"; do
  ns="${tag}$h"
  addr[$h]="10.214.0.$i"
  netns_host "$tag" "$sw" "$h" "${addr[$h]}" || die "setting up host $h"
  # Both directions: the host's egress, and the switch's towards the host.
  tc -n "$ns" qdisc add dev eth0 root tbf rate "$rate" burst 256kb latency 100ms &&
    tc -n "$sw" qdisc add dev "p$h" root tbf rate "$rate" burst 256kb latency 100ms ||
    die "tbf at $rate on host $h"
  i=$((i + 1))
done
cluster="\"cluster\": {\"chief\": [\"${addr[chief]}:2222\"], \"ps\": [\"${addr[ps0]}:2222\", \"${addr[ps1]}:2222\"], \"worker\": [\"${addr[w0]}:2222\", \"${addr[w1]}:2222\"]}"
unset OPENBLAS_CORETYPE
run_on() {  # run_on RUN HOST TYPE INDEX BINARY ARGS... (appends to RUN.HOST.log)
  local run="$1" h="$2" type="$3" index="$4"; shift 4
  TF_CONFIG="{$cluster, \"task\": {\"type\": \"$type\", \"index\": $index}}" \
    ip netns exec "${tag}$h" "$@" >> "$tmp/$run.$h.log" 2>&1 &
  pid[$h]=$!
}
start_cluster() {  # start_cluster RUN CHIEF_ARGS...
  local run="$1"; shift
  run_on "$run" ps0 ps 0 "$bin/ps_server/ps_server"
  run_on "$run" ps1 ps 1 "$bin/ps_server/ps_server"
  run_on "$run" w0 worker 0 "$bin/worker/worker" --data_dir="$data"
  run_on "$run" w1 worker 1 "$bin/worker/worker" --data_dir="$data"
  run_on "$run" chief chief 0 "$bin/chief/chief" --model=cnn --data_dir="$data" --wait_for_cluster_s=60 \
    --log_every_s=0.5 "$@"
}
wait_cluster() {  # waits for every daemon; a guard against a hang, not a limit
  for h in "${!pid[@]}"; do
    for _ in $(seq 1 9000); do kill -0 "${pid[$h]}" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "${pid[$h]}" 2>/dev/null
    wait "${pid[$h]}" 2>/dev/null
  done
  pid=()
}
count() { grep -cE "$2" "$1" 2>/dev/null || true; }  # count FILE REGEX
now() { date -u '+%H:%M:%S.%N' | cut -c1-12; }
seconds_of_day() { awk -F: '{ printf "%.3f", $1 * 3600 + $2 * 60 + $3 }' <<<"$1"; }
first_update='promoted to primary at version .*the first update since is applied'

start_cluster clean --epochs=10
wait_cluster
clean="$(grep '^final:' "$tmp/clean.chief.log" | tail -n 1 | sed 's/ wall_s=.*//')"

echo "ps_loss_pause_netns: $(date -u '+%Y-%m-%d %H:%M') UTC, commit $(git -C "$repo" rev-parse --short HEAD), $(nproc) cores, links $rate each way (tbf, no added delay)"
printf '%-5s %10s %16s\n' kill "pause s" "moved back ms"
start_cluster kill --epochs=10 --ps_replicas=1 --checkpoint_every_steps=100
: > "$tmp/pauses"; : > "$tmp/backs"
for ((k = 1; k <= kills; k++)); do
  # Training, the shards at home (after the previous kill: moved back).
  for _ in $(seq 1 600); do
    [ "$(count "$tmp/kill.chief.log" "ps:1's shards go back to ps:1")" -ge $((k - 1)) ] &&
      [ "$(count "$tmp/kill.chief.log" ' epoch [0-9]+/10 step [1-9][0-9]{2,} ')" -gt 0 ] && break
    sleep 0.1
  done
  sleep 2
  kill -0 "${pid[chief]}" 2>/dev/null || { echo "the run ended before kill $k"; break; }
  t_kill="$(now)"
  kill -KILL "${pid[ps1]}"; wait "${pid[ps1]}" 2>/dev/null
  run_on kill ps1 ps 1 "$bin/ps_server/ps_server"
  for _ in $(seq 1 600); do
    [ "$(count "$tmp/kill.ps0.log" "$first_update")" -ge "$k" ] &&
      [ "$(count "$tmp/kill.ps1.log" "$first_update")" -ge "$k" ] && break
    sleep 0.1
  done
  t_back="$(grep -E "$first_update" "$tmp/kill.ps0.log" | sed -n "${k}p" |
    sed -nE 's/^([0-9:.]+) .*/\1/p')"
  back_ms="$(grep -E "$first_update" "$tmp/kill.ps1.log" | sed -n "${k}p" |
    sed -nE 's/.*, ([0-9]+) ms after the promotion.*/\1/p')"
  pause="-"
  [ -n "$t_back" ] && pause="$(awk -v a="$(seconds_of_day "$t_kill")" \
    -v b="$(seconds_of_day "${t_back:0:12}")" 'BEGIN { printf "%.2f", b - a }')"
  [ "$pause" != - ] && echo "$pause" >> "$tmp/pauses"
  [ -n "$back_ms" ] && echo "$back_ms" >> "$tmp/backs"
  printf '%-5s %10s %16s\n' "$k" "$pause" "${back_ms:--}"
done
wait_cluster
median() { sort -n "$1" | awk '{ v[NR] = $1 } END { if (NR == 0) { print "-"; exit }
  m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%.2f", m }'; }
printf '%-5s %10s %16s\n' median "$(median "$tmp/pauses")" "$(median "$tmp/backs")"
echo "killed run: $(grep '^final:' "$tmp/kill.chief.log" | tail -n 1 | sed 's/ wall_s=.*//')"
echo "clean run:  $clean"
