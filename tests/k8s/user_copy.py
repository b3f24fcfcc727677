"""A copy of deploy/k8s edited as docs/deploy-k8s.md tells a user to edit it,
rendered with the real kubectl and resolved by tests/k8s/kubelet_resolve.py.
Shared by tests/k8s/check_paths.py (every path, checked pod by pod) and
tests/k8s/docker_runs.py (the pods run on Docker).

Every function returns what it made and, where something went wrong, a
message (None when all went well): the callers turn those into their own
PASS/FAIL lines.
"""
import json
import os
import re
import shutil
import subprocess
import sys

RESOLVE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kubelet_resolve.py")


def run(argv, **kw):
    return subprocess.run(argv, capture_output=True, text=True, **kw)


def copy_k8s(repo, directory):
    """A copy of REPO/deploy/k8s at DIRECTORY/k8s, to edit as a user would
    (the repository stays as it is); its path."""
    d = os.path.join(directory, "k8s")
    shutil.copytree(os.path.join(repo, "deploy/k8s"), d)
    return d


def docs_sed(repo, k8s, target, key=""):
    """Runs, on the copy K8S, the `sed -i` command of docs/deploy-k8s.md that
    edits deploy/k8s/TARGET (the one whose expression holds KEY, where the
    docs have several for TARGET), exactly as written there. None, or why
    not."""
    with open(os.path.join(repo, "docs/deploy-k8s.md")) as f:
        text = f.read().replace("\\\n", " ")
    cmds = [c for c in re.findall(r"^sed -i '([^']+)'\s+deploy/k8s/%s\s*$" % re.escape(target), text, re.M)
            if key in c]
    if len(cmds) != 1:
        return "docs/deploy-k8s.md has %d sed commands for deploy/k8s/%s%s, not one" % (
            len(cmds), target, " holding '%s'" % key if key else "")
    path = os.path.join(k8s, target)
    with open(path) as f:
        before = f.read()
    r = run(["sed", "-i", cmds[0], path])
    with open(path) as f:
        if r.returncode != 0 or f.read() == before:
            return "the docs' sed '%s' left deploy/k8s/%s as it was: %s" % (cmds[0], target, r.stderr.strip())
    return None


def set_counts(k8s, **counts):
    """One number per role, where the docs say: the count of ROLE under
    `replicas` in base/kustomization.yaml. None, or why not."""
    path = os.path.join(k8s, "base/kustomization.yaml")
    with open(path) as f:
        text = f.read()
    for role, n in counts.items():
        text, found = re.subn(r"(- name: %s\n\s+count: )\d+" % re.escape(role), r"\g<1>%d" % n, text)
        if found != 1:
            return "base/kustomization.yaml has %d counts for %s, not one" % (found, role)
    with open(path, "w") as f:
        f.write(text)
    return None


def set_max_workers(k8s, n):
    """The workers TF_CONFIG lists (the ceiling of a live resize), where the
    docs say: max_workers of the ConfigMap pscluster-size in
    base/kustomization.yaml. None, or why not."""
    return set_max(k8s, "max_workers", n)


def set_max_ps(k8s, n):
    """The ps TF_CONFIG lists, as set_max_workers: max_ps."""
    return set_max(k8s, "max_ps", n)


def set_max(k8s, key, n):
    """The literal KEY=N of the ConfigMap pscluster-size in
    base/kustomization.yaml. None, or why not."""
    path = os.path.join(k8s, "base/kustomization.yaml")
    with open(path) as f:
        text = f.read()
    text, found = re.subn(r"(- %s=)\d+" % key, r"\g<1>%d" % n, text)
    if found != 1:
        return "base/kustomization.yaml has %d %s literals, not one" % (found, key)
    with open(path, "w") as f:
        f.write(text)
    return None


def scaled(rendered, out, **replicas):
    """What `kubectl scale statefulset/NAME --replicas=N` leaves: the objects
    of the file RENDERED with only those StatefulSets' spec.replicas changed
    (NAME=N), written to OUT. (OUT, None), or (None, why not)."""
    import yaml
    with open(rendered) as f:
        objs = [o for o in yaml.safe_load_all(f) if o]
    left = dict(replicas)
    for o in objs:
        name = o.get("metadata", {}).get("name")
        if o.get("kind") == "StatefulSet" and name in left:
            o["spec"]["replicas"] = left.pop(name)
    if left:
        return None, "%s has no StatefulSet %s" % (rendered, ", ".join(sorted(left)))
    with open(out, "w") as f:
        yaml.safe_dump_all(objs, f, sort_keys=False)
    return out, None


def set_chief_settings(k8s, settings):
    """Sets keys of the ConfigMap pscluster-chief (settings/chief.yaml), as a
    user edits its `data:`: an existing key's value replaced, a new key
    added. None, or why not."""
    path = os.path.join(k8s, "settings/chief.yaml")
    with open(path) as f:
        text = f.read()
    if "\ndata:\n" not in text:
        return "settings/chief.yaml has no data: section"
    for key, value in settings.items():
        line = '  %s: "%s"\n' % (key, value)
        text, found = re.subn(r"^  %s: .*\n" % re.escape(key), line, text, flags=re.M)
        if not found:
            text = text.replace("\ndata:\n", "\ndata:\n" + line, 1)
    with open(path, "w") as f:
        f.write(text)
    return None


def kustomize(directory, out):
    """`kubectl kustomize DIRECTORY` written to OUT: (OUT, None), or (None,
    why not)."""
    r = run(["kubectl", "kustomize", directory])
    if r.returncode != 0:
        return None, "kubectl kustomize %s: %s" % (directory, r.stderr.strip()[-500:])
    with open(out, "w") as f:
        f.write(r.stdout)
    return out, None


def resolve(files, registry=None):
    """The resolver's pods for FILES: (pods, None), or (None, its errors:
    one per pod and reference that does not resolve)."""
    extra = ["--registry", registry] if registry else []
    r = run([sys.executable, RESOLVE] + extra + list(files))
    if r.returncode != 0:
        return None, ("; ".join(l for l in r.stderr.splitlines() if l.startswith("pod "))[-1500:] or
                      r.stderr[-500:])
    return json.loads(r.stdout), None


def hosts(files):
    """Every DNS name the headless Services give, to its pod ({} when the
    resolver refuses)."""
    r = run([sys.executable, RESOLVE, "--hosts"] + list(files))
    return json.loads(r.stdout) if r.returncode == 0 else {}
