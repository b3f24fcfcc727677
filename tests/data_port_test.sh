#!/usr/bin/env bash
# The ps's tcp data plane, backup store and the backup store's data plane
# on "any free port" (--data_port=0 and --backup_port=0, the defaults)
# must not take a port the cluster spec gives another task: on one machine
# (the local launcher, the tests' clusters) that task may not have started
# yet, and would then find its port taken (CI once failed so). In a network
# namespace of its own, with the kernel's ephemeral range cut to 22 ports of
# which the spec names 16, the ps must choose its three among the other 6,
# run after run (without the rule, 5 runs' data ports alone all miss the
# spec's ports 1.5 times in 1,000).
# (Not fewer spare ports: gRPC's own probes take an ephemeral port now and
# then, and a range with none left fails the bind.)
# Given fixed ports (--data_port, --backup_port, --backup_data_port), it
# binds those. Needs root and util-linux's unshare; skips saying why
# otherwise.
#
# Usage: tests/data_port_test.sh [MNIST_DIR]   (MNIST is not needed)
set -uo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ps_bin="$repo/bazel-bin/ps_server/ps_server"
source "$(dirname "${BASH_SOURCE[0]}")/test_lib.sh"   # pass, fail, skip, finish

if [ "$(id -u)" -ne 0 ]; then skip "a network namespace needs root"; finish; fi
for tool in unshare ip sysctl; do
  command -v "$tool" >/dev/null || { skip "no '$tool'"; finish; }
done
[ -x "$ps_bin" ] || { fail "missing $ps_bin (build first)"; finish; }

# ps:0 on 41000 (bound before the data plane), the other tasks on
# 41001..41015: the free ports of the range 41000..41021 are 41016..41021.
workers=""
for p in $(seq 41002 41015); do workers+="${workers:+, }\"127.0.0.1:$p\""; done
spec="{\"cluster\": {\"ps\": [\"127.0.0.1:41000\"], \"chief\": [\"127.0.0.1:41001\"],
  \"worker\": [$workers]}, \"task\": {\"type\": \"ps\", \"index\": 0}}"
logs="$(mktemp -d)"
trap 'rm -rf "$logs"' EXIT
ports=""
backups=""
for run in 1 2 3 4 5; do
  out="$(TF_CONFIG="$spec" unshare --net bash -c '
    ip link set lo up &&
    sysctl -q -w net.ipv4.ip_local_port_range="41000 41021" &&
    { timeout 10 "$0" > "$1" 2>&1 & pid=$!;
      for i in $(seq 100); do grep -q "data plane on port" "$1" && break; sleep 0.1; done;
      kill -TERM $pid; wait $pid; cat "$1"; }' "$ps_bin" "$logs/ps$run.log" 2>&1)"
  port="$(grep -o 'tcp data plane on port [0-9]*' <<<"$out" | grep -o '[0-9]*$')"
  if [ -z "$port" ]; then
    fail "run $run: the ps did not say its data port: $(tail -n 3 <<<"$out")"
    finish
  fi
  ports="$ports $port"
  backup="$(grep -o 'backup store on port [0-9]*' <<<"$out" | grep -o '[0-9]*$')"
  backups="$backups ${backup:-none}"
  backup="$(grep -o 'with its data plane on port [0-9]*' <<<"$out" | grep -o '[0-9]*$')"
  backups="$backups ${backup:-none}"
done
bad=""
for p in $ports $backups; do
  [ "$p" = none ] && { bad+=" none"; continue; }
  if [ "$p" -lt 41016 ] || [ "$p" -gt 41021 ]; then bad+=" $p"; fi
done
if [ -z "$bad" ]; then
  pass "with 41000..41021 the ephemeral range and 41000..41015 in the spec, the data plane, the backup store and its data plane took ports outside the spec in 5 runs of 5:$ports /$backups"
else
  fail "data ports chosen:$ports, backup store ports and their data planes':$backups (expected 41016..41021 every time: the others belong to tasks of the spec)"
fi
# Fixed ports (behind a firewall): the ps binds the three it is given, the
# backup store's data plane included (where the workers reach a promoted
# store over the tcp data plane).
out="$(TF_CONFIG="$spec" unshare --net bash -c '
  ip link set lo up &&
  { timeout 10 "$0" --data_port=41030 --backup_port=41031 --backup_data_port=41032 > "$1" 2>&1 &
    pid=$!;
    for i in $(seq 100); do grep -q "data plane on port" "$1" && break; sleep 0.1; done;
    kill -TERM $pid; wait $pid; cat "$1"; }' "$ps_bin" "$logs/fixed.log" 2>&1)"
if grep -q 'tcp data plane on port 41030, backup store on port 41031 with its data plane on port 41032' <<<"$out"; then
  pass "--data_port=41030 --backup_port=41031 --backup_data_port=41032: bound as given"
else
  fail "fixed ports: $(grep -m1 'serving on\|error' <<<"$out")"
fi
finish
