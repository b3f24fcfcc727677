#!/usr/bin/env bash
# Checks deploy/compose without a Docker engine: `docker-compose config`
# renders docker-compose.yml alone and with docker-compose.gpu.yml, each with
# the defaults and with a user's model and data (PSCLUSTER_MODEL: a real
# Keras model file, tests/fixtures/keras/tfjs_plain.json as TensorFlow.js
# wrote it; PSCLUSTER_DATA_DIR: an .npz); in the rendered files every
# TF_CONFIG is valid JSON, all services share one cluster, each task's
# (type, index) is its service's, every address is a service name and the
# port that service listens on, every task of the cluster has a service; the
# commands (role, flags the daemons have, data and logdir on volumes), the
# model (the chief's --model: cnn by default, else the file, mounted
# read-only into the chief alone at the same path) and the data (every
# worker's and the evaluator's --data_dir: <repo>/data/mnist at /data/mnist
# by default, else the folder or .npz, mounted read-only at the same path),
# restart policies, gRPC health checks, metrics ports, the GPU reservations
# (worker-i GPU i), the workers' threads (--threads = cpus:, default 2 or
# PSCLUSTER_WORKER_CPUS; 1 on a GPU); any chief flag through
# PSCLUSTER_CHIEF_ARGS (the entrypoint adds them; the built chief takes them);
# the entrypoint passes each TF_CONFIG on unchanged and the built daemons
# accept it with the service's flags (the chief reading the user's model).
#
# Usage: tests/deploy_compose_test.sh [MNIST_DIR]   (for the docs' download_mnist.sh line)
# Exit status 0 when every check passed.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/deploy_common.sh"

COMPOSE="$repo/deploy/compose"
if [ -z "$PY" ]; then
  fail "python3 with PyYAML (Debian: python3-yaml, in deploy/install_deps.sh) is needed to read the Compose files"
  echo "deploy_compose_test: $passed passed, $failed failed, $skipped skipped"
  exit 1
fi
command -v jq >/dev/null 2>&1 ||
  fail "jq (in deploy/install_deps.sh) is needed by deploy/docker/entrypoint.sh"

# Render with Compose itself: v1 (Debian's docker-compose) or the v2 plugin.
# Neither needs a Docker engine for `config`. Fixed paths for the variables
# the files read, so the output does not depend on this shell.
render=()
if command -v docker-compose >/dev/null 2>&1; then
  render=(docker-compose)
elif docker compose version >/dev/null 2>&1; then
  render=(docker compose)
fi
# Every variable the files read is unset (their defaults) or fixed, so the
# output does not depend on this shell. A user's model and data: the model
# TensorFlow.js wrote (a copy, at a path of its own) and an .npz (config
# reads only its name; the built daemons are not given the data here).
unset PSCLUSTER_IMAGE PSCLUSTER_CUDA_IMAGE PSCLUSTER_EPOCHS PSCLUSTER_WORKER0_GPU PSCLUSTER_WORKER1_GPU \
  PSCLUSTER_WORKER_CPUS PSCLUSTER_MODEL PSCLUSTER_DATA_DIR PSCLUSTER_WAIT_FOR_CLUSTER_S PSCLUSTER_PS_RECOVERY_TIMEOUT_S \
  PSCLUSTER_PS_REPLICAS PSCLUSTER_CHIEF_ARGS
# Any chief flag, through .env or the shell (deploy/compose/.env's example).
CHIEF_ARGS="--batch_size=64 --optimizer=sgd --learning_rate=0.01"
export CHIEF_ARGS
own_model="$tmp/my model/tfjs_plain.json"   # a space: one argument all the same
own_data="$tmp/my data/data.npz"
mkdir -p "$(dirname "$own_model")" "$(dirname "$own_data")"
cp "$repo/tests/fixtures/keras/tfjs_plain.json" "$own_model"
: >"$own_data"
if [ ${#render[@]} -eq 0 ]; then
  skip "docker-compose config: neither docker-compose (Debian 12 package docker-compose) nor" \
    "'docker compose' is installed; checking the files as written, interpolated and merged by this test"
else
  # One number per role: deploy/compose/scale.py on a copy, 3 ps and 3
  # workers (its files are rendered from Compose's folder, as if there).
  mkdir -p "$tmp/scaled"
  cp "$COMPOSE/docker-compose.yml" "$COMPOSE/docker-compose.gpu.yml" "$tmp/scaled/"
  if out="$("$PY" "$COMPOSE/scale.py" --dir="$tmp/scaled" --ps=3 --workers=3 2>&1)"; then
    pass "deploy/compose/scale.py --ps=3 --workers=3: $out"
  else
    fail "deploy/compose/scale.py --ps=3 --workers=3: $out"
  fi
  if out="$("$PY" "$COMPOSE/scale.py" --check 2>&1)"; then
    pass "the shipped Compose files are what deploy/compose/scale.py --ps=2 --workers=2 makes"
  else
    fail "deploy/compose/scale.py --check: $out"
  fi
  out="$("$PY" "$COMPOSE/scale.py" --dir="$tmp/scaled" --workers=0 2>&1)"; rc=$?
  if [ "$rc" -eq 2 ] && grep -q -- "--workers=0" <<<"$out"; then
    pass "deploy/compose/scale.py --workers=0: exit 2 naming it"
  else
    fail "deploy/compose/scale.py --workers=0: exit $rc, '$out'"
  fi
  # Per-task identities: the files made by the command the identities
  # file's header gives (its --san and --tasks), as a user would.
  id_file="$COMPOSE/docker-compose.identities.yml"
  san="$(sed -n 's/^#   deploy\/tls\/make_test_ca.sh --san \([^ ]*\) .*/\1/p' "$id_file")"
  tasks="$(sed -n 's/^#     --tasks \([^ ]*\) .*/\1/p' "$id_file")"
  if out="$("$repo/deploy/tls/make_test_ca.sh" --san "$san" --tasks "$tasks" "$tmp/pki" 2>&1)"; then
    pass "docker-compose.identities.yml's make_test_ca.sh command (--tasks $tasks) runs as written"
  else
    fail "docker-compose.identities.yml's make_test_ca.sh --san '$san' --tasks '$tasks': $(tail -3 <<<"$out")"
  fi
  for variant in base gpu own gpu-own cpus flags scaled scaled-gpu identities; do
    dir="$COMPOSE"
    case "$variant" in scaled*) dir="$tmp/scaled" ;; esac
    files=(-f "$dir/docker-compose.yml")
    what="docker-compose.yml"
    case "$variant" in *gpu*) files+=(-f "$dir/docker-compose.gpu.yml"); what+=" + docker-compose.gpu.yml" ;; esac
    case "$variant" in scaled*) what+=" scaled to 3 ps and 3 workers" ;; esac
    envs=()
    case "$variant" in *own) envs=(PSCLUSTER_MODEL="$own_model" PSCLUSTER_DATA_DIR="$own_data")
                             what+=" with PSCLUSTER_MODEL=<a model.json> PSCLUSTER_DATA_DIR=<an .npz>" ;;
                       cpus) envs=(PSCLUSTER_WORKER_CPUS=3); what+=" with PSCLUSTER_WORKER_CPUS=3" ;;
                       flags) envs=(PSCLUSTER_CHIEF_ARGS="$CHIEF_ARGS"); what+=" with PSCLUSTER_CHIEF_ARGS" ;;
                       identities) files+=(-f "$dir/docker-compose.identities.yml"); envs=(PSCLUSTER_PKI="$tmp/pki")
                                   what+=" + docker-compose.identities.yml" ;; esac
    if (cd "$tmp" && env "${envs[@]}" "${render[@]}" --project-directory "$COMPOSE" "${files[@]}" config) \
        >"$tmp/rendered-$variant.yml" 2>"$tmp/config.err"; then
      pass "${render[*]} config renders $what"
    else
      fail "${render[*]} config ($what): $(tail -5 "$tmp/config.err")"
      rm -f "$tmp/rendered-$variant.yml"
    fi
  done
fi

run_checks "compose checks" "$PY" - "$repo" "$tmp" "$own_model" "$own_data" <<'EOF'
import json, os, re, sys
import yaml
repo, tmp, own_model, own_data = sys.argv[1:5]
sys.path.insert(0, tmp)
from deploylib import *

COMPOSE = os.path.join(repo, "deploy/compose")
SHIPPED = {"ps": 2, "worker": 2, "evaluator": 1, "chief": 1}
SCALED = {"ps": 3, "worker": 3, "evaluator": 1, "chief": 1}
OWN = {"PSCLUSTER_MODEL": own_model, "PSCLUSTER_DATA_DIR": own_data}
# variant -> (files, environment)
VARIANTS = {"base": (["docker-compose.yml"], {}),
            "gpu": (["docker-compose.yml", "docker-compose.gpu.yml"], {}),
            "own": (["docker-compose.yml"], OWN),
            "gpu-own": (["docker-compose.yml", "docker-compose.gpu.yml"], OWN),
            "cpus": (["docker-compose.yml"], {"PSCLUSTER_WORKER_CPUS": "3"}),
            "flags": (["docker-compose.yml"], {"PSCLUSTER_CHIEF_ARGS": os.environ["CHIEF_ARGS"]}),
            "scaled": (["docker-compose.yml"], {}),
            "scaled-gpu": (["docker-compose.yml", "docker-compose.gpu.yml"], {}),
            "identities": (["docker-compose.yml", "docker-compose.identities.yml"],
                           {"PSCLUSTER_PKI": os.path.join(tmp, "pki")})}
PKI = os.path.join(tmp, "pki")

def raw(name, env, directory=COMPOSE):
    """A Compose file with ${VAR}, ${VAR:-default} interpolated as Compose does."""
    with open(os.path.join(directory, name)) as f:
        text = f.read()
    text = re.sub(r"\$\{(\w+)(?::?-([^}]*))?\}",
                  lambda m: env.get(m.group(1)) or m.group(2) or "", text)
    return yaml.safe_load(text)

def merged_by_hand(files, env, directory):
    """The files as written, interpolated, overrides merged per service (no Compose here)."""
    out = raw(files[0], env, directory)
    for name in files[1:]:
        more = raw(name, env, directory)
        for svc_name, svc in more["services"].items():
            merged_env = dict(out["services"][svc_name].get("environment", {}), **svc.get("environment", {}))
            out["services"][svc_name].update(svc)
            out["services"][svc_name]["environment"] = merged_env
        out.setdefault("secrets", {}).update(more.get("secrets", {}))
    return out

rendered = {}
for variant, (files, env) in VARIANTS.items():
    path = os.path.join(tmp, "rendered-%s.yml" % variant)
    try:
        if os.path.exists(path):
            with open(path) as f:
                rendered[variant] = yaml.safe_load(f)
        else:
            rendered[variant] = merged_by_hand(
                files, env, os.path.join(tmp, "scaled") if variant.startswith("scaled") else COMPOSE)
    except Exception as e:
        bad("the Compose files parse (%s): %s" % (variant, e))
        sys.exit(1)

def env_of(svc):
    env = svc.get("environment", {})
    if isinstance(env, list):
        env = dict(e.split("=", 1) for e in env)
    return env

def secret_names(svc):
    return sorted(s if isinstance(s, str) else s.get("target") or s["source"] for s in svc.get("secrets", []))

def mounts_of(svc):
    """[(target, read_only)] in either the short (v1) or long (v2) syntax."""
    out = []
    for v in svc.get("volumes", []):
        if isinstance(v, str):
            parts = v.split(":")
            out.append((parts[1], len(parts) > 2 and "ro" in parts[2].split(",")))
        else:
            out.append((v["target"], bool(v.get("read_only"))))
    return out

def command_of(svc):
    cmd = svc.get("command", [])
    return cmd.split() if isinstance(cmd, str) else list(cmd)

def binds_of(svc):
    """[(source, target, read_only)] of the bind mounts (not named volumes);
    relative sources are the project directory's (deploy/compose)."""
    out = []
    for v in svc.get("volumes", []):
        if isinstance(v, str):
            parts = v.split(":")
            if not parts[0].startswith(("/", ".")):
                continue  # a named volume
            src, dst, ro = parts[0], parts[1], len(parts) > 2 and "ro" in parts[2].split(",")
        elif v.get("type") == "bind":
            src, dst, ro = v["source"], v["target"], bool(v.get("read_only"))
        else:
            continue
        out.append((os.path.normpath(os.path.join(COMPOSE, src)), dst, ro))
    return out

flags = known_flags(repo)
fake_bin = make_fake_bin(tmp)
real_bin = real_bin_or_skip(repo, tmp)

for variant, cfg in sorted(rendered.items()):
    services = cfg["services"]
    env = VARIANTS[variant][1]
    what = " + ".join(VARIANTS[variant][0]) + ("" if variant == "identities" else
        " with PSCLUSTER_WORKER_CPUS=3" if variant == "cpus" else
        " scaled to 3 ps and 3 workers" if variant.startswith("scaled") else
        " with PSCLUSTER_CHIEF_ARGS" if variant == "flags" else " with a user's model and .npz" if env else "")
    want_model = env.get("PSCLUSTER_MODEL", "cnn")
    want_data = env.get("PSCLUSTER_DATA_DIR", "/data/mnist")
    want_data_source = env.get("PSCLUSTER_DATA_DIR", os.path.join(repo, "data/mnist"))
    # The cluster, every TF_CONFIG and its task.
    g = Group("%s: TF_CONFIGs" % what)
    tf = {}
    for name, svc in sorted(services.items()):
        try:
            tf[name] = json.loads(env_of(svc)["TF_CONFIG"])
        except Exception as e:
            g(False, "%s has a TF_CONFIG that is valid JSON" % name, repr(e))
    g(len(tf) == len(services), "every service's TF_CONFIG is valid JSON")
    clusters = {json.dumps(t.get("cluster"), sort_keys=True) for t in tf.values()}
    g(len(clusters) == 1, "all share one cluster", str(clusters))
    cluster = next(iter(tf.values()))["cluster"] if tf else {}
    want = SCALED if variant.startswith("scaled") else SHIPPED
    g({j: len(cluster.get(j, [])) for j in want} == want,
      "the cluster has %d ps, %d workers, a chief and an evaluator" % (want["ps"], want["worker"]),
      json.dumps(cluster))
    listens = {}  # service -> port it listens on (its own TF_CONFIG entry)
    for name, t in sorted(tf.items()):
        task = t.get("task", {})
        job, index = task.get("type"), task.get("index", 0)
        want = name if job in ("chief", "evaluator") else "%s-%s" % (job, index)
        g(want == name and job in ROLES, "%s runs task %s:%s" % (name, job, index))
        try:
            host, port = split_address(cluster[job][index])
            listens[name] = port
            g(host == name, "%s's own address %s names the service" % (name, cluster[job][index]))
        except Exception as e:
            g(False, "%s is in the cluster" % name, repr(e))
    tasks = cluster_tasks(cluster)
    owners = {}
    for job, index, address in tasks:
        host, port = split_address(address)
        owners.setdefault(host, []).append((job, index))
        g(host in services and listens.get(host) == port,
          "%s:%d -> service %s listening on %d" % (job, index, host, port))
    g(all(len(v) == 1 for v in owners.values()) and set(owners) == set(services),
      "one service per task, one task per service", str(owners))
    g.report()
    # What each service runs.
    for name, svc in sorted(services.items()):
        g = Group("%s: service %s" % (what, name))
        cmd = command_of(svc)
        job = tf.get(name, {}).get("task", {}).get("type")
        g(cmd[:1] == [job], "command starts with its role '%s'" % job, str(cmd[:1]))
        if job not in ROLES:
            g.report()
            continue
        binary = ROLES[job][1]
        probs = flag_problems(binary, cmd[1:], flags)
        g(not probs, "flags are %s's" % binary, "; ".join(probs))
        g(flag_value(cmd, "metrics_port") is not None, "--metrics_port set")
        # Bounded: a task whose exit is final (2, 3, 4) exits again at once
        # when restarted (the entrypoint), so the restarts end in seconds.
        want_restart = "on-failure:3" if job == "chief" else "on-failure:5"
        g(svc.get("restart") == want_restart, "restart: %s" % want_restart, str(svc.get("restart")))
        test = svc.get("healthcheck", {}).get("test", [])
        g(test[:2] == ["CMD", "pscluster-health-probe"] and len(test) == 4 and
          split_address(test[2]) == ("127.0.0.1", listens.get(name)) and
          test[3] == "--service=pscluster.Ready",
          "healthcheck: gRPC health 'pscluster.Ready' (ready for its role) of 127.0.0.1:%s"
          % listens.get(name), str(test))
        mounts = mounts_of(svc)
        for flag in ("data_dir", "logdir"):
            path = flag_value(cmd, flag)
            if path is None:
                continue
            cover = [(t, ro) for t, ro in mounts if path == t or path.startswith(t.rstrip("/") + "/")]
            g(cover and (flag == "data_dir" or not cover[0][1]),
              "--%s=%s on a %s volume" % (flag, path, "mounted" if flag == "data_dir" else "writable"),
              str(mounts))
        binds = binds_of(svc)
        if job in ("worker", "evaluator"):
            # The data: the folder or .npz, read-only, where --data_dir says.
            g(flag_value(cmd, "data_dir") == want_data, "--data_dir=%s" % want_data, str(flag_value(cmd, "data_dir")))
            g(binds == [(want_data_source, want_data, True)],
              "only the data bind-mounted: %s read-only at %s" % (want_data_source, want_data), str(binds))
            g(flag_value(cmd, "model") is None, "no --model (the chief ships the model)")
        if job == "chief":
            g(flag_value(cmd, "logdir") == "/runs", "--logdir=/runs")
            # The model: the built-in cnn, or the file read-only at the same path.
            g(flag_value(cmd, "model") == want_model, "--model=%s" % want_model, str(flag_value(cmd, "model")))
            if "PSCLUSTER_MODEL" in env:
                g(binds == [(want_model, want_model, True)],
                  "only the model bind-mounted: read-only at the same path", str(binds))
            else:
                g(len(binds) == 1 and binds[0][0] == "/dev/null" and binds[0][2] and
                  not any(a.split("=", 1)[-1] == binds[0][1] for a in cmd),
                  "only /dev/null bind-mounted (read-only, unread) in place of a model", str(binds))
            g(flag_value(cmd, "data_dir") is None, "no --data_dir (the evaluator scores the weights)")
        if job == "ps":
            g(not binds, "no bind mounts", str(binds))
        gpu_devices = (svc.get("deploy", {}).get("resources", {}).get("reservations", {}).get("devices", []))
        if "gpu" in variant and job == "worker":
            g(any(d.get("driver") == "nvidia" and "gpu" in d.get("capabilities", []) for d in gpu_devices)
              and "cuda" in svc.get("image", "") and svc.get("build", {}).get("dockerfile", "").endswith("Dockerfile.cuda")
              and flag_value(cmd, "device") == "cuda",
              "an nvidia GPU reserved, the CUDA image, --device=cuda",
              "devices=%s image=%s cmd=%s" % (gpu_devices, svc.get("image"), cmd))
        else:
            g(not gpu_devices and flag_value(cmd, "device") in (None, "cpu"), "no GPU")
        if job == "worker":
            # Threads: the CPU limit's cores on the CPU, one on a GPU (each
            # container its own GPU, worker-i GPU i as train.sh's round-robin).
            want_cpus = int(env.get("PSCLUSTER_WORKER_CPUS", "2"))
            threads = flag_value(cmd, "threads")
            try:
                cpus = float(svc.get("cpus"))
            except (TypeError, ValueError):
                cpus = None
            g(cpus == want_cpus, "cpus: %d" % want_cpus, str(svc.get("cpus")))
            if "gpu" in variant:
                index = name.rsplit("-", 1)[-1]
                g(threads == "1", "--threads=1 (the GPU computes)", str(threads))
                g([d.get("device_ids") for d in gpu_devices] == [[index]],
                  "its own GPU: device_ids [\"%s\"]" % index, str(gpu_devices))
            else:
                g(threads == str(want_cpus), "--threads=%d, its CPU limit" % want_cpus, str(threads))
        g.report()
    # The entrypoint passes each TF_CONFIG on unchanged (a container's
    # hostname is its id: no ordinal); the built daemons accept it.
    g = Group("%s: entrypoint and daemons" % what)
    for name, svc in sorted(services.items()):
        cmd, env = command_of(svc), env_of(svc)
        # PSCLUSTER_ARGS (the chief's, from PSCLUSTER_CHIEF_ARGS) come last.
        more = (env.get("PSCLUSTER_ARGS") or "").split()
        want_tf, first = tf.get(name), []
        if variant == "identities":
            # /run/secrets as Compose fills it: this service's secrets alone.
            stem = "%s-%s" % (want_tf["task"]["type"], want_tf["task"].get("index", 0))
            mounted = os.path.join(tmp, "secrets", name)
            os.makedirs(mounted, exist_ok=True)
            for s in secret_names(svc):
                if not os.path.exists(os.path.join(mounted, s)):
                    os.symlink(os.path.join(PKI, s), os.path.join(mounted, s))
            env = dict(env, PSCLUSTER_IDENTITY_DIR=mounted)
            want_tf = dict(want_tf, rpc_layer="grpc+tls")
            first = ["--tls_cert=%s/%s.pem" % (mounted, stem), "--tls_key=%s/%s.key" % (mounted, stem),
                     "--tls_ca=%s/ca.pem" % mounted, "--auth_token_file=%s/%s.token" % (mounted, stem),
                     "--auth_identities_file=%s/identities" % mounted, "--authorize=true"]
        try:
            got, args = task_view(repo, fake_bin, cmd, env, "3f2a9c1b7d4e")
            g(got == want_tf and args == first + cmd[1:] + more,
              "%s gets its TF_CONFIG and flags unchanged%s%s" % (
                  name, " and then %s" % " ".join(more) if more else "",
                  ", its own identity first and rpc_layer grpc+tls" if first else ""),
              json.dumps(got) + " " + " ".join(args))
        except Exception as e:
            g(False, "%s: entrypoint runs" % name, str(e))
        if real_bin:
            accepted, msg = daemon_accepts(repo, real_bin, cmd, env, "3f2a9c1b7d4e")
            g(accepted, "the built %s accepts %s's" % (ROLES[cmd[0]][1], name), msg)
    g.report()

# The GPU override changes only the workers' image, command (not the data)
# and devices; the model and the data change only the commands and mounts.
def normal(svc):
    """A service with its volumes in one order (Compose v1 merges them as a set)."""
    out = dict(svc)
    if "volumes" in out:
        out["volumes"] = sorted(json.dumps(v, sort_keys=True) for v in out["volumes"])
    return out

for plain, gpu in (("base", "gpu"), ("own", "gpu-own")):
    if plain in rendered and gpu in rendered:
        b = {n: normal(v) for n, v in rendered[plain]["services"].items()}
        gp = {n: normal(v) for n, v in rendered[gpu]["services"].items()}
        changed = sorted(n for n in b if b[n] != gp.get(n))
        check(changed == ["worker-0", "worker-1"] and
              all(env_of(b[n]) == env_of(gp[n]) and b[n].get("volumes") == gp[n].get("volumes") and
                  flag_value(command_of(b[n]), "data_dir") == flag_value(command_of(gp[n]), "data_dir")
                  for n in changed),
              "docker-compose.gpu.yml changes only the workers (not their TF_CONFIG, data or mounts)%s"
              % (" with a user's model and .npz" if plain == "own" else ""), str(changed))
# Per-task identities: every service gets /run/secrets as its identity
# folder holding its own certificate, key and token, the CA and the list,
# and nothing else changes; each secret is a file the header's command made.
if "base" in rendered and "identities" in rendered:
    b, ids = rendered["base"]["services"], rendered["identities"]
    g = Group("docker-compose.identities.yml")
    for name, svc in sorted(ids["services"].items()):
        task = json.loads(env_of(svc)["TF_CONFIG"])["task"]
        stem = "%s-%s" % (task["type"], task.get("index", 0))
        g(env_of(svc).get("PSCLUSTER_IDENTITY_DIR") == "/run/secrets", "%s: PSCLUSTER_IDENTITY_DIR=/run/secrets" % name)
        g(secret_names(svc) == sorted(["ca.pem", "identities", stem + ".pem", stem + ".key", stem + ".token"]),
          "%s: its own %s.pem, .key, .token, ca.pem and identities, nothing of another task" % (name, stem),
          str(secret_names(svc)))
        rest = {k: v for k, v in svc.items() if k != "secrets"}
        rest["environment"] = {k: v for k, v in env_of(svc).items() if k != "PSCLUSTER_IDENTITY_DIR"}
        base_svc = dict(b.get(name, {}), environment=env_of(b.get(name, {})))
        g(normal(rest) == normal(base_svc), "%s: nothing else changes" % name)
    files = {n: (v.get("file") if isinstance(v, dict) else v) for n, v in ids.get("secrets", {}).items()}
    g(files and all(f == os.path.join(PKI, n) and os.path.isfile(f) for n, f in files.items()),
      "every secret is PSCLUSTER_PKI's file of its name, made by the header's make_test_ca.sh", str(files))
    g.report()

# The chief's /metrics is published on the host: a free port of 127.0.0.1
# by default (no other service publishes anything).
if "base" in rendered:
    ports = {n: svc.get("ports") for n, svc in rendered["base"]["services"].items() if svc.get("ports")}
    chief_ports = ports.get("chief") or []
    spec = chief_ports[0] if len(chief_ports) == 1 else None
    ok = (spec in ("127.0.0.1::9100", "127.0.0.1::9100/tcp") or
          (isinstance(spec, dict) and str(spec.get("target")) == "9100" and spec.get("host_ip") == "127.0.0.1"
           and not spec.get("published")))
    check(ok and list(ports) == ["chief"], "the chief alone publishes /metrics (9100) on a free port of 127.0.0.1",
          str(ports))
# PSCLUSTER_CHIEF_ARGS reaches the chief's environment alone, as
# PSCLUSTER_ARGS (the entrypoint adds them: checked above); nothing else
# changes.
if "base" in rendered and "flags" in rendered:
    b, fl = rendered["base"]["services"], rendered["flags"]["services"]
    check(env_of(fl["chief"]).get("PSCLUSTER_ARGS") == os.environ["CHIEF_ARGS"] and
          env_of(b["chief"]).get("PSCLUSTER_ARGS") in ("", None) and
          all(fl[n] == b[n] for n in b if n != "chief") and
          {k: v for k, v in env_of(fl["chief"]).items() if k != "PSCLUSTER_ARGS"} ==
          {k: v for k, v in env_of(b["chief"]).items() if k != "PSCLUSTER_ARGS"},
          "PSCLUSTER_CHIEF_ARGS reaches the chief alone, as PSCLUSTER_ARGS: %s" % os.environ["CHIEF_ARGS"],
          str(env_of(fl["chief"])))
if "base" in rendered and "own" in rendered:
    b, o = rendered["base"]["services"], rendered["own"]["services"]
    strip = lambda svc: {k: v for k, v in svc.items() if k not in ("command", "volumes")}
    check(all(strip(b[n]) == strip(o.get(n, {})) for n in b) and sorted(b) == sorted(o),
          "PSCLUSTER_MODEL and PSCLUSTER_DATA_DIR change only commands and mounts")
sys.exit(1 if results["fail"] else 0)
EOF

# docs/deploy-compose.md's and the README's Compose shell blocks, as
# written, with the real docker-compose rendering each project and a docker
# that needs no engine (tests/docker_run_test.sh runs the same Compose file
# for real).
mnist="${1:-${PSCLUSTER_DATA_DIR:-$repo/../shared/data/mnist}}"
if [ -z "$PY" ] || ! command -v docker-compose >/dev/null 2>&1; then
  fail "the docs' Compose blocks need python3 with PyYAML and docker-compose (deploy/install_deps.sh installs both)"
elif ! has_mnist "$mnist"; then
  skip "the docs' Compose blocks: no MNIST in '$mnist' (their download_mnist.sh line would go to the network)"
else
  run_checks "the docs' Compose blocks" "$PY" "$repo/tests/compose_doc_blocks.py" "$repo" "$tmp" "$mnist"
fi

echo "deploy_compose_test: checked deploy/compose (rendered config, TF_CONFIGs, services): $passed passed," \
  "$failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
