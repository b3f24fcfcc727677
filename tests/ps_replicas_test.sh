#!/usr/bin/env bash
# Tests the chief's --ps_replicas=1 through the real daemons (local
# launcher), training the seeds' CNN: every ps's store is kept, bit for bit, in the backup store of
# the next ps (docs/replication.md). Each ps logs a CRC-32C of its store's
# values and optimizer slots at shutdown, and one of the backup it keeps;
# ps i's must equal the backup's on ps i+1 (mod N), with the same version
# and applied digest. Checked in sync and async, with 2 and 3 ps, and after
# a ps killed with SIGKILL mid-run: a follower's backup store is promoted
# (it serves the shards from then on, the workers call it there) and the
# restarted ps becomes its backup, no step redone, every copy applying the
# clean run's pushes with its digest, ps 0 of a sync run (the decider)
# included; a ps whose copies were both killed is restored from the
# checkpoint, saying why. A sync run with replicas ends with the same final
# line as one without (the same bits are trained), and so does a sync run
# with a ps killed. After a kill, the chief's /metrics counts the fail-over
# by how the ps came back, and where each store is.
# Bad values of the flag exit 2 naming it.
#
# Usage: tests/ps_replicas_test.sh [MNIST_DIR]
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

if [ ! -x "$repo/bazel-bin/chief/chief" ] || [ ! -x "$repo/bazel-bin/ps_server/ps_server" ]; then
  if [ "${CI:-}" = true ]; then fail "the daemons are not built in bazel-bin"; else skip "the daemons are not built in bazel-bin"; fi
  finish
fi
need_mnist "$data"

# Bad values exit 2 naming the flag.
for bad in "--ps_replicas=2" "--num_ps=3 --ps_replicas=4" "--ps_replicas=-1" "--num_ps=1 --ps_replicas=1" \
           "--strategy=multi_worker_mirrored --ps_replicas=1"; do
  # shellcheck disable=SC2086
  out="$("$train" --no_build --data_dir="$data" --epochs=1 $bad 2>&1)"; rc=$?
  if [ "$rc" -eq 2 ] && grep -q -- "--ps_replicas" <<<"$out"; then
    pass "$bad exits 2 naming --ps_replicas"
  else
    fail "$bad: exit $rc"; tail -n 5 <<<"$out"
  fi
done

# Sync, 2 ps, 2 epochs of the seeds' CNN: the same final line as without replicas, and every
# backup holds its primary's bits.
"$train" --no_build --data_dir="$data" --model=cnn --epochs=2 --logdir="$tmp/r0" \
  > "$tmp/r0.out" 2>&1; rc0=$?
"$train" --no_build --data_dir="$data" --model=cnn --epochs=2 --ps_replicas=1 --logdir="$tmp/r1" \
  > "$tmp/r1.out" 2>&1; rc1=$?
f0="$(tail -n 1 "$tmp/r0.out" | sed 's/ wall_s=.*//')"
f1="$(tail -n 1 "$tmp/r1.out" | sed 's/ wall_s=.*//')"
problems="$(crc_pairs "$tmp/r1.out" 2)"
if [ "$rc0" -eq 0 ] && [ "$rc1" -eq 0 ] && [[ "$f1" =~ ^final: ]] && [ "$f0" = "$f1" ] &&
   [ -z "$problems" ] &&
   [ "$(grep -c "store has a backup on ps:" "$tmp/r1.out")" -eq 2 ] &&
   [ "$(grep -c "backups live=1/1 replicated_version=938 " "$tmp/r1.out")" -eq 2 ]; then
  pass "sync, 2 ps: '$f1' as without replicas; each ps's store equals its backup's bit for bit"
else
  fail "sync, 2 ps (exit $rc0/$rc1, '$f0' vs '$f1'): $problems"; tail -n 20 "$tmp/r1.out"
fi

# Async, 3 ps: backups in a ring (0 on 1, 1 on 2, 2 on 0).
"$train" --no_build --data_dir="$data" --model=cnn --epochs=1 --mode=async --num_ps=3 \
  --ps_replicas=1 --logdir="$tmp/a3" > "$tmp/a3.out" 2>&1; rc=$?
problems="$(crc_pairs "$tmp/a3.out" 3)"
if [ "$rc" -eq 0 ] && [[ "$(tail -n 1 "$tmp/a3.out")" =~ ^final:\ test_accuracy=0\.9[7-9] ]] &&
   [ -z "$problems" ]; then
  pass "async, 3 ps: each ps's store equals its backup's on the next ps, bit for bit"
else
  fail "async, 3 ps (exit $rc): $problems"; tail -n 20 "$tmp/a3.out"
fi

# scrape_chief OUT: the chief's /metrics (its port from the launcher's list
# in OUT) into OUT.metrics, which keeps the last scrape that answered.
scrape_chief() {
  local out="$1" port body
  port="$(sed -nE 's/^train\.sh: Prometheus metrics on .*[ :]chief:([0-9]+) .*/\1/p' "$out" |
    head -n 1)"
  [ -n "$port" ] || return 0
  # shellcheck disable=SC2016  # $1 is the inner shell's
  body="$(timeout 2 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1" &&
    printf "GET /metrics HTTP/1.0\r\n\r\n" >&3 && cat <&3' _ "$port" 2>/dev/null)"
  if grep -q '^pscluster_' <<<"$body"; then printf '%s\n' "$body" > "$out.metrics"; fi
}

# chief_metric OUT SERIES: the value of the chief's SERIES (name{labels} as
# the text format writes them) in OUT.metrics; empty when absent.
chief_metric() {
  awk -v k="$2" '$1 == k { print $2 }' "$1.metrics" 2>/dev/null | head -n 1
}

# kill_ps OUT MODE NUM_PS INDEX [R]: trains the seeds' CNN for 2 epochs with R
# replicas (default 1) and SIGKILLs ps INDEX (a grep pattern: '[12]' kills two) mid-run
# (kill_ps_frozen). Sets killed (a pid killed) and rc. Once the chief logs
# the lost ps back, its /metrics is scraped until the run ends (into
# OUT.metrics, scrape_chief).
kill_ps() {
  local out="$1" mode="$2" num_ps="$3" index="$4" replicas="${5:-1}" pid
  # shellcheck disable=SC2086  # kill_ps_args: more flags, word-split
  "$train" --no_build --data_dir="$data" --model=cnn --epochs=2 --ps_replicas="$replicas" \
    --mode="$mode" --num_ps="$num_ps" --checkpoint_every_steps=100 --log_every_s=0.5 \
    --logdir="$out.d" ${kill_ps_args:-} > "$out" 2>&1 &
  pid=$!
  # Past step 100, by the progress line or (a fast run logs few of those)
  # by a periodic checkpoint's.
  kill_ps_when "$out" \
    '^\[chief\] .*( epoch [12]/2 step [1-9][0-9]{2,} |checkpoint \(periodic\) at step [1-9][0-9]{2,} )' \
    "$pid" "$index"
  for _ in $(seq 1 900); do
    kill -0 "$pid" 2>/dev/null || break
    if grep -qE '^\[chief\] .*ps:[0-9]+ (restarted|answers again|lost .*serves its shards)' "$out"; then
      scrape_chief "$out"
    fi
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then kill -TERM "$pid"; sleep 5; rc=124; else wait "$pid"; rc=$?; fi
}

# same_updates OUT N: empty when every ps shut down at the version of 2
# epochs (938 sync steps, 1876 async pushes) having applied the same pushes, with the same digest,
# as ps 0: nothing applied twice, nothing lost, nothing rolled back.
same_updates() {
  local out="$1" n="$2" i first="" line problems=""
  for ((i = 0; i < n; i++)); do
    line="$(grep "^\[ps$i\] .*shutting down" "$out" | tail -n 1 |
      sed -nE 's/.*version=([0-9]+) applied=([0-9]+) .*applied_digest=([0-9a-f]+) .*/\1 \2 \3/p')"
    [ -z "$first" ] && first="$line"
    if [ -z "$line" ] || [ "$line" != "$first" ]; then problems+="ps:$i '$line' vs ps:0 '$first'; "; fi
  done
  [ "${first%% *}" = 938 ] || [ "${first%% *}" = 1876 ] || problems+="ps:0 ended at '$first'; "
  # What tells why, in the line run_all reports: each ps's counters of
  # dropped and torn steps, the chief's lines on workers lost, restarted or
  # back, and how many chunks it handed out again.
  if [ -n "$problems" ]; then
    for ((i = 0; i < n; i++)); do
      problems+="ps:$i $(grep "^\[ps$i\] .*shutting down" "$out" | tail -n 1 |
        grep -oE 'dropped_stale=[0-9]+ rejected=[0-9]+ duplicate=[0-9]+ torn_steps=[0-9]+'); "
    done
    problems+="chief: $(grep '^\[chief\]' "$out" |
      grep -oE 'worker [0-9]+ (lost|restarted|is back)[^;]*|handed_out_again=[0-9]+' |
      head -n 8 | tr '\n' '|')"
  fi
  echo "$problems"
}

# A follower ps killed mid-run (sync, 2 ps): its backup store on ps 0 is
# promoted (no checkpoint read, no step redone), the workers call it
# there, the restarted ps 1 becomes its backup, once caught up the shards
# go back to it (the store on ps 0 demoted to their backup), and the run
# ends exactly as a clean one: every copy applied the same pushes (digest
# and counters) and the final line is the clean run's. The chief's
# /metrics counts one promotion and one move back, and says where each
# store is now: home.
promoted='ps:1 lost (.*): its backup store on ps:0 (.*) serves its shards from now on, from version [0-9]+ \(generation 0\); no checkpoint read, nothing rolled back'
kill_ps "$tmp/kill.out" sync 2 1
problems="$(crc_pairs "$tmp/kill.out" 2)$(same_updates "$tmp/kill.out" 2)"
m_promoted="$(chief_metric "$tmp/kill.out" 'pscluster_ps_failovers_total{task="chief:0",how="promoted"}')"
m_ckpt="$(chief_metric "$tmp/kill.out" 'pscluster_ps_failovers_total{task="chief:0",how="checkpoint"}')"
m_pauses="$(chief_metric "$tmp/kill.out" 'pscluster_ps_recovery_pause_seconds_count{task="chief:0"}')"
m_away="$(chief_metric "$tmp/kill.out" 'pscluster_ps_store_info{task="chief:0",holder="ps:0",role="primary",store="ps:1"}')"
m_home="$(chief_metric "$tmp/kill.out" 'pscluster_ps_store_info{task="chief:0",holder="ps:1",role="primary",store="ps:1"}')"
m_back="$(chief_metric "$tmp/kill.out" 'pscluster_ps_moved_back_total{task="chief:0"}')"
[ "$m_promoted" = 1 ] && [ "$m_ckpt" = 0 ] && [ "$m_pauses" = 1 ] && [ "$m_away" = 0 ] &&
  [ "$m_home" = 1 ] && [ "$m_back" = 1 ] ||
  problems+="chief's /metrics: failovers promoted='$m_promoted' checkpoint='$m_ckpt' pauses='$m_pauses' moved back='$m_back' ps:1's primary on ps:0='$m_away', on ps:1='$m_home'; "
if [ -n "$killed" ] && [ "$rc" -eq 0 ] &&
   [ "$(tail -n 1 "$tmp/kill.out" | sed 's/ wall_s=.*//')" = "$f0" ] &&
   grep -q '^\[launcher\] ps:1 exited (killed by SIGKILL); restarting' "$tmp/kill.out" &&
   grep -qE "$promoted" "$tmp/kill.out" &&
   grep -q "^\[worker[0-9]\] .*ps:1's shards are served at .* now (were at .*): calling there" "$tmp/kill.out" &&
   ! grep -q 'restored from the checkpoint' "$tmp/kill.out" &&
   grep -q "ps:1's store (served by ps:0) has a backup on ps:1" "$tmp/kill.out" &&
   grep -qE "ps:1's shards go back to ps:1 \(.*\), their backup, from the store on ps:0 that served them since a fail-over, at version [0-9]+ \(generation 0\)" "$tmp/kill.out" &&
   grep -q "ps:1's store has a backup on ps:0" "$tmp/kill.out" &&
   [ "$(grep -c "ps:0's store has a backup on ps:1" "$tmp/kill.out")" -ge 2 ] &&
   [ -z "$problems" ]; then
  pass "sync, ps:1 killed mid-run: its backup promoted, the workers moved to it, the restarted ps:1 its backup, then the shards went back to ps:1; no step redone, every copy applied the same updates, the final line is the clean run's; /metrics: 1 promotion, 1 move back, ps:1's store home"
else
  fail "sync, ps:1 killed mid-run (killed '$killed', exit $rc): $problems"; tail -n 30 "$tmp/kill.out"
fi

# check_promoted NAME OUT NUM_PS FINAL PROMOTED: the killed run (kill_ps)
# exited 0, its final line is the clean run's (FINAL "clean") or matches the
# extended regex FINAL, the chief logged PROMOTED (an extended regex), nothing
# was restored from the checkpoint, and every copy applied the same updates.
check_promoted() {
  local name="$1" out="$2" n="$3" final="$4" promoted_re="$5" last problems
  problems="$(crc_pairs "$out" "$n")$(same_updates "$out" "$n")"
  last="$(tail -n 1 "$out" | sed 's/ wall_s=.*//')"
  if [ "$final" = clean ]; then
    [ "$last" = "$f0" ] || problems+="final line '$last', the clean run's '$f0'; "
  elif ! [[ "$last" =~ $final ]]; then
    problems+="final line '$last' does not match /$final/; "
  fi
  grep -qE "$promoted_re" "$out" || problems+="no line /$promoted_re/; "
  ! grep -q 'restored from the checkpoint' "$out" || problems+="restored from the checkpoint; "
  if [ -n "$killed" ] && [ "$rc" -eq 0 ] && [ -z "$problems" ]; then
    pass "$name"
  else
    fail "$name (killed '$killed', exit $rc): $problems"; tail -n 30 "$out"
  fi
}

# The same in async with 3 ps.
kill_ps "$tmp/akill.out" async 3 1
check_promoted "async, 3 ps, ps:1 killed mid-run: its backup on ps:2 promoted, every copy applied every push once, every backup equals its primary" \
  "$tmp/akill.out" 3 '^final: test_accuracy=0\.98' "${promoted//ps:0/ps:2}"

# ps 0 of a sync run decides the steps: killed, its backup store on ps 1
# is promoted to decide them from the version it holds (taking ps 0's
# decision in flight from a follower, when one took it), and the run ends
# exactly as a clean one, nothing restored from the checkpoint.
kill_ps "$tmp/dkill.out" sync 2 0
problems="$(crc_pairs "$tmp/dkill.out" 2)$(same_updates "$tmp/dkill.out" 2)"
m_promoted="$(chief_metric "$tmp/dkill.out" 'pscluster_ps_failovers_total{task="chief:0",how="promoted"}')"
m_ckpt="$(chief_metric "$tmp/dkill.out" 'pscluster_ps_failovers_total{task="chief:0",how="checkpoint"}')"
[ "$m_promoted" = 1 ] && [ "$m_ckpt" = 0 ] ||
  problems+="chief's /metrics: failovers promoted='$m_promoted' checkpoint='$m_ckpt'; "
if [ -n "$killed" ] && [ "$rc" -eq 0 ] &&
   [ "$(tail -n 1 "$tmp/dkill.out" | sed 's/ wall_s=.*//')" = "$f0" ] &&
   grep -qE 'ps:0 lost \(.*\): its backup store on ps:1 \(.*\) serves its shards from now on, from version [0-9]+ \(generation 0\), and decides the sync steps under decider epoch 1' "$tmp/dkill.out" &&
   grep -qE "ps:0's shards go back to ps:0 .*, and decides the sync steps under decider epoch 2" "$tmp/dkill.out" &&
   ! grep -q 'restored from the checkpoint' "$tmp/dkill.out" &&
   [ -z "$problems" ]; then
  pass "sync, ps:0 (the decider) killed mid-run: its backup promoted to decide the steps (epoch 1), the shards back on ps:0 once it caught up (epoch 2), no step redone, every copy applied the same updates, the final line is the clean run's; /metrics counts one promotion"
else
  fail "sync, ps:0 killed mid-run (killed '$killed', exit $rc): $problems"; tail -n 30 "$tmp/dkill.out"
fi

# Sync clipping (the ps agree on the step's global norm through the
# decider, update/step_clipping.h) with the decider killed mid-step: its
# backup, promoted, gathers the norms again, and the run ends with the clean
# clipped run's final line, every copy applying the same updates.
"$train" --no_build --data_dir="$data" --model=cnn --epochs=2 --global_clipnorm=0.05 \
  --logdir="$tmp/c0" > "$tmp/c0.out" 2>&1; rc0=$?
fc="$(tail -n 1 "$tmp/c0.out" | sed 's/ wall_s=.*//')"
kill_ps_args="--global_clipnorm=0.05" kill_ps "$tmp/ckill.out" sync 2 0
problems="$(crc_pairs "$tmp/ckill.out" 2)$(same_updates "$tmp/ckill.out" 2)"
if [ "$rc0" -eq 0 ] && [[ "$fc" =~ ^final: ]] && [ "$fc" != "$f0" ] && [ -n "$killed" ] &&
   [ "$rc" -eq 0 ] && [ "$(tail -n 1 "$tmp/ckill.out" | sed 's/ wall_s=.*//')" = "$fc" ] &&
   grep -q 'global_clipnorm 0.05' "$tmp/ckill.out" &&
   grep -qE 'ps:0 lost \(.*\): its backup store on ps:1 \(.*\) serves its shards from now on' "$tmp/ckill.out" &&
   ! grep -q 'restored from the checkpoint' "$tmp/ckill.out" && [ -z "$problems" ]; then
  pass "sync, global_clipnorm 0.05, ps:0 (the decider) killed mid-run: the final line is the clean clipped run's ('$fc', unclipped '$f0'), every copy applied the same updates"
else
  fail "sync clipped, ps:0 killed mid-run (clean exit $rc0 '$fc', killed '$killed', exit $rc): $problems"
  tail -n 30 "$tmp/ckill.out"
fi

# The other two corners of {sync, async} x {2, 3 ps}: sync with 3 ps, ps:2
# killed (its backup is on ps:0), ends with the clean 2-ps run's final line
# (each ps sums its shards' gradients in chunk order, however many ps there
# are, so the run trains the same bits); async with 2 ps, ps:0 killed (its
# backup is on ps:1).
kill_ps "$tmp/s3kill.out" sync 3 2
check_promoted "sync, 3 ps, ps:2 killed mid-run: its backup on ps:0 promoted, no step redone, every copy applied the same updates, the final line is the clean run's" \
  "$tmp/s3kill.out" 3 clean "${promoted//ps:1/ps:2}"
kill_ps "$tmp/a2kill.out" async 2 0
check_promoted "async, 2 ps, ps:0 killed mid-run: its backup on ps:1 promoted, every copy applied every push once, every backup equals its primary" \
  "$tmp/a2kill.out" 2 '^final: test_accuracy=0\.98' \
  'ps:0 lost \(.*\): its backup store on ps:1 \(.*\) serves its shards from now on'

# Both copies of ps 1's store lost at once (ps 1 and ps 2, which keeps its
# backup): restored from the checkpoint, and the log says why. (Killed a
# few milliseconds apart, the chief may find ps:1 lost first and promote
# its backup on ps:2, then lose that with ps:2: ps:1 itself serves its
# shards again, as in the run after this one.)
kill_ps "$tmp/bkill.out" async 3 '[12]'
problems="$(crc_pairs "$tmp/bkill.out" 3)"
if [ -n "$killed" ] && [ "$rc" -eq 0 ] &&
   [[ "$(tail -n 1 "$tmp/bkill.out")" =~ ^final:\ test_accuracy=0\.98 ]] &&
   [ "$(grep -c 'exited (killed by SIGKILL); restarting' "$tmp/bkill.out")" -eq 2 ] &&
   grep -qE "ps:[12] cannot be restored from its backup \(.*\); the checkpoint serves|ps:1's shards were served by its backup on ps:2 \(.*\), lost too: ps:1 itself \(.*\) serves them again" "$tmp/bkill.out" &&
   grep -q 'restarted: every ps restored from the checkpoint of step' "$tmp/bkill.out" &&
   [ -z "$problems" ]; then
  pass "async, 3 ps, both copies of a store killed: restored from the checkpoint, saying why; the run ends as usual"
else
  fail "async, 3 ps, ps:1 and ps:2 killed (exit $rc): $problems"; tail -n 30 "$tmp/bkill.out"
fi

# ps:1 killed; once its backup on ps:2 serves its shards, ps:2 killed too:
# the only copy of ps:1's store is gone with ps:2's process, and the store
# never comes back where it was (a restarted ps takes new ports for its
# backup stores). The chief waits for ps:1 itself as well, points its
# shards back home and restores every ps from the checkpoint (it once
# waited for the lost store until --ps_recovery_timeout_s failed the run).
"$train" --no_build --data_dir="$data" --model=cnn --epochs=2 --ps_replicas=1 --mode=async \
  --num_ps=3 --checkpoint_every_steps=100 --log_every_s=0.5 --ps_recovery_timeout_s=60 \
  --logdir="$tmp/skill.out.d" > "$tmp/skill.out" 2>&1 &
pid=$!
kill_ps_when "$tmp/skill.out" \
  '^\[chief\] .*( epoch [12]/2 step [1-9][0-9]{2,} |checkpoint \(periodic\) at step [1-9][0-9]{2,} )' \
  "$pid" 1
first="$killed"
for _ in $(seq 1 1500); do
  grep -q 'ps:1 lost .*serves its shards from now on' "$tmp/skill.out" && break
  sleep 0.02
done
second=""
if grep -q 'ps:1 lost .*serves its shards from now on' "$tmp/skill.out" &&
   ! grep -q 'every worker is done' "$tmp/skill.out"; then
  kill_ps_frozen "$pid" 2
  second="$killed"
fi
for _ in $(seq 1 1200); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$pid" 2>/dev/null; then kill -TERM "$pid"; sleep 5; rc=124; else wait "$pid"; rc=$?; fi
if [ -n "$first" ] && [ -n "$second" ] && [ "$rc" -eq 0 ] &&
   [[ "$(tail -n 1 "$tmp/skill.out")" =~ ^final:\ test_accuracy=0\.98 ]] &&
   grep -qE "ps:1's shards were served by its backup on ps:2 \(.*\), lost too: ps:1 itself \(.*\) serves them again" "$tmp/skill.out" &&
   grep -q 'ps:1 restarted: every ps restored from the checkpoint of step' "$tmp/skill.out"; then
  pass "async, 3 ps: ps:1 killed, then ps:2, which served its shards: ps:1 serves them again, every ps restored from the checkpoint; the run ends as usual"
else
  fail "async, 3 ps, ps:1 then ps:2 killed (killed '$first' '$second', exit $rc)"
  grep -E "^\[chief\].*(lost|promot|restarted|cannot|waiting|serves)" "$tmp/skill.out" | tail -n 10
fi

# --ps_replicas=2 (sync, 3 ps): ps:1 and ps:2 killed together, each store
# keeps a copy on ps:0 (ps:1's second backup, ps:2's first), promoted in
# their places: no checkpoint read, no step redone, and the run ends as a
# clean one, every copy (each primary and its two backups) with the same
# state and digest once the shards went back home.
kill_ps "$tmp/r2kill.out" sync 3 '[12]' 2
problems="$(crc_pairs "$tmp/r2kill.out" 3 2)$(same_updates "$tmp/r2kill.out" 3)"
for lost in 1 2; do
  grep -qE "ps:$lost lost \(.*\): its backup store on ps:0 \(.*\) serves its shards from now on, from version [0-9]+ \(generation 0\); no checkpoint read, nothing rolled back; .*primary term [1-9]" "$tmp/r2kill.out" ||
    problems+="ps:$lost not promoted on ps:0; "
  grep -qE "ps:$lost's shards go back to ps:$lost " "$tmp/r2kill.out" ||
    problems+="ps:$lost's shards not moved back; "
done
grep -q "ps:0's store has 2 backups on ps:1 (.*), ps:2 (.*)" "$tmp/r2kill.out" ||
  problems+="ps:0's store never had its 2 backups; "
if [ -n "$killed" ] && [ "$rc" -eq 0 ] &&
   [ "$(tail -n 1 "$tmp/r2kill.out" | sed 's/ wall_s=.*//')" = "$f0" ] &&
   [ "$(grep -c 'exited (killed by SIGKILL); restarting' "$tmp/r2kill.out")" -eq 2 ] &&
   ! grep -q 'restored from the checkpoint' "$tmp/r2kill.out" &&
   [ -z "$problems" ]; then
  pass "--ps_replicas=2, sync, 3 ps, ps:1 and ps:2 killed together: both promoted on ps:0, no checkpoint read, no step redone, the shards back home, every copy equal, the final line is the clean run's"
else
  fail "--ps_replicas=2, ps:1 and ps:2 killed together (killed '$killed', exit $rc): $problems"
  tail -n 40 "$tmp/r2kill.out"
fi

# kill_at_final OUT REPLICAS: trains the seeds' CNN for 2 epochs (sync, 2 ps) and
# SIGKILLs ps 1 once the chief has taken its final checkpoint. The
# evaluator is frozen (SIGSTOP) from the first steps (the first progress
# line with a step or the first periodic checkpoint: a fast run logs few
# progress lines) until the chief logs ps 1 back, so that the final
# evaluation reads the weights from the restarted ps only after that.
# Sets killed and rc.
kill_at_final() {
  local out="$1" replicas="$2" pid evaluators=()
  "$train" --no_build --data_dir="$data" --model=cnn --epochs=2 --ps_replicas="$replicas" \
    --mode=sync --num_ps=2 --checkpoint_every_steps=100 --log_every_s=0.5 --logdir="$out.d" \
    > "$out" 2>&1 &
  pid=$!
  killed=""
  for _ in $(seq 1 600); do
    grep -qE '^\[chief\] .*( epoch 1/2 step [1-9]|checkpoint \(periodic\) at step)' "$out" 2>/dev/null &&
      break
    sleep 0.05
  done
  mapfile -t evaluators < <(launcher_children "$pid" evaluator/evaluator)
  [ ${#evaluators[@]} -gt 0 ] && kill -STOP "${evaluators[@]}"
  for _ in $(seq 1 1200); do
    grep -q '^\[chief\] .*checkpoint (final) at step' "$out" 2>/dev/null && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
  done
  grep -q '^\[chief\] .*checkpoint (final) at step' "$out" && kill_ps_frozen "$pid" 1
  for _ in $(seq 1 600); do
    grep -qE '^\[chief\] .*ps:1 (restarted|answers again|lost .*serves its shards)' "$out" 2>/dev/null &&
      break
    sleep 0.05
  done
  [ ${#evaluators[@]} -gt 0 ] && kill -CONT "${evaluators[@]}"
  for _ in $(seq 1 600); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then kill -TERM "$pid"; sleep 5; rc=124; else wait "$pid"; rc=$?; fi
}

# A ps lost after the final checkpoint, while the chief waits for the
# evaluator's score of the final weights: the chief recovers it (its
# backup promoted, or without replicas from that checkpoint, which holds
# every step) so that the evaluator can read them, takes the steps and the
# exported weights from the checkpoint, and the run ends with the clean
# run's line. Before, the chief waited on the restarted, empty ps and
# failed minutes later.
for replicas in 1 0; do
  kill_at_final "$tmp/fkill$replicas.out" "$replicas"
  want="ps:1 lost (.*): its backup store on ps:0 (.*) serves its shards from now on"
  [ "$replicas" = 0 ] && want='ps:1 restarted: every ps restored from the checkpoint of step 938 \(generation 1\); 0 step\(s\) since that checkpoint are lost'
  if [ -n "$killed" ] && [ "$rc" -eq 0 ] &&
     [ "$(tail -n 1 "$tmp/fkill$replicas.out" | sed 's/ wall_s=.*//')" = "$f0" ] &&
     grep -qE "$want" "$tmp/fkill$replicas.out" &&
     [ -s "$tmp/fkill$replicas.out.d/model.safetensors" ]; then
    pass "--ps_replicas=$replicas, ps:1 killed after the final checkpoint: recovered while the final weights were evaluated ('$want'); the final line is the clean run's, the weights exported"
  else
    fail "--ps_replicas=$replicas, ps:1 killed after the final checkpoint (killed '$killed', exit $rc; want '$want' and '$f0')"
    tail -n 30 "$tmp/fkill$replicas.out"
  fi
done

finish
