#!/usr/bin/env bash
# The layering of docs/architecture.md: libraries below the daemons, no
# daemon on another daemon, no library on a daemon, test helpers out of
# production code. Runs tests/layering_check.py on this tree (its PASS:/
# FAIL: lines count here), then on scratch trees that break each rule once,
# which it must refuse, naming the file.
#   tests/layering_test.sh [ignored: run_all.sh passes the data folder]
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CHECK="$ROOT/tests/layering_check.py"
source "$ROOT/tests/test_lib.sh"   # pass, fail, report, finish

report < <(python3 "$CHECK" "$ROOT" 2>&1)

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# scratch: a minimal tree with every layer's folder and one clean edge each.
scratch() {
  rm -rf "$tmp/t" && mkdir -p "$tmp/t"
  local d
  for d in proto common model compute update wire ps_server worker evaluator chief; do
    mkdir -p "$tmp/t/$d"
  done
  printf '#include "common/logging.h"\n' >"$tmp/t/model/a.cc"
  printf '#include "model/a.h"\n#include "wire/b.h"\n' >"$tmp/t/worker/main.cc"
  printf 'cc_library(\n    name = "a",\n    deps = ["//common:logging"],\n)\n' >"$tmp/t/model/BUILD"
}

# refused WHAT EXPECTED: the checker fails on the scratch tree and names
# EXPECTED.
refused() {
  local out
  out="$(python3 "$CHECK" "$tmp/t" 2>&1)"
  if [ $? -ne 0 ] && grep -qF -- "$2" <<<"$out"; then
    pass "the check refuses $1"
  else
    fail "the check does not refuse $1 (wanted a line naming '$2'):"
    sed 's/^/  /' <<<"$out"
  fi
}

scratch
if python3 "$CHECK" "$tmp/t" >/dev/null; then
  pass "the check passes a tree that follows the layers"
else
  fail "the check refuses a clean scratch tree:"
  python3 "$CHECK" "$tmp/t" | sed 's/^/  /'
fi

scratch
printf '#include "worker/ring_client.h"\n' >"$tmp/t/chief/ring_chief.h"
refused "a daemon including another daemon's header" "chief/ring_chief.h:1 includes worker/ring_client.h"

scratch
printf 'cc_library(\n    name = "chief_lib",\n    deps = ["//worker:replica"],\n)\n' >"$tmp/t/chief/BUILD"
refused "a daemon's Bazel target on another daemon" "chief/BUILD:1 chief_lib depends on //worker"

scratch
printf '#include "ps_server/ps_service.h"\n' >"$tmp/t/update/store.cc"
refused "a library including a daemon's header" "update/store.cc:1 includes ps_server/ps_service.h"

scratch
printf '#include "compute/cpu_network.h"\n' >"$tmp/t/model/spec.cc"
refused "a lower library including a higher one" "model/spec.cc:1 includes compute/cpu_network.h"

scratch
mkdir -p "$tmp/t/compute/testing"
printf '#include "compute/testing/models.h"\n' >"$tmp/t/compute/scoring.cc"
refused "production code including a test helper" "compute/scoring.cc:1 includes the test helper"

scratch
mkdir -p "$tmp/t/compute/testing"
printf 'cc_library(\n    name = "models",\n    hdrs = ["models.h"],\n)\n' >"$tmp/t/compute/testing/BUILD"
refused "a test helper that is not testonly" "models is a test helper but not testonly"
finish
