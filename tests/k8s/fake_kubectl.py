#!/usr/bin/env python3
"""A recording `kubectl` for running docs/deploy-k8s.md's shell blocks as
written, without a cluster (tests/k8s/run_doc_blocks.py puts it on PATH).

It keeps the cluster's state in $FAKE_KUBE_STATE (a JSON file): every object
applied or created, and the pods they make. `apply -k DIR` renders DIR with
the real kubectl ($REAL_KUBECTL kustomize) and resolves every pod of the
state as the kubelet would (tests/k8s/kubelet_resolve.py): a path that does
not render, or a pod that would not start, fails the command. The rest
checks what it names: `cp`, `wait`, `logs`, `exec`, `port-forward`, `delete
pod` and `rollout restart` need that pod or StatefulSet to exist, and `cp`
a local source to exist. `scale statefulset/NAME --replicas=N` changes that
StatefulSet's replicas alone, as the real one does, and the pods are
resolved again. `create ... --dry-run=client -o yaml` is the real
kubectl's. Every call is appended to $FAKE_KUBE_STATE.log. Exit 1 naming
what is wrong.
"""
import json
import os
import subprocess
import sys

import yaml

STATE = os.environ["FAKE_KUBE_STATE"]
REAL = os.environ["REAL_KUBECTL"]
RESOLVE = os.environ["KUBELET_RESOLVE"]


def load():
    if os.path.exists(STATE):
        with open(STATE) as f:
            return json.load(f)
    return {"objects": {}, "pods": [], "images": []}


def save(state):
    with open(STATE, "w") as f:
        json.dump(state, f)


def die(msg):
    sys.stderr.write("fake kubectl: %s\n" % msg)
    sys.exit(1)


def add(state, text, namespace):
    for doc in yaml.safe_load_all(text):
        if not doc:
            continue
        meta = doc.setdefault("metadata", {})
        if doc["kind"] != "Namespace":
            meta.setdefault("namespace", namespace or "default")
        key = "%s/%s/%s" % (doc["kind"], meta.get("namespace", ""), meta["name"])
        state["objects"][key] = doc


def resolve(state):
    """Every pod of the state, as the kubelet would start it; dies naming the first failures."""
    text = yaml.safe_dump_all(list(state["objects"].values()))
    r = subprocess.run([sys.executable, RESOLVE, "-"], input=text, capture_output=True, text=True)
    if r.returncode != 0:
        die("the pods would not start:\n" + "\n".join(l for l in r.stderr.splitlines() if l.startswith("pod ")))
    pods = json.loads(r.stdout)
    state["pods"] = ["%s/%s" % (p["namespace"], p["name"]) for p in pods]
    state["images"] = sorted({c["image"] for p in pods for c in p["containers"]})


def main(argv):
    with open(STATE + ".log", "a") as f:
        f.write(" ".join(argv) + "\n")
    namespace, args = "default", []
    i = 0
    while i < len(argv):
        if argv[i] in ("-n", "--namespace"):
            namespace = argv[i + 1]
            i += 2
        else:
            args.append(argv[i])
            i += 1
    if not args:
        die("no command")
    state = load()
    pods = set(state["pods"])

    def need_pod(name):
        if "%s/%s" % (namespace, name) not in pods:
            die("no pod %s in namespace %s (pods: %s)" % (name, namespace, ", ".join(sorted(pods)) or "none"))

    cmd = args[0]
    if cmd == "apply":
        if args[1] == "-k":
            r = subprocess.run([REAL, "kustomize", args[2]], capture_output=True, text=True)
            if r.returncode != 0:
                die("kubectl kustomize %s: %s" % (args[2], r.stderr.strip()))
            add(state, r.stdout, namespace)
        elif args[1] == "-f":
            files = [args[j + 1] for j in range(1, len(args) - 1) if args[j] == "-f"]
            for name in files:
                add(state, sys.stdin.read() if name == "-" else open(name).read(), namespace)
        else:
            die("apply %s: not -k or -f" % args[1])
        resolve(state)
        save(state)
    elif cmd == "create":
        dry = "--dry-run=client" in args
        real = args + ([] if dry else ["--dry-run=client", "-o", "yaml"])
        r = subprocess.run([REAL, "-n", namespace] + real, capture_output=True, text=True)
        if r.returncode != 0:
            die("kubectl create: %s" % r.stderr.strip())
        if dry:
            sys.stdout.write(r.stdout)
        else:
            add(state, r.stdout, namespace)
            save(state)
    elif cmd == "wait":
        target = [a for a in args[1:] if a.startswith("pod/")]
        if not target:
            die("wait: no pod/NAME")
        need_pod(target[0][4:])
    elif cmd == "cp":
        src, dst = args[1], args[2]
        for side in (src, dst):
            if ":" in side:
                need_pod(side.split(":", 1)[0])
        if ":" not in src and not os.path.exists(src):
            die("cp: no local %s" % src)
        if ":" not in dst:  # copied out: something arrives
            os.makedirs(os.path.dirname(os.path.abspath(dst)), exist_ok=True)
            if not os.path.exists(dst):
                open(dst, "w").close() if "." in os.path.basename(dst) else os.makedirs(dst)
    elif cmd == "delete":
        if args[1] == "pod":
            need_pod(args[2])
            state["pods"].remove("%s/%s" % (namespace, args[2]))
            state["objects"].pop("Pod/%s/%s" % (namespace, args[2]), None)  # a bare pod is gone
            save(state)
        elif args[1].startswith("statefulset"):
            pass  # a label selector over what was applied: nothing to check here
        else:
            die("delete %s: not known to this stand-in" % args[1])
    elif cmd == "logs":
        name = [a for a in args[1:] if not a.startswith("-")][0]
        need_pod(name)
        print("final: test_accuracy=0.9900 test_loss=0.0300 steps=2814 epochs=6 wall_s=1.0")
    elif cmd in ("exec", "port-forward"):
        need_pod(args[1])
    elif cmd == "scale":
        targets = [a for a in args[1:] if not a.startswith("-")]
        replicas = [a.split("=", 1)[1] for a in args[1:] if a.startswith("--replicas=")]
        if len(targets) != 1 or not targets[0].startswith(("statefulset/", "sts/")) or len(replicas) != 1 \
                or not replicas[0].isdigit():
            die("scale %s: want statefulset/NAME --replicas=N" % " ".join(args[1:]))
        key = "StatefulSet/%s/%s" % (namespace, targets[0].split("/", 1)[1])
        if key not in state["objects"]:
            die("scale: no %s (applied: %s)" % (key, ", ".join(sorted(state["objects"]))))
        state["objects"][key]["spec"]["replicas"] = int(replicas[0])
        resolve(state)
        save(state)
    elif cmd == "rollout":
        for target in args[2:]:
            name = target.split("/", 1)[1]
            if not any(p.startswith("%s/%s-" % (namespace, name)) for p in pods):
                die("rollout restart: no StatefulSet %s" % name)
    else:
        die("%s: not known to this stand-in" % cmd)


if __name__ == "__main__":
    main(sys.argv[1:])
