#!/usr/bin/python3
"""The peer for the sparse-embeddings AUC benchmark: deploy/models/ctr_deepfm.json's
DeepFM trained in PyTorch (CPU) on the same criteo_synth folder, with the
same optimizers, batch and epochs as the cluster's run, and its test AUC
printed beside the planted model's.

    /usr/bin/python3 tests/bench/ctr_torch_deepfm.py --data=DIR [--cache=FILE.npz]
        [--form=paper|weighted] [--embedding_learning_rate=0.1]
        [--initial_accumulator=0.01] [--embedding_lr_decay_rate=0.5]
        [--embedding_lr_decay_steps=0] [--learning_rate=0.001] [--batch=256]
        [--epochs=1] [--factors=16] [--init_std=0.01] [--rows=0] [--threads=2]

The cluster's flags it stands for: --optimizer=adam --learning_rate=L
--embedding_optimizer=adagrad --embedding_learning_rate=E
--embedding_initial_accumulator=A --embedding_lr_decay_rate=R
--embedding_lr_decay_steps=S --batch_size=B --epochs=N (the tables' rate at
step t is E * R^(t / S), S = 0 constant; the dense Adam's rate is constant
here, where the cluster's decays by --lr_decay_*: the dense part barely
moves the AUC, 0.001 and 0.003 give the same).

--form=paper is ctr_deepfm.json (the logit the sum of the first-order
weights, the pairs' half-sum and the deep tower's Dense); --form=weighted
the model before 2026-11-28 (one output Dense over the dense features, each
field's first-order weight, each dimension's pairs and the tower).

Ids are numbered per column (no hashing into buckets: the cluster's
16,777,216 buckets hold the data's 1.04 M ids with few collisions). The
examples are read in the files' order, as the cluster's sync run sums its
chunks. Reading the text takes minutes: --cache keeps the arrays.

With the folder's planted.json, the first 100,000 test rows' planted logit
is computed here from the generator's hash (docs/criteo.md, "The planted
model") and the trained model's parts are compared with it: the
correlation of its first-order and pairs terms with the planted ones, and
the AUC with its pairs term replaced by the planted interactions.

Needs python3-torch (Debian) and numpy. Exit 2 on bad flags.
"""
import argparse
import json
import math
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ctr_auc_bound import auc  # noqa: E402  (the same rank AUC)

FIELDS = 26
INTEGERS = 13


def read_split(path, maps):
    """Criteo text -> (ids [n, 26] int64, 0 = missing, numbered per column;
    dense [n, 13] = log(1 + max(x, 0)), empty 0; labels [n])."""
    ids, dense, labels = [], [], []
    with open(path) as f:
        for line in f:
            t = line.rstrip('\n').split('\t')
            labels.append(float(t[0]))
            dense.append([float(v) if v else 0.0 for v in t[1:1 + INTEGERS]])
            row = []
            for c in range(FIELDS):
                v = t[1 + INTEGERS + c]
                row.append(maps[c].setdefault(v, len(maps[c]) + 1) if v else 0)
            ids.append(row)
    d = np.log1p(np.maximum(np.array(dense, dtype=np.float32), 0))
    return np.array(ids, dtype=np.int64), d, np.array(labels, dtype=np.float32)


def load(data, cache):
    if cache and os.path.exists(cache):
        return dict(np.load(cache))
    maps = [dict() for _ in range(FIELDS)]
    tr = read_split(os.path.join(data, 'train.txt'), maps)
    te = read_split(os.path.join(data, 'test.txt'), maps)
    z = dict(tr_ids=tr[0], tr_dense=tr[1], tr_y=tr[2], te_ids=te[0], te_dense=te[1], te_y=te[2],
             sizes=np.array([len(m) + 1 for m in maps]))
    if cache:
        np.savez(cache, **z)
    return z


# The generator's planted model (model/criteo_synth.cc), for diagnostics.
M64 = (1 << 64) - 1
GOLDEN = 0x9e3779b97f4a7c15


def mix64(z):
    z &= M64
    z = ((z ^ (z >> 30)) * 0xbf58476d1ce4e5b9) & M64
    z = ((z ^ (z >> 27)) * 0x94d049bb133111eb) & M64
    return z ^ (z >> 31)


def symmetric(h):  # uniform in [-1, 1)
    return (h >> 11) * 2.0 ** -52 - 1.0


def unscramble(x):  # the inverse of the generator's 32-bit id bijection
    def inv(a):
        y = a
        for _ in range(5):
            y = (y * (2 - a * y)) & 0xffffffff
        return y
    x ^= x >> 16
    x = (x * inv(0x846ca68b)) & 0xffffffff
    x ^= x >> 16
    x = (x * inv(0x7feb352d)) & 0xffffffff
    return x ^ (x >> 16)


def planted_parts(data, rows):
    """(first-order, interactions, integers) of the planted logit for the
    first `rows` test rows, or None without planted.json."""
    path = os.path.join(data, 'planted.json')
    if not os.path.exists(path):
        return None
    pl = json.load(open(path))
    m = pl['model']
    seed_mix = mix64(pl['seed'] + GOLDEN)
    signal = pl['flags'].get('signal_ranks', 0)
    wide_std, fm_std, dim = m['wide_std'], m['fm_std'], m['fm_dim']
    u, c = m['integer_weights'], m['integer_centers']
    out = []
    with open(os.path.join(data, 'test.txt')) as f:
        for i, line in enumerate(f):
            if i >= rows:
                break
            t = line.rstrip('\n').split('\t')
            wide, fm, ints, hashes = 0.0, 0.0, 0.0, []
            for col in range(FIELDS):
                s = t[1 + INTEGERS + col]
                if not s:
                    continue
                idv = int(s, 16) + 1
                if signal:
                    x = unscramble((idv - 1) & 0xffffffff)
                    if x >> 27 != col or x % (1 << 27) >= signal:
                        continue
                h = mix64(mix64(idv ^ (col << 56)) ^ seed_mix)
                hashes.append(h)
                wide += wide_std * math.sqrt(3) * symmetric(h)
            for d in range(1, dim + 1):
                vs = [fm_std * math.sqrt(3) * symmetric(mix64(h + d * GOLDEN)) for h in hashes]
                fm += 0.5 * (sum(vs) ** 2 - sum(v * v for v in vs))
            for j in range(INTEGERS):
                s = t[1 + j]
                if s:
                    ints += u[j] * (math.log1p(max(int(s), 0)) - c[j])
            out.append((wide, fm, ints))
    return np.array(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--data', required=True)
    ap.add_argument('--cache', default='')
    ap.add_argument('--form', default='paper')
    ap.add_argument('--embedding_learning_rate', type=float, default=0.1)
    ap.add_argument('--initial_accumulator', type=float, default=0.01)
    ap.add_argument('--embedding_lr_decay_rate', type=float, default=0.5)
    ap.add_argument('--embedding_lr_decay_steps', type=int, default=0)
    ap.add_argument('--learning_rate', type=float, default=0.001)
    ap.add_argument('--batch', type=int, default=256)
    ap.add_argument('--epochs', type=int, default=1)
    ap.add_argument('--factors', type=int, default=16)
    ap.add_argument('--init_std', type=float, default=0.01)
    ap.add_argument('--rows', type=int, default=0)
    ap.add_argument('--threads', type=int, default=2)
    a = ap.parse_args()
    bad = None
    if a.form not in ('paper', 'weighted'):
        bad = f'--form={a.form}: must be paper or weighted'
    elif not os.path.exists(os.path.join(a.data, 'train.txt')):
        bad = f'--data={a.data}: no train.txt there'
    elif a.batch < 1 or a.epochs < 1 or a.factors < 1 or a.rows < 0 or a.threads < 1:
        bad = '--batch, --epochs, --factors, --threads must be >= 1, --rows >= 0'
    elif not (a.embedding_learning_rate > 0 and a.learning_rate > 0 and a.init_std > 0 and
              a.initial_accumulator >= 0):
        bad = 'learning rates and --init_std must be > 0, --initial_accumulator >= 0'
    elif not (0 < a.embedding_lr_decay_rate <= 1) or a.embedding_lr_decay_steps < 0:
        bad = (f'--embedding_lr_decay_rate={a.embedding_lr_decay_rate} must be in (0, 1], '
               f'--embedding_lr_decay_steps={a.embedding_lr_decay_steps} >= 0')
    if bad:
        print(f'error: {bad}', file=sys.stderr)
        return 2
    import torch
    import torch.nn as nn
    torch.manual_seed(1)
    torch.set_num_threads(a.threads)
    t0 = time.time()
    z = load(a.data, a.cache)
    offsets = np.concatenate([[0], np.cumsum(z['sizes'])[:-1]])
    tr_ids = torch.from_numpy(z['tr_ids'] + offsets)
    te_ids = torch.from_numpy(z['te_ids'] + offsets)
    tr_d, te_d = torch.from_numpy(z['tr_dense']), torch.from_numpy(z['te_dense'])
    tr_y, te_y = torch.from_numpy(z['tr_y']), z['te_y']
    if a.rows:
        tr_ids, tr_d, tr_y = tr_ids[:a.rows], tr_d[:a.rows], tr_y[:a.rows]
    rows, K = int(z['sizes'].sum()), a.factors
    print(f'read {len(tr_ids)} training and {len(te_ids)} test rows, {rows} ids, '
          f'in {time.time() - t0:.0f} s', flush=True)

    class DeepFm(nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = nn.Embedding(rows, 1, sparse=True)
            nn.init.zeros_(self.linear.weight)
            self.emb = nn.Embedding(rows, K, sparse=True)
            nn.init.normal_(self.emb.weight, 0, a.init_std)
            self.h1 = nn.Linear(INTEGERS + FIELDS * K, 128)
            self.h2 = nn.Linear(128, 64)
            n_out = INTEGERS + 64 + (FIELDS + K if a.form == 'weighted' else 0)
            self.out = nn.Linear(n_out, 1)
            for layer in (self.h1, self.h2, self.out):  # Keras's glorot_uniform, zero bias
                nn.init.xavier_uniform_(layer.weight)
                nn.init.zeros_(layer.bias)

        def parts(self, ids, d):
            e = self.emb(ids)
            w = self.linear(ids).squeeze(-1)
            s = e.sum(1)
            pairs = s * s - (e * e).sum(1)  # twice the FM term, per dimension
            deep = torch.relu(self.h2(torch.relu(self.h1(torch.cat([d, e.flatten(1)], 1)))))
            return w, pairs, deep

        def forward(self, ids, d):
            w, pairs, deep = self.parts(ids, d)
            if a.form == 'weighted':
                return self.out(torch.cat([d, w, pairs, deep], 1)).squeeze(-1)
            return self.out(torch.cat([d, deep], 1)).squeeze(-1) + w.sum(1) + 0.5 * pairs.sum(1)

    model = DeepFm()
    tables = [model.linear.weight, model.emb.weight]
    dense = [p for n, p in model.named_parameters() if not n.startswith(('linear', 'emb'))]
    table_opt = torch.optim.Adagrad(tables, lr=a.embedding_learning_rate,
                                    initial_accumulator_value=a.initial_accumulator, eps=1e-7)
    dense_opt = torch.optim.Adam(dense, lr=a.learning_rate, eps=1e-7)
    loss_fn = nn.BCEWithLogitsLoss()

    def evaluate():
        with torch.no_grad():
            s = torch.cat([model(te_ids[i:i + 65536], te_d[i:i + 65536])
                           for i in range(0, len(te_ids), 65536)]).numpy().astype(np.float64)
        p = 1 / (1 + np.exp(-s))
        ll = -np.mean(te_y * np.log(p + 1e-12) + (1 - te_y) * np.log(1 - p + 1e-12))
        return auc(s, te_y), ll

    steps = 0
    for epoch in range(a.epochs):
        for i in range(0, len(tr_ids), a.batch):
            loss = loss_fn(model(tr_ids[i:i + a.batch], tr_d[i:i + a.batch]),
                           tr_y[i:i + a.batch])
            table_opt.zero_grad()
            dense_opt.zero_grad()
            loss.backward()
            if a.embedding_lr_decay_steps:
                table_opt.param_groups[0]['lr'] = a.embedding_learning_rate * \
                    a.embedding_lr_decay_rate ** (steps / a.embedding_lr_decay_steps)
            table_opt.step()
            dense_opt.step()
            steps += 1
            if steps % 5000 == 0:
                print(f'step {steps}: test auc {evaluate()[0]:.4f} ({time.time() - t0:.0f} s)',
                      flush=True)
    test_auc, test_loss = evaluate()
    planted = json.load(open(os.path.join(a.data, 'planted.json')))['planted_auc'] \
        if os.path.exists(os.path.join(a.data, 'planted.json')) else float('nan')
    print(f'final: form={a.form} epochs={a.epochs} steps={steps} '
          f'embedding_learning_rate={a.embedding_learning_rate} '
          f'decay={a.embedding_lr_decay_rate}/{a.embedding_lr_decay_steps} test_auc={test_auc:.4f} '
          f'test_loss={test_loss:.4f} planted_auc={planted:.4f} '
          f'below_planted={planted - test_auc:.4f} wall_s={time.time() - t0:.0f}')
    parts = planted_parts(a.data, 100000)
    if parts is None:
        return 0
    n = len(parts)
    with torch.no_grad():
        w, pairs, deep = model.parts(te_ids[:n], te_d[:n])
        total = model(te_ids[:n], te_d[:n]).numpy()
        if a.form == 'weighted':
            ow = model.out.weight[0]
            first = (w * ow[INTEGERS:INTEGERS + FIELDS]).sum(1).numpy()
            second = (pairs * ow[INTEGERS + FIELDS:INTEGERS + FIELDS + K]).sum(1).numpy()
        else:
            first, second = w.sum(1).numpy(), 0.5 * pairs.sum(1).numpy()
    y = te_y[:n]
    corr = lambda u, v: float(np.corrcoef(u, v)[0, 1])
    print(f'first {n} test rows: correlation with the planted parts: first-order '
          f'{corr(first, parts[:, 0]):.3f}, pairs {corr(second, parts[:, 1]):.3f}, '
          f'logit {corr(total, parts.sum(1)):.3f}; AUC planted {auc(parts.sum(1), y):.4f}, '
          f'trained {auc(total, y):.4f}, trained with the planted pairs '
          f'{auc(total - second + parts[:, 1], y):.4f}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
