#!/usr/bin/env python3
"""Runs every shell block of docs/deploy-k8s.md as written, in order, in a
scratch copy of the repository (then those of the README's "Kubernetes"
section, against a cluster and in a copy of their own), with a recording kubectl
(tests/k8s/fake_kubectl.py: each path applied is rendered by the real
kubectl and its pods resolved as the kubelet would) and stand-ins for
docker (tag and push: their arguments checked) and tensorboard. Then every
image of the pods applied after the page's registry line comes from that
registry. Prints PASS:/FAIL: lines; exit 1 when one failed.

Usage: run_doc_blocks.py REPO TMP      (tests/deploy_k8s_test.sh)
"""
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from doc_blocks import Checks, run_page, write_tools  # noqa: E402

REPO, TMP = sys.argv[1], sys.argv[2]
REGISTRY = "registry.example.com/team/"
checks = Checks()


def scratch(name):
    """A scratch copy of what the blocks read and edit, one per page: the
    edits one page makes (its sed lines) are not the next page's."""
    root = os.path.join(TMP, name)
    shutil.copytree(os.path.join(REPO, "deploy"), os.path.join(root, "deploy"))
    shutil.copytree(os.path.join(REPO, "docs"), os.path.join(root, "docs"))
    os.makedirs(os.path.join(root, "data/mnist"))
    open(os.path.join(root, "data/mnist/train-images-idx3-ubyte.gz"), "w").close()
    open(os.path.join(root, "data.npz"), "w").close()
    shutil.copy(os.path.join(REPO, "tests/fixtures/keras/tfjs_plain.json"), os.path.join(root, "model.json"))
    return root

bin_dir = os.path.join(TMP, "doc-blocks-bin")
write_tools(bin_dir, {
    "kubectl": 'exec "%s" "%s" "$@"\n' % (sys.executable, os.path.join(REPO, "tests/k8s/fake_kubectl.py")),
    # docker tag SRC DST, docker push DST: DST in the registry the page names.
    "docker": 'case "$1" in tag|push) [ $# -ge 2 ] && [[ "${@: -1}" == %s* ]] && exit 0 ;; esac\n'
              'echo "fake docker: $*: not a tag or push into %s" >&2; exit 1\n' % (REGISTRY, REGISTRY),
    "tensorboard": '[ "$1" = --logdir ] && [ -d "$2" ] && exit 0; echo "fake tensorboard: $*" >&2; exit 1\n',
})
state = os.path.join(TMP, "doc-blocks-state.json")
env = dict(os.environ, PATH=bin_dir + os.pathsep + os.environ["PATH"], FAKE_KUBE_STATE=state,
           REAL_KUBECTL=shutil.which("kubectl"), KUBELET_RESOLVE=os.path.join(REPO, "tests/k8s/kubelet_resolve.py"))



def run_k8s_page(doc, section, min_blocks, state, root):
    """Every shell block of DOC (its SECTION alone when given), in order,
    against a fresh recording cluster kept in STATE; after the page's
    registry line, every image an `apply -k` brings comes from it."""
    registry_set = [False]

    def images_from_registry(n, block, where):
        if "settings/kustomization.yaml" in block:
            registry_set[0] = True
        elif registry_set[0] and os.path.exists(state) and "apply -k" in block:
            with open(state) as f:
                images = json.load(f)["images"]
            other = [i for i in images if not i.startswith(REGISTRY)]
            checks.report(images and not other, "%s block %d: every pod's image from %s" %
                          (where, n, REGISTRY.rstrip("/")), str(other))

    run_page(checks, REPO, doc, section, min_blocks, root, dict(env, FAKE_KUBE_STATE=state), images_from_registry)


run_k8s_page("docs/deploy-k8s.md", None, 5, state, scratch("doc-blocks"))
run_k8s_page("README.md", "Kubernetes", 1, os.path.join(TMP, "doc-blocks-readme-state.json"),
             scratch("doc-blocks-readme"))
sys.exit(checks.status())
