"""Evaluates an exported model.safetensors on a test set with a forward pass
of its own, reading the model's layers from the same Keras model file the
cluster trained (Sequential or Functional JSON from tf.keras, Keras 3 or
TensorFlow.js; the config.json of a .keras archive), so that a wrong layout
in the export, or a layer whose semantics the workers got wrong, shows as a
different accuracy from the evaluator's.

Usage: /usr/bin/python3 tests/keras_model_forward.py MODEL.json MODEL.safetensors DATA

DATA is a folder with the MNIST-style IDX files (t10k-*.gz) or an .npz with
x_test and y_test (uint8 images are scaled by 1/255, float32 taken as is).

Shares no code with the project: JSON, safetensors (8-byte little-endian
header length, JSON header, raw little-endian data), IDX and npz (numpy's
own reader) are read here. Keras semantics, in float64: NHWC; Conv2D
kernels [kh, kw, in, out] with "same" padding putting the odd row/column at
the bottom/right; pooling windows with strides, "same" max pooling ignoring
the padding and "same" average pooling dividing by the cells inside the
input; BatchNormalization in inference mode, (x - moving_mean) /
sqrt(moving_variance + epsilon) * gamma + beta; Dropout the identity;
Flatten in height-width-channel order; Dense kernels [in, out]; dilated
windows; DepthwiseConv2D kernels [kh, kw, in, multiplier] giving channel
c * multiplier + m; SeparableConv2D as depthwise then a [1, 1, in * m,
filters] pointwise kernel and the bias; LayerNormalization over the last
axis with the biased variance; Add, Subtract, Multiply, Average,
Concatenate and Dot (flat inputs; normalize as Keras 3's ops.normalize,
x * min(1 / |x|, 1e7)); a layer applied twice has one set of weights. The loss adds
the kernel/bias/depthwise/pointwise/gamma/beta regularizers as Keras does:
l1 sum |w| + l2 sum w^2 per regularized variable. A model with several
inputs takes each example's values as theirs end to end, in its
input_layers' order.

Prints one line
  keras_model_forward: correct=N of M loss=L ambiguous=A
and exits 0; exits 1 with a message naming the problem otherwise. An
example whose two largest logits lie within 1e-4 of each other may be
decided either way by the float32 daemons: A counts them.
"""

import gzip
import json
import math
import os
import struct
import sys
import zipfile

try:
    import numpy as np
except ImportError:
    sys.exit("keras_model_forward: no numpy for %s (Debian: python3-numpy, in "
             "deploy/install_deps.sh)" % sys.executable)

AMBIGUOUS_MARGIN = 1e-4


def fail(msg):
    sys.exit("keras_model_forward: " + msg)


def read_model(path):
    """The model's config: its layers and, for a Functional model, graph."""
    if path.endswith(".keras"):
        with zipfile.ZipFile(path) as z:
            doc = json.loads(z.read("config.json"))
    else:
        with open(path) as f:
            doc = json.load(f)
    if "modelTopology" in doc:  # TensorFlow.js model.json
        doc = doc["modelTopology"]
    if "model_config" in doc:
        doc = doc["model_config"]
    if doc.get("class_name") not in ("Sequential", "Functional", "Model"):
        fail("%s: class_name %r is not a Keras model" % (path, doc.get("class_name")))
    return doc["config"]


def read_safetensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    data = blob[8 + n:]
    meta = header.pop("__metadata__", {})
    tensors = {}
    for name, info in header.items():
        if info["dtype"] != "F32":
            fail("%s: dtype %s, expected F32" % (name, info["dtype"]))
        begin, stop = info["data_offsets"]
        tensors[name] = (np.frombuffer(data[begin:stop], dtype="<f4")
                         .reshape(info["shape"]).astype(np.float64))
    return tensors, meta


def read_test_set(data):
    if data.endswith(".npz"):
        z = np.load(data)
        x, y = z["x_test"], z["y_test"].reshape(-1)
        x = x.astype(np.float64) / 255.0 if x.dtype == np.uint8 else x.astype(np.float64)
    else:
        def idx(name, magic):
            with gzip.open(os.path.join(data, name), "rb") as f:
                raw = f.read()
            if struct.unpack(">I", raw[:4])[0] != magic:
                fail("%s: bad magic" % name)
            ndim = magic & 0xFF
            dims = struct.unpack(">%dI" % ndim, raw[4:4 + 4 * ndim])
            return np.frombuffer(raw[4 + 4 * ndim:], dtype=np.uint8).reshape(dims)
        x = idx("t10k-images-idx3-ubyte.gz", 2051).astype(np.float64) / 255.0
        y = idx("t10k-labels-idx1-ubyte.gz", 2049)
    if x.ndim == 3:
        x = x[..., np.newaxis]
    return x, y.astype(np.int64)


def pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


def pads(size, window, stride, padding):
    """(out, before, after) along one axis, Keras's rule."""
    if padding == "valid":
        return (size - window) // stride + 1, 0, 0
    out = -(-size // stride)
    total = max((out - 1) * stride + window - size, 0)
    return out, total // 2, total - total // 2


def windows(x, window, strides, padding, fill, dilation=(1, 1)):
    """[N, OH, OW, C, kh, kw] views of x padded with `fill`, and the pads.
    A dilated window's cells are `dilation` apart: it spans (k - 1) d + 1."""
    (kh, kw), (sh, sw), (dh, dw) = window, strides, dilation
    span_h, span_w = (kh - 1) * dh + 1, (kw - 1) * dw + 1
    oh, top, bottom = pads(x.shape[1], span_h, sh, padding)
    ow, left, right = pads(x.shape[2], span_w, sw, padding)
    x = np.pad(x, ((0, 0), (top, bottom), (left, right), (0, 0)), constant_values=fill)
    v = np.lib.stride_tricks.sliding_window_view(x, (span_h, span_w), axis=(1, 2))
    return v[:, ::sh, ::sw, :, ::dh, ::dw][:, :oh, :ow], (top, bottom, left, right)


def erf(x):
    """math.erf over an array, to within 2e-15, at numpy's speed (math.erf
    element by element took half of a run's time on tfjs_modern's gelu).
    |x| < 2: the series 2/sqrt(pi) e^(-x^2) sum_n 2^n x^(2n+1) / (2n+1)!!,
    whose terms are all positive (no cancellation); |x| >= 2: Laplace's
    continued fraction for erfc, evaluated from its 40th term down."""
    x = np.asarray(x, dtype=np.float64)
    a = np.abs(x)
    out = np.empty_like(a)
    near = a < 2.0
    s = a[near]
    twice_sq, term, total = 2.0 * s * s, s.copy(), s.copy()
    for n in range(1, 41):
        term *= twice_sq / (2 * n + 1)
        total += term
    out[near] = (2.0 / math.sqrt(math.pi)) * np.exp(-s * s) * total
    b = np.minimum(a[~near], 6.0)  # erfc(6) < 2.2e-17: erf is 1 in doubles
    f = b.copy()
    for k in range(40, 0, -1):
        f = b + (k / 2.0) / f
    out[~near] = 1.0 - np.exp(-b * b) / (math.sqrt(math.pi) * f)
    return np.copysign(out, x)


_GRID = np.linspace(-7.0, 7.0, 2801)
if np.max(np.abs(erf(_GRID) - np.array([math.erf(v) for v in _GRID]))) > 2e-15:
    fail("erf() here differs from math.erf by more than 2e-15")


def activate(x, name):
    if name in (None, "linear", "softmax"):  # softmax: logits are compared
        return x
    if name == "relu":
        return np.maximum(x, 0.0)
    if name == "sigmoid":
        return 1.0 / (1.0 + np.exp(-x))
    if name == "tanh":
        return np.tanh(x)
    if name == "gelu":  # Keras's default, the exact form
        return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))
    if name in ("swish", "silu"):
        return x / (1.0 + np.exp(-x))
    fail("activation %r is not known here" % name)


def depthwise(x, k, cfg):
    """DepthwiseConv2D's windows times k [kh, kw, C, m]: channel c * m + j."""
    v, _ = windows(x, k.shape[:2], pair(cfg.get("strides", 1)), cfg.get("padding", "valid"),
                   0.0, pair(cfg.get("dilation_rate", 1)))
    y = np.einsum("nhwcij,ijcm->nhwcm", v, k, optimize=True)
    return y.reshape(y.shape[:3] + (-1,))


MERGES = ("Add", "Subtract", "Multiply", "Average", "Concatenate", "Dot")


def unit(x):
    """Keras 3's ops.normalize: x times min(1 / |x|, 1e7) over the last axis."""
    with np.errstate(divide="ignore"):
        inv = 1.0 / np.sqrt(np.sum(x * x, axis=-1, keepdims=True))
    return x * np.minimum(inv, 1e7)


def merge(cls, xs, cfg):
    if cls == "Dot":  # flat inputs: each example's inner product (cosine with normalize)
        a, b = (unit(x) if cfg.get("normalize") else x for x in xs)
        return np.sum(a * b, axis=-1, keepdims=True)
    if cls == "Add":
        return sum(xs[1:], xs[0])
    if cls == "Subtract":
        return xs[0] - xs[1]
    if cls == "Multiply":
        out = xs[0]
        for x in xs[1:]:
            out = out * x
        return out
    if cls == "Average":
        return sum(xs[1:], xs[0]) / len(xs)
    return np.concatenate(xs, axis=-1)  # Concatenate, last axis


def layer(cls, cfg, t, x):
    """One application of layer (cls, cfg) to x (a list for merges)."""
    name = cfg.get("name")
    if cls in ("InputLayer", "Dropout"):
        return x
    if cls in MERGES:
        return merge(cls, x, cfg)
    if cls == "Conv2D":
        k = t[name + "/kernel"]
        v, _ = windows(x, k.shape[:2], pair(cfg.get("strides", 1)),
                       cfg.get("padding", "valid"), 0.0, pair(cfg.get("dilation_rate", 1)))
        x = np.einsum("nhwcij,ijco->nhwo", v, k, optimize=True)
        if cfg.get("use_bias", True):
            x = x + t[name + "/bias"]
        return activate(x, cfg.get("activation"))
    if cls == "DepthwiseConv2D":
        x = depthwise(x, t[name + "/depthwise_kernel"], cfg)
        if cfg.get("use_bias", True):
            x = x + t[name + "/bias"]
        return activate(x, cfg.get("activation"))
    if cls == "SeparableConv2D":
        x = depthwise(x, t[name + "/depthwise_kernel"], cfg)
        x = np.einsum("nhwc,co->nhwo", x, t[name + "/pointwise_kernel"][0, 0], optimize=True)
        if cfg.get("use_bias", True):
            x = x + t[name + "/bias"]
        return activate(x, cfg.get("activation"))
    if cls == "LayerNormalization":
        mean = x.mean(axis=-1, keepdims=True)
        var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
        x = (x - mean) / np.sqrt(var + cfg.get("epsilon", 1e-3))
        if cfg.get("scale", True):
            x = x * t[name + "/gamma"]
        if cfg.get("center", True):
            x = x + t[name + "/beta"]
        return x
    if cls == "GlobalMaxPooling2D":
        return x.max(axis=(1, 2))
    return pooling_and_dense(cls, cfg, t, x)


def pooling_and_dense(cls, cfg, t, x):
    """The layers the Sequential models of earlier issues use."""
    name = cfg.get("name")
    if cls in ("MaxPooling2D", "MaxPool2D", "AveragePooling2D", "AvgPool2D"):
        pool = pair(cfg.get("pool_size", 2))
        strides = pair(cfg.get("strides") or pool)
        padding = cfg.get("padding", "valid")
        if cls.startswith("Max"):
            v, _ = windows(x, pool, strides, padding, -np.inf)
            x = v.max(axis=(4, 5))
        else:
            v, _ = windows(x, pool, strides, padding, 0.0)
            ones = np.ones((1,) + x.shape[1:3] + (1,))
            c, _ = windows(ones, pool, strides, padding, 0.0)
            x = v.sum(axis=(4, 5)) / c.sum(axis=(4, 5))
    elif cls == "GlobalAveragePooling2D":
        x = x.mean(axis=(1, 2))
    elif cls == "Flatten":
        x = x.reshape(x.shape[0], -1)
    elif cls == "Dense":
        x = x.reshape(x.shape[0], -1) @ t[name + "/kernel"]
        if cfg.get("use_bias", True):
            x = x + t[name + "/bias"]
        x = activate(x, cfg.get("activation"))
    elif cls == "Activation":
        x = activate(x, cfg.get("activation"))
    elif cls == "ReLU":
        x = np.maximum(x, 0.0)
    elif cls == "BatchNormalization":
        eps = cfg.get("epsilon", 1e-3)
        x = (x - t[name + "/moving_mean"]) / np.sqrt(t[name + "/moving_variance"] + eps)
        if cfg.get("scale", True):
            x = x * t[name + "/gamma"]
        if cfg.get("center", True):
            x = x + t[name + "/beta"]
    else:
        fail("layer %s (%s) is not known here" % (name, cls))
    return x


def inbound(entry):
    """A Functional layer's applications, each a list of (layer, node):
    Keras 2's and TensorFlow.js's [[name, node, tensor, kwargs], ...] or
    Keras 3's {"args": [...keras_history...]}."""
    apps = []
    for node in entry.get("inbound_nodes", []):
        refs = []
        def walk(v):
            if isinstance(v, dict):
                if v.get("class_name") == "__keras_tensor__":
                    h = v["config"]["keras_history"]
                    refs.append((h[0], h[1]))
                    return
                for w in v.values():
                    walk(w)
            elif isinstance(v, list):
                if len(v) >= 3 and isinstance(v[0], str) and isinstance(v[1], int):
                    refs.append((v[0], v[1]))
                    return
                for w in v:
                    walk(w)
        walk(node)
        apps.append(refs)
    return apps


def forward(config, t, x):
    layers = config["layers"]
    if "output_layers" not in config:  # Sequential
        for entry in layers:
            x = layer(entry["class_name"], entry["config"], t, x)
        return x
    by_name = {e["config"]["name"]: e for e in layers}
    values = {}
    # Several inputs: each example holds their values end to end, in the
    # model's input order.
    inputs = config.get("input_layers", [])
    if inputs and isinstance(inputs[0], str):
        inputs = [inputs]
    given = {}
    if len(inputs) > 1:
        flat = x.reshape(x.shape[0], -1)
        at = 0
        for ref in inputs:
            cfg = by_name[ref[0]]["config"]
            shape = (cfg.get("batch_shape") or cfg.get("batch_input_shape"))[1:]
            n = int(np.prod(shape))
            given[ref[0]] = flat[:, at:at + n].reshape([x.shape[0]] + list(shape))
            at += n
        if at != flat.shape[1]:
            fail("the inputs hold %d values per example, the data %d" % (at, flat.shape[1]))

    def value(name, node):
        if (name, node) in values:
            return values[(name, node)]
        e = by_name[name]
        if e["class_name"] == "InputLayer":
            out = given.get(name, x)
        else:
            refs = inbound(e)[node]
            ins = [value(n, k) for n, k in refs]
            merging = e["class_name"] in MERGES
            out = layer(e["class_name"], e["config"], t, ins if merging else ins[0])
        values[(name, node)] = out
        return out

    outputs = config["output_layers"]
    if outputs and isinstance(outputs[0], str):  # Keras 3: [name, node, tensor]
        outputs = [outputs]
    return value(outputs[0][0], outputs[0][1])


def regularization(config, t):
    """Keras's regularizers' sum at the exported weights."""
    total = 0.0
    keys = {"kernel_regularizer": "kernel", "bias_regularizer": "bias",
            "depthwise_regularizer": "depthwise_kernel",
            "pointwise_regularizer": "pointwise_kernel",
            "gamma_regularizer": "gamma", "beta_regularizer": "beta"}
    for e in config["layers"]:
        cfg = e["config"]
        for key, var in keys.items():
            r = cfg.get(key)
            name = cfg.get("name") + "/" + var
            if r is None or name not in t:
                continue
            if isinstance(r, str):
                l1, l2 = (0.01, 0.0) if r.lower() == "l1" else (0.0, 0.01)
            else:
                c = r.get("config", {})
                kind = r["class_name"].lower().replace("_", "")
                l1 = c.get("l1", 0.01 if kind == "l1" else 0.0) if kind != "l2" else 0.0
                l2 = c.get("l2", 0.01 if kind == "l2" else 0.0) if kind != "l1" else 0.0
            w = t[name]
            total += l1 * np.abs(w).sum() + l2 * (w * w).sum()
    return total


def main(argv):
    if len(argv) != 4:
        sys.exit(__doc__.split("\n\n")[2])
    config = read_model(argv[1])
    t, meta = read_safetensors(argv[2])
    if meta.get("layout") != "keras":
        fail("%s: __metadata__.layout is %r, expected 'keras'" % (argv[2], meta.get("layout")))
    images, labels = read_test_set(argv[3])
    correct, loss_sum, ambiguous = 0, 0.0, 0
    # 100 examples at a time: a convolution's windows are then tens of MB of
    # float64, not hundreds, which glibc keeps on its heap instead of mapping
    # afresh for each batch (the page faults took a third of the time).
    batch = 100
    for begin in range(0, images.shape[0], batch):
        z = forward(config, t, images[begin:begin + batch])
        y = labels[begin:begin + batch]
        top2 = np.sort(z, axis=1)[:, -2:]
        ambiguous += int(np.sum(top2[:, 1] - top2[:, 0] < AMBIGUOUS_MARGIN))
        correct += int(np.sum(np.argmax(z, axis=1) == y))
        m = z.max(axis=1, keepdims=True)
        log_norm = m[:, 0] + np.log(np.exp(z - m).sum(axis=1))
        loss_sum += float(np.sum(log_norm - z[np.arange(len(y)), y]))
    loss = loss_sum / images.shape[0] + regularization(config, t)
    print("keras_model_forward: correct=%d of %d loss=%.6f ambiguous=%d"
          % (correct, images.shape[0], loss, ambiguous))


if __name__ == "__main__":
    main(sys.argv)
