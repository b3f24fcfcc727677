# shellcheck shell=bash
# Sourced (not run) by deploy/local/train.sh and tests/test_lib.sh:
#
#   pick_free_ports N   appends N free local TCP ports to the array PORTS,
#                       each reserved for as long as this shell runs.
#
# For ports a task binds later, after the pick: they lie outside the
# kernel's ephemeral range (20000-32767 with Linux's default), where an
# outgoing connection or a port left to the kernel (a ps's data plane, its
# backup stores) could take one first ("Address already in use"); none is
# in /proc/net/tcp{,6} now; and each is reserved as the C++ tests reserve
# theirs (tests/local_cluster.cc): a lock on /tmp/pscluster-port-locks/PORT
# held by an open descriptor of this shell, which the tasks it starts
# inherit, so that launchers and tests started side by side never pick the
# same port.

pick_free_ports() {  # pick_free_ports N
  local -A used=()
  local port lo hi start span
  # Local ports in use, from the hex "address:port" column (bash converts
  # the hex: Debian's awk, mawk, has no strtonum). A line torn by a
  # concurrent change of the table yields no port: skip it.
  while read -r port; do
    [[ "$port" =~ ^[0-9A-Fa-f]+$ ]] && used[$((16#$port))]=1
  done < <(awk 'NR > 1 { split($2, a, ":"); print a[2] }' /proc/net/tcp /proc/net/tcp6 2>/dev/null)
  read -r lo hi < /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || { lo=32768; hi=60999; }
  if [ "$lo" -gt 22000 ]; then
    start=20000; span=$((lo - 20000))
  elif [ "$hi" -lt 63000 ]; then
    start=$((hi + 1)); span=$((65000 - hi))
  else
    start=20000; span=40000  # no room outside it
  fi
  mkdir -p -m 1777 /tmp/pscluster-port-locks 2>/dev/null
  local wanted=$((${#PORTS[@]} + $1))
  while [ ${#PORTS[@]} -lt "$wanted" ]; do
    port=$((start + RANDOM % span))
    [ -n "${used[$port]:-}" ] && continue
    used[$port]=1
    _reserve_port "$port" || continue
    PORTS+=("$port")
  done
}

# _reserve_port PORT: status 1 when another process holds PORT's lock.
# Without flock or a readable lock file, every port counts as reserved
# (the check of the ports in use alone).
_reserve_port() {
  local fd f="/tmp/pscluster-port-locks/$1"
  command -v flock >/dev/null 2>&1 || return 0
  [ -e "$f" ] || : 2>/dev/null >>"$f"
  [ -r "$f" ] || return 0
  exec {fd}<"$f"
  flock -n "$fd" || { exec {fd}<&-; return 1; }
}
