#!/usr/bin/env python3
"""Resolve Kubernetes workloads into the pods a kubelet would start.

    tests/k8s/kubelet_resolve.py [--registry PREFIX] [--namespace NS]
        [--node-cpus N] [--node-memory BYTES] [--node-ephemeral-storage BYTES]
        [--hosts] FILE...

FILE... are YAML streams ("-" is stdin): the output of `kubectl kustomize`,
ConfigMaps and Secrets from `kubectl create ... --dry-run=client -o yaml`,
anything else one would `kubectl apply`. Together they are the cluster's
state. Every workload (Pod, StatefulSet, Deployment, Job, DaemonSet and the
Kubeflow TFJob) becomes the pods its controller would create, and every
container of those pods is resolved as the kubelet resolves it before
starting it: its environment (envFrom, env, valueFrom of every kind, $(VAR)
expansion), its argv, its mounts and the files in them, its image and its
effective security context. Whatever would stop the API server from taking
an object, or the kubelet from starting a container, is an error naming the
pod, the container and what is missing.

Output: a JSON list of the resolved pods on stdout (or, with --hosts, a JSON
object mapping every DNS name a headless Service gives a pod to that pod's
name). Exit status 0 when nothing is wrong; 1 when something is, with one
line per error on stderr ("pod NS/NAME container C: message", "pod NS/NAME:
message" for the pod as a whole, "KIND NS/NAME: message" for a workload or a
ConfigMap/Secret the API server would refuse); 2 for a bad flag, an
unreadable file or YAML that does not parse. Warnings (things Kubernetes
lets through but that are likely mistakes) are lines on stderr starting
"warning:"; they do not change the exit status.

Where this program and Kubernetes differ, on purpose:
  * Names the controllers make up at random are stand-ins: a Deployment's,
    DaemonSet's and Job's pods are <name>-<i> (the real ones end in a hash
    and a random suffix); labels that carry hashes (pod-template-hash,
    controller-revision-hash, controller-uid) are left out.
  * The pod's uid, IP and node are fixed fakes (see PodContext).
  * Not modelled: the environment variables the kubelet adds for Services
    (enableServiceLinks, KUBERNETES_SERVICE_HOST...), HOSTNAME (set by the
    container runtime), and the service-account token volume that
    admission adds to every pod.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import copy
import hashlib
import json
import math
import re
import sys
import uuid
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Callable

import yaml

NODE_NAME = "node-0"
HOST_IP = "10.0.0.10"
CLUSTER_DOMAIN = "cluster.local"

WORKLOAD_KINDS = ("Pod", "StatefulSet", "Deployment", "Job", "DaemonSet", "TFJob")
STATE_KINDS = ("ConfigMap", "Secret", "PersistentVolumeClaim", "Service")

# The restart policies the API server accepts in each kind's pod template
# (pkg/apis/apps/validation, pkg/apis/batch/validation); "Always" is what
# the API server defaults an absent one to.
ALLOWED_RESTART_POLICIES = {
    "Pod": ("Always", "OnFailure", "Never"),
    "StatefulSet": ("Always",),
    "Deployment": ("Always",),
    "DaemonSet": ("Always",),
    "Job": ("OnFailure", "Never"),
}


class UsageError(Exception):
    """A bad flag, file or YAML document: exit status 2."""


class Unresolvable(Exception):
    """Something the kubelet (or the API server) would not get past."""


@dataclass
class Report:
    """Errors and warnings, one line each, in the order they were found."""

    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def error(self, where: str, message: str) -> None:
        self.errors.append(f"{where}: {message}")

    def warn(self, where: str, message: str) -> None:
        self.warnings.append(f"warning: {where}: {message}")


@dataclass(frozen=True)
class Node:
    """The allocatable resources of the node every pod runs on."""

    cpu: Fraction
    memory: Fraction
    ephemeral_storage: Fraction


DEFAULT_NODE = Node(cpu=Fraction(16), memory=Fraction(64 * 2**30), ephemeral_storage=Fraction(100 * 2**30))


@dataclass
class State:
    """ConfigMaps, Secrets, PersistentVolumeClaims and Services by
    (kind, namespace, name), as the API server would hold them."""

    objects: dict[tuple[str, str, str], dict] = field(default_factory=dict)

    def get(self, kind: str, namespace: str, name: str) -> dict | None:
        return self.objects.get((kind, namespace, name))


@dataclass
class PodPlan:
    """A pod as its controller creates it (metadata and spec), before the
    kubelet resolves it."""

    kind: str
    workload: str
    pod: dict
    # PersistentVolumeClaims the controller creates along with the pod
    # (a StatefulSet's volumeClaimTemplates).
    claims: set[str] = field(default_factory=set)
    # Services the controller creates for this pod alone (the TFJob
    # operator's one headless Service per pod).
    own_services: list[dict] = field(default_factory=list)

    @property
    def namespace(self) -> str:
        return self.pod["metadata"]["namespace"]

    @property
    def name(self) -> str:
        return self.pod["metadata"]["name"]


# --------------------------------------------------------------------------
# Reading the input


class _KubeYamlLoader(yaml.SafeLoader):
    """PyYAML's safe loader without timestamps: kubectl's YAML decoder
    (sigs.k8s.io/yaml) hands `value: 2024-01-01` to the API server as the
    string it is, where PyYAML would make a date of it."""


_KubeYamlLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def load_documents(paths: list[str], stdin_text: Callable[[], str]) -> list[tuple[str, dict]]:
    """Every non-empty document of every file, with "FILE#N" naming it.

    A document that is not a mapping with a kind and a metadata.name is
    refused, as `kubectl apply` refuses it ("Object 'Kind' is missing")."""
    documents = []
    for path in paths:
        if path == "-":
            text = stdin_text()
        else:
            try:
                with open(path, encoding="utf-8") as f:
                    text = f.read()
            except OSError as e:
                raise UsageError(f"{path}: cannot read: {e.strerror}") from e
        try:
            parsed = list(yaml.load_all(text, Loader=_KubeYamlLoader))
        except yaml.YAMLError as e:
            raise UsageError(f"{path}: not YAML: {e}") from e
        for index, doc in enumerate(parsed):
            where = f"{path}#{index}"
            if doc is None:
                continue
            if not isinstance(doc, dict) or not isinstance(doc.get("kind"), str):
                raise UsageError(f"{where}: not a Kubernetes object (no kind)")
            meta = doc.get("metadata")
            if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not meta["name"]:
                raise UsageError(f"{where}: {doc['kind']} without metadata.name")
            documents.append((where, doc))
    return documents


def namespace_of(obj: dict, default: str) -> str:
    """An object's namespace; `kubectl apply` puts one without it in the
    current namespace (here --namespace)."""
    return obj["metadata"].get("namespace") or default


def where_of(kind: str, namespace: str, name: str) -> str:
    return f"{kind.lower()} {namespace}/{name}"


def build_state(documents: list[tuple[str, dict]], default_namespace: str, report: Report) -> State:
    """The ConfigMaps, Secrets, PVCs and Services, as the API server would
    store them: objects it would refuse are errors and left out, so that pods
    referring to them fail as they would; a later object of the same kind
    and name replaces an earlier one (kubectl apply of both)."""
    state = State()
    for _, doc in documents:
        kind = doc["kind"]
        if kind not in STATE_KINDS:
            continue
        namespace = namespace_of(doc, default_namespace)
        name = doc["metadata"]["name"]
        where = where_of(kind, namespace, name)
        if kind == "ConfigMap":
            problems = configmap_problems(doc)
        elif kind == "Secret":
            problems = secret_problems(doc)
        else:
            problems = []
        for problem in problems:
            report.error(where, problem)
        if problems:
            continue
        if (kind, namespace, name) in state.objects:
            report.warn(where, "defined twice; the later definition replaces the earlier one")
        state.objects[(kind, namespace, name)] = doc
    return state


_CONFIG_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")


def config_key_problem(key: Any) -> str | None:
    """The API server's rule for ConfigMap and Secret keys
    (validation.IsConfigMapKey)."""
    if not isinstance(key, str) or not _CONFIG_KEY.match(key) or len(key) > 253:
        return f"key {key!r} is not a valid key (alphanumerics, '-', '_' or '.')"
    if key in (".", "..") or key.startswith(".."):
        return f"key {key!r} may not be '.' or '..' or start with '..'"
    return None


def configmap_problems(cm: dict) -> list[str]:
    """Why the API server would refuse a ConfigMap: a bad key, a key in both
    data and binaryData, a value that is not a string (`ps_replicas: 0`
    instead of "0": the JSON decoder refuses a number where a string goes),
    binaryData that is not base64."""
    problems = []
    data = cm.get("data") or {}
    binary = cm.get("binaryData") or {}
    for key, value in data.items():
        problems.extend(p for p in [config_key_problem(key)] if p)
        if not isinstance(value, str):
            problems.append(f"data.{key} is {type(value).__name__} {value!r}, not a string "
                            f"(quote it: the API server refuses it)")
    for key, value in binary.items():
        problems.extend(p for p in [config_key_problem(key)] if p)
        if key in data:
            problems.append(f"key {key!r} is in both data and binaryData")
        if not isinstance(value, str) or decode_base64(value) is None:
            problems.append(f"binaryData.{key} is not base64")
    return problems


def secret_problems(secret: dict) -> list[str]:
    """Why the API server would refuse a Secret: a bad key, data that is not
    base64, stringData that is not a string."""
    problems = []
    for key, value in (secret.get("data") or {}).items():
        problems.extend(p for p in [config_key_problem(key)] if p)
        if not isinstance(value, str) or decode_base64(value) is None:
            problems.append(f"data.{key} is not base64")
    for key, value in (secret.get("stringData") or {}).items():
        problems.extend(p for p in [config_key_problem(key)] if p)
        if not isinstance(value, str):
            problems.append(f"stringData.{key} is {type(value).__name__} {value!r}, not a string")
    return problems


def decode_base64(text: str) -> bytes | None:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None


def configmap_data(cm: dict) -> tuple[dict[str, str], dict[str, bytes]]:
    """A ConfigMap's data (text) and binaryData (bytes)."""
    binary = {k: decode_base64(v) or b"" for k, v in (cm.get("binaryData") or {}).items()}
    return dict(cm.get("data") or {}), binary


def secret_data(secret: dict) -> dict[str, bytes]:
    """A Secret's data as the API server stores it: base64 `data` decoded,
    `stringData` merged over it (stringData wins, and is write-only)."""
    data = {k: decode_base64(v) or b"" for k, v in (secret.get("data") or {}).items()}
    data.update({k: v.encode() for k, v in (secret.get("stringData") or {}).items()})
    return data


# --------------------------------------------------------------------------
# Quantities (k8s.io/apimachinery/pkg/api/resource)

_QUANTITY = re.compile(r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))([eE][+-]?[0-9]+|Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?$")
_SUFFIX = {
    "Ki": Fraction(2**10), "Mi": Fraction(2**20), "Gi": Fraction(2**30),
    "Ti": Fraction(2**40), "Pi": Fraction(2**50), "Ei": Fraction(2**60),
    "n": Fraction(1, 10**9), "u": Fraction(1, 10**6), "m": Fraction(1, 1000), "": Fraction(1),
    "k": Fraction(10**3), "M": Fraction(10**6), "G": Fraction(10**9),
    "T": Fraction(10**12), "P": Fraction(10**15), "E": Fraction(10**18),
}


def parse_quantity(value: Any) -> Fraction:
    """A Kubernetes quantity ("500m", "2", "1Gi", "1e3", "1k", or a YAML
    number) as an exact fraction; Unresolvable when the API server would
    refuse it ("quantities must match the regular expression ...")."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise Unresolvable(f"{value!r} is not a quantity")
    text = str(value)
    match = _QUANTITY.match(text)
    if not match:
        raise Unresolvable(f"{text!r} is not a quantity (e.g. 500m, 2, 1.5, 512Mi, 1Gi, 1e3)")
    number, suffix = match.group(1), match.group(2) or ""
    if suffix[:1] in ("e", "E") and len(suffix) > 1:
        scale = Fraction(10) ** int(suffix[1:])
    else:
        scale = _SUFFIX[suffix]
    return Fraction(number) * scale


def ceil_value(q: Fraction) -> int:
    """resource.Quantity.Value(): the quantity rounded up to an integer."""
    return math.ceil(q)


def ceil_milli_value(q: Fraction) -> int:
    """resource.Quantity.MilliValue(): thousandths, rounded up."""
    return math.ceil(q * 1000)


# --------------------------------------------------------------------------
# $(VAR) expansion (third_party/forked/golang/expansion/expand.go)


def expand(text: str, env: dict[str, str], undefined: list[str] | None = None) -> str:
    """Expand $(VAR) in `text` as the kubelet does for env values, command
    and args: $(NAME) becomes NAME's value; $$ is a literal $; a $(NAME)
    whose NAME is not defined stays as written (and is added to
    `undefined`); "$(" without ")" and "$" before anything else stay too."""
    out = []
    i = 0
    while i < len(text):
        if text[i] == "$" and i + 1 < len(text):
            following = text[i + 1]
            if following == "$":
                out.append("$")
                i += 2
                continue
            if following == "(":
                close = text.find(")", i + 2)
                if close == -1:
                    out.append("$(")
                    i += 2
                    continue
                name = text[i + 2:close]
                if name in env:
                    out.append(env[name])
                else:
                    out.append(text[i:close + 1])
                    if undefined is not None:
                        undefined.append(name)
                i = close + 1
                continue
            out.append("$" + following)
            i += 2
            continue
        out.append(text[i])
        i += 1
    return "".join(out)


# --------------------------------------------------------------------------
# Workloads -> pods (the controllers)


def check_string_map(where: str, what: str, mapping: Any, report: Report) -> dict[str, str]:
    """Labels and annotations: every value must be a string (`prometheus.io/
    scrape: true` unquoted is refused by the API server's JSON decoder)."""
    if mapping is None:
        return {}
    if not isinstance(mapping, dict):
        report.error(where, f"{what} is not a mapping")
        return {}
    for key, value in mapping.items():
        if not isinstance(value, str):
            report.error(where, f"{what}[{key!r}] is {type(value).__name__} {value!r}, not a string "
                                f"(quote it: the API server refuses it)")
    return {str(k): str(v) for k, v in mapping.items()}


def selector_matches(selector: dict, labels: dict[str, str]) -> list[str]:
    """The terms of a LabelSelector that `labels` do not satisfy
    (matchLabels, and matchExpressions with In, NotIn, Exists,
    DoesNotExist); empty when they match."""
    unmet = [f"{k}={v}" for k, v in (selector.get("matchLabels") or {}).items() if labels.get(k) != str(v)]
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), [str(v) for v in expr.get("values") or []]
        ok = {
            "In": key in labels and labels[key] in values,
            "NotIn": key not in labels or labels[key] not in values,
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }.get(op, False)
        if not ok:
            unmet.append(f"{key} {op} {values}" if values else f"{key} {op}")
    return unmet


def check_workload_selector(where: str, kind: str, spec: dict, labels: dict[str, str], report: Report) -> None:
    """spec.selector must select the template's labels, else the API server
    refuses the workload ("selector does not match template labels"); apps/v1
    kinds must have a non-empty one."""
    selector = spec.get("selector")
    if not selector:
        if kind in ("StatefulSet", "Deployment", "DaemonSet"):
            report.error(where, "spec.selector is required (apps/v1) and must not be empty")
        return
    unmet = selector_matches(selector, labels)
    if unmet:
        report.error(where, f"spec.selector does not match the template's labels: {', '.join(unmet)} "
                            f"(labels: {json.dumps(labels, sort_keys=True)})")


def restart_policy_of(where: str, kind: str, spec: dict, report: Report) -> str:
    """The pod's restartPolicy (defaulted to Always), checked against what
    the API server accepts for this kind of workload."""
    policy = spec.get("restartPolicy") or "Always"
    allowed = ALLOWED_RESTART_POLICIES[kind]
    if policy not in allowed:
        report.error(where, f"spec.template.spec.restartPolicy {policy!r} is not allowed "
                            f"for a {kind} (allowed: {', '.join(allowed)})")
    return policy


def count_of(where: str, what: str, spec: dict, key: str, default: int, report: Report) -> int:
    """An integer field of a workload (replicas, parallelism, ...): the API
    server refuses one that is not a non-negative integer."""
    value = spec.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        report.error(where, f"{what}.{key} is {value!r}, not a non-negative integer")
        return 0
    return value


def make_pod(name: str, namespace: str, template: dict, labels: dict[str, str], annotations: dict[str, str],
             restart_policy: str, hostname: str | None = None, subdomain: str | None = None) -> dict:
    """A Pod object from a pod template, as a controller creates it."""
    spec = copy.deepcopy(template.get("spec") or {})
    spec["restartPolicy"] = restart_policy
    if hostname is not None:
        spec["hostname"] = hostname
    if subdomain is not None:
        spec["subdomain"] = subdomain
    return {"metadata": {"name": name, "namespace": namespace, "labels": labels, "annotations": annotations},
            "spec": spec}


def template_of(where: str, workload: dict, report: Report) -> tuple[dict, dict[str, str], dict[str, str]]:
    """A workload's pod template with its labels and annotations checked."""
    template = (workload.get("spec") or {}).get("template") or {}
    meta = template.get("metadata") or {}
    labels = check_string_map(where, "spec.template.metadata.labels", meta.get("labels"), report)
    annotations = check_string_map(where, "spec.template.metadata.annotations", meta.get("annotations"), report)
    return template, labels, annotations


def pods_of_pod(doc: dict, namespace: str, report: Report) -> list[PodPlan]:
    """A Pod is its own pod."""
    name = doc["metadata"]["name"]
    where = where_of("Pod", namespace, name)
    labels = check_string_map(where, "metadata.labels", doc["metadata"].get("labels"), report)
    annotations = check_string_map(where, "metadata.annotations", doc["metadata"].get("annotations"), report)
    spec = doc.get("spec") or {}
    policy = restart_policy_of(where, "Pod", spec, report)
    return [PodPlan("Pod", name, make_pod(name, namespace, {"spec": spec}, labels, annotations, policy))]


def workload_of(kind: str, doc: dict, namespace: str, report: Report) -> tuple:
    """What every controller reads first: (name, where, spec, template,
    labels, annotations, restart policy), the selector and the restart policy
    checked as the API server checks them."""
    name = doc["metadata"]["name"]
    where = where_of(kind, namespace, name)
    spec = doc.get("spec") or {}
    template, labels, annotations = template_of(where, doc, report)
    check_workload_selector(where, kind, spec, labels, report)
    policy = restart_policy_of(where, kind, template.get("spec") or {}, report)
    return name, where, spec, template, labels, annotations, policy


def pods_of_statefulset(doc: dict, namespace: str, report: Report) -> list[PodPlan]:
    """A StatefulSet's pods (pkg/controller/statefulset, newStatefulSetPod):
    <sts>-<ordinal> for ordinals from spec.ordinals.start (default 0),
    spec.replicas of them (default 1), hostname the pod's name, subdomain
    spec.serviceName, the labels statefulset.kubernetes.io/pod-name and
    apps.kubernetes.io/pod-index (Kubernetes 1.28+) added, and one PVC per
    volumeClaimTemplate (<template>-<pod>) created and mounted as the
    volume named after the template."""
    name, where, spec, template, labels, annotations, policy = workload_of("StatefulSet", doc, namespace, report)
    replicas = count_of(where, "spec", spec, "replicas", 1, report)
    start = count_of(where, "spec.ordinals", spec.get("ordinals") or {}, "start", 0, report)
    plans = []
    for ordinal in range(start, start + replicas):
        pod_name = f"{name}-{ordinal}"
        pod_labels = dict(labels, **{"statefulset.kubernetes.io/pod-name": pod_name,
                                     "apps.kubernetes.io/pod-index": str(ordinal)})
        pod = make_pod(pod_name, namespace, template, pod_labels, dict(annotations), policy,
                       hostname=pod_name, subdomain=spec.get("serviceName") or None)
        claims = set()
        for claim_template in spec.get("volumeClaimTemplates") or []:
            volume_name = (claim_template.get("metadata") or {}).get("name")
            claim = f"{volume_name}-{pod_name}"
            claims.add(claim)
            volumes = [v for v in pod["spec"].get("volumes") or [] if v.get("name") != volume_name]
            volumes.append({"name": volume_name, "persistentVolumeClaim": {"claimName": claim}})
            pod["spec"]["volumes"] = volumes
        plans.append(PodPlan("StatefulSet", name, pod, claims=claims))
    return plans


def pods_of_replicated(kind: str, doc: dict, namespace: str, report: Report) -> list[PodPlan]:
    """A Deployment's spec.replicas pods (default 1) and a DaemonSet's one
    pod (one node). Their names are stand-ins: <name>-<i> where the
    controllers add a template hash and a random suffix."""
    name, where, spec, template, labels, annotations, policy = workload_of(kind, doc, namespace, report)
    count = count_of(where, "spec", spec, "replicas", 1, report) if kind == "Deployment" else 1
    return [PodPlan(kind, name, make_pod(f"{name}-{i}", namespace, template, dict(labels), dict(annotations), policy))
            for i in range(count)]


def pods_of_job(doc: dict, namespace: str, report: Report) -> list[PodPlan]:
    """A Job's first wave of pods: spec.parallelism of them (default 1, at
    most spec.completions), named <job>-<i> (a stand-in: the controller adds
    a random suffix), labelled batch.kubernetes.io/job-name and job-name.
    An Indexed Job's pod i also gets the annotation and label
    batch.kubernetes.io/job-completion-index, hostname <job>-<i>, and, in
    every container without one, the env var JOB_COMPLETION_INDEX read from
    that annotation (pkg/controller/job, addCompletionIndexEnvVariables)."""
    name, where, spec, template, labels, annotations, policy = workload_of("Job", doc, namespace, report)
    count = count_of(where, "spec", spec, "parallelism", 1, report)
    if spec.get("completions") is not None:
        count = min(count, count_of(where, "spec", spec, "completions", 1, report))
    indexed = spec.get("completionMode") == "Indexed"
    index_key = "batch.kubernetes.io/job-completion-index"
    plans = []
    for i in range(count):
        pod_labels = dict(labels, **{"batch.kubernetes.io/job-name": name, "job-name": name})
        pod_annotations = dict(annotations)
        hostname = None
        if indexed:
            pod_labels[index_key] = pod_annotations[index_key] = str(i)
            hostname = f"{name}-{i}"
        pod = make_pod(f"{name}-{i}", namespace, template, pod_labels, pod_annotations, policy, hostname=hostname)
        if indexed:
            for c in (pod["spec"].get("initContainers") or []) + (pod["spec"].get("containers") or []):
                env = c.setdefault("env", [])
                if not any(e.get("name") == "JOB_COMPLETION_INDEX" for e in env):
                    env.append({"name": "JOB_COMPLETION_INDEX",
                                "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{index_key}']"}}})
        plans.append(PodPlan("Job", name, pod))
    return plans


# The Kubeflow training-operator (kubeflow.org/v1 TFJob). References are to
# github.com/kubeflow/training-operator, release-1.9; the same holds from
# tf-operator v1.1 on.
TFJOB_CONTAINER = "tensorflow"
TFJOB_PORT_NAME = "tfjob-port"
TFJOB_DEFAULT_PORT = 2222
TFJOB_TYPES = ("Chief", "Master", "PS", "Worker", "Evaluator")
TFJOB_RESTART_POLICIES = ("Always", "OnFailure", "Never", "ExitCode")
_DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def tfjob_replica_specs(where: str, job: dict, report: Report) -> dict[str, dict]:
    """spec.tfReplicaSpecs as the operator's defaulter leaves them
    (tensorflow_defaults.go): type names in their canonical case ("ps" ->
    "PS"), replicas 1, restartPolicy Never, and a port named tfjob-port
    (2222) on the container named tensorflow when it has none. The
    validating webhook (tfjob_webhook.go) refuses a job whose name is not a
    DNS-1035 label, a replica type without a container named tensorflow, a
    container without an image, or more than one Chief/Master."""
    if not _DNS1035_LABEL.match(job["metadata"]["name"]) or len(job["metadata"]["name"]) > 63:
        report.error(where, "metadata.name must be a DNS-1035 label (lowercase letters, digits, '-'; "
                            "starting with a letter) for the operator's webhook")
    specs = {}
    for rtype, rspec in ((job.get("spec") or {}).get("tfReplicaSpecs") or {}).items():
        canonical = next((t for t in TFJOB_TYPES if t.lower() == str(rtype).lower()), str(rtype))
        rspec = copy.deepcopy(rspec or {})
        rspec["replicas"] = count_of(where, f"tfReplicaSpecs.{rtype}", rspec, "replicas", 1, report)
        rspec["restartPolicy"] = rspec.get("restartPolicy") or "Never"
        if rspec["restartPolicy"] not in TFJOB_RESTART_POLICIES:
            report.error(where, f"tfReplicaSpecs.{rtype}.restartPolicy {rspec['restartPolicy']!r} is not one of "
                                f"{', '.join(TFJOB_RESTART_POLICIES)}")
        containers = ((rspec.setdefault("template", {}).setdefault("spec", {})).get("containers") or [])
        main = [c for c in containers if c.get("name") == TFJOB_CONTAINER]
        if not main:
            report.error(where, f"tfReplicaSpecs.{rtype} has no container named {TFJOB_CONTAINER!r} "
                                f"(the operator's webhook refuses it)")
        elif not any(p.get("name") == TFJOB_PORT_NAME for p in main[0].get("ports") or []):
            main[0].setdefault("ports", []).append({"name": TFJOB_PORT_NAME, "containerPort": TFJOB_DEFAULT_PORT})
        for c in containers:
            if not c.get("image"):
                report.error(where, f"tfReplicaSpecs.{rtype} container {c.get('name')!r} has no image")
        specs[canonical] = rspec
    if sum(1 for t in specs if t in ("Chief", "Master")) > 1:
        report.error(where, "more than one Chief or Master replica type")
    return specs


def tfjob_port(rspec: dict) -> int:
    """The port of a replica type in TF_CONFIG: the containerPort named
    tfjob-port of the container named tensorflow (GetPortFromTFJob)."""
    for c in rspec["template"]["spec"].get("containers") or []:
        if c.get("name") == TFJOB_CONTAINER:
            for p in c.get("ports") or []:
                if p.get("name") == TFJOB_PORT_NAME:
                    return p["containerPort"]
    return TFJOB_DEFAULT_PORT


def tfjob_tf_config(job: str, namespace: str, specs: dict[str, dict], rtype: str, index: int) -> str:
    """The TF_CONFIG the operator gives replica `index` of `rtype`
    (genTFConfigJSONStr, genClusterSpec): every replica type, the evaluator
    included, lists <job>-<type>-<i>.<namespace>.svc:<port> (only
    tf-operator v1.0 and older left the evaluator out, commit c18fb32
    "Fix evaluator runconfig"); task is this replica; environment "cloud".
    Go's json.Marshal: compact, map keys sorted, struct fields in order."""
    cluster = {
        t.lower(): [f"{job}-{t.lower()}-{i}.{namespace}.svc:{tfjob_port(s)}" for i in range(s["replicas"])]
        for t, s in specs.items()
    }
    config = {"cluster": dict(sorted(cluster.items())), "task": {"type": rtype.lower(), "index": index},
              "environment": "cloud"}
    return json.dumps(config, separators=(",", ":"))


def pods_of_tfjob(doc: dict, namespace: str, report: Report) -> list[PodPlan]:
    """A TFJob's pods (pkg/controller.v1/common/pod.go, createNewPod, and
    tensorflow/tfjob_controller.go, SetClusterSpec): per replica type,
    `replicas` pods <job>-<type lowercased>-<i> with the template's labels
    plus the operator's (training.kubeflow.org/operator-name, job-name,
    replica-type, replica-index, and job-role=master for the Chief/Master,
    or worker 0 when there is neither); restartPolicy the replica spec's
    (ExitCode becomes Never on the pod). When the job has more than one
    replica in all, the operator APPENDS TF_CONFIG to the env of the
    container named tensorflow: it comes after the container's own env, so
    it wins over a TF_CONFIG the template sets (the kubelet keeps the last).
    Each pod also gets a headless Service named like the pod, selecting it
    by those labels, without publishNotReadyAddresses."""
    job = doc["metadata"]["name"]
    where = where_of("TFJob", namespace, job)
    specs = tfjob_replica_specs(where, doc, report)
    distributed = sum(s["replicas"] for t, s in specs.items() if t in TFJOB_TYPES) != 1
    has_chief = any(t in ("Chief", "Master") for t in specs)
    plans = []
    for rtype, rspec in specs.items():
        template = rspec["template"]
        meta = template.get("metadata") or {}
        labels = check_string_map(where, f"tfReplicaSpecs.{rtype}.template.metadata.labels", meta.get("labels"), report)
        annotations = check_string_map(where, f"tfReplicaSpecs.{rtype}.template.metadata.annotations",
                                       meta.get("annotations"), report)
        rt = rtype.lower()
        policy = "Never" if rspec["restartPolicy"] == "ExitCode" else rspec["restartPolicy"]
        for i in range(rspec["replicas"]):
            pod_name = f"{job}-{rt}-{i}"
            selector = {"training.kubeflow.org/operator-name": "tfjob-controller",
                        "training.kubeflow.org/job-name": job,
                        "training.kubeflow.org/replica-type": rt,
                        "training.kubeflow.org/replica-index": str(i)}
            pod_labels = dict(labels, **selector)
            if (rtype in ("Chief", "Master")) if has_chief else (rtype == "Worker" and i == 0):
                pod_labels["training.kubeflow.org/job-role"] = "master"
            pod = make_pod(pod_name, namespace, template, pod_labels, dict(annotations), policy)
            if distributed:
                for c in pod["spec"].get("containers") or []:
                    if c.get("name") == TFJOB_CONTAINER:
                        c.setdefault("env", []).append(
                            {"name": "TF_CONFIG", "value": tfjob_tf_config(job, namespace, specs, rtype, i)})
                        break
            service = {"name": pod_name, "publishNotReadyAddresses": False}
            plans.append(PodPlan("TFJob", job, pod, own_services=[service]))
    return plans


def plans_of(documents: list[tuple[str, dict]], default_namespace: str, report: Report) -> list[PodPlan]:
    """The pods of every workload, in the order of the input. Other kinds
    (ReplicaSet, CronJob, other operators' jobs) are not expanded."""
    plans = []
    for _, doc in documents:
        kind = doc["kind"]
        if kind not in WORKLOAD_KINDS:
            continue
        namespace = namespace_of(doc, default_namespace)
        if kind == "TFJob":
            if doc.get("apiVersion") != "kubeflow.org/v1":
                report.warn(where_of(kind, namespace, doc["metadata"]["name"]),
                            f"apiVersion {doc.get('apiVersion')!r} is not kubeflow.org/v1; not expanded")
                continue
            plans.extend(pods_of_tfjob(doc, namespace, report))
        elif kind == "Pod":
            plans.extend(pods_of_pod(doc, namespace, report))
        elif kind == "StatefulSet":
            plans.extend(pods_of_statefulset(doc, namespace, report))
        elif kind == "Job":
            plans.extend(pods_of_job(doc, namespace, report))
        else:
            plans.extend(pods_of_replicated(kind, doc, namespace, report))
    seen = set()
    for plan in plans:
        key = (plan.namespace, plan.name)
        if key in seen:
            report.error(f"pod {plan.namespace}/{plan.name}", "two workloads make a pod of this name")
        seen.add(key)
    return plans


# --------------------------------------------------------------------------
# The kubelet, per pod


@dataclass
class PodContext:
    """What the kubelet knows of a pod while it resolves its containers.
    The uid and the pod IP are fakes derived from the pod's namespace and
    name (stable from run to run); the node is NODE_NAME at HOST_IP."""

    plan: PodPlan
    state: State
    node: Node
    labels: dict[str, str]
    annotations: dict[str, str]

    @property
    def spec(self) -> dict:
        return self.plan.pod["spec"]

    @property
    def where(self) -> str:
        return f"pod {self.plan.namespace}/{self.plan.name}"

    @property
    def uid(self) -> str:
        return str(uuid.uuid5(uuid.NAMESPACE_URL, f"pod/{self.plan.namespace}/{self.plan.name}"))

    @property
    def pod_ip(self) -> str:
        digest = hashlib.sha256(f"{self.plan.namespace}/{self.plan.name}".encode()).digest()
        return f"10.244.{digest[0]}.{1 + digest[1] % 254}"

    @property
    def service_account(self) -> str:
        """spec.serviceAccountName, defaulted from the deprecated
        serviceAccount, else "default" (the ServiceAccount admission)."""
        return self.spec.get("serviceAccountName") or self.spec.get("serviceAccount") or "default"

    def all_containers(self) -> list[dict]:
        return (self.spec.get("initContainers") or []) + (self.spec.get("containers") or [])


_SUBSCRIPTED = re.compile(r"^(metadata\.(?:labels|annotations))\['(.*)'\]$")
ENV_FIELD_PATHS = ("metadata.name", "metadata.namespace", "metadata.uid", "spec.nodeName",
                   "spec.serviceAccountName", "status.hostIP", "status.hostIPs", "status.podIP", "status.podIPs")
VOLUME_FIELD_PATHS = ("metadata.name", "metadata.namespace", "metadata.uid", "metadata.labels",
                      "metadata.annotations")


def go_quote(text: str) -> str:
    """Go's %q for the printable text labels and annotations hold."""
    return json.dumps(text, ensure_ascii=False)


def field_ref_value(ref: dict, ctx: PodContext, allowed: tuple[str, ...]) -> str:
    """A downward API fieldRef (kubelet podFieldSelectorRuntimeValue,
    pkg/fieldpath ExtractFieldPathAsString). `allowed` is the API server's
    list for the context: env vars accept metadata.name/namespace/uid,
    metadata.labels['k'], metadata.annotations['k'], spec.nodeName,
    spec.serviceAccountName and status.hostIP(s)/podIP(s); volumes accept the
    metadata ones and also the whole metadata.labels/annotations (one
    k="v" line per key, sorted). An absent label or annotation is ""."""
    path = ref.get("fieldPath")
    subscripted = _SUBSCRIPTED.match(path or "")
    if subscripted:
        source = ctx.labels if subscripted.group(1) == "metadata.labels" else ctx.annotations
        return source.get(subscripted.group(2), "")
    if path not in allowed:
        raise Unresolvable(f"fieldRef: fieldPath {path!r} is not supported here (supported: "
                           f"{', '.join(allowed)}, metadata.labels['KEY'], metadata.annotations['KEY'])")
    values = {
        "metadata.name": ctx.plan.name,
        "metadata.namespace": ctx.plan.namespace,
        "metadata.uid": ctx.uid,
        "metadata.labels": "\n".join(f"{k}={go_quote(v)}" for k, v in sorted(ctx.labels.items())),
        "metadata.annotations": "\n".join(f"{k}={go_quote(v)}" for k, v in sorted(ctx.annotations.items())),
        "spec.nodeName": NODE_NAME,
        "spec.serviceAccountName": ctx.service_account,
        "status.hostIP": HOST_IP,
        "status.hostIPs": HOST_IP,
        "status.podIP": ctx.pod_ip,
        "status.podIPs": ctx.pod_ip,
    }
    return values[path]


RESOURCE_FIELDS = ("limits.cpu", "requests.cpu", "limits.memory", "requests.memory",
                   "limits.ephemeral-storage", "requests.ephemeral-storage")
_CPU_DIVISORS = (Fraction(1), Fraction(1, 1000))
_BYTE_DIVISORS = tuple([Fraction(1)] + [Fraction(10 ** (3 * i)) for i in range(1, 7)]
                       + [Fraction(2 ** (10 * i)) for i in range(1, 7)])


def resource_field_value(ref: dict, ctx: PodContext, container: dict | None) -> str:
    """A downward API resourceFieldRef (pkg/api/v1/resource,
    ExtractContainerResourceValue, and the kubelet's
    defaultPodLimitsForDownwardAPI): the container named by containerName
    (in env it defaults to `container`, the one being resolved; a volume
    passes None: there containerName is required), the resource, and
    ceil(value / divisor) -- CPU in thousandths
    (MilliValue), bytes as integers (Value), the division in float64 as Go
    does it. A limit that is not set (or is 0) is the node's allocatable
    amount; a request that is not set is the limit as written (the API
    server defaults requests to limits), else 0. Divisors are the API
    server's: 1 or 1m for cpu, 1, 1k..1E, 1Ki..1Ei for bytes."""
    name = ref.get("containerName")
    if name:
        matches = [c for c in ctx.all_containers() if c.get("name") == name]
        if not matches:
            raise Unresolvable(f"resourceFieldRef: container {name!r} not found in the pod")
        container = matches[0]
    elif container is None:
        raise Unresolvable("resourceFieldRef: containerName is required in a volume")
    resource = ref.get("resource")
    if resource not in RESOURCE_FIELDS:
        raise Unresolvable(f"resourceFieldRef: unsupported resource {resource!r} "
                           f"(supported: {', '.join(RESOURCE_FIELDS)})")
    kind, res = resource.split(".", 1)
    divisor = parse_quantity(ref.get("divisor", "1")) or Fraction(1)
    if divisor not in (_CPU_DIVISORS if res == "cpu" else _BYTE_DIVISORS):
        raise Unresolvable(f"resourceFieldRef: divisor {ref.get('divisor')!r} is not allowed for {resource} "
                           f"(cpu: 1 or 1m; memory and storage: 1, 1k, 1M, ..., 1Ki, 1Mi, ...)")
    resources = container.get("resources") or {}
    limit = (resources.get("limits") or {}).get(res)
    if kind == "limits":
        value = parse_quantity(limit) if limit is not None else Fraction(0)
        if value == 0:
            value = {"cpu": ctx.node.cpu, "memory": ctx.node.memory,
                     "ephemeral-storage": ctx.node.ephemeral_storage}[res]
    else:
        request = (resources.get("requests") or {}).get(res, limit)
        value = parse_quantity(request) if request is not None else Fraction(0)
    if res == "cpu":
        return str(math.ceil(float(ceil_milli_value(value)) / float(ceil_milli_value(divisor))))
    return str(math.ceil(float(ceil_value(value)) / float(ceil_value(divisor))))


def optional_of(ref: dict) -> bool:
    return ref.get("optional") is True


def configmap_key_value(ref: dict, ctx: PodContext) -> str | None:
    """valueFrom.configMapKeyRef: the key's value in `data` (binaryData does
    not count). A missing ConfigMap or key stops the container
    (CreateContainerConfigError) unless optional, when the variable is not
    set at all (None)."""
    cm = ctx.state.get("ConfigMap", ctx.plan.namespace, ref.get("name"))
    optional = optional_of(ref)
    if cm is None:
        if optional:
            return None
        raise Unresolvable(f"ConfigMap {ref.get('name')} not found in namespace {ctx.plan.namespace} (not optional)")
    data, _ = configmap_data(cm)
    if ref.get("key") not in data:
        if optional:
            return None
        raise Unresolvable(f"ConfigMap {ref.get('name')} has no key {ref.get('key')} (not optional)")
    return data[ref["key"]]


def secret_key_value(ref: dict, ctx: PodContext) -> str | None:
    """valueFrom.secretKeyRef: as configMapKeyRef, from the Secret's decoded
    data (bytes that are not UTF-8 are shown with U+FFFD)."""
    secret = ctx.state.get("Secret", ctx.plan.namespace, ref.get("name"))
    optional = optional_of(ref)
    if secret is None:
        if optional:
            return None
        raise Unresolvable(f"Secret {ref.get('name')} not found in namespace {ctx.plan.namespace} (not optional)")
    data = secret_data(secret)
    if ref.get("key") not in data:
        if optional:
            return None
        raise Unresolvable(f"Secret {ref.get('name')} has no key {ref.get('key')} (not optional)")
    return data[ref["key"]].decode("utf-8", errors="replace")


_STRICT_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")


def env_name_problem(name: str) -> tuple[str | None, str | None]:
    """(error, warning) for an env var name. Every API server refuses an
    empty name or one with '=' or a character that is not printable ASCII;
    before Kubernetes 1.32 (RelaxedEnvironmentVariableValidation off) it
    also refuses one that is not [-._a-zA-Z][-._a-zA-Z0-9]*."""
    if not name or any(ch == "=" or not (" " <= ch <= "~") for ch in name):
        return f"{name!r} is not a valid environment variable name", None
    if not _STRICT_ENV_NAME.match(name) or name in (".", "..") or name.startswith(".."):
        return None, (f"{name!r} is not a [-._a-zA-Z][-._a-zA-Z0-9]* name: "
                      f"API servers before 1.32 refuse it")
    return None, None


def env_from_source(source: dict, ctx: PodContext, env: dict[str, str], where: str, report: Report) -> None:
    """One envFrom entry (kubelet makeEnvironmentVariables): every key of the
    ConfigMap's data or the Secret's data, with `prefix` in front, into
    `env`. A missing object that is not optional: error. Keys that are not
    valid [-._a-zA-Z][-._a-zA-Z0-9]* names after the prefix are skipped with
    a warning, as kubelets up to 1.29 skip them (with an
    InvalidEnvironmentVariableNames event); 1.30 and later pass them on."""
    refs = [k for k in ("configMapRef", "secretRef") if source.get(k)]
    if len(refs) != 1:
        report.error(where, "envFrom entry must have exactly one of configMapRef and secretRef")
        return
    ref = source[refs[0]]
    kind = "ConfigMap" if refs[0] == "configMapRef" else "Secret"
    obj = ctx.state.get(kind, ctx.plan.namespace, ref.get("name"))
    if obj is None:
        if not optional_of(ref):
            report.error(where, f"envFrom: {kind} {ref.get('name')} not found in namespace "
                                f"{ctx.plan.namespace} (not optional)")
        return
    if kind == "ConfigMap":
        items = configmap_data(obj)[0]
    else:
        items = {k: v.decode("utf-8", errors="replace") for k, v in secret_data(obj).items()}
    prefix = source.get("prefix") or ""
    for key, value in items.items():
        name = prefix + key
        if not _STRICT_ENV_NAME.match(name):
            report.warn(where, f"envFrom {kind} {ref.get('name')}: key {key!r} gives {name!r}, not a valid "
                               f"environment variable name: skipped (as kubelets before 1.30 do; "
                               f"1.30 and later pass it on)")
            continue
        env[name] = value


def env_entry_value(entry: dict, ctx: PodContext, container: dict, env: dict[str, str]) -> str | None:
    """The value of one env entry (kubelet makeEnvironmentVariables): a
    non-empty `value` has $(VAR) expanded with the variables defined so far;
    else valueFrom (exactly one source) is resolved; else "". None: an
    optional reference that is missing, so the variable is left unset."""
    value = entry.get("value")
    if value is not None and not isinstance(value, str):
        raise Unresolvable(f"value is {type(value).__name__} {value!r}, not a string "
                           f"(quote it: the API server refuses it)")
    source = entry.get("valueFrom")
    if value and source is not None:
        raise Unresolvable("value and valueFrom are both set (the API server refuses it)")
    if value:
        return expand(value, env)
    if source is None:
        return ""
    kinds = [k for k in ("fieldRef", "resourceFieldRef", "configMapKeyRef", "secretKeyRef") if source.get(k)]
    if len(kinds) != 1:
        raise Unresolvable("valueFrom must have exactly one of fieldRef, resourceFieldRef, "
                           "configMapKeyRef, secretKeyRef")
    kind = kinds[0]
    if kind == "fieldRef":
        return field_ref_value(source[kind], ctx, ENV_FIELD_PATHS)
    if kind == "resourceFieldRef":
        return resource_field_value(source[kind], ctx, container)
    if kind == "configMapKeyRef":
        return configmap_key_value(source[kind], ctx)
    return secret_key_value(source[kind], ctx)


def resolve_env(container: dict, ctx: PodContext, where: str, report: Report) -> tuple[dict[str, str], set[str]]:
    """A container's environment: envFrom entries in order, then env entries
    in order, a later definition of a name replacing an earlier one (the
    API server warns that it "hides previous definition"). Also returns the
    names whose entries were errors (already reported)."""
    env: dict[str, str] = {}
    failed: set[str] = set()
    for source in container.get("envFrom") or []:
        env_from_source(source, ctx, env, where, report)
    declared = set()
    for entry in container.get("env") or []:
        name = entry.get("name") or ""
        error, warning = env_name_problem(name)
        if error:
            report.error(where, f"env {error}")
            continue
        if warning:
            report.warn(where, f"env {warning}")
        if name in declared:
            report.warn(where, f"env {name} is defined twice; the later definition wins")
        declared.add(name)
        try:
            value = env_entry_value(entry, ctx, container, env)
        except Unresolvable as e:
            report.error(where, f"env {name}: {e}")
            failed.add(name)
            continue
        if value is not None:
            env[name] = value
    return env, failed


def expand_list(what: str, items: Any, env: dict[str, str], failed: set[str], where: str,
                report: Report) -> list[str] | None:
    """command or args with $(VAR) expanded from the final environment
    (kubecontainer.ExpandContainerCommandAndArgs). Each item must be a
    string (the API server refuses `- 2222` unquoted). A $(VAR) left as
    written because VAR is undefined is legal but almost always a mistake:
    a warning (unless VAR's own entry was an error, reported already)."""
    if items is None:
        return None
    if not isinstance(items, list):
        report.error(where, f"{what} is not a list")
        return None
    out = []
    for i, item in enumerate(items):
        if not isinstance(item, str):
            report.error(where, f"{what}[{i}] is {type(item).__name__} {item!r}, not a string "
                                f"(quote it: the API server refuses it)")
            item = str(item)
        undefined: list[str] = []
        out.append(expand(item, env, undefined))
        for name in undefined:
            if name not in failed:
                report.warn(where, f"{what}[{i}] {item!r}: $({name}) is not defined, passed on as written")
    return out


def check_resources(container: dict, where: str, report: Report) -> None:
    """requests and limits: every value a quantity, and no request above its
    limit (the API server: "must be less than or equal to ... limit")."""
    resources = container.get("resources") or {}
    parsed: dict[str, dict[str, Fraction]] = {}
    for kind in ("requests", "limits"):
        parsed[kind] = {}
        for res, value in (resources.get(kind) or {}).items():
            try:
                parsed[kind][res] = parse_quantity(value)
            except Unresolvable as e:
                report.error(where, f"resources.{kind}.{res}: {e}")
    for res, request in parsed["requests"].items():
        limit = parsed["limits"].get(res)
        if limit is not None and request > limit:
            report.error(where, f"resources.requests.{res} {resources['requests'][res]} is above "
                                f"its limit {resources['limits'][res]}")


def default_pull_policy(image: str) -> str:
    """The API server's default imagePullPolicy: Always for a :latest tag or
    no tag (and no digest), else IfNotPresent."""
    name = image.split("@", 1)[0]
    has_digest = "@" in image
    last = name.rsplit("/", 1)[-1]
    tag = last.split(":", 1)[1] if ":" in last else ("" if has_digest else "latest")
    return "Always" if tag == "latest" else "IfNotPresent"


def check_image(container: dict, registry: str | None, where: str, report: Report) -> str:
    """The image as written (after kustomize's `images:`): required, and,
    with --registry, under that registry."""
    image = container.get("image")
    if not isinstance(image, str) or not image:
        report.error(where, "no image")
        return ""
    if registry and not image.startswith(registry.rstrip("/") + "/"):
        report.error(where, f"image {image!r} is not from registry {registry.rstrip('/')}/")
    return image


def effective_security_context(pod_context: dict, container_context: dict) -> dict:
    """The security context the container runs with
    (securitycontext.DetermineEffectiveSecurityContext and kuberuntime's
    determineEffectiveSecurityContext): the pod's seLinuxOptions,
    windowsOptions, seccompProfile, appArmorProfile, runAsUser, runAsGroup
    and runAsNonRoot, each overridden by the container's own; and the
    supplementalGroups the process gets, the pod's fsGroup first, then the
    pod's supplementalGroups (fsGroup is no field of a container's context:
    the process gets it as a supplementary group, and volumes that support
    it are owned by it)."""
    inherited = ("seLinuxOptions", "windowsOptions", "seccompProfile", "appArmorProfile",
                 "runAsUser", "runAsGroup", "runAsNonRoot")
    effective = {k: pod_context[k] for k in inherited if pod_context.get(k) is not None}
    effective.update({k: v for k, v in container_context.items() if v is not None})
    groups = ([pod_context["fsGroup"]] if pod_context.get("fsGroup") is not None else []) + \
        list(pod_context.get("supplementalGroups") or [])
    if groups:
        effective["supplementalGroups"] = groups
    return effective


# ----- volumes


def file_content(data: bytes | str) -> Any:
    """A file's content for the JSON output: text, or {"base64": ...} for
    bytes that are not UTF-8."""
    if isinstance(data, str):
        return data
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode()}


def config_files(kind: str, ref: dict, ctx: PodContext) -> tuple[dict[str, Any], bool]:
    """The files of a configMap or secret volume (or projected source)
    (pkg/volume/configmap MakePayload, pkg/volume/secret MakePayload): every
    key (data and binaryData), or just `items` (key -> path). A missing
    object is an error unless optional, when it is an empty folder; a key in
    `items` that is missing is an error unless optional, when it is left
    out. Returns (files, whether the object exists)."""
    name = ref.get("name") if kind == "ConfigMap" else ref.get("secretName", ref.get("name"))
    obj = ctx.state.get(kind, ctx.plan.namespace, name)
    optional = optional_of(ref)
    if obj is None:
        if optional:
            return {}, False
        raise Unresolvable(f"{kind} {name} not found in namespace {ctx.plan.namespace} (not optional)")
    if kind == "ConfigMap":
        text, binary = configmap_data(obj)
        data: dict[str, bytes | str] = {**text, **binary}
    else:
        data = dict(secret_data(obj))
    items = ref.get("items")
    if not items:
        return {k: file_content(v) for k, v in sorted(data.items())}, True
    files = {}
    for item in items:
        if item.get("key") not in data:
            if optional:
                continue
            raise Unresolvable(f"{kind} {name} has no key {item.get('key')} (items, not optional)")
        files[item.get("path")] = file_content(data[item["key"]])
    return files, True


def downward_api_files(items: list[dict], ctx: PodContext) -> dict[str, str]:
    """The files of a downwardAPI volume (or projected source): per item,
    a fieldRef (the volume's list of fields) or a resourceFieldRef (which
    must name its container)."""
    files = {}
    for item in items or []:
        if item.get("fieldRef"):
            files[item.get("path")] = field_ref_value(item["fieldRef"], ctx, VOLUME_FIELD_PATHS)
        elif item.get("resourceFieldRef"):
            files[item.get("path")] = resource_field_value(item["resourceFieldRef"], ctx, None)
        else:
            raise Unresolvable(f"downwardAPI item {item.get('path')!r} has neither fieldRef nor resourceFieldRef")
    return files


def projected_files(sources: list[dict], ctx: PodContext) -> dict[str, Any]:
    """The files of a projected volume: its configMap, secret and
    downwardAPI sources by the same rules, merged in order; a
    serviceAccountToken source is a placeholder token file."""
    files: dict[str, Any] = {}
    for source in sources or []:
        if source.get("configMap"):
            files.update(config_files("ConfigMap", source["configMap"], ctx)[0])
        elif source.get("secret"):
            files.update(config_files("Secret", source["secret"], ctx)[0])
        elif source.get("downwardAPI"):
            files.update(downward_api_files(source["downwardAPI"].get("items"), ctx))
        elif source.get("serviceAccountToken"):
            files[source["serviceAccountToken"].get("path")] = f"<token of {ctx.service_account}>"
    return files


def describe_volume(volume: dict, ctx: PodContext) -> dict:
    """One volume as the kubelet sets it up: its kind, and for configMap,
    secret, downwardAPI and projected volumes the files in it; for a
    persistentVolumeClaim the claim, which must exist in the pod's
    namespace (or be one the pod's controller creates)."""
    kinds = [k for k in volume if k != "name"]
    if len(kinds) != 1:
        raise Unresolvable(f"must have exactly one volume source, has {kinds or 'none'}")
    kind = kinds[0]
    source = volume[kind] or {}
    if kind == "configMap":
        files, exists = config_files("ConfigMap", source, ctx)
        return {"kind": kind, "name": source.get("name"), "exists": exists, "files": files}
    if kind == "secret":
        files, exists = config_files("Secret", source, ctx)
        return {"kind": kind, "secretName": source.get("secretName"), "exists": exists, "files": files}
    if kind == "downwardAPI":
        return {"kind": kind, "files": downward_api_files(source.get("items"), ctx)}
    if kind == "projected":
        return {"kind": kind, "files": projected_files(source.get("sources"), ctx)}
    if kind == "persistentVolumeClaim":
        claim = source.get("claimName")
        if claim not in ctx.plan.claims and ctx.state.get("PersistentVolumeClaim", ctx.plan.namespace, claim) is None:
            raise Unresolvable(f"PersistentVolumeClaim {claim} not found in namespace {ctx.plan.namespace} "
                               f"(the pod stays Pending)")
        return {"kind": kind, "claimName": claim, "readOnly": bool(source.get("readOnly"))}
    if kind == "emptyDir":
        return {"kind": kind, "medium": source.get("medium", ""), "sizeLimit": source.get("sizeLimit")}
    if kind == "hostPath":
        return {"kind": kind, "path": source.get("path"), "type": source.get("type", "")}
    return {"kind": kind, "source": source}


def resolve_volumes(ctx: PodContext, report: Report) -> dict[str, dict]:
    """The pod's volumes that some container mounts, set up (the kubelet's
    volume manager ignores volumes no container uses), by name. Every
    persistentVolumeClaim volume is checked, mounted or not: the scheduler
    will not place a pod whose claim does not exist. Volume names must be
    unique. A volume that cannot be set up is a pod-level error (the kubelet
    reports "MountVolume.SetUp failed" and no container starts)."""
    mounted = {m.get("name") for c in ctx.all_containers() for m in c.get("volumeMounts") or []}
    resolved = {}
    seen = set()
    for volume in ctx.spec.get("volumes") or []:
        name = volume.get("name")
        if name in seen:
            report.error(ctx.where, f"volume {name!r} is defined twice")
            continue
        seen.add(name)
        if name not in mounted and "persistentVolumeClaim" not in volume:
            continue
        try:
            resolved[name] = describe_volume(volume, ctx)
        except Unresolvable as e:
            report.error(ctx.where, f"volume {name}: {e}")
    return resolved


def resolve_sub_path(mount: dict, env: dict[str, str]) -> str:
    """A mount's subPath, or subPathExpr expanded with the container's
    environment (every $(VAR) must be defined and non-empty); either must
    be relative without '..' (kubelet makeMounts)."""
    sub_path = mount.get("subPath") or ""
    expr = mount.get("subPathExpr")
    if expr:
        if sub_path:
            raise Unresolvable("subPath and subPathExpr are mutually exclusive")
        missing: list[str] = []
        sub_path = expand(expr, env, missing)
        missing += [k for k in re.findall(r"\$\(([^)]*)\)", expr) if k in env and not env[k]]
        if missing:
            raise Unresolvable(f"subPathExpr {expr!r}: missing value for {', '.join(sorted(set(missing)))}")
    if sub_path.startswith("/"):
        raise Unresolvable(f"subPath {sub_path!r} must not be an absolute path")
    if ".." in sub_path.split("/"):
        raise Unresolvable(f"subPath {sub_path!r} must not contain '..'")
    return sub_path


def resolve_mounts(container: dict, volumes: dict[str, dict], ctx: PodContext, env: dict[str, str],
                   where: str, report: Report) -> list[dict]:
    """The container's mounts: each names a volume of the pod and a
    mountPath that no other mount of the container uses (the API server
    refuses the pod otherwise)."""
    declared = {v.get("name") for v in ctx.spec.get("volumes") or []}
    paths = set()
    mounts = []
    for mount in container.get("volumeMounts") or []:
        name, path = mount.get("name"), mount.get("mountPath")
        if name not in declared:
            report.error(where, f"volumeMounts: no volume named {name!r} in the pod")
            continue
        if not path:
            report.error(where, f"volumeMounts {name}: mountPath is required")
            continue
        if path in paths:
            report.error(where, f"volumeMounts {name}: mountPath {path} is used twice")
            continue
        paths.add(path)
        try:
            sub_path = resolve_sub_path(mount, env)
        except Unresolvable as e:
            report.error(where, f"volumeMounts {name}: {e}")
            continue
        if name not in volumes:
            continue  # the volume itself failed: reported once, for the pod
        mounts.append({"path": path, "readOnly": bool(mount.get("readOnly")), "subPath": sub_path,
                       "volume": volumes[name]})
    return mounts


def resolve_container(container: dict, init: bool, ctx: PodContext, volumes: dict[str, dict],
                      registry: str | None, report: Report) -> dict:
    """One container as the kubelet starts it."""
    where = f"{ctx.where} container {container.get('name')}"
    image = check_image(container, registry, where, report)
    check_resources(container, where, report)
    env, failed = resolve_env(container, ctx, where, report)
    command = expand_list("command", container.get("command") or None, env, failed, where, report)
    args = expand_list("args", container.get("args") or [], env, failed, where, report) or []
    pod_security = ctx.spec.get("securityContext") or {}
    return {
        "name": container.get("name"),
        "init": init,
        "image": image,
        "imagePullPolicy": container.get("imagePullPolicy") or default_pull_policy(image),
        "argv": command + args if command is not None else None,
        "command": command,
        "args": args,
        "env": env,
        "mounts": resolve_mounts(container, volumes, ctx, env, where, report),
        "ports": [{"name": p.get("name"), "containerPort": p.get("containerPort"),
                   "protocol": p.get("protocol", "TCP")} for p in container.get("ports") or []],
        "resources": container.get("resources") or {},
        "readinessProbe": container.get("readinessProbe"),
        "livenessProbe": container.get("livenessProbe"),
        "startupProbe": container.get("startupProbe"),
        "workingDir": container.get("workingDir"),
        "securityContext": effective_security_context(pod_security, container.get("securityContext") or {}),
    }


# ----- DNS


def service_dns(plan: PodPlan, labels: dict[str, str], state: State, report: Report) -> list[dict]:
    """The DNS names headless Services give this pod. A headless Service
    (clusterIP None) whose selector matches the pod, named like the pod's
    subdomain, gives <hostname>.<service>[.<ns>[.svc[.cluster.local]]]; the
    TFJob operator's per-pod Services give <pod>[.<ns>[.svc[...]]].
    publishNotReadyAddresses decides whether these names resolve before the
    pod is Ready (true) or only once it is (false, the default): recorded
    with each Service. A subdomain with no such Service is a warning: the
    pod's own name will not resolve."""
    ns = plan.namespace
    spec = plan.pod["spec"]
    hostname, subdomain = spec.get("hostname") or plan.name, spec.get("subdomain")
    records = []
    if subdomain:
        service = state.get("Service", ns, subdomain)
        problem = None
        if service is None:
            problem = f"no Service {subdomain!r}"
        elif (service.get("spec") or {}).get("clusterIP") != "None":
            problem = f"Service {subdomain!r} is not headless (clusterIP: None)"
        elif not (service["spec"].get("selector")) or selector_matches(
                {"matchLabels": service["spec"]["selector"]}, labels):
            problem = f"Service {subdomain!r} does not select this pod"
        if problem:
            report.warn(f"pod {ns}/{plan.name}", f"subdomain {subdomain}: {problem}; "
                                                 f"{hostname}.{subdomain} will not resolve")
        else:
            base = f"{hostname}.{subdomain}"
            records.append({"service": subdomain,
                            "publishNotReadyAddresses": bool(service["spec"].get("publishNotReadyAddresses")),
                            "names": [base, f"{base}.{ns}", f"{base}.{ns}.svc", f"{base}.{ns}.svc.{CLUSTER_DOMAIN}"]})
    for service in plan.own_services:
        name = service["name"]
        records.append({"service": name, "publishNotReadyAddresses": service["publishNotReadyAddresses"],
                        "names": [name, f"{name}.{ns}", f"{name}.{ns}.svc", f"{name}.{ns}.svc.{CLUSTER_DOMAIN}"]})
    return records


def hosts_of(pods: list[dict], report: Report) -> dict[str, str]:
    """Every DNS name of every pod, to the pod's name (--hosts). A name that
    two pods claim would resolve to both: a warning."""
    hosts: dict[str, str] = {}
    for pod in pods:
        for record in pod["services"]:
            for name in record["names"]:
                if hosts.get(name, pod["name"]) != pod["name"]:
                    report.warn(f"pod {pod['namespace']}/{pod['name']}",
                                f"DNS name {name} also names pod {hosts[name]}")
                hosts.setdefault(name, pod["name"])
    return hosts


def grace_period(ctx: PodContext, report: Report) -> int:
    """spec.terminationGracePeriodSeconds (default 30): the API server
    refuses one that is not a non-negative integer."""
    value = ctx.spec.get("terminationGracePeriodSeconds", 30)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        report.error(ctx.where, f"spec.terminationGracePeriodSeconds is {value!r}, not a non-negative integer")
        return 30
    return value


def resolve_pod(plan: PodPlan, state: State, node: Node, registry: str | None, report: Report) -> dict:
    """A pod as the kubelet starts it: container names unique across
    containers and initContainers, at least one container, the volumes,
    then every init container and container."""
    meta = plan.pod["metadata"]
    ctx = PodContext(plan, state, node, meta["labels"], meta["annotations"])
    names = [c.get("name") for c in ctx.all_containers()]
    for name in sorted({n for n in names if names.count(n) > 1}, key=str):
        report.error(ctx.where, f"container name {name!r} is used twice")
    if not ctx.spec.get("containers"):
        report.error(ctx.where, "spec.containers is empty")
    volumes = resolve_volumes(ctx, report)
    containers = [resolve_container(c, True, ctx, volumes, registry, report)
                  for c in ctx.spec.get("initContainers") or []]
    containers += [resolve_container(c, False, ctx, volumes, registry, report)
                   for c in ctx.spec.get("containers") or []]
    return {
        "namespace": plan.namespace,
        "name": plan.name,
        "kind": plan.kind,
        "workload": plan.workload,
        "hostname": ctx.spec.get("hostname") or plan.name,
        "subdomain": ctx.spec.get("subdomain"),
        "labels": meta["labels"],
        "annotations": meta["annotations"],
        "restartPolicy": ctx.spec["restartPolicy"],
        # How long a pod being deleted (a StatefulSet scaled down) has after
        # SIGTERM before SIGKILL; the API server's default is 30 s.
        "terminationGracePeriodSeconds": grace_period(ctx, report),
        "serviceAccountName": ctx.service_account,
        "services": service_dns(plan, meta["labels"], state, report),
        "containers": containers,
    }


# --------------------------------------------------------------------------
# The program


@dataclass
class Options:
    namespace: str = "default"
    registry: str | None = None
    node: Node = DEFAULT_NODE


def resolve(documents: list[tuple[str, dict]], options: Options) -> tuple[list[dict], Report]:
    """Every pod of every workload in `documents`, resolved, and what went
    wrong."""
    report = Report()
    state = build_state(documents, options.namespace, report)
    plans = plans_of(documents, options.namespace, report)
    pods = [resolve_pod(plan, state, options.node, options.registry, report) for plan in plans]
    return pods, report


def quantity_flag(text: str) -> Fraction:
    """argparse type for --node-*: a positive quantity."""
    try:
        value = parse_quantity(text)
    except Unresolvable as e:
        raise argparse.ArgumentTypeError(str(e)) from e
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not positive")
    return value


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="kubelet_resolve.py",
        description="Resolve Kubernetes workloads (Pod, StatefulSet, Deployment, Job, DaemonSet, Kubeflow TFJob) "
                    "into the pods and containers a kubelet would start, failing as the API server or the "
                    "kubelet would. Prints the pods as JSON; errors on stderr, one a line; exit 1 on errors.")
    parser.add_argument("files", metavar="FILE", nargs="+", help="YAML streams ('-': stdin)")
    parser.add_argument("--registry", metavar="PREFIX",
                        help="every image must start with PREFIX/")
    parser.add_argument("--namespace", metavar="NS", default="default",
                        help="namespace of objects that name none (default: default)")
    parser.add_argument("--node-cpus", metavar="N", type=quantity_flag, default=DEFAULT_NODE.cpu,
                        help="the node's allocatable CPUs, for unset limits.cpu (default 16)")
    parser.add_argument("--node-memory", metavar="BYTES", type=quantity_flag, default=DEFAULT_NODE.memory,
                        help="the node's allocatable memory, for unset limits.memory (default 64Gi)")
    parser.add_argument("--node-ephemeral-storage", metavar="BYTES", type=quantity_flag,
                        default=DEFAULT_NODE.ephemeral_storage,
                        help="the node's allocatable ephemeral storage (default 100Gi)")
    parser.add_argument("--hosts", action="store_true",
                        help="print the DNS names headless Services give the pods, to the pods' names")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    options = Options(namespace=args.namespace, registry=args.registry,
                      node=Node(args.node_cpus, args.node_memory, args.node_ephemeral_storage))
    try:
        documents = load_documents(args.files, sys.stdin.read)
    except UsageError as e:
        print(f"kubelet_resolve.py: error: {e}", file=sys.stderr)
        return 2
    pods, report = resolve(documents, options)
    output: Any = hosts_of(pods, report) if args.hosts else pods
    json.dump(output, sys.stdout, indent=2)
    sys.stdout.write("\n")
    for line in report.warnings + report.errors:
        print(line, file=sys.stderr)
    return 1 if report.errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
