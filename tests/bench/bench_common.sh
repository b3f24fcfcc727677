# shellcheck shell=bash
# Shared by the benchmark scripts that start daemons themselves (sourced;
# not a benchmark itself).

# free_ports N: N ports the kernel hands out now, one per line.
free_ports() {
  python3 -c 'import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks: s.bind(("127.0.0.1", 0))
print("\n".join(str(s.getsockname()[1]) for s in socks))' "$1"
}
