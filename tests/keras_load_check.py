"""Runs the README's load-back snippet (the Python block after
`<!-- readme_test: keras_load -->`) on a model file and its export, with
stand-ins for `keras` and `safetensors.numpy`, and checks that it sets
every layer that has variables with exactly the export's tensors, in
Keras's order: the snippet a user copies must load any model the cluster
trains, or fail saying which weights it lacks, never keep a random one.

Usage: /usr/bin/python3 tests/keras_load_check.py README.md MODEL.json EXPORT.safetensors

Keras itself cannot be installed here (no PyPI; Debian 12 packages no
Keras). The stand-in `keras.models.model_from_json` reads the model file
(Keras's `model.to_json()`, a Keras 3 config, or TensorFlow.js's
`model.json`) and makes a layer per entry that knows Keras's variables for
its class and config, in Keras's order (`KERAS_VARIABLES`); its
`set_weights` takes exactly that many arrays. The stand-in
`safetensors.numpy.load_file` reads the safetensors format itself.
Prints "N layers set: ..." and exits 0, or names what went wrong and
exits 1.
"""
import json
import re
import struct
import sys
import types

import numpy as np

# Each layer class's variables, in the order Keras's layer.weights lists them,
# by the names the cluster's export gives them (<layer>/<name>); absent ones
# (use_bias false, BatchNormalization without scale or center) left out.
KERAS_VARIABLES = {
    "Conv2D": lambda c: ["kernel"] + (["bias"] if c.get("use_bias", True) else []),
    "Dense": lambda c: ["kernel"] + (["bias"] if c.get("use_bias", True) else []),
    "DepthwiseConv2D": lambda c: ["depthwise_kernel"] + (["bias"] if c.get("use_bias", True) else []),
    "SeparableConv2D": lambda c: ["depthwise_kernel", "pointwise_kernel"] +
                                 (["bias"] if c.get("use_bias", True) else []),
    "BatchNormalization": lambda c: (["gamma"] if c.get("scale", True) else []) +
                                    (["beta"] if c.get("center", True) else []) +
                                    ["moving_mean", "moving_variance"],
    "LayerNormalization": lambda c: (["gamma"] if c.get("scale", True) else []) +
                                    (["beta"] if c.get("center", True) else []),
    "Embedding": lambda c: ["embeddings"],
}
# Classes without variables.
NO_VARIABLES = {
    "InputLayer", "MaxPooling2D", "AveragePooling2D", "GlobalAveragePooling2D",
    "GlobalMaxPooling2D", "Flatten", "Dropout", "Activation", "ReLU", "LeakyReLU", "ELU",
    "ZeroPadding2D", "Add", "Subtract", "Multiply", "Average", "Concatenate", "Rescaling",
    "Reshape", "Dot",
}
# TensorFlow.js's class names for Keras's.
TFJS_CLASSES = {"Model": "Functional"}

SAFETENSORS_DTYPES = {"F32": "<f4", "F64": "<f8", "I64": "<i8", "I32": "<i4"}


def load_file(path):
    """safetensors.numpy.load_file: name -> array."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    header.pop("__metadata__", None)
    data = blob[8 + n:]
    out = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        out[name] = np.frombuffer(data[begin:end], dtype=SAFETENSORS_DTYPES[info["dtype"]]).reshape(info["shape"])
    return out


class Variable:
    def __init__(self, path):
        self.path, self.name = path, path.split("/")[-1]


class Layer:
    """A layer that knows its Keras variables and records what it was given."""

    def __init__(self, cls, config):
        self.name = config["name"]
        self.class_name, self.config = cls, config
        self.variables = KERAS_VARIABLES[cls](config) if cls in KERAS_VARIABLES else []
        self.weights = [Variable("%s/%s" % (self.name, v)) for v in self.variables]
        self.given = None

    def set_weights(self, values):
        if len(values) != len(self.variables):
            raise ValueError("layer %s (%s) takes %d weights (%s), got %d" % (
                self.name, self.class_name, len(self.variables), ", ".join(self.variables), len(values)))
        self.given = [np.asarray(v) for v in values]


class Model:
    def __init__(self, layers):
        self.layers = layers


BUILT = []
CLASSES = {}


def model_from_json(text):
    doc = json.loads(text)
    if "modelTopology" in doc:  # TensorFlow.js's model.json
        doc = doc["modelTopology"].get("model_config", doc["modelTopology"])
    layers = []
    for entry in doc["config"]["layers"]:
        cls = TFJS_CLASSES.get(entry["class_name"], entry["class_name"])
        if cls not in KERAS_VARIABLES and cls not in NO_VARIABLES:
            raise ValueError("layer class %s: this stand-in does not know its variables" % cls)
        # A class of Keras's name, as type(layer).__name__ gives it.
        klass = CLASSES.setdefault(cls, type(cls, (Layer,), {}))
        layers.append(klass(cls, entry["config"]))
    model = Model(layers)
    BUILT.append(model)
    return model


def snippet(readme):
    """The Python block after `<!-- readme_test: keras_load -->`."""
    with open(readme) as f:
        text = f.read()
    m = re.search(r"<!-- readme_test: keras_load -->\s*```python\n(.*?)```", text, re.S)
    if not m:
        sys.exit("%s: no ```python block after <!-- readme_test: keras_load -->" % readme)
    return m.group(1)


def main(argv):
    if len(argv) != 4:
        sys.exit(__doc__)
    readme, model_file, export = argv[1:]
    code = snippet(readme)
    if '"model.json"' not in code or '"runs/my_model/model.safetensors"' not in code:
        sys.exit("the snippet no longer opens \"model.json\" and \"runs/my_model/model.safetensors\"")
    code = code.replace('"model.json"', json.dumps(model_file)).replace(
        '"runs/my_model/model.safetensors"', json.dumps(export))
    keras = types.ModuleType("keras")
    keras.models = types.ModuleType("keras.models")
    keras.models.model_from_json = model_from_json
    safetensors = types.ModuleType("safetensors")
    safetensors.numpy = types.ModuleType("safetensors.numpy")
    safetensors.numpy.load_file = load_file
    sys.modules.update({"keras": keras, "keras.models": keras.models, "safetensors": safetensors,
                        "safetensors.numpy": safetensors.numpy})
    try:
        exec(compile(code, "README.md's load-back snippet", "exec"), {"__name__": "__main__"})
    except Exception as e:  # the snippet refused: say what it said
        sys.exit("the snippet raised %s: %s" % (type(e).__name__, e))
    if len(BUILT) != 1:
        sys.exit("the snippet built %d models, not 1" % len(BUILT))
    tensors = load_file(export)
    done = []
    for layer in BUILT[0].layers:
        if not layer.variables:
            continue
        if layer.given is None:
            sys.exit("layer %s (%s) has %s but the snippet set none" % (
                layer.name, layer.class_name, ", ".join(layer.variables)))
        if layer.class_name == "Embedding":  # Keras's table: every id a row
            shape = (layer.config["input_dim"], layer.config["output_dim"])
            if layer.given[0].shape != shape:
                sys.exit("layer %s (Embedding): embeddings %s, Keras's table is %s" % (
                    layer.name, layer.given[0].shape, shape))
        for v, got in zip(layer.variables, layer.given):
            want = tensors.get("%s/%s" % (layer.name, v))
            if want is None or got.shape != want.shape or not np.array_equal(got, want):
                sys.exit("layer %s (%s): its %s is not the export's %s/%s" % (
                    layer.name, layer.class_name, v, layer.name, v))
        done.append("%s %s (%s)" % (layer.class_name, layer.name, "/".join(
            "x".join(map(str, g.shape)) for g in layer.given)))
    print("%d layers set: %s" % (len(done), ", ".join(done)))


if __name__ == "__main__":
    main(sys.argv)
