"""The peer for tests/bench:worker_compute: PyTorch's images/s for one
training step (forward, softmax cross-entropy, backward; no optimizer, as
worker_compute's Network::TrainStep) of the same Keras model file, batch and
thread count, in float32 on the CPU, eager mode.

Usage: /usr/bin/python3 tests/bench/torch_compute.py --model=FILE
           [--batch=128] [--threads=1,2] [--seconds=3] [--runs=5]

The model is built from the Keras JSON (Sequential: tf.keras, Keras 3 or
TensorFlow.js; the config.json of a .keras archive) with Keras's semantics:
NHWC data converted once to NCHW, "same" padding split as Keras does
(F.pad, the odd row/column at the bottom/right), BatchNormalization with
momentum 1 - keras_momentum and Keras's epsilon, Dropout in training mode,
a final softmax fused into the loss (F.cross_entropy on logits).

Prints one line per thread count:
  torch_compute: threads=T batch=B images_per_s=MEDIAN min=MIN max=MAX
Debian's python3-torch (1.13) provides torch.
"""

import json
import statistics
import sys
import time
import zipfile

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    sys.exit("torch_compute: no torch for %s (Debian: python3-torch)" % sys.executable)


def fail(msg):
    sys.exit("torch_compute: " + msg)


def read_layers(path):
    if path.endswith(".keras"):
        with zipfile.ZipFile(path) as z:
            doc = json.loads(z.read("config.json"))
    else:
        with open(path) as f:
            doc = json.load(f)
    doc = doc.get("modelTopology", doc)
    doc = doc.get("model_config", doc)
    return [(l["class_name"], l["config"]) for l in doc["config"]["layers"]]


def input_shape(layers):
    for _, cfg in layers:
        for key in ("batch_shape", "batch_input_shape"):
            if cfg.get(key):
                return list(cfg[key][1:])
    fail("the model file gives no input shape")


def pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


def same_pads(size, window, stride):
    out = -(-size // stride)
    total = max((out - 1) * stride + window - size, 0)
    return out, total // 2, total - total // 2


class Pad(torch.nn.Module):
    def __init__(self, pads, value):
        super().__init__()
        self.pads, self.value = pads, value

    def forward(self, x):
        return F.pad(x, self.pads, value=self.value)


class AvgSame(torch.nn.Module):
    """Keras "same" average pooling: the mean of the cells inside the input."""

    def __init__(self, pool, strides, pads):
        super().__init__()
        self.pool, self.strides, self.pads = pool, strides, pads

    def forward(self, x):
        s = F.avg_pool2d(F.pad(x, self.pads), self.pool, self.strides, divisor_override=1)
        ones = torch.ones((1, 1) + x.shape[2:], dtype=x.dtype)
        n = F.avg_pool2d(F.pad(ones, self.pads), self.pool, self.strides, divisor_override=1)
        return s / n


def activation(name):
    return {"relu": torch.nn.ReLU(), "sigmoid": torch.nn.Sigmoid(),
            "tanh": torch.nn.Tanh()}.get(name)


def build(layers):
    shape = input_shape(layers)
    if len(shape) == 3:
        h, w, c = shape
    else:
        h, w, c = 1, 1, shape[0]
    mods, flat = [], len(shape) == 1
    for cls, cfg in layers:
        if cls == "InputLayer":
            continue
        if cls == "Conv2D":
            (kh, kw), (sh, sw) = pair(cfg["kernel_size"]), pair(cfg.get("strides", 1))
            if cfg.get("padding", "valid") == "same":
                h2, top, bottom = same_pads(h, kh, sh)
                w2, left, right = same_pads(w, kw, sw)
                mods.append(Pad((left, right, top, bottom), 0.0))
            else:
                h2, w2 = (h - kh) // sh + 1, (w - kw) // sw + 1
            mods.append(torch.nn.Conv2d(c, cfg["filters"], (kh, kw), (sh, sw),
                                        bias=cfg.get("use_bias", True)))
            h, w, c = h2, w2, cfg["filters"]
            a = activation(cfg.get("activation"))
            if a is not None:
                mods.append(a)
        elif cls in ("MaxPooling2D", "MaxPool2D", "AveragePooling2D", "AvgPool2D"):
            pool = pair(cfg.get("pool_size", 2))
            strides = pair(cfg.get("strides") or pool)
            is_max = cls.startswith("Max")
            if cfg.get("padding", "valid") == "same":
                h2, top, bottom = same_pads(h, pool[0], strides[0])
                w2, left, right = same_pads(w, pool[1], strides[1])
                pads = (left, right, top, bottom)
                if is_max:
                    mods += [Pad(pads, float("-inf")), torch.nn.MaxPool2d(pool, strides)]
                else:
                    mods.append(AvgSame(pool, strides, pads))
            else:
                h2 = (h - pool[0]) // strides[0] + 1
                w2 = (w - pool[1]) // strides[1] + 1
                mods.append(torch.nn.MaxPool2d(pool, strides) if is_max
                            else torch.nn.AvgPool2d(pool, strides))
            h, w = h2, w2
        elif cls == "GlobalAveragePooling2D":
            mods += [torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten()]
            h = w = 1
            flat = True
        elif cls == "Flatten":
            # NCHW flattens channel-major where Keras flattens NHWC: same
            # arithmetic, a different order of the dense kernel's rows.
            mods.append(torch.nn.Flatten())
            c, h, w, flat = h * w * c, 1, 1, True
        elif cls == "Dense":
            mods.append(torch.nn.Linear(c, cfg["units"], bias=cfg.get("use_bias", True)))
            c = cfg["units"]
            a = activation(cfg.get("activation"))
            if a is not None:
                mods.append(a)
        elif cls == "Dropout":
            mods.append(torch.nn.Dropout(cfg["rate"]))
        elif cls == "Activation":
            a = activation(cfg.get("activation"))
            if a is not None:
                mods.append(a)
        elif cls == "ReLU":
            mods.append(torch.nn.ReLU())
        elif cls == "BatchNormalization":
            bn = torch.nn.BatchNorm1d if flat else torch.nn.BatchNorm2d
            mods.append(bn(c, eps=cfg.get("epsilon", 1e-3),
                           momentum=1.0 - cfg.get("momentum", 0.99)))
        else:
            fail("layer %s (%s) is not known here" % (cfg.get("name"), cls))
    return torch.nn.Sequential(*mods), shape, c


def parse_flags(argv, flags):
    """--name=value flags over `flags` (the defaults); --model is required."""
    flags = dict(flags)
    for arg in argv[1:]:
        name, _, value = arg.partition("=")
        if not name.startswith("--") or name[2:] not in flags:
            fail("unknown flag %r (see the top of this file)" % arg)
        flags[name[2:]] = value
    if not flags["model"]:
        fail("--model=FILE is required")
    return flags


def main(argv):
    flags = parse_flags(argv, {"model": None, "batch": "128", "threads": "1,2",
                               "seconds": "3", "runs": "5"})
    model, shape, classes = build(read_layers(flags["model"]))
    model.train()
    batch = int(flags["batch"])
    if len(shape) == 3:
        x = torch.rand(batch, shape[2], shape[0], shape[1])
    else:
        x = torch.rand(batch, shape[0])
    y = torch.randint(0, classes, (batch,))

    def step():
        model.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()

    for threads in [int(t) for t in flags["threads"].split(",")]:
        torch.set_num_threads(threads)
        for _ in range(3):
            step()
        rates = []
        for _ in range(int(flags["runs"])):
            n, start = 0, time.perf_counter()
            while time.perf_counter() - start < float(flags["seconds"]):
                step()
                n += 1
            rates.append(n * batch / (time.perf_counter() - start))
        print("torch_compute: threads=%d batch=%d images_per_s=%.0f min=%.0f max=%.0f"
              % (threads, batch, statistics.median(rates), min(rates), max(rates)))
        sys.stdout.flush()


if __name__ == "__main__":
    main(sys.argv)
