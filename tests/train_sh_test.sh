#!/usr/bin/env bash
# Tests deploy/local/train.sh, the README's main command, end to end: its
# flag handling, a short real run (the mlp, one epoch) that must end with the
# `final:` line and exit 0, and Ctrl-C, which must stop every task.
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

passed=0; failed=0; skipped=0
pass() { echo "PASS: $1"; passed=$((passed + 1)); }
fail() { echo "FAIL: $1"; failed=$((failed + 1)); }
skip() { echo "SKIP: $1"; skipped=$((skipped + 1)); }

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
expect "a bad chief flag stops the run with the chief's message" 2 "--mode=fast" --mode=fast --data_dir="$data"

if [ ! -f "$data/train-images-idx3-ubyte.gz" ]; then
  skip "training runs: no MNIST in '$data' (pass a folder or set PSCLUSTER_DATA_DIR)"
else
  # A real run: every task's lines are prefixed, progress is shown, the last
  # line is the chief's final line, and the script exits 0.
  out="$("$train" --no_build --data_dir="$data" --model=mlp --epochs=1 --logdir="$tmp/run1" 2>&1)"; rc=$?
  last="$(tail -n 1 <<<"$out")"
  if [ "$rc" -eq 0 ] && [[ "$last" =~ ^final:\ test_accuracy=0\.(8[5-9]|9[0-9]) ]] &&
     grep -q '^\[worker1\] ' <<<"$out" && grep -q '^\[ps1\] ' <<<"$out" &&
     grep -qE '^\[chief\] .* epoch 1/1 step [0-9]+ .*examples/s .* loss .* acc .* eta ' <<<"$out" &&
     grep -q '^\[evaluator\] .*eval: step=' <<<"$out" && ! grep -q 'exited [1-9]' <<<"$out" &&
     [ -f "$tmp/run1/model.safetensors" ] && ls "$tmp"/run1/events.out.tfevents.*.chief >/dev/null &&
     ls "$tmp"/run1/events.out.tfevents.*.evaluator >/dev/null &&
     grep -qE 'Prometheus metrics on 127.0.0.1:ps0:[0-9]+ ' <<<"$out"; then
    pass "a one-epoch run ends with '$last' and exit 0, leaving TensorBoard events and model.safetensors"
  else
    fail "a one-epoch run (exit $rc, last line '$last')"; echo "$out" | tail -n 30
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
    fail "Ctrl-C: the launcher still runs 30 s later"; kill -KILL "$pid"
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
fi

echo "train_sh_test: checked deploy/local/train.sh: $passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
