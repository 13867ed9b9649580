"""The gradient approximation of Ansor's task scheduler (paper section 6.2 and appendix A),
as pure functions over latency histories, so that the formula can be checked by hand.

For task i after t_i rounds, with g_i its best latency and f the objective:

    ∂f/∂t_i ≈ ∂f/∂g_i · (α · backward_i + (1 − α) · forward_i)
    backward_i = (g_i[t_i − 1] − g_i[t_i − 1 − Δt]) / Δt        (0 until Δt + 1 rounds exist)
    forward_i  = min(g_i − g_i / t_i,  β · C_i / max_{k ∈ N(i)} V_k) − g_i

where ``history[k]`` is the best latency after round k + 1, C_i the task's flop count and
V_k = C_k / g_k the FLOPS reached by a similar task k (same operator tag and the same
int(log_1.618(C + 1)); a task alone in its group has no similarity guess). The scheduler
picks the most negative gradient (largest |∂f/∂t_i|), or with probability ε a random task.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

#: Ansor's defaults (the paper's section 6 and TVM's TaskScheduler): trust in the backward difference, in the similarity
#: guess, and the backward window in rounds
ALPHA, BETA, BACKWARD_WINDOW, EPS_GREEDY = 0.2, 2.0, 3, 0.05
#: the cost of a task without any valid program (as the measurer's MAX_COST)
NO_PROGRAM = 1e10


def similarity_group_key(tag: str, flops: float) -> str | None:
    """Tasks are similar when they share the operator ``tag`` and the flop magnitude
    int(log_1.618(flops + 1)); an empty tag groups with nothing (None)."""
    if not tag:
        return None
    return f"{tag}#{int(math.log(flops + 1) / math.log(1.618))}"


def similarity_groups(tags: Sequence[str], flops: Sequence[float]) -> list[list[int]]:
    """For each task, the indices of its similar tasks (itself included; [i] if alone)."""
    by_key: dict[str, list[int]] = {}
    keys = [similarity_group_key(t, f) for t, f in zip(tags, flops)]
    for i, k in enumerate(keys):
        if k is not None:
            by_key.setdefault(k, []).append(i)
    return [by_key[k] if k is not None else [i] for i, k in enumerate(keys)]


def backward_gradient(history: Sequence[float], window: int = BACKWARD_WINDOW) -> float:
    """(g[t−1] − g[t−1−window]) / window over the task's per-round best latencies, or 0
    while fewer than ``window + 1`` rounds exist."""
    t = len(history)
    if window < 1 or t - 1 - window < 0:
        return 0.0
    return (history[t - 1] - history[t - 1 - window]) / window


def forward_gradient(best: float, rounds: int, flops: float, group_best_flops: float | None,
                     beta: float = BETA) -> float:
    """min(g − g/t, β·C/V_max) − g: the optimistic guess of the next round's gain.
    ``group_best_flops``: the best FLOPS among the task's similar tasks (None without any)."""
    g_next = best - best / max(rounds, 1)
    if group_best_flops is not None and group_best_flops > 0:
        g_next = min(g_next, beta * flops / group_best_flops)
    return g_next - best


def group_best_flops(i: int, groups: Sequence[Sequence[int]], best_costs: Sequence[float],
                     flops: Sequence[float]) -> float | None:
    """max over the similar tasks k of task i of C_k / g_k (tasks with a valid program),
    or None when task i has no similar task (Ansor uses the guess only for groups of 2+)."""
    members = groups[i]
    if len(members) < 2:
        return None
    speeds = [flops[k] / best_costs[k] for k in members if 0 < best_costs[k] < NO_PROGRAM and flops[k] > 0]
    return max(speeds) if speeds else None


def task_gradients(best_costs: Sequence[float], histories: Sequence[Sequence[float]], rounds: Sequence[int],
                   flops: Sequence[float], groups: Sequence[Sequence[int]], objective_gradient: Sequence[float],
                   alpha: float = ALPHA, beta: float = BETA, window: int = BACKWARD_WINDOW,
                   dead: Sequence[bool] | None = None) -> np.ndarray:
    """∂f/∂t_i for every task (≤ 0 for an objective that grows with latency); 0 for dead
    tasks. ``objective_gradient``: ∂f/∂g_i at ``best_costs``."""
    n = len(best_costs)
    out = np.zeros(n, dtype=np.float64)
    for i in range(n):
        if dead is not None and dead[i]:
            continue
        back = backward_gradient(histories[i], window)
        fwd = forward_gradient(best_costs[i], rounds[i], flops[i],
                               group_best_flops(i, groups, best_costs, flops), beta)
        out[i] = objective_gradient[i] * (alpha * back + (1 - alpha) * fwd)
    return out


def choose_task(gradients: Sequence[float], alive: Sequence[bool], rng: np.random.Generator,
                eps_greedy: float = EPS_GREEDY) -> int | None:
    """argmin of the gradients (the largest |∂f/∂t_i|) among alive tasks; with probability
    ``eps_greedy``, or when all alive gradients are equal, a uniformly random alive task.
    None when no task is alive. Draws from ``rng`` exactly once per call (the ε coin), and
    once more when it picks at random."""
    idx = [i for i, a in enumerate(alive) if a]
    if not idx:
        return None
    explore = rng.random() < eps_greedy
    values = np.asarray([gradients[i] for i in idx], dtype=np.float64)
    if explore or values.max() == values.min():
        return idx[int(rng.integers(len(idx)))]
    return idx[int(np.argmin(values))]
