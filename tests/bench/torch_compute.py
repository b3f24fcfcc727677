"""The peer for tests/bench:worker_compute: PyTorch's images/s for one
training step (forward, softmax cross-entropy, backward; no optimizer, as
worker_compute's Network::TrainStep) of the same Keras model file, batch and
thread count, in float32 on the CPU, eager mode.

Usage: /usr/bin/python3 tests/bench/torch_compute.py --model=FILE
           [--batch=128] [--threads=1,2] [--seconds=3] [--runs=5]
       /usr/bin/python3 tests/bench/torch_compute.py
           --check=tests/fixtures/tfjs_reference/graphs.json

The model is built from the Keras JSON (tf.keras, Keras 3 or TensorFlow.js;
the config.json of a .keras archive), Sequential or Functional: a graph of
layer applications (Keras 2 / TensorFlow.js inbound nodes
[[name, node_index, tensor_index, kwargs], ...], Keras 3 {"args": [...],
"kwargs": {}} with "keras_history"; config.output_layers), merged by Add,
Subtract, Multiply, Average and Concatenate; a layer applied twice is one
module (its weights are shared). Keras's semantics: NHWC data converted
once to NCHW, "same" padding split as Keras does (the odd row/column at the
bottom/right; F.pad only where the split is uneven), Flatten in NHWC order,
BatchNormalization with momentum 1 - keras_momentum and Keras's epsilon,
Dropout in training mode, LSTM and GRU (reset_after) over [steps,
features] as PyTorch's own (cuDNN-free, MKL/OpenBLAS-backed) modules, a
final softmax fused into the loss
(F.cross_entropy on logits; softmax elsewhere is refused, as our parser
does).

--check=FILE reads reference cases (tests/fixtures/tfjs_reference/
graphs.json: model_json, weights "<layer>/<var>" in Keras layouts, NHWC
images, labels, TensorFlow.js's inference_loss_sum and training_loss_sum),
loads the weights into the torch model and prints its summed sparse
categorical cross-entropy in both modes next to TensorFlow.js's; exits 1
when one differs by more than 1e-4 relative.

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


# The model file's JSON -----------------------------------------------------

class Graph:
    """A Keras model as layer applications: `layers` maps a name to
    (class_name, config); `nodes` lists (name, node_index, inputs) with
    inputs [(name, node_index), ...], each after what it reads; `input` is
    the input layer's name and `output` the (name, node_index) of the loss's
    input; `shape` is the input's shape without the batch (HWC or [C])."""

    def __init__(self, layers, nodes, input_name, output, shape):
        self.layers, self.nodes = layers, nodes
        self.input, self.output, self.shape = input_name, output, shape


def read_doc(path):
    if path.endswith(".keras"):
        with zipfile.ZipFile(path) as z:
            doc = json.loads(z.read("config.json"))
    else:
        with open(path) as f:
            doc = json.load(f)
    return doc


def layer_name(layer):
    return layer.get("name") or layer["config"]["name"]


def inbound_refs(node, where):
    """The (name, node_index) tensors one inbound node reads, in order."""
    refs = []

    def walk(j):
        if isinstance(j, dict) and isinstance(j.get("keras_history"), list):
            h = j["keras_history"]
        elif (isinstance(j, list) and len(j) >= 3 and isinstance(j[0], str)
              and isinstance(j[1], int) and isinstance(j[2], int)):
            h = j
        else:
            for v in (j.values() if isinstance(j, dict) else j if isinstance(j, list) else []):
                walk(v)
            return
        if h[2] != 0:
            fail("%s reads output %d of layer %s: layers with several outputs are not "
                 "supported" % (where, h[2], h[0]))
        refs.append((h[0], h[1]))

    walk(node)
    return refs


def output_ref(config, listed):
    out = config.get("output_layers") if isinstance(config, dict) else None
    if out is None:
        last = listed[-1]
        return layer_name(last), max(len(last.get("inbound_nodes") or []) - 1, 0)
    if out and isinstance(out[0], list):
        if len(out) != 1:
            fail("output_layers %r: models with several outputs are not supported" % (out,))
        out = out[0]
    return out[0], out[1]


def input_shape(listed):
    for layer in listed:
        cfg = layer["config"]
        for key in ("batch_shape", "batch_input_shape"):
            if cfg.get(key):
                return list(cfg[key][1:])
        build = layer.get("build_config") or {}
        if build.get("input_shape"):
            return list(build["input_shape"][1:])
    fail("the model file gives no input shape")


def graph_of(doc):
    """The Graph of a model's JSON (tfjs model.json, Keras 3's .keras
    config.json, or to_json()'s text)."""
    doc = doc.get("modelTopology", doc)
    doc = doc.get("model_config", doc)
    config = doc["config"]
    listed = config if isinstance(config, list) else config["layers"]
    layers = {layer_name(l): (l["class_name"], l["config"]) for l in listed}
    shape = input_shape(listed)
    if doc["class_name"] not in ("Functional", "Model"):
        # Sequential: each layer reads the one before it.
        nodes, prev = [], "input"
        for l in listed:
            name = layer_name(l)
            if l["class_name"] == "InputLayer":
                prev = name
                continue
            nodes.append((name, 0, [(prev, 0)]))
            prev = name
        return Graph(layers, nodes, listed[0]["config"]["name"] if
                     listed[0]["class_name"] == "InputLayer" else "input", (prev, 0), shape)
    reads = {}
    inputs = [layer_name(l) for l in listed if l["class_name"] == "InputLayer"]
    if len(inputs) != 1:
        fail("%d input layers: models with one input only" % len(inputs))
    for l in listed:
        for k, node in enumerate(l.get("inbound_nodes") or []):
            reads[(layer_name(l), k)] = inbound_refs(node, "layer %s" % layer_name(l))
    output = output_ref(config, listed)
    # Depth-first from the output: each node after its inputs, and only the
    # nodes the output needs (as Keras runs them).
    nodes, state = [], {}

    def visit(ref):
        if ref[0] == inputs[0]:
            return
        if state.get(ref) == 1:
            fail("the graph has a cycle through %s node %d" % ref)
        if state.get(ref) == 2:
            return
        if ref not in reads:
            fail("layer %s has no node %d" % ref)
        state[ref] = 1
        for r in reads[ref]:
            visit(r)
        state[ref] = 2
        nodes.append((ref[0], ref[1], reads[ref]))

    visit(output)
    return Graph(layers, nodes, inputs[0], output, shape)


def read_layers(path):
    """The model in `path` as a Graph (what build() takes)."""
    return graph_of(read_doc(path))


# Layers -----------------------------------------------------------------------

def pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


def same_pads(size, window, stride):
    out = -(-size // stride)
    total = max((out - 1) * stride + window - size, 0)
    return out, total // 2, total - total // 2


def activation_name(cfg, where):
    a = cfg.get("activation")
    if isinstance(a, dict):
        a = a.get("config", {}).get("name")
    a = a or "linear"
    if a not in ("linear", "relu", "sigmoid", "tanh", "softmax"):
        fail("%s: activation %r is not supported" % (where, a))
    return a


def apply_activation(name, x):
    if name == "relu":
        return F.relu(x)
    if name == "sigmoid":
        return torch.sigmoid(x)
    if name == "tanh":
        return torch.tanh(x)
    return x  # linear, or the output's softmax fused into the loss


class Conv(torch.nn.Module):
    """Keras Conv2D: "same" padding from each input's size; the even split
    is the convolution's own padding, an uneven one an F.pad first."""

    def __init__(self, channels, cfg, act):
        super().__init__()
        self.window, self.strides = pair(cfg["kernel_size"]), pair(cfg.get("strides", 1))
        self.same, self.act = cfg.get("padding", "valid") == "same", act
        self.conv = torch.nn.Conv2d(channels, cfg["filters"], self.window, self.strides,
                                    bias=cfg.get("use_bias", True))

    def forward(self, x):
        padding = (0, 0)
        if self.same:
            _, top, bottom = same_pads(x.shape[2], self.window[0], self.strides[0])
            _, left, right = same_pads(x.shape[3], self.window[1], self.strides[1])
            if top == bottom and left == right:
                padding = (top, left)
            else:
                x = F.pad(x, (left, right, top, bottom))
        c = self.conv
        return apply_activation(self.act, F.conv2d(x, c.weight, c.bias, c.stride, padding))


class Pool(torch.nn.Module):
    """Keras MaxPooling2D / AveragePooling2D; "same" average pooling is the
    mean of the cells inside the input."""

    def __init__(self, cfg, is_max):
        super().__init__()
        self.pool = pair(cfg.get("pool_size", 2))
        self.strides = pair(cfg.get("strides") or self.pool)
        self.same, self.is_max = cfg.get("padding", "valid") == "same", is_max

    def forward(self, x):
        if not self.same:
            op = F.max_pool2d if self.is_max else F.avg_pool2d
            return op(x, self.pool, self.strides)
        _, top, bottom = same_pads(x.shape[2], self.pool[0], self.strides[0])
        _, left, right = same_pads(x.shape[3], self.pool[1], self.strides[1])
        pads = (left, right, top, bottom)
        if self.is_max:
            return F.max_pool2d(F.pad(x, pads, value=float("-inf")), self.pool, self.strides)
        s = F.avg_pool2d(F.pad(x, pads), self.pool, self.strides, divisor_override=1)
        ones = torch.ones((1, 1) + tuple(x.shape[2:]), dtype=x.dtype, device=x.device)
        n = F.avg_pool2d(F.pad(ones, pads), self.pool, self.strides, divisor_override=1)
        return s / n


class Dense(torch.nn.Module):
    def __init__(self, features, cfg, act):
        super().__init__()
        self.linear = torch.nn.Linear(features, cfg["units"], bias=cfg.get("use_bias", True))
        self.act = act

    def forward(self, x):
        return apply_activation(self.act, self.linear(x))


class BatchNorm(torch.nn.modules.batchnorm._BatchNorm):
    """Keras BatchNormalization over the channels of NCHW or [N, C] input;
    center/scale false hold beta 0 / gamma 1 fixed."""

    def __init__(self, channels, cfg):
        super().__init__(channels, eps=cfg.get("epsilon", 1e-3),
                         momentum=1.0 - cfg.get("momentum", 0.99))
        if not cfg.get("scale", True):
            self.weight.requires_grad_(False)
        if not cfg.get("center", True):
            self.bias.requires_grad_(False)

    def _check_input_dim(self, x):
        if x.dim() not in (2, 4):
            raise ValueError("BatchNorm: expected 2-D or 4-D input, got %d-D" % x.dim())


class Lambda(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *xs):
        return self.fn(*xs)


def flatten_nhwc(x):
    # Keras flattens NHWC: the same order here, so Dense kernels load as is.
    return x.permute(0, 2, 3, 1).flatten(1) if x.dim() == 4 else x


def concat_dim(axis, rank):
    """NCHW dimension of Keras's (NHWC) concatenation axis."""
    a = axis % rank if axis < 0 else axis
    return {0: 0, 1: 2, 2: 3, 3: 1}[a] if rank == 4 else a


def average(*xs):
    return sum(xs[1:], xs[0]) / len(xs)


def product(*xs):
    out = xs[0]
    for x in xs[1:]:
        out = out * x
    return out


class Recurrent(torch.nn.Module):
    """Keras's LSTM, or GRU with reset_after (PyTorch's GRU), over [steps,
    features]: its last state, or every step's with return_sequences."""

    def __init__(self, cls, features, cfg, where):
        super().__init__()
        if (cfg.get("activation", "tanh") != "tanh" or
                cfg.get("recurrent_activation", "sigmoid") != "sigmoid" or
                cfg.get("go_backwards") or not cfg.get("use_bias", True) or
                (cls == "GRU" and not cfg.get("reset_after", True))):
            fail("%s: only tanh and sigmoid gates, forwards, with biases (and GRU's "
                 "reset_after) match PyTorch's %s" % (where, cls))
        rnn = torch.nn.LSTM if cls == "LSTM" else torch.nn.GRU
        self.rnn = rnn(features, cfg["units"], batch_first=True)
        self.sequences = bool(cfg.get("return_sequences"))

    def forward(self, x):
        out, _ = self.rnn(x)
        return out if self.sequences else out[:, -1]


class Concat(torch.nn.Module):
    def __init__(self, axis):
        super().__init__()
        self.axis = axis

    def forward(self, *xs):
        return torch.cat(xs, concat_dim(self.axis, xs[0].dim()))


def make_layer(cls, cfg, shape, is_output, where):
    """The module of one Keras layer and its output shape (C, H, W) or (C,)
    for input `shape`; `is_output`: the loss reads it (softmax fused)."""
    def act_of():
        a = activation_name(cfg, where)
        if a == "softmax" and not is_output:
            fail("%s: softmax is only supported at the end of the model" % where)
        return a

    four = len(shape) == 3
    if cls in ("Conv2D", "Convolution2D"):
        if not four:
            fail("%s: Conv2D needs an image input" % where)
        if pair(cfg.get("dilation_rate", 1)) != (1, 1) or cfg.get("groups", 1) != 1:
            fail("%s: dilated or grouped convolutions are not supported" % where)
        c, h, w = shape
        (kh, kw), (sh, sw) = pair(cfg["kernel_size"]), pair(cfg.get("strides", 1))
        if cfg.get("padding", "valid") == "same":
            h, w = -(-h // sh), -(-w // sw)
        else:
            h, w = (h - kh) // sh + 1, (w - kw) // sw + 1
        return Conv(c, cfg, act_of()), (cfg["filters"], h, w)
    if cls in ("MaxPooling2D", "MaxPool2D", "AveragePooling2D", "AvgPool2D"):
        c, h, w = shape
        pool = pair(cfg.get("pool_size", 2))
        strides = pair(cfg.get("strides") or pool)
        if cfg.get("padding", "valid") == "same":
            h, w = -(-h // strides[0]), -(-w // strides[1])
        else:
            h, w = (h - pool[0]) // strides[0] + 1, (w - pool[1]) // strides[1] + 1
        return Pool(cfg, cls.startswith("Max")), (c, h, w)
    if cls in ("GlobalAveragePooling2D", "GlobalAvgPool2D"):
        return Lambda(lambda x: x.mean((2, 3))), (shape[0],)
    if cls == "Flatten":
        n = 1
        for d in shape:
            n *= d
        return Lambda(flatten_nhwc), (n,)
    if cls == "Dense":
        if four:
            fail("%s: Dense on an image (Flatten or pool first)" % where)
        return Dense(shape[0], cfg, act_of()), (cfg["units"],)
    if cls == "Dropout":
        return torch.nn.Dropout(cfg["rate"]), shape
    if cls in ("LSTM", "GRU"):
        if len(shape) != 2:
            fail("%s: %s reads [steps, features]" % (where, cls))
        units = cfg["units"]
        return (Recurrent(cls, shape[1], cfg, where),
                (shape[0], units) if cfg.get("return_sequences") else (units,))
    if cls in ("Activation", "ReLU"):
        a = "relu" if cls == "ReLU" else act_of()
        return Lambda(lambda x: apply_activation(a, x)), shape
    if cls == "BatchNormalization":
        return BatchNorm(shape[0], cfg), shape
    if cls == "Add":
        return Lambda(lambda *xs: sum(xs[1:], xs[0])), shape
    if cls == "Subtract":
        return Lambda(lambda a, b: a - b), shape
    if cls == "Multiply":
        return Lambda(product), shape
    if cls == "Average":
        return Lambda(average), shape
    fail("%s (%s) is not known here" % (where, cls))


class GraphModel(torch.nn.Module):
    """Runs a Graph: one module per Keras layer, called once per node."""

    def __init__(self, graph):
        super().__init__()
        self.mods = torch.nn.ModuleDict()
        self.nodes, self.input, self.output = graph.nodes, graph.input, graph.output
        hwc = graph.shape
        shapes = {(graph.input, 0): (hwc[2], hwc[0], hwc[1]) if len(hwc) == 3 else tuple(hwc)}
        for name, k, inputs in graph.nodes:
            cls, cfg = graph.layers[name]
            where = "layer %s" % name
            ins = [shapes[r] for r in inputs]
            if cls == "Concatenate":
                axis = cfg.get("axis", -1)
                dim = concat_dim(axis, len(ins[0]) + 1) - 1
                out = list(ins[0])
                out[dim] = sum(s[dim] for s in ins)
                shape, mod = tuple(out), Concat(axis)
            else:
                mod, shape = make_layer(cls, cfg, ins[0], (name, k) == graph.output, where)
            if name not in self.mods:
                self.mods[name] = mod
            shapes[(name, k)] = shape
        self.classes = shapes[graph.output][0]

    def forward(self, x):
        values = {(self.input, 0): x}
        for name, k, inputs in self.nodes:
            values[(name, k)] = self.mods[name](*[values[r] for r in inputs])
        return values[self.output]


def build(graph):
    """(model, input shape HWC or [C], classes) of a Graph (read_layers)."""
    model = GraphModel(graph)
    return model, graph.shape, model.classes


# Keras weights ------------------------------------------------------------------

def load_keras_weights(model, weights):
    """Sets the model's parameters from {"<layer>/<var>": flat list} in
    Keras's layouts (Conv2D kernel HWIO, Dense kernel [in, out], BN gamma,
    beta, moving_mean, moving_variance); returns the names left unused."""
    unused = set(weights)

    def take(key, like, layout=None):
        unused.discard(key)
        t = torch.tensor(weights[key], dtype=like.dtype)
        if layout == "hwio":
            o, i, kh, kw = like.shape
            t = t.view(kh, kw, i, o).permute(3, 2, 0, 1)
        elif layout == "io":
            t = t.view(like.shape[1], like.shape[0]).t()
        like.copy_(t.reshape(like.shape))

    with torch.no_grad():
        for name, mod in model.mods.items():
            if isinstance(mod, Conv):
                take(name + "/kernel", mod.conv.weight, "hwio")
                if mod.conv.bias is not None:
                    take(name + "/bias", mod.conv.bias)
            elif isinstance(mod, Dense):
                take(name + "/kernel", mod.linear.weight, "io")
                if mod.linear.bias is not None:
                    take(name + "/bias", mod.linear.bias)
            elif isinstance(mod, BatchNorm):
                for var, p in (("gamma", mod.weight), ("beta", mod.bias),
                               ("moving_mean", mod.running_mean),
                               ("moving_variance", mod.running_var)):
                    if name + "/" + var in weights:
                        take(name + "/" + var, p)
    return sorted(unused)


def check(path):
    """--check: torch's losses next to TensorFlow.js's; 0 when all agree."""
    with open(path) as f:
        cases = json.load(f)["models"]
    worst = 0.0
    for case in cases:
        graph = graph_of(case["model_json"])
        name = case["model_json"]["config"].get("name", "?")
        for dtype in (torch.float32, torch.float64):
            model, shape, _ = build(graph)
            unused = load_keras_weights(model, case["weights"])
            if unused:
                fail("%s: weights not used: %s" % (name, ", ".join(unused)))
            model.to(dtype)
            labels = torch.tensor(case["labels"])
            x = torch.tensor(case["images"], dtype=dtype).view([len(labels)] + shape)
            if x.dim() == 4:
                x = x.permute(0, 3, 1, 2).contiguous()
            for mode, key in (("inference", "inference_loss_sum"),
                              ("training", "training_loss_sum")):
                model.train(mode == "training")
                with torch.no_grad():
                    ours = F.cross_entropy(model(x), labels, reduction="sum").item()
                rel = abs(ours - case[key]) / abs(case[key])
                if dtype == torch.float32:
                    worst = max(worst, rel)
                print("check %s %s %s: torch=%.7f tfjs=%.7f rel=%.1e"
                      % (name, str(dtype).replace("torch.", ""), mode, ours, case[key], rel))
    ok = worst <= 1e-4
    print("check: %s (worst float32 relative difference %.1e; tolerance 1e-4)"
          % ("OK" if ok else "FAILED", worst))
    return 0 if ok else 1


# Timing -------------------------------------------------------------------------

def parse_flags(argv, flags):
    """--name=value flags over `flags` (the defaults); --model is required
    unless --check is given."""
    flags = dict(flags)
    for arg in argv[1:]:
        name, _, value = arg.partition("=")
        if not name.startswith("--") or name[2:] not in flags:
            fail("unknown flag %r (see the top of this file)" % arg)
        flags[name[2:]] = value
    if not flags["model"] and not flags.get("check"):
        fail("--model=FILE is required")
    return flags


def main(argv):
    flags = parse_flags(argv, {"model": None, "batch": "128", "threads": "1,2",
                               "seconds": "3", "runs": "5", "check": None})
    if flags["check"]:
        sys.exit(check(flags["check"]))
    model, shape, classes = build(read_layers(flags["model"]))
    model.train()
    batch = int(flags["batch"])
    if len(shape) == 3:
        x = torch.rand(batch, shape[2], shape[0], shape[1])
    else:
        x = torch.rand([batch] + list(shape))  # [C], or [steps, features]
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
