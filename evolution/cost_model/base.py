"""The cost model interface and the training data it learns from.

A cost model learns from measured programs and scores unmeasured ones: higher is faster.
Scores of one task are comparable with each other; across tasks only when the model says
so. A measured program is a ``MeasuredProgram(task, state, cost)`` (any 3-tuple will do):
``cost`` is seconds per run, ``None`` (or inf/nan) for a program whose build or run failed.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable, NamedTuple

import numpy as np

from ..features import N_FEATURES, FeatureExtractor, extract_features


class MeasuredProgram(NamedTuple):
    """One measurement: the task, the program (an ``ir.State``) and its cost in seconds
    (``None`` when it failed to build or run, or gave a wrong answer)."""
    task: Any
    state: Any
    cost: float | None


def task_key(task) -> tuple:
    """What makes two tasks the same for normalising throughputs: workload and target."""
    return (getattr(task, "workload_key", None) or id(task), getattr(task, "target", ""))


def valid_cost(cost) -> bool:
    return cost is not None and math.isfinite(cost) and cost > 0


def normalized_throughputs(costs, groups) -> np.ndarray:
    """Per group, the best (smallest) cost divided by each cost: 1 for the best program,
    in (0, 1] for the others, 0 for failed programs (cost None, inf, nan or <= 0)."""
    costs = list(costs)
    groups = list(groups)
    best: dict = {}
    for c, g in zip(costs, groups):
        if valid_cost(c) and (g not in best or c < best[g]):
            best[g] = c
    return np.array([best[g] / c if valid_cost(c) else 0.0 for c, g in zip(costs, groups)], dtype=np.float64)


@dataclass
class TrainingSet:
    """Measured programs with their features, as a cost model accumulates them."""
    features: list = field(default_factory=list)   # one (n_statements, N_FEATURES) matrix each
    costs: list = field(default_factory=list)
    groups: list = field(default_factory=list)     # task_key of each program

    def __len__(self) -> int:
        return len(self.costs)

    def add(self, features: Iterable[np.ndarray], costs: Iterable, groups: Iterable) -> None:
        self.features.extend(features)
        self.costs.extend(costs)
        self.groups.extend(groups)

    def labels(self) -> np.ndarray:
        return normalized_throughputs(self.costs, self.groups)

    def group_ids(self) -> np.ndarray:
        index: dict = {}
        return np.array([index.setdefault(g, len(index)) for g in self.groups], dtype=np.int64)


def pack(features: list) -> tuple[np.ndarray, np.ndarray]:
    """Stack per-program matrices into rows and the program index (pack id) of each row."""
    sizes = np.array([f.shape[0] for f in features], dtype=np.int64)
    if len(features) == 0 or sizes.sum() == 0:
        return np.zeros((0, N_FEATURES), dtype=np.float32), np.zeros(0, dtype=np.int64)
    rows = np.concatenate([f for f in features if f.shape[0]]).astype(np.float32, copy=False)
    return rows, np.repeat(np.arange(len(features)), sizes)


class CostModel:
    """Base of the cost models.

    - ``update(records)``: learn from more measured programs (``MeasuredProgram`` or any
      (task, state, cost seconds or None) triples); models retrain from scratch on
      everything seen so far.
    - ``predict(task, states) -> np.ndarray``: one score per State, higher = faster;
      ``-inf`` for a program that cannot be lowered.
    - ``predict_with_uncertainty(task, states) -> (mean, std)``: models without an
      uncertainty estimate give std 0.
    """

    def __init__(self, extractor: FeatureExtractor | None = None):
        self.extractor = extractor

    def predictor(self) -> "CostModel":
        """This model as another process needs it to score programs (no training data, no
        feature cache): what is sent to the search's worker processes."""
        return self

    @property
    def can_rank(self) -> bool:
        """Whether the scores rank programs (a model still in its warm-up scores at random:
        searching under it is only a slower way to sample at random)."""
        return True

    def features(self, task, states) -> list[np.ndarray]:
        return extract_features(task, states, self.extractor)

    def update(self, records: Iterable) -> None:
        raise NotImplementedError

    def predict(self, task, states) -> np.ndarray:
        return self.predict_features(self.features(task, states))

    def predict_features(self, features: list[np.ndarray]) -> np.ndarray:
        raise NotImplementedError

    def predict_with_uncertainty(self, task, states) -> tuple[np.ndarray, np.ndarray]:
        mean = self.predict(task, states)
        return mean, np.zeros_like(mean)


def split_records(records: Iterable) -> tuple[dict, list]:
    """Group (task, state, cost) records by task, keeping order: {id(task): (task, [states], [costs])}."""
    by_task: dict = {}
    order = []
    for rec in records:
        task, state, cost = rec[0], rec[1], rec[2]
        entry = by_task.get(id(task))
        if entry is None:
            entry = by_task[id(task)] = (task, [], [])
            order.append(id(task))
        entry[1].append(state)
        entry[2].append(cost)
    return by_task, order
