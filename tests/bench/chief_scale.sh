#!/usr/bin/env bash
# Benchmark (not a test): the chief at scale (issue 57). For each worker
# count W it starts --ps real ps_server processes and a real chief
# (--model=mlp split over every ps, --transport=grpc, one epoch of
# --chunks chunks), then W light fake workers (tests/bench/chief_load.cc:
# the worker's protocol, a fixed gradient pushed to every ps per chunk),
# and prints one table:
#
#   W | mode | chunks | wall_s | chief CPU ms per chunk | GetWork p50 / p99 us
#   (the answers that hand out a chunk) | heartbeats/s | GetWork calls per
#   chunk | PAUSE answers
#
# then the growth of the chief's CPU per chunk from the second worker count
# to the last (at most 10x from 100 to 1,000 is "at most linear"). The
# chief's CPU is utime + stime from /proc/PID/stat, from the first chunk
# handed out to the last worker told DONE; GetWork latency is the round
# trip the fakes see of the calls answered CHUNK (a PAUSE answer may be
# held by the chief until the pause ends; every answer's are in
# chief_load.out). The fakes' addresses are one port on distinct loopback
# hosts (127.0.x.y), which chief_load serves. The chief runs with
# --heartbeat_timeout_s=30: a thousand fakes in one process take longer
# than the default 3 s to make their first calls (docs/benchmarks/chief-scale.md).
#
#   tests/bench/chief_scale.sh [--workers=10,100,1000] [--ps=64] [--chunks=5000]
#       [--mode=async|sync] [--push=true|false] [--out_dir=DIR] [--chief_bin=PATH]
#
# --push=false: the fakes push nothing to the ps (the chief's load alone:
# leasing, heartbeats, progress, its own ps checks and checkpoints).
# --chief_bin: another chief binary (a copy of an older build) to compare.
#
# Needs bazel-bin/chief/chief, bazel-bin/ps_server/ps_server and
# bazel-bin/tests/bench/chief_load (bazel build //chief //ps_server
# //tests/bench:chief_load). Exit 0 when every run finished, 1 when one did
# not (its logs are kept in --out_dir), 2 for a bad flag.
set -uo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
workers_list="10,100,1000"
num_ps=64
chunks=5000
mode=async
push=true
out=""
chief_bin=""
bad() { echo "chief_scale: $1" >&2; exit 2; }
for arg in "$@"; do
  case "$arg" in
    --workers=*) workers_list="${arg#*=}" ;;
    --ps=*) num_ps="${arg#*=}" ;;
    --chunks=*) chunks="${arg#*=}" ;;
    --mode=*) mode="${arg#*=}" ;;
    --push=*) push="${arg#*=}" ;;
    --out_dir=*) out="${arg#*=}" ;;
    --chief_bin=*) chief_bin="${arg#*=}" ;;
    -h | --help) sed -n '2,34p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) bad "unknown argument '$arg' (--help lists them)" ;;
  esac
done
IFS=, read -r -a workers <<<"$workers_list"
for w in "${workers[@]}"; do
  [[ "$w" =~ ^[1-9][0-9]*$ ]] && ((w <= 4000)) ||
    bad "--workers=$workers_list: '$w' is not a worker count in [1, 4000]"
done
[[ "$num_ps" =~ ^[1-9][0-9]*$ ]] && ((num_ps <= 256)) || bad "--ps=$num_ps: a count in [1, 256]"
[[ "$chunks" =~ ^[1-9][0-9]*$ ]] && ((chunks <= 1000000)) ||
  bad "--chunks=$chunks: a count in [1, 1000000]"
[[ "$mode" == async || "$mode" == sync ]] || bad "--mode=$mode: async or sync"
[[ "$push" == true || "$push" == false ]] || bad "--push=$push: true or false"
BIN="$repo/bazel-bin"
for b in ps_server/ps_server chief/chief tests/bench/chief_load; do
  [ -x "$BIN/$b" ] || bad "missing $BIN/$b (bazel build //chief //ps_server //tests/bench:chief_load)"
done
[ -n "$chief_bin" ] || chief_bin="$BIN/chief/chief"
[ -x "$chief_bin" ] || bad "--chief_bin=$chief_bin: not an executable"
[ -n "$out" ] || out="$(mktemp -d /tmp/chief_scale.XXXXXX)"
mkdir -p "$out" || bad "--out_dir=$out: cannot be made"

pids=()
cleanup() {
  [ "${#pids[@]}" -gt 0 ] && kill "${pids[@]}" 2>/dev/null
  wait 2>/dev/null
}
trap cleanup EXIT

source "$(dirname "${BASH_SOURCE[0]}")/bench_common.sh"   # free_ports

# one_run W: one cluster; prints chief_load's line of figures.
one_run() {
  local w="$1" dir="$out/W$1-$mode-push_$push" p ps_list worker_list i cluster chief_pid line
  mkdir -p "$dir"
  mapfile -t p < <(free_ports $((num_ps + 2)))
  ps_list="" worker_list=""
  for ((i = 0; i < num_ps; i++)); do ps_list+="${ps_list:+, }\"127.0.0.1:${p[$((i + 2))]}\""; done
  # Worker i at 127.0.x.y on one port: chief_load answers for all of them.
  for ((i = 0; i < w; i++)); do
    worker_list+="${worker_list:+, }\"127.0.$((i / 200 + 1)).$((i % 200 + 2)):${p[1]}\""
  done
  cluster="\"cluster\": {\"chief\": [\"127.0.0.1:${p[0]}\"], \"ps\": [$ps_list], \"worker\": [$worker_list]}"
  echo "{$cluster, \"task\": {\"type\": \"worker\", \"index\": 0}}" >"$dir/tf_config.json"
  pids=()
  for ((i = 0; i < num_ps; i++)); do
    TF_CONFIG="{$cluster, \"task\": {\"type\": \"ps\", \"index\": $i}}" \
      "$BIN/ps_server/ps_server" --update_threads=1 --backup_stores=0 >"$dir/ps$i.log" 2>&1 &
    pids+=($!)
  done
  # One chunk = one worker batch of 8 examples (the plan's global batch is
  # split over the workers); --min_shard_bytes splits mlp's kernels over
  # every ps. --heartbeat_timeout_s=30: a thousand fakes in one process on
  # two cores take seconds to make their first pulls and calls, which the
  # default 3 s would count as lost workers; the heartbeats still go every
  # 0.5 s (min(0.5 s, timeout / 4)).
  TF_CONFIG="{$cluster, \"task\": {\"type\": \"chief\", \"index\": 0}}" \
    "$chief_bin" --model=mlp --epochs=1 --mode="$mode" --batch_size=$((8 * w)) \
    --transport=grpc --min_shard_bytes=1024 --wait_for_cluster_s=120 --heartbeat_timeout_s=30 \
    >"$dir/chief.log" 2>&1 &
  chief_pid=$!
  echo "$chief_pid" >"$dir/chief.pid"  # for a profiler: perf record -p
  pids+=("$chief_pid")
  line="$("$BIN/tests/bench/chief_load" --tf_config="$dir/tf_config.json" \
    --chunks_per_epoch="$chunks" --chief_pid="$chief_pid" --push="$push" 2>"$dir/chief_load.err")"
  local rc=$?
  echo "$line" >"$dir/chief_load.out"
  # The chief ends the run (final checkpoint, Shutdown to every task).
  for ((i = 0; i < 300; i++)); do kill -0 "$chief_pid" 2>/dev/null || break; sleep 0.1; done
  kill "${pids[@]}" 2>/dev/null
  wait "${pids[@]}" 2>/dev/null
  pids=()
  if [ "$rc" -ne 0 ] || [ -z "$line" ]; then
    echo "chief_scale: W=$w: chief_load failed (exit $rc): $(tail -3 "$dir/chief_load.err")" >&2
    echo "chief_scale: the chief's last lines:" >&2
    tail -5 "$dir/chief.log" >&2
    return 1
  fi
  echo "$line"
}

# key LINE NAME: the value of NAME=... in LINE.
key() { sed -nE "s/.*(^| )$2=([^ ]*).*/\2/p" <<<"$1"; }

echo "chief_scale: $(date -u '+%Y-%m-%d %H:%M') UTC, commit $(git -C "$repo" rev-parse --short HEAD)" \
  "(plus the working tree's changes), $(nproc) cores; $mode, $num_ps ps, mlp over gRPC, push=$push," \
  "$chunks chunks per run; logs in $out"
printf '%6s %6s %7s %8s %14s %10s %10s %13s %15s %8s\n' W mode chunks wall_s cpu_ms/chunk \
  p50_us p99_us heartbeats/s getwork/chunk pauses
status=0
declare -A per_chunk
for w in "${workers[@]}"; do
  if ! line="$(one_run "$w")"; then
    status=1
    continue
  fi
  per_chunk[$w]="$(key "$line" chief_cpu_ms_per_chunk)"
  printf '%6s %6s %7s %8s %14s %10s %10s %13s %15s %8s\n' "$w" "$mode" "$(key "$line" chunks)" \
    "$(key "$line" wall_s)" "${per_chunk[$w]}" "$(key "$line" chunk_p50_us)" \
    "$(key "$line" chunk_p99_us)" "$(key "$line" heartbeats_per_s)" \
    "$(awk -v c="$(key "$line" getwork_calls)" -v n="$(key "$line" chunks)" \
      'BEGIN { printf "%.2f", c / n }')" "$(key "$line" pause)"
done
n="${#workers[@]}"
if ((n >= 2)); then
  a="${workers[$((n - 2))]}" b="${workers[$((n - 1))]}"
  if [ -n "${per_chunk[$a]:-}" ] && [ -n "${per_chunk[$b]:-}" ]; then
    awk -v a="$a" -v b="$b" -v x="${per_chunk[$a]}" -v y="${per_chunk[$b]}" 'BEGIN {
      printf "growth of the chief CPU per chunk from W=%d to W=%d: %.2fx (workers %.0fx; at most linear: <= %.0fx)\n",
        a, b, y / x, b / a, b / a }'
  fi
fi
exit "$status"
