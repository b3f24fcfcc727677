#!/usr/bin/env python3
"""Runs every shell block of docs/deploy-compose.md, and those of the
README's "Docker Compose" section, as written, in order, in a scratch copy
of the repository (data/mnist holding the real MNIST, model.json and
data.npz as the README's export writes them), with the real
docker-compose and scale.py, and with a `docker` that needs no engine:

  * `docker build [-f F] -t T CTX` checks that F and CTX exist, that the
    Debian-stack line sets DOCKER_BUILDKIT=1 (the legacy builder refuses the
    Dockerfiles' --mount), and records T;
  * `docker compose ARGS` (Compose v2) and `docker-compose ARGS` (v1)
    become the real docker-compose 1.29 over the same files and
    environment: `up` renders the project (`config -q`: every file,
    variable and mount source must be right) and needs the image it names
    to have been built or tagged before, `down` renders it too, `ps -aq
    SERVICE` and `port SERVICE PORT` answer for a service the project has;
  * `docker cp ID:PATH DEST` needs an id that `ps -aq` gave, `docker run`
    an image built before and a role of the entrypoint.

`tensorboard --logdir DIR` needs DIR; `sudo` runs its command (this runs as
root). Prints PASS:/FAIL: lines; exit 1 when one failed.

Usage: compose_doc_blocks.py REPO TMP MNIST_DIR     (tests/deploy_compose_test.sh)
"""
import os
import re
import shutil
import subprocess
import sys

import yaml

from doc_blocks import Checks, run_page, write_tools

REPO, TMP, MNIST = sys.argv[1], sys.argv[2], sys.argv[3]
checks = Checks()
report = checks.report
root = os.path.join(TMP, "compose-doc-blocks")
for d in ("deploy", "docs"):
    shutil.copytree(os.path.join(REPO, d), os.path.join(root, d))
shutil.copy(os.path.join(REPO, "README.md"), root)
os.makedirs(os.path.join(root, "data/mnist"))
for name in os.listdir(MNIST):
    if name.endswith("-ubyte.gz"):
        shutil.copy(os.path.join(MNIST, name), os.path.join(root, "data/mnist"))
shutil.copy(os.path.join(REPO, "tests/fixtures/keras/tfjs_plain.json"), os.path.join(root, "model.json"))
open(os.path.join(root, "data.npz"), "wb").close()
bin_dir = os.path.join(TMP, "compose-doc-blocks-bin")
os.makedirs(bin_dir)
state = os.path.join(TMP, "compose-doc-blocks-images")
real_compose = shutil.which("docker-compose")

# The stand-in docker and docker-compose: one Python program, by its name.
with open(os.path.join(bin_dir, "fake_docker.py"), "w") as f:
    f.write(r'''
import os, subprocess, sys
STATE, REAL, ID = os.environ["FAKE_DOCKER_IMAGES"], os.environ["REAL_COMPOSE"], "0123456789ab"
def die(msg):
    sys.stderr.write("fake docker: %s\n" % msg); sys.exit(1)
def images():
    return open(STATE).read().split() if os.path.exists(STATE) else []
def tag(name):
    return name if ":" in name.split("/")[-1] else name + ":latest"
def compose(args):
    files, i = [], 0
    while i < len(args) and args[i].startswith("-"):
        if args[i] in ("-f", "--file", "-p", "--project-name", "--project-directory", "--env-file"):
            files += args[i:i + 2]; i += 2
        else:
            files.append(args[i]); i += 1
    if i == len(args):
        die("compose: no command in %s" % args)
    cmd, rest = args[i], args[i + 1:]
    r = subprocess.run([REAL] + files + ["config"], capture_output=True, text=True)
    if r.returncode != 0:
        die("docker-compose %s config: %s" % (" ".join(files), r.stderr.strip()[-500:]))
    import yaml
    project = yaml.safe_load(r.stdout)
    services = project.get("services", {})
    if cmd == "up":
        wanted = {tag(s["image"]) for s in services.values()}
        missing = wanted - set(images()) if "--build" not in rest else set()
        if missing:
            die("up: image %s was never built or tagged" % sorted(missing))
    elif cmd in ("ps", "port"):
        names = [a for a in rest if not a.startswith("-")]
        if not names or names[0] not in services:
            die("%s: no service %s in %s" % (cmd, names[:1], sorted(services)))
        print(ID if cmd == "ps" else "127.0.0.1:49153")
    elif cmd not in ("down", "config", "logs", "stop"):
        die("compose command %s is not one the docs should need" % cmd)
name, args = sys.argv[1], sys.argv[2:]
if name == "docker-compose":
    compose(args)
elif args[:1] == ["compose"]:
    compose(args[1:])
elif args[:1] == ["build"]:
    dockerfile, tags, rest, i = "Dockerfile", [], [], 1
    while i < len(args):
        if args[i] == "-f": dockerfile = args[i + 1]; i += 2
        elif args[i] == "-t": tags.append(args[i + 1]); i += 2
        elif args[i] == "--build-arg": i += 2
        else: rest.append(args[i]); i += 1
    if len(rest) != 1 or not os.path.isdir(rest[0]):
        die("build: context %s is not a folder" % rest)
    if not os.path.isfile(os.path.join(rest[0], dockerfile)) and not os.path.isfile(dockerfile):
        die("build: no Dockerfile %s" % dockerfile)
    if os.environ.get("DOCKER_BUILDKIT") != "1":
        die("build without DOCKER_BUILDKIT=1: Debian's docker 20.10 would use the legacy builder, which refuses --mount")
    with open(STATE, "a") as f:
        f.write("".join(tag(t) + "\n" for t in tags))
elif args[:1] == ["cp"]:
    if len(args) != 3 or not args[1].startswith(ID + ":/"):
        die("cp: want ID:PATH DEST with the id ps -aq gave, got %s" % args[1:])
    dest = args[2]
    open(os.path.join(dest, os.path.basename(args[1])) if os.path.isdir(dest) else dest, "w").close()
elif args[:1] == ["run"]:
    words = [a for a in args[1:] if not a.startswith("-")]
    image = next((w for w in words if tag(w) in images()), None)
    if image is None:
        die("run: no image built before among %s" % words)
    role = words[words.index(image) + 1] if words.index(image) + 1 < len(words) else ""
    if role not in ("ps", "worker", "evaluator", "chief"):
        die("run: %s is not a role of the entrypoint" % role)
elif args[:1] == ["tag"]:
    with open(STATE, "a") as f:
        f.write(tag(args[2]) + "\n")
else:
    die("%s is not a command the docs should need" % args[:1])
''')
write_tools(bin_dir, dict(
    {name: 'exec "%s" "%s" %s "$@"\n' % (sys.executable, os.path.join(bin_dir, "fake_docker.py"), name)
     for name in ("docker", "docker-compose")},
    tensorboard='[ "$1" = --logdir ] && [ -d "$2" ] && exit 0; echo "fake tensorboard: $*" >&2; exit 1\n',
    sudo='exec "$@"\n'))
env = dict(os.environ, PATH=bin_dir + os.pathsep + os.environ["PATH"], FAKE_DOCKER_IMAGES=state,
           REAL_COMPOSE=real_compose or "docker-compose")
for k in [k for k in env if k.startswith("PSCLUSTER_")]:
    del env[k]

for doc, section, min_blocks in (("docs/deploy-compose.md", None, 5), ("README.md", "Docker Compose", 2)):
    run_page(checks, REPO, doc, section, min_blocks, root, env)

# deploy/compose/.env as its header says to use it: lines uncommented and
# changed; Compose reads it from the Compose file's folder, and a variable
# of the shell wins over it.
dotenv = os.path.join(root, "deploy/compose/.env")
with open(dotenv) as f:
    text = f.read()
text = re.sub(r"^#PSCLUSTER_CHIEF_ARGS=.*$", "PSCLUSTER_CHIEF_ARGS=--batch_size=64 --optimizer=sgd", text, flags=re.M)
text = re.sub(r"^#PSCLUSTER_EPOCHS=.*$", "PSCLUSTER_EPOCHS=2", text, flags=re.M)
with open(dotenv, "w") as f:
    f.write(text)
for shell, want_epochs in (({}, "2"), ({"PSCLUSTER_EPOCHS": "3"}, "3")):
    r = subprocess.run([real_compose or "docker-compose", "-f", "deploy/compose/docker-compose.yml", "config"],
                       cwd=root, env=dict(env, **shell), capture_output=True, text=True)
    chief = (yaml.safe_load(r.stdout) or {}).get("services", {}).get("chief", {}) if r.returncode == 0 else {}
    environment = chief.get("environment") or {}
    report(environment.get("PSCLUSTER_ARGS") == "--batch_size=64 --optimizer=sgd" and
           "--epochs=%s" % want_epochs in (chief.get("command") or []),
           "deploy/compose/.env with PSCLUSTER_CHIEF_ARGS and PSCLUSTER_EPOCHS=2 uncommented reaches the chief "
           "(PSCLUSTER_ARGS, --epochs=%s%s)" % (want_epochs, ", the shell's PSCLUSTER_EPOCHS=3 winning" if shell else ""),
           r.stderr.strip()[-300:] or "chief: %s" % chief)
sys.exit(checks.status())
