#!/usr/bin/python3
"""The communication lab: a real cluster on shaped links, over a grid of
cells (model x workers x ps x link rate x communication setting).

Every daemon runs in its own network namespace, on a veth pair into a
bridge (as tests/netns_cluster_test.sh), and each host's link is shaped
with tc's token bucket (tbf) in both directions: the host's egress (its
uploads) and the bridge port's egress (its downloads). Added delay needs
netem, which this kernel lacks: the lab shapes rates only and says so.

Per cell it prints, from the daemons' own logs and the kernel's counters:
  - images/s of the cluster (every worker's examples over the slowest
    worker's training time);
  - seconds per step split into compute, communication (push+pull, one
    fused call per ps per step; or the ring's all-reduce) and waiting
    (everything else: the chief's answers, barriers), beside the bound the
    link rate sets on the communication (the busiest link's bytes of the
    setting's minimum over its rate);
  - bytes sent and received per worker per step on its network interface
    (Ethernet, TCP/IP and gRPC headers included; and again as TCP payload,
    the packets' headers taken off by the packet count; the one exact pull
    of the whole model before the first step left out), beside the
    setting's theoretical
    minimum (parameters x the codec's bytes per value: fp32 4, bf16 and
    fp16 2, int8 1 + 4/256, top-k 8 x fraction, sign 1/8; a ring all-reduce
    2(n-1)/n of that each way, n workers) and their ratio;
  - CPU seconds the ps and the workers used per step, all of them
    together (from their exit status: start-up and the end included), to
    tell a link-bound cell from a CPU-bound one;
  - test accuracy when the cell trains whole epochs (--epochs).
Settings are the parameter servers' wire (PUSH[+PULL][@TRANSPORT]) or the
ring of workers (ring[+CODEC], --strategy=multi_worker_mirrored: no ps).
And, once per link rate, the bare TCP limit of the shaped link measured in
the same run (one stream between two hosts). It writes results.json,
results.tsv and PNG figures (gnuplot): images/s against link rate per
model and setting, and, for cells that train epochs, test accuracy
against wall time (time to target accuracy).

Needs root, iproute2 (ip, tc), gnuplot, numpy, MNIST and the daemons in
bazel-bin. Usage: tests/netlab/netlab.py --help
"""

import argparse
import gzip
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.join(REPO, "bazel-bin")
DAEMONS = {
    "ps": "ps_server/ps_server",
    "worker": "worker/worker",
    "evaluator": "evaluator/evaluator",
    "chief": "chief/chief",
}
# Wire bytes per value of each codec (wire/codec.h), headers aside.
CODEC_BYTES = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "int8": 1.0 + 4.0 / 256,
               "topk": None, "sign": 1.0 / 8}
PULL_CODECS = tuple(CODEC_BYTES)  # int8, topk, sign: the change since the worker's weights
# Ethernet 14 + IPv4 20 + TCP 20 + the timestamp option 12: the headers of
# every packet a host's interface counts (a GSO burst of segments counts
# as one, with one set of headers).
FRAME_HEADER_BYTES = 66
SUBNET = "10.214.0."
PORT = 2222


class UsageError(Exception):
    pass


def log(msg):
    print(f"[netlab] {msg}", file=sys.stderr, flush=True)


def run(cmd, check=True):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {r.returncode}: {r.stderr.strip()}")
    return r


def parse_rate(text):
    """'1gbit' -> bits/s; also mbit, kbit and bare numbers (bits/s)."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(gbit|mbit|kbit)?", text.strip().lower())
    if not m:
        raise UsageError(f"--links: '{text}' is not a rate like 100mbit, 1gbit or 10gbit")
    value = float(m.group(1)) * {"gbit": 1e9, "mbit": 1e6, "kbit": 1e3, None: 1.0}[m.group(2)]
    if value < 1e6:
        raise UsageError(f"--links: '{text}' is below 1mbit")
    return value


RING_CODECS = ("fp32", "bf16", "fp16")


def parse_setting(text, topk_fraction):
    """'ring[+CODEC]' (--strategy=multi_worker_mirrored, --ring_codec) or
    'PUSH[+PULL][@TRANSPORT]' (the chief's --push_codec, --pull_codec and
    --transport) -> dict. PULL defaults to PUSH when that is bf16 or fp16,
    else fp32; TRANSPORT to grpc; tcp-push is tcp with --priority_pull=false
    (gradients sent during backprop, the next step started once all weights
    are in), tcp-serial tcp with --push_overlap=false (the gradient sent after
    backprop, not during it). topk:F sends the fraction F (in (0, 1]) of each
    tensor instead of --topk_fraction."""
    if text == "ring" or text.startswith("ring+"):
        codec = text.partition("+")[2] or "fp32"
        if codec not in RING_CODECS:
            raise UsageError(f"--settings: '{text}': ring codec '{codec}' is not one of "
                             f"{', '.join(RING_CODECS)}")
        return {"name": text if codec != "fp32" else "ring", "ring": True, "codec": codec,
                "value_bytes": CODEC_BYTES[codec]}
    codecs, _, transport = text.partition("@")
    transport = transport or "grpc"
    if transport not in ("grpc", "tcp", "tcp-push", "tcp-serial"):
        raise UsageError(f"--settings: '{text}': transport '{transport}' is not grpc, tcp, "
                         "tcp-push or tcp-serial")
    push, _, pull = codecs.partition("+")
    fractions = set()
    for part in (push, pull):
        if part.startswith("topk:"):
            try:
                fraction = float(part[len("topk:"):])
            except ValueError:
                fraction = float("nan")
            if not 0 < fraction <= 1:
                raise UsageError(f"--settings: '{text}': the top-k fraction in '{part}' is not "
                                 "a number in (0, 1]")
            fractions.add(fraction)
    if len(fractions) > 1:
        raise UsageError(f"--settings: '{text}': one top-k fraction per setting")
    explicit = bool(fractions)
    if explicit:
        topk_fraction = fractions.pop()
    push, pull = push.split(":")[0], pull.split(":")[0]
    if push not in CODEC_BYTES:
        raise UsageError(f"--settings: '{text}': push codec '{push}' is not one of "
                         f"{', '.join(CODEC_BYTES)}")
    pull = pull or (push if push in ("bf16", "fp16") else "fp32")
    if pull not in PULL_CODECS:
        raise UsageError(f"--settings: '{text}': pull codec '{pull}' is not one of "
                         f"{', '.join(PULL_CODECS)}")
    def per_value(codec):
        return CODEC_BYTES[codec] if codec != "topk" else 8.0 * topk_fraction

    def label(codec):
        return f"topk:{topk_fraction:g}" if codec == "topk" and explicit else codec
    name = f"{label(push)}+{label(pull)}" if pull != push else label(push)
    if transport != "grpc":
        name += f"@{transport}"
    return {"name": name, "push": push, "pull": pull, "transport": transport, "ring": False,
            "topk_fraction": topk_fraction,
            "push_bytes": per_value(push), "pull_bytes": per_value(pull)}


def int_list(flag, text, lo, n_ok=False):
    """Comma-separated integers; with n_ok, 'n' stands for 0 (as many as the
    cell's workers)."""
    try:
        values = [0 if n_ok and v == "n" else int(v) for v in text.split(",")]
    except ValueError:
        raise UsageError(f"{flag}: '{text}' is not a comma-separated list of integers")
    bad = [v for v in values if v < lo and not (n_ok and v == 0)]
    if bad:
        raise UsageError(f"{flag}: {bad[0]} is below {lo}")
    return values


# ---- Data -----------------------------------------------------------------

def read_idx(path):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    dims = raw[3]
    shape = [int.from_bytes(raw[4 + 4 * i: 8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def write_subset(mnist_dir, train_examples, path):
    """MNIST's first train_examples training images and its whole test set,
    as an .npz the daemons read (model/dataset.h)."""
    x = read_idx(os.path.join(mnist_dir, "train-images-idx3-ubyte.gz"))
    y = read_idx(os.path.join(mnist_dir, "train-labels-idx1-ubyte.gz"))
    xt = read_idx(os.path.join(mnist_dir, "t10k-images-idx3-ubyte.gz"))
    yt = read_idx(os.path.join(mnist_dir, "t10k-labels-idx1-ubyte.gz"))
    n = min(train_examples, len(x))
    np.savez(path, x_train=x[:n], y_train=y[:n], x_test=xt, y_test=yt)


# ---- The network ----------------------------------------------------------

class Network:
    """A bridge in a switch namespace and one namespace per host."""

    def __init__(self, hosts):
        self.tag = f"nl{os.getpid() % 100000}"
        self.switch = f"{self.tag}sw"
        self.hosts = list(hosts)
        self.addr = {}
        self.made = []
        run(["ip", "netns", "add", self.switch])
        self.made.append(self.switch)
        run(["ip", "-n", self.switch, "link", "add", "br0", "type", "bridge"])
        run(["ip", "-n", self.switch, "link", "set", "br0", "up"])
        for i, h in enumerate(self.hosts, start=1):
            ns = self.ns(h)
            self.addr[h] = f"{SUBNET}{i}"
            run(["ip", "netns", "add", ns])
            self.made.append(ns)
            run(["ip", "-n", ns, "link", "set", "lo", "up"])
            run(["ip", "link", "add", f"{self.tag}{h}", "netns", ns, "type", "veth",
                 "peer", "name", self.port(h), "netns", self.switch])
            run(["ip", "-n", ns, "link", "set", f"{self.tag}{h}", "name", "eth0"])
            run(["ip", "-n", ns, "addr", "add", f"{self.addr[h]}/24", "dev", "eth0"])
            run(["ip", "-n", ns, "link", "set", "eth0", "up"])
            run(["ip", "-n", self.switch, "link", "set", self.port(h), "master", "br0"])
            run(["ip", "-n", self.switch, "link", "set", self.port(h), "up"])

    def ns(self, host):
        return f"{self.tag}{host}"

    @staticmethod
    def port(host):
        return f"p{host}"

    def shape(self, rate_bps):
        """Every host's link at rate_bps both ways (tbf), or unshaped (0)."""
        # tbf needs a bucket of at least one timer tick's worth of bytes
        # and of the largest (GSO) packet.
        # 1 ms of the rate, or the largest GSO packet (64 KB): a bucket that
        # refills while a worker computes lets that much pass at once.
        burst = max(int(rate_bps / 8 / 1000), 66 * 1024)
        for h in self.hosts:
            for ns, dev in ((self.ns(h), "eth0"), (self.switch, self.port(h))):
                run(["tc", "-n", ns, "qdisc", "del", "dev", dev, "root"], check=False)
                if rate_bps > 0:
                    run(["tc", "-n", ns, "qdisc", "add", "dev", dev, "root", "tbf",
                         "rate", f"{int(rate_bps)}bit", "burst", str(burst),
                         "latency", "50ms"])

    def counters(self, host):
        """(tx_bytes, rx_bytes, tx_packets, rx_packets) of the host's eth0."""
        out = run(["ip", "netns", "exec", self.ns(host), "cat"] +
                  [f"/sys/class/net/eth0/statistics/{c}"
                   for c in ("tx_bytes", "rx_bytes", "tx_packets", "rx_packets")]).stdout.split()
        return tuple(int(v) for v in out)

    def tcp_limit(self, sender, receiver, seconds=2.0):
        """Bytes/s one TCP stream moves from sender to receiver."""
        recv_code = (
            "import socket,sys,time\n"
            "s=socket.socket(); s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\n"
            f"s.bind(('{self.addr[receiver]}',5999)); s.listen(1); print('up',flush=True)\n"
            "c,_=s.accept(); n=0; t0=None\n"
            "while True:\n"
            "  b=c.recv(1<<20)\n"
            "  if not b: break\n"
            "  if t0 is None: t0=time.time()\n"
            "  n+=len(b)\n"
            "print(n/(time.time()-t0))\n")
        send_code = (
            "import socket,time\n"
            f"s=socket.create_connection(('{self.addr[receiver]}',5999))\n"
            "buf=b'x'*(1<<20); end=time.time()+" + str(seconds) + "\n"
            "while time.time()<end: s.sendall(buf)\n"
            "s.close()\n")
        rx = subprocess.Popen(["ip", "netns", "exec", self.ns(receiver), sys.executable, "-c",
                               recv_code], stdout=subprocess.PIPE, text=True)
        rx.stdout.readline()
        run(["ip", "netns", "exec", self.ns(sender), sys.executable, "-c", send_code])
        out = rx.communicate(timeout=60)[0].strip()
        return float(out)

    def close(self):
        for ns in reversed(self.made):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        self.made = []


# ---- One cell -------------------------------------------------------------

DONE_RE = re.compile(
    r"done: (\d+) steps, (\d+) examples.*?compute_s=([\d.]+) comm_s=([\d.]+) wall_s=([\d.]+)")
PARAMS_RE = re.compile(r"model \S+: (\d+) parameters")
FINAL_RE = re.compile(r"final: test_accuracy=([\d.]+) test_loss=([\d.]+) .*wall_s=([\d.]+)")
STAMP_RE = re.compile(r"^(\d\d):(\d\d):(\d\d\.\d+) ")
EVAL_RE = re.compile(r"eval: step=(\d+) accuracy=([\d.]+)")
PROGRESS_RE = re.compile(r"epoch \d+/\d+ step (\d+) ")


def stamp_seconds(line):
    """Seconds since midnight of a daemon log line's time stamp, or None."""
    m = STAMP_RE.match(line)
    return int(m.group(1)) * 3600 + int(m.group(2)) * 60 + float(m.group(3)) if m else None


def run_cell(net, cell, args, data, tmp):
    model, workers, ps, rate, setting = (cell[k] for k in
                                         ("model", "workers", "ps", "rate", "setting"))
    hosts = {"chief": ["chief"], "ps": [f"ps{i}" for i in range(ps)],
             "worker": [f"w{i}" for i in range(workers)]}
    epochs = setting["epochs"]
    evaluate = epochs > 0
    if evaluate:
        hosts["evaluator"] = ["ev"]
    spec = {job: [f"{net.addr[h]}:{PORT}" for h in hs] for job, hs in hosts.items()}
    name = (f"{os.path.splitext(os.path.basename(model))[0]}-w{workers}-ps{ps}-{rate['name']}-"
            f"{setting['name']}")
    procs = []
    logs = {}
    chief_args = [f"--model={model}", f"--mode={args.mode}", "--wait_for_cluster_s=90",
                  f"--epochs={max(epochs, 1)}", f"--batch_size={args.batch_size}",
                  f"--seed={args.seed}", "--log_every_s=2"]
    if setting["ring"]:
        chief_args += ["--strategy=multi_worker_mirrored", f"--ring_codec={setting['codec']}"]
    else:
        chief_args += [f"--push_codec={setting['push']}", f"--pull_codec={setting['pull']}",
                       f"--transport={setting['transport'].split('-')[0]}",
                       f"--push_overlap={str(setting['transport'] != 'tcp-serial').lower()}",
                       f"--priority_pull={str(setting['transport'] == 'tcp').lower()}",
                       f"--topk_fraction={setting['topk_fraction']}"]
    if not evaluate:
        chief_args.append(f"--data_dir={data}")  # the chief's own final evaluation
    extra = {
        "ps": [],
        "worker": [f"--data_dir={data}", f"--threads={args.threads}", "--linger_s=30"],
        "evaluator": [f"--data_dir={data}", f"--eval_interval_s={args.eval_interval_s}"],
        "chief": chief_args,
    }
    before = {h: net.counters(h) for h in hosts["worker"]}
    for job in ("ps", "worker", "evaluator", "chief"):
        for index, h in enumerate(hosts.get(job, [])):
            tf_config = json.dumps({"cluster": spec, "task": {"type": job, "index": index}})
            path = os.path.join(tmp, f"{name}.{h}.log")
            logs[h] = path
            env = dict(os.environ, TF_CONFIG=tf_config)
            env.pop("OPENBLAS_CORETYPE", None)
            # The evaluator runs only on cores the cluster leaves idle
            # (SCHED_IDLE): its evaluations, an 80 MB model's each a few
            # CPU-seconds, would otherwise slow the training they measure,
            # and a CPU-bound setting more than a link-bound one.
            idle = ["chrt", "--idle", "0"] if job == "evaluator" else []
            with open(path, "w") as out:
                procs.append((h, subprocess.Popen(
                    ["ip", "netns", "exec", net.ns(h)] + idle + [os.path.join(BIN, DAEMONS[job])]
                    + extra[job], stdout=out, stderr=subprocess.STDOUT, env=env)))
    # CPU seconds (user + system) each daemon used, from its exit status
    # (ip netns exec execs the daemon: the child is the daemon itself).
    cpu = {}

    def reap(h, p, deadline):
        while True:
            pid, status, usage = os.wait4(p.pid, os.WNOHANG)
            if pid == 0 and time.time() < deadline:
                time.sleep(0.05)
                continue
            if pid == 0:
                if h == "chief":
                    log(f"{name}: no end after {args.cell_timeout_s} s; stopping it")
                p.kill()
                _, status, usage = os.wait4(p.pid, 0)
            p.returncode = os.waitstatus_to_exitcode(status)
            cpu[h] = usage.ru_utime + usage.ru_stime
            return

    try:
        reap("chief", dict(procs)["chief"], time.time() + args.cell_timeout_s)
        deadline = time.time() + 20
        for h, p in procs:
            if h != "chief":
                reap(h, p, deadline)
    finally:
        # Interrupted (Ctrl-C, SIGTERM): no daemon outlives the lab.
        for h, p in procs:
            if p.returncode is None and p.poll() is None:
                p.kill()
                p.wait()
    after = {h: net.counters(h) for h in hosts["worker"]}
    text = {h: open(p).read() for h, p in logs.items()}
    result = dict(cell)
    del result["rate"]
    result.update(name=name, rate_name=rate["name"], rate_bps=rate["bps"],
                  setting=setting["name"], ok=False)
    done = [DONE_RE.search(text[h]) for h in hosts["worker"]]
    if not all(done):
        result["error"] = "a worker did not finish: " + "; ".join(
            text[h].strip().splitlines()[-1] if text[h].strip() else f"{h}: no output"
            for h, d in zip(hosts["worker"], done) if not d)
        return result
    steps = sum(int(d.group(1)) for d in done)
    examples = sum(int(d.group(2)) for d in done)
    compute = sum(float(d.group(3)) for d in done)
    comm = sum(float(d.group(4)) for d in done)
    wall = max(float(d.group(5)) for d in done)
    wall_sum = sum(float(d.group(5)) for d in done)
    tx, rx, tx_packets, rx_packets = (
        sum(after[h][i] - before[h][i] for h in hosts["worker"]) for i in range(4))
    params = PARAMS_RE.search(text["chief"])
    if not params:
        result["error"] = "the chief did not say the model's size"
        return result
    result["parameters"] = int(params.group(1))
    P = result["parameters"]
    rate_Bps = rate["bps"] / 8
    if setting["ring"]:
        # Each worker takes its first state once (the weights and Adam's
        # two slots) from the chief: not a per-step cost... A ring all-reduce
        # sends and receives 2(n-1)/n of the model per worker; each host's
        # link carries it both ways at once (full duplex).
        rx -= workers * 3 * 4 * P
        # ... and one of them hands the chief the final weights.
        tx -= 4 * P
        push_min = pull_min = 2.0 * (workers - 1) / workers * P * setting["value_bytes"]
        bound = push_min / rate_Bps
    else:
        # Each worker pulls the whole model once, exact, before its first
        # step: not a per-step cost.
        rx -= workers * 4 * P
        push_min = setting["push_bytes"] * P
        pull_min = setting["pull_bytes"] * P
        # A worker's link carries its push and its pull; each ps's, every
        # worker's push and pull of its 1/ps of the model.
        bound = max(push_min, pull_min, workers * push_min / ps,
                    workers * pull_min / ps) / rate_Bps
    # What the packets carry beyond TCP's payload: each one's Ethernet,
    # IPv4 and TCP headers (timestamps on), pure ACKs whole.
    tx_payload = tx - tx_packets * FRAME_HEADER_BYTES
    rx_payload = rx - rx_packets * FRAME_HEADER_BYTES
    result.update(
        ok=True, steps_per_worker=steps / workers, images_per_s=examples / wall,
        compute_s_per_step=compute / steps, push_pull_s_per_step=comm / steps,
        waiting_s_per_step=max(wall_sum - compute - comm, 0.0) / steps,
        sent_bytes_per_step=tx / steps, received_bytes_per_step=rx / steps,
        minimum_sent_bytes=push_min, minimum_received_bytes=pull_min,
        ps_cpu_s_per_step=sum(cpu.get(h, 0.0) for h in hosts["ps"]) / (steps / workers),
        worker_cpu_s_per_step=sum(cpu.get(h, 0.0) for h in hosts["worker"]) / (steps / workers),
        bound_s_per_step=bound,
        sent_ratio=tx / steps / push_min if push_min else None,
        received_ratio=rx / steps / pull_min if pull_min else None,
        sent_payload_bytes_per_step=tx_payload / steps,
        received_payload_bytes_per_step=rx_payload / steps,
        sent_payload_ratio=tx_payload / steps / push_min if push_min else None,
        received_payload_ratio=rx_payload / steps / pull_min if pull_min else None)
    final = FINAL_RE.search(text["chief"])
    if final and evaluate:
        result["test_accuracy"] = float(final.group(1))
    if evaluate:
        result["accuracy_curve"] = accuracy_curve(text, hosts)
    return result


def accuracy_curve(text, hosts):
    """Test accuracy against the time training reached the evaluated
    weights, in seconds since the chief's first line (the daemons' own
    clock): the time the chief's progress lines give for the evaluation's
    version (linear between two lines; the last worker's end for the final
    version), not the time the evaluation ended, which lags by however long
    it waited for a core and took."""
    def seconds(t):
        return (t - t0) % 86400
    lines = text["chief"].splitlines()
    t0 = next((t for t in map(stamp_seconds, lines) if t is not None), None)
    if t0 is None:
        return []
    reached = [(0.0, 0)]  # (seconds, version): versions only rise
    for line in lines:
        m, t = PROGRESS_RE.search(line), stamp_seconds(line)
        if m and t is not None and int(m.group(1)) > reached[-1][1]:
            reached.append((seconds(t), int(m.group(1))))
    evals = [(stamp_seconds(line), int(m.group(1)), float(m.group(2)))
             for line in text.get("ev", "").splitlines() for m in [EVAL_RE.search(line)] if m]
    final_version = max((v for _, v, _ in evals), default=0)
    ends = [stamp_seconds(line) for h in hosts["worker"]
            for line in text[h].splitlines() if DONE_RE.search(line)]
    if ends and all(e is not None for e in ends) and final_version > reached[-1][1]:
        reached.append((seconds(max(ends)), final_version))

    def time_of(version, evaluated_at):
        for (ta, va), (tb, vb) in zip(reached, reached[1:]):
            if va <= version <= vb:
                return min(ta + (tb - ta) * (version - va) / (vb - va), evaluated_at)
        return evaluated_at
    return sorted((round(time_of(v, seconds(t)), 3), a) for t, v, a in evals if t is not None)


# ---- Output ---------------------------------------------------------------

COLUMNS = [
    ("cell", "name", "{}"), ("img/s", "images_per_s", "{:.0f}"),
    ("compute s/step", "compute_s_per_step", "{:.4f}"),
    ("comm s/step", "push_pull_s_per_step", "{:.4f}"),
    ("bound s/step", "bound_s_per_step", "{:.4f}"),
    ("waiting s/step", "waiting_s_per_step", "{:.4f}"),
    ("ps CPU s/step", "ps_cpu_s_per_step", "{:.3f}"),
    ("workers CPU s/step", "worker_cpu_s_per_step", "{:.3f}"),
    ("sent MB/step", "sent_bytes_per_step", lambda v: f"{v / 1e6:.3f}"),
    ("recv MB/step", "received_bytes_per_step", lambda v: f"{v / 1e6:.3f}"),
    ("min sent MB", "minimum_sent_bytes", lambda v: f"{v / 1e6:.3f}"),
    ("min recv MB", "minimum_received_bytes", lambda v: f"{v / 1e6:.3f}"),
    ("sent/min", "sent_ratio", "{:.3f}"), ("recv/min", "received_ratio", "{:.3f}"),
    ("TCP payload sent/min", "sent_payload_ratio", "{:.3f}"),
    ("TCP payload recv/min", "received_payload_ratio", "{:.3f}"),
    ("test acc", "test_accuracy", "{:.4f}"),
]


def fmt(spec, value):
    if value is None:
        return "-"
    return spec(value) if callable(spec) else spec.format(value)


def print_table(results, limits):
    print("link limits (one TCP stream between two hosts, measured in this run): " +
          ", ".join(f"{name}: {bps * 8 / 1e9:.2f} Gbit/s" for name, bps in limits.items()))
    widths = [max(len(h), 10) for h, _, _ in COLUMNS]
    print("  ".join(h.rjust(w) for (h, _, _), w in zip(COLUMNS, widths)))
    for r in results:
        if not r.get("ok"):
            print(f"{r['name']}: FAILED: {r.get('error', '?')}")
            continue
        print("  ".join(fmt(f, r.get(k)).rjust(w) for (_, k, f), w in zip(COLUMNS, widths)))
    sys.stdout.flush()


def time_to_target(results):
    """Per group of cells that trained epochs (model, workers, ps, link): the
    first setting's final test accuracy is the target; each cell gets the
    time it first reached it, against the first setting's whole training
    time and the time that setting itself first reached it. Prints one line
    a cell and stores them as result["time_to_target"]."""
    groups = {}
    for r in results:
        if r.get("ok") and r.get("accuracy_curve") and r.get("test_accuracy") is not None:
            groups.setdefault((r["model"], r["workers"], r["ps_label"], r["rate_name"]),
                              []).append(r)
    for (model, workers, ps, rate), cells in groups.items():
        ref = cells[0]
        target = ref["test_accuracy"]

        def first(r):
            return next((t for t, a in r["accuracy_curve"] if a >= target), None)
        ref_end = max(t for t, _ in ref["accuracy_curve"])
        ref_first = first(ref)
        print(f"time to {ref['setting']}'s final test accuracy {target:.4f} "
              f"({os.path.basename(model)}, {workers} workers, {ps} ps, {rate}):")
        for r in cells:
            t = first(r)
            r["time_to_target"] = dict(
                target=target, reference=ref["setting"], seconds=t,
                of_reference_training=t / ref_end if t is not None and ref_end else None,
                of_reference_first=t / ref_first if t is not None and ref_first else None)
            if t is None:
                print(f"  {r['setting']}: not reached (best {max(a for _, a in r['accuracy_curve']):.4f}"
                      f", {max(x for x, _ in r['accuracy_curve']):.0f} s of training)")
            elif r is ref:
                print(f"  {r['setting']}: first at {t:.0f} s; trained {ref_end:.0f} s")
            else:
                print(f"  {r['setting']}: first at {t:.0f} s = "
                      f"{r['time_to_target']['of_reference_training']:.2f} x the reference's "
                      f"training time" + (f", {r['time_to_target']['of_reference_first']:.2f} x "
                                          "its first" if ref_first else ""))
    sys.stdout.flush()


def write_outputs(out, results, limits):
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump({"link_limits_bytes_per_s": limits, "cells": results}, f, indent=1)
    with open(os.path.join(out, "results.tsv"), "w") as f:
        f.write("\t".join(k for _, k, _ in COLUMNS) + "\n")
        for r in results:
            if r.get("ok"):
                f.write("\t".join(str(r.get(k, "")) for _, k, _ in COLUMNS) + "\n")
    if shutil.which("gnuplot") is None:
        log("no gnuplot: no figures")
        return []
    pngs = []

    def plot(png, stem, lines, settings):
        """Draws `lines` [(title, [(x, y), ...])] into png with gnuplot;
        `settings`: its title, axes and key lines."""
        dat = []
        for i, (title, pts) in enumerate(lines):
            path = os.path.join(out, f"{stem}_{i}.dat")
            with open(path, "w") as f:
                f.writelines(f"{x} {y}\n" for x, y in pts)
            dat.append((title, path))
        plots = ", ".join(f"'{p}' using 1:2 with linespoints title '{t}'" for t, p in dat)
        script = (f"set terminal pngcairo size 900,560 noenhanced\nset output '{png}'\n"
                  f"{settings}set grid\nplot {plots}\n")
        subprocess.run(["gnuplot"], input=script, text=True, check=True)
        pngs.append(png)

    # images/s against link rate, one line per (model, workers, ps, setting).
    by_model = {}
    for r in results:
        if r.get("ok"):
            key = f"{r['model']} {r['workers']}w {r['ps']}ps {r['setting']}"
            by_model.setdefault(r["model"], {}).setdefault(key, []).append(
                (r["rate_bps"] / 1e9, r["images_per_s"]))
    for model, series in by_model.items():
        stem = os.path.splitext(os.path.basename(model))[0]
        plot(os.path.join(out, f"images_per_s_vs_link_{stem}.png"), f"rate_{stem}",
             [(key, sorted(pts)) for key, pts in series.items()],
             f"set title '{stem}: images/s against link rate (tc tbf, no added delay)'\n"
             "set logscale x\nset xlabel 'link rate (Gbit/s)'\n"
             "set ylabel 'images/s (cluster)'\nset key left top\n")
    # The strategies side by side: images/s against the number of workers,
    # per model and link, one line per setting and ps count (the ring: none).
    by_panel = {}
    with_n = any(r.get("ps_label") == "n" for r in results)
    for r in results:
        if r.get("ok"):
            labels = ["-"] if r["ps"] == 0 else [r["ps_label"]]
            if with_n and r["ps"] == r["workers"] and r["ps_label"] != "n":
                labels.append("n")  # the one cell of --ps=k,n where k = n
            for label in labels:
                line = r["setting"] if label == "-" else f"{r['setting']}, {label} ps"
                by_panel.setdefault((r["model"], r["rate_name"]), {}).setdefault(
                    line, []).append((r["workers"], r["images_per_s"]))
    for (model, rate_name), series in by_panel.items():
        if len({w for pts in series.values() for w, _ in pts}) < 2:
            continue  # one worker count: nothing to draw against
        stem = f"{os.path.splitext(os.path.basename(model))[0]}_{rate_name}"
        plot(os.path.join(out, f"images_per_s_vs_workers_{stem}.png"), f"workers_{stem}",
             [(key, sorted(pts)) for key, pts in series.items()],
             f"set title '{stem}: parameter servers and the ring, images/s against workers'\n"
             "set xlabel 'workers'\nset xtics 1\nset ylabel 'images/s (cluster)'\n"
             "set key left top\n")
    # Test accuracy against wall time, cells that trained epochs.
    curves = [(r["name"], [(round(t, 2), a) for t, a in r["accuracy_curve"]])
              for r in results if r.get("ok") and r.get("accuracy_curve")]
    if curves:
        # The last tenth of the way matters: from 0.9 up when every curve
        # gets there, with each group's target (time_to_target) drawn.
        finals = [a for _, pts in curves for _, a in pts[-1:]]
        targets = sorted({r["time_to_target"]["target"] for r in results
                          if r.get("time_to_target")})
        marks = "".join(f"set arrow from graph 0, first {t} to graph 1, first {t} nohead dt 2\n"
                        f"set label 'target {t:.4f}' at graph 0.02, first {t} offset 0,0.6\n"
                        for t in targets)
        plot(os.path.join(out, "accuracy_vs_time.png"), "curve", curves,
             "set title 'test accuracy against wall time'\n"
             "set xlabel 'seconds since the cell started (the time training reached the "
             "evaluated weights)'\nset ylabel 'test accuracy'\n"
             + ("set yrange [0.9:*]\n" if finals and min(finals) >= 0.92 else "")
             + marks + "set key right bottom\n")
    return pngs


# ---- Main -----------------------------------------------------------------

def main():
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Grid: every combination of --models, --workers, --ps, --links and "
               "--settings. The default is the reduced grid (under 10 minutes on 2 cores).")
    p.add_argument("--models", default="cnn,mlp_large",
                   help="built-in model names or model files (the chief's --model)")
    p.add_argument("--workers", default="2")
    p.add_argument("--ps", default="2",
                   help="ps counts, e.g. 1,2,n (n: as many as the cell's workers); cells of "
                        "the ring settings have none")
    p.add_argument("--links", default="1gbit,10gbit",
                   help="link rates (tbf), e.g. 100mbit,1gbit,10gbit")
    p.add_argument("--settings", default="fp32,topk+int8",
                   help="communication settings PUSH[+PULL][@TRANSPORT], the chief's "
                        f"--push_codec, --pull_codec and --transport: push "
                        f"{', '.join(CODEC_BYTES)}; pull {', '.join(PULL_CODECS)} (default: the "
                        "push codec when bf16 or fp16, else fp32); transport grpc (default), "
                        "tcp (gradients sent layer by layer during backprop, the next step "
                        "started on the first layers' weights while the rest arrive), tcp-push "
                        "(the first half only) or tcp-serial (neither), e.g. fp32@tcp; or "
                        "ring[+CODEC]: --strategy=multi_worker_mirrored, the ring's codec "
                        "fp32 (default), bf16 or fp16. topk:F is top-k of the fraction F "
                        "(instead of --topk_fraction), e.g. topk:0.02+int8@tcp")
    p.add_argument("--topk_fraction", type=float, default=0.01)
    p.add_argument("--mode", default="sync", choices=["sync", "async"])
    p.add_argument("--steps", type=int, default=12,
                   help="steps per cell when --epochs is 0: a training set of "
                        "steps x batch_size examples, one epoch")
    p.add_argument("--epochs", default="0",
                   help="train this many epochs of the whole of MNIST per cell, with an "
                        "evaluator (accuracy and the accuracy-time curve); 0: --steps. "
                        "A list gives each setting its own, in --settings order (e.g. "
                        "1,2: the second may take longer to reach the first's accuracy); "
                        "each group of cells then reports the time every setting took to "
                        "reach the first setting's final test accuracy")
    p.add_argument("--eval_interval_s", type=float, default=3,
                   help="with --epochs: seconds between the evaluator's evaluations (it "
                        "shares the machine's cores: an evaluation of mlp_large, its 80 MB "
                        "pull at 1 Gbit/s included, takes about 3.7 s here)")
    p.add_argument("--batch_size", type=int, default=128)
    p.add_argument("--threads", type=int, default=1, help="compute threads per worker")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--cell_timeout_s", type=int, default=None,
                   help="seconds a cell may run before it is stopped and marked failed "
                        "(default 600, or 3600 per epoch with --epochs: one epoch of "
                        "mlp_large in fp32 at 1 Gbit/s takes about 15 minutes here)")
    p.add_argument("--data", default=os.environ.get(
        "PSCLUSTER_DATA_DIR", os.path.join(REPO, "..", "shared", "data", "mnist")))
    p.add_argument("--out", default=os.path.join(REPO, "netlab-results"))
    args = p.parse_args()
    try:
        models = args.models.split(",")
        workers = int_list("--workers", args.workers, 1)
        pss = int_list("--ps", args.ps, 1, n_ok=True)
        links = [{"name": l, "bps": parse_rate(l)} for l in args.links.split(",")]
        if not 0 < args.topk_fraction <= 1:
            raise UsageError(f"--topk_fraction={args.topk_fraction} must be in (0, 1]")
        settings = [parse_setting(t, args.topk_fraction) for t in args.settings.split(",")]
        if args.mode == "async" and any(c["ring"] for c in settings):
            raise UsageError("--mode=async: the ring settings are synchronous")
        epochs = int_list("--epochs", args.epochs, 0)
        if len(epochs) not in (1, len(settings)):
            raise UsageError(f"--epochs={args.epochs}: one count, or one per setting "
                             f"({len(settings)})")
        if len(set(e > 0 for e in epochs)) > 1:
            raise UsageError(f"--epochs={args.epochs}: epochs for every setting, or 0 for all")
        for c, e in zip(settings, epochs * len(settings) if len(epochs) == 1 else epochs):
            c["epochs"] = e
        args.epochs = max(epochs)
        if args.cell_timeout_s is None:
            args.cell_timeout_s = 3600 * args.epochs if args.epochs > 0 else 600
        for flag in ("steps", "batch_size", "threads", "cell_timeout_s"):
            if getattr(args, flag) < 1:
                raise UsageError(f"--{flag}={getattr(args, flag)} must be at least 1")
        if not args.eval_interval_s > 0:
            raise UsageError(f"--eval_interval_s={args.eval_interval_s} must be above 0")
        if not os.path.isfile(os.path.join(args.data, "train-images-idx3-ubyte.gz")):
            raise UsageError(f"--data={args.data} holds no MNIST (train-images-idx3-ubyte.gz)")
    except UsageError as e:
        print(f"netlab: {e}", file=sys.stderr)
        return 2
    if os.geteuid() != 0:
        print("netlab: network namespaces and tc need root", file=sys.stderr)
        return 2
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            print(f"netlab: '{tool}' (iproute2) is missing", file=sys.stderr)
            return 2
    for job, path in DAEMONS.items():
        if not os.access(os.path.join(BIN, path), os.X_OK):
            print(f"netlab: missing {os.path.join(BIN, path)}: run bazel build //... first",
                  file=sys.stderr)
            return 2

    os.makedirs(args.out, exist_ok=True)
    tmp = os.path.join(args.out, "logs")  # every daemon's log, per cell
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    if args.epochs > 0:
        data = os.path.abspath(args.data)
    else:
        data = os.path.join(tmp, "subset.npz")
        write_subset(args.data, args.steps * args.batch_size, data)
    max_ps = max(max(workers) if s == 0 else s for s in pss)
    hosts = ["chief", "ev"] + [f"ps{i}" for i in range(max_ps)] + \
            [f"w{i}" for i in range(max(workers))]
    net = None
    stop = {"now": False}

    def interrupt(signum, frame):
        stop["now"] = True
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)
    results = []
    limits = {}
    # A ring has no ps: one cell per (link, model, workers) whatever --ps
    # says; --ps=n is as many ps as the cell's workers (once: with 2
    # workers, --ps=2,n is one cell).
    cells = []
    seen = set()
    for l in links:
        for m in models:
            for w in workers:
                for c in settings:
                    for s in ([0] if c["ring"] else pss):
                        ps = s if c["ring"] or s else w
                        if (l["name"], m, w, c["name"], ps) in seen:
                            continue
                        seen.add((l["name"], m, w, c["name"], ps))
                        cells.append(dict(model=m, workers=w, ps=ps, rate=l, setting=c,
                                          ps_label="n" if s == 0 and not c["ring"] else str(s)))
    log(f"{len(cells)} cells; shaping with tc tbf (rates only: no netem here, so no added "
        f"delay); logs in {tmp}")
    try:
        net = Network(hosts)
        for link in links:
            net.shape(link["bps"])
            limits[link["name"]] = net.tcp_limit("ps0", "w0")
            log(f"link {link['name']}: one TCP stream moves "
                f"{limits[link['name']] * 8 / 1e9:.2f} Gbit/s")
            for cell in [c for c in cells if c["rate"] is link]:
                t0 = time.time()
                r = run_cell(net, cell, args, data, tmp)
                r["cell_wall_s"] = time.time() - t0
                results.append(r)
                log(f"{r['name']}: " + (f"{r['images_per_s']:.0f} images/s, "
                                        f"{r['cell_wall_s']:.0f} s" if r["ok"]
                                        else "FAILED: " + r.get("error", "?")))
    except KeyboardInterrupt:
        log("interrupted: writing what was measured")
    finally:
        if net is not None:
            net.close()
    print_table(results, limits)
    time_to_target(results)
    pngs = write_outputs(args.out, results, limits)
    for png in pngs:
        log(f"wrote {png}")
    log(f"wrote {os.path.join(args.out, 'results.json')} and results.tsv; logs kept in {tmp}")
    failed = [r for r in results if not r.get("ok")]
    return 1 if failed or not results or stop["now"] else 0


if __name__ == "__main__":
    sys.exit(main())
