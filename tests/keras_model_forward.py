"""Evaluates an exported model.safetensors on a test set with a forward pass
of its own, reading the model's layers from the same Keras model file the
cluster trained (Sequential JSON from tf.keras, Keras 3 or TensorFlow.js;
the config.json of a .keras archive), so that a wrong layout in the export,
or a layer whose semantics the workers got wrong, shows as a different
accuracy from the evaluator's.

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
Flatten in height-width-channel order; Dense kernels [in, out].

Prints one line
  keras_model_forward: correct=N of M loss=L ambiguous=A
and exits 0; exits 1 with a message naming the problem otherwise. An
example whose two largest logits lie within 1e-4 of each other may be
decided either way by the float32 daemons: A counts them.
"""

import gzip
import json
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
    """The list of (class_name, config) of a Sequential model's layers."""
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
        fail("%s: class_name %r is not a Sequential model" % (path, doc.get("class_name")))
    layers = doc["config"]["layers"]
    return [(l["class_name"], l["config"]) for l in layers]


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


def windows(x, window, strides, padding, fill):
    """[N, OH, OW, C, kh, kw] views of x padded with `fill`, and the pads."""
    (kh, kw), (sh, sw) = window, strides
    oh, top, bottom = pads(x.shape[1], kh, sh, padding)
    ow, left, right = pads(x.shape[2], kw, sw, padding)
    x = np.pad(x, ((0, 0), (top, bottom), (left, right), (0, 0)), constant_values=fill)
    v = np.lib.stride_tricks.sliding_window_view(x, (kh, kw), axis=(1, 2))
    return v[:, ::sh, ::sw][:, :oh, :ow], (top, bottom, left, right)


def activate(x, name):
    if name in (None, "linear", "softmax"):  # softmax: logits are compared
        return x
    if name == "relu":
        return np.maximum(x, 0.0)
    if name == "sigmoid":
        return 1.0 / (1.0 + np.exp(-x))
    if name == "tanh":
        return np.tanh(x)
    fail("activation %r is not known here" % name)


def forward(layers, t, x):
    for cls, cfg in layers:
        name = cfg.get("name")
        if cls == "InputLayer" or cls == "Dropout":
            continue
        if cls == "Conv2D":
            k = t[name + "/kernel"]
            v, _ = windows(x, k.shape[:2], pair(cfg.get("strides", 1)),
                           cfg.get("padding", "valid"), 0.0)
            x = np.einsum("nhwcij,ijco->nhwo", v, k, optimize=True)
            if cfg.get("use_bias", True):
                x = x + t[name + "/bias"]
            x = activate(x, cfg.get("activation"))
        elif cls in ("MaxPooling2D", "MaxPool2D", "AveragePooling2D", "AvgPool2D"):
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


def main(argv):
    if len(argv) != 4:
        sys.exit(__doc__.split("\n\n")[2])
    layers = read_model(argv[1])
    t, meta = read_safetensors(argv[2])
    if meta.get("layout") != "keras":
        fail("%s: __metadata__.layout is %r, expected 'keras'" % (argv[2], meta.get("layout")))
    images, labels = read_test_set(argv[3])
    correct, loss_sum, ambiguous = 0, 0.0, 0
    for begin in range(0, images.shape[0], 500):
        z = forward(layers, t, images[begin:begin + 500])
        y = labels[begin:begin + 500]
        top2 = np.sort(z, axis=1)[:, -2:]
        ambiguous += int(np.sum(top2[:, 1] - top2[:, 0] < AMBIGUOUS_MARGIN))
        correct += int(np.sum(np.argmax(z, axis=1) == y))
        m = z.max(axis=1, keepdims=True)
        log_norm = m[:, 0] + np.log(np.exp(z - m).sum(axis=1))
        loss_sum += float(np.sum(log_norm - z[np.arange(len(y)), y]))
    print("keras_model_forward: correct=%d of %d loss=%.6f ambiguous=%d"
          % (correct, images.shape[0], loss_sum / images.shape[0], ambiguous))


if __name__ == "__main__":
    main(sys.argv)
