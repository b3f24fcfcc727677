"""Evaluates an exported model.safetensors of the seeds' CNN on the MNIST
test set with a forward pass of its own, written from the Keras layout the
README promises, so that a wrong layout in the export (or in the workers'
kernels) shows as a wrong accuracy.

Usage: /usr/bin/python3 tests/keras_forward.py MODEL.safetensors MNIST_DIR

Shares no code with the project: the safetensors file is parsed by hand
(8-byte little-endian header length, JSON header, raw little-endian data)
and the IDX files are read from their .gz. The model, in Keras terms:
  Conv2D(32, 3, relu) MaxPool2D(2) Conv2D(64, 3, relu) MaxPool2D(2)
  Flatten Dense(64, relu) Dense(10)
with 'valid' convolutions of stride 1, conv kernels [kh, kw, in, out]
(HWIO), NHWC activations, pooling windows 2x2 of stride 2 that drop an odd
last row and column, Flatten in height-width-channel order, Dense kernels
[in, out], pixels scaled to [0, 1] (value / 255).

Prints one line
  keras_forward: correct=N of M loss=L ambiguous=A
and exits 0; exits 1 with a message naming the problem otherwise. Computed
in float64; the daemons compute in float32, so an example whose two largest
logits lie within 1e-4 of each other may be decided either way: A counts
them.
"""

import gzip
import json
import os
import struct
import sys

try:
    import numpy as np
except ImportError:
    sys.exit("keras_forward: no numpy for %s (Debian: python3-numpy, in "
             "deploy/install_deps.sh)" % sys.executable)

# name -> shape, in the order of the layers.
EXPECTED = {
    "conv1/kernel": [3, 3, 1, 32], "conv1/bias": [32],
    "conv2/kernel": [3, 3, 32, 64], "conv2/bias": [64],
    "dense1/kernel": [1600, 64], "dense1/bias": [64],
    "dense2/kernel": [64, 10], "dense2/bias": [10],
}
AMBIGUOUS_MARGIN = 1e-4


def fail(msg):
    sys.exit("keras_forward: " + msg)


def read_safetensors(path):
    """name -> float64 array, checked against EXPECTED; and the metadata."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        fail("%s: %d bytes, shorter than the header length" % (path, len(blob)))
    (n,) = struct.unpack("<Q", blob[:8])
    if 8 + n > len(blob):
        fail("%s: header length %d runs past the file (%d bytes)" % (path, n, len(blob)))
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    data = blob[8 + n:]
    meta = header.pop("__metadata__", {})
    if sorted(header) != sorted(EXPECTED):
        fail("%s: tensors %s, expected %s" % (path, sorted(header), sorted(EXPECTED)))
    tensors, end = {}, 0
    for name, info in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        begin, stop = info["data_offsets"]
        if info["dtype"] != "F32":
            fail("%s: dtype %s, expected F32" % (name, info["dtype"]))
        if info["shape"] != EXPECTED[name]:
            fail("%s: shape %s, expected the Keras shape %s" % (name, info["shape"], EXPECTED[name]))
        if begin != end or stop - begin != 4 * int(np.prod(info["shape"])):
            fail("%s: data_offsets %s do not follow the previous tensor (ends at %d) "
                 "or do not fit its shape" % (name, info["data_offsets"], end))
        tensors[name] = (np.frombuffer(data[begin:stop], dtype="<f4")
                         .reshape(info["shape"]).astype(np.float64))
        end = stop
    if end != len(data):
        fail("%s: %d bytes of data, the tensors use %d" % (path, len(data), end))
    return tensors, meta


def read_idx_gz(path, magic):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    got, = struct.unpack(">I", raw[:4])
    if got != magic:
        fail("%s: magic %d, expected %d" % (path, got, magic))
    ndim = magic & 0xFF
    dims = struct.unpack(">%dI" % ndim, raw[4:4 + 4 * ndim])
    return np.frombuffer(raw[4 + 4 * ndim:], dtype=np.uint8).reshape(dims)


def conv_valid_relu(x, kernel, bias):
    """x [N, H, W, C_in], kernel [kh, kw, C_in, C_out] -> [N, H-kh+1, W-kw+1, C_out]."""
    kh, kw = kernel.shape[:2]
    patches = np.lib.stride_tricks.sliding_window_view(x, (kh, kw), axis=(1, 2))
    # patches: [N, H', W', C_in, kh, kw]
    y = np.einsum("nhwcij,ijco->nhwo", patches, kernel, optimize=True) + bias
    return np.maximum(y, 0.0)


def maxpool2(x):
    n, h, w, c = x.shape
    x = x[:, :h // 2 * 2, :w // 2 * 2, :]
    return x.reshape(n, h // 2, 2, w // 2, 2, c).max(axis=(2, 4))


def logits(t, images):
    x = conv_valid_relu(images, t["conv1/kernel"], t["conv1/bias"])
    x = maxpool2(x)
    x = conv_valid_relu(x, t["conv2/kernel"], t["conv2/bias"])
    x = maxpool2(x)
    x = x.reshape(x.shape[0], -1)  # NHWC rows: height, then width, then channel
    x = np.maximum(x @ t["dense1/kernel"] + t["dense1/bias"], 0.0)
    return x @ t["dense2/kernel"] + t["dense2/bias"]


def main(argv):
    if len(argv) != 3:
        sys.exit(__doc__.split("\n\n")[1])
    model, data_dir = argv[1], argv[2]
    t, meta = read_safetensors(model)
    if meta.get("layout") != "keras":
        fail("%s: __metadata__.layout is %r, expected 'keras'" % (model, meta.get("layout")))
    images = read_idx_gz(os.path.join(data_dir, "t10k-images-idx3-ubyte.gz"), 2051)
    labels = read_idx_gz(os.path.join(data_dir, "t10k-labels-idx1-ubyte.gz"), 2049)
    if images.shape[0] != labels.shape[0]:
        fail("%d test images but %d labels" % (images.shape[0], labels.shape[0]))
    correct, loss_sum, ambiguous = 0, 0.0, 0
    for begin in range(0, images.shape[0], 500):
        x = images[begin:begin + 500].astype(np.float64)[..., np.newaxis] / 255.0
        y = labels[begin:begin + 500].astype(np.int64)
        z = logits(t, x)
        top2 = np.sort(z, axis=1)[:, -2:]
        ambiguous += int(np.sum(top2[:, 1] - top2[:, 0] < AMBIGUOUS_MARGIN))
        correct += int(np.sum(np.argmax(z, axis=1) == y))
        m = z.max(axis=1, keepdims=True)
        log_norm = m[:, 0] + np.log(np.exp(z - m).sum(axis=1))
        loss_sum += float(np.sum(log_norm - z[np.arange(len(y)), y]))
    print("keras_forward: correct=%d of %d loss=%.6f ambiguous=%d"
          % (correct, images.shape[0], loss_sum / images.shape[0], ambiguous))


if __name__ == "__main__":
    main(sys.argv)
