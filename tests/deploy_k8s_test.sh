#!/usr/bin/env bash
# Checks deploy/k8s without a cluster, as strictly as the kubelet would
# start its pods. Every documented path (the StatefulSets with GPU and with
# CPU workers, your own model, the Kubeflow TFJob, the data loader) is made
# as docs/deploy-k8s.md makes it: `kubectl kustomize` of its folder, with
# the ConfigMaps of `kubectl create configmap` where the docs use it, and
# with a registry, a size (3 ps; 3 workers running of the max_workers the
# docs' sed lists) and chief flags set where deploy/k8s/settings and
# base/kustomization.yaml say. Each is resolved by
# tests/k8s/kubelet_resolve.py (env, envFrom, valueFrom, $(VAR) in args,
# ConfigMap volumes, images), which fails naming the pod and the missing
# key or image, and tests/k8s/check_paths.py checks every pod: its
# TF_CONFIG (made by deploy/docker/entrypoint.sh from the counts, or the
# TFJob operator's) names its own task, every address in it is that task's
# pod by its Service's DNS name (a listed worker beyond the replicas: no
# record until `kubectl scale` makes its pod, then that pod's, no other
# pod's TF_CONFIG changed), the counts follow the replicas and max_workers,
# a pod past max_workers is refused, the settings reach the flags, probes, metrics, volumes and resources fit the
# role, and the built daemons accept what each pod ends with. Then every
# shell block of docs/deploy-k8s.md runs as written, in order, in a scratch
# copy (tests/k8s/run_doc_blocks.py), with a recording kubectl
# (tests/k8s/fake_kubectl.py) that renders each path applied with the real
# kubectl and resolves its pods the same way, and checks every pod a
# command names.
#
# Usage: tests/deploy_k8s_test.sh [MNIST_DIR]   (MNIST is not needed)
# Exit status 0 when every check passed.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/deploy_common.sh"

if [ -z "$PY" ]; then
  fail "python3 with PyYAML (Debian: python3-yaml, in deploy/install_deps.sh) is needed to read the manifests"
elif ! command -v jq >/dev/null 2>&1; then
  fail "jq (in deploy/install_deps.sh) is needed by deploy/docker/entrypoint.sh"
elif ! command -v kubectl >/dev/null 2>&1; then
  fail "kubectl (deploy/install_deps.sh: kubernetes-client, or upstream kubectl) is needed to render deploy/k8s"
elif ! minor="$(kubectl version --client -o json 2>/dev/null | jq -r '.clientVersion.minor' | tr -dc 0-9)" ||
     [ "${minor:-0}" -lt 22 ]; then
  fail "kubectl $(kubectl version --client -o json 2>/dev/null | jq -r .clientVersion.gitVersion) renders no" \
    "kustomize components, replicas or replacements (deploy/k8s needs kubectl 1.22 or newer; Debian 12's" \
    "kubernetes-client is 1.20): install an upstream kubectl"
else
  # The resolver's own tests: each kubelet rule, and each of its refusals.
  if out="$("$PY" "$repo/tests/k8s/kubelet_resolve_test.py" 2>&1)"; then
    pass "tests/k8s/kubelet_resolve_test.py: $(tail -1 <<<"$out")"
  else
    fail "tests/k8s/kubelet_resolve_test.py: $(tail -15 <<<"$out")"
  fi
  run_checks "k8s paths" "$PY" "$repo/tests/k8s/check_paths.py" "$repo" "$tmp"
  # docs/deploy-k8s.md's shell blocks, as written, with a recording kubectl.
  run_checks "docs/deploy-k8s.md's blocks" "$PY" "$repo/tests/k8s/run_doc_blocks.py" "$repo" "$tmp"
fi

echo "deploy_k8s_test: $passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
