"""Running a Markdown page's shell blocks as written, for the tests that do
(tests/compose_doc_blocks.py, tests/k8s/run_doc_blocks.py): the blocks, the
PASS:/FAIL: lines and their count, and the stand-in commands on PATH."""
import os
import re
import subprocess


def shell_blocks(path, section=None):
    """The ```sh blocks of PATH, in order; of its section SECTION (a "## "
    title) alone when given."""
    with open(path) as f:
        text = f.read()
    if section:
        m = re.search(r"^## %s\n(.*?)(?=^## |\Z)" % re.escape(section), text, re.M | re.S)
        text = m.group(1) if m else ""
    return re.findall(r"^```sh\n(.*?)^```", text, re.M | re.S)


class Checks:
    """PASS:/FAIL: lines, and how many failed (the exit status)."""

    def __init__(self):
        self.failed = 0

    def report(self, ok, what, why=""):
        print("%s: %s%s" % ("PASS" if ok else "FAIL", what, "" if ok else ": " + str(why)), flush=True)
        self.failed += not ok
        return ok

    def status(self):
        return 1 if self.failed else 0


def write_tools(bin_dir, tools):
    """Executables in BIN_DIR (made), one per NAME -> shell script body."""
    os.makedirs(bin_dir, exist_ok=True)
    for name, body in tools.items():
        path = os.path.join(bin_dir, name)
        with open(path, "w") as f:
            f.write("#!/usr/bin/env bash\n" + body)
        os.chmod(path, 0o755)


def run_page(checks, repo, doc, section, min_blocks, cwd, env, after=None):
    """Runs every shell block of REPO/DOC (its SECTION alone when given) in
    order, in CWD with ENV, under `bash -e -o pipefail`: a check that the
    page has at least MIN_BLOCKS, and one per block that it exits 0. AFTER
    (number, block, where), when given, runs after each: the caller's own
    checks."""
    blocks = shell_blocks(os.path.join(repo, doc), section)
    where = doc + (" (%s)" % section if section else "")
    checks.report(len(blocks) >= min_blocks, "%s has its shell blocks (%d)" % (where, len(blocks)), "too few")
    for n, block in enumerate(blocks, 1):
        first = block.strip().splitlines()[0]
        r = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", block], cwd=cwd, env=env,
                           capture_output=True, text=True, timeout=300)
        checks.report(r.returncode == 0, "%s block %d (%s) runs as written" % (where, n, first[:70]),
                      (r.stderr or r.stdout).strip()[-600:])
        if after:
            after(n, block, where)
