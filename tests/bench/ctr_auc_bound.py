#!/usr/bin/python3
"""How close any model can come to criteo_synth's planted AUC.

The planted model gives each categorical id a weight w ~ uniform with
standard deviation 0.2 (docs/criteo.md). A learner sees an id n times in
training; the best it can do with them is the posterior mean of w: the
id's maximum-likelihood estimate (Gaussian, variance 1 / (n p (1 - p)),
p ~ the click rate) shrunk towards the prior. This script draws ids as the
generator does (rank r with weight (r + 1)^-zipf, counts Poisson with the
training rows' mean), gives every id that estimate, and prints the AUC of
the planted logits and of the estimated ones on the same drawn labels. It
models the per-id weights only (not the factorization-machine pairs nor
the integers), so the real bound is lower still.

A learner that does not know which ids are signal (--signal_ranks) pays
for the rest too: --tail_std gives their estimates that much noise, and
--blind estimates every id as a signal id is (its weight 0 for the rest,
shrunk by its count alike): a learner that shrinks all ids the same way,
not knowing which carry weights.

Usage: tests/bench/ctr_auc_bound.py [--ids_per_feature=40000] [--zipf=1.05]
       [--signal_ranks=0] [--train_rows=4500000] [--tail_std=0] [--seed=1]
       [--factors] [--blind]
"""
import argparse
import sys

import numpy as np

WIDE_STD = 0.2       # model/criteo_synth.cc kWideStd
FM_STD = 0.13        # kFmStd
FM_DIM = 4           # kSynthFmDim
FEATURES = 26
CLICK_RATE = 0.26    # about the generator's
TEST_ROWS = 300000


def auc(scores, labels):
    order = np.argsort(scores, kind="stable")
    ranks = np.empty(len(scores))
    ranks[order] = np.arange(1, len(scores) + 1)
    pos = labels.sum()
    neg = len(labels) - pos
    return (ranks[labels == 1].sum() - pos * (pos + 1) / 2) / (pos * neg)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ids_per_feature", type=int, default=40000)
    ap.add_argument("--zipf", type=float, default=1.05)
    ap.add_argument("--signal_ranks", type=int, default=0)
    ap.add_argument("--train_rows", type=float, default=4.5e6)
    ap.add_argument("--tail_std", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--factors", action="store_true")
    ap.add_argument("--blind", action="store_true")
    a = ap.parse_args()
    if a.ids_per_feature < 1 or not 0 <= a.signal_ranks <= a.ids_per_feature:
        print(f"error: --signal_ranks={a.signal_ranks}: must be in [0, --ids_per_feature]",
              file=sys.stderr)
        return 2
    rng = np.random.default_rng(a.seed)
    p = np.arange(1, a.ids_per_feature + 1, dtype=float) ** -a.zipf
    p /= p.sum()
    signal = a.signal_ranks or a.ids_per_feature
    planted = np.full(TEST_ROWS, -1.2)
    learnt = np.full(TEST_ROWS, -1.2)
    fm_planted = np.zeros((FEATURES, TEST_ROWS, FM_DIM))
    fm_learnt = np.zeros((FEATURES, TEST_ROWS, FM_DIM))
    # The variance of the other fields' sum, per component.
    others = (FEATURES - 1) * p[:signal].sum() * FM_STD ** 2
    rate = CLICK_RATE * (1 - CLICK_RATE)
    for f in range(FEATURES):
        w = rng.uniform(-1, 1, a.ids_per_feature) * WIDE_STD * np.sqrt(3)
        w[signal:] = 0
        n = rng.poisson(a.train_rows * p)
        noise = 1 / (np.maximum(n, 1e-9) * rate)
        shrink = WIDE_STD ** 2 / (WIDE_STD ** 2 + noise)
        estimate = shrink * (w + rng.normal(0, 1, a.ids_per_feature) * np.sqrt(noise))
        if not a.blind:
            estimate[signal:] = rng.normal(0, 1, a.ids_per_feature - signal) * a.tail_std
        ids = rng.choice(a.ids_per_feature, TEST_ROWS, p=p)
        planted += w[ids]
        learnt += estimate[ids]
        if a.factors:
            v = rng.uniform(-1, 1, (a.ids_per_feature, FM_DIM)) * FM_STD * np.sqrt(3)
            v[signal:] = 0
            fm_noise = 1 / (np.maximum(n, 1e-9) * rate * others)
            fm_shrink = FM_STD ** 2 / (FM_STD ** 2 + fm_noise)
            v_hat = fm_shrink[:, None] * (
                v + rng.normal(0, 1, v.shape) * np.sqrt(fm_noise)[:, None])
            if not a.blind:
                v_hat[signal:] = rng.normal(0, 1, (a.ids_per_feature - signal, FM_DIM)) * a.tail_std
            fm_planted[f] = v[ids]
            fm_learnt[f] = v_hat[ids]
    if a.factors:  # sum over f < g of <v_f, v_g>
        for fm, logits in ((fm_planted, planted), (fm_learnt, learnt)):
            logits += 0.5 * ((fm.sum(0) ** 2).sum(-1) - (fm ** 2).sum((0, 2)))
    labels = (rng.random(TEST_ROWS) < 1 / (1 + np.exp(-planted))).astype(int)
    best, got = auc(planted, labels), auc(learnt, labels)
    print(f"planted_auc={best:.4f} best_learnt_auc={got:.4f} gap={best - got:.4f} "
          f"(ids_per_feature={a.ids_per_feature} zipf={a.zipf} signal_ranks={a.signal_ranks} "
          f"train_rows={a.train_rows:.0f} tail_std={a.tail_std} factors={a.factors} "
          f"blind={a.blind})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
