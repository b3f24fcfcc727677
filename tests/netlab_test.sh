#!/usr/bin/env bash
# The communication lab (tests/netlab/netlab.py) on a one-cell grid: the
# CNN, 2 workers, 1 ps, links shaped to 200 Mbit/s, top-k pushes with int8
# change pulls over the ps's tcp data plane (--transport=tcp), 10 steps.
# Checks that the cell trained, that the bytes each worker sent and
# received per step are within 10 % of the setting's minimum plus headers
# (the CNN's small tensors go as fp32: the pushes' minimum is top-k's
# 8 x 1 % a value, so they are judged against their own fp32 share
# below), and that the tables and the figure were written. Then a ring of
# three workers (--settings=ring, no ps): 2(n-1)/n of the model each way
# per worker per step, within 5 % as TCP payload (gRPC's framing and the
# chief's calls in it; each packet's 66 bytes of Ethernet/IP/TCP headers
# taken off by the interface's packet count).
# Needs root and iproute2; skips saying why otherwise.
#
# Usage: tests/netlab_test.sh [MNIST_DIR]
set -uo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
data="${1:-${PSCLUSTER_DATA_DIR:-$repo/../shared/data/mnist}}"
source "$(dirname "${BASH_SOURCE[0]}")/test_lib.sh"   # pass, fail, skip, finish

if [ "$(id -u)" -ne 0 ]; then skip "network namespaces and tc need root"; finish; fi
for tool in ip tc gnuplot; do
  command -v "$tool" >/dev/null || { skip "no '$tool'"; finish; }
done
need_mnist "$data"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT

# Bad input: exit 2 naming the value.
msg="$("$repo/tests/netlab/netlab.py" --settings=topk+int4 --data="$data" 2>&1)"; rc=$?
if [ "$rc" -eq 2 ] && grep -q "'int4'" <<<"$msg"; then
  pass "a bad setting exits 2 naming it: $msg"
else
  fail "--settings=topk+int4: exit $rc, '$msg'"
fi

msg="$("$repo/tests/netlab/netlab.py" --settings=topk:1.5+int8 --data="$data" 2>&1)"; rc=$?
if [ "$rc" -eq 2 ] && grep -q "'topk:1.5'" <<<"$msg"; then
  pass "a top-k fraction out of (0, 1] exits 2 naming it: $msg"
else
  fail "--settings=topk:1.5+int8: exit $rc, '$msg'"
fi

# The accuracy curve places each evaluation at the time training reached
# its version (between the chief's progress lines; the final version at
# the last worker's end), not at the time the evaluation ended.
check="$(/usr/bin/python3 - "$repo/tests/netlab/netlab.py" <<'PY'
import importlib.util, sys
spec = importlib.util.spec_from_file_location("netlab", sys.argv[1])
netlab = importlib.util.module_from_spec(spec)
spec.loader.exec_module(netlab)
text = {
    "chief": "10:00:00.000 I chief:0] waiting\n"
             "10:00:10.000 I chief:0] epoch 1/1 step 100 examples 0 examples/s 0\n"
             "10:00:20.000 I chief:0] epoch 1/1 step 300 examples 0 examples/s 0\n",
    "ev": "10:00:05.000 I evaluator:0] eval: step=0 accuracy=0.1000 loss=2\n"
          "10:00:31.000 I evaluator:0] eval: step=200 accuracy=0.9000 loss=1\n"
          "10:00:40.000 I evaluator:0] eval: step=400 accuracy=0.9500 loss=1 (final)\n",
    "w0": "10:00:30.000 I worker:0] done: 200 steps, 100 examples; compute_s=1 comm_s=1 wall_s=2\n",
    "w1": "10:00:25.000 I worker:1] done: 200 steps, 100 examples; compute_s=1 comm_s=1 wall_s=2\n",
}
curve = netlab.accuracy_curve(text, {"worker": ["w0", "w1"]})
want = [(0.0, 0.1), (15.0, 0.9), (30.0, 0.95)]
print(("PASS" if curve == want else "FAIL") +
      ": evaluations at the times their versions were reached: %s (want %s)" % (curve, want))
# Time to the first setting's final accuracy, per group of cells.
cell = lambda setting, curve, final: dict(ok=True, model="m", workers=2, ps_label="2",
                                          rate_name="1gbit", setting=setting,
                                          accuracy_curve=curve, test_accuracy=final)
ref = cell("fp32", [(0, 0.1), (50, 0.95), (80, 0.94), (100, 0.95)], 0.95)
fast = cell("topk", [(0, 0.1), (20, 0.9), (40, 0.96), (60, 0.97)], 0.97)
slow = cell("sign", [(0, 0.1), (30, 0.9)], 0.9)
netlab.time_to_target([ref, fast, slow])
got = (ref["time_to_target"]["seconds"], fast["time_to_target"]["seconds"],
       fast["time_to_target"]["of_reference_training"], fast["time_to_target"]["of_reference_first"],
       slow["time_to_target"]["seconds"])
print(("PASS" if got == (50, 40, 0.4, 0.8, None) else "FAIL") +
      ": time to the reference's final accuracy: %s (want (50, 40, 0.4, 0.8, None))" % (got,))
PY
)"
report <<<"$check"

msg="$("$repo/tests/netlab/netlab.py" --settings=fp32,topk --epochs=1,2,3 --data="$data" 2>&1)"; rc=$?
if [ "$rc" -eq 2 ] && grep -q "epochs=1,2,3" <<<"$msg"; then
  pass "epochs for more settings than there are exit 2 naming them: $msg"
else
  fail "--epochs=1,2,3 with two settings: exit $rc, '$msg'"
fi

msg="$("$repo/tests/netlab/netlab.py" --eval_interval_s=-1 --data="$data" 2>&1)"; rc=$?
if [ "$rc" -eq 2 ] && grep -q "eval_interval_s=-1" <<<"$msg"; then
  pass "a bad evaluation interval exits 2 naming it: $msg"
else
  fail "--eval_interval_s=-1: exit $rc, '$msg'"
fi

log="$("$repo/tests/netlab/netlab.py" --models=cnn --workers=2 --ps=1 --links=200mbit \
  --settings=topk:0.02+int8@tcp --steps=10 --data="$data" --out="$out" 2>&1)"; rc=$?
echo "$log" | tail -n 6
if [ "$rc" -ne 0 ]; then fail "netlab.py exited $rc"; finish; fi
check="$(/usr/bin/python3 - "$out/results.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
cells = d["cells"]
if len(cells) != 1 or not cells[0].get("ok"):
    print("FAIL: the one cell did not train: %s" % cells)
    sys.exit()
c = cells[0]
limit = d["link_limits_bytes_per_s"]["200mbit"] * 8 / 1e6
print(("PASS" if 20 < limit < 215 else "FAIL") +
      ": the shaped link moved %.0f Mbit/s in one TCP stream (200 asked: shaped, not faster)" % limit)
print(("PASS" if c["steps_per_worker"] == 10 else "FAIL") +
      ": each worker ran %s steps" % c["steps_per_worker"])
# Pulls: int8 changes of every tensor of 1024 values or more, the rest fp32.
r = c["received_ratio"]
print(("PASS" if 1.0 <= r <= 1.1 else "FAIL") +
      ": received %.0f bytes per step, %.3f x the int8 minimum (headers and "
      "small fp32 tensors included)" % (c["received_bytes_per_step"], r))
sent = c["sent_bytes_per_step"]
print(("PASS" if c["minimum_sent_bytes"] <= sent < 0.1 * 4 * c["parameters"] else "FAIL") +
      ": sent %.0f bytes per step: above top-k's minimum %.0f, below a tenth of fp32's %.0f"
      % (sent, c["minimum_sent_bytes"], 4 * c["parameters"]))
print(("PASS" if c["setting"] == "topk:0.02+int8@tcp" and
       abs(c["minimum_sent_bytes"] - 8 * 0.02 * c["parameters"]) < 1 else "FAIL") +
      ": the setting's own top-k fraction sets the minimum: %s, %.0f bytes" %
      (c["setting"], c["minimum_sent_bytes"]))
PY
)"
report <<<"$check"
if [ -s "$out/images_per_s_vs_link_cnn.png" ] && [ -s "$out/results.tsv" ]; then
  pass "results.tsv and images_per_s_vs_link_cnn.png written"
else
  fail "missing results.tsv or the figure in $out: $(ls "$out")"
fi

# The ring of three workers (no ps): each sends and receives 2(n-1)/n of
# the model per step, as TCP payload.
ring="$out/ring"
log="$("$repo/tests/netlab/netlab.py" --models=cnn --workers=3 --links=200mbit \
  --settings=ring --steps=10 --data="$data" --out="$ring" 2>&1)"; rc=$?
echo "$log" | tail -n 3
if [ "$rc" -ne 0 ]; then fail "netlab.py --settings=ring exited $rc"; finish; fi
check="$(/usr/bin/python3 - "$ring/results.json" <<'PY'
import json, sys
cells = json.load(open(sys.argv[1]))["cells"]
if len(cells) != 1 or not cells[0].get("ok") or cells[0]["ps"] != 0:
    print("FAIL: the one ring cell did not train: %s" % cells)
    sys.exit()
c = cells[0]
bound = 2.0 * 2 / 3 * 4 * c["parameters"]
for what in ("sent", "received"):
    got = c[what + "_payload_bytes_per_step"]
    framed = c[what + "_bytes_per_step"]
    print(("PASS" if bound <= got <= 1.05 * bound else "FAIL") +
          ": %s %.0f bytes of TCP payload per worker per step, %.3f x 2(n-1)/n x M = %.0f "
          "(%.3f x with the packets' Ethernet/IP/TCP headers)" %
          (what, got, got / bound, bound, framed / bound))
PY
)"
report <<<"$check"
finish
