#!/usr/bin/env bash
# Installs the Debian 12 packages the build and the tests need, if any is
# missing. Idempotent: does nothing (and needs no root) when all are there.
#   deploy/install_deps.sh [--build_only] [--check]
#     --build_only  only what building and running the daemons needs (the
#                   local launcher and the Docker build stage); without it,
#                   also everything tests/run_all.sh's tests call
#     --check       install nothing; list what is missing (exit 1 if any)
set -euo pipefail

# Building and running the daemons (libzip: NumPy .npz data and .keras
# model archives; libhdf5-dev: Keras weight files for the chief's
# --initial_weights).
BUILD_PACKAGES=(
  bazel-bootstrap g++ git
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libspdlog-dev libfmt-dev nlohmann-json3-dev
  libgtest-dev libgmock-dev
  libopenblas-dev libeigen3-dev zlib1g-dev
  libzip-dev libhdf5-dev
  prometheus-cpp-dev
  ca-certificates curl
)
# What the tests call, beyond the build (each checked against Debian 12's
# apt sources with apt-cache policy):
#   clang, libclang-rt-14-dev  tests/fuzz_test.sh: clang -fsanitize=fuzzer;
#                              libFuzzer and the sanitizer runtimes are in
#                              libclang-rt-14-dev, only a Recommends of clang
#   iproute2                   tests/netns_cluster_test.sh (ip netns)
#   kubernetes-client          tests/deploy_k8s_test.sh (kubectl kustomize);
#                              not needed when a kubectl is on PATH (e.g.
#                              the kubectl package of Google's Cloud SDK
#                              repository, which conflicts with it). The
#                              manifests need kubectl 1.22 or newer (kustomize
#                              components and replacements): Debian 12's is
#                              1.20, which the test names as too old
#   docker-compose             tests/deploy_compose_test.sh (config) and
#                              tests/docker_run_test.sh (up: Compose v1, 1.29)
#   docker.io                  tests/docker_run_test.sh: dockerd 20.10, its
#                              containerd and runc, and the docker CLI
#                              (/usr/bin/docker); the test starts a private
#                              daemon, the package's own service is not used
#   debootstrap                tests/docker_run_test.sh (the debian:12 base
#                              image, made from Debian's mirror)
#   python3-yaml               tests/deploy_*_test.sh (reading the manifests)
#   python3-numpy              tests/keras_model_forward.py (cnn_test, keras_model_test),
#                              tests/fixtures/npy, keras_model_test's .npz
#   python3-torch              tests/ctr_models_test.sh (the PyTorch peer,
#                              tests/bench/ctr_torch.py; the CTR benchmarks)
#   jq                         deploy/docker/entrypoint.sh under the deploy tests
#   openssl                    test certificates (security tests, deploy/tls)
#   perl                       tests/train_sh_test.sh (Ctrl-C of a background job)
#   gnuplot-nox                tests/bench/async_scale.cc (its PNG of images/s
#                              and accuracy against the worker count)
#   python3-h5py               tests/fixtures/keras/make_keras_weights.py (Keras
#                              weight files: the fixtures, and initial_weights_test's
#                              .keras archive of a trained model)
#   xz-utils                   deploy/gpu/pack.sh --xz and tests/gpu_pack_test.sh
#                              (tar -J); strip, readelf and objdump come with
#                              g++'s binutils
#   gdb                        tests/netns_cluster_test.sh prints the threads of a
#                              daemon that does not exit after its run
TEST_PACKAGES=(
  clang libclang-rt-14-dev
  iproute2
  kubernetes-client
  docker-compose docker.io debootstrap python3-yaml python3-numpy python3-h5py python3-torch jq
  openssl perl gnuplot-nox xz-utils gdb
)

build_only=0
check=0
for arg in "$@"; do
  case "$arg" in
    -h|--help)
      sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'
      exit 0 ;;
    --build_only) build_only=1 ;;
    --check) check=1 ;;
    *) echo "install_deps.sh: unknown argument '$arg' (try --help)" >&2; exit 2 ;;
  esac
done
PACKAGES=("${BUILD_PACKAGES[@]}")
[ "$build_only" = 1 ] || PACKAGES+=("${TEST_PACKAGES[@]}")

# A package that a command of the same use, found on PATH, stands in for.
declare -A COMMAND_FOR=([kubernetes-client]=kubectl)

# One dpkg-query for all (the local launcher runs this at every start; one
# call a package took seconds on a busy machine). It prints nothing for a
# package dpkg does not know.
declare -A INSTALLED=()
while read -r name status; do
  [ "$status" = "install ok installed" ] && INSTALLED[$name]=1
done < <(dpkg-query -W -f='${Package} ${Status}\n' "${PACKAGES[@]}" 2>/dev/null || true)
missing=()
for p in "${PACKAGES[@]}"; do
  if [ -n "${COMMAND_FOR[$p]:-}" ] && command -v "${COMMAND_FOR[$p]}" >/dev/null 2>&1; then
    continue
  fi
  [ -n "${INSTALLED[$p]+x}" ] || missing+=("$p")
done

# tests/deploy_docker_test.sh asks apt-cache whether the runtime image's
# packages exist: that needs apt's package lists, which a fresh machine or
# image may not have.
need_lists=0
if [ "$build_only" = 0 ] && ! compgen -G '/var/lib/apt/lists/*_Packages*' >/dev/null; then
  need_lists=1
fi

if [ ${#missing[@]} -eq 0 ] && [ "$need_lists" = 0 ]; then
  exit 0
fi
if [ "$check" = 1 ]; then
  [ ${#missing[@]} -gt 0 ] && echo "missing: ${missing[*]}"
  [ "$need_lists" = 1 ] && echo "missing: apt package lists (apt-get update)"
  exit 1
fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "install_deps: installing ${missing[*]}" >&2
else
  echo "install_deps: fetching apt's package lists" >&2
fi
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    SUDO=sudo
  else
    echo "install_deps: missing: ${missing[*]:-} $([ "$need_lists" = 1 ] && echo "(and apt package lists)")" >&2
    echo "install_deps: run this script as root (or install them with apt-get)" >&2
    exit 1
  fi
else
  SUDO=
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q >/dev/null
if [ ${#missing[@]} -gt 0 ]; then
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
fi
echo "install_deps: done" >&2
