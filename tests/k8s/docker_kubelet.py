"""Runs resolved pods (the output of tests/k8s/kubelet_resolve.py) as
containers on a Docker engine, the way a kubelet and the StatefulSet
controller run them; used by tests/k8s/docker_runs.py.

A pod is a sandbox container that holds the pod's network namespace (its IP,
its hostname, the DNS name its headless Service gives it, the cluster's DNS
search path), and one container per container of the pod, joined to the
sandbox's network (`--network container:SANDBOX`), as the kubelet's
dockershim ran pods. Names follow dockershim's, k8s_POD_<pod>_<ns>_<uid>_0
and k8s_<container>_<pod>_<ns>_<uid>_<restarts>: they are not DNS names,
so nothing resolves a pod by them.

Each container gets the resolved image (which must be in the engine: no
pulls, so imagePullPolicy Always is refused), its argv as Kubernetes builds
it (command replaces the image's entrypoint, args its arguments), its env,
the user, groups, capabilities, no_new_privileges and read-only root of its
security context, its memory and CPU limits and CPU shares from its CPU
request, and its mounts:
  * emptyDir: a folder of the pod, mode 0777 (the kubelet's), owned by the
    pod's fsGroup when it has one; a new pod gets new ones;
  * persistentVolumeClaim: the folder the caller gives for the claim (a
    provisioned volume), owned by the pod's fsGroup (group rw, setgid
    folders: the kubelet's volume ownership) when the pod has one and
    mounts it writable;
  * configMap, secret, downwardAPI, projected: a folder of the pod holding
    the resolved files (mode 0644), mounted read-only;
  * subPath: that part of the volume.

DNS as a cluster's: each pod's <hostname>.<subdomain>.<ns>.svc.cluster.local
is a network alias of its sandbox, and nothing shorter is; the search path
<ns>.svc.cluster.local svc.cluster.local cluster.local and ndots:5 complete
short names (ps-0.ps) as a pod's resolv.conf does. A headless Service's
names resolve before the pod is ready only with publishNotReadyAddresses;
without it the alias waits for Ready (a new sandbox, joined again).

The kubelet's loop (sync, about every 0.5 s): a container that exits is
started again as the pod's restartPolicy says (Always; OnFailure after a
non-zero code; Never: not again), as a new container, after the kubelet's
back-off (the first restart at once, then 10 s, 20 s, ... up to 300 s; reset
after 10 minutes up). The logs of every instance are kept (`kubectl logs
--previous`). Init containers run first, in order, each to exit 0. Probes run
on threads of their own, as the kubelet's probe workers: initialDelaySeconds,
periodSeconds, timeoutSeconds, successThreshold, failureThreshold; exec in
the container, gRPC through pscluster-health-probe (the image's, or a host
binary given, against the pod IP), httpGet and tcpSocket from this host to the
pod IP. Readiness makes the pod Ready; a liveness probe that fails its
threshold stops the container (its grace period) and the restart policy
applies.

Deleting a pod stops its containers (SIGTERM, then SIGKILL after the grace
period; at once when forced), records their exit codes and removes the
sandbox and its emptyDirs; a StatefulSet's pod is then made again under the
same name, with a new uid, a new IP, new emptyDirs and the same claims, as
the StatefulSet controller does, unless the StatefulSet was scaled down
(the highest ordinals go, and are not made again). A scale-up is start_pod
of the pod the larger StatefulSet has.

Not done, on purpose: scheduling (every pod runs on this host, whatever it
requests; a pod asking for nvidia.com/gpu is refused, as no node here has
one), pulling images, the Service environment variables
(enableServiceLinks), the service-account token.
"""
import base64
import json
import os
import shutil
import socket
import subprocess
import threading
import time
import urllib.request
import uuid

CLUSTER_DOMAIN = "cluster.local"
BACKOFF_START_S, BACKOFF_MAX_S, BACKOFF_RESET_S = 10, 300, 600


class PodError(Exception):
    """A pod the kubelet would not start: its message names the pod and why."""


def parse_quantity(text, scale=1):
    """A resource quantity ("500m", "2", "4Gi", "1G") as a number (times SCALE for CPU)."""
    text = str(text)
    suffixes = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 10**3, "M": 10**6, "G": 10**9,
                "T": 10**12, "m": 1e-3}
    for suffix, factor in sorted(suffixes.items(), key=lambda kv: -len(kv[0])):
        if text.endswith(suffix):
            return float(text[:-len(suffix)]) * factor * scale
    return float(text) * scale


class Container:
    """One container of a pod: its resolved spec and its instances."""

    def __init__(self, spec):
        self.spec = spec
        self.restarts = 0          # instances started after the first
        self.docker_name = None    # the current instance's
        self.state = "waiting"     # waiting | running | exited
        self.started_at = None
        self.exits = []            # (time, exit code) of every instance that ended
        self.next_start = 0.0      # when a restart is due (back-off)
        self.backoff_steps = 0     # restarts since the back-off was last reset
        self.handled_exit = None   # the docker name whose exit was handled
        self.ready = False
        self.liveness_kills = 0
        self.logs = []             # the logs of the instances that ended


class Pod:
    """A pod as the kubelet holds it."""

    def __init__(self, spec, ip):
        self.spec = spec
        self.name = spec["name"]
        self.ns = spec["namespace"]
        self.uid = str(uuid.uuid4())
        self.ip = ip
        self.sandbox = "k8s_POD_%s_%s_%s_0" % (self.name, self.ns, self.uid[:8])
        self.volume_dirs = {}
        self.init = [Container(c) for c in spec["containers"] if c["init"]]
        self.containers = [Container(c) for c in spec["containers"] if not c["init"]]
        self.init_done = not self.init
        self.ready_at = None           # the first time every container was ready
        self.failed = None             # why the pod failed (restartPolicy Never, or a setup error)
        self.deleted = False
        self.probes = []               # threads
        self.stop = threading.Event()
        self.aliased = False           # the DNS alias is set

    def fqdns(self):
        """The names headless Services give the pod, with whether each
        resolves before the pod is ready."""
        return [(record["names"][-1], record["publishNotReadyAddresses"]) for record in self.spec["services"]]


class DockerKubelet:
    """The pods given to run(), on the Docker engine `docker` talks to, in a
    network of their own. Thread-safe where it needs to be: probes run on
    threads of their own."""

    def __init__(self, docker, work, network, subnet, claims, probe_binary=None, log=print):
        """WORK: a folder for the pods' volumes and logs. NETWORK, SUBNET
        (a /24, like "10.231.30.0/24"): the pods' network, made here. CLAIMS:
        claim name -> folder (the provisioned volumes). PROBE_BINARY: a
        pscluster-health-probe on this host for gRPC probes (else the one in
        the container's image). LOG: where notes go."""
        self.docker = docker
        self.work = work
        self.network = network
        self.subnet = subnet
        self.prefix = subnet.split("/")[0].rsplit(".", 1)[0]
        self.claims = claims
        self.probe_binary = probe_binary
        self.log = log
        self.pods = {}
        self.next_ip = 10
        self.lock = threading.RLock()
        os.makedirs(work, exist_ok=True)
        self.sh("network", "create", "--subnet", subnet, "--gateway", self.prefix + ".1", network)

    # --- Docker

    def sh(self, *args, check=True, timeout=120, input=None):
        r = subprocess.run([self.docker] + list(args), capture_output=True, text=True, timeout=timeout,
                           input=input)
        if check and r.returncode != 0:
            raise PodError("docker %s: %s" % (" ".join(args[:3]), (r.stderr or r.stdout).strip()[-400:]))
        return r

    def docker_logs(self, name):
        """A container's output, stdout and stderr as they came ("" once it
        is gone)."""
        r = subprocess.run([self.docker, "logs", name], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, errors="replace", timeout=60)
        return r.stdout if r.returncode == 0 else ""

    def event(self, pod, what):
        self.log("kubelet: pod %s: %s" % (pod, what))

    # --- Pods

    def run(self, pods):
        """Starts every pod of PODS (resolved pods), all at once, as
        StatefulSets with podManagementPolicy Parallel and bare pods start."""
        for spec in pods:
            self.start_pod(spec)

    def allocate_ip(self):
        with self.lock:
            ip = "%s.%d" % (self.prefix, self.next_ip)
            self.next_ip += 1
            if self.next_ip > 250:
                raise PodError("no addresses left in %s" % self.subnet)
            return ip

    def start_pod(self, spec):
        pod = Pod(spec, self.allocate_ip())
        with self.lock:
            self.pods[pod.name] = pod
        try:
            self.check_pod(pod)
            self.setup_volumes(pod)
            self.start_sandbox(pod, alias=self.alias_before_ready(pod))
        except PodError as e:
            pod.failed = str(e)
            self.event(pod.name, "not started: %s" % e)
            return pod
        self.event(pod.name, "sandbox up at %s (uid %s)" % (pod.ip, pod.uid[:8]))
        for c in pod.init + pod.containers:
            for kind in ("readinessProbe", "livenessProbe", "startupProbe"):
                if c.spec.get(kind) and not c.spec["init"]:
                    t = threading.Thread(target=self.probe_worker, args=(pod, c, kind), daemon=True)
                    pod.probes.append(t)
                    t.start()
        return pod

    def check_pod(self, pod):
        for c in pod.init + pod.containers:
            image = c.spec["image"]
            if c.spec["imagePullPolicy"] == "Always":
                raise PodError("container %s: imagePullPolicy Always: this kubelet pulls nothing" % c.spec["name"])
            inspect = self.sh("image", "inspect", image, check=False)
            if inspect.returncode != 0:
                raise PodError("container %s: image %s is not in the engine (ErrImageNeverPull/ErrImagePull)"
                               % (c.spec["name"], image))
            limits = c.spec["resources"].get("limits") or {}
            if any(k.endswith("/gpu") for k in limits):
                raise PodError("container %s asks for %s: no node here has one (Pending)" %
                               (c.spec["name"], [k for k in limits if k.endswith("/gpu")]))
            sc = c.spec["securityContext"]
            if sc.get("runAsNonRoot"):
                user = sc.get("runAsUser")
                if user is None:
                    user = json.loads(inspect.stdout)[0]["Config"].get("User") or "0"
                    user = user.split(":")[0]
                    if not user.isdigit():
                        raise PodError("container %s: runAsNonRoot and image user %r is not numeric "
                                       "(CreateContainerConfigError)" % (c.spec["name"], user))
                if int(user) == 0:
                    raise PodError("container %s: runAsNonRoot, but it would run as root "
                                   "(CreateContainerConfigError)" % c.spec["name"])

    def fs_group(self, pod):
        for c in pod.containers + pod.init:
            groups = c.spec["securityContext"].get("supplementalGroups")
            if groups:
                return groups[0]  # the resolver puts the pod's fsGroup first
        return None

    def setup_volumes(self, pod):
        """Every volume a container mounts: a folder here."""
        root = os.path.join(self.work, "pods", pod.uid)
        group = self.fs_group(pod)
        for c in pod.init + pod.containers:
            for m in c.spec["mounts"]:
                v = m["volume"]
                key = json.dumps(v, sort_keys=True)
                if key in pod.volume_dirs:
                    continue
                kind = v["kind"]
                if kind == "persistentVolumeClaim":
                    d = self.claims.get(v["claimName"])
                    if d is None:
                        raise PodError("claim %s is not bound to a volume here" % v["claimName"])
                    if group is not None and not (m["readOnly"] or v.get("readOnly")):
                        own(d, group)
                else:
                    d = os.path.join(root, "volumes", "%d-%s" % (len(pod.volume_dirs), kind))
                    os.makedirs(d)
                    if kind == "emptyDir":
                        os.chmod(d, 0o777)
                        if group is not None:
                            own(d, group)
                    elif "files" in v:
                        write_files(d, v["files"])
                    elif kind == "hostPath":
                        d = v["path"]
                    else:
                        raise PodError("volume kind %s: not set up by this kubelet" % kind)
                pod.volume_dirs[key] = d

    def alias_before_ready(self, pod):
        return all(published for _, published in pod.fqdns())

    def start_sandbox(self, pod, alias):
        """The pod's network namespace: its IP, hostname, DNS name (ALIAS:
        with the Services' names) and search path; held by a process that
        sleeps."""
        spec = pod.spec
        image = pod.containers[0].spec["image"]
        ns = pod.ns
        argv = ["run", "-d", "--name", pod.sandbox, "--network", self.network, "--ip", pod.ip,
                "--hostname", spec["hostname"], "--label", "pscluster-k8s-pod=%s" % pod.name,
                "--entrypoint", "sleep", "--user", "65535:65535"]
        if spec.get("subdomain"):
            argv += ["--domainname", "%s.%s.svc.%s" % (spec["subdomain"], ns, CLUSTER_DOMAIN)]
        for domain in ("%s.svc.%s" % (ns, CLUSTER_DOMAIN), "svc." + CLUSTER_DOMAIN, CLUSTER_DOMAIN):
            argv += ["--dns-search", domain]
        argv += ["--dns-option", "ndots:5"]
        if alias:
            for name, _ in pod.fqdns():
                argv += ["--network-alias", name]
            pod.aliased = True
        self.sh(*(argv + [image, "infinity"]))

    def docker_args(self, pod, c):
        """`docker create` arguments for an instance of container C."""
        s = c.spec
        name = "k8s_%s_%s_%s_%s_%d" % (s["name"], pod.name, pod.ns, pod.uid[:8], c.restarts)
        argv = ["create", "--name", name, "--network", "container:" + pod.sandbox,
                "--label", "pscluster-k8s-pod=%s" % pod.name, "--label", "pscluster-k8s-container=" + s["name"]]
        sc = s["securityContext"]
        if sc.get("runAsUser") is not None:
            argv += ["--user", "%s%s" % (sc["runAsUser"],
                                         ":%s" % sc["runAsGroup"] if sc.get("runAsGroup") is not None else "")]
        for g in sc.get("supplementalGroups") or []:
            argv += ["--group-add", str(g)]
        if sc.get("readOnlyRootFilesystem"):
            argv.append("--read-only")
        if sc.get("allowPrivilegeEscalation") is False:
            argv += ["--security-opt", "no-new-privileges"]
        if sc.get("privileged"):
            argv.append("--privileged")
        caps = sc.get("capabilities") or {}
        for cap in caps.get("drop") or []:
            argv += ["--cap-drop", cap]
        for cap in caps.get("add") or []:
            argv += ["--cap-add", cap]
        limits = s["resources"].get("limits") or {}
        requests = s["resources"].get("requests") or {}
        if "memory" in limits:
            argv += ["--memory", str(int(parse_quantity(limits["memory"])))]
        if "cpu" in limits:
            argv += ["--cpus", "%.3f" % parse_quantity(limits["cpu"])]
        cpu = requests.get("cpu", limits.get("cpu"))
        if cpu is not None:  # the kubelet's cpu.shares: milli-CPUs * 1024 / 1000, at least 2
            argv += ["--cpu-shares", str(max(2, int(parse_quantity(cpu, 1024))))]
        for k, v in sorted(s["env"].items()):
            argv += ["--env", "%s=%s" % (k, v)]
        for m in s["mounts"]:
            d = pod.volume_dirs[json.dumps(m["volume"], sort_keys=True)]
            if m["subPath"]:
                d = os.path.join(d, m["subPath"])
                os.makedirs(d, exist_ok=True)
            ro = m["readOnly"] or m["volume"].get("readOnly") or m["volume"]["kind"] in (
                "configMap", "secret", "downwardAPI", "projected")
            argv += ["--mount", "type=bind,source=%s,target=%s%s" % (d, m["path"], ",readonly" if ro else "")]
        if s.get("workingDir"):
            argv += ["--workdir", s["workingDir"]]
        if s["command"] is not None:
            argv += ["--entrypoint", s["command"][0], s["image"]] + s["command"][1:] + s["args"]
        else:
            argv += [s["image"]] + s["args"]
        return name, argv

    def start_container(self, pod, c):
        name, argv = self.docker_args(pod, c)
        self.sh(*argv)
        self.sh("start", name)
        with self.lock:
            c.docker_name, c.state, c.started_at = name, "running", time.time()
            # Without a readiness probe a running container is ready.
            c.ready = not c.spec.get("readinessProbe")

    # --- The sync loop

    def sync(self):
        """One pass of the kubelet's loop over every pod."""
        with self.lock:
            pods = [p for p in self.pods.values() if not p.deleted and not p.failed]
        # Every container of these pods (`docker inspect` of a list fails
        # as a whole when one is gone); one that is gone is seen as exited.
        ids = self.sh("ps", "-aq", "--no-trunc", "--filter", "label=pscluster-k8s-container", check=False).stdout.split()
        states = {}
        if ids:
            r = self.sh("inspect", *ids, check=False)
            for item in json.loads(r.stdout or "[]"):
                states[item["Name"].lstrip("/")] = item["State"]
        for p in pods:
            for c in p.init + p.containers:
                if c.docker_name and c.docker_name not in states:
                    states[c.docker_name] = {"Status": "exited", "ExitCode": -1, "Gone": True}
        now = time.time()
        for pod in pods:
            try:
                self.sync_pod(pod, states, now)
            except PodError as e:
                pod.failed = str(e)
                self.event(pod.name, "failed: %s" % e)

    def sync_pod(self, pod, states, now):
        if not pod.init_done:
            c = next(c for c in pod.init if not c.exits or c.exits[-1][1] != 0)
            if self.sync_container(pod, c, states, now, init=True):
                pod.init_done = all(c.exits and c.exits[-1][1] == 0 for c in pod.init)
            return
        for c in pod.containers:
            self.sync_container(pod, c, states, now)
        if pod.ready_at is None and all(c.ready for c in pod.containers):
            pod.ready_at = now
            self.event(pod.name, "Ready")
        if not pod.aliased and all(c.ready for c in pod.containers):
            # Names of Services without publishNotReadyAddresses: now.
            self.sh("network", "disconnect", self.network, pod.sandbox)
            argv = ["network", "connect", "--ip", pod.ip]
            for name, _ in pod.fqdns():
                argv += ["--alias", name]
            self.sh(*(argv + [self.network, pod.sandbox]))
            pod.aliased = True

    def sync_container(self, pod, c, states, now, init=False):
        """Starts, notes the exit of, or restarts container C. True when
        an init container has just exited 0."""
        if c.docker_name is None:
            self.start_container(pod, c)
            return False
        st = states.get(c.docker_name)
        if st is None or st["Status"] not in ("exited", "dead"):
            return False
        if c.handled_exit != c.docker_name:
            code = st["ExitCode"]
            c.handled_exit = c.docker_name
            with self.lock:
                c.state, c.ready = "exited", False
                c.exits.append((now, code))
            c.logs.append(self.docker_logs(c.docker_name))
            self.event(pod.name, "container %s %s%s" % (
                c.spec["name"], "is gone (removed behind the kubelet's back)" if st.get("Gone") else "exited %d" % code,
                " (OOMKilled)" if st.get("OOMKilled") else ""))
            policy = pod.spec["restartPolicy"]
            if init and code == 0:
                return True
            if policy == "Never" or (policy == "OnFailure" and code == 0):
                if code != 0:
                    pod.failed = "container %s exited %d, restartPolicy %s" % (c.spec["name"], code, policy)
                return False
            if now - (c.started_at or now) > BACKOFF_RESET_S:
                c.backoff_steps = 0
            n = c.backoff_steps
            delay = 0 if n == 0 else min(BACKOFF_START_S * 2 ** (n - 1), BACKOFF_MAX_S)
            c.backoff_steps = n + 1
            c.next_start = now + delay
            if delay:
                self.event(pod.name, "container %s: back-off %d s before restarting" % (c.spec["name"], delay))
        if now >= c.next_start and c.state == "exited":
            self.sh("rm", c.docker_name, check=False)
            c.restarts += 1
            self.start_container(pod, c)
            self.event(pod.name, "container %s restarted (%d)" % (c.spec["name"], c.restarts))
        return False

    def wait(self, until, timeout, every=0.5):
        """Runs the loop until UNTIL() is true (True) or TIMEOUT seconds pass
        (False)."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            self.sync()
            if until():
                return True
            time.sleep(every)
        return False

    # --- Probes

    def probe_worker(self, pod, c, kind):
        """A probe of container C, as the kubelet's probe worker runs it."""
        p = c.spec[kind]
        period = p.get("periodSeconds", 10)
        timeout = p.get("timeoutSeconds", 1)
        success_threshold = p.get("successThreshold", 1)
        failure_threshold = p.get("failureThreshold", 3)
        instance, successes, failures = None, 0, 0
        while not pod.stop.is_set():
            with self.lock:
                name, state, started = c.docker_name, c.state, c.started_at
            if state != "running":
                pod.stop.wait(0.5)
                continue
            if name != instance:  # a new instance: its probes start over
                instance, successes, failures = name, 0, 0
                delay = started + p.get("initialDelaySeconds", 0) - time.time()
                if delay > 0 and pod.stop.wait(delay):
                    return
            ok = self.probe(pod, c, p, timeout)
            with self.lock:
                if c.docker_name != instance or c.state != "running":
                    continue
                if ok:
                    successes, failures = successes + 1, 0
                    if kind == "readinessProbe" and successes >= success_threshold:
                        c.ready = True
                else:
                    successes, failures = 0, failures + 1
                    if kind == "readinessProbe" and failures >= failure_threshold:
                        c.ready = False
            if kind == "livenessProbe" and failures >= failure_threshold:
                c.liveness_kills += 1
                self.event(pod.name, "container %s failed its liveness probe %d times: stopped" %
                           (c.spec["name"], failures))
                grace = pod.spec.get("terminationGracePeriodSeconds", 30)
                self.sh("stop", "-t", str(grace), instance, check=False, timeout=grace + 60)
                failures = 0
            pod.stop.wait(period)

    def probe(self, pod, c, p, timeout):
        """One probe: True when it passes."""
        try:
            if p.get("exec"):
                r = self.sh("exec", c.docker_name, *p["exec"]["command"], check=False, timeout=timeout + 30)
                return r.returncode == 0
            if p.get("grpc"):
                port = p["grpc"]["port"]
                argv = ["%s:%d" % (pod.ip, port), "--service=%s" % p["grpc"].get("service", ""),
                        "--timeout_ms=%d" % (timeout * 1000)]
                if self.probe_binary:
                    r = subprocess.run([self.probe_binary] + argv, capture_output=True, timeout=timeout + 30)
                else:
                    r = self.sh("exec", c.docker_name, "pscluster-health-probe", *argv, check=False,
                                timeout=timeout + 30)
                return r.returncode == 0
            if p.get("tcpSocket"):
                with socket.create_connection((pod.ip, port_number(c, p["tcpSocket"]["port"])), timeout):
                    return True
            if p.get("httpGet"):
                g = p["httpGet"]
                url = "%s://%s:%d%s" % (g.get("scheme", "HTTP").lower(), pod.ip, port_number(c, g["port"]),
                                        g.get("path", "/"))
                with urllib.request.urlopen(url, timeout=timeout) as r:
                    return 200 <= r.status < 400
        except (OSError, subprocess.TimeoutExpired):
            return False
        return False

    # --- What kubectl would do

    def pod(self, name):
        with self.lock:
            return self.pods.get(name)

    def logs(self, name, container=None):
        """The logs of every instance of the pod's container (its first
        when CONTAINER is None), oldest first."""
        c = self.container_of(name, container)
        if c is None:
            return ""
        text = "".join(c.logs)
        if c.docker_name and c.handled_exit != c.docker_name:
            text += self.docker_logs(c.docker_name)
        return text

    def container_of(self, name, container=None):
        pod = self.pod(name)
        return next((c for c in pod.containers if container in (None, c.spec["name"])), None) if pod else None

    def exec_(self, name, *argv, input=b"", container=None):
        """`kubectl exec -i POD -- ARGV` with INPUT (bytes) on its stdin: the
        completed process, its output as bytes."""
        c = self.container_of(name, container)
        if c is None or c.state != "running":
            raise PodError("pod %s has no running container%s" % (name, "" if container is None else " " + container))
        return subprocess.run([self.docker, "exec", "-i", c.docker_name] + list(argv), input=input,
                              capture_output=True, timeout=600)

    def delete(self, name, grace=None, recreate=True):
        """`kubectl delete pod NAME` (GRACE 0: --grace-period=0 --force):
        its containers stopped, the sandbox and emptyDirs removed; a
        StatefulSet's pod made again (new uid, IP and emptyDirs, the same
        claims) when RECREATE; RECREATE False: a StatefulSet scaled down.
        The new pod, or None."""
        pod = self.pod(name)
        if pod is None:
            raise PodError("no pod %s" % name)
        pod.deleted = True
        pod.stop.set()
        if grace is None:
            grace = pod.spec.get("terminationGracePeriodSeconds", 30)
        for c in pod.containers + pod.init:
            if c.docker_name:
                if grace == 0:
                    self.sh("kill", c.docker_name, check=False)
                else:
                    self.sh("stop", "-t", str(grace), c.docker_name, check=False, timeout=grace + 60)
                if c.handled_exit != c.docker_name:
                    # Its end, as `kubectl get pod -o yaml` shows it while
                    # the pod terminates: the exit code after SIGTERM.
                    r = self.sh("inspect", "-f", "{{.State.ExitCode}}", c.docker_name, check=False)
                    with self.lock:
                        c.state, c.ready, c.handled_exit = "exited", False, c.docker_name
                        if r.returncode == 0 and r.stdout.strip().lstrip("-").isdigit():
                            c.exits.append((time.time(), int(r.stdout)))
                    c.logs.append(self.docker_logs(c.docker_name))
                    self.event(name, "container %s exited %s (deleted)" % (
                        c.spec["name"], r.stdout.strip() if r.returncode == 0 else "?"))
                self.sh("rm", "-f", c.docker_name, check=False)
        self.sh("rm", "-f", pod.sandbox, check=False)
        shutil.rmtree(os.path.join(self.work, "pods", pod.uid), ignore_errors=True)
        self.event(name, "deleted%s" % (" (grace period 0, forced)" if grace == 0 else ""))
        if recreate and pod.spec["kind"] == "StatefulSet":
            return self.start_pod(pod.spec)
        with self.lock:
            del self.pods[name]
        return None

    def teardown(self):
        """Every pod and the network removed."""
        with self.lock:
            pods = list(self.pods.values())
        for pod in pods:
            pod.stop.set()
        r = self.sh("ps", "-aq", "--filter", "label=pscluster-k8s-pod", check=False)
        ids = r.stdout.split()
        if ids:
            self.sh("rm", "-f", *ids, check=False, timeout=300)
        self.sh("network", "rm", self.network, check=False)


def port_number(c, port):
    """A probe's port: a number, or the name of one of the container's ports."""
    if isinstance(port, int) or str(port).isdigit():
        return int(port)
    for p in c.spec["ports"]:
        if p["name"] == port:
            return int(p["containerPort"])
    raise OSError("no port named %s" % port)


def own(d, group):
    """The kubelet's volume ownership for fsGroup GROUP: everything under D
    in GROUP, group read-write, folders setgid."""
    for root, dirs, files in os.walk(d):
        for path in [root] + [os.path.join(root, f) for f in files]:
            if os.path.islink(path):
                continue
            os.chown(path, -1, group)
            mode = os.stat(path).st_mode
            add = 0o2070 if os.path.isdir(path) else 0o060
            os.chmod(path, mode | add)


def write_files(d, files):
    """The files of a ConfigMap, Secret or downward API volume, mode 0644."""
    os.chmod(d, 0o755)
    for rel, content in files.items():
        path = os.path.join(d, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        data = base64.b64decode(content["base64"]) if isinstance(content, dict) else content.encode()
        with open(path, "wb") as f:
            f.write(data)
        os.chmod(path, 0o644)
