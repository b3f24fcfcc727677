#!/usr/bin/env bash
# Entrypoint of the pscluster images (installed as
# /usr/local/bin/pscluster-entrypoint): runs one daemon with its TF_CONFIG.
#
#   pscluster-entrypoint ROLE [FLAGS...]    ROLE: ps | worker | evaluator | chief
#   pscluster-entrypoint COMMAND [ARGS...]  anything else is run as it is (bash, ...)
#
# TF_CONFIG is passed on unchanged when it names its task, as Compose files
# and Kubeflow's TFJob give it. Where it lacks task.index (a StatefulSet whose
# pods share one ConfigMap'd TF_CONFIG holding only the cluster), the index
# is filled in, and task.type too when absent (ROLE's job):
#   PSCLUSTER_TASK_INDEX   the index, when set;
#   else the pod ordinal:  the number that ends the hostname (worker-3 -> 3).
# With neither, TF_CONFIG is left alone (the daemons then take index 0).
#
# Where TF_CONFIG is unset and PSCLUSTER_NUM_PS and PSCLUSTER_NUM_WORKERS are
# set (deploy/k8s: the ConfigMap pscluster-size's max_ps and max_workers), the
# cluster is made from the counts and the pods' names: chief-0.chief,
# ps-<i>.ps, worker-<i>.worker and evaluator-0.evaluator (a pod and its
# headless Service, which the pod's DNS search path completes), on
# PSCLUSTER_PORT (default 2222); PSCLUSTER_NUM_EVALUATORS (default 1; 0 or 1)
# says whether the evaluator is in it; PSCLUSTER_RPC_LAYER, when set, becomes
# its rpc_layer (grpc+tls: docs/security.md). The task is filled in as above,
# and must be one the counts list: a pod whose ordinal is beyond them (a
# StatefulSet scaled past the ps or workers TF_CONFIG lists: deploy/k8s's
# max_ps, max_workers) exits 2 naming both.
#
# More flags from the environment, added after FLAGS (a later flag wins):
#   PSCLUSTER_FLAG_<name>=<value>   --<name>=<value>, in name order (a
#       ConfigMap's keys through envFrom with prefix PSCLUSTER_FLAG_, or
#       Compose's environment); an empty value adds nothing;
#   PSCLUSTER_ARGS                  further flags, split at whitespace, last.
#
# Per-task identities (docs/security.md, "Per-task identities under Compose
# and Kubernetes"): with PSCLUSTER_IDENTITY_DIR=DIR, a folder holding what
# deploy/tls/make_test_ca.sh --tasks writes (ca.pem, identities, and this
# task's ROLE-INDEX.pem, .key and .token; others' may be there too), the
# task's own files are added before FLAGS (a flag given wins):
#   --tls_cert=DIR/ROLE-INDEX.pem --tls_key=DIR/ROLE-INDEX.key
#   --tls_ca=DIR/ca.pem --auth_token_file=DIR/ROLE-INDEX.token
#   --auth_identities_file=DIR/identities --authorize=true
# and --tls_server_name=NAME with PSCLUSTER_TLS_SERVER_NAME=NAME; TF_CONFIG
# gets "rpc_layer": "grpc+tls" when it has none. ROLE-INDEX is TF_CONFIG's
# task (ps-1, worker-0, chief-0, evaluator-0); a file missing is an exit 2
# naming it. pscluster-health-probe reads the same two variables.
#
# Also read:
#   PSCLUSTER_DONE_FILE=PATH  (meant for the chief of a StatefulSet, which
#       Kubernetes restarts even after exit 0) after the daemon exits 0, write
#       PATH and wait until stopped; when PATH exists at start, do not run
#       again but wait. Remove PATH to train again.
#   PSCLUSTER_BIN_DIR      where the daemons are (default /usr/local/bin).
#   PSCLUSTER_STATE_DIR    where a final exit code is kept (default /tmp):
#       a daemon that exits 2 (bad input), 3 (run given up) or 4 (bad data)
#       is not started again in this container; it exits with that code.
# A --tf_config=FILE flag wins over TF_CONFIG in the daemons; it is left alone.
set -euo pipefail

me=pscluster-entrypoint
die() { echo "$me: error: $*" >&2; exit 2; }

if [ $# -eq 0 ] || [ "$1" = "--help" ] || [ "$1" = "-h" ]; then
  sed -n '2,56p' "$0" | sed 's/^# \{0,1\}//'
  [ $# -eq 0 ] && exit 2
  exit 0
fi

role="$1"
case "$role" in
  ps|ps_server) job="ps"; binary="ps_server" ;;
  worker) job=worker; binary=worker ;;
  evaluator) job=evaluator; binary=evaluator ;;
  chief) job=chief; binary=chief ;;
  *) exec "$@" ;;
esac
shift
bin="${PSCLUSTER_BIN_DIR:-/usr/local/bin}/$binary"
[ -x "$bin" ] || die "$bin: no such executable"

# The index of this task: PSCLUSTER_TASK_INDEX, else the pod ordinal.
index=""
if [ -n "${PSCLUSTER_TASK_INDEX:-}" ]; then
  [[ "$PSCLUSTER_TASK_INDEX" =~ ^[0-9]+$ ]] ||
    die "PSCLUSTER_TASK_INDEX='$PSCLUSTER_TASK_INDEX' is not a non-negative integer"
  index="$PSCLUSTER_TASK_INDEX"
  index_from="PSCLUSTER_TASK_INDEX"
else
  host="${HOSTNAME:-$(hostname 2>/dev/null || true)}"
  if [[ "$host" =~ -([0-9]+)$ ]]; then
    index="$((10#${BASH_REMATCH[1]}))"
    index_from="the pod ordinal of hostname '$host'"
  fi
fi

# Flags from the environment: PSCLUSTER_FLAG_<name>, then PSCLUSTER_ARGS.
while IFS= read -r var; do
  name="${var#PSCLUSTER_FLAG_}"
  [[ "$name" =~ ^[a-z][a-z0-9_]*$ ]] ||
    die "$var: '$name' is not a flag name (lower case letters, digits and _)"
  [ -n "${!var}" ] && set -- "$@" "--$name=${!var}"
done < <(compgen -e | grep '^PSCLUSTER_FLAG_' | LC_ALL=C sort)
if [ -n "${PSCLUSTER_ARGS:-}" ]; then
  read -r -a extra <<<"$PSCLUSTER_ARGS"
  set -- "$@" "${extra[@]}"
fi

# TF_CONFIG from the role counts, when it is unset.
count() {  # count NAME DEFAULT MIN MAX: the variable NAME, checked
  local v="${!1:-$2}"
  [[ "$v" =~ ^[0-9]+$ ]] && [ "$((10#$v))" -ge "$3" ] && [ "$((10#$v))" -le "$4" ] ||
    die "$1='$v' is not a whole number from $3 to $4"
  echo "$((10#$v))"
}
if [ -z "${TF_CONFIG:-}" ] && [ -n "${PSCLUSTER_NUM_PS:-}${PSCLUSTER_NUM_WORKERS:-}" ]; then
  [ -n "${PSCLUSTER_NUM_PS:-}" ] || die "PSCLUSTER_NUM_WORKERS is set but PSCLUSTER_NUM_PS is not"
  [ -n "${PSCLUSTER_NUM_WORKERS:-}" ] || die "PSCLUSTER_NUM_PS is set but PSCLUSTER_NUM_WORKERS is not"
  num_ps="$(count PSCLUSTER_NUM_PS "" 0 1000)" || exit 2
  num_workers="$(count PSCLUSTER_NUM_WORKERS "" 1 10000)" || exit 2
  num_evaluators="$(count PSCLUSTER_NUM_EVALUATORS 1 0 1)" || exit 2
  port="$(count PSCLUSTER_PORT 2222 1 65535)" || exit 2
  command -v jq >/dev/null 2>&1 || die "jq is needed to write TF_CONFIG"
  TF_CONFIG="$(jq -nc --argjson ps "$num_ps" --argjson workers "$num_workers" \
      --argjson evaluators "$num_evaluators" --arg port "$port" --arg rpc "${PSCLUSTER_RPC_LAYER:-}" '
    def hosts(job; n): [range(n) | "\(job)-\(.).\(job):\($port)"];
    {cluster: ({chief: hosts("chief"; 1), ps: hosts("ps"; $ps), worker: hosts("worker"; $workers)}
               + (if $evaluators > 0 then {evaluator: hosts("evaluator"; 1)} else {} end))}
    + (if $rpc != "" then {rpc_layer: $rpc} else {} end)')"
  export TF_CONFIG
  echo "$me: TF_CONFIG from the role counts: $num_ps ps, $num_workers workers, $num_evaluators evaluator(s)" >&2
  # This task must be one of those listed: the daemon would refuse an index
  # out of range too, but not say where the count comes from.
  case "$job" in
    ps) listed="$num_ps" count_var=PSCLUSTER_NUM_PS ;;
    worker) listed="$num_workers" count_var=PSCLUSTER_NUM_WORKERS ;;
    evaluator) listed="$num_evaluators" count_var=PSCLUSTER_NUM_EVALUATORS ;;
    *) listed=1 count_var="" ;;
  esac
  if [ -n "$index" ] && [ "$index" -ge "$listed" ]; then
    case "$job" in
      worker) hint="run at most $listed (kubectl scale statefulset/worker --replicas=$listed), or list $((10#$index + 1)) or more (max_workers in deploy/k8s/base/kustomization.yaml) and apply again" ;;
      chief) hint="there is one chief, task 0" ;;
      *) hint="$count_var must be at least $((10#$index + 1))" ;;
    esac
    die "$job task $index (from $index_from) is beyond the $listed $job task(s) TF_CONFIG lists${count_var:+ ($count_var=$listed)}: $hint"
  fi
fi

has_tf_config_flag=0
for a in "$@"; do
  case "$a" in --tf_config=*|--tf_config) has_tf_config_flag=1 ;; esac
done

# Edits TF_CONFIG only when it is valid JSON; the daemons report bad JSON
# themselves, with its position.
if [ "$has_tf_config_flag" = 0 ] && [ -n "${TF_CONFIG:-}" ]; then
  command -v jq >/dev/null 2>&1 || die "jq is needed to read TF_CONFIG"
  if jq -e 'type == "object"' >/dev/null 2>&1 <<<"$TF_CONFIG"; then
    if [ -n "$index" ] && jq -e '(.task | type) != "object" or (.task.index == null)' \
        >/dev/null <<<"$TF_CONFIG"; then
      TF_CONFIG="$(jq -c --arg job "$job" --argjson index "$index" \
        '.task = ((if (.task | type) == "object" then .task else {} end)
                  | .type //= $job | .index = $index)' <<<"$TF_CONFIG")"
      echo "$me: task.index $index from $index_from" >&2
    fi
    export TF_CONFIG
  fi
fi

# This task's identity files (PSCLUSTER_IDENTITY_DIR), before FLAGS.
if [ -n "${PSCLUSTER_IDENTITY_DIR:-}" ]; then
  dir="${PSCLUSTER_IDENTITY_DIR%/}"
  [ -d "$dir" ] || die "PSCLUSTER_IDENTITY_DIR=$PSCLUSTER_IDENTITY_DIR is not a folder"
  command -v jq >/dev/null 2>&1 || die "jq is needed to read TF_CONFIG's task"
  me_index=""
  [ "$has_tf_config_flag" = 1 ] || me_index="$(jq -r '.task.index | numbers' 2>/dev/null <<<"${TF_CONFIG:-}")"
  [ -n "$me_index" ] ||
    die "PSCLUSTER_IDENTITY_DIR is set but TF_CONFIG names no task index (set it, PSCLUSTER_TASK_INDEX, or a pod ordinal; --tf_config=FILE is not read here)"
  me_task="$job-$me_index"
  for f in "$me_task.pem" "$me_task.key" "$me_task.token" ca.pem identities; do
    [ -r "$dir/$f" ] ||
      die "PSCLUSTER_IDENTITY_DIR=$PSCLUSTER_IDENTITY_DIR has no readable $f (this task is $me_task; make_test_ca.sh --tasks writes ROLE-INDEX.pem, .key, .token, ca.pem and identities)"
  done
  identity=(--tls_cert="$dir/$me_task.pem" --tls_key="$dir/$me_task.key" --tls_ca="$dir/ca.pem"
            --auth_token_file="$dir/$me_task.token" --auth_identities_file="$dir/identities" --authorize=true)
  [ -n "${PSCLUSTER_TLS_SERVER_NAME:-}" ] && identity+=(--tls_server_name="$PSCLUSTER_TLS_SERVER_NAME")
  set -- "${identity[@]}" "$@"
  if ! jq -e 'has("rpc_layer")' >/dev/null <<<"$TF_CONFIG"; then
    TF_CONFIG="$(jq -c '.rpc_layer = "grpc+tls"' <<<"$TF_CONFIG")"
    export TF_CONFIG
  fi
  echo "$me: identity $me_task from $dir" >&2
fi

# Exit codes 2 (bad flags or TF_CONFIG), 3 (the chief gave the run up) and
# 4 (data missing or unreadable) are final: starting the daemon again would
# change nothing. They are kept in $final_file, and a container started again
# (Docker's and Kubernetes' restart policies) exits with the same code at
# once instead of waiting for a run that is over. The file lives as long as
# the container's file system (Docker) or PSCLUSTER_STATE_DIR (a pod's
# emptyDir in Kubernetes); recreate the container, or remove it, to start over.
final_file="${PSCLUSTER_STATE_DIR:-/tmp}/pscluster-final-exit"
if [ -f "$final_file" ]; then
  code="$(head -n 1 "$final_file" | cut -d' ' -f1)"
  [[ "$code" =~ ^[234]$ ]] || code=3
  echo "$me: not starting $binary again: $(head -c 300 "$final_file") (final; remove $final_file or recreate the container to start over)" >&2
  exit "$code"
fi

# Run-once mode: wait (until stopped) instead of exiting or running again.
idle() {
  echo "$me: $1; waiting until stopped (remove $PSCLUSTER_DONE_FILE to run again)" >&2
  sleeper=""
  trap 'kill $sleeper 2>/dev/null; wait $sleeper 2>/dev/null || true; exit 0' TERM INT
  sleep infinity &
  sleeper=$!
  wait "$sleeper" || true
  exit 0
}
if [ -n "${PSCLUSTER_DONE_FILE:-}" ] && [ -e "$PSCLUSTER_DONE_FILE" ]; then
  idle "not running $binary: $PSCLUSTER_DONE_FILE exists ($(head -c 200 "$PSCLUSTER_DONE_FILE"))"
fi
"$bin" "$@" &
pid=$!
stopped=0
interrupted=0
trap 'stopped=1; interrupted=1; kill -TERM "$pid" 2>/dev/null || true' TERM INT
# `wait` returns early when a trapped signal arrives; wait again for the
# daemon's own status.
while :; do
  interrupted=0
  wait "$pid" && rc=0 || rc=$?
  [ "$interrupted" = 1 ] || break
done
trap - TERM INT
case "$rc" in
  2) why="bad flags or TF_CONFIG" ;;
  3) why="the chief gave the run up" ;;
  4) why="the data is missing or unreadable" ;;
  *) why="" ;;
esac
if [ -n "$why" ] && [ "$stopped" = 0 ]; then
  mkdir -p "$(dirname "$final_file")" 2>/dev/null || true
  echo "$rc $binary exited $rc ($why) at $(date -u +%Y-%m-%dT%H:%M:%SZ)" >"$final_file" 2>/dev/null ||
    echo "$me: cannot write $final_file" >&2
fi
# A daemon stopped by a signal did not finish its run, whatever its status.
if [ "$rc" -ne 0 ] || [ "$stopped" = 1 ] || [ -z "${PSCLUSTER_DONE_FILE:-}" ]; then
  exit "$rc"
fi
mkdir -p "$(dirname "$PSCLUSTER_DONE_FILE")"
echo "$binary exited 0 at $(date -u +%Y-%m-%dT%H:%M:%SZ)" >"$PSCLUSTER_DONE_FILE"
idle "$binary exited 0; wrote $PSCLUSTER_DONE_FILE"
