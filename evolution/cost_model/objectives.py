"""Training objectives on *programs* whose score is the sum of their statements' scores.

XGBoost fits one value per row (statement); the loss is defined per program on the sum of
its rows (the "pack"), so the gradient of a row is the gradient with respect to its
program's sum. Both objectives are plain numpy functions, tested against finite
differences, and wrapped for ``xgboost.train`` by the model.
"""
from __future__ import annotations

import numpy as np


def pack_sums(row_preds: np.ndarray, pack_ids: np.ndarray, n_programs: int) -> np.ndarray:
    """Sum of the row predictions of each program."""
    return np.bincount(pack_ids, weights=row_preds, minlength=n_programs).astype(np.float64, copy=False)


def pack_sum_gradient(row_preds, pack_ids, labels, weights) -> tuple[np.ndarray, np.ndarray]:
    """Ansor's throughput-weighted pack-sum squared error ``sum_p w_p (s_p - y_p)^2 / 2``
    with ``s_p`` the sum of program p's rows: gradient ``w_p (s_p - y_p)`` and hessian
    ``w_p``, broadcast to the rows of p."""
    sums = pack_sums(row_preds, pack_ids, len(labels))
    grad = (weights * (sums - labels))[pack_ids]
    hess = np.asarray(weights, dtype=np.float64)[pack_ids]
    return grad, hess


def pack_sum_loss(row_preds, pack_ids, labels, weights) -> float:
    sums = pack_sums(row_preds, pack_ids, len(labels))
    return float(0.5 * np.sum(weights * (sums - labels) ** 2))


def pack_sum_rmse(row_preds, pack_ids, labels) -> float:
    """Root mean squared error of the program sums (the early-stopping metric)."""
    sums = pack_sums(row_preds, pack_ids, len(labels))
    return float(np.sqrt(np.mean((sums - labels) ** 2))) if len(labels) else 0.0


def ranking_pairs(labels, groups, rng: np.random.Generator, max_pairs_per_program: int = 256,
                  top_weight: float = 0.0):
    """(better, worse, weight) of program pairs within each group, ties left out: every
    pair when a group is small, else ``max_pairs_per_program`` random opponents per
    program. A pair weighs 1 / (pairs per program in its group), so that a program's
    hessian stays below 1 as with the pack-sum objective, and XGBoost's L2 term regularises
    both alike (unweighted, a program in 1000 pairs fits its own leaf at once).

    ``top_weight`` > 0 moves a group's weight onto the pairs among its fast programs: a
    pair's weight is multiplied by the label of its better program to that power (labels
    are throughputs over the group's best), then the group's weights are rescaled to their
    total before. Why: a search keeps only the programs a model ranks best, so what decides
    is the order among fast programs; uniform pairs spend most of the loss on telling
    fast from slow, which the model gets right early."""
    labels = np.asarray(labels)
    groups = np.asarray(groups)
    better, worse, weight = [], [], []
    for g in np.unique(groups):
        idx = np.nonzero(groups == g)[0]
        n = len(idx)
        if n < 2:
            continue
        if n <= max_pairs_per_program * 2:
            a, b = np.triu_indices(n, 1)
        else:
            a = np.repeat(np.arange(n), max_pairs_per_program)
            b = rng.integers(0, n, size=len(a))
        a, b = idx[a], idx[b]
        keep = labels[a] != labels[b]
        a, b = a[keep], b[keep]
        if len(a) == 0:
            continue
        swap = labels[a] < labels[b]
        better.append(np.where(swap, b, a))
        worse.append(np.where(swap, a, b))
        w = np.full(len(a), n / (2.0 * len(a)))
        if top_weight:
            top = w * labels[better[-1]] ** top_weight
            w = top * (w.sum() / top.sum()) if top.sum() > 0 else w
        weight.append(w)
    if not better:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0)
    return np.concatenate(better), np.concatenate(worse), np.concatenate(weight)


def _sigmoid(x):
    return 0.5 * (1.0 + np.tanh(0.5 * x))


def rank_gradient(row_preds, pack_ids, n_programs: int, better, worse, weight=None) -> tuple[np.ndarray, np.ndarray]:
    """AutoTVM's pairwise rank loss ``sum w log(1 + exp(-(s_better - s_worse)))`` on program
    sums: per program, the gradient and the diagonal of the hessian, broadcast to rows."""
    sums = pack_sums(row_preds, pack_ids, n_programs)
    d = sums[better] - sums[worse]
    p = _sigmoid(-d)                       # = 1 - sigmoid(d): d loss / d d = -p
    h = p * (1.0 - p)
    if weight is not None:
        p, h = p * weight, h * weight
    grad = np.bincount(worse, weights=p, minlength=n_programs) - np.bincount(better, weights=p, minlength=n_programs)
    hess = np.bincount(worse, weights=h, minlength=n_programs) + np.bincount(better, weights=h, minlength=n_programs)
    hess = np.maximum(hess, 1e-6)
    return grad[pack_ids], hess[pack_ids]


def rank_loss(row_preds, pack_ids, n_programs: int, better, worse, weight=None) -> float:
    sums = pack_sums(row_preds, pack_ids, n_programs)
    d = sums[better] - sums[worse]
    losses = np.logaddexp(0.0, -d)
    return float(np.sum(losses if weight is None else weight * losses))
