#!/usr/bin/env python3
"""Checks the layering of docs/architecture.md on the source tree.

    tests/layering_check.py [ROOT]

Libraries sit below the daemons and no daemon depends on another:

    common   <- model <- compute, update, wire <- ps_server, worker, evaluator, chief

Reads two graphs and checks each edge against ALLOWED below:
  - the include graph: every `#include "dir/..."` of every .h/.cc/.cu file;
  - the Bazel graph: every `//dir...` label in every BUILD file's deps,
    srcs, hdrs and data (a daemon's binary declared as a test's data is
    the tests' business: tests/ and fuzz/ may use anything).
It also checks that production code never includes a test helper (a
header under a `testing/` folder) and that every BUILD target under
`testing/` is testonly.

Prints one line per check, "PASS: ..." or "FAIL: ..." (naming each bad
edge, file and line), and exits 1 when any check failed.
"""
import os
import re
import sys

# The layers, lowest first. A folder may depend on itself and on the
# folders listed for it; nothing else of ours (third_party is everyone's).
LIBRARIES = {
    "proto": set(),
    "common": {"proto"},
    "model": {"common", "proto"},
    "compute": {"model", "common"},
    "update": {"model", "common", "proto"},
    "wire": {"model", "common", "proto"},
}
DAEMONS = ("ps_server", "worker", "evaluator", "chief")
ALLOWED = dict(LIBRARIES)
for d in DAEMONS:
    ALLOWED[d] = set(LIBRARIES)  # every library, no other daemon
# Not layered: they may use anything (tests start the real binaries).
# Everyone may use third_party; only tests may use test fixtures.
FREE = {"tests", "fuzz", "deploy", "third_party", "docs"}
EVERYONES = {"third_party"}
SOURCE_EXTENSIONS = (".h", ".cc", ".cu")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
LABEL = re.compile(r'"(?:@pscluster)?//([A-Za-z0-9_]+)[/:"]')


def top(path):
    return path.split("/", 1)[0]


def is_test_file(path):
    name = os.path.basename(path)
    return (name.endswith(("_test.cc", "_test.h", "_fuzzer.cc"))
            or "/testing/" in "/" + path or top(path) in FREE)


def allowed(src, dst, test):
    """Whether code in folder `src` may use folder `dst`."""
    if dst == src or dst in EVERYONES or dst in ALLOWED[src]:
        return True
    return test and dst in FREE  # a test's fixtures


def walk(root):
    for folder in sorted(ALLOWED):
        for dirpath, dirnames, files in os.walk(os.path.join(root, folder)):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            for f in sorted(files):
                yield os.path.relpath(os.path.join(dirpath, f), root)


def check_includes(root, problems, helpers):
    edges = 0
    for path in walk(root):
        if not path.endswith(SOURCE_EXTENSIONS):
            continue
        src = top(path)
        with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
            for lineno, line in enumerate(f, 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                target = m.group(1)
                dst = top(target)
                if "/" not in target or dst not in ALLOWED and dst not in FREE:
                    continue  # a system or third-party header
                edges += 1
                if not allowed(src, dst, is_test_file(path)):
                    problems.append("%s:%d includes %s: %s may not depend on %s"
                                    % (path, lineno, target, src, dst))
                if "/testing/" in "/" + target and not is_test_file(path):
                    helpers.append("%s:%d includes the test helper %s"
                                   % (path, lineno, target))
    return edges


def build_files(root):
    for path in walk(root):
        if os.path.basename(path) in ("BUILD", "BUILD.bazel"):
            yield path


def targets(text):
    """(name, rule, body, first line) of each rule call that starts a line."""
    for m in re.finditer(r"^\[?([A-Za-z_]+)\(\n(.*?)^\)", text, re.S | re.M):
        name = re.search(r'^\s*name\s*=\s*"([^"]+)"', m.group(2), re.M)
        yield (name.group(1) if name else m.group(1), m.group(1), m.group(2),
               text.count("\n", 0, m.start()) + 1)


def check_build(root, problems, helpers):
    edges = 0
    for path in build_files(root):
        src = top(path)
        package = os.path.dirname(path)
        with open(os.path.join(root, path), encoding="utf-8") as f:
            text = f.read()
        for name, kind, body, lineno in targets(text):
            # visibility names who may use a target, not what it uses.
            body = re.sub(r"visibility\s*=\s*\[[^\]]*\]", "", body)
            test = kind == "cc_test" or re.search(r"testonly\s*=\s*(True|1)", body)
            for m in LABEL.finditer(body):
                dst = m.group(1)
                if dst not in ALLOWED and dst not in FREE:
                    continue
                edges += 1
                if not allowed(src, dst, test):
                    problems.append("%s:%d %s depends on //%s...: %s may not depend on %s"
                                    % (path, lineno, name, dst, src, dst))
            in_testing = "/testing" in "/" + package + "/"
            if in_testing and not re.search(r"testonly\s*=\s*(True|1)", body):
                helpers.append("%s:%d %s is a test helper but not testonly"
                               % (path, lineno, name))
    return edges


def report(ok, what, problems):
    if ok:
        print("PASS: " + what)
    else:
        print("FAIL: %s: %d problem(s):" % (what, len(problems)))
        for p in problems:
            print("  " + p)


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                           os.path.join(os.path.dirname(__file__), ".."))
    missing = [d for d in ALLOWED if not os.path.isdir(os.path.join(root, d))]
    inc, inc_helpers, build, build_helpers = [], [], [], []
    inc_edges = check_includes(root, inc, inc_helpers)
    build_edges = check_build(root, build, build_helpers)
    report(not missing, "every layer has its folder (%s)" % ", ".join(sorted(ALLOWED)),
           ["no folder %s/" % d for d in missing])
    report(inc_edges > 0 and not inc,
           "includes follow the layers (%d includes of our headers read)" % inc_edges,
           inc or ["no include of ours found: wrong root?"])
    report(build_edges > 0 and not build,
           "Bazel dependencies follow the layers (%d labels read)" % build_edges,
           build or ["no label of ours found: wrong root?"])
    report(not inc_helpers and not build_helpers,
           "test helpers stay out of production code", inc_helpers + build_helpers)
    return 1 if missing or inc or build or inc_helpers or build_helpers else 0


if __name__ == "__main__":
    sys.exit(main())
