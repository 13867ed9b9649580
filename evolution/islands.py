"""Evolution split over worker processes (an island model). While the search runs nothing
is measured, so the cores the runner uses are idle and the search (pure Python, one
core) is what a tuning round waits for. Each island evolves a share of the population
under the same cost model, for the same generations, and returns its best predicted
programs as steps; the caller rebuilds the few it keeps.

What crosses the process boundary is small and plain: the task, the sketches' and the
population's steps, the set of measured program keys, and the model without its training
data (``CostModel.predictor``). Each island's randomness comes from a seed the caller
draws, so a round is deterministic for a seed and a number of islands.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

import ir

from .evolve import Evolution, Rejections
from .genes import replay


def evolve_island(task, sketch_steps, model, params, measured_keys, population_steps, out_size: int,
                  seed: int) -> tuple[list[tuple[float, tuple]], dict, dict]:
    """Run in a worker: evolve ``population_steps`` (programs as step tuples) with
    ``params`` and ``model``. Returns the ``out_size`` best predicted programs never
    measured, as (score, steps), best first, and the candidates the evolution rejected
    (counts and a message by kind, see ``Evolution.rejected``)."""
    dag = task.dag
    sketches = [ir.State.from_steps(dag, steps) for steps in sketch_steps]
    evolution = Evolution(task, model, params, sketches, np.random.default_rng(seed))
    population = [s for s in (replay(dag, steps) for steps in population_steps) if s is not None]
    best = evolution.run(population, out_size, set(measured_keys))
    rejected = evolution.rejected
    return [(score, tuple(state.steps)) for score, state in best], dict(rejected.counts), rejected.examples


def submit_islands(executor, policy, population, out_size: int, n_islands: int) -> list:
    """Futures of ``n_islands`` islands, each with every n-th program of ``population``
    and ``population // n_islands`` programs a generation (the same total as one)."""
    params = replace(policy.params, population=max(1, policy.params.population // n_islands))
    seeds = policy.rng.integers(0, 2 ** 63 - 1, size=n_islands)
    model = policy.model.predictor()
    sketch_steps = [tuple(s.steps) for s in policy.sketches]
    keys = sorted(policy.measured_keys)
    return [executor.submit(evolve_island, policy.task, sketch_steps, model, params, keys,
                            [tuple(s.steps) for s in population[i::n_islands]], out_size, int(seeds[i]))
            for i in range(n_islands)]


def merge_islands(dag, results, out_size: int, rejected: Rejections) -> list[tuple[float, object]]:
    """The ``out_size`` best (score, State) of all islands, best first, unique by program
    (the same program found by two islands counts once; steps that do not replay here
    are dropped); the islands' rejected candidates are added to ``rejected``."""
    for _, counts, examples in results:
        rejected.merge(counts, examples)
    ranked = sorted((item for island, _, _ in results for item in island), key=lambda item: -item[0])
    out: dict[str, tuple[float, object]] = {}
    for score, steps in ranked:
        if len(out) >= out_size:
            break
        state = replay(dag, steps)
        if state is not None:
            out.setdefault(state.key, (score, state))
    return list(out.values())
