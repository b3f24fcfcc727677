# shellcheck shell=bash
# Shared by tests/deploy_*_test.sh (sourced; not a test itself): result
# counters, a python3 that has PyYAML, and deploylib.py, the Python helpers
# that read the daemons' flags from their sources and run
# deploy/docker/entrypoint.sh and the real daemons on a TF_CONFIG.
#
# After sourcing: $repo, $tmp (removed on exit), pass/fail/skip, $PY (empty
# when no python3 with yaml), and $tmp/deploylib.py.

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

source "$(dirname "${BASH_SOURCE[0]}")/test_lib.sh"   # pass, fail, skip, finish

# Runs a command that prints PASS:/FAIL:/SKIP: lines, echoes them and adds
# them to the counts; a non-zero exit without a FAIL line is a failure too.
run_checks() {
  local name="$1" out status p f s
  shift
  out="$("$@" 2>&1)"
  status=$?
  [ -n "$out" ] && echo "$out"
  p=$(grep -c '^PASS: ' <<<"$out"); f=$(grep -c '^FAIL: ' <<<"$out"); s=$(grep -c '^SKIP: ' <<<"$out")
  passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
  if [ "$status" -ne 0 ] && [ "$f" -eq 0 ]; then
    fail "$name: exited $status"
  fi
}

PY=""
for candidate in python3 /usr/bin/python3; do
  if command -v "$candidate" >/dev/null 2>&1 && "$candidate" -c 'import yaml' 2>/dev/null; then
    PY="$candidate"
    break
  fi
done

cat >"$tmp/deploylib.py" <<'PYEOF'
"""Helpers for tests/deploy_*_test.sh."""
import json
import os
import re
import subprocess

# The first argument of the entrypoint -> (TF_CONFIG job, binary).
ROLES = {"ps": ("ps", "ps_server"), "worker": ("worker", "worker"),
         "evaluator": ("evaluator", "evaluator"), "chief": ("chief", "chief")}
MAINS = {"ps_server": "ps_server/main.cc", "worker": "worker/main.cc",
         "evaluator": "evaluator/main.cc", "chief": "chief/main.cc"}
BUILT = {"ps_server": "ps_server/ps_server", "worker": "worker/worker",
         "evaluator": "evaluator/evaluator", "chief": "chief/chief"}

results = {"pass": 0, "fail": 0, "skip": 0}


def ok(msg):
    print("PASS: " + msg, flush=True)
    results["pass"] += 1


def bad(msg):
    print("FAIL: " + msg, flush=True)
    results["fail"] += 1


def skip(msg):
    print("SKIP: " + msg, flush=True)
    results["skip"] += 1


def check(cond, msg, why=""):
    if cond:
        ok(msg)
    else:
        bad(msg + (": " + why if why else ""))
    return cond


class Group:
    """The checks of one subject: one PASS line naming them all, or a FAIL
    line for each that failed."""

    def __init__(self, subject):
        self.subject, self.passed, self.failed = subject, [], []

    def __call__(self, cond, what, why=""):
        if cond:
            self.passed.append(what)
        else:
            self.failed.append(what + (": " + why if why else ""))
        return cond

    def report(self):
        for f in self.failed:
            bad("%s: %s" % (self.subject, f))
        if not self.failed:
            ok("%s: %s" % (self.subject, "; ".join(self.passed)))


def known_flags(repo):
    """binary -> the flag names (ABSL_FLAG) its main and the files beside it
    whose names hold "main" declare (worker/main.cc calls worker_main.cc),
    and those every daemon shares (common/daemon.cc: TLS, token)."""
    import glob
    flags = {}
    shared = os.path.join(repo, "common/daemon.cc")
    for binary, path in MAINS.items():
        files = sorted(set([os.path.join(repo, path)] +
                           glob.glob(os.path.join(repo, os.path.dirname(path), "*main*.cc"))))
        if os.path.exists(shared):
            files.append(shared)
        names = set()
        for name in files:
            with open(name) as f:
                names |= set(re.findall(r"ABSL_FLAG\(\s*[\w:<>]+\s*,\s*(\w+)\s*,", f.read()))
        flags[binary] = names
    return flags


def flag_problems(binary, args, flags):
    """Flags in `args` that are not --name=value of a flag `binary` has."""
    problems = []
    for a in args:
        m = re.fullmatch(r"--(\w+)=(.*)", a)
        if not m:
            problems.append("'%s' is not --name=value" % a)
        elif m.group(1) not in flags[binary]:
            problems.append("%s has no flag --%s" % (binary, m.group(1)))
    return problems


def flag_value(args, name):
    """The last --name=value in args, or None."""
    value = None
    for a in args:
        if a.startswith("--%s=" % name):
            value = a.split("=", 1)[1]
    return value


def cluster_tasks(cluster):
    """[(job, index, address)] of a TF_CONFIG cluster (list or sparse form)."""
    tasks = []
    for job, entries in cluster.items():
        if isinstance(entries, dict):
            tasks += [(job, int(i), a) for i, a in entries.items()]
        else:
            tasks += [(job, i, a) for i, a in enumerate(entries)]
    return sorted(tasks)


def split_address(address):
    """'host:port' or '[v6]:port' -> (host, port)."""
    m = re.fullmatch(r"\[([^\]]+)\]:(\d+)|([^:\[\]]+):(\d+)", address)
    if not m:
        raise ValueError("bad host:port '%s'" % address)
    return (m.group(1), int(m.group(2))) if m.group(1) else (m.group(3), int(m.group(4)))


def make_fake_bin(tmp):
    """A folder of stand-in daemons that print TF_CONFIG and their args as JSON."""
    d = os.path.join(tmp, "fakebin")
    os.makedirs(d, exist_ok=True)
    for binary in BUILT:
        p = os.path.join(d, binary)
        with open(p, "w") as f:
            f.write('#!/bin/sh\nexec %s -c \'import json,os,sys; '
                    'print(json.dumps({"tf_config": os.environ.get("TF_CONFIG"), '
                    '"args": sys.argv[1:]}))\' "$@"\n' % _python())
        os.chmod(p, 0o755)
    return d


def _python():
    import sys
    return sys.executable


def make_real_bin(repo, tmp):
    """A folder of links to the built daemons (bazel-bin), or None if any is missing."""
    d = os.path.join(tmp, "realbin")
    os.makedirs(d, exist_ok=True)
    for binary, path in BUILT.items():
        target = os.path.join(repo, "bazel-bin", path)
        if not os.access(target, os.X_OK):
            return None
        link = os.path.join(d, binary)
        if not os.path.lexists(link):
            os.symlink(target, link)
    return d


def real_bin_or_skip(repo, tmp):
    """make_real_bin, with a SKIP line saying how to build what it lacks."""
    d = make_real_bin(repo, tmp)
    if d is None:
        skip("the built daemons' own TF_CONFIG and flag checks: bazel-bin lacks them "
             "(bazel build //ps_server:ps_server //worker:worker //evaluator:evaluator //chief:chief)")
    return d


def entrypoint(repo, bin_dir, argv, env, hostname, timeout=20):
    """Runs deploy/docker/entrypoint.sh ARGV in a clean environment, as in a
    fresh container: a state folder of its own for every run (a final exit
    code kept there would make the next run exit at once)."""
    import tempfile
    with tempfile.TemporaryDirectory() as state:
        e = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOSTNAME": hostname,
             "PSCLUSTER_BIN_DIR": bin_dir}
        e.update(env)
        e["PSCLUSTER_STATE_DIR"] = state  # never the manifests' path on this machine
        return subprocess.run(["bash", os.path.join(repo, "deploy/docker/entrypoint.sh")] + argv,
                              env=e, capture_output=True, text=True, timeout=timeout)


def task_view(repo, fake_bin, argv, env, hostname):
    """(TF_CONFIG dict, args) that the daemon of `argv` would get, or raises."""
    r = entrypoint(repo, fake_bin, argv, env, hostname)
    if r.returncode != 0:
        raise RuntimeError("entrypoint exited %d: %s" % (r.returncode, r.stderr.strip()))
    out = json.loads(r.stdout.strip().splitlines()[-1])
    return json.loads(out["tf_config"]), out["args"]


def daemon_accepts(repo, real_bin, argv, env, hostname):
    """Runs the real daemon through the entrypoint with --metrics_port=-1 added:
    every check of TF_CONFIG and of the flags comes first in the mains, so
    the daemon exits 2 naming --metrics_port only when all of them passed.
    Returns (accepted, message)."""
    role = argv[0]
    extra = ["--metrics_port=-1"]
    if role in ("worker", "evaluator"):
        extra = ["--device=cpu"] + extra  # no GPU needed to check the rest
    try:
        r = entrypoint(repo, real_bin, argv + extra, env, hostname, timeout=10)
    except subprocess.TimeoutExpired:
        return False, "did not exit within 10 s (started serving?)"
    msg = (r.stderr + r.stdout).strip()
    accepted = r.returncode == 2 and "--metrics_port=-1" in msg
    return accepted, msg.splitlines()[-1] if msg else "exit %d" % r.returncode
PYEOF
