#!/usr/bin/env bash
# Checks the Kubernetes manifests in deploy/k8s without a cluster: every file
# parses; per role a headless Service and a StatefulSet whose names, ports
# (container 2222 = Service port = gRPC probe port), selectors and labels
# agree; the TF_CONFIG each pod gets (deploy/docker/entrypoint.sh run for
# ordinals 0..replicas-1 on the ConfigMap) names that pod's task and matches
# the cluster, and the built daemons accept it with the manifest's flags;
# flags the daemons have; GPU limits on the workers; Prometheus annotations;
# volumes and PersistentVolumeClaims that exist; the Kubeflow TFJob with the
# TF_CONFIG the training-operator would give each replica; and, where kubectl
# is installed, `kubectl kustomize` of deploy/k8s and deploy/k8s/cpu.
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
else
  skip "kubectl kustomize deploy/k8s: no kubectl here (Debian 12's kubernetes-client, or upstream kubectl)"
fi

run_checks "k8s manifest checks" "$PY" - "$repo" "$tmp" <<'EOF'
import glob, json, os, sys
import yaml
repo, tmp = sys.argv[1], sys.argv[2]
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
for kdir in ["", "base", "cpu"]:
    kfile = os.path.join(K8S, kdir, "kustomization.yaml")
    name = os.path.join(kdir, "kustomization.yaml")
    if not g(os.path.exists(kfile), "%s exists" % name):
        continue
    k = load(kfile)[0]
    listed = (k.get("resources", []) + k.get("bases", []) +
              [p["path"] for p in k.get("patchesJson6902", [])])
    missing = [r for r in listed if not os.path.exists(os.path.join(K8S, kdir, r))]
    g(not missing, "%s lists only what exists" % name, str(missing))
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
flags = known_flags(repo)
fake_bin = make_fake_bin(tmp)
real_bin = make_real_bin(repo, tmp)
if real_bin is None:
    skip("the built daemons' own TF_CONFIG and flag checks: bazel-bin lacks them "
         "(bazel build //ps_server:ps_server //worker:worker //evaluator:evaluator //chief:chief)")

def container_env(c, configmaps):
    env = {}
    for e in c.get("env", []):
        if "value" in e:
            env[e["name"]] = e["value"]
        else:
            ref = e["valueFrom"]["configMapKeyRef"]
            env[e["name"]] = configmaps[ref["name"]]["data"][ref["key"]]
    return env

def check_pod_spec(where, template, role, is_tfjob=False):
    """Role argument, flags, ports, probes, metrics, resources, volumes of a pod template."""
    g = Group(where)
    spec, ann = template["spec"], template["metadata"].get("annotations", {})
    c = spec["containers"][0]
    args = c.get("args", [])
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
    if role == "worker":
        g(gpu in (1, "1") and "cuda" in c["image"] and flag_value(args, "device") == "cuda",
          "limit nvidia.com/gpu 1, CUDA image, --device=cuda",
          "gpu=%s image=%s device=%s" % (gpu, c["image"], flag_value(args, "device")))
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
    g.report()

def check_pod_tf_config(label, pod, role, c, env, want_tf, own=None):
    """The TF_CONFIG and flags the daemon of pod `pod` gets, and whether the built daemon takes them."""
    g = Group(label)
    try:
        tf, args = task_view(repo, fake_bin, c["args"], env, pod)
    except Exception as e:
        g(False, "entrypoint runs", str(e))
        g.report()
        return
    g(tf == want_tf and args == c["args"][1:], "TF_CONFIG task %s, flags unchanged" % json.dumps(tf.get("task")),
      "got %s, want %s" % (json.dumps(tf), json.dumps(want_tf)))
    if own:
        g(own[0], own[1])
    if real_bin:
        accepted, msg = daemon_accepts(repo, real_bin, c["args"], env, pod)
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
    check_pod_spec("%s pod template" % role, tmpl, role)
    c = tmpl["spec"]["containers"][0]
    env = container_env(c, {"pscluster-tf-config": cm})
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
    g.report()

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
    check_pod_spec("TFJob %s pod template" % rtype, rs["template"], role, is_tfjob=True)
    c = rs["template"]["spec"]["containers"][0]
    env = container_env(c, {})
    for i in range(rs["replicas"]):
        pod = "%s-%s-%d" % (name, role, i)
        op_tf = {"cluster": op_cluster, "task": {"type": role, "index": i}, "environment": "cloud"}
        env_i = dict(env, TF_CONFIG=json.dumps(op_tf, separators=(",", ":")))
        # The evaluator is not in the operator's cluster; it gets that TF_CONFIG as is.
        check_pod_tf_config("TFJob pod " + pod, pod, role, c, env_i, op_tf)
sys.exit(1 if results["fail"] else 0)
EOF

echo "deploy_k8s_test: checked deploy/k8s (manifests, pod TF_CONFIGs, TFJob): $passed passed," \
  "$failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
