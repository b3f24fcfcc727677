#!/usr/bin/env bash
# Installs the Debian 12 packages the build and the tests need, if any is
# missing. Idempotent: does nothing (and needs no root) when all are there.
#   deploy/install_deps.sh [--check]    --check: only list what is missing
set -euo pipefail

PACKAGES=(
  bazel-bootstrap g++ git
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libspdlog-dev libfmt-dev nlohmann-json3-dev
  libgtest-dev libgmock-dev
  libopenblas-dev libeigen3-dev zlib1g-dev
  prometheus-cpp-dev
  ca-certificates curl
  docker-compose python3-yaml jq
)

case "${1:-}" in
  -h|--help)
    sed -n '2,4p' "$0" | sed 's/^# \{0,1\}//'
    exit 0 ;;
  --check|"") ;;
  *) echo "install_deps.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
esac

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if [ "${1:-}" = "--check" ]; then
  echo "missing: ${missing[*]}"
  exit 1
fi
echo "install_deps: installing ${missing[*]}" >&2
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    SUDO=sudo
  else
    echo "install_deps: these Debian packages are missing: ${missing[*]}" >&2
    echo "install_deps: run this script as root (or install them with apt-get)" >&2
    exit 1
  fi
else
  SUDO=
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q >/dev/null
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
echo "install_deps: done" >&2
