#!/usr/bin/python3
"""The PyTorch peer of a click-through-rate model file: the Keras model in
FILE (deploy/models/ctr_*.json, with its Embedding's input_dim set to the
data's buckets) built in PyTorch layer by layer, trained on the same
Criteo folder (criteo_synth's, or your own) with the same optimizers,
batch, epochs and learning-rate schedule as the cluster's run, and its
test AUC printed; or the cluster's export scored by that PyTorch model.

    /usr/bin/python3 tests/bench/ctr_torch.py --model=FILE --data=DIR
        [--epochs=1] [--batch=256] [--learning_rate=0.001]
        [--lr_decay_rate=0.5] [--lr_decay_steps=1000]
        [--embedding_optimizer=adam|adagrad] [--embedding_learning_rate=0]
        [--embedding_initial_accumulator=0.1] [--seed=1] [--threads=2]
        [--device=cpu|cuda|cuda:N]
    /usr/bin/python3 tests/bench/ctr_torch.py --model=FILE --data=DIR
        --score=model.safetensors

The cluster's flags it stands for: --optimizer=adam --learning_rate=L
--lr_decay_rate=R --lr_decay_steps=S (the dense weights' rate at update t
is L * R^(t / S), S = 0 constant) --embedding_optimizer=adam|adagrad
--embedding_learning_rate=E (0: L; constant) --embedding_initial_accumulator=A
--batch_size=B (the global batch, as sync mode's) --epochs=N. The tables
are sparse (nn.Embedding(sparse=True)) and updated per row: SparseAdam
(LazyAdam's rule, the table's step count in the bias correction) or
Adagrad, both with Keras's epsilon 1e-7; the dense weights by Adam.
--device=cuda trains on the GPU (fp32, TF32 off; the whole data set is
copied to the card once, so the loop times compute alone).
Initial weights are drawn as Keras draws them (glorot_uniform kernels,
zero biases, the Embedding's initializer), from this script's seed: the
same distributions as the cluster's, not the same values.

The examples are the Criteo folder's as the cluster reads them
(model/criteo_dataset.h): log(1 + max(x, 0)) of the 13 integers (empty: 0),
the 26 categorical fields hashed to rows in [0, buckets) by the same key
(criteo.json's buckets; ids 0 for an empty field hash too), the 39 values
split between the model's inputs in their order; read in the files'
order.

Layers: InputLayer, Embedding, Flatten, Concatenate (last axis), Dense
(2-D), Dropout, Activation (relu, sigmoid, tanh, linear), Add, Subtract,
Multiply, Average, Dot (flat; normalize), GlobalAveragePooling1D,
Rescaling, Reshape, Concatenate along the steps, Dot of sequences
(MMoE's gates over its experts), a softmax Dense, Attention (dot scores;
the masks of Embeddings with mask_zero, as Keras 3 applies them: DIN's
target attention over a history, criteo.json's "history"). Several
outputs (ESMM's click and click-and-convert, MMoE's two tasks) train on
the sum of their binary cross-entropies times the file's
loss_weights, on a Criteo folder of as many label columns (criteo.json's
"labels"). An output's sigmoid is taken into its loss (binary
cross-entropy with logits), as the cluster fuses it; a Multiply output is
a probability, clipped to [1e-7, 1 - 1e-7] as Keras clips it.

Prints `final: test_auc=A test_loss=L epochs=N steps=S examples_per_s=X
train_s=T` (or, with --score, `score: test_auc=A test_loss=L`); with several
outputs `test_loss=L test_<output>_auc=A test_<output>_loss=L ...` in their
place. Exit 2 on
bad flags or a model it cannot build, naming the problem. Needs
python3-torch (Debian) and numpy.
"""
import argparse
import gzip
import json
import math
import os
import struct
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ctr_auc_bound import auc  # noqa: E402  (the same rank AUC)

INTEGERS, FIELDS = 13, 26
M64 = (1 << 64) - 1


def bad(msg):
    print(f'error: {msg}', file=sys.stderr)
    sys.exit(2)


# The data, as model/criteo_dataset.cc reads it ---------------------------------

def mix64(z):
    """splitmix64's finalizer over uint64 arrays (wrapping products)."""
    with np.errstate(over='ignore'):
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xbf58476d1ce4e5b9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94d049bb133111eb)
    return z ^ (z >> np.uint64(31))


def scaled(key, buckets):
    """(key * buckets) >> 64 for uint64 keys, buckets < 2^31, without
    128-bit products."""
    hi, lo = key >> np.uint64(32), key & np.uint64(0xffffffff)
    b = np.uint64(buckets)
    return ((hi * b + ((lo * b) >> np.uint64(32))) >> np.uint64(32)).astype(np.int64)


def buckets_of(ids, buckets):
    """CriteoBucket: (Mix64(id ^ (feature << 56)) * buckets) >> 64 for ids
    [n, 26] (uint64)."""
    shift = (np.arange(FIELDS, dtype=np.uint64) << np.uint64(56))[None, :]
    return scaled(mix64(ids ^ shift), buckets)


def item_rows(ids, buckets):
    """The item's and the history's values (criteo.json's "history"):
    1 + CriteoBucket(0, id, buckets) of C1's ids [n, k] (uint64), 0 where
    the id is 0 (an empty C1, padding)."""
    return np.where(ids == 0, 0, scaled(mix64(ids), buckets) + 1).astype(np.float32)


def read_split(path, buckets, label_columns=1, history=0):
    """(values [n, 39] float32: integers transformed, then the rows; with a
    history of N (criteo.json's "history"), [n, 40 + N]: the item's row and
    the history's after them; labels [n], or [n, 2] with "labels": 2)."""
    opener = gzip.open if path.endswith('.gz') else open
    with opener(path, 'rt') as f:
        lines = f.read().splitlines()
    n = len(lines)
    ints = np.zeros((n, INTEGERS), dtype=np.float32)
    cats = np.zeros((n, FIELDS), dtype=np.uint64)
    past = np.zeros((n, history), dtype=np.uint64)
    labels = np.zeros((n, label_columns), dtype=np.float32)
    first = label_columns
    fields = first + INTEGERS + FIELDS + (1 if history else 0)
    for i, line in enumerate(lines):
        t = line.split('\t')
        if len(t) != fields:
            bad(f'{path}:{i + 1}: {len(t)} fields, not {fields}')
        labels[i] = [float(v) for v in t[:first]]
        ints[i] = [max(int(v), 0) if v else 0 for v in t[first:first + INTEGERS]]
        cats[i] = [int(v, 16) + 1 if v else 0 for v in t[first + INTEGERS:first + INTEGERS + FIELDS]]
        if history and t[-1]:
            items = t[-1].split(',')
            if len(items) > history:
                bad(f'{path}:{i + 1}: {len(items)} history items, more than {history}')
            past[i, :len(items)] = [int(v, 16) + 1 for v in items]
    parts = [np.log1p(ints), buckets_of(cats, buckets).astype(np.float32)]
    if history:
        parts += [item_rows(cats[:, :1], buckets), item_rows(past, buckets)]
    values = np.concatenate(parts, 1)
    return values, (labels[:, 0] if label_columns == 1 else labels)


def find(data, name):
    for suffix in ('', '.gz'):
        if os.path.exists(os.path.join(data, name + suffix)):
            return os.path.join(data, name + suffix)
    bad(f'--data={data}: no {name} (or {name}.gz) there')


# The model -----------------------------------------------------------------------

def load_graph(path):
    """(inputs [(name, size)], nodes [(name, node, cls, cfg, refs)], output
    refs, the compiled loss weights by output name)."""
    from torch_compute import inbound_refs, layer_name, read_doc
    doc = read_doc(path)
    compiled = doc.get('training_config') or doc.get('compile_config') or {}
    doc = doc.get('modelTopology', doc)
    doc = doc.get('model_config', doc)
    config = doc['config']
    if doc['class_name'] not in ('Functional', 'Model'):
        bad(f'--model={path}: a Functional model is needed (its inputs name the features)')
    listed = config['layers']
    by_name = {layer_name(l): l for l in listed}
    order = [r[0] if isinstance(r, list) else r for r in config.get('input_layers', [])]
    if order and isinstance(config['input_layers'][0], str):  # Keras 3: [name, node, tensor]
        order = [config['input_layers'][0]]
    inputs = []
    for name in order or [layer_name(l) for l in listed if l['class_name'] == 'InputLayer']:
        cfg = by_name[name]['config']
        shape = cfg.get('batch_shape') or cfg.get('batch_input_shape')
        inputs.append((name, int(np.prod(shape[1:]))))
    reads = {}
    for l in listed:
        for k, node in enumerate(l.get('inbound_nodes') or []):
            reads[(layer_name(l), k)] = inbound_refs(node, f'layer {layer_name(l)}')
    outs = config.get('output_layers')
    if outs is None:
        last = listed[-1]
        outs = [[layer_name(last), max(len(last.get('inbound_nodes') or []) - 1, 0)]]
    elif outs and not isinstance(outs[0], list):
        outs = [outs]
    outputs = [(o[0], o[1]) for o in outs]
    names = [o[0] for o in outputs]
    weights = compiled.get('loss_weights') or {}
    if isinstance(weights, list):
        weights = dict(zip(names, weights))
    for loss in [compiled.get('loss')] if not isinstance(compiled.get('loss'), (list, dict)) \
            else (compiled['loss'].values() if isinstance(compiled['loss'], dict)
                  else compiled['loss']):
        if loss not in (None, 'binary_crossentropy', 'binaryCrossentropy'):
            bad(f'--model={path}: loss {loss!r}: this peer trains on binary cross-entropy only')
    nodes, seen = [], set()

    def visit(ref):
        if ref in seen or by_name[ref[0]]['class_name'] == 'InputLayer':
            return
        seen.add(ref)
        for r in reads[ref]:
            visit(r)
        l = by_name[ref[0]]
        nodes.append((ref[0], ref[1], l['class_name'], l['config'], reads[ref]))

    for o in outputs:
        visit(o)
    return inputs, nodes, outputs, {n: float(weights.get(n, 1.0)) for n in names}


def concat_axis(cfg, shape, name):
    """A Concatenate's axis as an index into the shape without the batch."""
    axis = cfg.get('axis', -1)
    axis = axis - 1 if axis > 0 else len(shape) + axis
    if not 0 <= axis < len(shape):
        bad(f'layer {name}: Concatenate axis {cfg.get("axis")} of a {shape} input')
    return axis


def dot_axes(cfg, name):
    """A Dot of sequences' axes, each 1 (the steps) or 2 (the features)."""
    axes = cfg.get('axes', -1)
    axes = axes if isinstance(axes, list) else [axes, axes]
    axes = [2 if a == -1 else a for a in axes]
    if any(a not in (1, 2) for a in axes) or cfg.get('normalize'):
        bad(f'layer {name}: Dot of sequences with axes {cfg.get("axes")} is not one this peer builds')
    return axes


def build(path, seed):
    import torch
    import torch.nn as nn
    torch.manual_seed(seed)
    inputs, nodes, outputs, loss_weights = load_graph(path)
    acts = {'relu': torch.relu, 'sigmoid': torch.sigmoid, 'tanh': torch.tanh,
            'softmax': lambda x: torch.softmax(x, -1), 'linear': lambda x: x, None: lambda x: x}

    def act(cfg, name):
        a = cfg.get('activation')
        if a not in acts:
            bad(f'layer {name}: activation {a!r} is not one this peer builds')
        return a

    def init_table(w, cfg, name):
        init = cfg.get('embeddings_initializer') or {'class_name': 'RandomUniform', 'config': {}}
        cls, c = init.get('class_name'), init.get('config') or {}
        if cls in ('RandomUniform', 'randomUniform'):
            nn.init.uniform_(w, c.get('minval', -0.05), c.get('maxval', 0.05))
        elif cls in ('RandomNormal', 'randomNormal'):
            nn.init.normal_(w, c.get('mean', 0.0), c.get('stddev', 0.05))
        elif cls in ('Zeros', 'zeros'):
            nn.init.zeros_(w)
        else:
            bad(f'layer {name}: embeddings_initializer {cls} is not one this peer draws')

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.mods = nn.ModuleDict()
            self.tables = []
            shapes = {(n, 0): (s,) for n, s in inputs}
            for name, k, cls, cfg, refs in nodes:
                ins = [shapes[r] for r in refs]
                if cls == 'Embedding' and name not in self.mods:
                    e = nn.Embedding(cfg['input_dim'], cfg['output_dim'], sparse=True)
                    init_table(e.weight, cfg, name)
                    self.mods[name] = e
                    self.tables.append(e.weight)
                    shape = ins[0] + (cfg['output_dim'],)
                elif cls == 'Embedding':
                    shape = ins[0] + (cfg['output_dim'],)
                elif cls == 'Dense':
                    if len(ins[0]) != 1:
                        bad(f'layer {name}: Dense on a {ins[0]} input is not one this peer builds')
                    if name not in self.mods:
                        d = nn.Linear(ins[0][0], cfg['units'], bias=cfg.get('use_bias', True))
                        nn.init.xavier_uniform_(d.weight)  # Keras's glorot_uniform
                        if d.bias is not None:
                            nn.init.zeros_(d.bias)
                        self.mods[name] = d
                    act(cfg, name)
                    shape = (cfg['units'],)
                elif cls == 'Flatten':
                    shape = (int(np.prod(ins[0])),)
                elif cls == 'Concatenate':
                    axis = concat_axis(cfg, ins[0], name)
                    shape = list(ins[0])
                    shape[axis] = sum(s[axis] for s in ins)
                    shape = tuple(shape)
                elif cls == 'Dot':
                    shape = (1,) if len(ins[0]) == 1 else \
                        tuple(d for k, d in enumerate(ins[0]) if k != dot_axes(cfg, name)[0] - 1) + \
                        tuple(d for k, d in enumerate(ins[1]) if k != dot_axes(cfg, name)[1] - 1)
                elif cls == 'Attention':
                    if cfg.get('use_scale') or cfg.get('score_mode', 'dot') != 'dot':
                        bad(f'layer {name}: only dot-product Attention without a scale')
                    shape = ins[0][:-1] + ins[1][-1:]
                elif cls == 'GlobalAveragePooling1D':
                    shape = ins[0][1:]
                elif cls == 'Reshape':
                    shape = tuple(cfg['target_shape'])
                elif cls == 'Activation':
                    act(cfg, name)
                    shape = ins[0]
                elif cls in ('Add', 'Subtract', 'Multiply', 'Average', 'Rescaling', 'Dropout'):
                    shape = ins[0]
                else:
                    bad(f'layer {name}: {cls} is not a layer this peer builds')
                shapes[(name, k)] = shape

        def forward(self, xs):
            """Each output, [n]: (its logit, True) where its last layer's
            sigmoid is taken into the loss, else (the value, False), a
            product of probabilities (ESMM's click-and-convert)."""
            values, logit_of = dict(xs), {}
            masks = {}  # Keras's masks: an Embedding's (mask_zero), carried on
            for name, k, cls, cfg, refs in nodes:
                v = [values[r] for r in refs]
                last = (name, k) in outputs
                if cls == 'Embedding':
                    y = self.mods[name](v[0].long())
                    if cfg.get('mask_zero'):
                        masks[(name, k)] = (v[0] != 0).to(y.dtype)
                elif cls == 'Attention':
                    # Keras 3's: dot scores, the value's mask minus 1e9 on
                    # the padded keys, the query's zeroing its rows.
                    q, val = v[0], v[1]
                    key = v[2] if len(v) > 2 else val
                    scores = q @ key.transpose(1, 2)
                    if refs[1] in masks:
                        scores = scores - 1e9 * (1 - masks[refs[1]]).unsqueeze(1)
                    y = torch.softmax(scores, -1) @ val
                    if refs[0] in masks:
                        y = y * masks[refs[0]].unsqueeze(-1)
                        masks[(name, k)] = masks[refs[0]]
                elif cls == 'Dense':
                    y = self.mods[name](v[0])
                    a = act(cfg, name)
                    if last and a == 'sigmoid':
                        logit_of[(name, k)] = y
                    y = acts[a](y)
                elif cls == 'Flatten':
                    y = v[0].flatten(1)
                elif cls == 'Concatenate':
                    y = torch.cat(v, concat_axis(cfg, v[0].shape[1:], name) + 1)
                elif cls == 'Dot' and v[0].dim() == 3:
                    # Keras's batch_dot of two sequences along the axes named
                    # (1 the steps, 2 the features).
                    ax, bx = dot_axes(cfg, name)
                    a = v[0] if ax == 1 else v[0].transpose(1, 2)  # [n, k, i]
                    b = v[1] if bx == 1 else v[1].transpose(1, 2)  # [n, k, j]
                    y = a.transpose(1, 2) @ b
                elif cls == 'Dot':
                    a, b = v
                    if cfg.get('normalize'):
                        a = a * torch.clamp(a.pow(2).sum(-1, keepdim=True).rsqrt(), max=1e7)
                        b = b * torch.clamp(b.pow(2).sum(-1, keepdim=True).rsqrt(), max=1e7)
                    y = (a * b).sum(-1, keepdim=True)
                elif cls == 'GlobalAveragePooling1D':
                    y = v[0].mean(1)
                elif cls == 'Reshape':
                    y = v[0].reshape((v[0].shape[0],) + tuple(cfg['target_shape']))
                elif cls == 'Activation':
                    a = act(cfg, name)
                    if last and a == 'sigmoid':
                        logit_of[(name, k)] = v[0]
                    y = acts[a](v[0])
                elif cls == 'Add':
                    y = sum(v[1:], v[0])
                elif cls == 'Subtract':
                    y = v[0] - v[1]
                elif cls == 'Multiply':
                    y = v[0]
                    for t in v[1:]:
                        y = y * t
                elif cls == 'Average':
                    y = sum(v[1:], v[0]) / len(v)
                elif cls == 'Rescaling':
                    y = v[0] * cfg.get('scale', 1.0) + cfg.get('offset', 0.0)
                else:  # Dropout
                    y = torch.nn.functional.dropout(v[0], cfg.get('rate', 0.0), self.training)
                values[(name, k)] = y
            return [(logit_of[o].reshape(-1), True) if o in logit_of
                    else (values[o].reshape(-1), False) for o in outputs]

    model = Model()
    model.output_names = [o[0] for o in outputs]
    model.loss_weights = [loss_weights[n] for n in model.output_names]
    return model, inputs


def output_loss(out, y):
    """Keras's binary cross-entropy, the batch mean: on the logit, or on a
    probability clipped to [1e-7, 1 - 1e-7]."""
    import torch
    z, is_logit = out
    if is_logit:
        return torch.nn.functional.binary_cross_entropy_with_logits(z, y)
    p = torch.clamp(z, 1e-7, 1 - 1e-7)
    return -(y * torch.log(p) + (1 - y) * torch.log(1 - p)).mean()


def split_inputs(values, inputs):
    """The model's inputs' columns of examples [n, 39], in their order."""
    import torch
    want = sum(s for _, s in inputs)
    if want != values.shape[1]:
        bad(f'the model\'s inputs take {want} values an example; a Criteo example has '
            f'{values.shape[1]} (13 integers, 26 ids, then any item and history)')
    out, at = {}, 0
    for name, size in inputs:
        out[(name, 0)] = torch.from_numpy(np.ascontiguousarray(values[:, at:at + size]))
        at += size
    return out


def read_safetensors(path):
    import torch
    with open(path, 'rb') as f:
        b = f.read()
    n = struct.unpack('<Q', b[:8])[0]
    header = json.loads(b[8:8 + n])
    out = {}
    for name, h in header.items():
        if name == '__metadata__':
            continue
        if h['dtype'] != 'F32':
            bad(f'--score={path}: {name} is {h["dtype"]}, not F32 (an int64-id table?)')
        start, end = h['data_offsets']
        a = np.frombuffer(b[8 + n + start:8 + n + end], dtype='<f4').reshape(h['shape'])
        out[name] = torch.from_numpy(a.copy())
    return out


def load_export(model, path):
    """Sets every weight from the cluster's export (Keras layouts)."""
    import torch
    weights = read_safetensors(path)
    with torch.no_grad():
        for name, mod in model.mods.items():
            if isinstance(mod, torch.nn.Embedding):
                mod.weight.copy_(weights.pop(name + '/embeddings'))
            else:
                mod.weight.copy_(weights.pop(name + '/kernel').t())
                if mod.bias is not None:
                    mod.bias.copy_(weights.pop(name + '/bias'))
    if weights:
        bad(f'--score={path}: weights the model has no place for: {sorted(weights)}')


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--model', required=True)
    ap.add_argument('--data', required=True)
    ap.add_argument('--score', default='')
    ap.add_argument('--epochs', type=int, default=1)
    ap.add_argument('--batch', type=int, default=256)
    ap.add_argument('--learning_rate', type=float, default=0.001)
    ap.add_argument('--lr_decay_rate', type=float, default=0.5)
    ap.add_argument('--lr_decay_steps', type=int, default=1000)
    ap.add_argument('--embedding_optimizer', default='adam')
    ap.add_argument('--embedding_learning_rate', type=float, default=0.0)
    ap.add_argument('--embedding_initial_accumulator', type=float, default=0.1)
    ap.add_argument('--seed', type=int, default=1)
    ap.add_argument('--threads', type=int, default=2)
    ap.add_argument('--device', default='cpu')
    a = ap.parse_args()
    if not os.path.exists(a.model):
        bad(f'--model={a.model}: no such file')
    if a.epochs < 1 or a.batch < 1 or a.threads < 1:
        bad(f'--epochs={a.epochs}, --batch={a.batch}, --threads={a.threads}: each must be >= 1')
    if not (a.learning_rate > 0 and a.embedding_learning_rate >= 0):
        bad(f'--learning_rate={a.learning_rate} must be > 0, '
            f'--embedding_learning_rate={a.embedding_learning_rate} >= 0')
    if not (0 < a.lr_decay_rate <= 1) or a.lr_decay_steps < 0:
        bad(f'--lr_decay_rate={a.lr_decay_rate} must be in (0, 1], '
            f'--lr_decay_steps={a.lr_decay_steps} >= 0')
    if a.embedding_optimizer not in ('adam', 'adagrad'):
        bad(f'--embedding_optimizer={a.embedding_optimizer}: adam or adagrad')
    if a.embedding_initial_accumulator < 0:
        bad(f'--embedding_initial_accumulator={a.embedding_initial_accumulator} must be >= 0')
    import torch
    torch.set_num_threads(a.threads)
    try:
        device = torch.device(a.device)
    except RuntimeError as e:
        bad(f'--device={a.device}: {e}')
    if device.type == 'cuda' and not torch.cuda.is_available():
        bad(f'--device={a.device}: torch {torch.__version__} sees no CUDA device')
    if device.type == 'cuda':  # fp32 as the cluster computes it
        torch.backends.cuda.matmul.allow_tf32 = False

    def sync():
        if device.type == 'cuda':
            torch.cuda.synchronize(device)
    buckets, label_columns, history = 1000000, 1, 0
    cfg_path = os.path.join(a.data, 'criteo.json')
    if os.path.exists(cfg_path):
        cfg = json.load(open(cfg_path))
        buckets, label_columns = cfg.get('buckets', buckets), cfg.get('labels', 1)
        history = cfg.get('history', 0)
    if not 0 < buckets < 2 ** 31:
        bad(f'{cfg_path}: buckets {buckets}: this peer hashes into (0, 2^31) rows only')
    t0 = time.time()
    model, inputs = build(a.model, a.seed)
    model.to(device)
    heads = len(model.output_names)
    if heads != label_columns:
        bad(f'--model={a.model} has {heads} outputs but {cfg_path} gives {label_columns} labels')
    te_values, te_y = read_split(find(a.data, 'test.txt'), buckets, label_columns, history)
    te_y = te_y.reshape(len(te_y), heads)
    te = {k: v.to(device) for k, v in split_inputs(te_values, inputs).items()}

    def evaluate():
        """The figures of a final line: 'test_auc=A test_loss=L' for one
        output; for several, the weighted loss and each output's AUC and
        loss, named as the cluster names them."""
        model.eval()
        with torch.no_grad():
            outs = model(te)
        model.train()
        fields, total = [], 0.0
        for k, (v, is_logit) in enumerate(outs):
            y = te_y[:, k]
            s = v.cpu().numpy().astype(np.float64)
            p = 1 / (1 + np.exp(-s)) if is_logit else np.clip(s, 1e-7, 1 - 1e-7)
            ll = -np.mean(y * np.log(np.maximum(p, 1e-12)) +
                          (1 - y) * np.log(np.maximum(1 - p, 1e-12)))
            total += model.loss_weights[k] * ll
            prefix = 'test_' if heads == 1 else f'test_{model.output_names[k]}_'
            fields.append(f'{prefix}auc={auc(s, y):.4f} {prefix}loss={ll:.4f}')
        return ' '.join(fields if heads == 1 else [f'test_loss={total:.4f}'] + fields)

    if a.score:
        load_export(model, a.score)
        print(f'score: {evaluate()}')
        return 0
    tr_values, tr_y = read_split(find(a.data, 'train.txt'), buckets, label_columns, history)
    tr = {k: v.to(device) for k, v in split_inputs(tr_values, inputs).items()}
    tr_y = torch.from_numpy(tr_y.reshape(len(tr_y), heads)).to(device)
    print(f'read {len(tr_y)} training and {len(te_y)} test rows in {time.time() - t0:.1f} s',
          flush=True)
    tables = model.tables
    table_ids = {id(t) for t in tables}
    dense = [p for p in model.parameters() if id(p) not in table_ids]
    e_lr = a.embedding_learning_rate or a.learning_rate
    if a.embedding_optimizer == 'adam':
        table_opt = torch.optim.SparseAdam(tables, lr=e_lr, eps=1e-7)
    else:
        table_opt = torch.optim.Adagrad(tables, lr=e_lr, eps=1e-7,
                                        initial_accumulator_value=a.embedding_initial_accumulator)
    dense_opt = torch.optim.Adam(dense, lr=a.learning_rate, eps=1e-7)
    steps, n = 0, len(tr_y)
    sync()
    started = time.time()
    for _ in range(a.epochs):
        for i in range(0, n, a.batch):
            batch = {k: v[i:i + a.batch] for k, v in tr.items()}
            y = tr_y[i:i + a.batch]
            loss = sum(w * output_loss(out, y[:, k])
                       for k, (out, w) in enumerate(zip(model(batch), model.loss_weights)))
            table_opt.zero_grad()
            dense_opt.zero_grad()
            loss.backward()
            if a.lr_decay_steps:
                dense_opt.param_groups[0]['lr'] = \
                    a.learning_rate * a.lr_decay_rate ** (steps / a.lr_decay_steps)
            table_opt.step()
            dense_opt.step()
            steps += 1
    sync()
    train_s = time.time() - started
    print(f'final: {evaluate()} epochs={a.epochs} '
          f'steps={steps} examples_per_s={a.epochs * n / train_s:.0f} train_s={train_s:.1f}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
