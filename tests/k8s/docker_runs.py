#!/usr/bin/env python3
"""The Kubernetes pods of deploy/k8s/cpu, made as docs/deploy-k8s.md makes
them and run on a real Docker engine as a kubelet would run them
(tests/k8s/docker_kubelet.py), five times:

  A. the clean run: the registry named by the docs' sed, `epochs: "2"` in
     settings/chief.yaml; the data loaded as the docs load it (the
     data-loader pod, `kubectl cp` = tar through `kubectl exec`, the pod
     deleted), then deploy/k8s/cpu: every pod Ready, no restart before the
     chief's final line, test accuracy >= 0.985, epochs=2 reaching the
     chief's log, and the results fetched as "Your results" says (the
     weights through the chief pod, TensorBoard files on the runs volume);
  B. `ps_replicas: "1"` in settings/chief.yaml, 2 epochs: pod ps-1
     deleted with --grace-period=0 --force once the chief trains; the
     StatefulSet makes it again (new IP, new emptyDir), the chief hands its
     shards to the backup and, when the new pod is up while training goes
     on, back to it by its DNS name; the run ends with its final line,
     >= 0.985;
  C. the worker count in base/kustomization.yaml, replicas and
     max_workers, made 3: 7 pods, worker-2 trains, final line >= 0.98;
  D. a live resize: 1 worker of max_workers 2 at apply, 3 epochs; once the
     chief trains, `kubectl scale statefulset/worker --replicas=2` (pod
     worker-1 made and started as the controller and the kubelet would),
     and 20 steps after it joined, back to 1 (worker-1 deleted: SIGTERM,
     its grace period): the chief logs that it started with worker-0 alone,
     worker 1 joining and leaving; worker-1 left after its step and exited
     0, once; no other container exited nor pod was made again until the
     leave; final line >= 0.98;
  E. a live resize of the ps: 2 ps of max_ps 3 at apply, 3 epochs; once
     the chief trains, `kubectl scale statefulset/ps --replicas=3` (pod
     ps-2 made and started), and 20 steps after the shards were placed over
     3 ps, back to 2 (ps-2 deleted: SIGTERM): the chief logs the add and the
     drain, in that order, and what each move paused; ps-2 trained, was
     drained and exited 0, once; no other container exited nor pod was made
     again; final line >= 0.98.

Usage: docker_runs.py --repo R --work DIR --image IMAGE --data MNIST_DIR
         [--docker /usr/bin/docker] [--subnet 10.231.30.0/24] [--probe PATH]
         [--limit SECONDS]
(tests/docker_run_test.sh runs it against its private daemon, with the CPU
image it built.) Prints PASS:/FAIL: lines and notes; exit 1 when a check
failed, 2 for bad arguments.
"""
import argparse
import io
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tarfile
import time

import user_copy
from docker_kubelet import DockerKubelet, PodError

REGISTRY = "registry.example.com/team"
FINAL = re.compile(r"^final: .*$", re.M)
TRAINING = re.compile(r"epoch \d+/\d+ step [1-9]")
failed = 0


def report(ok, what, why=""):
    global failed
    print("%s: k8s on Docker: %s%s" % ("PASS" if ok else "FAIL", what, "" if ok else ": " + str(why)), flush=True)
    failed += not ok
    return ok


def note(what):
    print("docker_runs: " + what, flush=True)


class Setup:
    """One user's copy of deploy/k8s, its pods resolved."""

    def __init__(self, args, label, counts=None, settings=None, max_workers=None, max_ps=None):
        self.dir = os.path.join(args.work, label)
        shutil.rmtree(self.dir, ignore_errors=True)
        os.makedirs(self.dir)
        k8s = user_copy.copy_k8s(args.repo, self.dir)
        problems = [user_copy.docs_sed(args.repo, k8s, "settings/kustomization.yaml"),
                    user_copy.set_counts(k8s, **(counts or {})),
                    user_copy.set_chief_settings(k8s, settings or {}),
                    max_workers and user_copy.set_max_workers(k8s, max_workers),
                    max_ps and user_copy.set_max_ps(k8s, max_ps)]
        self.pods, self.rendered = {}, {}
        for path in ("cpu", "data-loader"):
            out, why = user_copy.kustomize(os.path.join(k8s, path), os.path.join(self.dir, path + ".yaml"))
            pods, why = user_copy.resolve([out], REGISTRY) if out else (None, why)
            problems.append(why)
            self.pods[path] = pods or []
            self.rendered[path] = out
        problems = [p for p in problems if p]
        self.ok = report(not problems, "%s: deploy/k8s/cpu and data-loader made as the docs say and resolved "
                         "(images from %s)" % (label, REGISTRY), "; ".join(problems))


def final_line(kubelet):
    m = FINAL.findall(kubelet.logs("chief-0"))
    return m[-1] if m else None


def clock(log, text):
    """The time of day, in seconds, of the first line of LOG holding TEXT
    ("HH:MM:SS.mmm I task] ..."), or None."""
    for line in log.splitlines():
        m = re.match(r"(\d\d):(\d\d):(\d\d\.\d+) ", line)
        if m and text in line:
            return int(m.group(1)) * 3600 + int(m.group(2)) * 60 + float(m.group(3))
    return None


def accuracy(line):
    m = re.search(r"test_accuracy=([0-9.]+)", line or "")
    return float(m.group(1)) if m else 0.0


def cp_out(kubelet, pod, path):
    """`kubectl cp POD:PATH .`: tar through `kubectl exec`, as kubectl does;
    the file's bytes."""
    r = kubelet.exec_(pod, "tar", "-cf", "-", "-C", os.path.dirname(path), os.path.basename(path))
    if r.returncode != 0:
        raise PodError("kubectl cp %s:%s: %s" % (pod, path, r.stderr.decode(errors="replace").strip()))
    with tarfile.open(fileobj=io.BytesIO(r.stdout)) as t:
        return t.extractfile(os.path.basename(path)).read()


def load_data(args, kubelet, setup):
    """The docs' data steps: apply deploy/k8s/data-loader, wait for Ready,
    `kubectl cp data/mnist data-loader:/data/mnist`, delete the pod."""
    kubelet.run(setup.pods["data-loader"])
    loader = lambda: kubelet.pod("data-loader")  # noqa: E731
    if not report(kubelet.wait(lambda: loader().failed or loader().ready_at, 120) and not loader().failed,
                  "the data-loader pod is Ready", loader().failed or "not Ready within 120 s"):
        return False
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        t.add(args.data, arcname="mnist")
    r = kubelet.exec_("data-loader", "tar", "-xf", "-", "-C", "/data", input=buf.getvalue())
    ok = report(r.returncode == 0, "kubectl cp %s data-loader:/data/mnist (tar through exec, as uid 10001)" %
                args.data, r.stderr.decode(errors="replace").strip())
    t0 = time.time()
    kubelet.delete("data-loader")
    report(time.time() - t0 < 10, "kubectl delete pod data-loader returns at once (it stops on SIGTERM)",
           "took %.0f s: its process ignores SIGTERM, and the kubelet waits out the grace period" %
           (time.time() - t0))
    return ok


def train(args, kubelet, setup, label, during=None):
    """Runs deploy/k8s/cpu's pods until the chief's final line (or the
    limit); DURING(kubelet) is called every loop while it trains. The time
    the final line came, or None after a failed check."""
    kubelet.run(setup.pods["cpu"])
    t0 = time.time()
    state = {"next": 0.0, "final": None}

    def done():
        if time.time() < state["next"]:
            return False
        state["next"] = time.time() + 2
        log = kubelet.logs("chief-0")
        if during and TRAINING.search(log):
            during(kubelet)
        if FINAL.search(log):
            state["final"] = time.time()
            return True
        return bool(kubelet.pod("chief-0").failed)

    if not kubelet.wait(done, args.limit) or state["final"] is None:
        pods = {n: (p.failed or "restarts %s" % [c.restarts for c in p.containers]) for n, p in kubelet.pods.items()}
        report(False, "%s: the chief's final line within %d s" % (label, args.limit),
               "pods: %s; the chief's last lines: %s" % (pods, kubelet.logs("chief-0")[-800:]))
        return None
    note("%s: final line after %.0f s" % (label, state["final"] - t0))
    return state["final"]


def check_final(label, kubelet, minimum):
    line = final_line(kubelet)
    report(line and accuracy(line) >= minimum, "%s: the chief's %s (>= %s)" % (label, line, minimum),
           line or "no final line")


def check_pods(label, kubelet, names, final_at, restarted=()):
    """Every pod of NAMES Ready at some point; no container of theirs (but
    RESTARTED's) exited non-zero or failed its liveness probe before the
    final line (the ps, workers and evaluator exit 0 when the chief stops
    them, just before it, and their StatefulSets start them again)."""
    pods = {n: kubelet.pod(n) for n in names}
    missing = [n for n, p in pods.items() if p is None or p.failed]
    not_ready = [n for n, p in pods.items() if p and p.ready_at is None]
    report(not missing and not not_ready, "%s: every pod (%s) started and became Ready" % (label, ", ".join(names)),
           "failed or missing: %s; never Ready: %s" % ([(n, pods[n] and pods[n].failed) for n in missing],
                                                      not_ready))
    early = ["%s container %s exited %d" % (n, c.spec["name"], code)
             for n, p in pods.items() if p and n not in restarted
             for c in p.containers for (t, code) in c.exits if t < final_at and code != 0]
    early += ["%s failed its liveness probe" % n for n, p in pods.items() if p
              for c in p.containers if c.liveness_kills]
    report(not early, "%s: no container exited non-zero or failed its liveness probe before the final line" % label, early)


def run_clean(args):
    label = "A (clean, epochs=2 from settings/chief.yaml)"
    setup = Setup(args, "clean", settings={"epochs": 2})
    if not setup.ok:
        return
    kubelet = new_kubelet(args, "clean")
    try:
        if not load_data(args, kubelet, setup):
            return
        final_at = train(args, kubelet, setup, label)
        if final_at is None:
            return
        check_final(label, kubelet, 0.985)
        names = [p["name"] for p in setup.pods["cpu"]]
        check_pods(label, kubelet, names, final_at)
        log = kubelet.logs("chief-0")
        report("epoch 2/2" in log and "epochs=2" in (final_line(kubelet) or ""),
               "%s: epochs: \"2\" reached the chief ('epoch 2/2' in its log, epochs=2 in its final line)" % label,
               "its log: %s" % log[-600:])
        try:
            weights = cp_out(kubelet, "chief-0", "/runs/model.safetensors")
            n = struct.unpack("<Q", weights[:8])[0]
            header = json.loads(weights[8:8 + n])
            meta = header.pop("__metadata__", {})
            report(meta.get("model") == "cnn" and header,
                   "%s: kubectl cp chief-0:/runs/model.safetensors: %d tensors of the model %s" %
                   (label, len(header), meta.get("model")), meta)
        except (PodError, KeyError, ValueError, struct.error) as e:
            report(False, "%s: kubectl cp chief-0:/runs/model.safetensors" % label, e)
        events = [os.path.join(r, f) for r, _, fs in os.walk(args.runs_dir("clean")) for f in fs
                  if f.startswith("events.out.tfevents")]
        report(len(events) >= 2, "%s: TensorBoard event files on the runs volume (the chief's and the "
               "evaluator's): %s" % (label, sorted(os.path.relpath(e, args.runs_dir("clean")) for e in events)),
               events)
    finally:
        kubelet.teardown()


def run_ps_deleted(args):
    label = "B (ps_replicas=1, 2 epochs, ps-1 deleted mid-run)"
    setup = Setup(args, "ps-deleted", settings={"epochs": 2, "ps_replicas": 1, "min_ps": 0})
    if not setup.ok:
        return
    kubelet = new_kubelet(args, "ps-deleted")
    deleted = {}

    def delete_ps1(k):
        if not deleted:
            old = k.pod("ps-1")
            step = TRAINING.findall(k.logs("chief-0"))
            deleted["old_ip"] = old.ip
            deleted["new"] = k.delete("ps-1", grace=0)
            note("%s: pod ps-1 (%s) deleted with --grace-period=0 --force after %s" % (label, old.ip, step[-1]))

    try:
        if not data_loaded(args) and not load_data(args, kubelet, setup):
            return
        final_at = train(args, kubelet, setup, label, during=delete_ps1)
        if final_at is None:
            return
        check_final(label, kubelet, 0.985)
        new = deleted.get("new")
        log = kubelet.logs("chief-0")
        new_log = kubelet.logs("ps-1")
        lost = log.find("ps:1 lost")
        up, done = clock(new_log, "gRPC on"), clock(log, "every worker is done")
        made = new is not None and new.ip != deleted["old_ip"] and up is not None
        what = "the StatefulSet made ps-1 again (%s, was %s)" % (new and new.ip, deleted.get("old_ip"))
        if made and done is not None and done - up >= 5:
            # Up while the run went on: the chief must find it by its DNS
            # name (gRPC resolves the name again 1 s after a failed
            # connection) and give it its shards back.
            back = re.search(r"ps:0's store has a backup on ps:1 \(ps-1\.ps:\d+\)", log[lost:]) if lost >= 0 else None
            report(back, "%s, up %.0f s before the training ended; the chief took it back by its DNS name ('%s')" %
                   (label + ": " + what, done - up, back and back.group(0)),
                   "the chief's ps:1 lines: %s" % [l for l in log.splitlines() if "ps:1" in l][-4:])
        else:
            # Its container came up as the training ended (a busy host can
            # take 15 s to start one): that it was made again and ran is
            # what can be checked.
            report(made, "%s%s" % (label + ": " + what, ", up as the training ended (%.0f s after it)" % (up - done)
                                   if made and done is not None else ""),
                   "the new ps-1's log: %s" % new_log[-300:])
        want = re.compile(r"ps:1 (restarted: restored from its backup store|lost .*: its backup store on ps:0 .* "
                          r"serves its shards).*")
        got = want.search(log)
        report(got and "every ps restored" not in log,
               "%s: the chief restored ps:1 from its backup, no checkpoint roll-back: %s" %
               (label, got and got.group(0)[:160]), [l for l in log.splitlines() if "ps:1" in l][-5:])
        check_pods(label, kubelet, [p["name"] for p in setup.pods["cpu"] if p["name"] != "ps-1"], final_at)
    finally:
        kubelet.teardown()


def run_scaled(args):
    label = "C (3 workers: replicas and max_workers 3 in base/kustomization.yaml)"
    setup = Setup(args, "scaled", counts={"worker": 3}, settings={"epochs": 1}, max_workers=3)
    if not setup.ok:
        return
    names = [p["name"] for p in setup.pods["cpu"]]
    report("worker-2" in names and len(names) == 7, "%s: 7 pods, worker-2 among them" % label, names)
    kubelet = new_kubelet(args, "scaled")
    try:
        if not data_loaded(args) and not load_data(args, kubelet, setup):
            return
        final_at = train(args, kubelet, setup, label)
        if final_at is None:
            return
        check_final(label, kubelet, 0.98)
        check_pods(label, kubelet, names, final_at)
        done = re.findall(r"done: [0-9]+ steps", kubelet.logs("worker-2"))
        report(done and not done[-1].startswith("done: 0 "), "%s: worker-2 trained (%s)" %
               (label, done and done[-1]), kubelet.logs("worker-2")[-400:])
    finally:
        kubelet.teardown()


def chief_step(log):
    """The step of the chief's newest progress line ("epoch E/N step S ..."), or 0."""
    steps = re.findall(r"epoch \d+/\d+ step (\d+)", log)
    return int(steps[-1]) if steps else 0


def live_resize(args, label, work, setup, names, job, up, down, arrived, gone, since, checks):
    """A live resize of JOB's StatefulSet, as run D and E make it: once the
    chief trains, `kubectl scale statefulset/JOB --replicas=UP` (its new
    pod made as the StatefulSet controller makes it, started as the kubelet
    would); once the chief's log satisfies ARRIVED and the run has gone on
    20 steps, `--replicas=DOWN` (the pod deleted with its grace period:
    SIGTERM); the resize is over once GONE holds. Then the checks every
    resize has (the resize done before the end, final line >= 0.98, the
    other pods ran through it: no container exited, no pod made again,
    until then, SINCE saying when), CHECKS(kubelet, chief log, the removed
    pod or None) in between."""
    pod = "%s-%d" % (job, down)
    # What `kubectl scale statefulset/JOB --replicas=UP` leaves: the pods of
    # the StatefulSet with UP replicas, every other object as it was.
    out, why = user_copy.scaled(setup.rendered["cpu"], os.path.join(setup.dir, "cpu-%d.yaml" % up), **{job: up})
    grown, why = user_copy.resolve([out], REGISTRY) if out else (None, why)
    spec = next((p for p in grown or [] if p["name"] == pod), None)
    if not report(spec is not None, "%s: kubectl scale statefulset/%s --replicas=%d makes pod %s" %
                  (label, job, up, pod), why or "no %s among %s" % (pod, [p["name"] for p in grown or []])):
        return
    kubelet = new_kubelet(args, work)
    state = {"stage": "up", "pods": {}}

    def resize(k):
        log = k.logs("chief-0")
        if state["stage"] == "up":
            state["pods"] = {n: k.pod(n) for n in names}
            state["up_at"] = chief_step(log)
            k.start_pod(spec)
            note("%s: scaled to %d at step %d: pod %s started" % (label, up, state["up_at"], pod))
            state["stage"] = "arriving"
        elif state["stage"] == "arriving" and arrived(log):
            state["arrived_at"] = chief_step(log)
            state["stage"] = "arrived"
        elif state["stage"] == "arrived" and chief_step(log) >= state["arrived_at"] + 20:
            state["removed"] = k.pod(pod)
            state["down_at"] = chief_step(log)
            k.delete(pod, recreate=False)
            note("%s: scaled back to %d at step %d (in at %d): pod %s deleted (SIGTERM, grace %s s)" %
                 (label, down, state["down_at"], state["arrived_at"], pod, spec["terminationGracePeriodSeconds"]))
            state["stage"] = "down"
        elif state["stage"] == "down" and gone(log):
            state["left_at"] = time.time()
            state["stage"] = "left"

    try:
        if not data_loaded(args) and not load_data(args, kubelet, setup):
            return
        final_at = train(args, kubelet, setup, label, during=resize)
        if final_at is None:
            return
        report(state["stage"] == "left", "%s: scaled up and down before the run ended" % label,
               "the run ended at stage '%s' (the training was too short for the resize)" % state["stage"])
        check_final(label, kubelet, 0.98)
        checks(kubelet, kubelet.logs("chief-0"), state.get("removed"))
        # The rest ran through the resize: no container exited, no pod made
        # again (they exit 0 at the end, when the chief stops them).
        left_at = state.get("left_at", final_at)
        restarted = ["%s %s" % (n, why) for n, p in state["pods"].items()
                     for why in (["made again"] if kubelet.pod(n) is not p else []) +
                     ["exited %d" % code for c in p.containers for t, code in c.exits if t < left_at]]
        report(not restarted and "left_at" in state,
               "%s: %s ran through the resize (no container exited, no pod made again, until %s)" %
               (label, ", ".join(sorted(names)), since), restarted)
        check_pods(label, kubelet, names, final_at)
    finally:
        kubelet.teardown()


def check_left(label, removed, what, ok, detail):
    """The pod a scale-down removed: its one container ran once, exited 0,
    and OK (its log showed it left as it should); WHAT names the check,
    DETAIL what its log showed."""
    if removed is None:
        return
    c = removed.containers[0]
    report(c.restarts == 0 and [code for _, code in c.exits] == [0] and ok,
           "%s: %s (%s)" % (label, what, detail),
           "restarts %d, exit codes %s, its last lines: %s" % (c.restarts, [e for _, e in c.exits],
                                                               "".join(c.logs)[-400:]))


def run_resized(args):
    """deploy/k8s/cpu applied with 1 worker of max_workers 2, scaled to 2
    and back to 1 mid-run (live_resize): worker-1 joins, then leaves after
    its step."""
    label = "D (1 of max_workers 2, scaled to 2 and back to 1 mid-run)"
    # 3 epochs (about 40 s here): a new pod takes some seconds to join.
    setup = Setup(args, "resized", counts={"worker": 1}, settings={"epochs": 3})
    if not setup.ok:
        return
    names = [p["name"] for p in setup.pods["cpu"]]
    report(sorted(names) == ["chief-0", "evaluator-0", "ps-0", "ps-1", "worker-0"],
           "%s: 5 pods at apply, worker-0 the only worker" % label, names)

    def checks(kubelet, log, removed):
        start = re.search(r"starting with 1 of 2 workers \(--min_workers=1\); these join when they answer: "
                          r"worker:1 \(worker-1\.worker:2222\)", log)
        report(start, "%s: the chief started with worker-0 alone: '%s'" % (label, start and start.group(0)),
               [l for l in log.splitlines() if "workers" in l][:3])
        join, leave = log.find("worker 1 joins the run and gets work from the next step"), \
            log.find("worker 1 leaves the run (it stops)")
        report(0 <= join < leave, "%s: the chief logged 'worker 1 joins the run and gets work from the next step', "
               "then 'worker 1 leaves the run (it stops)'" % label,
               [l for l in log.splitlines() if "worker 1 " in l][-4:])
        wlog = "".join(removed.containers[0].logs) if removed is not None else ""
        done = re.search(r"stopping: the chief knows this worker leaves \((\d+) chunk\(s\) reported done\)", wlog)
        check_left(label, removed, "worker-1, scaled down, left after its step and exited 0",
                   "leaving the run after the step in flight" in wlog and done and int(done.group(1)) > 0,
                   done and done.group(0))

    live_resize(args, label, "resized", setup, names, "worker", 2, 1,
                arrived=lambda log: "worker 1 joins the run" in log,
                gone=lambda log: "worker 1 leaves the run" in log,
                since="the chief logged worker 1's leave", checks=checks)


def run_ps_resized(args):
    """deploy/k8s/cpu applied with 2 ps of max_ps 3, scaled to 3 and back to
    2 mid-run (live_resize): the shards are placed over 3 ps, then ps-2 is
    drained and the shards go back over 2."""
    label = "E (2 ps of max_ps 3, scaled to 3 and back to 2 mid-run)"
    setup = Setup(args, "ps-resized", settings={"epochs": 3}, max_ps=3)
    if not setup.ok:
        return
    names = [p["name"] for p in setup.pods["cpu"]]
    report(sorted(names) == ["chief-0", "evaluator-0", "ps-0", "ps-1", "worker-0", "worker-1"],
           "%s: 6 pods at apply, ps-0 and ps-1 the ps" % label, names)
    added, drained = "ps:2 answers: placing the shards over 3 ps", "ps:2 leaves: placing the shards over 2 ps"
    placed3, placed2 = "the shards are placed over 3 ps from step", "the shards are placed over 2 ps from step"

    def checks(kubelet, log, removed):
        start = re.search(r"starting on [12] of 3 ps \(--min_ps=1\); the others are added when they answer", log)
        report(start, "%s: the chief started on the ps that answered first: '%s'" % (label, start and start.group(0)),
               [l for l in log.splitlines() if " ps" in l][:3])
        a, d = log.find(added), log.find(drained)
        report(0 <= a < d, "%s: the chief logged '%s', then '%s'" % (label, added, drained),
               [l for l in log.splitlines() if "placing the shards" in l or "placed over" in l][-4:])
        for m in re.findall(r"the shards are placed over \d ps from step \d+ \(generation \d+\): [^\n]*", log):
            note("%s: %s" % (label, m))
        plog = "".join(removed.containers[0].logs) if removed is not None else ""
        applied = re.search(r"shutting down \([^)]*drained: the other ps serve its shards\): version=\d+ "
                            r"applied=(\d+)", plog)
        check_left(label, removed, "ps-2, scaled down, trained, was drained and exited 0",
                   applied and int(applied.group(1)) > 0, "applied=%s" % (applied and applied.group(1)))

    live_resize(args, label, "ps-resized", setup, names, "ps", 3, 2,
                arrived=lambda log: placed3 in log,
                gone=lambda log: placed2 in log[log.find(placed3):],
                since="the shards were placed over 2 ps again", checks=checks)


def data_loaded(args):
    """Whether an earlier run loaded MNIST onto the data volume (it
    outlives the runs, as a PVC does)."""
    return os.path.isfile(os.path.join(args.work, "volumes", "data", "mnist", "train-images-idx3-ubyte.gz"))


def new_kubelet(args, label):
    """A kubelet for one run: the data volume (shared by the runs, as a PVC
    outlives them) and a new runs volume, both root's 0755 folders as a
    provisioner makes them."""
    claims = {"pscluster-data": os.path.join(args.work, "volumes", "data"),
              "pscluster-runs": args.runs_dir(label)}
    shutil.rmtree(claims["pscluster-runs"], ignore_errors=True)
    for d in claims.values():
        os.makedirs(d, exist_ok=True)
        os.chmod(d, 0o755)
    return DockerKubelet(args.docker, os.path.join(args.work, "kubelet-" + label), "pscluster-k8s", args.subnet,
                         claims, probe_binary=args.probe, log=note)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repo", required=True)
    p.add_argument("--work", required=True)
    p.add_argument("--image", required=True, help="the CPU image, tagged into the registry as the docs do")
    p.add_argument("--data", required=True, help="a folder of MNIST's four .gz files")
    p.add_argument("--docker", default="docker")
    p.add_argument("--subnet", default="10.231.30.0/24")
    p.add_argument("--probe", default=None, help="a pscluster-health-probe here, for gRPC probes")
    p.add_argument("--limit", type=int, default=420, help="seconds a run may take")
    p.add_argument("--runs", default="ABCDE", help="which runs (default ABCDE)")
    args = p.parse_args()
    if not os.path.isfile(os.path.join(args.data, "train-images-idx3-ubyte.gz")):
        p.error("--data %s: no train-images-idx3-ubyte.gz" % args.data)
    args.runs_dir = lambda label: os.path.join(args.work, "volumes", "runs-" + label)
    # The docs: docker tag pscluster registry.example.com/team/pscluster.
    r = subprocess.run([args.docker, "tag", args.image, REGISTRY + "/pscluster:latest"], capture_output=True, text=True)
    if not report(r.returncode == 0, "docker tag %s %s/pscluster" % (args.image, REGISTRY), r.stderr):
        return 1
    for run in args.runs:
        t0 = time.time()
        {"A": run_clean, "B": run_ps_deleted, "C": run_scaled, "D": run_resized, "E": run_ps_resized}[run](args)
        note("run %s: %.0f s" % (run, time.time() - t0))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
