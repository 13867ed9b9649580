"""Objective functions of the task scheduler (the paper's Table 2), over the vector g of
task latencies (seconds per run of each task's subgraph).

``weights`` is an (m networks × n tasks) matrix: ``weights[j, i]`` is how often task i's
subgraph appears in network j, so network j's estimated latency is ``(weights @ g)[j]``.

- f1 ``WeightedSum``: Σ_j Σ_{i∈S(j)} w_ij·g_i — a pipeline running every network once;
- f2 ``LatencyRequirement``: Σ_j max(L_j(g), R_j) — no time on a network that meets R_j;
- f3 ``GeometricMeanSpeedup``: −(Π_j B_j / L_j(g))^(1/m) — speedup against references B_j;
- f4 ``PerTaskEarlyStopping``: Σ_j Σ_i w_ij·max(g_i, ES(g_i, t)) — a task whose latency did
  not improve over its last ``patience`` rounds is frozen (its term is flat);
- ``FunctionObjective``: any callable of g, differentiated numerically.

Every objective gives ``value(g, histories)`` and ``gradient(g, histories)`` = ∂f/∂g_i
(``histories[i]``: task i's best latency after each of its rounds; only f4 reads them).
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np


def _vec(g) -> np.ndarray:
    return np.asarray(g, dtype=np.float64).reshape(-1)


class Objective:
    """f(g) to minimise. ``weights``: (m, n) task counts per network (a 1-d vector is one
    network); ``names``: the networks' names, for display."""
    name = "objective"

    def __init__(self, weights, names: Sequence[str] | None = None):
        w = np.asarray(weights, dtype=np.float64)
        if w.ndim == 1:
            w = w[None, :]
        if w.ndim != 2 or (w < 0).any():
            raise ValueError(f"weights must be an (networks, tasks) matrix of counts >= 0, got shape {w.shape}")
        self.weights = w
        self.names = list(names) if names is not None else [f"network{j}" for j in range(w.shape[0])]
        if len(self.names) != w.shape[0]:
            raise ValueError(f"{len(self.names)} names for {w.shape[0]} networks")

    @property
    def n_tasks(self) -> int:
        return self.weights.shape[1]

    def _check(self, g) -> np.ndarray:
        g = _vec(g)
        if g.shape[0] != self.n_tasks:
            raise ValueError(f"{self.name}: got {g.shape[0]} task latencies, the objective has {self.n_tasks} tasks")
        return g

    def network_latencies(self, g) -> np.ndarray:
        """Estimated end-to-end latency of each network: Σ_i w_ij·g_i."""
        return self.weights @ self._check(g)

    def value(self, g, histories=None) -> float:
        raise NotImplementedError

    def gradient(self, g, histories=None) -> np.ndarray:
        raise NotImplementedError

    def __call__(self, g, histories=None) -> float:
        return self.value(g, histories)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.weights.shape[0]} networks, {self.n_tasks} tasks)"


class WeightedSum(Objective):
    """f1: the summed latency of all networks."""
    name = "f1 weighted sum of latencies"

    def value(self, g, histories=None) -> float:
        return float(self.network_latencies(g).sum())

    def gradient(self, g, histories=None) -> np.ndarray:
        self._check(g)
        return self.weights.sum(axis=0)


class LatencyRequirement(Objective):
    """f2: Σ_j max(L_j, R_j): a network that meets its requirement R_j (seconds) gets no
    more time (its tasks' gradient is 0, unless another network that shares them misses)."""
    name = "f2 latency requirements"

    def __init__(self, weights, requirements, names=None):
        super().__init__(weights, names)
        self.requirements = _vec(requirements)
        if self.requirements.shape[0] != self.weights.shape[0]:
            raise ValueError(f"{self.requirements.shape[0]} requirements for {self.weights.shape[0]} networks")

    def value(self, g, histories=None) -> float:
        return float(np.maximum(self.network_latencies(g), self.requirements).sum())

    def unmet(self, g) -> np.ndarray:
        return self.network_latencies(g) > self.requirements

    def gradient(self, g, histories=None) -> np.ndarray:
        return self.weights[self.unmet(g)].sum(axis=0) if self.unmet(g).any() else np.zeros(self.n_tasks)


class GeometricMeanSpeedup(Objective):
    """f3: −(Π_j B_j / L_j)^(1/m): maximise the geometric mean speedup against reference
    latencies B_j (seconds)."""
    name = "f3 geometric mean speedup"

    def __init__(self, weights, references, names=None):
        super().__init__(weights, names)
        self.references = _vec(references)
        if self.references.shape[0] != self.weights.shape[0] or (self.references <= 0).any():
            raise ValueError(f"need one positive reference latency per network ({self.weights.shape[0]}), "
                             f"got {list(self.references)}")

    def speedup(self, g) -> float:
        lat = self.network_latencies(g)
        return float(np.exp(np.mean(np.log(self.references) - np.log(lat))))

    def value(self, g, histories=None) -> float:
        return -self.speedup(g)

    def gradient(self, g, histories=None) -> np.ndarray:
        lat = self.network_latencies(g)
        s = self.speedup(g)
        m = self.weights.shape[0]
        return (s / (m * lat)) @ self.weights   # ∂f/∂L_j = S/(m·L_j), chained through w_ij


class PerTaskEarlyStopping(Objective):
    """f4: Σ w_ij·max(g_i, ES(g_i, t)). ES is g_i itself once task i has gone ``patience``
    rounds without improving (the term is then flat: gradient 0), and 0 before."""
    name = "f4 per-task early stopping"

    def __init__(self, weights, patience: int = 5, names=None):
        super().__init__(weights, names)
        if patience < 1:
            raise ValueError(f"patience must be >= 1 round, got {patience}")
        self.patience = patience

    def stopped(self, histories) -> np.ndarray:
        out = np.zeros(self.n_tasks, dtype=bool)
        if histories is None:
            return out
        for i, h in enumerate(histories):
            out[i] = len(h) > self.patience and h[-1] >= h[-1 - self.patience]
        return out

    def value(self, g, histories=None) -> float:
        return float(self.network_latencies(g).sum())   # max(g, ES) = g either way

    def gradient(self, g, histories=None) -> np.ndarray:
        self._check(g)
        return np.where(self.stopped(histories), 0.0, self.weights.sum(axis=0))


class FunctionObjective(Objective):
    """Any callable ``fn(g) -> float`` of the task latencies (a numpy vector), to minimise;
    ∂f/∂g_i by a backward difference with step ``rel_delta``·g_i (as Ansor's release)."""
    name = "user objective"

    def __init__(self, fn: Callable, weights, names=None, rel_delta: float = 1e-3):
        super().__init__(weights, names)
        if not callable(fn):
            raise TypeError(f"objective must be callable, got {type(fn).__name__}")
        self.fn = fn
        self.rel_delta = rel_delta
        self.name = getattr(fn, "__name__", "user objective")

    def value(self, g, histories=None) -> float:
        return float(self.fn(self._check(g)))

    def gradient(self, g, histories=None) -> np.ndarray:
        g = self._check(g)
        base = float(self.fn(g))
        out = np.zeros_like(g)
        for i in range(g.shape[0]):
            delta = max(abs(g[i]) * self.rel_delta, 1e-12)
            moved = g.copy()
            moved[i] -= delta
            out[i] = (base - float(self.fn(moved))) / delta
        return out


OBJECTIVES = {"latency": WeightedSum, "sum": WeightedSum, "f1": WeightedSum,
              "requirement": LatencyRequirement, "f2": LatencyRequirement,
              "speedup": GeometricMeanSpeedup, "f3": GeometricMeanSpeedup,
              "early_stopping": PerTaskEarlyStopping, "f4": PerTaskEarlyStopping}


def make_objective(spec, weights, names=None, *, latency_requirements=None, reference_latencies=None,
                   patience: int = 5) -> Objective:
    """An Objective from ``spec``: an Objective (returned as is), a callable of the task
    latencies, or a name: "latency" (f1, default), "requirement" (f2, needs
    ``latency_requirements``), "speedup" (f3, needs ``reference_latencies``),
    "early_stopping" (f4, ``patience`` rounds)."""
    if isinstance(spec, Objective):
        return spec
    if spec is None:
        spec = "latency"
    if callable(spec):
        return FunctionObjective(spec, weights, names)
    cls = OBJECTIVES.get(spec)
    if cls is None:
        raise ValueError(f"unknown objective {spec!r}; expected one of {sorted(OBJECTIVES)}, an Objective "
                         "or a callable of the task latencies")
    if cls is LatencyRequirement:
        if latency_requirements is None:
            raise ValueError("objective 'requirement' (f2) needs latency_requirements: one per network, seconds")
        return cls(weights, latency_requirements, names)
    if cls is GeometricMeanSpeedup:
        if reference_latencies is None:
            raise ValueError("objective 'speedup' (f3) needs reference_latencies: one per network, seconds")
        return cls(weights, reference_latencies, names)
    if cls is PerTaskEarlyStopping:
        return cls(weights, patience, names)
    return cls(weights, names)
