#!/usr/bin/env bash
# Local launcher: runs a whole training cluster on this machine, each task
# its own process with its own TF_CONFIG on free 127.0.0.1 ports, and trains
# the seeds' CNN on MNIST.
#
#   deploy/local/train.sh [launcher flags] [chief flags]
#
# Launcher flags:
#   --num_ps=N            parameter servers (default 2)
#   --num_workers=N       workers (default 2)
#   --data_dir=DIR        MNIST IDX files; default data/mnist, then
#                         ../shared/data/mnist, else they are downloaded
#   --worker_threads=N    compute threads per worker (default 1)
#   --eval_interval_s=S   seconds between the evaluator's evaluations (default 10)
#   --no_evaluator        run without the evaluator task
#   --no_build            use the binaries already in bazel-bin
#   --logdir=DIR          TensorBoard event files (chief and evaluator) and the
#                         trained weights (model.safetensors); default
#                         runs/<date-time>
#   --task_logs=DIR       also keep each task's log in DIR/<task>.log
#   --help
# Every task serves Prometheus /metrics on a free port (listed at start).
# Every other flag goes to the chief (and --num_ps/--num_workers too), e.g.
#   --epochs=5 --mode=sync|async --batch_size=128 --optimizer=adam
#   --learning_rate=0.001 --replicas_to_aggregate=N --max_staleness=N
#
# Ends with the chief's line
#   final: test_accuracy=... test_loss=... steps=N epochs=N wall_s=N
# and exits with the chief's exit status.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
NUM_PS=2
NUM_WORKERS=2
DATA_DIR=""
WORKER_THREADS=1
EVAL_INTERVAL=10
EVALUATOR=1
BUILD=1
LOGDIR=""
TASK_LOGS=""
CHIEF_ARGS=()

die() { echo "train.sh: $*" >&2; exit 2; }
is_uint() { [[ "$1" =~ ^[0-9]+$ ]]; }

for arg in "$@"; do
  case "$arg" in
    -h|--help) sed -n '2,31p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    --num_ps=*) NUM_PS="${arg#*=}"; CHIEF_ARGS+=("$arg") ;;
    --num_workers=*) NUM_WORKERS="${arg#*=}"; CHIEF_ARGS+=("$arg") ;;
    --data_dir=*) DATA_DIR="${arg#*=}" ;;
    --worker_threads=*) WORKER_THREADS="${arg#*=}" ;;
    --eval_interval_s=*) EVAL_INTERVAL="${arg#*=}" ;;
    --no_evaluator) EVALUATOR=0 ;;
    --no_build) BUILD=0 ;;
    --logdir=*) LOGDIR="${arg#*=}" ;;
    --task_logs=*) TASK_LOGS="${arg#*=}" ;;
    --*) CHIEF_ARGS+=("$arg") ;;
    *) die "unexpected argument '$arg' (flags look like --name=value; try --help)" ;;
  esac
done
is_uint "$NUM_PS" && [ "$NUM_PS" -ge 1 ] || die "--num_ps=$NUM_PS: must be a whole number >= 1"
is_uint "$NUM_WORKERS" && [ "$NUM_WORKERS" -ge 1 ] || die "--num_workers=$NUM_WORKERS: must be a whole number >= 1"
is_uint "$WORKER_THREADS" && [ "$WORKER_THREADS" -ge 1 ] || die "--worker_threads=$WORKER_THREADS: must be a whole number >= 1"

# 1. Packages and binaries.
"$ROOT/deploy/install_deps.sh" || exit 1
if [ "$BUILD" = 1 ]; then
  echo "train.sh: building (bazel build //ps_server:ps_server //worker:worker //worker:evaluator //chief:chief)" >&2
  (cd "$ROOT" && bazel build --noshow_progress --ui_event_filters=-info \
      //ps_server:ps_server //worker:worker //worker:evaluator //chief:chief) || {
    echo "train.sh: build failed" >&2; exit 1; }
fi
BIN="$ROOT/bazel-bin"
for b in ps_server/ps_server worker/worker worker/evaluator chief/chief; do
  [ -x "$BIN/$b" ] || die "missing binary $BIN/$b (run without --no_build)"
done

# 2. Data.
have_mnist() {
  for f in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
    [ -f "$1/$f.gz" ] || [ -f "$1/$f" ] || return 1
  done
}
if [ -n "$DATA_DIR" ]; then
  have_mnist "$DATA_DIR" || die "--data_dir=$DATA_DIR does not hold the four MNIST IDX files (train-images-idx3-ubyte[.gz], ...)"
elif have_mnist "$ROOT/data/mnist"; then
  DATA_DIR="$ROOT/data/mnist"
elif have_mnist "$ROOT/../shared/data/mnist"; then
  DATA_DIR="$(cd "$ROOT/../shared/data/mnist" && pwd)"
else
  echo "train.sh: no MNIST found in data/mnist or ../shared/data/mnist; downloading" >&2
  "$ROOT/deploy/data/download_mnist.sh" "$ROOT/data/mnist" ||
    die "could not get MNIST: put the four IDX .gz files in data/mnist or pass --data_dir"
  DATA_DIR="$ROOT/data/mnist"
fi
DATA_DIR="$(cd "$DATA_DIR" && pwd)"

# 3. Free ports on 127.0.0.1, one per task.
TOTAL=$((NUM_PS + NUM_WORKERS + 1 + EVALUATOR))
NEEDED=$((2 * TOTAL))  # a gRPC port and a metrics port per task
declare -A USED=()
while read -r port; do USED[$port]=1; done < <(
  awk 'NR > 1 { split($2, a, ":"); print strtonum("0x" a[2]) }' /proc/net/tcp /proc/net/tcp6 2>/dev/null)
PORTS=()
while [ ${#PORTS[@]} -lt "$NEEDED" ]; do
  p=$((20000 + RANDOM % 40000))
  [ -n "${USED[$p]:-}" ] && continue
  USED[$p]=1
  PORTS+=("$p")
done
addr_list() {  # addr_list FIRST COUNT -> "127.0.0.1:p1","127.0.0.1:p2"
  local out="" i
  for ((i = $1; i < $1 + $2; i++)); do out+="${out:+,}\"127.0.0.1:${PORTS[$i]}\""; done
  echo "$out"
}
CLUSTER="\"chief\": [$(addr_list 0 1)], \"ps\": [$(addr_list 1 "$NUM_PS")], \"worker\": [$(addr_list $((1 + NUM_PS)) "$NUM_WORKERS")]"
[ "$EVALUATOR" = 1 ] && CLUSTER+=", \"evaluator\": [$(addr_list $((1 + NUM_PS + NUM_WORKERS)) 1)]"
tf_config() { echo "{\"cluster\": {$CLUSTER}, \"task\": {\"type\": \"$1\", \"index\": $2}}"; }

# 4. Start the tasks; each line of their output carries the task's name.
# OpenBLAS: let it detect the CPU (a preset OPENBLAS_CORETYPE can halve its
# speed) and keep it single-threaded (the workers thread themselves).
unset OPENBLAS_CORETYPE
export OPENBLAS_NUM_THREADS=1
RUN_DIR="$(mktemp -d "${TMPDIR:-/tmp}/pscluster.XXXXXX")"
[ -n "$TASK_LOGS" ] && mkdir -p "$TASK_LOGS"
[ -z "$LOGDIR" ] && LOGDIR="$ROOT/runs/$(date +%Y%m%d-%H%M%S)"
mkdir -p "$LOGDIR" || die "--logdir=$LOGDIR: cannot create it"
LOGDIR="$(cd "$LOGDIR" && pwd)"
declare -A PIDS=()
ORDER=()
METRICS=""
NEXT_METRICS_PORT=$TOTAL
start() {  # start NAME TYPE INDEX BINARY ARGS...
  local name="$1" type="$2" index="$3"; shift 3
  local log="$RUN_DIR/$name.log"
  [ -n "$TASK_LOGS" ] && log="$TASK_LOGS/$name.log"
  local mport="${PORTS[$NEXT_METRICS_PORT]}"
  NEXT_METRICS_PORT=$((NEXT_METRICS_PORT + 1))
  METRICS+=" $name:$mport"
  set -- "$@" --metrics_port="$mport"
  # setsid: a Ctrl-C in the terminal reaches only this script, which then
  # stops every task once, in order.
  TF_CONFIG="$(tf_config "$type" "$index")" setsid "$@" \
    > >(trap '' INT TERM; tee "$log" | sed -u "s/^/[$name] /") 2>&1 &
  PIDS[$name]=$!
  ORDER+=("$name")
}
for ((i = 0; i < NUM_PS; i++)); do start "ps$i" ps "$i" "$BIN/ps_server/ps_server"; done
for ((i = 0; i < NUM_WORKERS; i++)); do
  start "worker$i" worker "$i" "$BIN/worker/worker" --data_dir="$DATA_DIR" --threads="$WORKER_THREADS"
done
if [ "$EVALUATOR" = 1 ]; then
  start evaluator evaluator 0 "$BIN/worker/evaluator" --data_dir="$DATA_DIR" \
    --eval_interval_s="$EVAL_INTERVAL" --logdir="$LOGDIR"
fi
start chief chief 0 "$BIN/chief/chief" --logdir="$LOGDIR" "${CHIEF_ARGS[@]}"
echo "train.sh: Prometheus metrics on 127.0.0.1:${METRICS# } (name:port, path /metrics)" >&2
echo "train.sh: started ${#ORDER[@]} tasks (${NUM_PS} ps, ${NUM_WORKERS} workers, chief$([ "$EVALUATOR" = 1 ] && echo ", evaluator")); data $DATA_DIR" >&2

# Ctrl-C / TERM: pass it on; the chief then tells every task to exit. (The
# log pipes ignore both, so they drain until their task ends.)
INTERRUPTED=0
forward() {
  [ "$INTERRUPTED" = 1 ] && return
  INTERRUPTED=1
  echo "train.sh: interrupted; stopping the tasks" >&2
  for n in "${ORDER[@]}"; do kill -INT "${PIDS[$n]}" 2>/dev/null; done
}
trap forward INT TERM

# 5. Wait for the chief, then for everyone else (bounded).
CHIEF_RC=0
while true; do
  wait "${PIDS[chief]}"; CHIEF_RC=$?
  # wait returns >128 when a trapped signal interrupted it; the chief may still run.
  kill -0 "${PIDS[chief]}" 2>/dev/null || break
done
# A chief that failed may not have told the others to stop: do it now.
if [ "$CHIEF_RC" -ne 0 ] && [ "$INTERRUPTED" = 0 ]; then
  for n in "${ORDER[@]}"; do [ "$n" = chief ] || kill -INT "${PIDS[$n]}" 2>/dev/null; done
fi
FAILED=()
for n in "${ORDER[@]}"; do
  [ "$n" = chief ] && continue
  pid="${PIDS[$n]}"
  for ((t = 0; t < 300; t++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then
    echo "train.sh: $n still running 30 s after the chief ended; terminating it" >&2
    kill -TERM "$pid" 2>/dev/null; sleep 1; kill -KILL "$pid" 2>/dev/null
  fi
  wait "$pid"; rc=$?
  [ "$rc" -ne 0 ] && FAILED+=("$n exited $rc")
done
sleep 0.2  # let the log pipes drain
[ ${#FAILED[@]} -gt 0 ] && echo "train.sh: ${FAILED[*]}" >&2
CHIEF_LOG="$RUN_DIR/chief.log"
[ -n "$TASK_LOGS" ] && CHIEF_LOG="$TASK_LOGS/chief.log"
FINAL="$(grep '^final:' "$CHIEF_LOG" | tail -n 1)"
rm -rf "$RUN_DIR"
if [ -f "$LOGDIR/model.safetensors" ]; then
  echo "train.sh: TensorBoard: tensorboard --logdir $LOGDIR; trained weights: $LOGDIR/model.safetensors" >&2
fi
if [ -n "$FINAL" ]; then
  echo "$FINAL"
else
  echo "train.sh: the chief exited with status $CHIEF_RC without a final line" >&2
fi
[ "$INTERRUPTED" = 1 ] && [ "$CHIEF_RC" = 0 ] && CHIEF_RC=130
exit "$CHIEF_RC"
