"""Evolution of one task's programs under a cost model (Ansor 5.1): every generation scores
the population, keeps the best programs never measured, and breeds the next generation by
mutation and crossover of parents drawn in proportion to their predicted fitness.

One ``Evolution`` runs in the search policy's process or in an island's worker
(``islands``); both use this code and the generator they are given.
"""
from __future__ import annotations

import collections
import contextlib
import gc
import heapq
import threading

import numpy as np

import ir
from sketch_rules import search_space

from .crossover import Crossover
from .draw import Draw
from .genes import shared_replays, sketch_length
from .mutation import MutationContext, draw_mutation, mutations_for


class Rejections:
    """Candidates whose making raised (a bug to fix, never a reason to end a search):
    ``counts`` by kind ("mutation tile_size: KeyError"), the first message of each kind."""

    def __init__(self):
        self.counts: collections.Counter = collections.Counter()
        self.examples: dict[str, str] = {}

    def add(self, what: str, err: BaseException) -> None:
        kind = f"{what}: {type(err).__name__}"
        self.counts[kind] += 1
        self.examples.setdefault(kind, str(err)[:200])

    def merge(self, counts, examples) -> None:
        self.counts.update(counts)
        for kind, msg in examples.items():
            self.examples.setdefault(kind, msg)

    def describe(self, counts) -> str:
        """``counts`` (of this log's kinds) in words, with an example message each."""
        return "; ".join(f"{n}x {kind} (e.g. {self.examples.get(kind, '')!r})" for kind, n in counts.items())


@contextlib.contextmanager
def fewer_gc_passes(allocations: int = 10_000):
    """Inside, the cyclic collector runs only its youngest generation, every ``allocations``
    net allocations instead of Python's 700, and does not rescan what existed before:
    evolution makes millions of short-lived expression nodes beside a large heap of replay
    memos that grows all round, and collecting the older generations over it cost a tenth
    to a fifth of a round. The heap from before is frozen (``gc.freeze``) while inside
    unless something else froze objects already; the round's few cyclic leftovers (frames
    of rejected candidates) wait for the first full pass after it. Nested or overlapping
    uses (threads) share the outermost's settings, restored when the last one leaves."""
    global _gc_saved
    with _gc_lock:
        if _gc_saved is None:
            threshold = gc.get_threshold()
            freeze = bool(threshold[0]) and gc.get_freeze_count() == 0  # threshold 0: collection is off
            if threshold[0]:
                gc.set_threshold(max(allocations, threshold[0]), max(threshold[1], 1000), max(threshold[2], 1000))
            if freeze:
                gc.freeze()
            _gc_saved = [threshold, freeze, 0]
        _gc_saved[2] += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_saved[2] -= 1
            if not _gc_saved[2]:
                threshold, freeze, _ = _gc_saved
                if freeze:
                    gc.unfreeze()
                gc.set_threshold(*threshold)
                _gc_saved = None


#: (thresholds before, whether it froze the heap, uses inside) while ``fewer_gc_passes`` is in use
_gc_saved: list | None = None
_gc_lock = threading.Lock()


class Evolution:
    """Evolves populations of ``task``'s programs sampled from ``sketches``, scored by
    ``model``, with ``params`` (a ``SearchParams``) and the generator ``rng``.

    Making a child may fail in ways nobody foresaw (a mutation meeting a stage structure it
    does not know): such a child is rejected and counted in ``rejected`` (``Rejections``),
    and the evolution goes on."""

    def __init__(self, task: ir.SearchTask, model, params, sketches, rng: np.random.Generator):
        self.task = task
        self.model = model
        self.params = params
        self.sketches = list(sketches)
        self.rng = rng
        self.crossover = Crossover(self.sketches)
        self.rejected = Rejections()
        self.mutations = mutations_for(task)
        self.auto_unroll_choices = search_space(task).auto_unroll_choices

    def run(self, population: list[ir.State], out_size: int, measured_keys) -> list[tuple[float, ir.State]]:
        """Evolve ``population`` for ``params.generations`` generations; the ``out_size`` best
        predicted programs seen whose key is not in ``measured_keys``, as (score, State),
        best first. A program (a step list) is built and scored once a round, however often
        the round makes it (``genes.shared_replays``)."""
        with fewer_gc_passes(), shared_replays():
            return self._run(population, out_size, measured_keys)

    def _run(self, population, out_size: int, measured_keys) -> list[tuple[float, ir.State]]:
        p = self.params
        best: dict[str, tuple[float, ir.State]] = {}
        known: dict[tuple, float] = {}  # the round's scores by step list
        max_innermost = self.task.hardware.max_innermost_split_factor
        for generation in range(p.generations + 1):
            if not population:
                break
            scores = self._scores(population, known)
            for state, score in zip(population, scores):
                key = state.key
                if key not in measured_keys and np.isfinite(score) and (key not in best or best[key][0] < score):
                    best[key] = (float(score), state)
            if len(best) > 4 * out_size:
                best = dict(heapq.nlargest(2 * out_size, best.items(), key=lambda kv: kv[1][0]))
            if generation == p.generations:
                break
            population = self._next_generation(population, scores, max_innermost)
        return sorted(best.values(), key=lambda v: -v[0])[:out_size]

    def _scores(self, population: list[ir.State], known: dict) -> np.ndarray:
        """The predicted scores of ``population``; only programs whose step lists ``known``
        has no score for yet are scored (and added to it)."""
        fresh: dict[tuple, ir.State] = {}
        for state in population:
            if state.steps not in known:
                fresh.setdefault(state.steps, state)
        if fresh:
            scores = np.asarray(self.model.predict(self.task, list(fresh.values())), dtype=np.float64)
            known.update(zip(fresh, scores.tolist()))
        return np.array([known[state.steps] for state in population], dtype=np.float64)

    def _next_generation(self, population, scores, max_innermost) -> list[ir.State]:
        p = self.params
        fitness = np.where(np.isfinite(scores), scores, 0.0)
        fitness = np.maximum(fitness - min(0.0, float(fitness.min())), 0.0)
        probs = fitness / fitness.sum() if fitness.sum() > 0 else np.full(len(population), 1.0 / len(population))
        by_sketch: dict[int, list[int]] = {}
        sketch_of = [sketch_length(s, self.sketches) for s in population]
        for i, k in enumerate(sketch_of):
            if k is not None:
                by_sketch.setdefault(k[0], []).append(i)
        draw_parent = Draw(probs)
        draw_mate = {k: Draw(probs[mates] / probs[mates].sum()) for k, mates in by_sketch.items()
                     if probs[mates].sum() > 0}
        out: dict[str, ir.State] = {}
        tries = 0
        target = p.population
        while len(out) < target and tries < 3 * target:
            tries += 1
            i = draw_parent(self.rng)
            if self.rng.random() < p.mutation_prob:
                child = self._mutate(population[i], sketch_of[i], max_innermost)
            else:
                k = sketch_of[i]
                mates = by_sketch.get(k[0], []) if k is not None else []
                if len(mates) < 2:
                    continue
                j = mates[draw_mate[k[0]](self.rng) if k[0] in draw_mate else int(self.rng.choice(len(mates)))]
                child = self._guarded("crossover", self.crossover, population[i], population[j], self.rng)
            if child is not None and self.runs_on_target(child):
                out.setdefault(child.key, child)
        return list(out.values())

    def _mutate(self, state: ir.State, sketch, max_innermost: int) -> ir.State | None:
        """One mutation of ``state`` (sampled from ``sketch``, its ``sketch_length``), drawn
        among the task's search space's mutations."""
        p = self.params
        mutation = draw_mutation(self.rng, self.mutations, p.mutation_weights)
        ctx = MutationContext(self.auto_unroll_choices, p.random_walk_q, max_innermost,
                              sketch[1] if sketch is not None else len(state.steps))
        return self._guarded(f"mutation {mutation.name}", mutation.apply, state, self.rng, ctx)

    def runs_on_target(self, state: ir.State) -> bool:
        """False for a program the task's device cannot run (a GPU block's limits: a
        crossover of two valid parents can break them)."""
        return self.task.target.backend.limits_violation(state, self.task.hardware) is None

    def _guarded(self, what: str, make, *args):
        """``make(*args)`` (a State with its key computed, or None), or None (counted in
        ``rejected``) if it raises."""
        try:
            child = make(*args)
            if child is not None:
                child.key  # printing the program settles its regions: that may fail too
            return child
        except Exception as err:  # noqa: BLE001 - one candidate's failure must not end the search
            self.rejected.add(what, err)
            return None
