#!/usr/bin/env bash
# Tests deploy/local/train.sh, the README's main command, end to end: its
# flag handling, where it places each task (--dry_run, with the GPU count
# injected through PSCLUSTER_GPU_COUNT or CUDA_VISIBLE_DEVICES: worker i on
# cuda:(i mod G), the evaluator on the last GPU, the CPU workers sharing
# nproc's cores), a short real run (the mlp, one epoch) that must end with the
# `final:` line and exit 0, Ctrl-C, which must stop every task, and the
# restart of a task that died (the evaluator, killed with SIGKILL): started
# again by default, not with --no_restart, the run stopped once the task has
# no restarts left; and the chief killed with SIGKILL mid-run: started again,
# it resumes the run, which ends with the `final:` line and exit 0.
#
# Usage: tests/train_sh_test.sh [MNIST_DIR]
# Needs the daemons built in bazel-bin (tests/run_all.sh builds them first).
# Prints PASS:/FAIL:/SKIP: lines; exit status 0 when nothing failed.
set -uo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
train="$repo/deploy/local/train.sh"
data="${1:-${PSCLUSTER_DATA_DIR:-$repo/../shared/data/mnist}}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# shellcheck source=tests/launcher_common.sh
. "$repo/tests/launcher_common.sh"

source "$(dirname "${BASH_SOURCE[0]}")/test_lib.sh"   # pass, fail, skip, finish

# expect NAME STATUS PATTERN ARGS...: runs train.sh, checks its exit status
# and that its output matches the extended regex PATTERN.
expect() {
  local name="$1" want="$2" pattern="$3"; shift 3
  local out rc
  out="$("$train" --no_build "$@" 2>&1)"; rc=$?
  if [ "$rc" -ne "$want" ]; then
    fail "$name: exit $rc, wanted $want"; echo "$out" | tail -n 20; return
  fi
  if ! grep -qE -- "$pattern" <<<"$out"; then
    fail "$name: output lacks /$pattern/"; echo "$out" | tail -n 20; return
  fi
  pass "$name"
}

expect "--help exits 0 and lists the launcher flags" 0 "--num_workers=N" --help
expect "a bad --num_ps exits 2 naming it" 2 "--num_ps=x" --num_ps=x
expect "a stray argument exits 2 naming it" 2 "unexpected argument 'epochs'" epochs
expect "a --data_dir without MNIST exits 2 naming it" 2 "--data_dir=$tmp does not hold" --data_dir="$tmp"
expect "--help lists the restart flags" 0 "--max_restarts=N .*default 5" --help
expect "a bad --max_restarts exits 2 naming it" 2 "--max_restarts=abc: must be" --max_restarts=abc
expect "a bad --restart_delay_s exits 2 naming it" 2 "--restart_delay_s=-1: must be" --restart_delay_s=-1
# Accepted: checked before the data, which is what the launcher then names.
expect "--no_restart, --max_restarts and --restart_delay_s are accepted" 2 "--data_dir=$tmp does not hold" \
  --no_restart --max_restarts=0 --restart_delay_s=0.5 --data_dir="$tmp"
expect "a bad chief flag stops the run with the chief's message" 2 "--mode=fast" --mode=fast --data_dir="$data"

# Placement (--dry_run: printed, nothing started). PSCLUSTER_GPU_COUNT
# stands in for the GPUs this machine lacks; round-robin as torchrun does,
# the evaluator on the last GPU; an explicit cuda:N or cpu is every task's.
cores="$(nproc)"
unset PSCLUSTER_GPU_COUNT CUDA_VISIBLE_DEVICES
expect "--help names --device" 0 "--device=D +where the workers and the evaluator compute \(default" --help
expect "--help gives --worker_threads's default" 0 "--worker_threads=N +compute threads per worker \(default: a CPU worker" --help
expect "--help names --dry_run" 0 "--dry_run +print where each task would compute" --help
PSCLUSTER_GPU_COUNT=2 expect "2 GPUs, 3 workers: cuda:0, cuda:1, cuda:0, the evaluator on cuda:1, one thread each" 0 \
  ": worker0 cuda:0 threads=1, worker1 cuda:1 threads=1, worker2 cuda:0 threads=1, evaluator cuda:1$" \
  --dry_run --num_workers=3
PSCLUSTER_GPU_COUNT=2 expect "2 GPUs, --device=cuda: the same placement" 0 \
  ": worker0 cuda:0 threads=1, worker1 cuda:1 threads=1, worker2 cuda:0 threads=1, evaluator cuda:1$" \
  --dry_run --num_workers=3 --device=cuda
PSCLUSTER_GPU_COUNT=0 expect "no GPU, 3 workers: all on the CPU, $cores cores shared ($((cores / 3 > 0 ? cores / 3 : 1)) each)" 0 \
  ": worker0 cpu threads=$((cores / 3 > 0 ? cores / 3 : 1)), worker1 cpu threads=$((cores / 3 > 0 ? cores / 3 : 1)), worker2 cpu threads=$((cores / 3 > 0 ? cores / 3 : 1)), evaluator cpu$" \
  --dry_run --num_workers=3
PSCLUSTER_GPU_COUNT=0 expect "no GPU, 1 worker: it gets all $cores cores" 0 \
  ": worker0 cpu threads=$cores, evaluator cpu$" --dry_run --num_workers=1
PSCLUSTER_GPU_COUNT=2 expect "an explicit --device=cuda:1 is every worker's and the evaluator's" 0 \
  ": worker0 cuda:1 threads=1, worker1 cuda:1 threads=1, worker2 cuda:1 threads=1, evaluator cuda:1$" \
  --dry_run --num_workers=3 --device=cuda:1
PSCLUSTER_GPU_COUNT=2 expect "--device=cpu with GPUs present: all on the CPU" 0 \
  ": worker0 cpu threads=$((cores / 2 > 0 ? cores / 2 : 1)), worker1 cpu threads=$((cores / 2 > 0 ? cores / 2 : 1)), evaluator cpu$" \
  --dry_run --device=cpu
PSCLUSTER_GPU_COUNT=2 expect "an explicit --worker_threads=3 wins, on a GPU too" 0 \
  ": worker0 cuda:0 threads=3, worker1 cuda:1 threads=3, evaluator cuda:1$" --dry_run --worker_threads=3
CUDA_VISIBLE_DEVICES=3,5,7 expect "CUDA_VISIBLE_DEVICES=3,5,7 is 3 GPUs" 0 \
  "3 GPUs \(CUDA_VISIBLE_DEVICES=3,5,7\).*: worker0 cuda:0 threads=1, worker1 cuda:1 threads=1, evaluator cuda:2$" --dry_run
CUDA_VISIBLE_DEVICES= expect "an empty CUDA_VISIBLE_DEVICES is no GPU" 0 \
  "0 GPUs \(CUDA_VISIBLE_DEVICES=\).*: worker0 cpu threads=[0-9]+, worker1 cpu threads=[0-9]+, evaluator cpu$" --dry_run
PSCLUSTER_GPU_COUNT=0 expect "--device=cuda without a GPU exits 2 naming it" 2 "--device=cuda: no GPU found" --device=cuda
# A model file the GPU does not run (DIN: Attention over a masked history)
# means the CPU under auto, saying why, and exit 2 with a GPU named; one it
# runs (DeepFM, Wide&Deep: Embedding, Dense) goes to the GPUs. The worker
# binary answers (--check_model); a build without CUDA runs no model on a
# GPU, and says that instead.
din="$repo/deploy/models/ctr_din.json"
PSCLUSTER_GPU_COUNT=2 expect "auto with DIN: all on the CPU, the placement saying why" 0 \
  "0 GPUs \(2 from PSCLUSTER_GPU_COUNT, not for this model\).*: worker0 cpu threads=[0-9]+, worker1 cpu threads=[0-9]+, evaluator cpu$" \
  --dry_run --model="$din"
if TF_CONFIG='{"cluster": {"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"]}, "task": {"type": "worker", "index": 0}}' \
   "$repo/bazel-bin/worker/worker" --check_model=cnn 2>/dev/null | grep -q ': a GPU runs it$'; then
  PSCLUSTER_GPU_COUNT=2 expect "auto with DIN: the launcher names the layer the GPU lacks" 0 \
    "--device=auto: model \"ctr_din\": layer interest: Attention does not run on the GPU yet.*computing on the CPU" \
    --dry_run --model="$din"
  PSCLUSTER_GPU_COUNT=2 expect "--device=cuda:1 with DIN exits 2 naming the layer" 2 \
    "--device=cuda:1: model \"ctr_din\": layer interest: Attention does not run on the GPU" \
    --dry_run --device=cuda:1 --model="$din"
  PSCLUSTER_GPU_COUNT=2 expect "auto with DeepFM (Embedding on the GPU): the GPUs" 0 \
    "2 GPUs \(PSCLUSTER_GPU_COUNT\).*: worker0 cuda:0 threads=1, worker1 cuda:1 threads=1, evaluator cuda:1$" \
    --dry_run --model="$repo/deploy/models/ctr_deepfm.json"
  PSCLUSTER_GPU_COUNT=2 expect "--device=cuda:1 with Wide&Deep: the GPU named" 0 \
    ": worker0 cuda:1 threads=1, worker1 cuda:1 threads=1, evaluator cuda:1$" \
    --dry_run --device=cuda:1 --model="$repo/deploy/models/ctr_wide_deep.json"
else
  PSCLUSTER_GPU_COUNT=2 expect "auto with DeepFM in a build without CUDA: the CPU, saying so" 0 \
    "--device=auto: this binary was built without CUDA.*computing on the CPU" \
    --dry_run --model="$repo/deploy/models/ctr_deepfm.json"
  PSCLUSTER_GPU_COUNT=2 expect "--device=cuda:1 with DIN in a build without CUDA exits 2 saying so" 2 \
    "--device=cuda:1: this binary was built without CUDA" \
    --dry_run --device=cuda:1 --model="$din"
fi
# Before it starts them, the launcher has a worker check the highest GPU it
# would use: under auto one it cannot use means the CPU, under cuda exit 2.
# (Checked before the data, which is what the launcher then names.)
if [ "$(nvidia-smi -L 2>/dev/null | grep -c '^GPU [0-9]')" -lt 2 ]; then
  PSCLUSTER_GPU_COUNT=2 expect "auto with a GPU the worker cannot use (cuda:1): all on the CPU" 2 \
    "^train.sh: devices \(--device=auto, 0 GPUs \(2 from PSCLUSTER_GPU_COUNT, none usable\).*: worker0 cpu threads=[0-9]+, worker1 cpu threads=[0-9]+, evaluator cpu$" \
    --data_dir="$tmp"
  PSCLUSTER_GPU_COUNT=2 expect "--device=cuda with a GPU the worker cannot use (cuda:1) exits 2 naming it" 2 \
    "^train.sh: --device=cuda: cuda:1 (cannot be used|does not exist)" --device=cuda --data_dir="$tmp"
else
  skip "[gpu] a GPU the worker cannot use: this machine has cuda:1"
fi
expect "a bad --device exits 2 naming it" 2 "--device=gpu: must be auto, cpu, cuda or cuda:N" --device=gpu
expect "a bad --worker_threads exits 2 naming it" 2 "--worker_threads=0: must be" --worker_threads=0

if ! has_mnist "$data"; then
  skip "training runs: no MNIST in '$data' (pass a folder or set PSCLUSTER_DATA_DIR)"
else
  # A real run: every task's lines are prefixed, progress is shown, the last
  # line is the chief's final line, and the script exits 0.
  out="$("$train" --no_build --data_dir="$data" --model=mlp --epochs=1 --logdir="$tmp/run1" 2>&1)"; rc=$?
  last="$(tail -n 1 <<<"$out")"
  # (The mlp, one epoch, sync: 0.9256 in every run; see tests/cluster_test.cc.)
  if [ "$rc" -eq 0 ] && [[ "$last" =~ ^final:\ test_accuracy=0\.9[2-9] ]] &&
     grep -q '^\[worker1\] ' <<<"$out" && grep -q '^\[ps1\] ' <<<"$out" &&
     grep -qE '^\[chief\] .* epoch 1/1 step [0-9]+ .*examples/s .* loss .* acc .* eta ' <<<"$out" &&
     grep -q '^\[evaluator\] .*eval: step=' <<<"$out" && ! grep -q 'exited [1-9]' <<<"$out" &&
     [ -f "$tmp/run1/model.safetensors" ] && ls "$tmp"/run1/events.out.tfevents.*.chief >/dev/null &&
     ls "$tmp"/run1/events.out.tfevents.*.evaluator >/dev/null &&
     grep -qE 'Prometheus metrics on 127.0.0.1:ps0:[0-9]+ ' <<<"$out" &&
     grep -qE '^train.sh: devices \(.*\): worker0 (cpu|cuda:[0-9]+) threads=[0-9]+, worker1 ' <<<"$out" &&
     grep -qE '^\[worker1\] .*compute threads: [0-9]+ \(--threads\)' <<<"$out"; then
    pass "a one-epoch run ends with '$last' and exit 0, leaving TensorBoard events and model.safetensors; the launcher names each task's device and threads, the workers take them"
  else
    fail "a one-epoch run (exit $rc, last line '$last')"; echo "$out" | tail -n 30
  fi
  # Each ps's data plane listens on a port of the launcher's choosing, apart
  # from every task's gRPC and metrics port.
  data_ports="$(grep -oE '^\[ps[0-9]+\] .*tcp data plane on port [0-9]+' <<<"$out" | grep -oE '[0-9]+$' | sort)"
  other_ports="$( { grep -oE 'gRPC on 0\.0\.0\.0:[0-9]+' <<<"$out" | grep -oE '[0-9]+$';
                    grep -oE 'Prometheus metrics on 127\.0\.0\.1:.*' <<<"$out" | grep -oE ':[0-9]+' | tr -d ':'; } | sort -u)"
  if [ "$(wc -l <<<"$data_ports")" -eq 2 ] && [ "$(sort -u <<<"$data_ports" | wc -l)" -eq 2 ] &&
     [ -n "$other_ports" ] && [ -z "$(comm -12 <(echo "$data_ports") <(echo "$other_ports"))" ]; then
    pass "each ps's data plane has a port of its own ($(echo $data_ports)), apart from the tasks' gRPC and metrics ports"
  else
    fail "data-plane ports '$(echo $data_ports)' against the tasks' ports '$(echo $other_ports)'"
  fi

  # --no_evaluator: the chief, given the data folder, scores the final
  # weights itself (the same 0.9256).
  out="$("$train" --no_build --no_evaluator --data_dir="$data" --model=mlp --epochs=1 --logdir="$tmp/run0" 2>&1)"; rc=$?
  last="$(tail -n 1 <<<"$out")"
  if [ "$rc" -eq 0 ] && [[ "$last" =~ ^final:\ test_accuracy=0\.9[2-9] ]] &&
     grep -q '^\[chief\] .*eval: step=.*(final, by the chief' <<<"$out" &&
     ! grep -q '^\[evaluator\]' <<<"$out"; then
    pass "--no_evaluator: the chief evaluates, the run ends with '$last'"
  else
    fail "--no_evaluator (exit $rc, last line '$last')"; echo "$out" | tail -n 30
  fi

  # Ctrl-C: SIGINT to the launcher stops every task; the chief exits 130.
  # (A background job starts with SIGINT ignored; perl, essential on Debian,
  # restores the default before exec, as a terminal's foreground job has it.)
  perl -e '$SIG{INT} = "DEFAULT"; exec @ARGV or die "exec: $!"' -- "$train" --no_build --data_dir="$data" --model=mlp --epochs=1000 --task_logs="$tmp/logs" --logdir="$tmp/runs" \
    > "$tmp/ctrlc.out" 2>&1 &
  pid=$!
  for _ in $(seq 1 600); do
    grep -q 'epoch 1/1000 step' "$tmp/ctrlc.out" 2>/dev/null && break
    sleep 0.1
  done
  kill -INT "$pid"
  for _ in $(seq 1 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then
    # What it waits for (seen once on CI, not reproduced since): the tasks
    # still running and the last lines of the run.
    still=""
    for b in ps_server/ps_server worker/worker evaluator/evaluator chief/chief; do
      n="$(launcher_children "$pid" "$b" | wc -l)"
      [ "$n" -gt 0 ] && still+=" ${b#*/} x$n"
    done
    fail "Ctrl-C: the launcher still runs 30 s later; its tasks still running:${still:- none}"
    tail -n 15 "$tmp/ctrlc.out"
    for b in ps_server/ps_server worker/worker evaluator/evaluator chief/chief; do
      launcher_children "$pid" "$b" | xargs -r kill -KILL
    done
    kill -KILL "$pid"
  else
    wait "$pid"; rc=$?
    left="$(grep -l "" "$tmp"/logs/*.log 2>/dev/null | wc -l)"
    if [ "$rc" -eq 130 ] && grep -q 'interrupted; stopping the tasks' "$tmp/ctrlc.out" &&
       ! grep -q 'exited [1-9]' "$tmp/ctrlc.out" && [ "$left" -eq 6 ] &&
       grep -q 'SIGINT received' "$tmp/logs/ps0.log"; then
      pass "Ctrl-C stops all 6 tasks cleanly; the launcher exits 130"
    else
      fail "Ctrl-C (exit $rc)"; tail -n 20 "$tmp/ctrlc.out"
    fi
  fi

  # Restarts. Each run has its own --logdir, which the command lines of its
  # evaluator and chief carry: that finds their processes.
  task_pid() {  # task_pid BINARY LOGDIR, BINARY: evaluator/evaluator or chief/chief
    local d args
    for d in /proc/[0-9]*; do
      mapfile -d '' -t args 2>/dev/null < "$d/cmdline" || continue
      [[ " ${args[*]} " == *"/$1 "* && " ${args[*]} " == *" --logdir=$2 "* ]] &&
        { echo "${d#/proc/}"; return 0; }
    done
    return 1
  }
  evaluator_pid() { task_pid evaluator/evaluator "$1"; }  # evaluator_pid LOGDIR
  # kill_task BINARY OUT LOGDIR [REGEX]: once OUT has a line that matches
  # REGEX (default: the chief's first progress line), SIGKILL to the task;
  # prints its pid.
  kill_task() {
    local p pattern="${4:-^\[chief\] .* epoch 1/[0-9]* step }"
    for _ in $(seq 1 300); do
      grep -qE "$pattern" "$2" 2>/dev/null && break
      sleep 0.1
    done
    p="$(task_pid "$1" "$3")" || return 1
    kill -KILL "$p" && echo "$p"
  }
  kill_evaluator() { kill_task evaluator/evaluator "$@"; }  # kill_evaluator OUT LOGDIR
  # wait_for PID: waits (at most 60 s) for a launcher in the background;
  # sets rc to its exit status, or 124 after killing it.
  wait_for() {
    for _ in $(seq 1 600); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$1" 2>/dev/null; then kill -TERM "$1"; sleep 5; rc=124; return; fi
    wait "$1"; rc=$?
  }

  # Default: the killed evaluator is started again (same TF_CONFIG and port:
  # the chief's final evaluation reaches it), and the run ends as usual.
  "$train" --no_build --data_dir="$data" --model=mlp --epochs=2 \
    --log_every_s=0.5 --logdir="$tmp/restart" > "$tmp/restart.out" 2>&1 &
  pid=$!
  killed="$(kill_evaluator "$tmp/restart.out" "$tmp/restart")"
  wait_for "$pid"
  last="$(tail -n 1 "$tmp/restart.out")"
  if [ -n "$killed" ] && [ "$rc" -eq 0 ] && [[ "$last" =~ ^final:\ test_accuracy= ]] &&
     grep -q '^\[launcher\] evaluator:0 exited (killed by SIGKILL); restarting (1/5)$' "$tmp/restart.out" &&
     [ "$(grep -c '^\[evaluator\] .*compute device: ' "$tmp/restart.out")" -eq 2 ] &&
     grep -q '^\[evaluator\] .*eval: step=.*(final)' "$tmp/restart.out" &&
     grep -q 'restarted evaluator 1x' "$tmp/restart.out" &&
     ! grep -qE 'exited [1-9]|Killed' "$tmp/restart.out"; then
    pass "an evaluator killed with SIGKILL is restarted and the run ends with '$last' and exit 0"
  else
    fail "restarting a killed evaluator (killed pid '$killed', exit $rc, last line '$last')"
    tail -n 30 "$tmp/restart.out"
  fi

  # --no_restart: the launcher notes the death and starts nothing; TERM
  # then stops the run as Ctrl-C does.
  "$train" --no_build --no_restart --data_dir="$data" --model=mlp --epochs=1000 \
    --log_every_s=0.5 --logdir="$tmp/norestart" > "$tmp/norestart.out" 2>&1 &
  pid=$!
  killed="$(kill_evaluator "$tmp/norestart.out" "$tmp/norestart")"
  for _ in $(seq 1 50); do
    grep -q '^\[launcher\] evaluator:0 exited' "$tmp/norestart.out" && break
    sleep 0.1
  done
  sleep 2  # twice the restart delay
  evaluator_pid "$tmp/norestart" >/dev/null && again=1 || again=0
  kill -TERM "$pid"
  wait_for "$pid"
  if [ -n "$killed" ] && [ "$again" = 0 ] && [ "$rc" -eq 130 ] &&
     grep -q '^\[launcher\] evaluator:0 exited (killed by SIGKILL); not restarting it (--no_restart)$' "$tmp/norestart.out" &&
     ! grep -q 'restarting (' "$tmp/norestart.out" &&
     [ "$(grep -c '^\[evaluator\] .*compute device: ' "$tmp/norestart.out")" -eq 1 ]; then
    pass "with --no_restart a killed evaluator is not restarted; TERM still stops the run (exit 130)"
  else
    fail "--no_restart (killed pid '$killed', evaluator running again: $again, exit $rc)"
    tail -n 30 "$tmp/norestart.out"
  fi

  # The chief killed with SIGKILL (a signal the launcher did not send) once
  # 100 steps are done is started again: it finds the ps initialised, keeps
  # their parameters, takes the data position from the newest checkpoint
  # (one every 100 steps here), and ends the run as usual.
  # The workers are frozen (SIGSTOP) around the kill, so the run cannot end
  # before it however slow the polling here is: a loaded machine once let a
  # 2.4 s run finish first. The accuracy bar is the one-epoch run's.
  "$train" --no_build --data_dir="$data" --model=mlp --epochs=4 --checkpoint_every_steps=100 \
    --log_every_s=0.5 --logdir="$tmp/chief" > "$tmp/chief.out" 2>&1 &
  pid=$!
  for _ in $(seq 1 300); do
    grep -qE '^\[chief\] .* epoch [1-3]/4 step [1-9][0-9]{2,} ' "$tmp/chief.out" 2>/dev/null && break
    sleep 0.1
  done
  mapfile -t frozen < <(launcher_children "$pid" worker/worker)
  [ ${#frozen[@]} -gt 0 ] && kill -STOP "${frozen[@]}"
  killed=""
  if [ ${#frozen[@]} -eq 2 ] && ! grep -q 'every worker is done' "$tmp/chief.out"; then
    killed="$(kill_task chief/chief "$tmp/chief.out" "$tmp/chief" '^\[chief\] .* epoch [1-3]/4 step ')"
  fi
  [ ${#frozen[@]} -gt 0 ] && kill -CONT "${frozen[@]}"
  wait_for "$pid"
  last="$(tail -n 1 "$tmp/chief.out")"
  if [ -n "$killed" ] && [ "$rc" -eq 0 ] && [[ "$last" =~ ^final:\ test_accuracy=0\.9[2-9] ]] &&
     grep -q '^\[launcher\] chief:0 exited (killed by SIGKILL); restarting (1/5)$' "$tmp/chief.out" &&
     [ "$(grep -c '^\[chief\] final: ' "$tmp/chief.out")" -eq 1 ] &&
     grep -q '^\[chief\] .* resuming a run in progress: ' "$tmp/chief.out" &&
     grep -q '^\[chief\] .*3752 of 3752 chunks trained' "$tmp/chief.out" &&
     grep -q 'restarted chief 1x' "$tmp/chief.out" &&
     ! grep -qE 'exited [1-9]|Killed' "$tmp/chief.out"; then
    pass "a chief killed with SIGKILL is restarted, resumes, and the run ends with '$last' and exit 0"
  else
    fail "restarting a killed chief (workers frozen: ${frozen[*]:-none}; killed pid '$killed', exit $rc, last line '$last')"
    tail -n 30 "$tmp/chief.out"
  fi

  # No restarts left: the launcher says so and stops the run, exit 1.
  "$train" --no_build --max_restarts=0 --data_dir="$data" --model=mlp --epochs=1000 \
    --log_every_s=0.5 --logdir="$tmp/budget" > "$tmp/budget.out" 2>&1 &
  pid=$!
  killed="$(kill_evaluator "$tmp/budget.out" "$tmp/budget")"
  wait_for "$pid"
  if [ -n "$killed" ] && [ "$rc" -eq 1 ] &&
     grep -q '^\[launcher\] evaluator:0 exited (killed by SIGKILL); no restarts left (--max_restarts=0); stopping the run$' "$tmp/budget.out" &&
     ! grep -q 'restarting (' "$tmp/budget.out"; then
    pass "a task with no restarts left stops the whole run (exit 1)"
  else
    fail "--max_restarts=0 (killed pid '$killed', exit $rc)"; tail -n 30 "$tmp/budget.out"
  fi
fi

echo "train_sh_test: checked deploy/local/train.sh: $passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
