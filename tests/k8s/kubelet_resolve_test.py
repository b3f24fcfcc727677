#!/usr/bin/env python3
"""Unit tests of tests/k8s/kubelet_resolve.py: one small inline manifest per
rule, asserting the value the kubelet would resolve or the exact error line.

    python3 tests/k8s/kubelet_resolve_test.py     (exit status 0: all passed)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
import unittest
from fractions import Fraction

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True  # no __pycache__ left in the source tree

import kubelet_resolve as kr  # noqa: E402

TOOL = os.path.join(HERE, "kubelet_resolve.py")


def resolve(*parts: str, **options):
    """(pods by name, report) for the YAML documents `parts`, each dedented."""
    text = "\n---\n".join(textwrap.dedent(part) for part in parts)
    docs = kr.load_documents(["-"], lambda: text)
    pods, report = kr.resolve(docs, kr.Options(**options))
    return {p["name"]: p for p in pods}, report


def container(pod: dict, name: str) -> dict:
    return next(c for c in pod["containers"] if c["name"] == name)


def pod_with(container_yaml: str, rest: str = "", namespace: str = "ns") -> str:
    """A Pod `p` in `namespace` with one container `c` (image reg/app:1)
    whose fields are `container_yaml`, and pod spec fields `rest`."""
    body = textwrap.indent(textwrap.dedent(container_yaml).strip("\n"), " " * 6)
    extra = textwrap.indent(textwrap.dedent(rest).strip("\n"), " " * 2)
    return (f"apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  namespace: {namespace}\n"
            f"  labels: {{app: a, tier: t}}\n  annotations: {{note: hello}}\n"
            f"spec:\n  containers:\n    - name: c\n      image: reg/app:1\n{body}\n{extra}\n")


CM = """
---
apiVersion: v1
kind: ConfigMap
metadata: {name: cm, namespace: ns}
data: {model: cnn, data_dir: /data/mnist, ps_replicas: "0"}
"""

SECRET = """
---
apiVersion: v1
kind: Secret
metadata: {name: s, namespace: ns}
data: {password: aHVudGVyMg==}
stringData: {user: admin}
"""


class ReadingTest(unittest.TestCase):
    def test_documents_without_kind_or_name_are_usage_errors(self):
        with self.assertRaisesRegex(kr.UsageError, r"^-#0: not a Kubernetes object \(no kind\)$"):
            kr.load_documents(["-"], lambda: "a: 1\n")
        with self.assertRaisesRegex(kr.UsageError, r"^-#1: ConfigMap without metadata.name$"):
            kr.load_documents(["-"], lambda: "---\n---\nkind: ConfigMap\nmetadata: {}\n")

    def test_dates_stay_strings_as_kubectl_sends_them(self):
        pods, report = resolve(pod_with("env: [{name: D, value: 2024-01-01}]"))
        self.assertEqual(report.errors, [])
        self.assertEqual(container(pods["p"], "c")["env"], {"D": "2024-01-01"})

    def test_configmap_value_not_a_string_is_refused_and_left_out(self):
        pods, report = resolve(pod_with("env: [{name: R, valueFrom: {configMapKeyRef: {name: cm, key: n}}}]"), """
            ---
            kind: ConfigMap
            metadata: {name: cm, namespace: ns}
            data: {n: 0}
            """)
        self.assertEqual(report.errors, [
            "configmap ns/cm: data.n is int 0, not a string (quote it: the API server refuses it)",
            "pod ns/p container c: env R: ConfigMap cm not found in namespace ns (not optional)"])

    def test_configmap_bad_key_and_secret_bad_base64(self):
        _, report = resolve("""
            kind: ConfigMap
            metadata: {name: cm, namespace: ns}
            data: {"a b": x}
            ---
            kind: Secret
            metadata: {name: s, namespace: ns}
            data: {k: "not base64!"}
            """)
        self.assertEqual(report.errors, [
            "configmap ns/cm: key 'a b' is not a valid key (alphanumerics, '-', '_' or '.')",
            "secret ns/s: data.k is not base64"])

    def test_configmap_binary_data_and_secret_string_data(self):
        _, report = resolve("""
            kind: ConfigMap
            metadata: {name: cm, namespace: ns}
            data: {k: x}
            binaryData: {k: eA==, b: "%%%"}
            ---
            kind: Secret
            metadata: {name: s, namespace: ns}
            stringData: {n: 1}
            """)
        self.assertEqual(report.errors, [
            "configmap ns/cm: key 'k' is in both data and binaryData",
            "configmap ns/cm: binaryData.b is not base64",
            "secret ns/s: stringData.n is int 1, not a string"])

    def test_a_later_object_replaces_an_earlier_one(self):
        pods, report = resolve(pod_with("envFrom: [{configMapRef: {name: cm}}]"), """
            ---
            kind: ConfigMap
            metadata: {name: cm, namespace: ns}
            data: {A: first, B: first}
            ---
            kind: ConfigMap
            metadata: {name: cm, namespace: ns}
            data: {A: second}
            """)
        self.assertEqual(container(pods["p"], "c")["env"], {"A": "second"})
        self.assertEqual(report.warnings,
                         ["warning: configmap ns/cm: defined twice; the later definition replaces the earlier one"])

    def test_objects_are_looked_up_in_the_pods_namespace_only(self):
        text = pod_with("env: [{name: M, valueFrom: {configMapKeyRef: {name: cm, key: model}}}]", namespace="other")
        _, report = resolve(text, CM)
        self.assertEqual(report.errors,
                         ["pod other/p container c: env M: ConfigMap cm not found in namespace other (not optional)"])
        # Objects without a namespace take --namespace.
        pods, report = resolve(text.replace("namespace: other", ""), CM.replace("namespace: ns", ""),
                               namespace="team")
        self.assertEqual(report.errors, [])
        self.assertEqual(pods["p"]["namespace"], "team")
        self.assertEqual(container(pods["p"], "c")["env"], {"M": "cnn"})


class WorkloadTest(unittest.TestCase):
    def test_pod_is_itself_with_api_server_defaults(self):
        pods, report = resolve(pod_with(""))
        self.assertEqual(report.errors, [])
        p = pods["p"]
        self.assertEqual((p["kind"], p["workload"], p["hostname"], p["subdomain"]), ("Pod", "p", "p", None))
        self.assertEqual((p["restartPolicy"], p["serviceAccountName"]), ("Always", "default"))
        self.assertEqual(p["labels"], {"app": "a", "tier": "t"})
        self.assertEqual(p["terminationGracePeriodSeconds"], 30)

    def test_termination_grace_period(self):
        pods, report = resolve(pod_with("", "terminationGracePeriodSeconds: 45"))
        self.assertEqual(report.errors, [])
        self.assertEqual(pods["p"]["terminationGracePeriodSeconds"], 45)
        _, report = resolve(pod_with("", 'terminationGracePeriodSeconds: "45"'))
        self.assertEqual(report.errors, ["pod ns/p: spec.terminationGracePeriodSeconds is '45', "
                                         "not a non-negative integer"])

    def test_statefulset_pods(self):
        pods, report = resolve("""
            apiVersion: apps/v1
            kind: StatefulSet
            metadata: {name: ps, namespace: ns}
            spec:
              serviceName: ps-svc
              replicas: 2
              ordinals: {start: 3}
              selector: {matchLabels: {app: ps}}
              template:
                metadata: {labels: {app: ps}}
                spec:
                  containers:
                    - name: c
                      image: reg/app:1
                      env: [{name: ME, valueFrom: {fieldRef: {fieldPath: metadata.name}}}]
                      volumeMounts: [{name: data, mountPath: /data}]
              volumeClaimTemplates:
                - metadata: {name: data}
                  spec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}
            """)
        self.assertEqual(sorted(pods), ["ps-3", "ps-4"])
        p = pods["ps-4"]
        self.assertEqual((p["kind"], p["workload"], p["hostname"], p["subdomain"]),
                         ("StatefulSet", "ps", "ps-4", "ps-svc"))
        self.assertEqual(p["labels"], {"app": "ps", "statefulset.kubernetes.io/pod-name": "ps-4",
                                       "apps.kubernetes.io/pod-index": "4"})
        c = container(p, "c")
        self.assertEqual(c["env"], {"ME": "ps-4"})
        self.assertEqual(c["mounts"][0]["volume"],
                         {"kind": "persistentVolumeClaim", "claimName": "data-ps-4", "readOnly": False})
        # A warning, not an error: the Service ps-svc is missing.
        self.assertEqual(report.errors, [])
        self.assertEqual(report.warnings[0],
                         "warning: pod ns/ps-3: subdomain ps-svc: no Service 'ps-svc'; ps-3.ps-svc will not resolve")

    def test_deployment_daemonset_and_ignored_kinds(self):
        pods, report = resolve("""
            kind: Deployment
            metadata: {name: web, namespace: ns}
            spec:
              replicas: 3
              selector: {matchLabels: {app: web}}
              template:
                metadata: {labels: {app: web}}
                spec: {containers: [{name: c, image: reg/app:1}]}
            ---
            kind: DaemonSet
            metadata: {name: agent, namespace: ns}
            spec:
              selector: {matchExpressions: [{key: app, operator: In, values: [agent]}]}
              template:
                metadata: {labels: {app: agent}}
                spec: {containers: [{name: c, image: reg/app:1}]}
            ---
            kind: ReplicaSet
            metadata: {name: rs, namespace: ns}
            spec: {template: {spec: {containers: [{name: c, image: reg/app:1}]}}}
            """)
        self.assertEqual(report.errors, [])
        self.assertEqual(sorted(pods), ["agent-0", "web-0", "web-1", "web-2"])
        self.assertEqual(pods["agent-0"]["kind"], "DaemonSet")

    def test_selector_operators(self):
        labels = {"app": "a", "tier": "t"}
        self.assertEqual(kr.selector_matches({"matchExpressions": [
            {"key": "app", "operator": "In", "values": ["a", "b"]},
            {"key": "tier", "operator": "NotIn", "values": ["x"]},
            {"key": "app", "operator": "Exists"},
            {"key": "zone", "operator": "DoesNotExist"}]}, labels), [])
        self.assertEqual(kr.selector_matches({"matchLabels": {"app": "b"}, "matchExpressions": [
            {"key": "tier", "operator": "NotIn", "values": ["t"]},
            {"key": "zone", "operator": "Exists"}]}, labels), ["app=b", "tier NotIn ['t']", "zone Exists"])

    def test_job_pods_and_restart_policy(self):
        pods, report = resolve("""
            kind: Job
            metadata: {name: j, namespace: ns}
            spec:
              parallelism: 3
              completions: 2
              completionMode: Indexed
              template:
                spec:
                  restartPolicy: Never
                  containers:
                    - name: c
                      image: reg/app:1
                      args: ["--shard=$(JOB_COMPLETION_INDEX)"]
            """)
        self.assertEqual(report.errors, [])
        self.assertEqual(sorted(pods), ["j-0", "j-1"])
        p = pods["j-1"]
        self.assertEqual((p["hostname"], p["restartPolicy"]), ("j-1", "Never"))
        self.assertEqual(p["labels"]["batch.kubernetes.io/job-name"], "j")
        self.assertEqual(container(p, "c")["args"], ["--shard=1"])
        _, report = resolve("""
            kind: Job
            metadata: {name: j, namespace: ns}
            spec: {template: {spec: {containers: [{name: c, image: reg/app:1}]}}}
            """)
        self.assertEqual(report.errors, ["job ns/j: spec.template.spec.restartPolicy 'Always' is not allowed "
                                         "for a Job (allowed: OnFailure, Never)"])

    def test_selector_and_restart_policy_and_counts_are_checked(self):
        _, report = resolve("""
            kind: StatefulSet
            metadata: {name: s, namespace: ns}
            spec:
              replicas: "2"
              selector: {matchLabels: {app: s, tier: db}}
              template:
                metadata: {labels: {app: s}}
                spec:
                  restartPolicy: Never
                  containers: [{name: c, image: reg/app:1}]
            ---
            kind: Deployment
            metadata: {name: d, namespace: ns}
            spec:
              template:
                spec: {containers: [{name: c, image: reg/app:1}]}
            """)
        self.assertEqual(report.errors, [
            'statefulset ns/s: spec.selector does not match the template\'s labels: tier=db (labels: {"app": "s"})',
            "statefulset ns/s: spec.template.spec.restartPolicy 'Never' is not allowed for a StatefulSet "
            "(allowed: Always)",
            "statefulset ns/s: spec.replicas is '2', not a non-negative integer",
            "deployment ns/d: spec.selector is required (apps/v1) and must not be empty"])

    def test_label_values_must_be_strings_and_pod_names_unique(self):
        _, report = resolve(pod_with(""), """
            ---
            kind: StatefulSet
            metadata: {name: x, namespace: ns}
            spec:
              selector: {matchLabels: {app: x}}
              template:
                metadata:
                  labels: {app: x}
                  annotations: {prometheus.io/scrape: true}
                spec: {containers: [{name: c, image: reg/app:1}]}
            ---
            kind: Pod
            metadata: {name: x-0, namespace: ns}
            spec: {containers: [{name: c, image: reg/app:1}]}
            """)
        self.assertEqual(report.errors, [
            "statefulset ns/x: spec.template.metadata.annotations['prometheus.io/scrape'] is bool True, "
            "not a string (quote it: the API server refuses it)",
            "pod ns/x-0: two workloads make a pod of this name"])
        _, report = resolve(pod_with("").replace("labels: {app: a, tier: t}", "labels: [app]"))
        self.assertEqual(report.errors, ["pod ns/p: metadata.labels is not a mapping"])


TFJOB = """
apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {name: job, namespace: ns}
spec:
  tfReplicaSpecs:
    Chief:
      restartPolicy: OnFailure
      template:
        spec:
          containers:
            - name: tensorflow
              image: reg/app:1
              env: [{name: TF_CONFIG, value: mine}, {name: A, value: a}]
              ports: [{name: tfjob-port, containerPort: 3333}]
            - name: sidecar
              image: reg/side:1
    ps:
      replicas: 2
      restartPolicy: ExitCode
      template:
        spec:
          containers: [{name: tensorflow, image: reg/app:1}]
    Evaluator:
      template:
        spec:
          containers: [{name: tensorflow, image: reg/app:1}]
"""


class TFJobTest(unittest.TestCase):
    def test_pods_and_the_operators_tf_config(self):
        pods, report = resolve(TFJOB)
        self.assertEqual(report.errors, [])
        self.assertEqual(list(pods), ["job-chief-0", "job-ps-0", "job-ps-1", "job-evaluator-0"])
        cluster = {"chief": ["job-chief-0.ns.svc:3333"],
                   "evaluator": ["job-evaluator-0.ns.svc:2222"],
                   "ps": ["job-ps-0.ns.svc:2222", "job-ps-1.ns.svc:2222"]}
        for name, task_type, index in (("job-chief-0", "chief", 0), ("job-ps-1", "ps", 1),
                                       ("job-evaluator-0", "evaluator", 0)):
            env = container(pods[name], "tensorflow")["env"]
            self.assertEqual(json.loads(env["TF_CONFIG"]),
                             {"cluster": cluster, "task": {"type": task_type, "index": index},
                              "environment": "cloud"})
        chief = pods["job-chief-0"]
        tf_config = container(chief, "tensorflow")["env"]["TF_CONFIG"]
        self.assertTrue(tf_config.startswith('{"cluster":{"chief":["job-chief-0.ns.svc:3333"],"evaluator":'))
        # Appended after the container's own env: the operator's wins.
        self.assertEqual(list(container(chief, "tensorflow")["env"]), ["TF_CONFIG", "A"])
        self.assertNotIn("TF_CONFIG", container(chief, "sidecar")["env"])
        self.assertEqual(chief["restartPolicy"], "OnFailure")
        self.assertEqual(pods["job-ps-0"]["restartPolicy"], "Never")          # ExitCode
        self.assertEqual(pods["job-evaluator-0"]["restartPolicy"], "Never")   # the default
        self.assertEqual(chief["labels"], {"training.kubeflow.org/operator-name": "tfjob-controller",
                                           "training.kubeflow.org/job-name": "job",
                                           "training.kubeflow.org/replica-type": "chief",
                                           "training.kubeflow.org/replica-index": "0",
                                           "training.kubeflow.org/job-role": "master"})
        self.assertNotIn("training.kubeflow.org/job-role", pods["job-ps-0"]["labels"])
        self.assertEqual(container(pods["job-ps-0"], "tensorflow")["ports"],
                         [{"name": "tfjob-port", "containerPort": 2222, "protocol": "TCP"}])

    def test_one_replica_gets_no_tf_config(self):
        pods, _ = resolve("""
            apiVersion: kubeflow.org/v1
            kind: TFJob
            metadata: {name: solo, namespace: ns}
            spec: {tfReplicaSpecs: {Worker: {template: {spec: {containers: [{name: tensorflow, image: reg/a:1}]}}}}}
            """)
        self.assertEqual(container(pods["solo-worker-0"], "tensorflow")["env"], {})
        self.assertEqual(pods["solo-worker-0"]["labels"]["training.kubeflow.org/job-role"], "master")

    def test_webhook_refusals(self):
        _, report = resolve("""
            apiVersion: kubeflow.org/v1
            kind: TFJob
            metadata: {name: Job1, namespace: ns}
            spec: {tfReplicaSpecs: {Worker: {template: {spec: {containers: [{name: main, image: reg/a:1}]}}}}}
            """)
        self.assertEqual(report.errors, [
            "tfjob ns/Job1: metadata.name must be a DNS-1035 label (lowercase letters, digits, '-'; "
            "starting with a letter) for the operator's webhook",
            "tfjob ns/Job1: tfReplicaSpecs.Worker has no container named 'tensorflow' "
            "(the operator's webhook refuses it)"])
        _, report = resolve("""
            apiVersion: kubeflow.org/v1
            kind: TFJob
            metadata: {name: j, namespace: ns}
            spec:
              tfReplicaSpecs:
                Chief: {restartPolicy: Sometimes, template: {spec: {containers: [{name: tensorflow}]}}}
                Master: {template: {spec: {containers: [{name: tensorflow, image: reg/a:1}]}}}
            ---
            apiVersion: kubeflow.org/v1beta2
            kind: TFJob
            metadata: {name: old, namespace: ns}
            """)
        self.assertEqual(report.errors, [
            "tfjob ns/j: tfReplicaSpecs.Chief.restartPolicy 'Sometimes' is not one of "
            "Always, OnFailure, Never, ExitCode",
            "tfjob ns/j: tfReplicaSpecs.Chief container 'tensorflow' has no image",
            "tfjob ns/j: more than one Chief or Master replica type",
            "pod ns/j-chief-0 container tensorflow: no image"])
        self.assertEqual(report.warnings, [
            "warning: tfjob ns/old: apiVersion 'kubeflow.org/v1beta2' is not kubeflow.org/v1; not expanded"])


class EnvTest(unittest.TestCase):
    def test_env_from_then_env_in_order_later_wins(self):
        pods, report = resolve(pod_with("""
            envFrom:
              - configMapRef: {name: cm}
              - secretRef: {name: s}
                prefix: S_
              - configMapRef: {name: cm}
                prefix: CM_
            env:
              - {name: model, value: override}
            """), CM, SECRET)
        self.assertEqual(report.errors, [])
        self.assertEqual(container(pods["p"], "c")["env"], {
            "model": "override", "data_dir": "/data/mnist", "ps_replicas": "0",
            "S_password": "hunter2", "S_user": "admin",
            "CM_model": "cnn", "CM_data_dir": "/data/mnist", "CM_ps_replicas": "0"})

    def test_env_from_missing_objects(self):
        _, report = resolve(pod_with("""
            envFrom:
              - configMapRef: {name: gone}
              - secretRef: {name: gone, optional: true}
            """))
        self.assertEqual(report.errors,
                         ["pod ns/p container c: envFrom: ConfigMap gone not found in namespace ns (not optional)"])
        _, report = resolve(pod_with("envFrom: [{prefix: X_}, {configMapRef: {name: a}, secretRef: {name: b}}]"))
        self.assertEqual(report.errors, 2 * [
            "pod ns/p container c: envFrom entry must have exactly one of configMapRef and secretRef"])

    def test_env_from_invalid_keys_are_skipped_with_a_warning(self):
        pods, report = resolve(pod_with("envFrom: [{configMapRef: {name: k}}]"), """
            ---
            kind: ConfigMap
            metadata: {name: k, namespace: ns}
            data: {1st: x, ok.name: y}
            """)
        self.assertEqual(report.errors, [])
        self.assertEqual(container(pods["p"], "c")["env"], {"ok.name": "y"})
        self.assertEqual(report.warnings, [
            "warning: pod ns/p container c: envFrom ConfigMap k: key '1st' gives '1st', not a valid environment "
            "variable name: skipped (as kubelets before 1.30 do; 1.30 and later pass it on)"])

    def test_value_must_be_a_string(self):
        _, report = resolve(pod_with("env: [{name: N, value: 3}]"))
        self.assertEqual(report.errors, [
            "pod ns/p container c: env N: value is int 3, not a string (quote it: the API server refuses it)"])

    def test_value_expansion_sees_only_earlier_variables(self):
        pods, _ = resolve(pod_with("""
            envFrom: [{configMapRef: {name: cm}}]
            env:
              - {name: A, value: "$(model)-$(B)-$$(model)-$(nope)-$(open"}
              - {name: B, value: b}
              - {name: C, value: "$(A)|$(B)|cost $5"}
            """), CM)
        env = container(pods["p"], "c")["env"]
        self.assertEqual(env["A"], "cnn-$(B)-$(model)-$(nope)-$(open")
        self.assertEqual(env["C"], "cnn-$(B)-$(model)-$(nope)-$(open|b|cost $5")

    def test_configmap_key_ref(self):
        pods, report = resolve(pod_with("""
            env:
              - {name: M, valueFrom: {configMapKeyRef: {name: cm, key: model}}}
              - {name: M, value: kept}
              - {name: M, valueFrom: {configMapKeyRef: {name: cm, key: nokey, optional: true}}}
              - {name: N, valueFrom: {configMapKeyRef: {name: gone, key: k, optional: true}}}
              - {name: R, valueFrom: {configMapKeyRef: {name: cm, key: replicas}}}
            """), CM)
        self.assertEqual(container(pods["p"], "c")["env"], {"M": "kept"})
        self.assertEqual(report.errors,
                         ["pod ns/p container c: env R: ConfigMap cm has no key replicas (not optional)"])
        self.assertEqual(report.warnings,
                         ["warning: pod ns/p container c: env M is defined twice; the later definition wins",
                          "warning: pod ns/p container c: env M is defined twice; the later definition wins"])

    def test_secret_key_ref(self):
        pods, report = resolve(pod_with("""
            env:
              - {name: P, valueFrom: {secretKeyRef: {name: s, key: password}}}
              - {name: U, valueFrom: {secretKeyRef: {name: s, key: user}}}
              - {name: X, valueFrom: {secretKeyRef: {name: other, key: k}}}
              - {name: Y, valueFrom: {secretKeyRef: {name: s, key: nokey}}}
              - {name: Z, valueFrom: {secretKeyRef: {name: s, key: nokey, optional: true}}}
            """), SECRET)
        self.assertEqual(container(pods["p"], "c")["env"], {"P": "hunter2", "U": "admin"})
        self.assertEqual(report.errors,
                         ["pod ns/p container c: env X: Secret other not found in namespace ns (not optional)",
                          "pod ns/p container c: env Y: Secret s has no key nokey (not optional)"])

    def test_field_ref(self):
        paths = ["metadata.name", "metadata.namespace", "metadata.labels['app']", "metadata.labels['none']",
                 "metadata.annotations['note']", "spec.nodeName", "spec.serviceAccountName", "status.hostIP",
                 "status.hostIPs", "status.podIP", "status.podIPs"]
        env = "\n".join(f"  - {{name: V{i}, valueFrom: {{fieldRef: {{fieldPath: \"{p}\"}}}}}}"
                        for i, p in enumerate(paths))
        env += ("\n  - {name: UID, valueFrom: {fieldRef: {fieldPath: metadata.uid}}}"
                "\n  - {name: BAD, valueFrom: {fieldRef: {fieldPath: metadata.labels}}}")
        pods, report = resolve(pod_with("env:\n" + env, "serviceAccountName: robot"))
        got = container(pods["p"], "c")["env"]
        ip = got["V9"]
        self.assertRegex(ip, r"^10\.\d+\.\d+\.\d+$")
        self.assertEqual([got[f"V{i}"] for i in range(len(paths))],
                         ["p", "ns", "a", "", "hello", "node-0", "robot", "10.0.0.10", "10.0.0.10", ip, ip])
        self.assertRegex(got["UID"], r"^[0-9a-f-]{36}$")
        pods_again, _ = resolve(pod_with("env: [{name: IP, valueFrom: {fieldRef: {fieldPath: status.podIP}}}]"))
        self.assertEqual(container(pods_again["p"], "c")["env"]["IP"], ip)   # stable per pod
        self.assertEqual(len(report.errors), 1)
        self.assertTrue(report.errors[0].startswith(
            "pod ns/p container c: env BAD: fieldRef: fieldPath 'metadata.labels' is not supported here"))

    def test_resource_field_ref(self):
        pods, report = resolve(pod_with("""
            resources:
              requests: {memory: 100Mi}
              limits: {cpu: 1500m, memory: 1Gi}
            env:
              - {name: LCPU, valueFrom: {resourceFieldRef: {resource: limits.cpu}}}
              - {name: LCPU_M, valueFrom: {resourceFieldRef: {resource: limits.cpu, divisor: 1m}}}
              - {name: RCPU, valueFrom: {resourceFieldRef: {resource: requests.cpu, divisor: 1m}}}
              - {name: RMEM, valueFrom: {resourceFieldRef: {resource: requests.memory, divisor: 1Mi}}}
              - {name: LMEM_G, valueFrom: {resourceFieldRef: {resource: limits.memory, divisor: 1G}}}
              - {name: LSTORE, valueFrom: {resourceFieldRef: {resource: limits.ephemeral-storage, divisor: 1Gi}}}
              - {name: RSTORE, valueFrom: {resourceFieldRef: {resource: requests.ephemeral-storage}}}
              - {name: OCPU, valueFrom: {resourceFieldRef: {containerName: other, resource: limits.cpu}}}
              - {name: OREQ, valueFrom: {resourceFieldRef: {containerName: other, resource: requests.cpu}}}
              - {name: OMEM, valueFrom: {resourceFieldRef: {containerName: other, resource: limits.memory,
                                                            divisor: 1Gi}}}
              - {name: E1, valueFrom: {resourceFieldRef: {containerName: ghost, resource: limits.cpu}}}
              - {name: E2, valueFrom: {resourceFieldRef: {resource: limits.nvidia.com/gpu}}}
              - {name: E3, valueFrom: {resourceFieldRef: {resource: limits.cpu, divisor: 2}}}
            """, """
            initContainers:
              - name: other
                image: reg/app:1
                resources: {requests: {cpu: 250m}}
            """))
        env = container(pods["p"], "c")["env"]
        self.assertEqual(env, {"LCPU": "2", "LCPU_M": "1500", "RCPU": "1500", "RMEM": "100", "LMEM_G": "2",
                               "LSTORE": "100", "RSTORE": "0", "OCPU": "16", "OREQ": "1", "OMEM": "64"})
        self.assertEqual(report.errors, [
            "pod ns/p container c: env E1: resourceFieldRef: container 'ghost' not found in the pod",
            "pod ns/p container c: env E2: resourceFieldRef: unsupported resource 'limits.nvidia.com/gpu' "
            "(supported: limits.cpu, requests.cpu, limits.memory, requests.memory, limits.ephemeral-storage, "
            "requests.ephemeral-storage)",
            "pod ns/p container c: env E3: resourceFieldRef: divisor 2 is not allowed for limits.cpu "
            "(cpu: 1 or 1m; memory and storage: 1, 1k, 1M, ..., 1Ki, 1Mi, ...)"])

    def test_env_names(self):
        pods, report = resolve(pod_with("""
            env:
              - {name: "A=B", value: x}
              - {name: "my:var", value: y}
            """))
        self.assertEqual(container(pods["p"], "c")["env"], {"my:var": "y"})
        self.assertEqual(report.errors, ["pod ns/p container c: env 'A=B' is not a valid environment variable name"])
        self.assertEqual(report.warnings, [
            "warning: pod ns/p container c: env 'my:var' is not a [-._a-zA-Z][-._a-zA-Z0-9]* name: "
            "API servers before 1.32 refuse it"])

    def test_value_from_must_have_one_source(self):
        _, report = resolve(pod_with("""
            env:
              - {name: A, value: x, valueFrom: {fieldRef: {fieldPath: metadata.name}}}
              - {name: B, valueFrom: {}}
            """))
        self.assertEqual(report.errors, [
            "pod ns/p container c: env A: value and valueFrom are both set (the API server refuses it)",
            "pod ns/p container c: env B: valueFrom must have exactly one of fieldRef, resourceFieldRef, "
            "configMapKeyRef, secretKeyRef"])


class CommandTest(unittest.TestCase):
    def test_argv_is_command_plus_args_expanded_with_the_final_env(self):
        pods, report = resolve(pod_with("""
            command: ["/bin/run", "$(B)"]
            args: ["--a=$(A)", "$$(A)", "--x=$(X)"]
            env: [{name: A, value: "1"}, {name: B, value: "$(A)2"}]
            """))
        c = container(pods["p"], "c")
        self.assertEqual(c["command"], ["/bin/run", "12"])
        self.assertEqual(c["args"], ["--a=1", "$(A)", "--x=$(X)"])
        self.assertEqual(c["argv"], ["/bin/run", "12", "--a=1", "$(A)", "--x=$(X)"])
        self.assertEqual(report.warnings, [
            "warning: pod ns/p container c: args[2] '--x=$(X)': $(X) is not defined, passed on as written"])

    def test_no_command_means_the_images_entrypoint(self):
        pods, _ = resolve(pod_with('args: ["serve"]'))
        c = container(pods["p"], "c")
        self.assertEqual((c["argv"], c["command"], c["args"]), (None, None, ["serve"]))

    def test_args_must_be_strings(self):
        _, report = resolve(pod_with('args: ["--port", 2222]'))
        self.assertEqual(report.errors, [
            "pod ns/p container c: args[1] is int 2222, not a string (quote it: the API server refuses it)"])


VOLUME_STATE = """
---
kind: ConfigMap
metadata: {name: cm, namespace: ns}
data: {a.txt: A, b.txt: B}
binaryData: {bin: /w==}
---
kind: Secret
metadata: {name: s, namespace: ns}
data: {key: c2VjcmV0}
---
kind: PersistentVolumeClaim
metadata: {name: claim, namespace: ns}
spec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}
"""


def mounts_by_path(pod: dict) -> dict:
    return {m["path"]: m for m in container(pod, "c")["mounts"]}


class VolumeTest(unittest.TestCase):
    def test_volume_kinds_and_their_files(self):
        pods, report = resolve(pod_with("""
            resources: {limits: {memory: 1Gi}}
            volumeMounts:
              - {name: all, mountPath: /all}
              - {name: some, mountPath: /some, readOnly: true}
              - {name: optional, mountPath: /opt}
              - {name: sec, mountPath: /sec}
              - {name: pvc, mountPath: /pvc}
              - {name: tmp, mountPath: /tmp}
              - {name: host, mountPath: /host, subPath: logs}
              - {name: info, mountPath: /info}
              - {name: proj, mountPath: /proj}
            """, """
            volumes:
              - {name: all, configMap: {name: cm}}
              - {name: some, configMap: {name: cm, items: [{key: a.txt, path: x/a}]}}
              - {name: optional, configMap: {name: absent, optional: true}}
              - {name: sec, secret: {secretName: s}}
              - {name: pvc, persistentVolumeClaim: {claimName: claim, readOnly: true}}
              - {name: tmp, emptyDir: {medium: Memory}}
              - {name: host, hostPath: {path: /var/log, type: Directory}}
              - name: info
                downwardAPI:
                  items:
                    - {path: labels, fieldRef: {fieldPath: metadata.labels}}
                    - {path: mem, resourceFieldRef: {containerName: c, resource: limits.memory, divisor: 1Mi}}
              - name: proj
                projected:
                  sources:
                    - configMap: {name: cm, items: [{key: b.txt, path: b}]}
                    - secret: {name: s}
                    - downwardAPI: {items: [{path: name, fieldRef: {fieldPath: metadata.name}}]}
                    - serviceAccountToken: {path: token}
            serviceAccountName: robot
            """), VOLUME_STATE)
        self.assertEqual(report.errors, [])
        m = mounts_by_path(pods["p"])
        self.assertEqual(m["/all"]["volume"], {"kind": "configMap", "name": "cm", "exists": True,
                                               "files": {"a.txt": "A", "b.txt": "B", "bin": {"base64": "/w=="}}})
        self.assertEqual((m["/some"]["readOnly"], m["/some"]["volume"]["files"]), (True, {"x/a": "A"}))
        self.assertEqual(m["/opt"]["volume"], {"kind": "configMap", "name": "absent", "exists": False, "files": {}})
        self.assertEqual(m["/sec"]["volume"]["files"], {"key": "secret"})
        self.assertEqual(m["/pvc"]["volume"], {"kind": "persistentVolumeClaim", "claimName": "claim",
                                               "readOnly": True})
        self.assertEqual(m["/tmp"]["volume"], {"kind": "emptyDir", "medium": "Memory", "sizeLimit": None})
        self.assertEqual((m["/host"]["subPath"], m["/host"]["volume"]),
                         ("logs", {"kind": "hostPath", "path": "/var/log", "type": "Directory"}))
        self.assertEqual(m["/info"]["volume"]["files"], {"labels": 'app="a"\ntier="t"', "mem": "1024"})
        self.assertEqual(m["/proj"]["volume"]["files"], {"b": "B", "key": "secret", "name": "p",
                                                         "token": "<token of robot>"})

    def test_volume_errors(self):
        _, report = resolve(pod_with("""
            volumeMounts:
              - {name: cm, mountPath: /a}
              - {name: items, mountPath: /b}
              - {name: pvc, mountPath: /c}
              - {name: info, mountPath: /d}
              - {name: node, mountPath: /e}
              - {name: nosuch, mountPath: /f}
              - {name: cm, mountPath: /a}
              - {name: two, mountPath: /g}
              - {name: empty, mountPath: /h}
            """, """
            volumes:
              - {name: cm, configMap: {name: absent}}
              - {name: cm, emptyDir: {}}
              - {name: two, emptyDir: {}, hostPath: {path: /x}}
              - {name: items, configMap: {name: cm, items: [{key: zzz, path: z}]}}
              - {name: pvc, persistentVolumeClaim: {claimName: none}}
              - {name: info, downwardAPI: {items: [{path: m, resourceFieldRef: {resource: limits.memory}}]}}
              - {name: node, downwardAPI: {items: [{path: n, fieldRef: {fieldPath: spec.nodeName}}]}}
              - {name: empty, downwardAPI: {items: [{path: e}]}}
              - {name: unused, secret: {secretName: absent}}
              - {name: unused-claim, persistentVolumeClaim: {claimName: none2}}
            """), VOLUME_STATE)
        self.assertEqual(report.errors[:8], [
            "pod ns/p: volume cm: ConfigMap absent not found in namespace ns (not optional)",
            "pod ns/p: volume 'cm' is defined twice",
            "pod ns/p: volume two: must have exactly one volume source, has ['emptyDir', 'hostPath']",
            "pod ns/p: volume items: ConfigMap cm has no key zzz (items, not optional)",
            "pod ns/p: volume pvc: PersistentVolumeClaim none not found in namespace ns (the pod stays Pending)",
            "pod ns/p: volume info: resourceFieldRef: containerName is required in a volume",
            "pod ns/p: volume node: fieldRef: fieldPath 'spec.nodeName' is not supported here (supported: "
            "metadata.name, metadata.namespace, metadata.uid, metadata.labels, metadata.annotations, "
            "metadata.labels['KEY'], metadata.annotations['KEY'])",
            "pod ns/p: volume empty: downwardAPI item 'e' has neither fieldRef nor resourceFieldRef"])
        # The unused secret volume is not set up; the unused claim still blocks scheduling.
        self.assertEqual(report.errors[8:], [
            "pod ns/p: volume unused-claim: PersistentVolumeClaim none2 not found in namespace ns "
            "(the pod stays Pending)",
            "pod ns/p container c: volumeMounts: no volume named 'nosuch' in the pod",
            "pod ns/p container c: volumeMounts cm: mountPath /a is used twice"])

    def test_sub_paths(self):
        pods, report = resolve(pod_with("""
            env: [{name: POD, valueFrom: {fieldRef: {fieldPath: metadata.name}}}, {name: EMPTY, value: ""}]
            volumeMounts:
              - {name: v, mountPath: /a, subPathExpr: "logs/$(POD)"}
              - {name: v, mountPath: /b, subPathExpr: "$(EMPTY)$(NONE)"}
              - {name: v, mountPath: /c, subPath: /abs}
              - {name: v, mountPath: /d, subPath: a/../../b}
            """, "volumes: [{name: v, emptyDir: {}}]"))
        self.assertEqual(mounts_by_path(pods["p"])["/a"]["subPath"], "logs/p")
        self.assertEqual(report.errors, [
            "pod ns/p container c: volumeMounts v: subPathExpr '$(EMPTY)$(NONE)': missing value for EMPTY, NONE",
            "pod ns/p container c: volumeMounts v: subPath '/abs' must not be an absolute path",
            "pod ns/p container c: volumeMounts v: subPath 'a/../../b' must not contain '..'"])


class ContainerTest(unittest.TestCase):
    def test_image_registry_and_pull_policy(self):
        text = pod_with("", """
            initContainers:
              - {name: i1, image: "other.io/x"}
              - {name: i2, image: "reg/x:latest", imagePullPolicy: Never}
              - {name: i3, image: "reg/x@sha256:0123"}
            """)
        pods, report = resolve(text, registry="reg")
        self.assertEqual(report.errors, ["pod ns/p container i1: image 'other.io/x' is not from registry reg/"])
        policies = {c["name"]: (c["init"], c["imagePullPolicy"]) for c in pods["p"]["containers"]}
        self.assertEqual(policies, {"i1": (True, "Always"), "i2": (True, "Never"), "i3": (True, "IfNotPresent"),
                                    "c": (False, "IfNotPresent")})
        self.assertEqual([c["name"] for c in pods["p"]["containers"]], ["i1", "i2", "i3", "c"])
        _, report = resolve(text, registry="reg/")
        self.assertEqual(len(report.errors), 1)

    def test_image_required_and_names_unique(self):
        _, report = resolve(pod_with("", "initContainers: [{name: c}]"))
        self.assertEqual(report.errors, ["pod ns/p: container name 'c' is used twice",
                                         "pod ns/p container c: no image"])

    def test_pod_needs_a_container(self):
        _, report = resolve("kind: Pod\nmetadata: {name: p, namespace: ns}\nspec: {containers: []}\n")
        self.assertEqual(report.errors, ["pod ns/p: spec.containers is empty"])

    def test_security_context_merge(self):
        pods, _ = resolve(pod_with("securityContext: {runAsUser: 2000, readOnlyRootFilesystem: true}", """
            securityContext: {runAsUser: 1000, runAsGroup: 3000, runAsNonRoot: true, fsGroup: 4000,
                              supplementalGroups: [5000]}
            """))
        self.assertEqual(container(pods["p"], "c")["securityContext"], {
            "runAsUser": 2000, "runAsGroup": 3000, "runAsNonRoot": True, "readOnlyRootFilesystem": True,
            "supplementalGroups": [4000, 5000]})

    def test_resources_ports_probes_working_dir(self):
        pods, report = resolve(pod_with("""
            workingDir: /w
            ports: [{name: grpc, containerPort: 2222}, {containerPort: 53, protocol: UDP}]
            readinessProbe: {grpc: {port: 2222}}
            resources: {requests: {cpu: 2, memory: 1Gi}, limits: {cpu: "1", memory: 1Gx}}
            """))
        c = container(pods["p"], "c")
        self.assertEqual(c["ports"], [{"name": "grpc", "containerPort": 2222, "protocol": "TCP"},
                                      {"name": None, "containerPort": 53, "protocol": "UDP"}])
        self.assertEqual((c["readinessProbe"], c["livenessProbe"], c["workingDir"]),
                         ({"grpc": {"port": 2222}}, None, "/w"))
        self.assertEqual(report.errors, [
            "pod ns/p container c: resources.limits.memory: '1Gx' is not a quantity "
            "(e.g. 500m, 2, 1.5, 512Mi, 1Gi, 1e3)",
            "pod ns/p container c: resources.requests.cpu 2 is above its limit 1"])


HEADLESS = """
apiVersion: v1
kind: Service
metadata: {name: ps, namespace: ns}
spec:
  clusterIP: None
  publishNotReadyAddresses: true
  selector: {app: ps}
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: ps, namespace: ns}
spec:
  serviceName: ps
  replicas: 2
  selector: {matchLabels: {app: ps}}
  template:
    metadata: {labels: {app: ps}}
    spec: {containers: [{name: c, image: reg/app:1}]}
"""


class DnsTest(unittest.TestCase):
    def test_headless_service_names_and_publish_not_ready(self):
        pods, report = resolve(HEADLESS)
        self.assertEqual(report.warnings, [])
        self.assertEqual(pods["ps-1"]["services"], [{
            "service": "ps", "publishNotReadyAddresses": True,
            "names": ["ps-1.ps", "ps-1.ps.ns", "ps-1.ps.ns.svc", "ps-1.ps.ns.svc.cluster.local"]}])
        hosts = kr.hosts_of(list(pods.values()), report)
        self.assertEqual(hosts["ps-0.ps.ns.svc"], "ps-0")
        self.assertEqual(len(hosts), 8)

    def test_subdomain_without_a_matching_headless_service_warns(self):
        _, report = resolve(HEADLESS.replace("clusterIP: None", "clusterIP: 10.0.0.1"))
        self.assertEqual(report.warnings[0], "warning: pod ns/ps-0: subdomain ps: Service 'ps' is not headless "
                                             "(clusterIP: None); ps-0.ps will not resolve")
        _, report = resolve(HEADLESS.replace("selector: {app: ps}\n---", "selector: {app: other}\n---"))
        self.assertEqual(report.warnings[0], "warning: pod ns/ps-0: subdomain ps: Service 'ps' does not select "
                                             "this pod; ps-0.ps will not resolve")

    def test_a_name_given_to_two_pods_warns(self):
        pods = [{"namespace": "ns", "name": n, "services": [{"names": ["x.svc"]}]} for n in ("a", "b")]
        report = kr.Report()
        self.assertEqual(kr.hosts_of(pods, report), {"x.svc": "a"})
        self.assertEqual(report.warnings, ["warning: pod ns/b: DNS name x.svc also names pod a"])

    def test_tfjob_per_pod_services(self):
        pods, report = resolve(TFJOB)
        self.assertEqual(pods["job-ps-1"]["services"], [{
            "service": "job-ps-1", "publishNotReadyAddresses": False,
            "names": ["job-ps-1", "job-ps-1.ns", "job-ps-1.ns.svc", "job-ps-1.ns.svc.cluster.local"]}])
        self.assertEqual(kr.hosts_of(list(pods.values()), report)["job-chief-0.ns.svc"], "job-chief-0")


class QuantityAndExpansionTest(unittest.TestCase):
    def test_parse_quantity(self):
        cases = {"500m": Fraction(1, 2), "2": 2, 2: 2, 0.5: Fraction(1, 2), "1Gi": 2**30, "512Mi": 2**29,
                 "1e3": 1000, "1E3": 1000, "1k": 1000, "1M": 10**6, "1E": 10**18, "1.5": Fraction(3, 2),
                 ".5Ki": 512, "100n": Fraction(1, 10**7)}
        for text, want in cases.items():
            self.assertEqual(kr.parse_quantity(text), want, text)
        for bad in ("1K", "1Gb", "", "abc", "1.2.3", True, None):
            with self.assertRaises(kr.Unresolvable, msg=repr(bad)):
                kr.parse_quantity(bad)

    def test_expand(self):
        env = {"A": "1", "B": "x"}
        cases = {"$(A)": "1", "$(A)$(B)": "1x", "$$(A)": "$(A)", "$$$(A)": "$1", "$(C)": "$(C)", "$(A": "$(A",
                 "$A": "$A", "a$": "a$", "$()": "$()", "$$": "$"}
        for text, want in cases.items():
            self.assertEqual(kr.expand(text, env), want, text)
        undefined: list[str] = []
        kr.expand("$(X)-$(A)-$(Y)", env, undefined)
        self.assertEqual(undefined, ["X", "Y"])


class CommandLineTest(unittest.TestCase):
    def run_tool(self, *args: str, stdin: str = "") -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, TOOL, *args], input=stdin, capture_output=True, text=True)

    def test_exit_0_with_json_on_stdout(self):
        result = self.run_tool("-", stdin=pod_with(""))
        self.assertEqual((result.returncode, result.stderr), (0, ""))
        self.assertEqual([p["name"] for p in json.loads(result.stdout)], ["p"])

    def test_exit_1_with_one_line_per_error(self):
        with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
            f.write(TFJOB.replace("ps:\n      replicas: 2", "ps:\n      replicas: 1"))
        self.addCleanup(os.unlink, f.name)
        result = self.run_tool("--registry", "reg.example.com/team", "--namespace", "x", f.name)
        self.assertEqual(result.returncode, 1)
        errors = [line for line in result.stderr.splitlines() if not line.startswith("warning:")]
        self.assertEqual(errors, [
            f"pod ns/job-{n} container {c}: image '{i}' is not from registry reg.example.com/team/"
            for n, c, i in (("chief-0", "tensorflow", "reg/app:1"), ("chief-0", "sidecar", "reg/side:1"),
                            ("ps-0", "tensorflow", "reg/app:1"), ("evaluator-0", "tensorflow", "reg/app:1"))])

    def test_hosts(self):
        result = self.run_tool("--hosts", "-", stdin=HEADLESS)
        self.assertEqual(result.returncode, 0)
        self.assertEqual(json.loads(result.stdout)["ps-1.ps"], "ps-1")

    def test_node_allocatable_flags(self):
        text = pod_with("env: [{name: CPU, valueFrom: {resourceFieldRef: {resource: limits.cpu}}},"
                        " {name: MEM, valueFrom: {resourceFieldRef: {resource: limits.memory, divisor: 1Gi}}}]")
        result = self.run_tool("--node-cpus", "3500m", "--node-memory", "8Gi", "-", stdin=text)
        self.assertEqual(json.loads(result.stdout)[0]["containers"][0]["env"], {"CPU": "4", "MEM": "8"})

    def test_usage_errors_exit_2_naming_the_bad_value(self):
        cases = [(("--node-cpus", "lots", "-"), "'lots' is not a quantity"),
                 (("--bogus", "-"), "--bogus"),
                 (("/no/such/file.yaml",), "/no/such/file.yaml: cannot read"),
                 (("-",), "-: not YAML")]
        for args, message in cases:
            result = self.run_tool(*args, stdin="a: [1,\n")
            self.assertEqual(result.returncode, 2, args)
            self.assertIn(message, result.stderr, args)

    def test_help(self):
        result = self.run_tool("--help")
        self.assertEqual(result.returncode, 0)
        self.assertIn("--registry PREFIX", result.stdout)


if __name__ == "__main__":
    unittest.main()
