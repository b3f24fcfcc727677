#!/usr/bin/env bash
# Runs the cluster as separate hosts: every daemon in its own network
# namespace with its own address (10.213.0.0/24, only inside namespaces this
# test creates: a veth pair per host into a bridge in a "switch" namespace),
# TF_CONFIG naming those addresses, training the mlp for one epoch to a loss
# threshold. Needs root and iproute2; skips saying why otherwise.
#
# Usage: tests/netns_cluster_test.sh [MNIST_DIR]
# Needs the daemons in bazel-bin (tests/run_all.sh builds them first).
set -uo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="$repo/bazel-bin"
data="${1:-${PSCLUSTER_DATA_DIR:-$repo/../shared/data/mnist}}"
passed=0; failed=0; skipped=0
pass() { echo "PASS: $1"; passed=$((passed + 1)); }
fail() { echo "FAIL: $1"; failed=$((failed + 1)); }
skip() { echo "SKIP: $1"; skipped=$((skipped + 1)); }
finish() {
  echo "netns_cluster_test: $passed passed, $failed failed, $skipped skipped"
  [ "$failed" -eq 0 ]; exit
}

if [ "$(id -u)" -ne 0 ]; then skip "network namespaces need root"; finish; fi
if ! command -v ip >/dev/null; then skip "no 'ip' (iproute2)"; finish; fi
if [ ! -f "$data/train-images-idx3-ubyte.gz" ]; then skip "no MNIST in '$data'"; finish; fi
for b in ps_server/ps_server worker/worker worker/evaluator chief/chief; do
  [ -x "$bin/$b" ] || { fail "missing $bin/$b (build first)"; finish; }
done

tag="pst$$"
sw="${tag}sw"
hosts=(chief ps0 ps1 w0 w1 ev)
tmp="$(mktemp -d)"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
  wait 2>/dev/null
  for h in "${hosts[@]}"; do ip netns del "${tag}$h" 2>/dev/null; done
  ip netns del "$sw" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT

# The switch: a bridge in a namespace of its own; each host a namespace
# with one end of a veth pair, the other end on the bridge.
if ! ip netns add "$sw" 2>"$tmp/err"; then
  skip "cannot create network namespaces here: $(cat "$tmp/err")"; finish
fi
ip -n "$sw" link add br0 type bridge && ip -n "$sw" link set br0 up || { fail "bridge"; finish; }
declare -A addr
i=1
for h in "${hosts[@]}"; do
  ns="${tag}$h"
  addr[$h]="10.213.0.$i"
  ip netns add "$ns" &&
    ip -n "$ns" link set lo up &&
    ip link add "${tag}$h" netns "$ns" type veth peer name "p$h" netns "$sw" &&
    ip -n "$ns" link set "${tag}$h" name eth0 &&
    ip -n "$ns" addr add "${addr[$h]}/24" dev eth0 &&
    ip -n "$ns" link set eth0 up &&
    ip -n "$sw" link set "p$h" master br0 &&
    ip -n "$sw" link set "p$h" up || { fail "setting up host $h"; finish; }
  i=$((i + 1))
done

cluster="\"cluster\": {\"chief\": [\"${addr[chief]}:2222\"], \"ps\": [\"${addr[ps0]}:2222\", \"${addr[ps1]}:2222\"], \"worker\": [\"${addr[w0]}:2222\", \"${addr[w1]}:2222\"], \"evaluator\": [\"${addr[ev]}:2222\"]}"
run_on() {  # run_on HOST TYPE INDEX BINARY ARGS...
  local h="$1" type="$2" index="$3"; shift 3
  TF_CONFIG="{$cluster, \"task\": {\"type\": \"$type\", \"index\": $index}}" \
    ip netns exec "${tag}$h" "$@" > "$tmp/$h.log" 2>&1 &
  pids+=($!)
}
unset OPENBLAS_CORETYPE
run_on ps0 ps 0 "$bin/ps_server/ps_server"
run_on ps1 ps 1 "$bin/ps_server/ps_server"
run_on w0 worker 0 "$bin/worker/worker" --data_dir="$data"
run_on w1 worker 1 "$bin/worker/worker" --data_dir="$data"
run_on ev evaluator 0 "$bin/worker/evaluator" --data_dir="$data" --eval_interval_s=2
run_on chief chief 0 "$bin/chief/chief" --model=mlp --epochs=1 --wait_for_cluster_s=60
chief_pid="${pids[-1]}"

codes=()
for p in "${pids[@]}"; do
  for _ in $(seq 1 1800); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$p" 2>/dev/null && kill -KILL "$p"
  wait "$p"; codes+=($?)
done
final="$(grep '^final:' "$tmp/chief.log" | tail -n 1)"
loss="$(sed -n 's/.*test_loss=\([0-9.]*\).*/\1/p' <<<"$final")"
if [ -n "$loss" ] && awk -v l="$loss" 'BEGIN { exit !(l < 0.45) }'; then
  # All six listen on port 2222: only separate network stacks allow that.
  pass "six hosts, each on its own address and port 2222, trained the mlp to test_loss $loss < 0.45 ($final)"
else
  fail "no final line with test_loss < 0.45: '$final'"; tail -n 20 "$tmp/chief.log"
fi
if [ "${codes[*]}" = "0 0 0 0 0 0" ]; then
  pass "every daemon exited 0"
else
  fail "exit codes ${codes[*]} (chief ps0 ps1 w0 w1 ev order: ${hosts[*]})"
  for h in "${hosts[@]}"; do echo "== $h"; tail -n 5 "$tmp/$h.log"; done
fi
finish
