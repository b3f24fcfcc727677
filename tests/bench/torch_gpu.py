"""The PyTorch peer for tests/bench:gpu_throughput: images/s of one training
step (forward, softmax cross-entropy, backward; no optimizer, as
ComputeBackend::TrainStep) of the same Keras model file and batch on a CUDA
GPU, in float32 with TF32 off (cuBLAS and cuDNN), the batch copied from
pinned host memory each step (as our worker copies its batch), in each of
PyTorch's three ways of running it:

  eager    the model as written, one kernel launch per op;
  compile  torch.compile(model) (default mode: TorchInductor's fused
           kernels), compiled once per batch size before timing;
  graph    the whole step (forward, loss, backward) captured once as a CUDA
           graph and replayed, the batch copied into its static input
           (PyTorch's "whole network capture" recipe).

Usage: python3 tests/bench/torch_gpu.py --model=FILE [--batch=128]
           [--seconds=3] [--runs=3] [--device=cuda:0]
           [--modes=eager,compile,graph]

The model is built by torch_compute.py (Keras semantics; NHWC data converted
to NCHW once, on the host, before timing). Prints one line per mode:
  torch_gpu: mode=M batch=B images_per_s=MEDIAN min=MIN max=MAX device=NAME torch=VERSION
or, where a mode cannot run here (no torch.compile in this torch, no
compiler for it, a capture that fails):
  torch_gpu: mode=M FAILED: <why>
Exits 3 with "torch_gpu: SKIPPED: <why>" when torch or a GPU is missing
(--device=cpu runs eager and compile on the CPU, for checking the script).
"""

import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    print("torch_gpu: SKIPPED: no torch for %s" % sys.executable)
    sys.exit(3)

from torch_compute import build, parse_flags, read_layers  # noqa: E402

MODES = ("eager", "compile", "graph")


def timed(step, flags, batch, device):
    """Images/s of `step` over --runs runs of --seconds each: (median, min, max)."""
    for k in range(5):
        step(k)
    sync(device)
    rates = []
    for _ in range(int(flags["runs"])):
        n, start = 0, time.perf_counter()
        while time.perf_counter() - start < float(flags["seconds"]):
            step(n)
            n += 1
        sync(device)
        rates.append(n * batch / (time.perf_counter() - start))
    return statistics.median(rates), min(rates), max(rates)


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def eager_step(model, xs, ys, device):
    def step(k):
        x = xs[k % 2].to(device, non_blocking=True)
        y = ys[k % 2].to(device, non_blocking=True)
        model.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()
    return step


def compile_step(model, xs, ys, device):
    if not hasattr(torch, "compile"):
        raise RuntimeError("torch %s has no torch.compile" % torch.__version__)
    compiled = torch.compile(model)
    return eager_step(compiled, xs, ys, device)


def graph_step(model, xs, ys, device):
    """The step captured once; each call copies the batch in and replays."""
    if device.type != "cuda":
        raise RuntimeError("CUDA graphs need a CUDA device")
    static_x = torch.empty_like(xs[0], device=device)
    static_y = torch.empty_like(ys[0], device=device)
    static_x.copy_(xs[0])
    static_y.copy_(ys[0])
    # Warm up on a side stream (cuBLAS handles, autograd's buffers), as
    # capture requires.
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for _ in range(3):
            model.zero_grad(set_to_none=True)
            F.cross_entropy(model(static_x), static_y).backward()
    torch.cuda.current_stream(device).wait_stream(side)
    # Gradients unset before capture: backward allocates them from the
    # graph's pool and each replay writes them anew (no accumulation).
    model.zero_grad(set_to_none=True)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        F.cross_entropy(model(static_x), static_y).backward()

    def step(k):
        static_x.copy_(xs[k % 2], non_blocking=True)
        static_y.copy_(ys[k % 2], non_blocking=True)
        graph.replay()
    return step


def main(argv):
    flags = parse_flags(argv, {"model": None, "batch": "128", "seconds": "3", "runs": "3",
                               "device": "cuda:0", "modes": ",".join(MODES)})
    modes = [m for m in flags["modes"].split(",") if m]
    for m in modes:
        if m not in MODES:
            print("torch_gpu: --modes=%s: '%s' is not one of %s" % (flags["modes"], m,
                                                                   ",".join(MODES)))
            sys.exit(2)
    device = torch.device(flags["device"])
    if device.type == "cuda" and not torch.cuda.is_available():
        print("torch_gpu: SKIPPED: torch %s sees no CUDA device" % torch.__version__)
        sys.exit(3)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    batch = int(flags["batch"])
    name = (torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu").replace(" ", "_")
    for mode in modes:
        # A fresh model per mode: a capture or a compile leaves state behind.
        torch.manual_seed(1)
        model, shape, classes = build(read_layers(flags["model"]))
        model.to(device).train()
        dims = (batch, shape[2], shape[0], shape[1]) if len(shape) == 3 else (batch, shape[0])
        pin = device.type == "cuda"
        # Two pinned batches used in turn, as a worker's staging buffers.
        xs = [torch.rand(dims) for _ in range(2)]
        ys = [torch.randint(0, classes, (batch,)) for _ in range(2)]
        if pin:
            xs = [x.pin_memory() for x in xs]
            ys = [y.pin_memory() for y in ys]
        make = {"eager": eager_step, "compile": compile_step, "graph": graph_step}[mode]
        try:
            median, low, high = timed(make(model, xs, ys, device), flags, batch, device)
        except Exception as e:  # a mode this torch or card cannot run: say so, go on
            why = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            print("torch_gpu: mode=%s FAILED: %s" % (mode, why[:300]), flush=True)
            continue
        print("torch_gpu: mode=%s batch=%d images_per_s=%.0f min=%.0f max=%.0f device=%s torch=%s"
              % (mode, batch, median, low, high, name, torch.__version__), flush=True)


if __name__ == "__main__":
    main(sys.argv)
