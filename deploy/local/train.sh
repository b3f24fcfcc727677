#!/usr/bin/env bash
# Local launcher: runs a whole training cluster on this machine, each task
# its own process with its own TF_CONFIG on free 127.0.0.1 ports, and trains
# the built-in CNN on MNIST.
#
#   deploy/local/train.sh [launcher flags] [chief flags]
#
# Launcher flags:
#   --num_ps=N            parameter servers (default 2; none with
#                         --strategy=multi_worker_mirrored)
#   --num_workers=N       workers (default 2)
#   --data=PATH           the data: a folder of MNIST-style IDX files, a folder
#                         of x_train.npy/y_train.npy/x_test.npy/y_test.npy,
#                         an .npz holding them, or a folder of Criteo logs
#                         train.txt/test.txt[.gz] (docs/criteo.md;
#                         --data_dir=PATH is the same); default data/mnist, then
#                         ../shared/data/mnist, else MNIST is downloaded
#   --device=D            where the workers and the evaluator compute (default
#                         auto): auto (the GPUs when there are some, else the
#                         CPU), cpu, cuda (the GPUs; exit 2 without one) or
#                         cuda:N (GPU N for every worker and the evaluator).
#                         With G GPUs, auto and cuda put worker i on
#                         cuda:(i mod G) and the evaluator on cuda:(G-1), a
#                         GPU with the fewest workers. G: the entries of
#                         CUDA_VISIBLE_DEVICES when it is set (empty: none),
#                         else the GPUs `nvidia-smi -L` lists
#                         (PSCLUSTER_GPU_COUNT=G overrides both, for tests).
#                         auto means the CPU when a worker cannot use the
#                         GPUs (no driver, a build without CUDA) or the
#                         model file has a layer the GPU does not run
#                         (Attention, LSTM, a mask, several outputs...:
#                         the launcher names it; --device=cuda with such a
#                         model exits 2).
#                         The launcher prints where each task computes.
#   --worker_threads=N    compute threads per worker (default: a CPU worker
#                         gets the cores (nproc) divided by the CPU workers,
#                         rounded down, at least 1; a GPU worker 1)
#   --dry_run             print where each task would compute and with how
#                         many threads, then exit (builds and starts nothing)
#   --eval_interval_s=S   seconds between the evaluator's evaluations (default 10)
#   --no_evaluator        run without the evaluator task (the chief then
#                         evaluates the final weights itself on --data_dir)
#   --no_build            use the binaries already in bazel-bin
#   --logdir=DIR          TensorBoard event files (chief and evaluator) and the
#                         trained weights (model.safetensors); default
#                         runs/<date-time>
#   --task_logs=DIR       also keep each task's log in DIR/<task>.log
#   --no_restart          do not start a task again when it dies
#   --max_restarts=N      restarts per task before the run is stopped (default 5)
#   --restart_delay_s=S   seconds before a dead task is started again (default 1)
#   --help
# Every task serves Prometheus /metrics on a free port (listed at start).
# Like Compose's `restart: on-failure`, a ps, worker or evaluator that exits
# non-zero (but for the final codes 2 bad input, 3 run given up, 4 bad data)
# or is killed by a signal while the run goes on is started again with the
# same TF_CONFIG, flags, ports and log:
#   [launcher] ps:1 exited (killed by SIGKILL); restarting (1/5)
# The chief is started again only when a signal the launcher did not send
# killed it (kill -9) before its final line; when it exits with a status (130
# when SIGINT or SIGTERM stopped it), the run ends. A task that dies once more after --max_restarts
# restarts stops the run (exit status 1); a ps or worker that exits 2-4
# stops it too, and the launcher exits with that status.
# Every other flag goes to the chief (and --num_ps/--num_workers too), e.g.
#   --epochs=5 --mode=sync|async --batch_size=128 --optimizer=adam
#   --learning_rate=0.001 --replicas_to_aggregate=N --max_staleness=N
#   --strategy=parameter_server|multi_worker_mirrored --ring_codec=fp32|bf16|fp16
#
# Ends with the chief's line
#   final: test_accuracy=... test_loss=... steps=N epochs=N wall_s=N
# and exits with the chief's exit status (130 after Ctrl-C).
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
NUM_PS=""
NUM_WORKERS=2
MIRRORED=0
DATA_DIR=""
DATA_FLAG=--data
WORKER_THREADS=""
DEVICE=auto
MODEL_PATH=""
DRY_RUN=0
EVAL_INTERVAL=10
EVALUATOR=1
BUILD=1
LOGDIR=""
TASK_LOGS=""
RESTART=1
MAX_RESTARTS=5
RESTART_DELAY=1
CHIEF_ARGS=()
PS_REPLICAS=0

die() { echo "train.sh: $*" >&2; exit 2; }
is_uint() { [[ "$1" =~ ^[0-9]+$ ]]; }

for arg in "$@"; do
  case "$arg" in
    -h|--help) sed -n '2,/^[^#]/ s/^# \{0,1\}//p' "$0"; exit 0 ;;
    --num_ps=*) NUM_PS="${arg#*=}"; CHIEF_ARGS+=("$arg") ;;
    --num_workers=*) NUM_WORKERS="${arg#*=}"; CHIEF_ARGS+=("$arg") ;;
    --data_dir=*|--data=*) DATA_DIR="${arg#*=}"; DATA_FLAG="${arg%%=*}" ;;
    --model=*)
      # A model file's path is resolved here: the chief starts elsewhere.
      m="${arg#*=}"
      if [ -f "$m" ]; then m="$(cd "$(dirname "$m")" && pwd)/$(basename "$m")"; fi
      MODEL_PATH="$m"
      CHIEF_ARGS+=("--model=$m") ;;
    --initial_weights=*)
      w="${arg#*=}"  # a path, or "archive"
      if [ -f "$w" ]; then w="$(cd "$(dirname "$w")" && pwd)/$(basename "$w")"; fi
      CHIEF_ARGS+=("--initial_weights=$w") ;;
    --strategy=multi_worker_mirrored) MIRRORED=1; CHIEF_ARGS+=("$arg") ;;
    --ps_replicas=*) PS_REPLICAS="${arg#*=}"; CHIEF_ARGS+=("$arg") ;;
    --worker_threads=*) WORKER_THREADS="${arg#*=}" ;;
    --device=*) DEVICE="${arg#*=}" ;;
    --dry_run) DRY_RUN=1 ;;
    --eval_interval_s=*) EVAL_INTERVAL="${arg#*=}" ;;
    --no_evaluator) EVALUATOR=0 ;;
    --no_build) BUILD=0 ;;
    --logdir=*) LOGDIR="${arg#*=}" ;;
    --task_logs=*) TASK_LOGS="${arg#*=}" ;;
    --no_restart) RESTART=0 ;;
    --max_restarts=*) MAX_RESTARTS="${arg#*=}" ;;
    --restart_delay_s=*) RESTART_DELAY="${arg#*=}" ;;
    --*) CHIEF_ARGS+=("$arg") ;;
    *) die "unexpected argument '$arg' (flags look like --name=value; try --help)" ;;
  esac
done
if [ "$MIRRORED" = 1 ]; then
  # The ring of workers sums the gradients: no ps tasks.
  [ -z "$NUM_PS" ] || [ "$NUM_PS" = 0 ] ||
    die "--num_ps=$NUM_PS: --strategy=multi_worker_mirrored runs no parameter servers"
  NUM_PS=0
else
  NUM_PS="${NUM_PS:-2}"
  is_uint "$NUM_PS" && [ "$NUM_PS" -ge 1 ] || die "--num_ps=$NUM_PS: must be a whole number >= 1"
fi
is_uint "$NUM_WORKERS" && [ "$NUM_WORKERS" -ge 1 ] || die "--num_workers=$NUM_WORKERS: must be a whole number >= 1"
[ -z "$WORKER_THREADS" ] || { is_uint "$WORKER_THREADS" && [ "$WORKER_THREADS" -ge 1 ] && [ "$WORKER_THREADS" -le 256 ]; } ||
  die "--worker_threads=$WORKER_THREADS: must be a whole number in [1, 256]"
[[ "$DEVICE" =~ ^(auto|cpu|cuda|cuda:(0|[1-9][0-9]?|1[0-9][0-9]|2[0-4][0-9]|25[0-5]))$ ]] ||
  die "--device=$DEVICE: must be auto, cpu, cuda or cuda:N (N in [0, 255])"
[[ "$MAX_RESTARTS" =~ ^[0-9]{1,9}$ ]] || die "--max_restarts=$MAX_RESTARTS: must be a whole number >= 0"
[[ "$RESTART_DELAY" =~ ^[0-9]{1,6}(\.[0-9]+)?$ ]] || die "--restart_delay_s=$RESTART_DELAY: must be a number of seconds >= 0"
MAX_RESTARTS=$((10#$MAX_RESTARTS))
# The delay in microseconds: whole seconds, then the first six decimals.
RESTART_DELAY_US="${RESTART_DELAY#*.}000000"
[[ "$RESTART_DELAY" == *.* ]] || RESTART_DELAY_US=000000
RESTART_DELAY_US=$((10#${RESTART_DELAY%%.*} * 1000000 + 10#${RESTART_DELAY_US:0:6}))

# 0. Where each task computes, and with how many threads.
# GPUs on this machine: GPU_COUNT, and where the number came from.
if [ -n "${PSCLUSTER_GPU_COUNT+x}" ]; then
  is_uint "$PSCLUSTER_GPU_COUNT" || die "PSCLUSTER_GPU_COUNT=$PSCLUSTER_GPU_COUNT: must be a whole number"
  GPU_COUNT=$((10#$PSCLUSTER_GPU_COUNT)); GPU_SOURCE="PSCLUSTER_GPU_COUNT"
elif [ -n "${CUDA_VISIBLE_DEVICES+x}" ]; then
  # CUDA reads the list up to its first invalid entry: "-1" hides every GPU.
  GPU_COUNT=0
  IFS=, read -ra entries <<<"$CUDA_VISIBLE_DEVICES"
  for e in "${entries[@]}"; do
    e="${e// /}"
    [ -z "$e" ] || [[ "$e" == -* ]] && break
    GPU_COUNT=$((GPU_COUNT + 1))
  done
  GPU_SOURCE="CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES"
elif command -v nvidia-smi >/dev/null 2>&1; then
  GPU_COUNT="$(nvidia-smi -L 2>/dev/null | grep -c '^GPU [0-9]')"
  GPU_SOURCE="nvidia-smi -L"
else
  GPU_COUNT=0; GPU_SOURCE="no nvidia-smi"
fi
CORES="$(nproc 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1)"
[ "$DEVICE" = cuda ] && [ "$GPU_COUNT" = 0 ] &&
  die "--device=cuda: no GPU found ($GPU_SOURCE); name one with --device=cuda:N, or use --device=cpu"
# place GPUS: sets WORKER_DEVICE[i], WORKER_NTHREADS[i] and EVAL_DEVICE for
# GPUS usable GPUs: round-robin like torchrun and Horovod, the evaluator on
# the last GPU (round-robin leaves it with the fewest workers).
declare -a WORKER_DEVICE=() WORKER_NTHREADS=()
place() {
  local gpus="$1" i cpu_workers=0 share
  for ((i = 0; i < NUM_WORKERS; i++)); do
    case "$DEVICE" in
      cpu) WORKER_DEVICE[i]=cpu ;;
      cuda:*) WORKER_DEVICE[i]="$DEVICE" ;;
      *) if [ "$gpus" -gt 0 ]; then WORKER_DEVICE[i]="cuda:$((i % gpus))"; else WORKER_DEVICE[i]=cpu; fi ;;
    esac
    [ "${WORKER_DEVICE[i]}" = cpu ] && cpu_workers=$((cpu_workers + 1))
  done
  case "$DEVICE" in
    cpu|cuda:*) EVAL_DEVICE="$DEVICE" ;;
    *) if [ "$gpus" -gt 0 ]; then EVAL_DEVICE="cuda:$((gpus - 1))"; else EVAL_DEVICE=cpu; fi ;;
  esac
  # The CPU workers share this machine's cores; a GPU worker needs one.
  share=$((CORES / (cpu_workers > 0 ? cpu_workers : 1)))
  [ "$share" -ge 1 ] || share=1
  for ((i = 0; i < NUM_WORKERS; i++)); do
    if [ -n "$WORKER_THREADS" ]; then WORKER_NTHREADS[i]="$WORKER_THREADS"
    elif [ "${WORKER_DEVICE[i]}" = cpu ]; then WORKER_NTHREADS[i]="$share"
    else WORKER_NTHREADS[i]=1; fi
  done
}
print_placement() {
  local i line=""
  for ((i = 0; i < NUM_WORKERS; i++)); do
    line+="${line:+, }worker$i ${WORKER_DEVICE[i]} threads=${WORKER_NTHREADS[i]}"
  done
  [ "$EVALUATOR" = 1 ] && line+=", evaluator $EVAL_DEVICE"
  echo "train.sh: devices (--device=$DEVICE, $GPU_COUNT GPU$([ "$GPU_COUNT" = 1 ] || echo s) ($GPU_SOURCE), $CORES cores): $line" >&2
}
# The worker asked questions before the run (--check_model, --device) is
# a daemon all the same: it needs a TF_CONFIG naming its task.
PROBE_TF_CONFIG='{"cluster": {"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"]}, "task": {"type": "worker", "index": 0}}'
# gpu_refuses_model: under auto, a model file the GPU does not run (a
# layer it lacks: Attention, LSTM, an Embedding's mask, several outputs...)
# computes on the CPU, saying why; a GPU named outright with one is an
# error named before anything starts. The worker binary answers
# (--check_model, on the host: no GPU needed); a dry run before the first
# build has none to ask, and places the GPUs unchecked.
gpu_refuses_model() {
  local verdict
  [ "$DEVICE" != cpu ] && [ "$GPU_COUNT" -gt 0 ] && [ -f "${MODEL_PATH:-}" ] &&
    [ -x "$ROOT/bazel-bin/worker/worker" ] || return 0
  verdict="$(TF_CONFIG="$PROBE_TF_CONFIG" \
    OPENBLAS_NUM_THREADS=1 "$ROOT/bazel-bin/worker/worker" --check_model="$MODEL_PATH" 2>&1 |
    grep -m1 '^check_model: ')"
  [[ "$verdict" == *": the GPU does not run it: "* ]] || return 0
  local why="${verdict#*: the GPU does not run it: }"
  [ "$DEVICE" = auto ] || die "--device=$DEVICE: $why"
  echo "train.sh: --device=auto: $why; computing on the CPU" >&2
  GPU_SOURCE="$GPU_COUNT from $GPU_SOURCE, not for this model"
  GPU_COUNT=0
  place 0
}
place "$GPU_COUNT"
if [ "$DRY_RUN" = 1 ]; then
  gpu_refuses_model
  print_placement
  exit 0
fi

# 1. Packages and binaries.
"$ROOT/deploy/install_deps.sh" --build_only || exit 1
if [ "$BUILD" = 1 ]; then
  echo "train.sh: building (bazel build //ps_server:ps_server //worker:worker //evaluator:evaluator //chief:chief)" >&2
  (cd "$ROOT" && bazel build --noshow_progress --ui_event_filters=-info \
      //ps_server:ps_server //worker:worker //evaluator:evaluator //chief:chief) || {
    echo "train.sh: build failed" >&2; exit 1; }
fi
BIN="$ROOT/bazel-bin"
for b in ps_server/ps_server worker/worker evaluator/evaluator chief/chief; do
  [ -x "$BIN/$b" ] || die "missing binary $BIN/$b (run without --no_build)"
done
gpu_refuses_model
# A GPU placement is tried once, on the highest GPU it uses: a worker
# checks its --device before its data (exit 2 when the device cannot be
# used, 4 for the missing data). Under auto an unusable GPU means the CPU,
# as in the worker itself.
if [ "${WORKER_DEVICE[0]}" != cpu ]; then
  check="$DEVICE"
  [[ "$DEVICE" == cuda:* ]] || check="cuda:$((GPU_COUNT - 1))"
  probe="$(TF_CONFIG="$PROBE_TF_CONFIG" \
    OPENBLAS_NUM_THREADS=1 "$BIN/worker/worker" --device="$check" \
    --data_dir=/nonexistent/pscluster-device-check 2>&1)"
  if [ $? -ne 4 ]; then
    why="$(grep -m1 'error: ' <<<"$probe" || tail -n 1 <<<"$probe")"
    why="${why#error: }"
    why="${why#--device=$check: }"
    [ "$DEVICE" = auto ] || die "--device=$DEVICE: $why"
    echo "train.sh: --device=auto: the GPUs cannot be used ($why); computing on the CPU" >&2
    GPU_SOURCE="$GPU_COUNT from $GPU_SOURCE, none usable"
    GPU_COUNT=0
    place 0
  fi
fi
print_placement

# 2. Data.
have_mnist() {
  for f in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
    [ -f "$1/$f.gz" ] || [ -f "$1/$f" ] || return 1
  done
}
have_npy() { [ -f "$1/x_train.npy" ] && [ -f "$1/y_train.npy" ] && [ -f "$1/x_test.npy" ] && [ -f "$1/y_test.npy" ]; }
# Criteo logs (model/criteo_dataset.h): both splits, plain or gzip.
have_criteo() {
  { [ -f "$1/train.txt" ] || [ -f "$1/train.txt.gz" ]; } &&
    { [ -f "$1/test.txt" ] || [ -f "$1/test.txt.gz" ]; }
}
if [ -n "$DATA_DIR" ] && [ -f "$DATA_DIR" ]; then
  case "$DATA_DIR" in
    *.npz) ;;
    *) die "$DATA_FLAG=$DATA_DIR is a file but not a NumPy .npz archive" ;;
  esac
elif [ -n "$DATA_DIR" ]; then
  have_mnist "$DATA_DIR" || have_npy "$DATA_DIR" || have_criteo "$DATA_DIR" || die "$DATA_FLAG=$DATA_DIR does not hold the four MNIST IDX files (train-images-idx3-ubyte[.gz], ...), nor x_train.npy, y_train.npy, x_test.npy and y_test.npy, nor Criteo's train.txt and test.txt[.gz]"
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
if [ -f "$DATA_DIR" ]; then
  DATA_DIR="$(cd "$(dirname "$DATA_DIR")" && pwd)/$(basename "$DATA_DIR")"
else
  DATA_DIR="$(cd "$DATA_DIR" && pwd)"
fi

# 3. Free ports on 127.0.0.1, one per task.
TOTAL=$((NUM_PS + NUM_WORKERS + 1 + EVALUATOR))
# A gRPC port and a metrics port per task, and each ps's data-plane port
# (left to the kernel, it could take a port picked here for a task that
# has not started yet).
NEEDED=$((2 * TOTAL + NUM_PS))
PORTS=()
source "$ROOT/deploy/local/free_ports.sh"   # pick_free_ports
pick_free_ports "$NEEDED"
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
# The launcher's own messages go to $STDERR: while it watches the tasks its
# fd 2 is /dev/null, which keeps bash's notices of killed jobs out.
exec {STDERR}>&2
# The run ends (STOPPING=1, and nothing is started again) when the chief
# ends, when a task has no restarts left, or on Ctrl-C / TERM.
STOPPING=0
OUT_OF_RESTARTS=0
TASK_FAILED_RC=""        # a ps or worker that exited 2-4: the run ends with it
INTERRUPTED=0
# Per task (by name: ps0, worker1, chief, ...): what starts it, the same on
# every start, and the state of its current process.
declare -A TASK_ID=() TASK_CMD=() TASK_LOG=()  # ps:0; command line; log file
declare -A PIDS=()        # the current process
declare -A ENDED=()       # exit status of the current process, once it ended
declare -A RESTARTS=()    # how often it was started again
declare -A RESTART_AT=()  # set while a restart waits: when, in µs since the epoch
ORDER=()
METRICS=""
NEXT_METRICS_PORT=$TOTAL
# launch NAME: starts the task's process. Its output is prefixed with its
# name and copied to its log, which a restart appends to.
launch() {
  local name="$1" append=()
  [ "${RESTARTS[$name]}" -gt 0 ] && append=(-a)
  eval "set -- ${TASK_CMD[$name]}"
  # setsid: a Ctrl-C in the terminal reaches only this script, which then
  # stops every task once, in order.
  TF_CONFIG="$(tf_config "${TASK_ID[$name]%:*}" "${TASK_ID[$name]#*:}")" setsid "$@" \
    > >(trap '' INT TERM; tee "${append[@]}" "${TASK_LOG[$name]}" | sed -u "s/^/[$name] /") 2>&1 \
    {STDERR}>&- &
  PIDS[$name]=$!
  unset 'ENDED[$name]'
  if [ "$STOPPING" = 1 ]; then  # Ctrl-C came while it started
    kill -INT "${PIDS[$name]}" 2>/dev/null
  fi
}
start() {  # start NAME TYPE INDEX BINARY ARGS...
  local name="$1" type="$2" index="$3"; shift 3
  local mport="${PORTS[$NEXT_METRICS_PORT]}"
  NEXT_METRICS_PORT=$((NEXT_METRICS_PORT + 1))
  METRICS+=" $name:$mport"
  TASK_ID[$name]="$type:$index"
  TASK_CMD[$name]="$(printf '%q ' "$@" --metrics_port="$mport")"
  TASK_LOG[$name]="$RUN_DIR/$name.log"
  [ -n "$TASK_LOGS" ] && TASK_LOG[$name]="$TASK_LOGS/$name.log"
  RESTARTS[$name]=0
  ORDER+=("$name")
  launch "$name"
}
# Every ps keeps a backup store for each of the chief's --ps_replicas (one
# by default; the chief judges the value).
BACKUP_STORES=1
if is_uint "$PS_REPLICAS" && [ "$PS_REPLICAS" -gt 1 ] && [ "$PS_REPLICAS" -le 8 ]; then
  BACKUP_STORES="$PS_REPLICAS"
fi
for ((i = 0; i < NUM_PS; i++)); do
  start "ps$i" ps "$i" "$BIN/ps_server/ps_server" --data_port="${PORTS[$((2 * TOTAL + i))]}" \
    --backup_stores="$BACKUP_STORES"
done
for ((i = 0; i < NUM_WORKERS; i++)); do
  start "worker$i" worker "$i" "$BIN/worker/worker" --data_dir="$DATA_DIR" \
    --device="${WORKER_DEVICE[i]}" --threads="${WORKER_NTHREADS[i]}"
done
if [ "$EVALUATOR" = 1 ]; then
  start evaluator evaluator 0 "$BIN/evaluator/evaluator" --data_dir="$DATA_DIR" \
    --device="$EVAL_DEVICE" --eval_interval_s="$EVAL_INTERVAL" --logdir="$LOGDIR"
fi
# Without the evaluator the chief scores the final weights on the test set.
CHIEF_DATA=()
[ "$EVALUATOR" = 0 ] && CHIEF_DATA=(--data_dir="$DATA_DIR")
start chief chief 0 "$BIN/chief/chief" --logdir="$LOGDIR" "${CHIEF_DATA[@]}" "${CHIEF_ARGS[@]}"
echo "train.sh: Prometheus metrics on 127.0.0.1:${METRICS# } (name:port, path /metrics)" >&2
echo "train.sh: started ${#ORDER[@]} tasks (${NUM_PS} ps, ${NUM_WORKERS} workers, chief$([ "$EVALUATOR" = 1 ] && echo ", evaluator")); data $DATA_DIR" >&2

alive() { [ -z "${ENDED[$1]+x}" ] && [ -z "${RESTART_AT[$1]+x}" ]; }
# A task started in the background ignores SIGINT until its main blocks it
# for its signal thread (common/task_server.h); one sent before then is
# lost (a worker still loading its libraries). Such a task is sent SIGINT
# again once it blocks it, and only once: a second SIGINT makes a daemon
# exit at once.
declare -A HEARD=()  # tasks sent SIGINT while they were blocking it
blocks_sigint() {  # blocks_sigint PID: whether its SigBlk mask holds SIGINT (bit 2)
  local mask
  mask="$(sed -n 's/^SigBlk:[[:space:]]*//p' "/proc/$1/status" 2>/dev/null)"
  [ -n "$mask" ] && (( (16#$mask >> 1) & 1 ))
}
SIGNALLED=0  # stop_tasks was called
stop_tasks() {  # stop_tasks [chief]: SIGINT to every task still running; the chief too if asked
  SIGNALLED=1
  for n in "${ORDER[@]}"; do
    [ "$n" = chief ] && [ "${1:-}" != chief ] && continue
    [ -n "${HEARD[$n]+x}" ] && continue
    alive "$n" || continue
    blocks_sigint "${PIDS[$n]}" && HEARD[$n]=1
    kill -INT "${PIDS[$n]}" 2>/dev/null
  done
}
# Ctrl-C / TERM: pass it on; the chief then tells every task to exit. (The
# log pipes ignore both, so they drain until their task ends.)
forward() {
  [ "$INTERRUPTED" = 1 ] && return
  INTERRUPTED=1
  STOPPING=1
  echo "train.sh: interrupted; stopping the tasks" >&"$STDERR"
  stop_tasks chief
}
trap forward INT TERM

how_it_ended() {  # how_it_ended STATUS -> "status 1" or "killed by SIGKILL"
  local sig
  if [ "$1" -gt 128 ] && sig="$(kill -l $(($1 - 128)) 2>/dev/null)"; then
    echo "killed by SIG$sig"
  else
    echo "status $1"
  fi
}
# schedule_restart NAME STATUS: starts the task again after the delay, or,
# when its restarts are used up, stops the run. Returns 1 in that case.
schedule_restart() {
  local name="$1" id="${TASK_ID[$1]}" how
  how="$(how_it_ended "$2")"
  if [ "${RESTARTS[$name]}" -ge "$MAX_RESTARTS" ]; then
    echo "[launcher] $id exited ($how); no restarts left (--max_restarts=$MAX_RESTARTS); stopping the run" >&"$STDERR"
    STOPPING=1
    OUT_OF_RESTARTS=1
    stop_tasks chief
    return 1
  fi
  RESTARTS[$name]=$((RESTARTS[$name] + 1))
  echo "[launcher] $id exited ($how); restarting (${RESTARTS[$name]}/$MAX_RESTARTS)" >&"$STDERR"
  RESTART_AT[$name]=$((${EPOCHREALTIME//[!0-9]/} + RESTART_DELAY_US))
}
# task_ended NAME: decides what follows the end of a task's process.
task_ended() {
  local name="$1" rc="${ENDED[$1]}"
  if [ "$name" = chief ]; then
    # Exit statuses end the run; only a signal from elsewhere restarts it.
    # 130 is the chief's own status when SIGINT or SIGTERM stopped it (it
    # catches both), not a death by signal.
    if [ "$rc" -gt 128 ] && [ "$rc" -ne 130 ] && [ "$STOPPING" = 0 ] && [ "$RESTART" = 1 ]; then
      # Killed while exiting, after its final line: the weights are written
      # and the ps have shut down, so a new chief would wait for them forever.
      if grep -q '^final:' "${TASK_LOG[chief]}"; then
        echo "[launcher] ${TASK_ID[chief]} exited ($(how_it_ended "$rc")) after its final line; the run is complete, not restarting it" >&"$STDERR"
        CHIEF_RC=0
        return
      fi
      schedule_restart chief "$rc" && return
    fi
    CHIEF_RC="$rc"
    return
  fi
  if [ "$rc" -eq 0 ] || [ "$STOPPING" = 1 ]; then
    return  # done, or stopped by the chief or by us
  fi
  # 2 (bad flags or TF_CONFIG), 3 (the chief gave the run up) and 4 (data
  # missing or unreadable): starting it again would change nothing.
  if [ "$rc" -ge 2 ] && [ "$rc" -le 4 ]; then
    echo "[launcher] ${TASK_ID[$name]} exited ($(how_it_ended "$rc")); not restarting it (exit codes 2-4 are final)" >&"$STDERR"
    # A ps or worker that cannot run (its flags, or its data) stops the
    # run: the chief would wait for it in vain. An evaluator's run goes on.
    if [ "${TASK_ID[$name]%%:*}" != evaluator ]; then
      echo "[launcher] stopping the run: ${TASK_ID[$name]} cannot take part" >&"$STDERR"
      STOPPING=1
      TASK_FAILED_RC="$rc"
      stop_tasks chief
    fi
    return
  fi
  if [ "$RESTART" = 0 ]; then
    echo "[launcher] ${TASK_ID[$name]} exited ($(how_it_ended "$rc")); not restarting it (--no_restart)" >&"$STDERR"
    return
  fi
  schedule_restart "$name" "$rc"
}

# 5. Watch the tasks until the chief has ended, restarting those that died.
# (Polled: bash's wait can lose an exit status when a trapped signal
# interrupts it.)
CHIEF_RC=""
while [ -z "$CHIEF_RC" ]; do
  sleep 0.2
  for n in "${ORDER[@]}"; do
    if [ -n "${RESTART_AT[$n]+x}" ]; then
      if [ "$STOPPING" = 1 ]; then  # the run ends: no restart
        unset 'RESTART_AT[$n]'
        if [ "$n" = chief ]; then
          CHIEF_RC="${ENDED[chief]}"
          [ "$INTERRUPTED" = 1 ] && CHIEF_RC=130
        fi
      elif [ "${EPOCHREALTIME//[!0-9]/}" -ge "${RESTART_AT[$n]}" ]; then
        unset 'RESTART_AT[$n]'
        launch "$n"
      fi
      continue
    fi
    [ -n "${ENDED[$n]+x}" ] && continue
    kill -0 "${PIDS[$n]}" 2>/dev/null && continue
    wait "${PIDS[$n]}"; ENDED[$n]=$?
    task_ended "$n"
  done
done 2>/dev/null
STOPPING=1
# A chief that failed may not have told the others to stop: do it now.
if [ "$CHIEF_RC" -ne 0 ] && [ "$INTERRUPTED" = 0 ] && [ "$OUT_OF_RESTARTS" = 0 ]; then
  stop_tasks
fi
# Then wait for everyone else, 30 s in all.
FAILED=()
GIVE_UP=$((${EPOCHREALTIME//[!0-9]/} + 30000000))
for n in "${ORDER[@]}"; do
  [ "$n" = chief ] && continue
  unset 'RESTART_AT[$n]'
  if [ -z "${ENDED[$n]+x}" ]; then
    pid="${PIDS[$n]}"
    # A task told to stop while it was still starting is told again.
    while kill -0 "$pid" 2>/dev/null && [ "${EPOCHREALTIME//[!0-9]/}" -lt "$GIVE_UP" ]; do
      sleep 0.1
      [ "$SIGNALLED" = 1 ] && stop_tasks
    done
    if kill -0 "$pid" 2>/dev/null; then
      echo "train.sh: $n still running 30 s after the chief ended; terminating it" >&2
      kill -TERM "$pid" 2>/dev/null; sleep 1; kill -KILL "$pid" 2>/dev/null
    fi
    wait "$pid"; ENDED[$n]=$?
  fi
  [ "${ENDED[$n]}" -ne 0 ] && FAILED+=("$n exited ${ENDED[$n]}")
done
sleep 0.2  # let the log pipes drain
[ ${#FAILED[@]} -gt 0 ] && echo "train.sh: ${FAILED[*]}" >&2
RESTARTED=()
for n in "${ORDER[@]}"; do
  [ "${RESTARTS[$n]}" -gt 0 ] && RESTARTED+=("$n ${RESTARTS[$n]}x")
done
if [ ${#RESTARTED[@]} -gt 0 ]; then
  printf -v list '%s, ' "${RESTARTED[@]}"
  echo "train.sh: restarted ${list%, }" >&2
fi
FINAL="$(grep '^final:' "${TASK_LOG[chief]}" | tail -n 1)"
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
[ "$OUT_OF_RESTARTS" = 1 ] && [ "$INTERRUPTED" = 0 ] && CHIEF_RC=1
# A task's final status (a worker's bad data, 4) is the run's, unless the
# chief itself refused its input (2: the cause; the others were told to stop).
[ -n "$TASK_FAILED_RC" ] && [ "$INTERRUPTED" = 0 ] && [ "$CHIEF_RC" != 2 ] &&
  CHIEF_RC="$TASK_FAILED_RC"
exit "$CHIEF_RC"
