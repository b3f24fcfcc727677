#!/usr/bin/env bash
# Checks deploy/docker without a Docker engine: the Dockerfiles' stages
# (debian:12 build running install_deps.sh and build_binaries.sh, a
# debian:12-slim runtime with the binaries and the entrypoint, the CUDA
# variant's toolkit image), the build context their .dockerignore files leave
# (no bazel-*, .git, data), the runtime packages (they exist in Debian 12's
# apt sources, their dependencies give every library the built binaries link,
# and each is needed), the entrypoint (TF_CONFIG passed on or completed from
# a pod ordinal, run-once mode, signals), and pscluster-health-probe against
# a real ps_server.
#
# Usage: tests/deploy_docker_test.sh [MNIST_DIR]   (MNIST is not needed)
# Exit status 0 when every check passed.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/deploy_common.sh"

D="$repo/deploy/docker"
ENTRY="$D/entrypoint.sh"

# --- The Dockerfiles and the build context --------------------------------
if [ -z "$PY" ]; then
  skip "Dockerfile and build-context checks: no python3 with PyYAML (python3-yaml)"
else
  run_checks "Dockerfile checks" "$PY" - "$repo" "$tmp" <<'EOF'
import fnmatch, os, re, sys
repo, tmp = sys.argv[1], sys.argv[2]
sys.path.insert(0, tmp)
from deploylib import *
D = os.path.join(repo, "deploy/docker")

def instructions(path):
    """[(INSTRUCTION, text)] with continuation lines joined, comments dropped."""
    out, cur = [], ""
    for line in open(path):
        if line.lstrip().startswith("#") and not cur:
            continue
        line = line.rstrip("\n")
        if line.endswith("\\"):
            cur += line[:-1] + " "
            continue
        cur += line
        if cur.strip():
            word, _, rest = cur.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
        cur = ""
    return out

def stages(ins):
    """{stage name: (base image with ARG defaults substituted, [instructions])}."""
    args, result, current = {}, {}, None
    for word, text in ins:
        if word == "ARG" and "=" in text and current is None:
            k, v = text.split("=", 1)
            args[k] = v
        elif word == "FROM":
            m = re.fullmatch(r"(\S+)(?:\s+AS\s+(\S+))?", text, re.I)
            image = re.sub(r"\$\{(\w+)\}", lambda x: args.get(x.group(1), x.group(0)), m.group(1))
            current = m.group(2) or image
            result[current] = (image, [])
        elif current is not None:
            result[current][1].append((word, text))
    return result

for name, cuda in (("Dockerfile", False), ("Dockerfile.cuda", True)):
    g = Group("deploy/docker/" + name)
    # A "# syntax=" directive makes BuildKit pull a frontend image from a
    # registry: the build must need Debian's apt repositories only.
    first = [l for l in open(os.path.join(D, name)) if l.strip()][:1]
    g(not (first and re.match(r"#\s*syntax\s*=", first[0], re.I)),
      "no '# syntax=' directive (it would pull a frontend image)", first[0].strip() if first else "")
    st = stages(instructions(os.path.join(D, name)))
    g(list(st)[-1] == "runtime", "the last stage is 'runtime'", str(list(st)))
    build, runtime = st.get("build", ("", [])), st.get("runtime", ("", []))
    g(build[0] == "debian:12", "build stage FROM debian:12", build[0])
    g(runtime[0] == "debian:12-slim", "runtime stage FROM debian:12-slim", runtime[0])
    runs = " ".join(t for w, t in build[1] if w == "RUN")
    g("deploy/install_deps.sh" in runs, "build runs deploy/install_deps.sh")
    g(re.search(r"deploy/docker/build_binaries\.sh /out %s" % ("cuda" if cuda else "cpu"), runs),
      "build runs build_binaries.sh /out %s" % ("cuda" if cuda else "cpu"))
    copies = [t for w, t in runtime[1] if w == "COPY"]
    if cuda:
        g("--from=build /out/ /usr/local/bin/" in copies, "runtime copies only /out (the binaries) from build")
    else:
        # The binaries come from the stage BINARIES names: build (the default)
        # or prebuilt (tests/docker_run_test.sh), which takes prebuilt/ alone.
        g("--from=binaries /out/ /usr/local/bin/" in copies, "runtime copies only /out (the binaries) from binaries")
        g(st.get("binaries", ("", []))[0] == "build", "binaries is the build stage by default (ARG BINARIES=build)",
          str(st.get("binaries")))
        pre = st.get("prebuilt", ("", []))
        g(pre[0] == "scratch" and pre[1] == [("COPY", "prebuilt/ /out/")],
          "prebuilt is scratch plus the context's prebuilt/ as /out", str(pre))
    g(any("entrypoint.sh /usr/local/bin/pscluster-entrypoint" in c for c in copies), "runtime has the entrypoint")
    rruns = " ".join(t for w, t in runtime[1] if w == "RUN")
    g("runtime-packages.txt" in rruns and "--no-install-recommends" in rruns and
      "rm -rf /var/lib/apt/lists" in rruns, "runtime installs runtime-packages.txt, no recommends, no apt lists")
    words = [w for w, t in runtime[1]]
    g("USER" in words and any(t.startswith("10001") for w, t in runtime[1] if w == "USER"), "runs as uid 10001")
    g(any(w == "ENTRYPOINT" and "pscluster-entrypoint" in t for w, t in runtime[1]), "ENTRYPOINT pscluster-entrypoint")
    g(any(w == "ENV" and "OPENBLAS_NUM_THREADS=1" in t for w, t in runtime[1]), "OPENBLAS_NUM_THREADS=1")
    if cuda:
        img = st.get("cuda", ("", []))[0]
        g(re.fullmatch(r"nvidia/cuda:13\.\d+\.\d+-devel-\S+", img), "toolkit from %s" % img)
        g("libcudart.so" in rruns and "libcublas.so" in rruns and "libcublasLt.so" in rruns,
          "runtime gets libcudart, libcublas, libcublasLt")
        g(any(w == "ENV" and "NVIDIA_DRIVER_CAPABILITIES=compute" in t for w, t in runtime[1]),
          "NVIDIA_DRIVER_CAPABILITIES=compute,utility")
    else:
        g(not any("cuda" in t.lower() for w, t in runtime[1] + build[1]), "no CUDA in the CPU image")
    g.report()

# The context the .dockerignore files leave (Docker's rules: patterns are
# paths from the context root, ** spans folders, ! re-includes).
def ignore_patterns(path):
    pats = []
    for line in open(path):
        line = line.strip()
        if line and not line.startswith("#"):
            pats.append(line)
    return pats

def ignored(rel, pats):
    out = False
    for p in pats:
        neg = p.startswith("!")
        p = p.lstrip("!").strip("/")
        rx = re.escape(p).replace(r"\*\*/", "(.*/)?").replace(r"\*\*", ".*").replace(r"\*", "[^/]*").replace(r"\?", "[^/]")
        if re.fullmatch(rx + "(/.*)?", rel):
            out = not neg
    return out

for name in ("Dockerfile", "Dockerfile.cuda"):
    g = Group("deploy/docker/%s.dockerignore" % name)
    path = os.path.join(D, name + ".dockerignore")
    if not g(os.path.exists(path), "exists (BuildKit reads it for -f deploy/docker/%s)" % name):
        g.report()
        continue
    pats = ignore_patterns(path)
    for must in ("bazel-bin", "bazel-out", "bazel-main", ".git", "data/mnist/x.gz", "runs/x"):
        g(ignored(must, pats), "leaves out %s" % must)
    files, size, bad_links = 0, 0, []
    for root, dirs, names in os.walk(repo):
        relroot = os.path.relpath(root, repo)
        relroot = "" if relroot == "." else relroot + "/"
        dirs[:] = [d for d in dirs if not ignored(relroot + d, pats)]
        for n in names:
            rel = relroot + n
            if ignored(rel, pats):
                continue
            full = os.path.join(root, n)
            if os.path.islink(full):
                bad_links.append(rel)
                continue
            files += 1
            size += os.path.getsize(full)
    needed = ["deploy/install_deps.sh", "deploy/docker/build_binaries.sh", "deploy/docker/entrypoint.sh",
              "deploy/docker/runtime-packages.txt", "WORKSPACE", ".bazelrc", "proto/health.proto"]
    g(not [n for n in needed if ignored(n, pats)], "keeps what the build needs")
    g(size < 50 << 20 and not bad_links, "context: %d files, %.1f MB, no symlinks" % (files, size / 1e6),
      "links %s" % bad_links[:5])
    g.report()
sys.exit(1 if results["fail"] else 0)
EOF
fi

# --- Runtime packages -------------------------------------------------------
mapfile -t PKGS < <(grep -v '^#' "$D/runtime-packages.txt" | grep -v '^[[:space:]]*$')
has_candidate() { [[ "$(apt-cache policy "$1" 2>/dev/null)" == *"Candidate: "[0-9]* ]]; }
if ! command -v apt-cache >/dev/null 2>&1 || ! has_candidate libc6; then
  skip "runtime packages: apt-cache has no package lists here (apt-get update)"
else
  missing=()
  for p in "${PKGS[@]}"; do
    has_candidate "$p" || missing+=("$p")
  done
  if [ ${#missing[@]} -eq 0 ]; then
    pass "runtime-packages.txt: all ${#PKGS[@]} packages are in the apt sources (${PKGS[*]})"
  else
    fail "runtime-packages.txt: no apt candidate for ${missing[*]}"
  fi
  # Every library the built binaries link comes from these packages or their
  # dependencies (CUDA's from Dockerfile.cuda), and each library package is
  # needed by one of them.
  bins=()
  for b in ps_server/ps_server worker/worker evaluator/evaluator chief/chief deploy/docker/health_probe; do
    [ -x "$repo/bazel-bin/$b" ] && bins+=("$repo/bazel-bin/$b")
  done
  if [ ${#bins[@]} -ne 5 ]; then
    skip "runtime libraries: the binaries are not all built (bazel build //ps_server:ps_server" \
      "//worker:worker //evaluator:evaluator //chief:chief //deploy/docker:health_probe)"
  else
    closure="$(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
      --no-replaces --no-enhances "${PKGS[@]}" 2>/dev/null | grep -E '^[a-z0-9]' | sort -u)"
    declare -A owner_used=() pkg_of=()
    mapfile -t libs < <(for b in "${bins[@]}"; do ldd "$b"; done |
      awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u)
    query=()
    for lib in "${libs[@]}"; do query+=("$lib" "$(readlink -f "$lib")"); done
    # One dpkg -S for all: lines "package[:arch]: path".
    while IFS= read -r line; do
      pkg_of["${line#*: }"]="${line%%[:]*}"
    done < <(dpkg -S "${query[@]}" 2>/dev/null)
    uncovered=()
    for lib in "${libs[@]}"; do
      case "$(basename "$lib")" in
        libcudart.so.*|libcublas.so.*|libcublasLt.so.*) continue ;;  # Dockerfile.cuda copies them
      esac
      pkg="${pkg_of[$lib]:-${pkg_of[$(readlink -f "$lib")]:-}}"
      if [ -z "$pkg" ]; then
        uncovered+=("$lib (no Debian package)")
      elif grep -qxF "$pkg" <<<"$closure"; then
        owner_used[$pkg]=1
      else
        uncovered+=("$lib ($pkg)")
      fi
    done
    if [ ${#uncovered[@]} -eq 0 ]; then
      pass "runtime libraries: every library the 5 binaries link is in the runtime packages' dependencies"
    else
      fail "runtime libraries not in the runtime image: ${uncovered[*]}"
    fi
    # Each library package is there for a library a binary links (what
    # those need, apt brings).
    unused=()
    for p in "${PKGS[@]}"; do
      case "$p" in jq|ca-certificates) continue ;; esac  # tools, not libraries
      [ -n "${owner_used[$p]:-}" ] || unused+=("$p")
    done
    if [ ${#unused[@]} -eq 0 ]; then
      pass "runtime packages: each library package holds a library a binary links"
    else
      fail "runtime-packages.txt lists packages no binary needs: ${unused[*]}"
    fi
  fi
fi

# --- build_binaries.sh ------------------------------------------------------
if bash -n "$D/build_binaries.sh" && bash -n "$ENTRY"; then
  pass "build_binaries.sh and entrypoint.sh parse (bash -n)"
else
  fail "bash -n on build_binaries.sh or entrypoint.sh"
fi
out="$(bash "$D/build_binaries.sh" "$tmp/out" gpu 2>&1)"; rc=$?
if [ $rc -eq 2 ] && grep -q "must be cpu or cuda" <<<"$out"; then
  pass "build_binaries.sh refuses an unknown variant (exit 2)"
else
  fail "build_binaries.sh gpu: exit $rc: $out"
fi
out="$(PSCLUSTER_IMAGE_TARGETS="//deploy/docker:health_probe //nothing:here" bash "$D/build_binaries.sh" "$tmp/out" cpu 2>&1)"; rc=$?
if [ $rc -eq 2 ] && grep -qF "PSCLUSTER_IMAGE_TARGETS: '//nothing:here' is not one of" <<<"$out"; then
  pass "build_binaries.sh refuses a PSCLUSTER_IMAGE_TARGETS label that is not an image binary (exit 2, named)"
else
  fail "build_binaries.sh with PSCLUSTER_IMAGE_TARGETS=//nothing:here: exit $rc: $out"
fi
# Sorted, as got is.
want="//chief:chief //deploy/docker:health_probe //evaluator:evaluator //ps_server:ps_server //worker:worker"
got="$(grep -oE '\[//[a-z_/]+:[a-z_]+\]' "$D/build_binaries.sh" | tr -d '[]' | sort | tr '\n' ' ' | sed 's/ $//')"
if [ "$got" = "$want" ]; then
  pass "build_binaries.sh builds the four daemons and the health probe"
else
  fail "build_binaries.sh targets: '$got', expected '$want'"
fi

# --- The entrypoint, with stand-in daemons that print what they get ---------
if ! command -v jq >/dev/null 2>&1; then
  fail "jq (in deploy/install_deps.sh and the images) is needed by entrypoint.sh"
else
  fake="$tmp/fake"
  mkdir -p "$fake"
  for b in ps_server worker evaluator chief; do
    cat >"$fake/$b" <<'EOS'
#!/bin/sh
printf '%s|%s\n' "$TF_CONFIG" "$*"
[ -n "${FAKE_SLEEP:-}" ] && { trap 'echo got TERM; kill $!; wait $!; exit 0' TERM; sleep "$FAKE_SLEEP" & wait; }
exit "${FAKE_RC:-0}"
EOS
    chmod +x "$fake/$b"
  done
  # ep NAME WANT_RC WANT ENV... -- ARGS...: runs the entrypoint; its output
  # must match the extended regex WANT, or equal WANT's text after a leading "=".
  ep() {
    local name="$1" want_rc="$2" want="$3"; shift 3
    local envs=()
    while [ "$1" != "--" ]; do envs+=("$1"); shift; done
    shift
    local out rc
    out="$(env -i PATH="$PATH" PSCLUSTER_BIN_DIR="$fake" PSCLUSTER_STATE_DIR="$tmp/state" \
      "${envs[@]}" bash "$ENTRY" "$@" 2>"$tmp/ep.err")"
    rc=$?
    if [ $rc -ne "$want_rc" ]; then
      fail "entrypoint: $name: exit $rc, expected $want_rc: $out $(cat "$tmp/ep.err")"
    elif if [ "${want:0:1}" = "=" ]; then [ "$out" != "${want:1}" ]; else ! grep -Eq -- "$want" <<<"$out"; fi; then
      fail "entrypoint: $name: output '$out' does not match /$want/ ($(cat "$tmp/ep.err"))"
    else
      pass "entrypoint: $name"
    fi
  }
  CL='"cluster":{"ps":["ps-0.ps:2222","ps-1.ps:2222"],"worker":["worker-0.worker:2222"]}'
  full="{$CL,\"task\":{\"type\":\"ps\",\"index\":1}}"
  ep "a TF_CONFIG with its task is passed on unchanged (Compose, TFJob)" 0 "=$full|--metrics_port=9100" \
    TF_CONFIG="$full" HOSTNAME=ps-0 -- ps --metrics_port=9100
  ep "task.index from the StatefulSet ordinal (hostname ps-1), type from the role" 0 \
    '"task":\{"type":"ps","index":1\}' TF_CONFIG="{$CL}" HOSTNAME=ps-1 -- ps
  ep "task.index from the ordinal when task.type is given without index" 0 \
    '"task":\{"type":"worker","index":12\}' TF_CONFIG="{$CL,\"task\":{\"type\":\"worker\"}}" HOSTNAME=my-worker-012 -- worker
  ep "PSCLUSTER_TASK_INDEX wins over the hostname" 0 \
    '"task":\{"type":"ps","index":0\}' TF_CONFIG="{$CL}" HOSTNAME=ps-1 PSCLUSTER_TASK_INDEX=0 -- ps
  ep "no ordinal (a container id as hostname): TF_CONFIG left alone" 0 "={$CL}|" \
    TF_CONFIG="{$CL}" HOSTNAME=3f2a9c1b7d4e -- ps
  ep "TF_CONFIG that is not JSON is left for the daemon to report" 0 \
    '^\{"cluster": oops\|' 'TF_CONFIG={"cluster": oops' HOSTNAME=ps-1 -- ps
  ep "--tf_config=FILE: TF_CONFIG left alone" 0 "={$CL}|--tf_config=/x.json" \
    TF_CONFIG="{$CL}" HOSTNAME=ps-1 -- ps --tf_config=/x.json
  ep "a bad PSCLUSTER_TASK_INDEX is a usage error" 2 '^$' TF_CONFIG="{$CL}" PSCLUSTER_TASK_INDEX=x -- ps
  # TF_CONFIG from the role counts (deploy/k8s), the task from the ordinal.
  counted='{"cluster":{"chief":["chief-0.chief:2222"],"ps":["ps-0.ps:2222","ps-1.ps:2222","ps-2.ps:2222"],'
  counted+='"worker":["worker-0.worker:2222","worker-1.worker:2222"],"evaluator":["evaluator-0.evaluator:2222"]},'
  counted+='"task":{"type":"worker","index":1}}'
  ep "no TF_CONFIG: made from PSCLUSTER_NUM_PS and PSCLUSTER_NUM_WORKERS and the pod names" 0 "=$counted|" \
    HOSTNAME=worker-1 PSCLUSTER_NUM_PS=3 PSCLUSTER_NUM_WORKERS=2 -- worker
  ep "PSCLUSTER_NUM_EVALUATORS=0 leaves the evaluator out; PSCLUSTER_PORT, PSCLUSTER_RPC_LAYER" 0 \
    '^\{"cluster":\{"chief":\["chief-0.chief:7000"\],"ps":\["ps-0.ps:7000"\],"worker":\["worker-0.worker:7000"\]\},"rpc_layer":"grpc\+tls",' \
    HOSTNAME=chief-0 PSCLUSTER_NUM_PS=1 PSCLUSTER_NUM_WORKERS=1 PSCLUSTER_NUM_EVALUATORS=0 PSCLUSTER_PORT=7000 \
    PSCLUSTER_RPC_LAYER=grpc+tls -- chief
  ep "a TF_CONFIG that is set wins over the counts" 0 "=$full|" \
    TF_CONFIG="$full" HOSTNAME=ps-0 PSCLUSTER_NUM_PS=5 PSCLUSTER_NUM_WORKERS=5 -- ps
  # A task beyond the counts (a StatefulSet scaled past max_workers): exit 2
  # naming the task, where its index came from and the count.
  for case in "worker task 2 (from the pod ordinal of hostname 'worker-2') is beyond the 2 worker task(s) TF_CONFIG lists (PSCLUSTER_NUM_WORKERS=2)|HOSTNAME=worker-2|worker" \
              "ps task 3 (from PSCLUSTER_TASK_INDEX) is beyond the 2 ps task(s) TF_CONFIG lists (PSCLUSTER_NUM_PS=2)|PSCLUSTER_TASK_INDEX=3|ps"; do
    IFS='|' read -r msg who role <<<"$case"
    ep "a task beyond the counts ($who, $role): exit 2" 2 '^$' "$who" PSCLUSTER_NUM_PS=2 PSCLUSTER_NUM_WORKERS=2 -- "$role"
    grep -qF "$msg" "$tmp/ep.err" ||
      fail "entrypoint: a task beyond the counts ($who): no '$msg' in: $(cat "$tmp/ep.err")"
  done
  # "THE VARIABLE NAMED|ENV...": bad counts, each refused naming its variable.
  for case in "PSCLUSTER_NUM_PS|PSCLUSTER_NUM_PS=two PSCLUSTER_NUM_WORKERS=2" \
              "PSCLUSTER_NUM_WORKERS|PSCLUSTER_NUM_PS=1 PSCLUSTER_NUM_WORKERS=0" \
              "PSCLUSTER_NUM_WORKERS|PSCLUSTER_NUM_PS=1" \
              "PSCLUSTER_NUM_EVALUATORS|PSCLUSTER_NUM_PS=1 PSCLUSTER_NUM_WORKERS=1 PSCLUSTER_NUM_EVALUATORS=2"; do
    var="${case%%|*}"
    read -r -a kv <<<"${case#*|}"
    ep "bad counts (${case#*|}): exit 2" 2 '^$' HOSTNAME=ps-0 "${kv[@]}" -- ps
    grep -q "$var" "$tmp/ep.err" ||
      fail "entrypoint: bad counts (${case#*|}): the message does not name $var: $(cat "$tmp/ep.err")"
  done
  # Flags from the environment (a ConfigMap through envFrom, Compose).
  ep "PSCLUSTER_FLAG_<name> adds --<name>=<value> after the flags, in name order; empty adds nothing" 0 \
    "=$full|--logdir=/runs --epochs=2 --optimizer=sgd --push_overlap --seed=3" \
    TF_CONFIG="$full" PSCLUSTER_FLAG_optimizer=sgd PSCLUSTER_FLAG_epochs=2 PSCLUSTER_FLAG_batch_size= \
    PSCLUSTER_ARGS="--push_overlap  --seed=3" -- chief --logdir=/runs
  ep "PSCLUSTER_FLAG_ with a name that is no flag name: exit 2" 2 '^$' \
    TF_CONFIG="$full" PSCLUSTER_FLAG_Epochs=2 -- chief
  grep -q "PSCLUSTER_FLAG_Epochs" "$tmp/ep.err" ||
    fail "entrypoint: a bad PSCLUSTER_FLAG_ name is not named: $(cat "$tmp/ep.err")"
  ep "the daemon's exit status is the entrypoint's" 1 '' TF_CONFIG="$full" FAKE_RC=1 -- ps
  ep "after an exit 1 the daemon is started again" 0 "=$full|" TF_CONFIG="$full" -- ps
  # Final codes: 2 bad input, 3 run given up, 4 bad data. The next start in
  # the same container exits with the code at once, the daemon not started.
  for code in 2 3 4; do
    rm -rf "$tmp/state"
    ep "exit $code is passed on and kept" "$code" "=$full|" TF_CONFIG="$full" FAKE_RC="$code" -- ps
    ep "after a final exit $code the container's next start exits $code without starting the daemon" \
      "$code" '^$' TF_CONFIG="$full" -- ps
    grep -q "not starting ps_server again: $code ps_server exited $code" "$tmp/ep.err" ||
      fail "entrypoint: no 'not starting ps_server again' line after exit $code: $(cat "$tmp/ep.err")"
  done
  rm -rf "$tmp/state"
  # Per-task identities: this task's files, before the flags given.
  ids="$tmp/ids"
  mkdir -p "$ids" && touch "$ids"/{ca.pem,identities,worker-1.pem,worker-1.key,worker-1.token}
  wfull="{$CL,\"task\":{\"type\":\"worker\",\"index\":1}}"
  ep "PSCLUSTER_IDENTITY_DIR adds the task's certificate, key, token, the CA, the identities and --authorize; rpc_layer grpc+tls" 0 \
    "={$CL,\"task\":{\"type\":\"worker\",\"index\":1},\"rpc_layer\":\"grpc+tls\"}|--tls_cert=$ids/worker-1.pem --tls_key=$ids/worker-1.key --tls_ca=$ids/ca.pem --auth_token_file=$ids/worker-1.token --auth_identities_file=$ids/identities --authorize=true --tls_server_name=pscluster --data_dir=/d" \
    TF_CONFIG="$wfull" PSCLUSTER_IDENTITY_DIR="$ids/" PSCLUSTER_TLS_SERVER_NAME=pscluster -- worker --data_dir=/d
  ep "PSCLUSTER_IDENTITY_DIR: the task from the pod ordinal" 0 "--tls_cert=$ids/worker-1.pem " \
    TF_CONFIG="{$CL}" HOSTNAME=worker-1 PSCLUSTER_IDENTITY_DIR="$ids" -- worker
  ep "PSCLUSTER_IDENTITY_DIR without this task's files: exit 2" 2 '^$' \
    TF_CONFIG="{$CL}" HOSTNAME=worker-0 PSCLUSTER_IDENTITY_DIR="$ids" -- worker
  grep -q "has no readable worker-0.pem" "$tmp/ep.err" ||
    fail "entrypoint: a missing identity file is not named: $(cat "$tmp/ep.err")"
  ep "PSCLUSTER_IDENTITY_DIR without a task index: exit 2" 2 '^$' \
    TF_CONFIG="{$CL}" HOSTNAME=3f2a9c1b7d4e PSCLUSTER_IDENTITY_DIR="$ids" -- worker
  rm -rf "$tmp/state"
  ep "another command runs as it is" 0 '^hello$' -- echo hello
  ep "no arguments: usage, exit 2" 2 'ROLE' --
  ep "--help" 0 'PSCLUSTER_DONE_FILE' -- --help

  # Run-once mode (PSCLUSTER_DONE_FILE): success writes the file and waits;
  # with the file there the daemon is not started; failures and signals
  # write nothing.
  done_file="$tmp/runs/.pscluster-done"
  runonce() {  # runonce ENV...: starts the entrypoint in the background, sets $bg
    env -i PATH="$PATH" PSCLUSTER_BIN_DIR="$fake" PSCLUSTER_DONE_FILE="$done_file" \
      PSCLUSTER_STATE_DIR="$tmp/state" TF_CONFIG="$full" "$@" \
      bash "$ENTRY" chief --epochs=1 >"$tmp/bg.out" 2>"$tmp/bg.err" &
    bg=$!
  }
  waitfor() {  # waitfor CONDITION...: up to 5 s
    local i
    for i in $(seq 50); do "$@" && return 0; sleep 0.1; done
    return 1
  }
  runonce
  if waitfor test -e "$done_file" && sleep 0.3 && kill -0 "$bg" 2>/dev/null; then
    kill -TERM "$bg"; wait "$bg"; rc=$?
    if [ $rc -eq 0 ]; then
      pass "run-once: exit 0 writes PSCLUSTER_DONE_FILE and waits; TERM ends it with 0"
    else
      fail "run-once: exit $rc after TERM"
    fi
  else
    fail "run-once: no $done_file, or the entrypoint did not wait: $(cat "$tmp/bg.err")"
    kill "$bg" 2>/dev/null; wait "$bg" 2>/dev/null
  fi
  runonce
  if waitfor grep -q "not running chief" "$tmp/bg.err" && ! grep -q '|' "$tmp/bg.out"; then
    kill -TERM "$bg"; wait "$bg"
    pass "run-once: with PSCLUSTER_DONE_FILE present the chief is not started again"
  else
    fail "run-once: started again although $done_file exists: $(cat "$tmp/bg.out" "$tmp/bg.err")"
    kill "$bg" 2>/dev/null; wait "$bg" 2>/dev/null
  fi
  rm -f "$done_file"
  runonce FAKE_RC=1
  wait "$bg"; rc=$?
  if [ $rc -eq 1 ] && [ ! -e "$done_file" ]; then
    pass "run-once: a failed run exits with its status, writes nothing"
  else
    fail "run-once: failed run: exit $rc, done file $(ls "$done_file" 2>&1)"
  fi
  runonce FAKE_SLEEP=30
  waitfor grep -q '|' "$tmp/bg.out"
  kill -TERM "$bg"; wait "$bg"; rc=$?
  if [ $rc -eq 0 ] && grep -q "got TERM" "$tmp/bg.out" && [ ! -e "$done_file" ]; then
    pass "run-once: TERM reaches the daemon; a stopped run writes nothing"
  else
    fail "run-once: TERM: exit $rc, output $(cat "$tmp/bg.out"), done file $(ls "$done_file" 2>&1)"
  fi
fi

# --- pscluster-health-probe against a real ps_server -------------------------
probe="$repo/bazel-bin/deploy/docker/health_probe"
ps_bin="$repo/bazel-bin/ps_server/ps_server"
if [ ! -x "$probe" ] || [ ! -x "$ps_bin" ]; then
  skip "pscluster-health-probe: not built (bazel build //deploy/docker:health_probe //ps_server:ps_server)"
else
  PORTS=()
  pick_free_ports 2
  port="${PORTS[0]}"; other="${PORTS[1]}"
  TF_CONFIG="{\"cluster\":{\"ps\":[\"127.0.0.1:$port\"],\"worker\":[\"127.0.0.1:1\"],\"chief\":[\"127.0.0.1:2\"]},\"task\":{\"type\":\"ps\",\"index\":0}}" \
    "$ps_bin" >"$tmp/ps.log" 2>&1 &
  ps_pid=$!
  for i in $(seq 50); do "$probe" "127.0.0.1:$port" 2>/dev/null && break; sleep 0.1; done
  if "$probe" "127.0.0.1:$port"; then
    pass "pscluster-health-probe: exit 0 for a serving ps_server"
  else
    fail "pscluster-health-probe: ps_server on $port not reported serving; its log: $(tail -3 "$tmp/ps.log")"
  fi
  if "$probe" "$port"; then
    pass "pscluster-health-probe: a bare PORT means 127.0.0.1:PORT"
  else
    fail "pscluster-health-probe $port"
  fi
  # No chief initialised it: up, but not ready for its role.
  out="$("$probe" "127.0.0.1:$port" --service=pscluster.Ready 2>&1)"; rc=$?
  if [ $rc -eq 1 ] && grep -q '"pscluster.Ready" not serving' <<<"$out"; then
    pass "pscluster-health-probe --service=pscluster.Ready: exit 1 for a ps not initialised"
  else
    fail "pscluster-health-probe --service=pscluster.Ready on an uninitialised ps: exit $rc: $out"
  fi
  kill -TERM "$ps_pid"; wait "$ps_pid" 2>/dev/null
  out="$("$probe" "127.0.0.1:$other" --timeout_ms=500 2>&1)"; rc=$?
  if [ $rc -eq 1 ] && grep -q "not serving" <<<"$out"; then
    pass "pscluster-health-probe: exit 1 when nothing serves"
  else
    fail "pscluster-health-probe on a closed port: exit $rc: $out"
  fi
  out="$("$probe" 2>&1)"; rc=$?
  if [ $rc -eq 2 ]; then
    pass "pscluster-health-probe: no address is a usage error (exit 2)"
  else
    fail "pscluster-health-probe without arguments: exit $rc: $out"
  fi

  # Per-task identities (PSCLUSTER_IDENTITY_DIR): a real ps_server started
  # by the entrypoint with its own certificate, token and --authorize; the
  # probe finds its TLS files in the same folder, and without them is refused.
  if ! command -v openssl >/dev/null 2>&1; then
    skip "identities: no openssl for deploy/tls/make_test_ca.sh"
  else
    pki="$tmp/pki"
    "$repo/deploy/tls/make_test_ca.sh" --tasks chief,ps/0,ps/1,worker/0 "$pki" >/dev/null 2>&1 ||
      fail "make_test_ca.sh --tasks for the identity checks failed"
    bins="$tmp/bins"
    mkdir -p "$bins" && ln -sf "$ps_bin" "$bins/ps_server" && ln -sf "$repo/bazel-bin/worker/worker" "$bins/worker"
    cl="\"cluster\":{\"ps\":[\"127.0.0.1:2\",\"127.0.0.1:$port\"],\"worker\":[\"127.0.0.1:3\"],\"chief\":[\"127.0.0.1:4\"]}"
    env -i PATH="$PATH" PSCLUSTER_BIN_DIR="$bins" PSCLUSTER_STATE_DIR="$tmp/id_state" \
      PSCLUSTER_IDENTITY_DIR="$pki" TF_CONFIG="{$cl,\"task\":{\"type\":\"ps\",\"index\":1}}" \
      bash "$ENTRY" ps >"$tmp/ps_id.log" 2>&1 &
    ps_pid=$!
    for i in $(seq 50); do
      PSCLUSTER_IDENTITY_DIR="$pki" "$probe" "127.0.0.1:$port" 2>/dev/null && break; sleep 0.1
    done
    if PSCLUSTER_IDENTITY_DIR="$pki" "$probe" "127.0.0.1:$port" 2>"$tmp/probe.err"; then
      pass "identities: the entrypoint starts ps/1 with its own certificate and --authorize; the probe reads PSCLUSTER_IDENTITY_DIR"
    else
      fail "identities: ps/1 not reported serving: $(cat "$tmp/probe.err"); its log: $(tail -3 "$tmp/ps_id.log")"
    fi
    grep -q "identity ps-1 from $pki" "$tmp/ps_id.log" &&
      grep -q "mutual TLS, a token per task required, each call authorized by the caller's identity" "$tmp/ps_id.log" ||
      fail "identities: the entrypoint did not say which identity it took: $(head -3 "$tmp/ps_id.log")"
    if ! "$probe" "127.0.0.1:$port" --timeout_ms=1000 2>/dev/null; then
      pass "identities: a probe without a client certificate is refused (mutual TLS)"
    else
      fail "identities: a plaintext probe reached the ps started with identities"
    fi
    kill -TERM "$ps_pid"; wait "$ps_pid" 2>/dev/null
    out="$(env -i PATH="$PATH" PSCLUSTER_BIN_DIR="$bins" PSCLUSTER_STATE_DIR="$tmp/id_state2" \
      PSCLUSTER_IDENTITY_DIR="$pki" TF_CONFIG="{$cl,\"task\":{\"type\":\"worker\",\"index\":3}}" \
      bash "$ENTRY" worker 2>&1)"; rc=$?
    if [ $rc -eq 2 ] && grep -q "has no readable worker-3.pem (this task is worker-3" <<<"$out"; then
      pass "identities: a task whose files are missing exits 2 naming the file"
    else
      fail "identities: worker/3 without files: exit $rc: $out"
    fi
    out="$(PSCLUSTER_IDENTITY_DIR="$tmp/empty_dir_that_is_missing" "$probe" "127.0.0.1:$port" 2>&1)"; rc=$?
    [ $rc -eq 2 ] && grep -q "PSCLUSTER_IDENTITY_DIR=" <<<"$out" &&
      pass "identities: the probe with an identity folder holding no certificate exits 2 naming it" ||
      fail "identities: probe with a missing identity folder: exit $rc: $out"
  fi
fi

echo "deploy_docker_test: checked deploy/docker (Dockerfiles, context, runtime packages, entrypoint," \
  "health probe): $passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
