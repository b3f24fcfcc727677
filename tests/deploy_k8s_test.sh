#!/usr/bin/env bash
# Checks the Kubernetes manifests in deploy/k8s without a cluster: every file
# parses; per role a headless Service and a StatefulSet whose names, ports
# (container 2222 = Service port = gRPC probe port), selectors and labels
# agree; the TF_CONFIG each pod gets (deploy/docker/entrypoint.sh run for
# ordinals 0..replicas-1 on the ConfigMap) names that pod's task and matches
# the cluster, and the built daemons accept it with the manifest's flags;
# flags the daemons have; GPU limits on the workers; their --threads (1 on
# a GPU; a CPU worker's from its CPU limit through the downward API, which
# this test resolves as the kubelet does); Prometheus annotations;
# volumes and PersistentVolumeClaims that exist; the model and the data
# (the ConfigMap pscluster-train's model, data_dir and ps_replicas reach
# the chief's --model and --ps_replicas and every worker's and the
# evaluator's --data_dir through
# $(VAR) in their args, expanded here as Kubernetes does; the chief mounts
# the optional ConfigMap pscluster-model at /config); the Kubeflow TFJob with
# the TF_CONFIG the training-operator would give each replica and the same
# model and data; and, where kubectl is installed, `kubectl kustomize` of
# deploy/k8s, deploy/k8s/cpu, and deploy/k8s/model with a user's model.json
# (TensorFlow.js's, tests/fixtures/keras/tfjs_plain.json) and an .npz
# as data_dir, in a copy of deploy/k8s and in an overlay of one's own
# outside it: the model reaches the chief as that ConfigMap, mounted at
# /config, and the built chief accepts it.
#
# Usage: tests/deploy_k8s_test.sh [MNIST_DIR]   (MNIST is not needed)
# Exit status 0 when every check passed.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/deploy_common.sh"

if [ -z "$PY" ]; then
  fail "python3 with PyYAML (Debian: python3-yaml, in deploy/install_deps.sh) is needed to read the manifests"
  echo "deploy_k8s_test: $passed passed, $failed failed, $skipped skipped"
  exit 1
fi
if ! command -v jq >/dev/null 2>&1; then
  fail "jq (in deploy/install_deps.sh) is needed by deploy/docker/entrypoint.sh"
fi

# kubectl kustomize renders both variants; the Python checks read the output.
K8S="$repo/deploy/k8s"
MODEL_FIXTURE="$repo/tests/fixtures/keras/tfjs_plain.json"
if command -v kubectl >/dev/null 2>&1; then
  for variant in "" cpu; do
    dir="$K8S${variant:+/$variant}"
    if kubectl kustomize "$dir" >"$tmp/rendered${variant:+-$variant}.yaml" 2>"$tmp/kustomize.err"; then
      pass "kubectl kustomize deploy/k8s${variant:+/$variant} renders"
    else
      fail "kubectl kustomize deploy/k8s${variant:+/$variant}: $(tail -3 "$tmp/kustomize.err")"
      rm -f "$tmp/rendered${variant:+-$variant}.yaml"
    fi
  done
  # A user's model: model.json next to deploy/k8s/model/kustomization.yaml
  # (in a copy of deploy/k8s: the repository stays as it is), data_dir set
  # to an .npz on the data volume; and the same kustomization copied next to
  # a model.json outside deploy/k8s, its bases pointed at deploy/k8s (GPU).
  mkdir -p "$tmp/k8s-copy" "$tmp/mine"
  cp -r "$K8S" "$tmp/k8s-copy/k8s"
  cp "$MODEL_FIXTURE" "$tmp/k8s-copy/k8s/model/model.json"
  # As docs/deploy-k8s.md says to:
  sed -i 's|- data_dir=.*|- data_dir=/data/data.npz|' "$tmp/k8s-copy/k8s/model/kustomization.yaml"
  cp "$MODEL_FIXTURE" "$tmp/mine/model.json"
  rel="$(realpath --relative-to="$tmp/mine" "$K8S")"   # kustomize refuses absolute bases
  sed 's|^  - \.\./cpu\( .*\)\{0,1\}$|  - '"$rel"'|' "$K8S/model/kustomization.yaml" >"$tmp/mine/kustomization.yaml"
  grep -qxF "  - $rel" "$tmp/mine/kustomization.yaml" ||
    fail "deploy/k8s/model/kustomization.yaml: no '  - ../cpu' line under bases for a copy to point elsewhere"
  for variant in model mine; do
    if [ "$variant" = model ]; then dir="$tmp/k8s-copy/k8s/model"; what="deploy/k8s/model (model.json, data_dir=/data/data.npz)"
    else dir="$tmp/mine"; what="a copy of deploy/k8s/model/kustomization.yaml next to model.json, bases: $rel"; fi
    if kubectl kustomize "$dir" >"$tmp/rendered-$variant.yaml" 2>"$tmp/kustomize.err"; then
      pass "kubectl kustomize $what renders"
    else
      fail "kubectl kustomize $what: $(tail -3 "$tmp/kustomize.err")"
      rm -f "$tmp/rendered-$variant.yaml"
    fi
  done
else
  skip "kubectl kustomize deploy/k8s: no kubectl here (Debian 12's kubernetes-client, or upstream kubectl)"
fi

run_checks "k8s manifest checks" "$PY" - "$repo" "$tmp" "$MODEL_FIXTURE" <<'EOF'
import glob, json, os, re, sys
import yaml
repo, tmp, model_fixture = sys.argv[1], sys.argv[2], sys.argv[3]
sys.path.insert(0, tmp)
from deploylib import *

K8S = os.path.join(repo, "deploy/k8s")
GRPC_PORT = 2222
ROLES_IN_ORDER = ["ps", "worker", "evaluator", "chief"]

def load(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d]

# 1. Every YAML file parses; the kustomizations list files that exist.
docs = {}
g = Group("deploy/k8s YAML")
for path in sorted(glob.glob(K8S + "/**/*.yaml", recursive=True)):
    rel = os.path.relpath(path, K8S)
    try:
        docs[rel] = load(path)
        g(True, "%s parses" % rel)
    except yaml.YAMLError as e:
        g(False, "%s parses" % rel, str(e))
base_dir = os.path.join(K8S, "base")
base = []
for kdir in ["", "base", "cpu", "model"]:
    kfile = os.path.join(K8S, kdir, "kustomization.yaml")
    name = os.path.join(kdir, "kustomization.yaml")
    if not g(os.path.exists(kfile), "%s exists" % name):
        continue
    k = load(kfile)[0]
    listed = (k.get("resources", []) + k.get("bases", []) +
              [p["path"] for p in k.get("patchesJson6902", [])] +
              [f.split("=", 1)[-1] for gen in k.get("configMapGenerator", []) for f in gen.get("files", [])])
    # model/model.json is the user's file (model/.gitignore keeps it out of git).
    user_files = ["model.json"] if kdir == "model" else []
    missing = [r for r in listed if r not in user_files and not os.path.exists(os.path.join(K8S, kdir, r))]
    g(not missing, "%s lists only what exists%s" % (name, " (and model.json, the user's)" if user_files else ""),
      str(missing))
    if kdir == "model":
        gens = {gen["name"]: gen for gen in k.get("configMapGenerator", [])}
        lits = dict(l.split("=", 1) for l in gens.get("pscluster-train", {}).get("literals", []))
        g(gens.get("pscluster-model", {}).get("files") == ["model.json"] and
          gens.get("pscluster-train", {}).get("behavior") == "merge" and
          lits.get("model") == "/config/model.json" and lits.get("data_dir", "").startswith("/data/") and
          k.get("namespace") == "pscluster",
          "model/kustomization.yaml: ConfigMap pscluster-model from model.json, pscluster-train merged with "
          "model=/config/model.json and a data_dir under /data, namespace pscluster", json.dumps(k))
        ignored = open(os.path.join(K8S, kdir, ".gitignore")).read().split() if os.path.exists(
            os.path.join(K8S, kdir, ".gitignore")) else []
        g("model.json" in ignored, "model/.gitignore keeps the user's model.json out of git", str(ignored))
    if kdir == "base":
        g(k.get("namespace") == "pscluster", "base/kustomization.yaml sets namespace pscluster")
        for r in k.get("resources", []):
            if os.path.exists(os.path.join(base_dir, r)):
                base += load(os.path.join(base_dir, r))
g.report()

def find(kind, name, objs=base):
    hits = [o for o in objs if o.get("kind") == kind and o["metadata"]["name"] == name]
    return hits[0] if len(hits) == 1 else None

cm = find("ConfigMap", "pscluster-tf-config")
pvcs = {o["metadata"]["name"] for o in base if o.get("kind") == "PersistentVolumeClaim"}
g = Group("ConfigMap pscluster-tf-config")
g(cm is not None, "in base")
cluster = json.loads(cm["data"]["TF_CONFIG"])["cluster"] if cm else {}
g(set(cluster) == set(ROLES_IN_ORDER), "its cluster lists chief, ps, worker, evaluator", str(sorted(cluster)))
g.report()
# What to train on what data: the default is the built-in CNN on MNIST.
train = find("ConfigMap", "pscluster-train")
g = Group("ConfigMap pscluster-train (base/train.yaml)")
g(train is not None, "in base")
tdata = (train or {}).get("data", {})
g(tdata.get("model") == "cnn", "model: cnn (the built-in CNN by default)", str(tdata))
g(tdata.get("data_dir") == "/data/mnist", "data_dir: /data/mnist", str(tdata))
g.report()
CONFIGMAPS = {"pscluster-tf-config": cm, "pscluster-train": train}
BUILTIN_MODELS = {"cnn", "mlp", "vgg_fashion", "mlp_large", "mlp_deep"}
flags = known_flags(repo)
fake_bin = make_fake_bin(tmp)
real_bin = make_real_bin(repo, tmp)
if real_bin is None:
    skip("the built daemons' own TF_CONFIG and flag checks: bazel-bin lacks them "
         "(bazel build //ps_server:ps_server //worker:worker //evaluator:evaluator //chief:chief)")

def cpu_millis(quantity):
    """A Kubernetes CPU quantity ("2", "1500m", 0.5) in millicores."""
    q = str(quantity)
    return int(q[:-1]) if q.endswith("m") else int(round(float(q) * 1000))

def container_env(c, configmaps):
    env = {}
    for e in c.get("env", []):
        if "value" in e:
            env[e["name"]] = e["value"]
        elif "resourceFieldRef" in e["valueFrom"]:
            # The downward API: the container's own CPU limit or request,
            # rounded up to whole divisors, as the kubelet does. A missing
            # limit would give the node's cores: KeyError, a failed check.
            ref = e["valueFrom"]["resourceFieldRef"]
            kind, _, res = ref["resource"].partition(".")
            if ref.get("containerName", c["name"]) != c["name"] or res != "cpu":
                raise KeyError("resourceFieldRef %s" % ref)
            have, per = cpu_millis(c["resources"][kind][res]), cpu_millis(ref.get("divisor", "1"))
            env[e["name"]] = str(-(-have // per))
        else:
            ref = e["valueFrom"]["configMapKeyRef"]
            env[e["name"]] = configmaps[ref["name"]]["data"][ref["key"]]
    return env

def check_worker_threads(g, c, args, cpu_workers):
    """A CPU worker computes on as many threads as its CPU limit has cores
    (through the downward API); a GPU worker on one."""
    threads = flag_value(args, "threads")
    if cpu_workers:
        limit = c.get("resources", {}).get("limits", {}).get("cpu")
        raw = flag_value(c.get("args", []), "threads") or ""
        refs = {e["name"]: e["valueFrom"]["resourceFieldRef"] for e in c.get("env", [])
                if "resourceFieldRef" in e.get("valueFrom", {})}
        var = raw[2:-1] if raw.startswith("$(") and raw.endswith(")") else None
        g(limit is not None and threads == str(-(-cpu_millis(limit) // 1000)) and
          refs.get(var, {}).get("resource") == "limits.cpu",
          "--threads=%s: the CPU limit's cores, from limits.cpu through the downward API" % threads,
          "limit=%s args=%s env=%s" % (limit, raw, refs))
    else:
        g(threads == "1", "--threads=1 (the GPU computes)", str(threads))

def expand(args, env):
    """args with $(VAR) replaced as Kubernetes does when it starts a container:
    $(VAR) of a variable of the container's env, $$ for $; the rest unchanged."""
    def one(a):
        return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)",
                      lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)), a)
    return [one(a) for a in args]

def check_pod_spec(where, template, role, configmaps, is_tfjob=False, model_configmap="pscluster-model",
                   cpu_workers=False):
    """Role argument, flags, ports, probes, metrics, resources, volumes, model and data of a pod template."""
    g = Group(where)
    spec, ann = template["spec"], template["metadata"].get("annotations", {})
    c = spec["containers"][0]
    try:
        args = expand(c.get("args", []), container_env(c, configmaps))
    except KeyError as e:
        g(False, "every configMapKeyRef names a ConfigMap and key that exist", repr(e))
        g.report()
        return
    unexpanded = [a for a in args if "$(" in a]
    g(not unexpanded, "every $(VAR) in args is a variable of the container", str(unexpanded))
    g(args[:1] == [role], "first argument is the role '%s'" % role, str(args[:1]))
    binary = ROLES[role][1]
    probs = flag_problems(binary, args[1:], flags)
    g(not probs, "flags are %s's" % binary, "; ".join(probs))
    ports = {p.get("name"): p["containerPort"] for p in c.get("ports", [])}
    ready, live = c.get("readinessProbe"), c.get("livenessProbe")
    metrics = flag_value(args, "metrics_port")
    if is_tfjob and role == "evaluator":
        # Outside the operator's cluster the evaluator serves no gRPC: its
        # probes read /metrics.
        for kind, probe in (("readiness", ready), ("liveness", live)):
            get = (probe or {}).get("httpGet", {})
            g(get.get("path") == "/metrics" and str(get.get("port")) == str(metrics),
              "%s: GET /metrics on --metrics_port (no gRPC server outside the cluster)" % kind, str(probe))
    else:
        port_name = "tfjob-port" if is_tfjob else "grpc"
        g(ports.get(port_name) == GRPC_PORT, "container port %s %d" % (port_name, GRPC_PORT), str(ports))
        # Readiness asks "pscluster.Ready" (ready for its role); a TFJob's
        # asks "" (up), since the operator's per-pod Services publish only
        # ready pods and the chief must reach every task first. Liveness
        # asks "" (the process is up).
        want_service = "" if is_tfjob else "pscluster.Ready"
        g(ready and ready.get("grpc", {}).get("port") == GRPC_PORT
          and ready["grpc"].get("service", "") == want_service,
          "readiness: gRPC health of service '%s' on %d" % (want_service, GRPC_PORT), str(ready))
        if role != "chief" or is_tfjob:
            g(live and live.get("grpc", {}).get("port") == GRPC_PORT
              and live["grpc"].get("service", "") == "",
              "liveness: gRPC health of service '' (the process is up) on %d" % GRPC_PORT, str(live))
        else:
            g(live is None and "PSCLUSTER_DONE_FILE" in [e["name"] for e in c.get("env", [])],
              "runs once (PSCLUSTER_DONE_FILE), no liveness probe to restart it")
    g(metrics is not None and ports.get("metrics") == int(metrics)
      and ann.get("prometheus.io/scrape") == "true" and ann.get("prometheus.io/port") == metrics
      and ann.get("prometheus.io/path") == "/metrics",
      "--metrics_port = port 'metrics' = prometheus.io/port, scrape, path /metrics",
      "metrics_port=%s ports=%s annotations=%s" % (metrics, ports, ann))
    req = c.get("resources", {}).get("requests", {})
    g("cpu" in req and "memory" in req, "requests cpu and memory", str(req))
    gpu = c.get("resources", {}).get("limits", {}).get("nvidia.com/gpu")
    if role == "worker" and cpu_workers:
        g(gpu is None and c["image"] == "pscluster:latest" and flag_value(args, "device") == "cpu",
          "no GPU, pscluster:latest, --device=cpu (deploy/k8s/cpu)",
          "gpu=%s image=%s device=%s" % (gpu, c["image"], flag_value(args, "device")))
        check_worker_threads(g, c, args, True)
    elif role == "worker":
        g(gpu in (1, "1") and "cuda" in c["image"] and flag_value(args, "device") == "cuda",
          "limit nvidia.com/gpu 1, CUDA image, --device=cuda",
          "gpu=%s image=%s device=%s" % (gpu, c["image"], flag_value(args, "device")))
        check_worker_threads(g, c, args, False)
    else:
        g(gpu is None, "no GPU")
    vols = {v["name"]: v for v in spec.get("volumes", [])}
    mounts = {m["mountPath"]: m for m in c.get("volumeMounts", [])}
    undeclared = [m["name"] for m in mounts.values() if m["name"] not in vols]
    g(not undeclared, "mounts name volumes of the pod", str(undeclared))
    # A final exit code (2, 3, 4) outlives a container restart in the pod,
    # so the restarted container exits with it at once (as under Compose).
    state = {e["name"]: e.get("value") for e in c.get("env", [])}.get("PSCLUSTER_STATE_DIR")
    m = mounts.get(state or "")
    g(state and m and "emptyDir" in vols.get(m["name"], {}),
      "PSCLUSTER_STATE_DIR on an emptyDir (a final exit code outlives a container restart)",
      "PSCLUSTER_STATE_DIR=%s mounts=%s" % (state, list(mounts)))
    claims = [v["persistentVolumeClaim"]["claimName"] for v in vols.values() if "persistentVolumeClaim" in v]
    missing = [x for x in claims if x not in pvcs]
    g(not missing, "claims exist (%s)" % (", ".join(claims) or "none"), str(missing))
    for flag in ("data_dir", "logdir"):
        path = flag_value(args, flag)
        if path is None:
            continue
        covering = [m for p, m in mounts.items() if path == p or path.startswith(p.rstrip("/") + "/")]
        writable = flag == "data_dir" or (covering and not covering[0].get("readOnly"))
        g(covering and writable, "--%s=%s on a %s volume" %
          (flag, path, "mounted" if flag == "data_dir" else "writable"), str(list(mounts)))
    # The model, in the chief alone: a built-in name, or a file on the
    # ConfigMap pscluster-model mounted read-only at /config.
    mv = vols.get("model", {}).get("configMap", {})
    mm = [m for m in c.get("volumeMounts", []) if m["name"] == "model"]
    model = flag_value(args, "model")
    if role == "chief":
        g(mv.get("name") == model_configmap and mm and mm[0]["mountPath"] == "/config" and mm[0].get("readOnly"),
          "the ConfigMap %s (the model file) read-only at /config" % model_configmap, "%s %s" % (mv, mm))
        if model_configmap == "pscluster-model":
            g(mv.get("optional") is True, "that ConfigMap optional (absent: the built-in model)", str(mv))
        g(model in BUILTIN_MODELS or (model or "").startswith("/config/"),
          "--model=%s: a built-in model or a file under /config" % model, str(model))
    else:
        g(model is None and not mm, "no model (the chief ships it to every task)", "%s %s" % (model, mm))
    if role in ("worker", "evaluator"):
        data = flag_value(args, "data_dir")
        data_mount = [m for p, m in mounts.items() if (data or "").startswith(p.rstrip("/") + "/")]
        g(data_mount and vols.get(data_mount[0]["name"], {}).get("persistentVolumeClaim", {}).get("claimName")
          == "pscluster-data" and data_mount[0].get("readOnly"),
          "--data_dir=%s on the volume pscluster-data, read-only" % data, str(list(mounts)))
    g.report()

def check_pod_tf_config(label, pod, role, c, env, want_tf, own=None, real_args=None):
    """The TF_CONFIG and flags the daemon of pod `pod` gets (args expanded as
    Kubernetes does), and whether the built daemon takes them (real_args:
    the same with the container's paths mapped to this machine's)."""
    g = Group(label)
    argv = expand(c["args"], env)
    try:
        tf, args = task_view(repo, fake_bin, argv, env, pod)
    except Exception as e:
        g(False, "entrypoint runs", str(e))
        g.report()
        return
    g(tf == want_tf and args == argv[1:], "TF_CONFIG task %s, flags %s" % (
        json.dumps(tf.get("task")), " ".join(a for a in args if a.split("=")[0] in ("--model", "--data_dir"))
        or "unchanged"), "got %s %s, want %s" % (json.dumps(tf), args, json.dumps(want_tf)))
    if own:
        g(own[0], own[1])
    if real_bin:
        accepted, msg = daemon_accepts(repo, real_bin, real_args or argv, env, pod)
        g(accepted, "the built %s accepts both" % ROLES[role][1], msg)
    g.report()

# 2. Per role: a headless Service and a StatefulSet; every pod's TF_CONFIG.
pods = {}  # (job, index) -> the pod's own address
for role in ROLES_IN_ORDER:
    job = ROLES[role][0]
    svc, sts = find("Service", role), find("StatefulSet", role)
    g = Group("%s Service + StatefulSet" % role)
    if not g(svc is not None and sts is not None, "both named %s" % role):
        g.report()
        continue
    g(svc["spec"].get("clusterIP") == "None", "headless")
    g(svc["spec"].get("publishNotReadyAddresses") is True, "DNS before ready")
    sports = [(p.get("port"), p.get("targetPort", p.get("port"))) for p in svc["spec"]["ports"]]
    g((GRPC_PORT, GRPC_PORT) in sports, "Service port %d -> %d" % (GRPC_PORT, GRPC_PORT), str(sports))
    g(sts["spec"]["serviceName"] == role, "serviceName %s" % role)
    tmpl = sts["spec"]["template"]
    labels = tmpl["metadata"].get("labels", {})
    match = sts["spec"]["selector"]["matchLabels"]
    g(all(labels.get(k) == v for k, v in match.items()), "selector matches pod labels", "%s vs %s" % (match, labels))
    g(all(labels.get(k) == v for k, v in svc["spec"]["selector"].items()), "Service selects the pods")
    others = [o["metadata"]["name"] for o in base if o.get("kind") == "StatefulSet" and o is not sts and
              all(o["spec"]["template"]["metadata"]["labels"].get(k) == v for k, v in svc["spec"]["selector"].items())]
    g(not others, "and no other role's", str(others))
    g(sts["spec"].get("podManagementPolicy") == "Parallel", "pods start in parallel")
    replicas = sts["spec"]["replicas"]
    g(replicas == len(cluster.get(job, [])), "replicas %d = entries in cluster.%s" % (replicas, job),
      "cluster.%s has %d" % (job, len(cluster.get(job, []))))
    g.report()
    check_pod_spec("%s pod template" % role, tmpl, role, CONFIGMAPS)
    c = tmpl["spec"]["containers"][0]
    env = container_env(c, CONFIGMAPS)
    env.pop("PSCLUSTER_DONE_FILE", None)
    for i in range(replicas):
        pod = "%s-%d" % (sts["metadata"]["name"], i)
        own = cluster[job][i] if i < len(cluster.get(job, [])) else ""
        host, port = split_address(own) if own else ("", 0)
        good = host == "%s.%s" % (pod, svc["metadata"]["name"]) and port == GRPC_PORT
        if good:
            pods[(job, i)] = own
        check_pod_tf_config("pod " + pod, pod, role, c, env, {"cluster": cluster, "task": {"type": job, "index": i}},
                            (good, "own address %s = <pod>.<service>:%d" % (own, GRPC_PORT)))

orphans = [(j, i, a) for j, i, a in cluster_tasks(cluster) if pods.get((j, i)) != a]
check(not orphans, "every task of the cluster is a pod of its StatefulSet", str(orphans))

# 3. The rendered variants (kubectl kustomize, when it ran).
for name, cpu in (("rendered.yaml", False), ("rendered-cpu.yaml", True)):
    path = os.path.join(tmp, name)
    if not os.path.exists(path):
        continue
    objs = load(path)
    g = Group("kubectl kustomize deploy/k8s" + ("/cpu" if cpu else ""))
    kinds = sorted("%s/%s" % (o["kind"], o["metadata"]["name"]) for o in objs)
    want = sorted("%s/%s" % (o["kind"], o["metadata"]["name"]) for o in base)
    g(kinds == want, "the %d objects of base" % len(want), str(kinds))
    ns = {o["metadata"].get("namespace") for o in objs if o["kind"] != "Namespace"}
    g(ns == {"pscluster"}, "all in namespace pscluster", str(ns))
    w = find("StatefulSet", "worker", objs)
    if w:
        c = w["spec"]["template"]["spec"]["containers"][0]
        gpu = c.get("resources", {}).get("limits", {}).get("nvidia.com/gpu")
        if cpu:
            g(gpu is None and c["image"] == "pscluster:latest" and flag_value(c["args"], "device") == "cpu",
              "workers: no GPU, pscluster:latest, --device=cpu",
              "gpu=%s image=%s args=%s" % (gpu, c["image"], c["args"]))
            probs = flag_problems("worker", c["args"][1:], flags)
            g(not probs, "the patched worker flags exist", "; ".join(probs))
        else:
            g(gpu in (1, "1") and c["image"] == "pscluster-cuda:latest",
              "workers: nvidia.com/gpu 1, pscluster-cuda:latest")
        try:
            check_worker_threads(g, c, expand(c["args"], container_env(c, {
                o["metadata"]["name"]: o for o in objs if o["kind"] == "ConfigMap"})), cpu)
        except KeyError as e:
            g(False, "the worker's env resolves", repr(e))
    # The default: the built-in CNN on /data/mnist without ps backups, as
    # Kubernetes expands the args.
    cms = {o["metadata"]["name"]: o for o in objs if o["kind"] == "ConfigMap"}
    for role, flag, want in (("chief", "model", "cnn"), ("chief", "ps_replicas", "0"),
                             ("worker", "data_dir", "/data/mnist"),
                             ("evaluator", "data_dir", "/data/mnist")):
        sts = find("StatefulSet", role, objs)
        if sts:
            c = sts["spec"]["template"]["spec"]["containers"][0]
            got = flag_value(expand(c["args"], container_env(c, cms)), flag)
            g(got == want, "%s: --%s=%s" % (role, flag, want), str(got))
    g.report()

# 3b. A user's model: deploy/k8s/model with model.json (and data_dir an .npz),
#     and the same kustomization outside deploy/k8s (bases: deploy/k8s, GPU).
def model_on_this_machine(args, files, label):
    """args with --model=/config/<key> pointed at a copy of the ConfigMap's
    files here (what the chief's /config mount holds), for the built chief."""
    d = os.path.join(tmp, "config-" + label)
    os.makedirs(d, exist_ok=True)
    for key, text in files.items():
        with open(os.path.join(d, key), "w") as f:
            f.write(text)
    return [("--model=" + os.path.join(d, a[len("--model=/config/"):])) if a.startswith("--model=/config/") else a
            for a in args]

with open(model_fixture) as f:
    fixture_text = f.read()
rendered_cpu = load(os.path.join(tmp, "rendered-cpu.yaml")) if os.path.exists(os.path.join(tmp, "rendered-cpu.yaml")) else None
rendered_gpu = load(os.path.join(tmp, "rendered.yaml")) if os.path.exists(os.path.join(tmp, "rendered.yaml")) else None
for variant, want_data, plain in (("model", "/data/data.npz", rendered_cpu), ("mine", "/data/mnist", rendered_gpu)):
    path = os.path.join(tmp, "rendered-%s.yaml" % variant)
    if not os.path.exists(path):
        continue
    objs = load(path)
    what = ("kubectl kustomize deploy/k8s/model (model.json, data_dir=/data/data.npz)" if variant == "model" else
            "kubectl kustomize of deploy/k8s/model/kustomization.yaml copied next to model.json, bases deploy/k8s")
    g = Group(what)
    gen = [o for o in objs if o["kind"] == "ConfigMap" and re.fullmatch(r"pscluster-model-[a-z0-9]+", o["metadata"]["name"])]
    kinds = sorted("%s/%s" % (o["kind"], o["metadata"]["name"]) for o in objs if o not in gen)
    want = sorted("%s/%s" % (o["kind"], o["metadata"]["name"]) for o in base)
    g(kinds == want and len(gen) == 1, "the %d objects of base and a ConfigMap pscluster-model-<hash>" % len(want),
      "%s + %s" % (kinds, [o["metadata"]["name"] for o in gen]))
    if len(gen) != 1:
        g.report()
        continue
    model_cm = gen[0]
    cms = {o["metadata"]["name"]: o for o in objs if o["kind"] == "ConfigMap"}
    g(model_cm.get("data", {}) == {"model.json": fixture_text},
      "%s holds model.json, the user's file byte for byte" % model_cm["metadata"]["name"],
      str(list(model_cm.get("data", {}))))
    g(model_cm["metadata"].get("namespace") == "pscluster" and
      model_cm["metadata"].get("labels", {}).get("app.kubernetes.io/part-of") == "pscluster",
      "in namespace pscluster, labelled part-of pscluster", str(model_cm["metadata"]))
    tr = cms.get("pscluster-train", {}).get("data", {})
    g(tr == {"model": "/config/model.json", "data_dir": want_data, "ps_replicas": "0"},
      "pscluster-train: model=/config/model.json, data_dir=%s, ps_replicas kept" % want_data,
      str(tr))
    # Only the ConfigMaps and the chief's model volume differ from the plain variant.
    if plain is not None:
        changed = []
        for o in objs:
            if o["kind"] == "ConfigMap":
                continue
            p = find(o["kind"], o["metadata"]["name"], plain)
            if p != o:
                changed.append("%s/%s" % (o["kind"], o["metadata"]["name"]))
        g(changed == ["StatefulSet/chief"], "besides the ConfigMaps only the chief differs from deploy/k8s%s"
          % ("/cpu" if variant == "model" else ""), str(changed))
    g.report()
    for role in ROLES_IN_ORDER:
        sts = find("StatefulSet", role, objs)
        if sts is None:
            bad("%s: no StatefulSet %s" % (what, role))
            continue
        tmpl = sts["spec"]["template"]
        check_pod_spec("%s: %s pod template" % (variant, role), tmpl, role, cms,
                       model_configmap=model_cm["metadata"]["name"], cpu_workers=variant == "model")
        c = tmpl["spec"]["containers"][0]
        env = container_env(c, cms)
        env.pop("PSCLUSTER_DONE_FILE", None)
        argv = expand(c["args"], env)
        if role == "chief":
            check(flag_value(argv, "model") == "/config/model.json",
                  "%s: the chief's --model=/config/model.json" % variant, str(argv))
            real = model_on_this_machine(argv, model_cm["data"], variant)
        else:
            if role in ("worker", "evaluator"):
                check(flag_value(argv, "data_dir") == want_data,
                      "%s: %s's --data_dir=%s" % (variant, role, want_data), str(argv))
            real = argv
        job = ROLES[role][0]
        check_pod_tf_config("%s: pod %s-0" % (variant, role), "%s-0" % role, role, c, env,
                            {"cluster": cluster, "task": {"type": job, "index": 0}}, real_args=real)

# 4. data-loader.yaml mounts the data claim writable.
dl = docs.get("data-loader.yaml", [])
pod = dl[0] if dl else None
check(pod is not None and pod["kind"] == "Pod" and
      [v["persistentVolumeClaim"]["claimName"] for v in pod["spec"]["volumes"]] == ["pscluster-data"] and
      not pod["spec"]["containers"][0]["volumeMounts"][0].get("readOnly"),
      "data-loader.yaml: a Pod that mounts pscluster-data writable")

# 5. The TFJob, given the TF_CONFIG the training-operator generates
#    (genClusterSpec: every replica type but the evaluator, as
#    <job>-<type>-<i>.<namespace>.svc:<tfjob-port>; "environment": "cloud").
tj = (docs.get("tfjob.yaml") or [None])[0]
g = Group("tfjob.yaml")
specs = {}
if g(tj is not None and tj.get("apiVersion") == "kubeflow.org/v1" and tj.get("kind") == "TFJob",
     "a kubeflow.org/v1 TFJob"):
    specs = tj["spec"]["tfReplicaSpecs"]
    g(sorted(specs) == ["Chief", "Evaluator", "PS", "Worker"], "Chief, PS, Worker, Evaluator", str(sorted(specs)))
    g(all(rs["template"]["spec"]["containers"][0]["name"] == "tensorflow" for rs in specs.values()),
      "containers named 'tensorflow' (the operator's default)")
    g(all(rs.get("restartPolicy") in ("OnFailure", "Never", "ExitCode") for rs in specs.values()),
      "restartPolicy OnFailure/Never/ExitCode")
    name, ns = tj["metadata"]["name"], tj["metadata"]["namespace"]
    op_cluster = {}
    for rtype, rs in sorted(specs.items()):
        if rtype == "Evaluator":
            continue
        port = [p["containerPort"] for p in rs["template"]["spec"]["containers"][0]["ports"]
                if p["name"] == "tfjob-port"][0]
        op_cluster[rtype.lower()] = ["%s-%s-%d.%s.svc:%d" % (name, rtype.lower(), i, ns, port)
                                     for i in range(rs["replicas"])]
    g(len(op_cluster.get("chief", [])) == 1, "one chief")
g.report()
for rtype, rs in sorted(specs.items()):
    role = {"PS": "ps"}.get(rtype, rtype.lower())
    check_pod_spec("TFJob %s pod template" % rtype, rs["template"], role, CONFIGMAPS, is_tfjob=True)
    c = rs["template"]["spec"]["containers"][0]
    env = container_env(c, CONFIGMAPS)
    for i in range(rs["replicas"]):
        pod = "%s-%s-%d" % (name, role, i)
        op_tf = {"cluster": op_cluster, "task": {"type": role, "index": i}, "environment": "cloud"}
        env_i = dict(env, TF_CONFIG=json.dumps(op_tf, separators=(",", ":")))
        # The evaluator is not in the operator's cluster; it gets that TF_CONFIG as is.
        check_pod_tf_config("TFJob pod " + pod, pod, role, c, env_i, op_tf)
    # A user's model and data, as tfjob.yaml's comment makes them:
    # kubectl create configmap pscluster-model --from-file=model.json and
    # pscluster-train with model=/config/model.json, data_dir=/data/data.npz.
    user = {"pscluster-train": {"data": {"model": "/config/model.json", "data_dir": "/data/data.npz",
                                         "ps_replicas": "1"}}}
    env_u = container_env(c, user)
    argv = expand(c["args"], env_u)
    op_tf = {"cluster": op_cluster, "task": {"type": role, "index": 0}, "environment": "cloud"}
    env_u["TF_CONFIG"] = json.dumps(op_tf, separators=(",", ":"))
    flag, want = ("model", "/config/model.json") if role == "chief" else ("data_dir", "/data/data.npz")
    if role != "ps":
        check(flag_value(argv, flag) == want, "TFJob %s with the user's pscluster-train: --%s=%s" % (rtype, flag, want),
              str(argv))
    real = model_on_this_machine(argv, {"model.json": fixture_text}, "tfjob") if role == "chief" else argv
    check_pod_tf_config("TFJob pod %s-%s-0 with the user's model and data" % (name, role), "%s-%s-0" % (name, role),
                        role, c, env_u, op_tf, real_args=real)
sys.exit(1 if results["fail"] else 0)
EOF

echo "deploy_k8s_test: checked deploy/k8s (manifests, pod TF_CONFIGs, model and data, TFJob): $passed passed," \
  "$failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
