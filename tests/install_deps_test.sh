#!/usr/bin/env bash
# Tests deploy/install_deps.sh: its arguments, that every package it names
# exists in Debian 12's apt sources, that nothing is missing once it ran
# (run_all.sh runs it first), and that the tools the tests call are then
# there: clang linking libFuzzer with ASan and UBSan (tests/fuzz_test.sh),
# ip (netns_cluster_test.sh), kubectl kustomize (deploy_k8s_test.sh),
# docker-compose, dockerd, containerd, docker and debootstrap
# (docker_run_test.sh), jq, openssl, perl, curl, gnuplot (the async_scale
# benchmark's PNG), xz, strip, readelf and objdump (the GPU pack and
# gpu_pack_test.sh), and Debian's python3 with numpy (cnn_test's
# keras_model_forward.py), yaml (deploy tests) and h5py
# (make_keras_weights.py).
#
# Usage: tests/install_deps_test.sh [IGNORED]   (run_all.sh passes the MNIST folder)
# Prints PASS:/FAIL:/SKIP: lines; exit status 0 when nothing failed.
set -uo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
script="$repo/deploy/install_deps.sh"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/test_lib.sh"   # pass, fail, skip, finish

out="$("$script" --help 2>&1)"; rc=$?
[ "$rc" -eq 0 ] && grep -q -- '--build_only' <<<"$out" &&
  pass "--help exits 0 and names --build_only" || fail "--help: exit $rc: $out"
out="$("$script" --bogus 2>&1)"; rc=$?
[ "$rc" -eq 2 ] && grep -q "unknown argument '--bogus'" <<<"$out" &&
  pass "an unknown argument exits 2 naming it" || fail "--bogus: exit $rc: $out"

# The package lists, as the script declares them.
mapfile -t packages < <(bash -c 'eval "$(sed -n "/^BUILD_PACKAGES=(/,/^)/p; /^TEST_PACKAGES=(/,/^)/p" "$1")"
  printf "%s\n" "${BUILD_PACKAGES[@]}" "${TEST_PACKAGES[@]}"' _ "$script")
if [ "${#packages[@]}" -lt 20 ]; then
  fail "read only ${#packages[@]} packages from install_deps.sh: ${packages[*]}"
elif [[ "$(apt-cache policy libc6 2>/dev/null)" != *"Candidate: "[0-9]* ]]; then
  skip "apt sources: apt-cache has no package lists here (apt-get update)"
else
  # One call: "name:" lines, each followed by its "Candidate:" line.
  declare -A candidate=()
  while read -r name version; do candidate[$name]="$version"; done < <(
    apt-cache policy "${packages[@]}" 2>/dev/null |
      awk '/^[^ ].*:$/ { name = substr($0, 1, length($0) - 1) } $1 == "Candidate:" { print name, $2 }')
  none=()
  for p in "${packages[@]}"; do
    [[ "${candidate[$p]:-}" == [0-9]* ]] || none+=("$p")
  done
  [ ${#none[@]} -eq 0 ] && pass "all ${#packages[@]} packages have an apt candidate" ||
    fail "no apt candidate for: ${none[*]}"
fi

out="$("$script" --check 2>&1)"; rc=$?
[ "$rc" -eq 0 ] && pass "--check: nothing missing" ||
  fail "--check exits $rc: $out (run deploy/install_deps.sh as root)"

# What the tests call.
missing=()
for c in clang clang++ ip kubectl docker-compose dockerd containerd /usr/bin/docker debootstrap \
         jq openssl perl curl gnuplot xz strip readelf objdump; do
  command -v "$c" >/dev/null 2>&1 || missing+=("$c")
done
[ ${#missing[@]} -eq 0 ] && pass "the tests' commands are on PATH" || fail "not on PATH: ${missing[*]}"
out="$(/usr/bin/python3 -c 'import numpy, yaml, h5py, torch; print(numpy.__version__)' 2>&1)" &&
  pass "/usr/bin/python3 has numpy $out, yaml, h5py and torch" || fail "/usr/bin/python3: $out"
printf 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }\n' \
  >"$tmp/probe.cc"
if out="$(clang++ -fsanitize=fuzzer,address,undefined "$tmp/probe.cc" -o "$tmp/probe" 2>&1)" &&
   out="$("$tmp/probe" -runs=10 2>&1)"; then
  pass "clang++ links and runs a libFuzzer target with ASan and UBSan"
else
  fail "libFuzzer with clang++: $(head -c 300 <<<"$out")"
fi
if out="$(kubectl kustomize "$repo/deploy/k8s" 2>&1)" && grep -q 'kind: StatefulSet' <<<"$out"; then
  pass "kubectl kustomize renders deploy/k8s"
else
  fail "kubectl kustomize deploy/k8s: $(tail -n 3 <<<"$out")"
fi

echo "install_deps_test: $passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
