# shellcheck shell=bash
# Shared by the shell tests (sourced, not a test itself): the result counters
# every tests/*_test.sh keeps, and how it reports them. tests/run_all.sh
# counts the PASS:/FAIL:/SKIP: lines; the last line is the script's summary.
#
# After sourcing: passed, failed and skipped at 0, and
#   pass MSG, fail MSG, skip MSG   print "PASS: MSG" (FAIL:, SKIP:) and count it;
#   report                         count the PASS:/FAIL:/SKIP: lines read on stdin
#                                  (a checker's output), printing them;
#   finish                         print "NAME: N passed, N failed, N skipped"
#                                  (NAME: the sourcing script's, without .sh)
#                                  and exit 0 when nothing failed, else 1;
#   has_mnist DIR                  true when DIR holds MNIST's IDX files;
#   need_mnist DIR                 unless has_mnist DIR, skip saying so, and
#                                  finish (on CI, tests/run_all.sh counts
#                                  the skip as a failure).
#   pick_free_ports N              append N free ports to the array PORTS,
#                                  reserved while the script runs, for
#                                  daemons it starts on them (from
#                                  deploy/local/free_ports.sh, as the local
#                                  launcher picks its tasks' ports);
#   TEST_PY                        the python3 with Debian's packages
#                                  (numpy, yaml, h5py: deploy/install_deps.sh):
#                                  /usr/bin/python3, else python3 on PATH
#                                  (another, such as pyenv's, may lack them).
source "$(dirname "${BASH_SOURCE[0]}")/../deploy/local/free_ports.sh"
passed=0
failed=0
skipped=0
TEST_PY=python3
[ -x /usr/bin/python3 ] && TEST_PY=/usr/bin/python3
TEST_NAME="$(basename "${BASH_SOURCE[1]:-$0}" .sh)"
pass() { echo "PASS: $*"; passed=$((passed + 1)); }
fail() { echo "FAIL: $*"; failed=$((failed + 1)); }
skip() { echo "SKIP: $*"; skipped=$((skipped + 1)); }
report() {
  local line
  while IFS= read -r line; do
    case "$line" in
      "PASS: "*) pass "${line#PASS: }" ;;
      "FAIL: "*) fail "${line#FAIL: }" ;;
      "SKIP: "*) skip "${line#SKIP: }" ;;
      *) echo "$line" ;;
    esac
  done
}
finish() {
  echo "$TEST_NAME: $passed passed, $failed failed, $skipped skipped"
  [ "$failed" -eq 0 ]; exit
}
has_mnist() { [ -f "$1/train-images-idx3-ubyte.gz" ]; }
need_mnist() {
  has_mnist "$1" && return 0
  skip "no MNIST in '$1' (set PSCLUSTER_DATA_DIR or put the IDX files in ../shared/data/mnist)"
  finish
}
