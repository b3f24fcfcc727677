#!/usr/bin/env bash
# Runs the containers for real, on a private Docker daemon this test starts
# and stops itself (Debian 12's docker.io: dockerd 20.10, its own containerd,
# data root, sockets, pid files and bridge, so a user's Docker is never
# touched):
#   1. makes the debian:12 base image (and its debian:12-slim tag) when the
#      private daemon lacks it: debootstrap --variant=minbase bookworm from
#      the Debian mirror apt uses here, then docker import;
#   2. builds the CPU image from deploy/docker/Dockerfile (BuildKit, Debian's
#      CLI, DOCKER_BUILDKIT=1): with PSCLUSTER_DOCKER_PREBUILT naming a folder
#      of the five CPU-only binaries (tests/run_all.sh's, which has just built
#      them), the Dockerfile's runtime stage over them (BINARIES=prebuilt),
#      and at the end its build stage from the repository on the health
#      probe alone (IMAGE_TARGETS), which must then run; without it, the
#      whole image from source as users build it;
#   3. runs deploy/compose/docker-compose.yml with Debian's docker-compose
#      (1.29) for 1 epoch on the MNIST given, and checks the chief's final:
#      line (test accuracy >= 0.98), every container's exit code 0, every
#      service's health check reaching healthy during the run, and
#      /metrics answering on worker-0 mid-run;
#   4. runs it again, kill -9's the ps:1 process mid-run (from the host, by
#      its pid: Docker sees the task die, not a manual stop, and restarts it
#      under restart: on-failure) and checks that the run still finishes
#      with final: and every exit code 0, every ps restored from the newest
#      checkpoint; then the same with PSCLUSTER_PS_REPLICAS=1 (the chief's
#      --ps_replicas=1), where the restarted ps:1 takes its backup's state
#      from ps-0's container and nothing is restored from a checkpoint;
#   5. runs that cannot finish end promptly, every container with the exit
#      code that says why: ps:1 stopped by hand (docker stop, not restarted:
#      the chief logs what it waits for, gives up, and every task exits 3),
#      a data folder without MNIST (the workers and the evaluator exit 4,
#      the rest 3), a data folder that does not exist (up refuses; no
#      folder is created);
#   6. trains a user's model on a user's .npz through the Compose file's
#      knobs: PSCLUSTER_MODEL names tests/fixtures/keras/tfjs_plain.json (a
#      Keras model TensorFlow.js wrote), PSCLUSTER_DATA_DIR an .npz that
#      numpy's np.savez wrote from the MNIST given; checks that the chief
#      got --model and the file mounted read-only, the workers and the
#      evaluator --data_dir and the .npz, that the chief trained that model
#      and the evaluator scored it, that the final: line has test accuracy
#      >= 0.93 (1 epoch: 0.9455), and every exit code 0; with
#      PSCLUSTER_CHIEF_ARGS=--batch_size=64 (any chief flag), 938 steps;
#   7. three workers made by one number, deploy/compose/scale.py
#      --workers=3 on a copy of the Compose files: run 1's checks, and
#      worker-2 trained.
#   8. the Kubernetes path on the same engine (tests/k8s/docker_runs.py):
#      deploy/k8s/cpu made as docs/deploy-k8s.md makes it (the registry by
#      its sed), resolved by tests/k8s/kubelet_resolve.py and run as the
#      kubelet and the StatefulSet controller would run it
#      (tests/k8s/docker_kubelet.py: a sandbox per pod with its IP, hostname,
#      headless-Service DNS name and search path, the resolved env, argv,
#      user, limits and volumes, restarts with back-off, probes): the data
#      loaded through the data-loader pod, a clean run of 2 epochs (test
#      accuracy >= 0.985, every pod Ready, the weights fetched through the
#      chief pod); pod ps-1 deleted mid-run with ps_replicas 1 (made again
#      at a new IP, the run ends with final:); 3 workers; a live resize (1
#      worker of max_workers 2, `kubectl scale` to 2 and back to 1 mid-run);
#      a live resize of the ps (2 of max_ps 3, `kubectl scale` to 3 and back
#      to 2 mid-run: the shards move, the removed ps is drained).
#   9. per-task identities (docker-compose.identities.yml added; run before
#      8): the files made by the command its header gives, owned by uid
#      10001; run 1's checks (the health checks over mutual TLS), every
#      task took its own identity and served with --authorize, nothing
#      refused.
#  10. (run after 7) docs/deploy-compose.md's recipe for growing and
#      shrinking the workers of a running job, its commands as written (4
#      workers listed, 2 started with --min_workers=2, 2 more started once
#      the chief trains, stopped with SIGTERM 20 steps after they joined):
#      the chief logs each join and leave, the stopped workers exit 0 after
#      their step, the first containers run through (no restart, exit 0),
#      final: >= 0.98 (5 epochs: a new container takes seconds to join).
#  11. docs/deploy-compose.md's recipe for growing and shrinking the ps of a
#      running job, as written (3 ps listed, 2 started with --min_ps=2,
#      ps-2 started once the chief trains, stopped with SIGTERM 20 steps
#      after the shards were placed over 3 ps): the chief logs the add and
#      the drain, ps-2 trained, was drained and exited 0, the first
#      containers run through, final: >= 0.98.
# PSCLUSTER_DOCKER_RUNS="10 8D", say, does those runs only (8A to 8E: run
# 8's pods; smoke: the build stage's) after the image; unset: every run.
# It prints how long each step took. The base image, the build cache (the
# Bazel cache mount) and the images stay in the daemon's data root,
# $PSCLUSTER_DOCKER_CACHE (default ~/.cache/pscluster-docker), between runs;
# everything else (containers, networks, volumes, the daemon, its bridge
# and iptables rules) is removed at the end, whatever happened.
# The one change to the deployment: an override file sets the health
# checks' interval to 1 s (Compose's own file: 10 s), so that a run of one
# epoch (about 10 s of training) is probed while it trains.
#
# Needs root, x86-64 with AVX2 (the image's .bazelrc), kernel support for
# overlayfs, bridges and iptables, dockerd, containerd, Debian's docker CLI
# (/usr/bin/docker), docker-compose and debootstrap (deploy/install_deps.sh
# installs them), the network to Debian's mirror (for the base image and
# the image's apt-get), and MNIST; skips saying why otherwise.
#
# Usage: tests/docker_run_test.sh [MNIST_DIR]
set -uo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
data="${1:-${PSCLUSTER_DATA_DIR:-$repo/../shared/data/mnist}}"
cache="${PSCLUSTER_DOCKER_CACHE:-$HOME/.cache/pscluster-docker}"
source "$(dirname "${BASH_SOURCE[0]}")/test_lib.sh"   # pass, fail, skip, finish
note() { echo "docker_run_test: $*"; }

# What this test's daemon owns. The bridge and the address pool are used by
# no other test (tests/netns_cluster_test.sh: 10.213.0.0/24).
BRIDGE=pscdt0
BRIDGE_CIDR=10.231.0.1/24
POOL=10.231.16.0/20        # Compose's networks, a /24 each
PROJECT=pscdt              # the Compose project
IMAGE=pscluster-dockertest:latest
DOCKER=/usr/bin/docker     # Debian's CLI (20.10), whatever else is on PATH
MIN_ACCURACY=0.98          # one epoch of the CNN, sync, 2 workers: 0.9825
OWN_MIN_ACCURACY=0.93      # one epoch of tfjs_plain.json on MNIST as an .npz: 0.9455
RUN_LIMIT_S=300            # a run that takes longer is hung (it takes ~15 s)

# want RUN: whether to do RUN (1 2 2b 3 ... 11, smoke: the build stage's).
# PSCLUSTER_DOCKER_RUNS, when set, lists the runs to do (the image is built
# whatever it says): "10 8D" does run 10 and run 8's pods D only ("8": A to
# E). Unset: every run.
want() {
  [ -z "${PSCLUSTER_DOCKER_RUNS:-}" ] && return 0
  local r
  for r in $PSCLUSTER_DOCKER_RUNS; do
    [ "$r" = "$1" ] && return 0
    [ "$1" = 8 ] && [[ "$r" =~ ^8[A-E]+$ ]] && return 0
  done
  return 1
}
k8s_runs=""
for r in ${PSCLUSTER_DOCKER_RUNS:-}; do
  case "$r" in
    8) k8s_runs=ABCDE ;;
    1|2|2b|3|4|5|6|7|9|10|11|smoke) ;;
    *) if [[ "$r" =~ ^8([A-E]+)$ ]]; then
         k8s_runs+="${BASH_REMATCH[1]}"
       else
         echo "docker_run_test: PSCLUSTER_DOCKER_RUNS: '$r' is not a run (1 2 2b 3 4 5 6 7 8 8A-8E 9 10 11 smoke)" >&2
         exit 2
       fi ;;
  esac
done
k8s_runs="${k8s_runs:-ABCDE}"

# --- Can it run here? ---
if [ "$(id -u)" -ne 0 ]; then skip "a private Docker daemon needs root"; finish; fi
[ "$(uname -m)" = x86_64 ] || { skip "the image is x86-64 only, this is $(uname -m)"; finish; }
grep -qw avx2 /proc/cpuinfo || { skip "the image's build needs AVX2 (.bazelrc: x86-64-v3); this CPU lacks it"; finish; }
for c in /usr/sbin/dockerd:docker.io /usr/bin/containerd:containerd "$DOCKER":docker.io \
         docker-compose:docker-compose debootstrap:debootstrap ip:iproute2 iptables:iptables \
         curl:curl; do
  cmd="${c%%:*}"; pkg="${c#*:}"
  command -v "$cmd" >/dev/null 2>&1 ||
    { skip "no $cmd (Debian package $pkg; deploy/install_deps.sh installs it)"; finish; }
done
need_mnist "$data"
data="$(cd "$data" && pwd)"
grep -qw overlay /proc/filesystems || modprobe overlay 2>/dev/null ||
  { skip "no kernel support for overlayfs (Docker's overlay2 storage)"; finish; }
if ! iptables -t nat -S >/dev/null 2>&1; then
  skip "iptables cannot read the nat table here (no kernel support for NAT): $(iptables -t nat -S 2>&1 | head -1)"
  finish
fi

mkdir -p "$cache" || { fail "cannot create the cache $cache"; finish; }
# One run at a time per cache (its data root) and per bridge name.
exec 9>"$cache/lock"
if ! flock -w 900 9; then fail "another docker_run_test holds $cache/lock for 15 minutes"; finish; fi

tmp="$(mktemp -d /tmp/pscdt.XXXXXX)"   # short: it holds unix sockets
export DOCKER_HOST="unix://$tmp/docker.sock"
export DOCKER_BUILDKIT=1 COMPOSE_DOCKER_CLI_BUILD=1
unset DOCKER_CONTEXT DOCKER_CONFIG DOCKER_TLS_VERIFY DOCKER_CERT_PATH
export DOCKER_CONFIG="$tmp/client"     # no user credentials or CLI config
mkdir -p "$DOCKER_CONFIG"
compose_files=(-f "$repo/deploy/compose/docker-compose.yml" -f "$tmp/override.yml")
compose() { docker-compose --ansi never -p "$PROJECT" "${compose_files[@]}" "$@"; }
# What dockerd changes on the host, restored at the end: its chains, the
# FORWARD policy (it sets DROP) and IPv4 forwarding (it turns it on).
chains_before="$(iptables -S 2>/dev/null; iptables -t nat -S 2>/dev/null)"
forward_policy="$(iptables -S FORWARD 2>/dev/null | sed -n 's/^-P FORWARD //p')"
ip_forward="$(cat /proc/sys/net/ipv4/ip_forward 2>/dev/null)"
ctd_pid=""; dockerd_pid=""

# stop_pid PID SECONDS: TERM, then KILL after SECONDS.
stop_pid() {
  local pid="$1" i
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null
  for ((i = 0; i < $2 * 5; i++)); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.2; done
  kill -KILL "$pid" 2>/dev/null; sleep 0.5
}
cleanup() {
  if [ -n "$dockerd_pid" ] && kill -0 "$dockerd_pid" 2>/dev/null; then
    timeout 60 docker-compose --ansi never -p "$PROJECT" "${compose_files[@]}" down -v --remove-orphans -t 5 \
      >/dev/null 2>&1
    local c
    c="$("$DOCKER" ps -aq 2>/dev/null)"
    [ -n "$c" ] && "$DOCKER" rm -f -v $c >/dev/null 2>&1
    "$DOCKER" network prune -f >/dev/null 2>&1
    "$DOCKER" volume prune -f >/dev/null 2>&1
  fi
  stop_pid "$dockerd_pid" 20
  stop_pid "$ctd_pid" 10
  ip link del "$BRIDGE" 2>/dev/null
  # dockerd leaves its bridge's NAT and filter rules, and the DOCKER chains
  # it created, behind: remove ours (the lock keeps other runs of this test
  # away; rules of any other daemon stay).
  local t rule chain
  for t in nat filter; do
    iptables -t "$t" -S 2>/dev/null | grep -E -- "$BRIDGE|10\.231\." | sed 's/^-A /-D /' |
      while read -r rule; do eval "iptables -t $t $rule" 2>/dev/null; done
    for chain in $(iptables -t "$t" -S 2>/dev/null | sed -n 's/^-N //p'); do
      case "$chain" in DOCKER*) ;; *) continue ;; esac
      grep -qx -- "-N $chain" <<<"$chains_before" && continue
      iptables -t "$t" -S 2>/dev/null | grep -q -- "-j $chain\b" &&
        iptables -t "$t" -S | grep -- "-j $chain\b" | sed 's/^-A /-D /' |
          while read -r rule; do eval "iptables -t $t $rule" 2>/dev/null; done
      iptables -t "$t" -F "$chain" 2>/dev/null; iptables -t "$t" -X "$chain" 2>/dev/null
    done
  done
  [ -n "$forward_policy" ] && iptables -P FORWARD "$forward_policy" 2>/dev/null
  [ -n "$ip_forward" ] && echo "$ip_forward" >/proc/sys/net/ipv4/ip_forward 2>/dev/null
  # Mounts the daemon may have left under its exec root.
  grep -o " $tmp/[^ ]*" /proc/mounts | sort -r | while read -r m; do umount -l "$m" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- The private daemon: its own containerd, data root, exec root, sockets,
# pid files, config files (never /etc/docker/daemon.json) and bridge. ---
ip link del "$BRIDGE" 2>/dev/null   # left by a run that was killed
if ! ip link add "$BRIDGE" type bridge 2>"$tmp/err"; then
  skip "cannot create a bridge here (no kernel support?): $(cat "$tmp/err")"; finish
fi
ip addr add "$BRIDGE_CIDR" dev "$BRIDGE" && ip link set "$BRIDGE" up ||
  { fail "cannot set up the bridge $BRIDGE ($BRIDGE_CIDR)"; finish; }
mkdir -p "$cache/data-root" "$tmp/containerd"
cat >"$tmp/containerd.toml" <<EOF
version = 2
root = "$tmp/containerd/root"
state = "$tmp/containerd/state"
[grpc]
  address = "$tmp/containerd.sock"
[debug]
  address = ""
[metrics]
  address = ""
EOF
/usr/bin/containerd --config "$tmp/containerd.toml" >"$tmp/containerd.log" 2>&1 &
ctd_pid=$!
echo '{}' >"$tmp/daemon.json"
t0=$SECONDS
for ((i = 0; i < 100; i++)); do [ -S "$tmp/containerd.sock" ] && break; sleep 0.1; done
/usr/sbin/dockerd --config-file "$tmp/daemon.json" \
  --data-root "$cache/data-root" --exec-root "$tmp/exec" \
  --host "$DOCKER_HOST" --pidfile "$tmp/dockerd.pid" \
  --bridge "$BRIDGE" --default-address-pool "base=$POOL,size=24" \
  --iptables --ip-forward >"$tmp/dockerd.log" 2>&1 &
dockerd_pid=$!
up=0
for ((i = 0; i < 120; i++)); do
  "$DOCKER" version >/dev/null 2>&1 && { up=1; break; }
  kill -0 "$dockerd_pid" 2>/dev/null || break
  sleep 0.5
done
if [ "$up" = 0 ]; then
  log="$(grep -E 'level=(error|fatal)|failed' "$tmp/dockerd.log" | tail -3 | tr '\n' ' ')"
  if grep -qiE 'overlay|iptables|bridge|operation not permitted|not supported' <<<"$log"; then
    skip "the private dockerd did not start here (kernel support?): $log"
  else
    fail "the private dockerd did not start within 60 s: $log $(tail -3 "$tmp/containerd.log" | tr '\n' ' ')"
  fi
  finish
fi
note "private dockerd $("$DOCKER" version -f '{{.Server.Version}}') up in $((SECONDS - t0)) s (data root $cache/data-root, bridge $BRIDGE $BRIDGE_CIDR, pool $POOL)"

# --- 1. The base image. ---
# debian_mirror SUITE: the URI apt uses here for Debian's SUITE.
debian_mirror() {
  local suite="$1" f
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    awk -v suite="$suite" '
      function flush() { if (uri != "" && (" " suites " ") ~ (" " suite " ")) { print uri; exit } uri = ""; suites = "" }
      /^[ \t]*$/ { flush(); next }
      /^URIs:/ { uri = $2 } /^Suites:/ { $1 = ""; suites = $0 }
      END { flush() }' "$f"
  done
  cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
    awk -v suite="$suite" '$1 == "deb" { i = 2; if ($2 ~ /^\[/) while ($i !~ /\]$/) i++; if ($2 ~ /^\[/) i++; if ($(i + 1) == suite) print $i }'
}
if "$DOCKER" image inspect debian:12 >/dev/null 2>&1; then
  note "base image debian:12: cached in $cache/data-root"
else
  mirror="$(debian_mirror bookworm | head -1)"; mirror="${mirror:-http://deb.debian.org/debian}"
  security="$(debian_mirror bookworm-security | head -1)"
  security="${security:-http://deb.debian.org/debian-security}"
  t0=$SECONDS
  if debootstrap --variant=minbase bookworm "$tmp/rootfs" "$mirror" >"$tmp/debootstrap.log" 2>&1; then
    # The sources the official image has: bookworm, -updates, -security.
    rm -f "$tmp/rootfs/etc/apt/sources.list"
    cat >"$tmp/rootfs/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $mirror
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
    rm -rf "$tmp/rootfs/var/lib/apt/lists/"* "$tmp/rootfs/var/cache/apt/"*.bin
    if tar -C "$tmp/rootfs" -c . | "$DOCKER" import -c 'CMD ["bash"]' - debian:12 >/dev/null 2>"$tmp/err"; then
      pass "base image debian:12 made with debootstrap (minbase, $mirror) and docker import in $((SECONDS - t0)) s"
    else
      fail "docker import of the debootstrap tree: $(tail -3 "$tmp/err")"; finish
    fi
  else
    fail "debootstrap --variant=minbase bookworm from $mirror: $(tail -3 "$tmp/debootstrap.log" | tr '\n' ' ')"; finish
  fi
  rm -rf "$tmp/rootfs"
fi
# The Dockerfile's runtime stage starts from debian:12-slim.
"$DOCKER" tag debian:12 debian:12-slim

# --- 2. The CPU image. ---
# build_image WHAT ARGS...: docker build, PASS naming WHAT and the time, or
# FAIL with the build's last errors (status 1).
build_image() {
  local what="$1" t0=$SECONDS log="$tmp/build.$RANDOM.log"; shift
  if "$DOCKER" build --progress=plain "$@" >"$log" 2>&1; then
    pass "$what with Debian's docker $("$DOCKER" version -f '{{.Client.Version}}') (DOCKER_BUILDKIT=1) in $((SECONDS - t0)) s ($(grep -c '^#[0-9]* CACHED' "$log") steps cached)"
  else
    fail "$what: $(grep -E 'ERROR|error' "$log" | tail -5 | tr '\n' ' ')"
    tail -40 "$log"
    return 1
  fi
}
IMAGE_BINARIES=(ps_server worker evaluator chief pscluster-health-probe)
smoke_build_stage=0
if [ -n "${PSCLUSTER_DOCKER_PREBUILT:-}" ]; then
  # The binaries the test suite built (tests/run_all.sh: CPU-only, as the
  # build stage makes them) go through the Dockerfile's own runtime stage;
  # the build stage, which would compile them a second time, is checked on
  # its own below.
  ctx="$tmp/context"
  mkdir -p "$ctx/deploy/docker" "$ctx/prebuilt"
  cp "$repo/deploy/docker/entrypoint.sh" "$repo/deploy/docker/runtime-packages.txt" "$ctx/deploy/docker/"
  for b in "${IMAGE_BINARIES[@]}"; do
    f="$PSCLUSTER_DOCKER_PREBUILT/$b"
    if [ ! -x "$f" ]; then
      fail "PSCLUSTER_DOCKER_PREBUILT=$PSCLUSTER_DOCKER_PREBUILT holds no executable $b"; finish
    fi
    if readelf -d "$f" 2>/dev/null | grep -qE 'NEEDED.*lib(cudart|cublas)'; then
      fail "$f links CUDA: the CPU image takes the CPU-only build (PSCLUSTER_CUDA=0)"; finish
    fi
    cp "$f" "$ctx/prebuilt/"
  done
  build_image "image $IMAGE: deploy/docker/Dockerfile's runtime stage over the suite's CPU-only binaries (BINARIES=prebuilt)" \
    -f "$repo/deploy/docker/Dockerfile" --build-arg BINARIES=prebuilt -t "$IMAGE" "$ctx" || finish
  # The build stage as users run it (the repository as its context, its
  # dependencies installed by install_deps.sh --build_only, Bazel inside),
  # on one small target: the health probe, then run. After the Compose runs
  # (it compiles: beside them it would slow their training).
  smoke_build_stage=1
else
  build_image "image $IMAGE built from deploy/docker/Dockerfile" \
    -f "$repo/deploy/docker/Dockerfile" -t "$IMAGE" "$repo" || finish
fi
# What earlier builds left: untagged images, and build cache beyond 8 GB
# (the least recently used first; the Bazel cache mount of the last build
# is the newest).
"$DOCKER" image prune -f >/dev/null 2>&1
"$DOCKER" builder prune -f --keep-storage 8GB >/dev/null 2>&1

# --- 3, 4. The Compose runs. ---
services=(ps-0 ps-1 worker-0 worker-1 evaluator chief)
{
  echo "services:"
  for s in "${services[@]}"; do
    echo "  $s:"
    echo "    healthcheck: {interval: 1s}"
  done
} >"$tmp/override.yml"
export PSCLUSTER_IMAGE="$IMAGE" PSCLUSTER_EPOCHS=1 PSCLUSTER_DATA_DIR="$data"
unset PSCLUSTER_MODEL PSCLUSTER_CHIEF_ARGS PSCLUSTER_RUNS   # runs 1-5: the built-in CNN, no more chief flags (run 6 sets both)

# cid SERVICE: the id of SERVICE's container.
cid() { "$DOCKER" ps -aq --filter "label=com.docker.compose.project=$PROJECT" \
          --filter "label=com.docker.compose.service=$1" | head -1; }

# compose_run NAME KILL [OWN]: one run of the deployment (KILL=1: kill -9 the
# ps:1 process once the chief trains, and expect every ps restored from a
# checkpoint; KILL=2: the same with PSCLUSTER_PS_REPLICAS=1 set by the
# caller, and expect ps:1 restored from its backup; OWN=1: the user's model and data in
# $PSCLUSTER_MODEL and $PSCLUSTER_DATA_DIR, checked instead of the health
# checks and /metrics, which run 1 checks); checks it and prints its figures.
compose_run() {
  local name="$1" kill_ps="$2" own="${3:-0}" log="$tmp/$1.up.log" t0 up_pid s c st h rc out
  local min_accuracy="$MIN_ACCURACY"
  [ "$own" = 1 ] && min_accuracy="$OWN_MIN_ACCURACY"
  local -A healthy=()
  local metrics_ok=0 metrics_msg="not asked (worker-0 never trained while polled)" killed="" deadline
  local host_ok=0 host_msg="not asked (the chief never trained while polled)" hostport
  compose down -v --remove-orphans >/dev/null 2>&1
  t0=$SECONDS
  compose up --no-build --no-color >"$log" 2>&1 &
  up_pid=$!
  deadline=$((SECONDS + RUN_LIMIT_S))
  while kill -0 "$up_pid" 2>/dev/null; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      fail "$name: docker-compose up did not return within $RUN_LIMIT_S s (the run takes ~15 s); states: $(
        for s in "${services[@]}"; do c="$(cid "$s")"; [ -n "$c" ] &&
          echo -n "$s=$("$DOCKER" inspect -f '{{.State.Status}}/{{.State.ExitCode}}/restarts {{.RestartCount}}' "$c") "; done)"
      kill -TERM "$up_pid" 2>/dev/null
      compose stop -t 5 >/dev/null 2>&1
      wait "$up_pid" 2>/dev/null
      echo "--- $name: last lines of docker-compose up"; tail -30 "$log"
      return
    fi
    for s in "${services[@]}"; do
      [ -n "${healthy[$s]:-}" ] && continue
      c="$(cid "$s")"; [ -n "$c" ] || continue
      h="$("$DOCKER" inspect -f '{{if .State.Health}}{{.State.Health.Status}}{{end}}' "$c" 2>/dev/null)"
      [ "$h" = healthy ] && healthy[$s]=$((SECONDS - t0))
    done
    c="$(cid chief)"
    # "epoch 1/1 step N ..." with N > 0: the chief trains.
    if [ -n "$c" ] && "$DOCKER" logs "$c" 2>&1 | grep -qE 'epoch [0-9]+/[0-9]+ step [1-9]'; then
      if [ "$metrics_ok" = 0 ] && c="$(cid worker-0)" && [ -n "$c" ]; then
        ip="$("$DOCKER" inspect -f '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}' "$c")"
        if out="$(curl -sS -m 5 "http://$ip:9100/metrics" 2>&1)"; then
          if grep -qE '^pscluster_examples_total\{task="worker:0"\} [1-9]' <<<"$out"; then
            metrics_ok=1
            metrics_msg="$(grep -E '^pscluster_examples_total\{task="worker:0"\}' <<<"$out") at $((SECONDS - t0)) s"
          else
            metrics_ok=2
            metrics_msg="http://$ip:9100/metrics answered without a non-zero pscluster_examples_total{task=\"worker:0\"}: $(head -c 300 <<<"$out")"
          fi
        else
          metrics_msg="http://$ip:9100/metrics: $out"
        fi
      fi
      # The chief's /metrics from the host, through the port Compose
      # published (docker-compose port).
      if [ "$host_ok" = 0 ] && hostport="$(compose port chief 9100 2>/dev/null)" && [ -n "$hostport" ]; then
        if out="$(curl -sS -m 5 "http://$hostport/metrics" 2>&1)" &&
           grep -qE '^pscluster_pending_workers\{task="chief:0"\}' <<<"$out"; then
          host_ok=1
          host_msg="http://$hostport/metrics: $(grep -E '^pscluster_pending_workers\{task="chief:0"\}' <<<"$out")"
        else
          host_msg="http://$hostport/metrics: $(head -c 200 <<<"$out")"
        fi
      fi
      if [ "$kill_ps" != 0 ] && [ -z "$killed" ]; then
        c="$(cid ps-1)"
        pid="$("$DOCKER" inspect -f '{{.State.Pid}}' "$c" 2>/dev/null)"
        if [ -n "$pid" ] && [ "$pid" != 0 ] && kill -KILL "$pid"; then
          killed="pid $pid at $((SECONDS - t0)) s: $("$DOCKER" logs "$(cid chief)" 2>&1 | grep -E 'epoch [0-9]+/[0-9]+ step' | tail -1 | sed 's/^.*\] //')"
          note "$name: kill -9 of ps:1's process, $killed"
        fi
      fi
    fi
    sleep 0.5
  done
  wait "$up_pid"; rc=$?
  local wall=$((SECONDS - t0))

  c="$(cid chief)"
  local final
  final="$("$DOCKER" logs "$c" 2>&1 | grep '^final:' | tail -1)"
  if [ -z "$final" ]; then
    fail "$name: no final: line from the chief; its last lines: $("$DOCKER" logs "$c" 2>&1 | tail -5 | tr '\n' ' ')"
  else
    local acc="${final#*test_accuracy=}"; acc="${acc%% *}"
    if awk -v a="$acc" -v m="$min_accuracy" 'BEGIN { exit !(a + 0 >= m) }'; then
      pass "$name: the chief's $final (>= $min_accuracy)"
    else
      fail "$name: the chief's $final: test accuracy below $min_accuracy"
    fi
  fi
  [ "$rc" -eq 0 ] && pass "$name: docker-compose up exited 0" ||
    fail "$name: docker-compose up exited $rc"
  local bad="" restarts=""
  for s in "${services[@]}"; do
    c="$(cid "$s")"
    if [ -z "$c" ]; then bad+="$s: no container; "; continue; fi
    st="$("$DOCKER" inspect -f '{{.State.Status}} {{.State.ExitCode}} {{.RestartCount}}' "$c")"
    read -r status code count <<<"$st"
    [ "$status" = exited ] && [ "$code" = 0 ] || bad+="$s: $status, exit code $code; "
    [ "$count" != 0 ] && restarts+="$s restarted $count time(s); "
  done
  [ -z "$bad" ] && pass "$name: every container exited with code 0 (${restarts:-no restarts})" ||
    fail "$name: ${bad}(${restarts:-no restarts})"
  if [ "$own" = 1 ]; then
    own_checks "$name"
  else
  local not_healthy=""
  for s in "${services[@]}"; do [ -n "${healthy[$s]:-}" ] || not_healthy+=" $s"; done
  if [ -z "$not_healthy" ]; then
    pass "$name: every service's health check reached healthy ($(for s in "${services[@]}"; do echo -n "$s ${healthy[$s]} s, "; done | sed 's/, $//') after up)"
  else
    fail "$name: never healthy while polled:$not_healthy"
  fi
  if [ "$kill_ps" = 0 ]; then
    [ "$metrics_ok" = 1 ] && pass "$name: /metrics on worker-0 mid-run: $metrics_msg" ||
      fail "$name: /metrics on worker-0: $metrics_msg"
    [ "$host_ok" = 1 ] && pass "$name: the chief's /metrics from the host mid-run, on the published port: $host_msg" ||
      fail "$name: the chief's /metrics from the host: $host_msg"
  else
    c="$(cid ps-1)"
    local count; count="$("$DOCKER" inspect -f '{{.RestartCount}}' "$c" 2>/dev/null)"
    local starts; starts="$("$DOCKER" logs "$c" 2>&1 | grep -c 'gRPC on')"
    if [ -z "$killed" ]; then
      fail "$name: ps:1 was never killed (the chief was not seen training)"
    elif [ "${count:-0}" -ge 1 ] && [ "$starts" -ge 2 ]; then
      pass "$name: the ps:1 process killed (kill -9, $killed) was restarted by Docker ($count restart(s), $starts starts in its log) and the run finished"
      # The chief saw the new process and restored every ps from its
      # newest checkpoint or, with replicas, ps:1 alone: its backup store
      # on ps-0 promoted (the killed container's address refused the
      # chief's checks, or the restarted one answered first) or, when the
      # address only timed out until the new process answered, the
      # restarted ps:1 given its backup's state (chief/ps_recovery.cc).
      local restored want='ps:1 restarted: every ps restored' other='ps:1 restarted: restored from its backup'
      [ "$kill_ps" = 2 ] && {
        want='ps:1 (restarted: restored from its backup store|lost .*: its backup store on ps:0 .* serves its shards)'
        other='every ps restored'
      }
      restored="$("$DOCKER" logs "$(cid chief)" 2>&1 | grep -E "$want" | tail -1 | sed 's/^.*\] //')"
      [ -n "$restored" ] && pass "$name: the chief restored the restarted ps:1: $restored" ||
        fail "$name: the chief never logged restoring the restarted ps:1 ('$want ...'); its ps:1 lines: $(
          "$DOCKER" logs "$(cid chief)" 2>&1 | grep 'ps:1' | tail -5 | tr '\n' ' ')"
      if "$DOCKER" logs "$(cid chief)" 2>&1 | grep -qF "$other"; then
        fail "$name: the chief also logged '$other'"
      fi
    else
      fail "$name: ps:1 killed ($killed) but not restarted: RestartCount=${count:-?}, $starts starts in its log"
    fi
  fi
  fi
  note "$name: wall time of docker-compose up: $wall s; ${final:-no final line}"
  if [ "$failed" -gt 0 ]; then
    echo "--- $name: last lines of docker-compose up"; tail -40 "$log"
  fi
  # More checks of a caller's, while the containers are there.
  [ -n "${RUN_HOOK:-}" ] && "$RUN_HOOK" "$name"
  compose down -v --remove-orphans >/dev/null 2>&1
}

# own_checks NAME: the user's model reached the chief (--model, the file
# mounted read-only at the same path) and was trained; the .npz reached every
# worker and the evaluator (--data_dir, mounted read-only) and was read.
own_checks() {
  local name="$1" s c args mounts bad="" want flag
  for s in "${services[@]}"; do
    c="$(cid "$s")"
    [ -n "$c" ] || { bad+="$s: no container; "; continue; }
    args="$("$DOCKER" inspect -f '{{json .Args}}' "$c")"
    mounts="$("$DOCKER" inspect -f '{{range .Mounts}}{{if eq .Type "bind"}}{{.Source}}>{{.Destination}}:{{.RW}} {{end}}{{end}}' "$c")"
    case "$s" in
      chief) flag="--model"; want="$PSCLUSTER_MODEL" ;;
      worker-*|evaluator) flag="--data_dir"; want="$PSCLUSTER_DATA_DIR" ;;
      *) continue ;;
    esac
    grep -qF "\"$flag=$want\"" <<<"$args" || bad+="$s: no $flag=$want in $args; "
    grep -qF "$want>$want:false" <<<"$mounts" || bad+="$s: $want not mounted read-only at the same path ($mounts); "
  done
  [ -z "$bad" ] &&
    pass "$name: the chief got --model=$PSCLUSTER_MODEL, the workers and the evaluator --data_dir=$PSCLUSTER_DATA_DIR, each bind-mounted read-only at the same path" ||
    fail "$name: $bad"
  local steps
  steps="$("$DOCKER" logs "$(cid chief)" 2>&1 | grep '^final:' | tail -1 | grep -oE 'steps=[0-9]+')"
  if [ "$steps" = steps=938 ]; then
    pass "$name: PSCLUSTER_CHIEF_ARGS reached the chief: 938 steps of 64 examples in the epoch"
  else
    fail "$name: PSCLUSTER_CHIEF_ARGS=$PSCLUSTER_CHIEF_ARGS: the final line has '${steps:-no steps}', not steps=938"
  fi
  local model_line eval_line
  model_line="$("$DOCKER" logs "$(cid chief)" 2>&1 | grep -o 'model tfjs_plain: [0-9]* parameters' | head -1)"
  eval_line="$("$DOCKER" logs "$(cid evaluator)" 2>&1 | grep -o 'evaluating tfjs_plain on [0-9]* test examples' | head -1)"
  if [ -n "$model_line" ] && [ -n "$eval_line" ]; then
    pass "$name: the chief trained the user's model ('$model_line'), the evaluator scored it on the .npz ('$eval_line')"
  else
    fail "$name: the chief or the evaluator did not name the user's model tfjs_plain: chief '$model_line', evaluator '$eval_line'"
  fi
  # PSCLUSTER_RUNS: the run's files in the host's folder, as written.
  local files
  files="$(cd "$PSCLUSTER_RUNS" 2>/dev/null && ls -d model.safetensors events.out.tfevents.* checkpoints 2>/dev/null | tr '\n' ' ')"
  if [[ "$files" == *model.safetensors* && "$files" == *events.out.tfevents.* && "$files" == *checkpoints* ]]; then
    pass "$name: PSCLUSTER_RUNS=$PSCLUSTER_RUNS (a host folder owned by uid 10001) holds the run's files: $files"
  else
    fail "$name: PSCLUSTER_RUNS=$PSCLUSTER_RUNS holds '${files}', not model.safetensors, event files and checkpoints/"
  fi
  # The weights, copied out as docs/deploy-compose.md says (ps -aq: the
  # chief has exited).
  local out="$tmp/own-weights" got
  mkdir -p "$out"
  if "$DOCKER" cp "$(compose ps -aq chief)":/runs/model.safetensors "$out/" 2>"$tmp/err" &&
     got="$("$py" - "$out/model.safetensors" <<'EOF' 2>&1
import json, struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
meta = h.pop("__metadata__", {})
assert meta.get("model") == "tfjs_plain" and meta.get("layout") == "keras", meta
print("%s; %s" % (", ".join(sorted(h)), json.dumps(meta, sort_keys=True)))
EOF
)"; then
    pass "$name: model.safetensors copied out with docker cp \$(docker-compose ps -aq chief):/runs/model.safetensors: $got"
  else
    fail "$name: model.safetensors not copied out, or not the user's model's: $(cat "$tmp/err") ${got:-}"
  fi
}

# expect_codes NAME SERVICE=CODE...: every container exited with its code,
# restarted no more often than Compose allows (5, the chief 3).
expect_codes() {
  local name="$1" bad="" got="" c status code count limit sc s want; shift
  for sc in "$@"; do
    s="${sc%%=*}"; want="${sc#*=}"
    c="$(cid "$s")"
    if [ -z "$c" ]; then bad+="$s: no container; "; continue; fi
    read -r status code count <<<"$("$DOCKER" inspect -f '{{.State.Status}} {{.State.ExitCode}} {{.RestartCount}}' "$c")"
    limit=5; [ "$s" = chief ] && limit=3
    got+="$s $code (${count} restarts), "
    if ! { [ "$status" = exited ] && [ "$code" = "$want" ] && [ "$count" -le "$limit" ]; }; then
      bad+="$s: $status, exit code $code (want $want), $count restarts (at most $limit); "
      echo "--- $name: last lines of $s"; "$DOCKER" logs "$c" 2>&1 | tail -12
    fi
  done
  [ -z "$bad" ] && pass "$name: exit codes ${got%, }" || fail "$name: $bad"
}

# failure_run NAME MODE: a run that cannot finish must end promptly and
# visibly, every container with the exit code that says why.
#   stop:      ps:1 stopped by hand (docker stop: not restarted) mid-run; the
#              chief says what it waits for every 5 s, gives up after
#              --ps_recovery_timeout_s=8 and stops every task as failed (3).
#   emptydata: a data folder without MNIST: the workers and the evaluator
#              exit 4 (restarts exit 4 at once), the chief gives up after
#              --wait_for_cluster_s=10 (3).
failure_run() {
  local name="$1" mode="$2" log="$tmp/$1.up.log" t0 up_pid rc c deadline stopped=""
  local -a envs=()
  compose down -v --remove-orphans >/dev/null 2>&1
  case "$mode" in
    stop) envs=(PSCLUSTER_PS_RECOVERY_TIMEOUT_S=8) ;;
    emptydata) mkdir -p "$tmp/emptydata"
               envs=(PSCLUSTER_DATA_DIR="$tmp/emptydata" PSCLUSTER_WAIT_FOR_CLUSTER_S=10) ;;
  esac
  t0=$SECONDS
  ( for e in "${envs[@]}"; do export "${e?}"; done; compose up --no-build --no-color ) >"$log" 2>&1 &
  up_pid=$!
  deadline=$((SECONDS + RUN_LIMIT_S))
  while kill -0 "$up_pid" 2>/dev/null; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      fail "$name: docker-compose up did not return within $RUN_LIMIT_S s"
      kill -TERM "$up_pid" 2>/dev/null; compose stop -t 5 >/dev/null 2>&1; wait "$up_pid" 2>/dev/null
      tail -30 "$log"; compose down -v --remove-orphans >/dev/null 2>&1
      return
    fi
    if [ "$mode" = stop ] && [ -z "$stopped" ] && c="$(cid chief)" && [ -n "$c" ] &&
       "$DOCKER" logs "$c" 2>&1 | grep -qE 'epoch [0-9]+/[0-9]+ step [1-9]'; then
      "$DOCKER" stop -t 10 "$(cid ps-1)" >/dev/null && stopped=$SECONDS &&
        note "$name: docker stop of ps-1 at $((SECONDS - t0)) s"
    fi
    sleep 0.5
  done
  wait "$up_pid"; rc=$?
  # v1's up returns once every container has stopped a first time; Docker
  # may still be spending the allowed restarts (each one exits at once with
  # the kept code). Wait until every container is down for good.
  local settle_t0=$SECONDS busy
  while :; do
    busy=""
    for s in "${services[@]}"; do
      c="$(cid "$s")"
      [ -n "$c" ] && [ "$("$DOCKER" inspect -f '{{.State.Status}}' "$c")" != exited ] && busy+=" $s"
    done
    [ -z "$busy" ] && break
    if [ $((SECONDS - settle_t0)) -ge 120 ]; then
      fail "$name: still not down 120 s after up returned:$busy"; break
    fi
    sleep 0.5
  done
  note "$name: every container down for good $((SECONDS - settle_t0)) s after up returned"
  local chief_log; chief_log="$("$DOCKER" logs "$(cid chief)" 2>&1)"
  case "$mode" in
    stop)
      if [ -z "$stopped" ]; then
        fail "$name: ps-1 was never stopped (the chief was not seen training)"
      else
        note "$name: docker-compose up returned $((SECONDS - stopped)) s after the stop (exit $rc)"
        local waiting; waiting="$(grep -o 'training paused: still waiting for ps:1 to answer ([^)]*)' <<<"$chief_log" | head -1)"
        [ -n "$waiting" ] && pass "$name: the chief said what it waited for: $waiting" ||
          fail "$name: no 'training paused: still waiting for ps:1' line from the chief"
        grep -q 'the run failed; every task was told to stop (exit code 3)' <<<"$chief_log" &&
          pass "$name: the chief gave the run up and said so" ||
          fail "$name: no 'the run failed' line from the chief: $(tail -3 <<<"$chief_log" | tr '\n' ' ')"
        # ps-1 was stopped by hand: exited, never restarted (Docker's rule).
        local st; st="$("$DOCKER" inspect -f '{{.State.Status}} {{.RestartCount}}' "$(cid ps-1)")"
        [ "$st" = "exited 0" ] && pass "$name: ps-1, stopped by hand, was not restarted" ||
          fail "$name: ps-1 after docker stop: $st (want 'exited 0': not restarted)"
        expect_codes "$name" chief=3 ps-0=3 worker-0=3 worker-1=3 evaluator=3
      fi ;;
    emptydata)
      note "$name: docker-compose up returned after $((SECONDS - t0)) s (exit $rc)"
      local w; w="$("$DOCKER" logs "$(cid worker-0)" 2>&1 | grep -oF "error: --data_dir=$tmp/emptydata: MNIST train images not found" | head -1)"
      [ -n "$w" ] && pass "$name: worker-0 named the missing data: $w" ||
        fail "$name: worker-0 did not name the missing data: $("$DOCKER" logs "$(cid worker-0)" 2>&1 | tail -2 | tr '\n' ' ')"
      expect_codes "$name" chief=3 ps-0=3 ps-1=3 worker-0=4 worker-1=4 evaluator=4 ;;
  esac
  compose down -v --remove-orphans >/dev/null 2>&1
}

# resize_run NAME KIND: docs/deploy-compose.md's recipe for growing and
# shrinking the KIND (workers or ps) of a running job, its commands as
# written, in order, in a copy of deploy/compose (Compose v2's `docker
# compose` run as v1's docker-compose, the one here), for 5 epochs.
#   workers: the first `up` starts 2 of the 4 workers listed; once the chief
#     trains, the next `up` starts worker-2 and worker-3; once both joined
#     and the run went on 20 steps, `stop` sends them SIGTERM. Checks: it
#     started with 2 of 4 and logged each join and each leave; worker-2 and
#     worker-3 left after their step and exited 0, not restarted.
#   ps: the first `up` starts 2 of the 3 ps listed; once the chief trains,
#     the next `up` starts ps-2; once the shards are placed over 3 ps and the
#     run went on 20 steps, `stop` sends it SIGTERM. Checks: it started on 2
#     of 3 and logged the add, then the drain; ps-2 applied updates, was
#     drained and exited 0, not restarted.
# Both: the chief's final line; the chief, ps-0, ps-1, the evaluator,
# worker-0 and worker-1 are the containers the first `up` made, never
# restarted, and exited 0.
# resize_workers_checks NAME CHIEF_LOG: run 10's own checks (resize_run workers).
resize_workers_checks() {
  local name="$1" log="$2" bad="" c
  local started
  started="$(grep -oE 'starting with 2 of 4 workers \(--min_workers=2\); these join when they answer: worker:2 \(worker-2:2222\), worker:3 \(worker-3:2222\)' <<<"$log")"
  [ -n "$started" ] && pass "$name: the chief started with 2 of the 4 workers listed: '$started'" ||
    fail "$name: no 'starting with 2 of 4 workers' line naming worker-2 and worker-3: $(grep -m2 'workers' <<<"$log" | tr '\n' ' ')"
  local w events=""
  for w in 2 3; do
    local joins leaves
    joins="$(grep -n "worker $w joins the run and gets work from the next step" <<<"$log" | head -1 | cut -d: -f1)"
    leaves="$(grep -n "worker $w leaves the run (it stops)" <<<"$log" | head -1 | cut -d: -f1)"
    if [ -n "$joins" ] && [ -n "$leaves" ] && [ "$joins" -lt "$leaves" ]; then
      events+="worker $w joined, then left; "
    else
      bad+="the chief's log lacks 'worker $w joins the run ...' before 'worker $w leaves the run (it stops)' (lines ${joins:-none}, ${leaves:-none}); "
    fi
    c="$(cid "worker-$w")"
    local wlog count code done
    wlog="$("$DOCKER" logs "$c" 2>&1)"
    read -r code count <<<"$("$DOCKER" inspect -f '{{.State.ExitCode}} {{.RestartCount}}' "$c" 2>/dev/null)"
    done="$(grep -oE 'stopping: the chief knows this worker leaves \([0-9]+ chunk\(s\) reported done\)' <<<"$wlog" | tail -1)"
    if [ "$code" = 0 ] && [ "$count" = 0 ] && grep -q "leaving the run after the step in flight" <<<"$wlog" &&
       [[ "$done" =~ \(([1-9][0-9]*)\ chunk ]]; then
      events+="worker-$w exited 0 ($done); "
    else
      bad+="worker-$w: exit code ${code:-?}, ${count:-?} restarts, '${done:-no stopping line}': $(tail -3 <<<"$wlog" | tr '\n' ' '); "
    fi
  done
  [ -z "$bad" ] && pass "$name: ${events%; }" || fail "$name: $bad"
}

# resize_ps_checks NAME CHIEF_LOG: run 11's own checks (resize_run ps).
resize_ps_checks() {
  local name="$1" log="$2" started add drain c plog code count applied
  started="$(grep -oE 'starting on 2 of 3 ps \(--min_ps=2\); the others are added when they answer' <<<"$log")"
  [ -n "$started" ] && pass "$name: the chief started on 2 of the 3 ps listed: '$started'" ||
    fail "$name: no 'starting on 2 of 3 ps (--min_ps=2)' line: $(grep -m2 ' ps' <<<"$log" | tr '\n' ' ')"
  add="$(grep -n "ps:2 answers: placing the shards over 3 ps" <<<"$log" | head -1 | cut -d: -f1)"
  drain="$(grep -n "ps:2 leaves: placing the shards over 2 ps" <<<"$log" | head -1 | cut -d: -f1)"
  if [ -n "$add" ] && [ -n "$drain" ] && [ "$add" -lt "$drain" ]; then
    pass "$name: the chief added ps:2, then drained it: $(grep -oE 'the shards are placed over [0-9] ps from step [0-9]+ \(generation [0-9]+\): [^;]*; training paused [0-9.]+ [a-z]+' <<<"$log" | tr '\n' ';')"
  else
    fail "$name: the chief's log lacks 'ps:2 answers: placing the shards over 3 ps' before 'ps:2 leaves: placing the shards over 2 ps' (lines ${add:-none}, ${drain:-none})"
  fi
  c="$(cid ps-2)"
  plog="$("$DOCKER" logs "$c" 2>&1)"
  read -r code count <<<"$("$DOCKER" inspect -f '{{.State.ExitCode}} {{.RestartCount}}' "$c" 2>/dev/null)"
  applied="$(grep -oE 'drained: the other ps serve its shards\): version=[0-9]+ applied=[0-9]+' <<<"$plog" | tail -1)"
  if [ "$code" = 0 ] && [ "$count" = 0 ] && [[ "$applied" =~ applied=[1-9] ]]; then
    pass "$name: ps-2 trained, was drained and exited 0, not restarted ($applied)"
  else
    fail "$name: ps-2: exit code ${code:-?}, ${count:-?} restarts, '${applied:-no drained shutdown line}': $(tail -3 <<<"$plog" | tr '\n' ' ')"
  fi
}

resize_run() {
  local name="$1" kind="$2" root="$tmp/resize" block line t0 s c st first_up="" bad="" got=""
  local -a lines=()
  compose down -v --remove-orphans >/dev/null 2>&1
  rm -rf "$root"; mkdir -p "$root/deploy"
  cp -r "$repo/deploy/compose" "$root/deploy/"
  block="$(awk -v h="## Growing and shrinking the $kind " 'index($0, h) == 1 { f = 1 } f && /^```sh$/ { b = 1; next } b && /^```$/ { exit } b' \
    "$repo/docs/deploy-compose.md")"
  while IFS= read -r line; do
    [[ "$line" =~ ^[[:space:]]*(#|$) ]] || lines+=("$line")
  done <<<"$block"
  if [ "${#lines[@]}" -lt 4 ]; then
    fail "$name: no recipe (a sh block of 4 commands or more) under '## Growing and shrinking the $kind' in docs/deploy-compose.md"
    return
  fi
  t0=$SECONDS
  # The recipe's shell: its cd and export stay in it; what it waited for
  # and the containers of the first `up` go to files.
  (
    cd "$root" || exit 1
    # 5 epochs (about 60 s on an idle host, twice that beside the other
    # tests): a new container can take 30 s to join on a busy host, and
    # `docker-compose stop` seconds more to reach it; with 3 epochs a
    # full run once ended before worker-2's SIGTERM came (it finished,
    # never left).
    export COMPOSE_PROJECT_NAME="$PROJECT" PSCLUSTER_EPOCHS=5
    docker() {
      if [ "$1" = compose ]; then shift; docker-compose --ansi never "$@"; else "$DOCKER" "$@"; fi
    }
    chief_log() { "$DOCKER" logs "$(cid chief)" 2>&1; }
    step() { chief_log | grep -oE 'epoch [0-9]+/[0-9]+ step [0-9]+' | tail -1 | awk '{ print $NF }'; }
    # until WHAT CMD...: CMD true within the run's limit, the chief not exited.
    until_() {
      local what="$1"; shift
      while ! "$@"; do
        if [ $((SECONDS - t0)) -ge "$RUN_LIMIT_S" ] ||
           [ "$("$DOCKER" inspect -f '{{.State.Status}}' "$(cid chief)" 2>/dev/null)" = exited ]; then
          echo "the chief never $what; its last lines: $(chief_log | tail -4 | tr '\n' ' ')" >"$root/error"
          return 1
        fi
        sleep 0.5
      done
      echo "$((SECONDS - t0)) s, step $(step): the chief $what" >>"$root/events"
    }
    trains() { chief_log | grep -qE 'epoch [0-9]+/[0-9]+ step [1-9]'; }
    if [ "$kind" = workers ]; then
      new=worker-2 what="logged that worker 2 and worker 3 joined"
      arrived() { [ "$(chief_log | grep -cE 'worker [23] joins the run')" -ge 2 ]; }
    else
      new=ps-2 what="placed the shards over 3 ps"
      arrived() { chief_log | grep -q 'the shards are placed over 3 ps from step'; }
    fi
    went_on() { [ "$(step)" -ge $(($(cat "$root/joined_at") + 20)) ]; }
    for line in "${lines[@]}"; do
      echo "+ $line" >>"$root/recipe.log"
      eval "$line" >>"$root/recipe.log" 2>&1 || { echo "'$line' exited $?" >"$root/error"; exit 1; }
      case "$line" in
        *"up -d"*" chief"*)
          until_ "trained" trains || exit 1
          for s in chief ps-0 ps-1 evaluator worker-0 worker-1; do echo "$s $(cid "$s")"; done >"$root/ids" ;;
        *"up -d"*"$new"*)
          until_ "$what" arrived || exit 1
          step >"$root/joined_at"
          until_ "went on 20 steps after it $what" went_on || exit 1 ;;
      esac
    done
  )
  [ -f "$root/events" ] && note "$name: $(tr '\n' ';' <"$root/events")"
  if [ -f "$root/error" ]; then
    fail "$name: $(cat "$root/error")"
    echo "--- $name: the recipe's output"; tail -30 "$root/recipe.log"
  else
    pass "$name: every command of the recipe ran as written (${#lines[@]} commands; \`docker compose\` as docker-compose 1.29)"
  fi
  # The end: the chief stops every task it still has.
  while [ $((SECONDS - t0)) -lt "$RUN_LIMIT_S" ]; do
    st=""
    for s in chief ps-0 ps-1 evaluator worker-0 worker-1; do
      c="$(cid "$s")"; [ -n "$c" ] && st+="$("$DOCKER" inspect -f '{{.State.Status}}' "$c") "
    done
    [[ "$st" =~ running|restarting|created ]] || break
    sleep 1
  done
  note "$name: every container down after $((SECONDS - t0)) s"
  local log final acc
  log="$("$DOCKER" logs "$(cid chief)" 2>&1)"
  final="$(grep '^final:' <<<"$log" | tail -1)"
  acc="${final#*test_accuracy=}"; acc="${acc%% *}"
  if [ -n "$final" ] && awk -v a="$acc" 'BEGIN { exit !(a + 0 >= 0.98) }'; then
    pass "$name: the chief's $final (>= 0.98)"
  else
    fail "$name: the chief's final line: '${final:-none}' (want test accuracy >= 0.98); its last lines: $(tail -4 <<<"$log" | tr '\n' ' ')"
  fi
  resize_${kind}_checks "$name" "$log"
  # The rest ran through: the containers of the first up, never restarted.
  bad=""
  while read -r s first_up; do
    c="$(cid "$s")"
    read -r st code count <<<"$("$DOCKER" inspect -f '{{.State.Status}} {{.State.ExitCode}} {{.RestartCount}}' "$c" 2>/dev/null)"
    got+="$s $code, "
    [[ "$c" == "$first_up"* || "$first_up" == "$c"* ]] && [ "$st" = exited ] && [ "$code" = 0 ] && [ "$count" = 0 ] ||
      bad+="$s: container ${c:0:12} (first up: ${first_up:0:12}), $st, exit code $code, $count restarts; "
  done <"$root/ids" 2>/dev/null
  [ -s "$root/ids" ] || bad="the first up's containers were never recorded"
  [ -z "$bad" ] && pass "$name: chief, ps-0, ps-1, evaluator, worker-0 and worker-1 ran through the resize in the containers the first up made, never restarted: exit codes ${got%, }" ||
    fail "$name: $bad"
  (cd "$root/deploy/compose" && COMPOSE_PROJECT_NAME="$PROJECT" docker-compose --ansi never down -v --remove-orphans -t 5) \
    >/dev/null 2>&1
}

want 1 && compose_run "run 1 (1 epoch)" 0
want 2 && compose_run "run 2 (1 epoch, kill -9 of ps:1)" 1
want 2b && PSCLUSTER_PS_REPLICAS=1 compose_run "run 2b (1 epoch, --ps_replicas=1, kill -9 of ps:1)" 2
want 3 && failure_run "run 3 (ps:1 stopped by hand, never back)" stop
want 4 && failure_run "run 4 (no MNIST in the data folder)" emptydata

# A data folder that does not exist: up refuses to start (long-syntax bind
# mount), and Docker creates no empty, root-owned folder in its place.
if want 5; then
missing="$tmp/nodata/mnist"
if PSCLUSTER_DATA_DIR="$missing" compose up --no-build --no-color >"$tmp/nodata.up.log" 2>&1; then
  fail "run 5 (data folder missing): docker-compose up exited 0"
elif [ -e "$tmp/nodata" ]; then
  fail "run 5 (data folder missing): Docker created $(ls -ld "$tmp/nodata")"
else
  pass "run 5 (data folder missing): up refused at once and created nothing: $(grep -io 'bind source path does not exist[^"]*' "$tmp/nodata.up.log" | head -1)"
fi
compose down -v --remove-orphans >/dev/null 2>&1
fi  # run 5

# 6. A user's model and data, through PSCLUSTER_MODEL and PSCLUSTER_DATA_DIR:
# the Keras model TensorFlow.js wrote, and MNIST as np.savez writes it.
if want 6; then
py=""
for p in /usr/bin/python3 python3; do
  command -v "$p" >/dev/null 2>&1 && "$p" -c 'import numpy' 2>/dev/null && { py="$p"; break; }
done
if [ -z "$py" ]; then
  skip "run 6 (a user's model and .npz): no python3 with numpy (Debian: python3-numpy) to write the .npz"
else
  own="$tmp/own"
  mkdir -p "$own"
  cp "$repo/tests/fixtures/keras/tfjs_plain.json" "$own/model.json"
  t0=$SECONDS
  if msg="$("$py" - "$data" "$own/data.npz" <<'EOF' 2>&1
import gzip, os, struct, sys
import numpy as np
def idx(name):
    with gzip.open(os.path.join(sys.argv[1], name), "rb") as f:
        raw = f.read()
    ndim = struct.unpack(">I", raw[:4])[0] & 0xFF
    dims = struct.unpack(">%dI" % ndim, raw[4:4 + 4 * ndim])
    return np.frombuffer(raw[4 + 4 * ndim:], dtype=np.uint8).reshape(dims)
np.savez(sys.argv[2], x_train=idx("train-images-idx3-ubyte.gz"), y_train=idx("train-labels-idx1-ubyte.gz"),
         x_test=idx("t10k-images-idx3-ubyte.gz"), y_test=idx("t10k-labels-idx1-ubyte.gz"))
EOF
)"; then
    chmod a+r "$own/model.json" "$own/data.npz"   # the containers run as uid 10001
    note "run 6: data.npz written by np.savez in $((SECONDS - t0)) s"
    # And a chief flag the Compose file does not name, as .env would set it:
    # batches of 64, so one epoch of 60,000 examples is 938 steps.
    # The run's folder on the host, as the docs make it (PSCLUSTER_RUNS).
    mkdir -p "$own/runs" && chown 10001 "$own/runs"
    export PSCLUSTER_MODEL="$own/model.json" PSCLUSTER_DATA_DIR="$own/data.npz" \
      PSCLUSTER_CHIEF_ARGS="--batch_size=64" PSCLUSTER_RUNS="$own/runs"
    compose_run "run 6 (a user's model and .npz, PSCLUSTER_CHIEF_ARGS=--batch_size=64, 1 epoch)" 0 1
    export PSCLUSTER_DATA_DIR="$data"
    unset PSCLUSTER_MODEL PSCLUSTER_CHIEF_ARGS PSCLUSTER_RUNS
  else
    fail "run 6: writing data.npz with numpy: $msg"
  fi
fi
fi  # run 6
# 7. One number scales the workers: deploy/compose/scale.py --workers=3 on a
# copy of the Compose files, rendered from deploy/compose as if there.
if want 7; then
mkdir -p "$tmp/scaled"
cp "$repo/deploy/compose/docker-compose.yml" "$repo/deploy/compose/docker-compose.gpu.yml" "$tmp/scaled/"
if out="$(python3 "$repo/deploy/compose/scale.py" --dir="$tmp/scaled" --workers=3 2>&1)"; then
  shipped_files=("${compose_files[@]}") shipped_services=("${services[@]}")
  services=(ps-0 ps-1 worker-0 worker-1 worker-2 evaluator chief)
  {
    echo "services:"
    for s in "${services[@]}"; do echo "  $s:"; echo "    healthcheck: {interval: 1s}"; done
  } >"$tmp/override-scaled.yml"
  compose_files=(--project-directory "$repo/deploy/compose" -f "$tmp/scaled/docker-compose.yml"
                 -f "$tmp/override-scaled.yml")
  # worker_2_trained NAME: the worker scale.py added took part.
  worker_2_trained() {
    local steps
    steps="$("$DOCKER" logs "$(cid worker-2)" 2>&1 | grep -oE 'done: [0-9]+ steps' | tail -1)"
    if [[ "$steps" =~ ^done:\ [1-9][0-9]*\ steps$ ]]; then
      pass "$1: worker-2, the service scale.py added, trained ($steps)"
    else
      fail "$1: worker-2 did not train: $("$DOCKER" logs "$(cid worker-2)" 2>&1 | tail -3 | tr '\n' ' ')"
    fi
  }
  RUN_HOOK=worker_2_trained
  # (The name is a file name too: no slash.)
  compose_run "run 7 (3 workers by scale.py --workers=3, 1 epoch)" 0
  RUN_HOOK=""
  compose_files=("${shipped_files[@]}") services=("${shipped_services[@]}")
else
  fail "run 7: deploy/compose/scale.py --workers=3: $out"
fi
fi  # run 7
want 10 && resize_run "run 10 (the resize recipe of docs/deploy-compose.md)" workers
want 11 && resize_run "run 11 (the ps resize recipe of docs/deploy-compose.md)" ps

# 9. Per-task identities (docker-compose.identities.yml): the files made by
# the command its header gives, owned by the containers' user as it says;
# every task runs with its own certificate, token and --authorize, the
# health checks pass over mutual TLS, and the run ends as run 1 does.
if want 9; then
id_file="$repo/deploy/compose/docker-compose.identities.yml"
san="$(sed -n 's/^#   deploy\/tls\/make_test_ca.sh --san \([^ ]*\) .*/\1/p' "$id_file")"
id_tasks="$(sed -n 's/^#     --tasks \([^ ]*\) .*/\1/p' "$id_file")"
if out="$("$repo/deploy/tls/make_test_ca.sh" --san "$san" --tasks "$id_tasks" "$tmp/pki" 2>&1)" &&
   chown -R 10001:10001 "$tmp/pki"; then
  shipped_files=("${compose_files[@]}")
  compose_files+=(-f "$id_file")
  # identities_checks NAME: each task took its own identity and authorized
  # every call by it; nothing was refused.
  identities_checks() {
    local s c log bad="" stem
    for s in "${services[@]}"; do
      c="$(cid "$s")"
      log="$("$DOCKER" logs "$c" 2>&1)"
      case "$s" in chief|evaluator) stem="$s-0" ;; *) stem="$s" ;; esac
      grep -q "identity $stem from /run/secrets" <<<"$log" || bad+="$s: no 'identity $stem from /run/secrets'; "
      grep -q "mutual TLS, a token per task required, each call authorized by the caller's identity" <<<"$log" ||
        bad+="$s: not serving with --authorize; "
      ! grep -qE "refused [A-Za-z/.]+ from |data plane: refused a connection" <<<"$log" ||
        bad+="$s: a call was refused: $(grep -m1 -E "refused [A-Za-z/.]+ from |data plane: refused" <<<"$log"); "
    done
    [ -z "$bad" ] &&
      pass "$1: every task took its own identity (ROLE-INDEX from /run/secrets) and served with --authorize; nothing refused" ||
      fail "$1: $bad"
  }
  RUN_HOOK=identities_checks
  PSCLUSTER_PKI="$tmp/pki" compose_run "run 9 (per-task identities, 1 epoch)" 0
  RUN_HOOK=""
  compose_files=("${shipped_files[@]}")
else
  fail "run 9: make_test_ca.sh --san '$san' --tasks '$id_tasks' or chown: $out"
fi
fi  # run 9

# 8. The Kubernetes path on this engine: deploy/k8s/cpu made as
# docs/deploy-k8s.md makes it (the registry by its sed, settings in
# settings/chief.yaml, the size in base/kustomization.yaml), resolved as the
# kubelet would, and its pods run here as the kubelet and the StatefulSet
# controller would run them (tests/k8s/docker_runs.py): a clean run, a ps
# pod deleted mid-run with ps_replicas 1, three workers, and live resizes
# (1 worker, scaled to 2 and back to 1 mid-run; 2 ps, scaled to 3 and back
# to 2).
if want 8; then
kubectl_minor="$(kubectl version --client -o json 2>/dev/null | python3 -c 'import json, sys; print(json.load(sys.stdin)["clientVersion"]["minor"])' 2>/dev/null | tr -dc 0-9)"
if [ "${kubectl_minor:-0}" -lt 22 ]; then
  fail "run 8 (Kubernetes pods on Docker): kubectl 1.22 or newer is needed to render deploy/k8s (kustomize components, replicas, replacements); found: $(command -v kubectl || echo none) ${kubectl_minor:+1.$kubectl_minor}"
elif ! python3 -c 'import yaml' 2>/dev/null; then
  fail "run 8 (Kubernetes pods on Docker): python3 has no PyYAML (Debian: python3-yaml, in deploy/install_deps.sh)"
else
  probe=()
  [ -n "${PSCLUSTER_DOCKER_PREBUILT:-}" ] && probe=(--probe "$PSCLUSTER_DOCKER_PREBUILT/pscluster-health-probe")
  t0=$SECONDS
  python3 "$repo/tests/k8s/docker_runs.py" --repo "$repo" --work "$tmp/k8s" --image "$IMAGE" --data "$data" \
    --docker "$DOCKER" --subnet 10.231.30.0/24 --runs "$k8s_runs" "${probe[@]}" 2>&1 | tee "$tmp/k8s.log"
  rc="${PIPESTATUS[0]}"
  passed=$((passed + $(grep -c '^PASS: ' "$tmp/k8s.log"))); failed=$((failed + $(grep -c '^FAIL: ' "$tmp/k8s.log")))
  if [ "$rc" -ne 0 ] && ! grep -q '^FAIL: ' "$tmp/k8s.log"; then
    fail "run 8 (Kubernetes pods on Docker): tests/k8s/docker_runs.py exited $rc"
  fi
  note "run 8 (Kubernetes pods on Docker): $((SECONDS - t0)) s"
fi
fi  # run 8

if [ "$smoke_build_stage" = 1 ] && want smoke; then
  if build_image "the Dockerfile's build stage from the repository (IMAGE_TARGETS=//deploy/docker:health_probe)" \
       -f "$repo/deploy/docker/Dockerfile" --target build \
       --build-arg IMAGE_TARGETS=//deploy/docker:health_probe -t "$IMAGE-build-smoke" "$repo"; then
    if out="$("$DOCKER" run --rm --entrypoint /out/pscluster-health-probe "$IMAGE-build-smoke" --help 2>&1)"; then
      pass "the build stage's /out/pscluster-health-probe runs: $(head -1 <<<"$out")"
    else
      fail "the build stage's /out/pscluster-health-probe --help: $(tail -3 <<<"$out" | tr '\n' ' ')"
    fi
  fi
fi
finish
