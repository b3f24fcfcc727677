#!/usr/bin/env python3
"""Sets the number of ps and workers of the Compose cluster: one number per
role. Rewrites docker-compose.yml, docker-compose.gpu.yml and
docker-compose.identities.yml (in this folder, or in --dir) so that every service's TF_CONFIG lists the new
cluster, each ps and worker has its service (ps-<i>, worker-<i>: copies of
ps-0's and worker-0's), the chief waits for all of them, and GPU worker i
reserves GPU $PSCLUSTER_WORKER<i>_GPU (default i, or i mod --gpus when the
machine has fewer GPUs than workers), and each task gets its own identity
files (the identities file).

    deploy/compose/scale.py --ps=3 --workers=4 [--gpus=N] [--dir=DIR] [--check]

Then `docker-compose -f deploy/compose/docker-compose.yml up` as before.
--ps=2 --workers=2 gives the files as shipped. --check writes nothing and
exits 1 when the files are not what these numbers make. Compose cannot
repeat a service by itself and keep each one's TF_CONFIG true, hence this.
Exit 2 and a message naming the value for a bad flag.
"""
import argparse
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
BASE, GPU, IDENTITIES = "docker-compose.yml", "docker-compose.gpu.yml", "docker-compose.identities.yml"
TF_CONFIG = re.compile(r"TF_CONFIG: '(\{.*\})'")


def blocks(text):
    """(head, [(service name, its block)], tail): the services: section split
    into the blocks that start at each two-space-indented name."""
    start = text.index("\nservices:\n") + len("\nservices:\n")
    end = text.find("\nvolumes:\n", start)
    end = len(text) if end < 0 else end + 1
    body = text[start:end]
    parts = re.split(r"(?m)^(?=  [a-z][\w-]*:\n)", body)
    services = [(re.match(r"  ([\w-]+):", p).group(1), p) for p in parts if p.strip()]
    return text[:start], services, text[end:]


def joined(head, services, tail):
    """The file again: the service blocks one blank line apart, and one
    before what follows them."""
    body = "\n".join(b.rstrip("\n") + "\n" for b in services)
    return head + body + ("\n" + tail if tail else "")


def cluster(ps, workers):
    return {"chief": ["chief:2222"], "ps": ["ps-%d:2222" % i for i in range(ps)],
            "worker": ["worker-%d:2222" % i for i in range(workers)], "evaluator": ["evaluator:2222"]}


def renamed(block, old, new, index):
    """A copy of `old`'s block as service `new`, task index `index`."""
    block = block.replace("  %s:\n" % old, "  %s:\n" % new, 1)
    return re.sub(r'"index": \d+\}', '"index": %d}' % index, block)


def with_cluster(block, ps, workers):
    """The block with its TF_CONFIG's cluster made for the counts."""
    def one(m):
        tf = json.loads(m.group(1))
        tf["cluster"] = cluster(ps, workers)
        return "TF_CONFIG: '%s'" % json.dumps(tf)
    return TF_CONFIG.sub(one, block)


def scale_base(text, ps, workers):
    head, services, tail = blocks(text)
    by_name = dict(services)
    out = []
    for role, count in (("ps", ps), ("worker", workers)):
        for i in range(count):
            out.append(renamed(by_name["%s-0" % role], "%s-0" % role, "%s-%d" % (role, i), i))
    for name, block in services:
        if not re.fullmatch(r"(ps|worker)-\d+", name):
            out.append(block)
    out = [with_cluster(b, ps, workers) for b in out]
    deps = ", ".join(["ps-%d" % i for i in range(ps)] + ["worker-%d" % i for i in range(workers)] + ["evaluator"])
    out = [re.sub(r"depends_on: \[[^\]]*\]", "depends_on: [%s]" % deps, b) for b in out]
    head = re.sub(r"^# pscluster on one Docker host: \d+ ps, \d+ workers,",
                  "# pscluster on one Docker host: %d ps, %d workers," % (ps, workers), head, flags=re.M)
    return joined(head, out, tail)


def scale_gpu(text, workers, gpus):
    head, services, tail = blocks(text)
    by_name = dict(services)
    out = []
    for i in range(workers):
        b = by_name["worker-0"].replace("  worker-0:\n", "  worker-%d:\n" % i, 1)
        out.append(b.replace("${PSCLUSTER_WORKER0_GPU:-0}", "${PSCLUSTER_WORKER%d_GPU:-%d}" % (i, i % gpus)))
    return joined(head, out, tail)


def tasks(ps, workers):
    """(service, task) of every task of the counts: its Compose service and
    its name as make_test_ca.sh --tasks takes it (a role alone is index 0)."""
    return ([("chief", "chief")] + [("ps-%d" % i, "ps/%d" % i) for i in range(ps)] +
            [("worker-%d" % i, "worker/%d" % i) for i in range(workers)] + [("evaluator", "evaluator")])


def stem(task):
    """A task's files' name, ROLE-INDEX, as make_test_ca.sh writes them."""
    return task.replace("/", "-") if "/" in task else task + "-0"


def identities(ps, workers):
    """docker-compose.identities.yml for the counts: each service its own
    certificate, key and token, the CA and the identities list."""
    every = tasks(ps, workers)
    names = ",".join(["DNS:" + service for service, _ in every] + ["IP:127.0.0.1"])
    listed = ",".join(task for _, task in every)
    out = ["""# Per-task identities (docs/security.md): every task gets only its own
# certificate, key and token, the CA and the identities list, as Compose
# secrets in /run/secrets; the entrypoint gives them to the daemon with
# --authorize (PSCLUSTER_IDENTITY_DIR), and the health checks find their TLS
# files there. A worker can then act only as itself. Make the files once,
# readable by the containers' user (uid 10001), in deploy/compose/pki or in
# the folder PSCLUSTER_PKI names (an absolute path):
#
#   deploy/tls/make_test_ca.sh --san %s \\
#     --tasks %s deploy/compose/pki
#   sudo chown -R 10001:10001 deploy/compose/pki
#
# then add this file to the command:
#
#   docker compose -f deploy/compose/docker-compose.yml -f deploy/compose/docker-compose.identities.yml up
#
# Written by deploy/compose/scale.py for its counts (%d ps, %d workers).

services:
""" % (names, listed, ps, workers)]
    for service, task in every:
        out.append("""  %s:
    environment:
      PSCLUSTER_IDENTITY_DIR: /run/secrets
    secrets: [ca.pem, identities, %s.pem, %s.key, %s.token]

""" % ((service,) + (stem(task),) * 3))
    out.append("secrets:\n")
    for name in ["ca.pem", "identities"] + [stem(t) + ext for _, t in every for ext in (".pem", ".key", ".token")]:
        out.append("  %s: {file: \"${PSCLUSTER_PKI:-./pki}/%s\"}\n" % (name, name))
    return "".join(out)


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ps", type=int, default=2, help="parameter servers (1 to 64)")
    p.add_argument("--workers", type=int, default=2, help="workers (1 to 256)")
    p.add_argument("--gpus", type=int, default=None,
                   help="GPUs the GPU workers share round-robin (default: one each; 1 to 64)")
    p.add_argument("--dir", default=HERE, help="the folder of the two Compose files (default: this one)")
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 if the files differ")
    args = p.parse_args(argv)
    if args.gpus is None:
        args.gpus = args.workers
    for name, value, top in (("ps", args.ps, 64), ("workers", args.workers, 256), ("gpus", args.gpus, 64)):
        if not 1 <= value <= top:
            p.exit(2, "scale.py: --%s=%d: must be from 1 to %d\n" % (name, value, top))
    paths = {name: os.path.join(args.dir, name) for name in (BASE, GPU, IDENTITIES)}
    texts = {}
    for name, path in paths.items():
        try:
            with open(path) as f:
                texts[name] = f.read()
        except FileNotFoundError:
            if name != IDENTITIES:
                p.exit(2, "scale.py: --dir=%s: no %s\n" % (args.dir, name))
            texts[name] = ""  # written anew
        except OSError as e:
            p.exit(2, "scale.py: --dir=%s: %s\n" % (args.dir, e))
    new = {BASE: scale_base(texts[BASE], args.ps, args.workers),
           GPU: scale_gpu(texts[GPU], args.workers, args.gpus),
           IDENTITIES: identities(args.ps, args.workers)}
    if args.check:
        stale = [n for n in new if new[n] != texts[n]]
        if stale:
            print("scale.py: %s not what --ps=%d --workers=%d make" % (", ".join(stale), args.ps, args.workers))
            return 1
        return 0
    for name, path in paths.items():
        if new[name] != texts[name]:
            with open(path, "w") as f:
                f.write(new[name])
    print("scale.py: %d ps, %d workers in %s" % (args.ps, args.workers, ", ".join(paths.values())))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
