#!/usr/bin/env bash
# Tests tests/run_all.sh's counting rules on a copy of it in a scratch tree,
# with a stand-in `bazel` that hands back canned gtest XML reports and
# stand-in shell tests: a build is no test case; a gtest or shell skip is
# a skip, and with CI=true a failure unless its reason starts with "[gpu] ";
# a tests/*_test.sh that is not executable, or exits non-zero without a
# FAIL: line, is a failure naming it; the time each phase took is printed. Also checks that every tests/*_test.sh
# of this repository is executable in git.
#
# Usage: tests/run_all_test.sh [IGNORED]   (run_all.sh passes the MNIST folder)
# Prints PASS:/FAIL: lines; exit status 0 when nothing failed.
set -uo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/test_lib.sh"   # pass, fail, skip, finish

# Every test script run_all.sh picks up is executable in git (a fresh clone
# takes the mode from there).
modes="$(cd "$repo" && git ls-files -s -- 'tests/*_test.sh' 2>/dev/null)"
if [ -z "$modes" ]; then
  fail "git ls-files lists no tests/*_test.sh (not a git checkout?)"
elif not_x="$(awk '$1 != "100755" { print $4 }' <<<"$modes")" && [ -n "$not_x" ]; then
  fail "not executable in git: $(tr '\n' ' ' <<<"$not_x")"
else
  pass "all $(wc -l <<<"$modes") tests/*_test.sh are executable in git (100755)"
fi

# One shell library: every test script takes pass, fail, skip, report and
# finish from tests/test_lib.sh (itself, or through tests/deploy_common.sh)
# and defines none of them again.
own=""; lacking=""
for t in "$repo"/tests/*_test.sh; do
  grep -qE '^[[:space:]]*(pass|fail|skip|report|finish)\(\)' "$t" && own+=" $(basename "$t")"
  grep -qE '^[[:space:]]*(source|\.) .*(test_lib|deploy_common)\.sh' "$t" || lacking+=" $(basename "$t")"
done
if [ -z "$own$lacking" ]; then
  pass "every tests/*_test.sh takes pass, fail, skip, report and finish from tests/test_lib.sh"
else
  fail "tests/test_lib.sh: defined again in:${own:- none}; not sourced by:${lacking:- none}"
fi

# gtest XML as gtest 1.12 writes it: a pass, a GPU skip, a skip for want of
# data, a failure.
gtest_xml() {  # gtest_xml WITH_PROBLEMS(0|1)
  cat <<'EOF'
<?xml version="1.0" encoding="UTF-8"?>
<testsuites tests="4" failures="1" disabled="0" errors="0" time="0" name="AllTests">
  <testsuite name="A" tests="4" failures="1" disabled="0" skipped="2" errors="0" time="0">
    <testcase name="Passes" file="t.cc" line="2" status="run" result="completed" time="0" classname="A" />
    <testcase name="SkipsForGpu" file="t.cc" line="3" status="run" result="skipped" time="0" classname="A">
      <skipped message="t.cc:3&#x0A;[gpu] no CUDA device: none"><![CDATA[t.cc:3
[gpu] no CUDA device: none]]></skipped>
    </testcase>
EOF
  [ "$1" = 1 ] && cat <<'EOF'
    <testcase name="SkipsForData" file="t.cc" line="4" status="run" result="skipped" time="0" classname="A">
      <skipped message="t.cc:4&#x0A;no MNIST: set &quot;PSCLUSTER_DATA_DIR&quot;"><![CDATA[t.cc:4
no MNIST: set "PSCLUSTER_DATA_DIR"]]></skipped>
    </testcase>
    <testcase name="Fails" file="t.cc" line="5" status="run" result="completed" time="0" classname="A">
      <failure message="t.cc:5&#x0A;one is not two" type=""><![CDATA[t.cc:5
one is not two]]></failure>
    </testcase>
EOF
  echo '  </testsuite>'
  echo '</testsuites>'
}

# make_tree WITH_PROBLEMS: a scratch repository holding run_all.sh, an
# install_deps.sh that has nothing to do, a bazel that builds nothing and
# "runs" the canned reports, and stand-in shell tests.
make_tree() {
  local t="$tmp/repo"
  rm -rf "$t" && mkdir -p "$t/tests" "$t/deploy" "$t/bin" "$t/reports/main/tests/fake_test" \
    "$t/reports/cpu/compute/fake_cpu_test"
  cp "$repo/tests/run_all.sh" "$t/tests/"
  printf '#!/bin/sh\nexit 0\n' >"$t/deploy/install_deps.sh"
  gtest_xml "$1" >"$t/reports/main/tests/fake_test/test.xml"
  cat >"$t/reports/cpu/compute/fake_cpu_test/test.xml" <<'EOF'
<?xml version="1.0" encoding="UTF-8"?>
<testsuites tests="1" failures="0" disabled="0" errors="0" time="0" name="AllTests">
  <testsuite name="B" tests="1" failures="0" disabled="0" skipped="0" errors="0" time="0">
    <testcase name="Passes" file="u.cc" line="2" status="run" result="completed" time="0" classname="B" />
  </testsuite>
</testsuites>
EOF
  cat >"$t/bin/bazel" <<EOF
#!/usr/bin/env bash
cpu=0
for a in "\$@"; do [ "\$a" = --repo_env=PSCLUSTER_CUDA=0 ] && cpu=1; done
echo "\$*" >>"$t/bazel-calls"
case "\$1" in
  build|info) exit 0 ;;
  test)
    if [ \$cpu = 1 ]; then from="$t/reports/cpu"; else from="$t/reports/main"; fi
    mkdir -p "$t/bazel-testlogs" && cp -r "\$from"/. "$t/bazel-testlogs"/ && echo "//tests:fake_test PASSED in 0.1s" ;;
esac
EOF
  mkdir -p "$t/deploy/docker"
  printf '#!/bin/sh\nexit 0\n' >"$t/deploy/docker/build_binaries.sh"
  chmod +x "$t/deploy/docker/build_binaries.sh"
  printf '#!/usr/bin/env bash\necho "PASS: a check"\necho "SKIP: [gpu] no CUDA device"\n' >"$t/tests/a_test.sh"
  if [ "$1" = 1 ]; then
    echo 'echo "SKIP: no MNIST in /nowhere"' >>"$t/tests/a_test.sh"
    printf '#!/usr/bin/env bash\necho "PASS: never run"\n' >"$t/tests/b_test.sh"   # not executable
    printf '#!/usr/bin/env bash\necho "half done"\nexit 3\n' >"$t/tests/c_test.sh"
    chmod +x "$t/tests/c_test.sh"
  fi
  chmod +x "$t/tests/run_all.sh" "$t/deploy/install_deps.sh" "$t/bin/bazel" "$t/tests/a_test.sh"
}

# expect NAME CI WITH_PROBLEMS STATUS LAST_LINE [REGEX...]: runs the copy
# and checks its exit status, its last line and that each REGEX matches.
expect() {
  local name="$1" ci="$2" problems="$3" want_rc="$4" want_last="$5" out rc last re
  shift 5
  make_tree "$problems"
  out="$(cd "$tmp" && PATH="$tmp/repo/bin:$PATH" CI="$ci" PSCLUSTER_DATA_DIR=/nowhere \
    "$tmp/repo/tests/run_all.sh" 2>&1)"; rc=$?
  last="$(tail -n 1 <<<"$out")"
  if [ "$rc" -ne "$want_rc" ] || [ "$last" != "$want_last" ]; then
    fail "$name: exit $rc, last line '$last'; wanted exit $want_rc, '$want_last'"
    echo "$out" | tail -n 15 | sed "s/^/    /"; return
  fi
  for re in "$@"; do
    if ! grep -qE -- "$re" <<<"$out"; then
      fail "$name: no line matches /$re/"; echo "$out" | tail -n 15 | sed "s/^/    /"; return
    fi
  done
  pass "$name"
}

# Counted: 3 passes (gtest, CPU-only gtest, shell), no build step.
expect "off CI: skips are skips; a failed case, a script that is not executable and one that exits 3 without FAIL: fail; the build counts nothing" \
  false 1 1 "3 passed, 3 failed, 4 skipped" \
  '^run_all: FAILED  //tests:fake_test A\.Fails: t\.cc:5 \| one is not two$' \
  '^run_all: FAILED  tests/b_test\.sh: not executable \(chmod \+x; in git: git update-index --chmod=\+x tests/b_test\.sh\)$' \
  '^run_all: FAILED  tests/c_test\.sh: exited 3 without a FAIL: line$' \
  '^run_all: skipped //tests:fake_test A\.SkipsForData: no MNIST: set "PSCLUSTER_DATA_DIR"$' \
  '^run_all: skipped tests/a_test\.sh: \[gpu\] no CUDA device$'
expect "CI=true: a skip not for the GPU (gtest or shell) is a failure naming it; GPU skips stay skips" \
  true 1 1 "3 passed, 5 failed, 2 skipped" \
  '^run_all: FAILED  //tests:fake_test A\.SkipsForData: skipped on CI, not for the GPU: no MNIST: set "PSCLUSTER_DATA_DIR"$' \
  '^run_all: FAILED  tests/a_test\.sh: skipped on CI, not for the GPU: no MNIST in /nowhere$' \
  '^run_all: skipped //tests:fake_test A\.SkipsForGpu: \[gpu\] no CUDA device: none$'
expect "CI=true with only GPU skips passes (exit 0); the time of each phase and shell test is printed" \
  true 0 0 "3 passed, 0 failed, 2 skipped" \
  '^run_all: [0-9]+ s  tests/a_test\.sh$' \
  '^run_all: [0-9]+ s  bazel build //\.\.\.$' '^run_all: [0-9]+ s  bazel test //\.\.\.$' \
  '^run_all: [0-9]+ s  the CPU-only build and its tests$' '^run_all: [0-9]+ s  in all$'

# --jobs: a value that is not a whole number from 1 to 99 exits 2 naming it.
make_tree 0
out="$(cd "$tmp" && PATH="$tmp/repo/bin:$PATH" "$tmp/repo/tests/run_all.sh" --jobs=0 2>&1)"; rc=$?
[ "$rc" -eq 2 ] && grep -q -- '--jobs=0' <<<"$out" && pass "--jobs=0 exits 2 naming it" ||
  fail "--jobs=0: exit $rc: $out"

# Side by side: two tests that each wait for the other to have started pass
# with --jobs=3 (the Bazel job and both); each one's output is printed whole.
make_tree 0
for x in a b; do
  y=$([ $x = a ] && echo b || echo a)
  cat >"$tmp/repo/tests/${x}_test.sh" <<EOF
#!/usr/bin/env bash
touch "$tmp/started.$x"
for i in \$(seq 100); do [ -e "$tmp/started.$y" ] && break; sleep 0.1; done
echo "line 1 of $x"
[ -e "$tmp/started.$y" ] && echo "PASS: $x saw $y running" || echo "FAIL: $x never saw $y start"
echo "line 3 of $x"
EOF
  chmod +x "$tmp/repo/tests/${x}_test.sh"
done
out="$(cd "$tmp" && PATH="$tmp/repo/bin:$PATH" PSCLUSTER_DATA_DIR=/nowhere "$tmp/repo/tests/run_all.sh" --jobs=3 2>&1)"; rc=$?
if [ "$rc" -eq 0 ] && [ "$(tail -n 1 <<<"$out")" = "4 passed, 0 failed, 1 skipped" ] &&
   grep -qzP 'line 1 of a\nPASS: a saw b running\nline 3 of a' <<<"$out" &&
   grep -qzP 'line 1 of b\nPASS: b saw a running\nline 3 of b' <<<"$out"; then
  pass "--jobs=3 runs the tests side by side, each one's output printed whole"
else
  fail "--jobs=3: exit $rc, last line '$(tail -n 1 <<<"$out")'"; echo "$out" | tail -n 15 | sed "s/^/    /"
fi

# --quick: no CPU-only build, Bazel's cluster tests filtered out, only the
# quick tier's shell tests (a_test.sh is not one of them, layering_test.sh is).
make_tree 0
printf '#!/usr/bin/env bash\necho "PASS: layering"\n' >"$tmp/repo/tests/layering_test.sh"
chmod +x "$tmp/repo/tests/layering_test.sh"
out="$(cd "$tmp" && PATH="$tmp/repo/bin:$PATH" PSCLUSTER_DATA_DIR=/nowhere "$tmp/repo/tests/run_all.sh" --quick 2>&1)"; rc=$?
calls="$(cat "$tmp/repo/bazel-calls")"
if [ "$rc" -eq 0 ] && [ "$(tail -n 1 <<<"$out")" = "2 passed, 0 failed, 1 skipped" ] &&
   grep -q 'PASS: layering' <<<"$out" && ! grep -q 'PASS: a check' <<<"$out" &&
   grep -q -- '--test_tag_filters=-cluster' <<<"$calls" && ! grep -q -- 'PSCLUSTER_CUDA=0' <<<"$calls"; then
  pass "--quick: the quick tier's shell tests, no cluster tests, no CPU-only build"
else
  fail "--quick: exit $rc, last line '$(tail -n 1 <<<"$out")'; bazel calls: $(tr '\n' ';' <<<"$calls")"
  echo "$out" | tail -n 15 | sed "s/^/    /"
fi

echo "run_all_test: checked tests/run_all.sh's counting: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
