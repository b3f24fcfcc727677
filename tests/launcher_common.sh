# shellcheck shell=bash
# Shared by the tests that drive deploy/local/train.sh in the background
# (sourced; not a test itself).

# launcher_children LAUNCHER BINARY: the pids of the launcher's tasks that
# run BINARY (a path suffix: worker/worker, ps_server/ps_server), read from
# /proc (no procps on a bare machine).
launcher_children() {
  local d stat args
  for d in /proc/[0-9]*; do
    read -r stat 2>/dev/null < "$d/stat" || continue
    stat="${stat##*) }"  # "STATE PPID ...", after the command's name
    stat="${stat#* }"
    [ "${stat%% *}" = "$1" ] || continue
    mapfile -d '' -t args 2>/dev/null < "$d/cmdline" || continue
    # A process that is exiting has an empty cmdline (under set -u,
    # ${args[0]} would end the whole listing there).
    [ ${#args[@]} -gt 0 ] && [[ "${args[0]}" == */$2 ]] && echo "${d#/proc/}"
  done
}

# kill_ps_frozen LAUNCHER INDEX: SIGKILLs the launcher's ps whose TF_CONFIG
# index matches INDEX (a grep pattern: '[12]' kills two), its workers
# frozen (SIGSTOP) around the kill so that the run cannot end before it.
# Sets killed (the last pid killed; "" for none) and killed_at (UTC
# HH:MM:SS.nnnnnnnnn, just before the kill).
# shellcheck disable=SC2034  # killed, killed_at: set for the caller
kill_ps_frozen() {
  local frozen p
  killed=""; killed_at=""
  mapfile -t frozen < <(launcher_children "$1" worker/worker)
  [ ${#frozen[@]} -gt 0 ] && kill -STOP "${frozen[@]}"
  for p in $(launcher_children "$1" ps_server/ps_server); do
    if tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null |
       grep -q "^TF_CONFIG=.*\"type\": *\"ps\", *\"index\": *$2"; then
      killed_at="$(date -u +%H:%M:%S.%N)"
      kill -KILL "$p" && killed="$p"
    fi
  done
  [ ${#frozen[@]} -gt 0 ] && kill -CONT "${frozen[@]}"
}

# wait_for_line OUT PATTERN: waits (30 s at most) for a line of OUT
# matching the ERE PATTERN; returns 1 if none came.
wait_for_line() {
  local _
  for _ in $(seq 1 600); do
    grep -qE "$2" "$1" 2>/dev/null && return 0
    sleep 0.05
  done
  return 1
}

# kill_ps_when OUT PATTERN LAUNCHER INDEX: wait_for_line OUT PATTERN, then,
# unless every worker is done, kill_ps_frozen LAUNCHER INDEX. Sets killed
# ("" when nothing was killed).
# shellcheck disable=SC2034  # killed: set for the caller
kill_ps_when() {
  wait_for_line "$1" "$2"
  killed=""
  grep -q 'every worker is done' "$1" || kill_ps_frozen "$3" "$4"
}

# kill_worker_when OUT PATTERN LAUNCHER INDEX: wait_for_line OUT PATTERN,
# then SIGKILLs the launcher's worker whose TF_CONFIG index is INDEX. Sets
# killed (its pid; "" when none was found).
# shellcheck disable=SC2034  # killed: set for the caller
kill_worker_when() {
  local p
  wait_for_line "$1" "$2"
  killed=""
  for p in $(launcher_children "$3" worker/worker); do
    if tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null |
       grep -q "^TF_CONFIG=.*\"type\": *\"worker\", *\"index\": *$4"; then
      kill -KILL "$p" && killed="$p"
    fi
  done
}

# crc_pairs OUT N [R]: empty when ps i's state (version, digest, CRC) equals
# that of each of its R backups (default 1), the backup store kept for it
# on ps i+k (its k-th, logged "backup store:" for k = 1, "backup store
# K-1:" after), for every i < N; otherwise what differs. (After a
# promotion, a backup store is ps i's primary and ps i's own store a
# backup: the same states.)
crc_pairs() {
  local out="$1" n="$2" r="${3:-1}" i j k slot mine theirs problems=""
  for ((i = 0; i < n; i++)); do
    mine="$(grep "^\[ps$i\] .*shutting down" "$out" | tail -n 1 |
      sed -nE 's/.*version=([0-9]+) applied=([0-9]+) .*applied_digest=([0-9a-f]+) .*state_crc=([0-9a-f]+).*/\1 \2 \3 \4/p')"
    for ((k = 1; k <= r; k++)); do
      j=$(((i + k) % n))
      slot=""; [ "$k" -gt 1 ] && slot=" $((k - 1))"
      theirs="$(grep -E "^\[ps$j\] .*backup store$slot: (a backup|promoted)" "$out" | tail -n 1 |
        sed -nE 's/.*version=([0-9]+) applied=([0-9]+) applied_digest=([0-9a-f]+) .*state_crc=([0-9a-f]+).*/\1 \2 \3 \4/p')"
      if [ -z "$mine" ] || [ "$mine" != "$theirs" ]; then
        problems+="ps:$i '$mine' vs its backup on ps:$j '$theirs'; "
      fi
    done
  done
  echo "$problems"
}

# criteo_data_and_model SYNTH DIR MODEL BUCKETS OUT SYNTH_FLAGS...: the
# criteo_synth binary SYNTH (deploy/data) writes DIR with SYNTH_FLAGS and
# --buckets=BUCKETS, and OUT is the Keras model file MODEL with its
# Embedding's input_dim set to BUCKETS. On failure, says why on stdout and
# returns 1.
criteo_data_and_model() {
  local synth="$1" dir="$2" model="$3" buckets="$4" out="$5"
  shift 5
  if ! "$synth" --out="$dir" --buckets="$buckets" "$@" \
       >"$dir.log" 2>&1; then
    echo "criteo_synth failed:"$'\n'"$(cat "$dir.log")"
    return 1
  fi
  resize_embeddings "$model" "$buckets" "$out" || { echo "cannot resize $model's Embedding"; return 1; }
}

# resize_embeddings MODEL BUCKETS OUT: OUT is the Keras model file MODEL
# with its Embeddings resized to BUCKETS rows: those of the file's fewest
# rows (the fields' table) to BUCKETS, the others as many more (DIN's item
# tables, 1 + the buckets: the rows 1 + bucket, and 0 for padding).
resize_embeddings() {
  jq -c --argjson n "$2" \
    '([.config.layers[] | select(.class_name == "Embedding") | .config.input_dim] | min) as $base
     | (.config.layers[] | select(.class_name == "Embedding") | .config.input_dim) |= $n + . - $base' \
    "$1" >"$3"
}
