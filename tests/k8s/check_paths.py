#!/usr/bin/env python3
"""Every documented Kubernetes path of deploy/k8s, made as docs/deploy-k8s.md
makes it and resolved as the kubelet would (tests/k8s/kubelet_resolve.py),
then checked pod by pod: the image comes from the registry named in
deploy/k8s/settings, every env reference resolves, the entrypoint makes
each pod's TF_CONFIG naming that pod's own task, every address in it is a
pod of that job by the names the headless Services (or the TFJob operator's
Services) give, the counts are the StatefulSets' replicas, and the built
daemons accept the flags and TF_CONFIG each pod ends with.

Usage: check_paths.py REPO TMP      (run by tests/deploy_k8s_test.sh, which
has written TMP/deploylib.py). Prints PASS:/FAIL:/SKIP: lines; exit 1 when
a check failed.
"""
import json
import os
import re
import shutil
import sys

import yaml

import user_copy

REPO, TMP = sys.argv[1], sys.argv[2]
sys.path.insert(0, TMP)
from deploylib import (ROLES, Group, check, daemon_accepts, flag_problems,  # noqa: E402
                       flag_value, known_flags, make_fake_bin, real_bin_or_skip, results,
                       split_address, task_view)

K8S = os.path.join(REPO, "deploy/k8s")
MODEL_FIXTURE = os.path.join(REPO, "tests/fixtures/keras/tfjs_plain.json")
REGISTRY = "registry.example.com/team"
GRPC_PORT = 2222
FLAGS = known_flags(REPO)
FAKE_BIN = make_fake_bin(TMP)
REAL_BIN = real_bin_or_skip(REPO, TMP)


# --- Making the paths as the docs do -----------------------------------------

def copy_k8s(label):
    """A copy of deploy/k8s to edit as a user would (the repository stays as it is)."""
    return user_copy.copy_k8s(REPO, os.path.join(TMP, label))


def docs_sed(k8s, target, label):
    """The `sed -i` of docs/deploy-k8s.md that edits deploy/k8s/TARGET, run
    on the copy `k8s` exactly as written there: the docs are what a user runs."""
    why = user_copy.docs_sed(REPO, k8s, target)
    check(why is None, "%s: the docs' sed changes deploy/k8s/%s" % (label, target), why or "")


def kustomize(directory, label):
    """`kubectl kustomize DIRECTORY` into TMP/LABEL.yaml; its path, or None."""
    path, why = user_copy.kustomize(directory, os.path.join(TMP, label + ".yaml"))
    check(path is not None, "%s: kubectl kustomize renders" % label, why or "")
    return path


def created(label, what, name, *args):
    """An object as `kubectl create WHAT NAME ARGS --dry-run=client -o yaml`
    makes it (WHAT: "configmap", or "secret generic"), in a file; its path."""
    r = user_copy.run(["kubectl", "-n", "pscluster", "create"] + what.split() + [name] + list(args) +
                      ["--dry-run=client", "-o", "yaml"], cwd=TMP)
    if not check(r.returncode == 0, "%s: kubectl create %s %s" % (label, what, name), r.stderr.strip()):
        return None
    path = os.path.join(TMP, "%s-%s.yaml" % (label, name))
    with open(path, "w") as f:
        f.write(r.stdout)
    return path


def resolve(files, label, registry=None):
    """(pods, hosts) from the kubelet-strict resolver, or (None, None) after
    a failed check naming every pod and reference that does not resolve."""
    pods, why = user_copy.resolve(files, registry)
    if not check(pods is not None, "%s: every pod resolves as the kubelet would%s" %
                 (label, " (images from %s)" % registry if registry else ""), why or ""):
        return None, None
    return pods, user_copy.hosts(files)


# --- Checks of one resolved pod ----------------------------------------------

def role_of(container):
    argv = container.get("argv") or container.get("args") or []
    return argv[0] if argv and argv[0] in ROLES else None


def mount_at(container, path):
    """The mount that holds `path`, or None."""
    best = None
    for m in container["mounts"]:
        p = m["path"].rstrip("/")
        if path == p or path.startswith(p + "/"):
            if best is None or len(p) > len(best["path"].rstrip("/")):
                best = m
    return best


def daemon_view(label, pod, c):
    """(TF_CONFIG, args) the daemon gets from the entrypoint: the pod's
    resolved env and args (a path of the env into a Secret's volume, the
    identity folder, pointed at its files here), its hostname; or raises."""
    env = daemon_env(c)
    here = dict(env)
    if "PSCLUSTER_IDENTITY_DIR" in env:
        here.update(localize(label, pod, c, [], {"PSCLUSTER_IDENTITY_DIR": env["PSCLUSTER_IDENTITY_DIR"]})[1])
    return task_view(REPO, FAKE_BIN, c["args"], here, pod["hostname"] or pod["name"]), env


def check_pod(label, pod, hosts, pods_by_task, want_counts, tfjob, identities=False):
    """One daemon pod: its TF_CONFIG names its own task, every address in it
    is that task's pod, the counts are the replicas; flags, probes, metrics,
    volumes and resources as the role needs; the built daemon accepts it.
    `identities`: the pod's own task's files from its role's Secret first,
    with --authorize, mutual TLS named pscluster and exec probes."""
    c = pod["containers"][0]
    role = role_of(c)
    g = Group("%s: pod %s" % (label, pod["name"]))
    try:
        (tf, args), env = daemon_view(label, pod, c)
    except Exception as e:  # the entrypoint refused: a failed check naming why
        g(False, "the entrypoint starts %s" % role, str(e))
        g.report()
        return None
    job = ROLES[role][0]
    index = pod_index(pod)
    g(tf.get("task") == {"type": job, "index": index}, "TF_CONFIG task %s:%d (its own)" % (job, index),
      json.dumps(tf.get("task")))
    cluster = tf.get("cluster", {})
    counts = {j: len(v) for j, v in cluster.items()}
    g(counts == want_counts, "cluster of %s" % ", ".join("%d %s" % (n, j) for j, n in sorted(counts.items())),
      "want %s" % want_counts)
    wrong = []
    for j, addresses in cluster.items():
        for i, a in enumerate(addresses):
            host, port = split_address(a)
            target = pods_by_task.get((j, i))
            if target is None or hosts.get(host) != target["name"] or port != grpc_port(target):
                wrong.append("%s:%d=%s -> %s" % (j, i, a, hosts.get(host)))
    g(not wrong, "every address is its task's pod, by its Service's DNS name, on its gRPC port", str(wrong))
    probs = flag_problems(ROLES[role][1], args, FLAGS)
    g(not probs, "the flags are %s's" % ROLES[role][1], "; ".join(probs))
    if identities:
        stem = "%s-%d" % (job, index)
        d = flag_value(args, "tls_cert").rsplit("/", 1)[0] if flag_value(args, "tls_cert") else "?"
        want = ["--tls_cert=%s/%s.pem" % (d, stem), "--tls_key=%s/%s.key" % (d, stem), "--tls_ca=%s/ca.pem" % d,
                "--auth_token_file=%s/%s.token" % (d, stem), "--auth_identities_file=%s/identities" % d,
                "--authorize=true", "--tls_server_name=pscluster"]
        secret = (mount_at(c, "/etc/pscluster/identity") or {}).get("volume", {})
        g(args[:len(want)] == want and tf.get("rpc_layer") == "grpc+tls",
          "its own identity %s from the Secret pscluster-identity-%s, --authorize, mutual TLS as pscluster" %
          (stem, job), " ".join(args[:len(want)]))
        files = sorted(secret.get("files") or {})
        g(all(f in ("ca.pem", "identities") or f.startswith(job + "-") for f in files),
          "its Secret holds its role's files only", str(files))
    check_probes_and_metrics(g, pod, c, role, args, tfjob, identities)
    check_volumes(g, c, role, args)
    req = c["resources"].get("requests", {})
    g("cpu" in req and "memory" in req, "requests cpu and memory", str(req))
    if REAL_BIN:
        argv, env = localize(label, pod, c, c["args"], daemon_env(c))
        accepted, msg = daemon_accepts(REPO, REAL_BIN, argv, env, pod["hostname"] or pod["name"])
        g(accepted, "the built %s accepts them" % ROLES[role][1], msg)
    g.report()
    return args


def localize(label, pod, c, argv, env):
    """argv and env with every path into a ConfigMap or Secret volume of the
    container pointed at a folder here holding that volume's files (what the
    pod would find there), for the built daemon to read."""
    mounts = [m for m in c["mounts"] if isinstance(m["volume"].get("files"), dict)]

    def here(value):
        for m in mounts:
            p = m["path"].rstrip("/")
            hit = re.search(r"(^|=)(%s)(/|$)" % re.escape(p), value)
            if hit:
                d = os.path.join(TMP, "mounts", re.sub(r"\W", "_", label), pod["name"], p.strip("/"))
                for rel, text in m["volume"]["files"].items():
                    os.makedirs(os.path.dirname(os.path.join(d, rel)), exist_ok=True)
                    with open(os.path.join(d, rel), "wb") as f:
                        f.write(text.encode() if isinstance(text, str) else bytes(text or b""))
                return value[:hit.start(2)] + d + value[hit.end(2):]
        return value
    return [here(a) for a in argv], {k: here(v) for k, v in env.items()}


def daemon_env(c):
    """The container's env for the entrypoint here: without the chief's
    run-once file, a path of the pod."""
    env = dict(c["env"])
    env.pop("PSCLUSTER_DONE_FILE", None)
    return env


def pod_index(pod):
    """The task index a pod's name ends with: a StatefulSet's ordinal, a TFJob replica's index."""
    return int(pod["name"].rsplit("-", 1)[1])


def grpc_port(pod):
    ports = {p.get("name"): p["containerPort"] for p in pod["containers"][0]["ports"]}
    return ports.get("grpc", ports.get("tfjob-port"))


def check_probes_and_metrics(g, pod, c, role, args, tfjob, identities=False):
    ready, live = c.get("readinessProbe"), c.get("livenessProbe")
    if identities:  # exec probes: the kubelet's grpc probes speak plaintext only
        probe = ["pscluster-health-probe", "127.0.0.1:%d" % GRPC_PORT]
        g((ready or {}).get("exec", {}).get("command") == probe + ["--service=pscluster.Ready"] and
          "grpc" not in ready, "readiness: pscluster-health-probe of 'pscluster.Ready' (TLS files from its identity)",
          str(ready))
        if role != "chief":
            g((live or {}).get("exec", {}).get("command") == probe and "grpc" not in live,
              "liveness: pscluster-health-probe ''", str(live))
        return
    metrics = flag_value(args, "metrics_port")
    ann = pod.get("annotations", {})
    g(metrics is not None and {p.get("name"): p["containerPort"] for p in c["ports"]}.get("metrics") == int(metrics)
      and ann.get("prometheus.io/scrape") == "true" and ann.get("prometheus.io/port") == metrics,
      "--metrics_port = port 'metrics' = prometheus.io/port", "metrics_port=%s annotations=%s" % (metrics, ann))
    want = "" if tfjob else "pscluster.Ready"
    g((ready or {}).get("grpc", {}).get("port") == GRPC_PORT and ready["grpc"].get("service", "") == want,
      "readiness: gRPC health '%s'" % want, str(ready))
    if role == "chief" and not tfjob:
        g(live is None and "PSCLUSTER_DONE_FILE" in c["env"], "runs once (PSCLUSTER_DONE_FILE), no liveness probe")
    else:
        g((live or {}).get("grpc", {}).get("port") == GRPC_PORT and live["grpc"].get("service", "") == "",
          "liveness: gRPC health ''", str(live))


def check_volumes(g, c, role, args):
    state = c["env"].get("PSCLUSTER_STATE_DIR")
    m = mount_at(c, state or "/nonexistent")
    g(m is not None and m["volume"]["kind"] == "emptyDir",
      "PSCLUSTER_STATE_DIR on an emptyDir (a final exit code outlives a container restart)", str(state))
    for flag, writable in (("data_dir", False), ("logdir", True)):
        path = flag_value(args, flag)
        if path is None:
            continue
        m = mount_at(c, path)
        claim = (m or {}).get("volume", {}).get("claimName")
        want = "pscluster-data" if flag == "data_dir" else "pscluster-runs"
        g(claim == want and (not writable or not m.get("readOnly")),
          "--%s=%s on %s%s" % (flag, path, want, " (writable)" if writable else ""), str(m))
    if role == "chief":
        m = mount_at(c, "/config")
        g(m is not None and m["volume"]["kind"] == "configMap" and m.get("readOnly"),
          "the model ConfigMap read-only at /config", str(m))


def check_path(label, files, want_counts, registry=None, tfjob=False, expect=None, identities=False):
    """Resolves one path's objects and checks every pod. `expect`: role ->
    {flag: value} that the role's pods must end with. Returns {role: args
    of its first pod} for further checks."""
    pods, hosts = resolve(files, label, registry)
    if pods is None:
        return {}
    by_task = {}
    for p in pods:
        role = role_of(p["containers"][0])
        if role:
            by_task[(ROLES[role][0], pod_index(p))] = p
    have = {}
    for (j, _), p in by_task.items():
        have[j] = have.get(j, 0) + 1
    check(have == want_counts, "%s: the pods %s" % (label, sorted(have.items())), "want %s" % want_counts)
    first = {}
    for p in sorted(pods, key=lambda p: p["name"]):
        role = role_of(p["containers"][0])
        if role is None:
            continue
        args = check_pod(label, p, hosts, by_task, want_counts, tfjob, identities)
        if args is not None and role not in first:
            first[role] = (p, args)
    for role, flags in (expect or {}).items():
        args = first.get(role, (None, []))[1]
        got = {f: flag_value(args, f) for f in flags}
        check(got == flags, "%s: %s ends with %s" % (label, role, " ".join("--%s=%s" % kv for kv in flags.items())),
              str(args))
    return first


# --- The paths ---------------------------------------------------------------

SIZE = {"chief": 1, "ps": 2, "worker": 2, "evaluator": 1}
DEFAULTS = {"chief": {"model": "cnn", "epochs": "6"}, "worker": {"data_dir": "/data/mnist"},
            "evaluator": {"data_dir": "/data/mnist"}}

# 1. The StatefulSets, GPU and CPU workers, as shipped.
for variant in ("", "cpu"):
    label = "deploy/k8s" + ("/" + variant if variant else "")
    path = kustomize(os.path.join(K8S, variant), label.replace("/", "_"))
    if path:
        first = check_path(label, [path], SIZE, expect=DEFAULTS)
        w = first.get("worker")
        if w:
            c, args = w[0]["containers"][0], w[1]
            gpu = c["resources"].get("limits", {}).get("nvidia.com/gpu")
            if variant == "cpu":
                cpus = c["env"].get("PSCLUSTER_WORKER_CPUS")
                check(gpu is None and c["image"] == "pscluster:latest" and flag_value(args, "device") == "cpu"
                      and cpus == "2" and flag_value(args, "threads") == cpus,
                      "%s: workers on the CPU image, no GPU, --threads=2 from their CPU limit (downward API)" % label,
                      "gpu=%s image=%s args=%s cpus=%s" % (gpu, c["image"], args, cpus))
            else:
                check(str(gpu) == "1" and c["image"] == "pscluster-cuda:latest" and
                      flag_value(args, "device") == "cuda" and flag_value(args, "threads") == "1",
                      "%s: workers ask for nvidia.com/gpu 1, the CUDA image, --device=cuda --threads=1" % label,
                      "gpu=%s image=%s args=%s" % (gpu, c["image"], args))

# 2. A registry named in settings reaches every image of every path; the
#    size changed by one number per role; chief flags set in settings.
k8s = copy_k8s("user")
docs_sed(k8s, "settings/kustomization.yaml", "registry")
why = user_copy.set_counts(k8s, worker=3, ps=3)
check(why is None, "size: the worker and ps counts are one number each in base/kustomization.yaml", why or "")
flags = {"model": "cnn", "epochs": "2", "batch_size": "64", "optimizer": "sgd", "push_codec": "bf16"}
why = user_copy.set_chief_settings(k8s, {k: v for k, v in flags.items() if k != "model"})
check(why is None, "settings: chief flags set in settings/chief.yaml", why or "")
big = dict(SIZE, ps=3, worker=3)
for variant in ("", "cpu"):
    label = "registry, 3 ps, 3 workers, chief flags: deploy/k8s" + ("/" + variant if variant else "")
    path = kustomize(os.path.join(k8s, variant), "user-" + (variant or "gpu"))
    if path:
        check_path(label, [path], big, registry=REGISTRY, expect={"chief": flags})
# The model overlay, with model.json and data_dir as the docs say.
shutil.copy(MODEL_FIXTURE, os.path.join(k8s, "model/model.json"))
docs_sed(k8s, "settings/train.yaml", "your data")
path = kustomize(os.path.join(k8s, "model"), "user-model")
if path:
    first = check_path("registry, your model: deploy/k8s/model", [path], big, registry=REGISTRY,
                       expect={"chief": dict(flags, model="/config/model.json"),
                               "worker": {"data_dir": "/data/data.npz"}, "evaluator": {"data_dir": "/data/data.npz"}})
    chief = first.get("chief")
    if chief:
        files = (mount_at(chief[0]["containers"][0], "/config") or {}).get("volume", {}).get("files", {})
        with open(MODEL_FIXTURE) as f:
            check(files == {"model.json": f.read()}, "your model: the chief's /config/model.json is model.json, "
                  "byte for byte", str(list(files)))
for root in ("tfjob", "data-loader"):
    path = kustomize(os.path.join(k8s, root), "user-" + root)
    if path and root == "data-loader":
        pods, _ = resolve([path], "registry: deploy/k8s/data-loader", REGISTRY)
        loader = [p for p in pods or [] if p["name"] == "data-loader"]
        m = mount_at(loader[0]["containers"][0], "/data") if loader else None
        check(m is not None and m["volume"].get("claimName") == "pscluster-data" and not m.get("readOnly"),
              "deploy/k8s/data-loader: the pod mounts pscluster-data writable at /data", str(m))
    elif path:
        check_path("registry, chief flags: deploy/k8s/tfjob", [path], SIZE,
                   registry=REGISTRY, tfjob=True, expect={"chief": flags})

# 3. The TFJob as shipped, and with your model as the docs make its ConfigMap.
path = kustomize(os.path.join(K8S, "tfjob"), "tfjob")
if path:
    check_path("deploy/k8s/tfjob", [path], SIZE, tfjob=True, expect=DEFAULTS)
    model_cm = created("tfjob", "configmap", "pscluster-model", "--from-file=model.json=" + MODEL_FIXTURE)
    k8s2 = copy_k8s("tfjob-model")
    docs_sed(k8s2, "settings/chief.yaml", "the TFJob with your model")
    path2 = kustomize(os.path.join(k8s2, "tfjob"), "tfjob-model")
    if path2 and model_cm:
        check_path("deploy/k8s/tfjob with your model (kubectl create configmap pscluster-model)",
                   [path2, model_cm], SIZE, tfjob=True,
                   expect={"chief": {"model": "/config/model.json"}})

# 4. Per-task identities (docs/deploy-k8s.md): the component added by the
#    docs' sed, each role's Secret made as the docs make it; every pod gets
#    its own task's files, picked by its ordinal.
k8s3 = copy_k8s("identities")
docs_sed(k8s3, "cpu/kustomization.yaml", "identities")
pki = os.path.join(TMP, "pki-k8s")
r = user_copy.run([os.path.join(REPO, "deploy/tls/make_test_ca.sh"), "--san", "DNS:pscluster", "--tasks",
                   "chief,ps/0,ps/1,worker/0,worker/1,evaluator", pki])
if check(r.returncode == 0, "identities: make_test_ca.sh --tasks", r.stderr.strip()):
    secrets = [created("identities", "secret generic", "pscluster-identity-" + role,
                       *["--from-file=" + os.path.join(pki, f) for f in sorted(os.listdir(pki))
                         if f in ("ca.pem", "identities") or f.startswith(role + "-")])
               for role in ("chief", "ps", "worker", "evaluator")]
    path = kustomize(os.path.join(k8s3, "cpu"), "identities")
    if path and all(secrets):
        check_path("per-task identities: deploy/k8s/cpu + ../identities", [path] + secrets, SIZE, identities=True,
                   expect=DEFAULTS)
        # A pod whose role's Secret is missing does not start (the kubelet).
        pods, why = user_copy.resolve([path] + secrets[:2] + secrets[3:], None)
        check(pods is None and "pscluster-identity-worker" in (why or ""),
              "identities: without the Secret pscluster-identity-worker the worker pods do not start, naming it",
              (why or "resolved")[:300])

# 5. Disruption budgets: ps one at a time, the chief not at all.
path = os.path.join(TMP, "deploy_k8s.yaml")
if os.path.exists(path):
    with open(path) as f:
        objs = [o for o in yaml.safe_load_all(f) if o]
    pdbs = {o["metadata"]["name"]: o["spec"] for o in objs if o["kind"] == "PodDisruptionBudget"}
    check(pdbs.get("ps", {}).get("maxUnavailable") == 1 and pdbs.get("chief", {}).get("maxUnavailable") == 0 and
          all(s["selector"]["matchLabels"].get("app.kubernetes.io/component") == n for n, s in pdbs.items()),
          "PodDisruptionBudgets: ps maxUnavailable 1, chief 0, each selecting its role", str(pdbs))

sys.exit(1 if results["fail"] else 0)
