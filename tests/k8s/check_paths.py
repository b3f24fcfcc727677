#!/usr/bin/env python3
"""Every documented Kubernetes path of deploy/k8s, made as docs/deploy-k8s.md
makes it and resolved as the kubelet would (tests/k8s/kubelet_resolve.py),
then checked pod by pod: the image comes from the registry named in
deploy/k8s/settings, every env reference resolves, the entrypoint makes
each pod's TF_CONFIG naming that pod's own task, every address in it is a
pod of that job by the names the headless Services (or the TFJob operator's
Services) give, the counts are the StatefulSets' replicas (the ps and the workers:
max_ps and max_workers, of which the replicas run; a listed task beyond them
has no DNS record until `kubectl scale` makes its pod, and then resolves to
it, while no pod's TF_CONFIG changes), and the built daemons accept the flags and
TF_CONFIG each pod ends with.

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


def docs_sed(k8s, target, label, key=""):
    """The `sed -i` of docs/deploy-k8s.md that edits deploy/k8s/TARGET (the
    one holding KEY), run on the copy `k8s` exactly as written there: the
    docs are what a user runs."""
    why = user_copy.docs_sed(REPO, k8s, target, key)
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


def check_pod(label, pod, hosts, pods_by_task, want_counts, tfjob, identities=False, later=None):
    """One daemon pod: its TF_CONFIG names its own task, every address in it
    is that task's pod, the counts are WANT_COUNTS (the replicas; the
    workers listed); flags, probes, metrics, volumes and resources as the
    role needs; the built daemon accepts it. `identities`: the pod's own
    task's files from its role's Secret first, with --authorize, mutual TLS
    named pscluster and exec probes. `later`: (pods by task, hosts) of the
    same objects with every StatefulSet scaled to what TF_CONFIG lists: a
    task that has no pod yet must have no DNS record now and resolve to its
    pod there, once `kubectl scale` has made it. Returns (TF_CONFIG, args),
    or None when the entrypoint refused."""
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
    wrong, waiting = [], []
    for j, addresses in cluster.items():
        for i, a in enumerate(addresses):
            host, port = split_address(a)
            target = pods_by_task.get((j, i))
            if target is None and later is not None and (j, i) in later[0]:
                # Listed, no pod yet: no record now, its pod's name once scaled.
                target = later[0][(j, i)]
                if host in hosts or later[1].get(host) != target["name"] or port != grpc_port(target):
                    wrong.append("%s:%d=%s -> now %s, scaled %s" % (j, i, a, hosts.get(host), later[1].get(host)))
                waiting.append("%s:%d" % (j, i))
            elif target is None or hosts.get(host) != target["name"] or port != grpc_port(target):
                wrong.append("%s:%d=%s -> %s" % (j, i, a, hosts.get(host)))
    g(not wrong, "every address is its task's pod, by its Service's DNS name, on its gRPC port%s" %
      ("" if not waiting else " (%s: no pod and no record yet; its pod's once scaled)" % ", ".join(waiting)),
      str(wrong))
    if role == "worker":
        grace = pod.get("terminationGracePeriodSeconds")
        g(isinstance(grace, int) and grace > 10, "terminationGracePeriodSeconds %s > the worker's 10 s to leave "
          "after SIGTERM" % grace, "a scale-down's SIGKILL would come before the worker has left")
    if role == "ps" and not tfjob:
        grace = pod.get("terminationGracePeriodSeconds")
        g(isinstance(grace, int) and grace > 25, "terminationGracePeriodSeconds %s > the ps's 25 s to be drained "
          "after SIGTERM" % grace, "a scale-down's SIGKILL would come before the chief has moved its shards")
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
    return tf, args


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


def by_task_of(pods):
    """(job, index) -> pod, for the daemon pods of PODS."""
    by_task = {}
    for p in pods:
        role = role_of(p["containers"][0])
        if role:
            by_task[(ROLES[role][0], pod_index(p))] = p
    return by_task


def check_path(label, files, want_counts, registry=None, tfjob=False, expect=None, identities=False, listed=None):
    """Resolves one path's objects and checks every pod. WANT_COUNTS: the
    pods per job; LISTED: the tasks per job TF_CONFIG lists, where more
    (the ps and workers: max_ps and max_workers beyond the replicas). Then
    the pods beyond the replicas, as `kubectl scale` makes them, are checked too,
    and every pod's TF_CONFIG and flags must be the same at either size.
    `expect`: role -> {flag: value} that the role's pods must end with.
    Returns {role: (its first pod, its args)} for further checks."""
    listed = listed or want_counts
    pods, hosts = resolve(files, label, registry)
    if pods is None:
        return {}
    by_task = by_task_of(pods)
    have = {}
    for (j, _), p in by_task.items():
        have[j] = have.get(j, 0) + 1
    check(have == want_counts, "%s: the pods %s" % (label, sorted(have.items())), "want %s" % want_counts)
    later, grown_pods = None, None
    scale = {j: n for j, n in listed.items() if n != want_counts.get(j)}
    scale_cmd = " and ".join("kubectl scale statefulset/%s --replicas=%d" % kv for kv in sorted(scale.items()))
    if scale:
        # kubectl scale statefulset/<job> --replicas=<listed>: that alone.
        out, why = user_copy.scaled(files[0], os.path.join(TMP, re.sub(r"\W+", "_", label) + "-scaled.yaml"),
                                    **scale)
        scaled_pods, scaled_hosts = resolve([out] + files[1:], label + ", scaled to the tasks listed",
                                            registry) if out else (None, None)
        check(out is not None, "%s: %s" % (label, scale_cmd), why or "")
        if scaled_pods is not None:
            later = (by_task_of(scaled_pods), scaled_hosts)
            grown_pods = scaled_pods
    first, views = {}, {}
    for p in sorted(pods, key=lambda p: p["name"]):
        role = role_of(p["containers"][0])
        if role is None:
            continue
        view = check_pod(label, p, hosts, by_task, listed, tfjob, identities, later)
        if view is not None:
            views[p["name"]] = view
            if role not in first:
                first[role] = (p, view[1])
    if later is not None:
        # The pods the scale-up adds, checked as every other; every pod's
        # TF_CONFIG and flags the same as before the scale.
        grown = "%s, %s" % (label, scale_cmd)
        changed = []
        for p in sorted(grown_pods, key=lambda p: p["name"]):
            if role_of(p["containers"][0]) is None:
                continue
            view = check_pod(grown, p, later[1], later[0], listed, tfjob, identities) if p["name"] not in views \
                else daemon_view(grown, p, p["containers"][0])[0]
            if p["name"] in views and view != views[p["name"]]:
                changed.append(p["name"])
        check(not changed and views, "%s: no pod's TF_CONFIG or flags change (a live resize, no restart)" % grown,
              "changed: %s" % changed)
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
# The StatefulSets' chief trains once one worker and the first ps answer;
# the others join.
STS_DEFAULTS = dict(DEFAULTS, chief=dict(DEFAULTS["chief"], min_workers="1", min_ps="1"))

# 1. The StatefulSets, GPU and CPU workers, as shipped.
for variant in ("", "cpu"):
    label = "deploy/k8s" + ("/" + variant if variant else "")
    path = kustomize(os.path.join(K8S, variant), label.replace("/", "_"))
    if path:
        first = check_path(label, [path], SIZE, expect=STS_DEFAULTS)
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

# 1b. A StatefulSet scaled past the tasks TF_CONFIG lists (max_workers,
#     max_ps): the pod beyond them does not start its daemon; the
#     entrypoint exits 2 naming it.
path = os.path.join(TMP, "deploy_k8s_cpu.yaml")
for job, var, ceiling in (("worker", "PSCLUSTER_NUM_WORKERS", "max_workers"), ("ps", "PSCLUSTER_NUM_PS", "max_ps")):
    if not os.path.exists(path):
        break
    what = "kubectl scale statefulset/%s --replicas=3 past %s 2" % (job, ceiling)
    out, why = user_copy.scaled(path, os.path.join(TMP, "beyond-%s.yaml" % job), **{job: 3})
    pods, _ = resolve([out], what) if out else (None, None)
    pod = next((p for p in pods or [] if p["name"] == "%s-2" % job), None)
    refused = ""
    if pod is not None:
        try:
            daemon_view("beyond", pod, pod["containers"][0])
        except RuntimeError as e:
            refused = str(e)
    check(refused.startswith("entrypoint exited 2:") and "%s task 2" % job in refused and
          "%s=2" % var in refused,
          "%s: pod %s-2's entrypoint exits 2 naming its task and the count" % (what, job),
          refused or why or "%s-2 started, or has no pod" % job)

# 2. A registry named in settings reaches every image of every path; the
#    size changed where base/kustomization.yaml says: one number for the ps,
#    for the workers the replicas (3) and max_workers (the docs' sed); chief
#    flags set in settings.
k8s = copy_k8s("user")
docs_sed(k8s, "settings/kustomization.yaml", "registry")
docs_sed(k8s, "base/kustomization.yaml", "more workers listed", "max_workers")
docs_sed(k8s, "base/kustomization.yaml", "more ps listed", "max_ps")
with open(os.path.join(k8s, "base/kustomization.yaml")) as f:
    text = f.read()
    listed_workers = re.findall(r"- max_workers=(\d+)", text)
    listed_ps = re.findall(r"- max_ps=(\d+)", text)
why = user_copy.set_counts(k8s, worker=3, ps=3)
check(why is None and listed_workers and int(listed_workers[0]) > 3 and listed_ps and int(listed_ps[0]) > 3,
      "size: the ps and worker replicas one number each in base/kustomization.yaml, max_ps (%s) and max_workers "
      "(%s) by the docs' seds and above the replicas" % (listed_ps, listed_workers), why or "")
flags = {"model": "cnn", "epochs": "2", "batch_size": "64", "optimizer": "sgd", "push_codec": "bf16"}
why = user_copy.set_chief_settings(k8s, {k: v for k, v in flags.items() if k != "model"})
check(why is None, "settings: chief flags set in settings/chief.yaml", why or "")
big = dict(SIZE, ps=3, worker=3)
big_listed = dict(big, worker=int(listed_workers[0]) if listed_workers else 3,
                  ps=int(listed_ps[0]) if listed_ps else 3)
for variant in ("", "cpu"):
    label = "registry, 3 of %d ps, 3 of %d workers, chief flags: deploy/k8s" % (big_listed["ps"], big_listed["worker"]) + \
        ("/" + variant if variant else "")
    path = kustomize(os.path.join(k8s, variant), "user-" + (variant or "gpu"))
    if path:
        check_path(label, [path], big, registry=REGISTRY, expect={"chief": dict(flags, min_workers="1", min_ps="1")},
                   listed=big_listed)
# The model overlay, with model.json and data_dir as the docs say.
shutil.copy(MODEL_FIXTURE, os.path.join(k8s, "model/model.json"))
docs_sed(k8s, "settings/train.yaml", "your data")
path = kustomize(os.path.join(k8s, "model"), "user-model")
if path:
    first = check_path("registry, your model: deploy/k8s/model", [path], big, registry=REGISTRY, listed=big_listed,
                       expect={"chief": dict(flags, model="/config/model.json", min_workers="1", min_ps="1"),
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
                   expect=STS_DEFAULTS)
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
