"""The PyTorch peer for tests/bench:gpu_throughput: images/s of one training
step (forward, softmax cross-entropy, backward; no optimizer, as
ComputeBackend::TrainStep) of the same Keras model file and batch on a CUDA
GPU, in float32 with TF32 off (cuBLAS and cuDNN), eager mode, the batch
copied from pinned host memory each step (as our worker copies its batch).

Usage: python3 tests/bench/torch_gpu.py --model=FILE [--batch=128]
           [--seconds=3] [--runs=3] [--device=cuda:0]

The model is built by torch_compute.py (Keras semantics; NHWC data converted
to NCHW once, on the host, before timing). Prints one line:
  torch_gpu: batch=B images_per_s=MEDIAN min=MIN max=MAX device=NAME torch=VERSION
Exits 3 with "torch_gpu: SKIPPED: <why>" when torch or a GPU is missing.
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


def main(argv):
    flags = parse_flags(argv, {"model": None, "batch": "128", "seconds": "3", "runs": "3",
                               "device": "cuda:0"})
    if not torch.cuda.is_available():
        print("torch_gpu: SKIPPED: torch %s sees no CUDA device" % torch.__version__)
        sys.exit(3)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    device = torch.device(flags["device"])
    model, shape, classes = build(read_layers(flags["model"]))
    model.to(device).train()
    batch = int(flags["batch"])
    dims = (batch, shape[2], shape[0], shape[1]) if len(shape) == 3 else (batch, shape[0])
    # Two pinned batches used in turn, as a worker's staging buffers.
    xs = [torch.rand(dims).pin_memory() for _ in range(2)]
    ys = [torch.randint(0, classes, (batch,)).pin_memory() for _ in range(2)]

    def step(k):
        x = xs[k % 2].to(device, non_blocking=True)
        y = ys[k % 2].to(device, non_blocking=True)
        model.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()

    for k in range(5):
        step(k)
    torch.cuda.synchronize(device)
    rates = []
    for _ in range(int(flags["runs"])):
        n, start = 0, time.perf_counter()
        while time.perf_counter() - start < float(flags["seconds"]):
            step(n)
            n += 1
        torch.cuda.synchronize(device)
        rates.append(n * batch / (time.perf_counter() - start))
    print("torch_gpu: batch=%d images_per_s=%.0f min=%.0f max=%.0f device=%s torch=%s"
          % (batch, statistics.median(rates), min(rates), max(rates),
             torch.cuda.get_device_name(device).replace(" ", "_"), torch.__version__))


if __name__ == "__main__":
    main(sys.argv)
