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
    [[ "${args[0]}" == */$2 ]] && echo "${d#/proc/}"
  done
}
