"""Writes compute/testing/testdata/torch_reference.json: one training step of a
small model with every kind of layer the float64 reference computes, run by
PyTorch autograd in float64, for compute/testing/float64_reference_test.cc.
Run from the repository root with any PyTorch (python3 compute/testing/
make_torch_reference.py); the model here and the test's must stay the same.

Layouts are Keras's (NHWC activations, HWIO conv kernels, [in, out] dense
kernels); parameters and images are float32 values (the engines' inputs).
Dropout's mask is the engines' (compute/kernels/dropout.h, the key from
compute/graph_plan.cc's DropoutKey), rewritten here.
"""

import json
import os

import torch
import torch.nn.functional as F

M64 = (1 << 64) - 1
SEED, STEP_KEY = 17, 123


def mix(a, b):
    z = a ^ ((b + 0x9E3779B97F4A7C15 + ((a << 6) & M64) + (a >> 2)) & M64)
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def keeps(key, index, rate):  # rate: the float32 value, as a double
    threshold = int(rate * 4294967296.0)
    z = (key + (index + 1) * 0x9E3779B97F4A7C15) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    z ^= z >> 31
    return (z >> 32) >= threshold


def f32(t):
    return t.to(torch.float32).to(torch.float64)


# The model (float64_reference_test.cc builds the same): input 6x6x2, 3 classes.
#  0 conv_a  Conv2D 3 filters 3x3 stride 2 "same" (pad bottom/right), tanh
#  1 bn_a    BatchNormalization
#  2 relu    Activation relu
#  3 max     MaxPool2D 2x2 stride 1 "same"
#  4 conv_b  Conv2D 4 filters 2x2 "valid", no bias, sigmoid
#  5 avg     AvgPool2D 2x2 stride 1 "same"
#  6 flatten
#  7 drop    Dropout 0.3
#  8 fc      Dense 5, linear (its bias feeds BN: exact gradient zero)
#  9 bn_fc   BatchNormalization, center=False
# 10 out     Dense 3, softmax
BATCH = 4
EPS = float(torch.tensor(1e-3, dtype=torch.float32).item())
g = torch.Generator().manual_seed(5)


def rand(*shape, lo=-0.7, hi=0.7):
    return f32(torch.rand(*shape, generator=g, dtype=torch.float64) * (hi - lo) + lo)


params = {
    "conv_a/kernel": rand(3, 3, 2, 3), "conv_a/bias": rand(3),
    "bn_a/gamma": rand(3, lo=0.5, hi=1.5), "bn_a/beta": rand(3),
    "bn_a/moving_mean": rand(3), "bn_a/moving_variance": rand(3, lo=0.5, hi=1.5),
    "conv_b/kernel": rand(2, 2, 3, 4),
    "fc/kernel": rand(16, 5), "fc/bias": rand(5),
    "bn_fc/gamma": rand(5, lo=0.5, hi=1.5),
    "bn_fc/moving_mean": rand(5), "bn_fc/moving_variance": rand(5, lo=0.5, hi=1.5),
    "out/kernel": rand(5, 3), "out/bias": rand(3),
}
for t in params.values():
    t.requires_grad_(True)
images = rand(BATCH, 6, 6, 2, lo=0.0, hi=1.0)
labels = torch.tensor([0, 2, 1, 2])


def conv(x, kernel, bias, stride, pads):  # x NHWC; pads (left, right, top, bottom)
    y = F.conv2d(F.pad(x.permute(0, 3, 1, 2), pads), kernel.permute(3, 2, 0, 1), bias,
                 stride=stride)
    return y.permute(0, 2, 3, 1)


stats = {}


def bn(name, x, center=True):
    axes = tuple(range(x.dim() - 1))
    mean = x.mean(dim=axes)
    var = ((x - mean) ** 2).mean(dim=axes)
    stats[name] = (mean, var)
    y = params[name + "/gamma"] * (x - mean) / torch.sqrt(var + EPS)
    return y + params[name + "/beta"] if center else y


x = conv(images, params["conv_a/kernel"], params["conv_a/bias"], 2, (0, 1, 0, 1)).tanh()
x = bn("bn_a", x)
x = torch.relu(x)
x = F.max_pool2d(F.pad(x.permute(0, 3, 1, 2), (0, 1, 0, 1), value=float("-inf")), 2, 1)
x = x.permute(0, 2, 3, 1)
x = torch.sigmoid(conv(x, params["conv_b/kernel"], None, 1, (0, 0, 0, 0)))
# Average pooling, "same": the cells inside the input only.
ones = torch.ones_like(x[..., :1]).permute(0, 3, 1, 2)
counts = F.avg_pool2d(F.pad(ones, (0, 1, 0, 1)), 2, 1, divisor_override=1)
x = F.avg_pool2d(F.pad(x.permute(0, 3, 1, 2), (0, 1, 0, 1)), 2, 1, divisor_override=1) / counts
x = x.permute(0, 2, 3, 1).reshape(BATCH, -1)
key = mix(mix(SEED, STEP_KEY), 6)  # op 6: layer 7, Flatten not counted
rate = torch.tensor(0.3, dtype=torch.float32).item()  # 0.3f, as the spec holds it
mask = torch.tensor([1.0 / (1.0 - rate) if keeps(key, i, rate) else 0.0
                     for i in range(x.numel())], dtype=torch.float64).reshape(x.shape)
x = x * mask
x = x @ params["fc/kernel"] + params["fc/bias"]
x = bn("bn_fc", x, center=False)
logits = x @ params["out/kernel"] + params["out/bias"]
loss = F.cross_entropy(logits, labels)
loss.backward()

grads = {k: v.grad.flatten().tolist() for k, v in params.items() if v.grad is not None}
for name, (mean, var) in stats.items():
    grads[name + "/moving_mean"] = mean.detach().tolist()
    grads[name + "/moving_variance"] = var.detach().tolist()
out = {
    "about": "compute/testing/make_torch_reference.py, PyTorch " + torch.__version__,
    "seed": SEED, "step_key": STEP_KEY,
    "params": {k: v.detach().flatten().tolist() for k, v in params.items()},
    "images": images.flatten().tolist(), "labels": labels.tolist(),
    "loss": loss.item(), "grads": grads,
    "correct": int((logits.argmax(dim=1) == labels).sum().item()),
}
os.makedirs("compute/testing/testdata", exist_ok=True)
with open("compute/testing/testdata/torch_reference.json", "w") as f:
    json.dump(out, f, indent=1)
print("loss", loss.item(), "correct", out["correct"])
