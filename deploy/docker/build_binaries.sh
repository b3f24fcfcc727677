#!/usr/bin/env bash
# Build stage of deploy/docker/Dockerfile{,.cuda}: builds the four daemons and
# the health probe with Bazel and copies them into OUT_DIR.
#
#   deploy/docker/build_binaries.sh OUT_DIR cpu|cuda [BAZEL_FLAGS...]
#
# cpu: PSCLUSTER_CUDA=0 (CPU-only, even where nvcc exists); cuda:
# PSCLUSTER_CUDA=1 (fails when the toolkit is missing), compute capabilities
# from PSCLUSTER_CUDA_ARCH (default 90). Run from the repository root; it
# switches the workspace's @local_cuda, so on a development machine prefer
# the bazel commands in README.md.
set -euo pipefail

[ $# -ge 2 ] || { sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
out="$1"
variant="$2"
shift 2
case "$variant" in
  cpu) flags=(--repo_env=PSCLUSTER_CUDA=0) ;;
  cuda) flags=(--repo_env=PSCLUSTER_CUDA=1 "--repo_env=PSCLUSTER_CUDA_ARCH=${PSCLUSTER_CUDA_ARCH:-90}") ;;
  *) echo "build_binaries.sh: variant must be cpu or cuda, got '$variant'" >&2; exit 2 ;;
esac

# label -> name in the image
declare -A TARGETS=(
  [//ps_server:ps_server]=ps_server
  [//worker:worker]=worker
  [//evaluator:evaluator]=evaluator
  [//chief:chief]=chief
  [//deploy/docker:health_probe]=pscluster-health-probe
)
labels=("${!TARGETS[@]}")
if [ -n "${PSCLUSTER_IMAGE_TARGETS:-}" ]; then
  read -ra labels <<<"$PSCLUSTER_IMAGE_TARGETS"
  for label in "${labels[@]}"; do
    [ -n "${TARGETS[$label]:-}" ] ||
      { echo "build_binaries.sh: PSCLUSTER_IMAGE_TARGETS: '$label' is not one of ${!TARGETS[*]}" >&2; exit 2; }
  done
fi
bazel build "${flags[@]}" "$@" "${labels[@]}"
bin="$(bazel info "${flags[@]}" "$@" bazel-bin)"
mkdir -p "$out"
for label in "${labels[@]}"; do
  path="${label#//}"
  install -m 0755 "$bin/${path%%:*}/${path##*:}" "$out/${TARGETS[$label]}"
done
ls -l "$out"
