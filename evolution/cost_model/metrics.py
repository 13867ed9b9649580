"""How well predicted scores order programs: the paper's metrics (section 7.5)."""
from __future__ import annotations

import numpy as np


def rmse(pred, y) -> float:
    pred, y = np.asarray(pred, float), np.asarray(y, float)
    return float(np.sqrt(np.mean((pred - y) ** 2)))


def r2(pred, y) -> float:
    """Coefficient of determination of ``pred`` as a predictor of ``y``."""
    pred, y = np.asarray(pred, float), np.asarray(y, float)
    ss_res = np.sum((y - pred) ** 2)
    ss_tot = np.sum((y - y.mean()) ** 2)
    return float(1.0 - ss_res / ss_tot) if ss_tot > 0 else 0.0


def pairwise_accuracy(pred, y, groups=None) -> float:
    """Share of program pairs (within a group, labels not tied) that ``pred`` orders as ``y``
    does (a tie in ``pred`` counts half)."""
    pred, y = np.asarray(pred, float), np.asarray(y, float)
    groups = np.zeros(len(y), int) if groups is None else np.asarray(groups)
    right = total = 0.0
    for g in np.unique(groups):
        idx = np.nonzero(groups == g)[0]
        dy = np.sign(y[idx][:, None] - y[idx][None, :])
        dp = np.sign(pred[idx][:, None] - pred[idx][None, :])
        mask = np.triu(dy != 0, 1)
        right += np.sum((dy == dp) & mask) + 0.5 * np.sum((dp == 0) & mask)
        total += np.sum(mask)
    return float(right / total) if total else 0.5


def recall_at_k(pred, y, k: int) -> float:
    """|top-k by y ∩ top-k by pred| / k (the paper's recall@k of top-k)."""
    pred, y = np.asarray(pred, float), np.asarray(y, float)
    k = min(k, len(y))
    if k == 0:
        return 0.0
    top_true = set(np.argsort(-y, kind="stable")[:k].tolist())
    top_pred = set(np.argsort(-pred, kind="stable")[:k].tolist())
    return len(top_true & top_pred) / k
