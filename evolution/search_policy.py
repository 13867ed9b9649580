"""The search policy of one task (Ansor 5): each round, sample fresh programs, add the best
measured ones, evolve them under the cost model (``evolve.Evolution``, here or in islands),
and pick the batch to measure (best predicted, plus an epsilon share of random programs
for exploration).

Measurement is not done here (the dependency rule keeps it in ``autosched``): the caller
asks ``next_batch`` for programs, measures them, and reports with ``update``.
"""
from __future__ import annotations

import collections
import heapq
import math
import warnings
from dataclasses import dataclass

import numpy as np

import ir
import sketch_rules

from . import islands
from .evolve import Evolution, fewer_gc_passes
from .mutation import mutation_names


@dataclass
class SearchParams:
    """Ansor's defaults (TVM auto_scheduler's SketchPolicy) and the options from the other papers."""
    population: int = 2048
    generations: int = 4
    mutation_prob: float = 0.85
    eps_greedy: float = 0.05
    #: unique valid programs to sample before evolving (halved after 5 batches without progress)
    init_min_population: int = 50
    #: share of the population seeded with the best measured programs
    init_use_measured_ratio: float = 0.2
    retry_on_empty: int = 10
    #: {mutation name: weight} instead of the weights of the task's search space's mutations
    #: (``evolution.mutation``; None: theirs, Ansor's)
    mutation_weights: dict | None = None
    #: OpEvo: tile-size mutation as a q-random walk over factorisations (None = Ansor's)
    random_walk_q: float | None = None
    #: AdaTune: the exploration share from the model's uncertainty instead of eps_greedy
    contextual_eps: bool = False
    #: islands evolving in parallel processes when the policy has an executor (None: one
    #: per core for populations of 512 and more, else 1); see ``evolution.islands``
    islands: int | None = None

    def __post_init__(self):
        if self.mutation_weights is not None:   # (checked here, not at the first draw of a tuning)
            unknown = set(self.mutation_weights) - mutation_names()
            if unknown:
                raise ValueError(f"unknown mutation {sorted(unknown)[0]!r}; expected some of {sorted(mutation_names())}")
            if not all(w >= 0 for w in self.mutation_weights.values()) or not sum(self.mutation_weights.values()) > 0:
                raise ValueError(f"mutation weights must be >= 0 with a positive sum, got {self.mutation_weights}")

    def n_islands(self, num_cores: int) -> int:
        if self.islands is not None:
            return max(1, self.islands)
        return max(1, num_cores) if self.population >= 512 else 1


#: at most this many programs of one batch with exactly the same predicted score: the model
#: took them down the same leaf of every tree, so it cannot tell them apart (e.g. variants
#: that differ only in an unroll pragma that unrolls nothing), and measuring more of them
#: teaches it nothing; without this, one round of a reduction measured 64 copies of one loop
MAX_TWINS = 2
#: candidates the evolution returns per program of a batch, so that twins can be passed over
CANDIDATES_PER_PICK = 4
#: a task's first round, when the model ranks its programs before any of them is measured
#: (a base model, or what it learnt of other tasks), measures at most this many, and at most
#: half the batch: the model learns from them before it picks the rest. What a model learnt
#: elsewhere can be wrong about a new task (on the programs of 19 tunings of unseen workloads
#: the previous base model ranked at pairwise accuracy 0.46, its top pick at 0.43 of the best;
#: after 16 of the task's own measurements 0.67 and 0.69; the shipped one: top pick 0.63
#: alone, 0.68 after them; bench/base_model_picks.py)
PROBE_BATCH = 16


def pick_distinguishable(scored: list[tuple[float, ir.State]], n: int,
                         max_twins: int = MAX_TWINS) -> dict[str, ir.State]:
    """Up to ``n`` programs of ``scored`` ((score, state), best first), in order, at most
    ``max_twins`` of any one score; topped up in order if that leaves fewer than ``n``."""
    batch: dict[str, ir.State] = {}
    twins: collections.Counter = collections.Counter()
    for score, state in scored:
        if len(batch) >= n:
            return batch
        if twins[score] < max_twins and state.key not in batch:
            batch[state.key] = state
            twins[score] += 1
    for _, state in scored:
        if len(batch) >= n:
            break
        batch.setdefault(state.key, state)
    return batch


class SketchPolicy:
    """Evolutionary search for one task. ``next_batch(n)`` proposes programs never measured
    before; ``update(states, costs)`` records measurements and retrains the cost model;
    ``remember(states, costs)`` takes in programs measured before (a resumed log) and
    leaves the training to the caller, who trains once for many tasks.
    ``executor`` (a ``concurrent.futures.Executor`` of processes): evolve in
    ``params.islands`` islands there (see ``evolution.islands``). ``add_initial(states)``:
    programs from elsewhere (another task's, adapted by ``evolution.transfer``) that join
    the initial population of every round until measured."""

    def __init__(self, task: ir.SearchTask, cost_model, params: SearchParams | None = None, seed: int = 0,
                 sketches=None, custom_rules=None, executor=None):
        self.task = task
        self.executor = executor
        self.params = params or SearchParams()
        self.rng = np.random.default_rng(seed)
        self.sketches = list(sketches) if sketches is not None else \
            sketch_rules.generate_sketches(task, custom_rules=custom_rules)
        if not self.sketches:
            raise ValueError(f"no sketch could be generated for {task}")
        self.evolution = Evolution(task, cost_model, self.params, self.sketches, self.rng)
        self.measured_keys: set[str] = set()
        self.measured: list[tuple[float, int, ir.State]] = []  # (cost, order, state), valid only
        self.extra_initial: dict[str, ir.State] = {}
        self.last_eps = self.params.eps_greedy
        self.stats: dict = {}

    @property
    def model(self):
        """The cost model the search ranks programs with (and ``update`` trains)."""
        return self.evolution.model

    # measurements ------------------------------------------------------------------------
    def remember(self, states, costs) -> list[tuple]:
        """Take in measured programs (cost in seconds, None for a failure) without
        retraining: they are never proposed again and the valid ones seed the population.
        Returns them as the cost model's training records, (task, state, cost), for a
        caller that trains once on many (resuming a log)."""
        records = []
        for state, cost in zip(states, costs):
            self.measured_keys.add(state.key)
            self.extra_initial.pop(state.key, None)
            if cost is not None and math.isfinite(cost):
                self.measured.append((cost, len(self.measured), state))
            records.append((self.task, state, cost))
        return records

    def update(self, states, costs) -> None:
        """``remember`` the programs measured in this round and retrain the model on them."""
        records = self.remember(states, costs)
        if records:
            self.model.update(records)

    def best_measured(self, n: int) -> list[ir.State]:
        return [s for _, _, s in heapq.nsmallest(n, self.measured)]

    def add_initial(self, states) -> int:
        """Programs of this task's DAG that join the initial population of the coming
        rounds (until measured); returns how many of them are new."""
        before = len(self.extra_initial)
        for state in states:
            if state.key not in self.measured_keys:
                self.extra_initial.setdefault(state.key, state)
        return len(self.extra_initial) - before

    # search ------------------------------------------------------------------------------
    def sample_initial(self) -> list[ir.State]:
        """Fresh random programs: batches of ``population`` samples until at least
        ``init_min_population`` unique ones, or fewer when a batch finds no new program
        (the sketches hold fewer programs than that: ``sketch_rules.sample_programs`` stops
        once its samples only repeat), or none after 5 batches without a valid sample."""
        with fewer_gc_passes():
            return self._sample_initial()

    def _sample_initial(self) -> list[ir.State]:
        p = self.params
        target, out, fruitless = p.init_min_population, {}, 0
        while len(out) < target and fruitless < 5:
            before = len(out)
            for s in sketch_rules.sample_programs(self.task, self.sketches, max(target, min(p.population, 4 * target)),
                                                  self.rng, on_error=self.evolution.rejected.add):
                out.setdefault(s.key, s)
            if len(out) == before:
                if out:   # the space is exhausted: what was found is all there is
                    break
                fruitless += 1
        return list(out.values())

    def evolve(self, population: list[ir.State], out_size: int) -> list[ir.State]:
        """Evolve ``population`` (see ``evolve.Evolution``); the ``out_size`` best predicted
        programs seen that were never measured, best first."""
        return [s for _, s in self.evolve_scored(population, out_size)]

    def evolve_scored(self, population: list[ir.State], out_size: int) -> list[tuple[float, ir.State]]:
        """``evolve``, each program with its predicted score. With an executor and more than
        one island, the islands evolve in its processes; if that fails, here."""
        n_islands = self.params.n_islands(self.task.hardware.num_cores)
        if self.executor is not None and n_islands > 1 and len(population) >= n_islands:
            try:
                futures = islands.submit_islands(self.executor, self, population, out_size, n_islands)
                results = [f.result() for f in futures]
                return islands.merge_islands(self.task.dag, results, out_size, self.evolution.rejected)
            except Exception as err:  # noqa: BLE001 - a broken worker must not end the tuning
                warnings.warn(f"autosched: evolving in parallel processes failed ({type(err).__name__}: {err}); "
                              "this round evolves in this process", RuntimeWarning, stacklevel=2)
        return self.evolution.run(population, out_size, self.measured_keys)

    def next_batch(self, n: int, params: SearchParams | None = None) -> list[ir.State]:
        """Up to ``n`` programs never measured: the best predicted after evolution, with an
        epsilon share of fresh random programs (Ansor's PickStatesWithEpsGreedy); random
        programs only while the model cannot rank. A task's first round measures at most
        ``PROBE_BATCH`` (and half of ``n``) when the model ranks before the task has any
        measurement. Candidates whose making raised are left out, counted in
        ``stats["rejected"]`` and reported in one warning a round. ``params``: this round's
        search parameters instead of the policy's (a short search for a cheap first round)."""
        if params is not None and params is not self.params:
            kept = self.params
            self.params = self.evolution.params = params
            try:
                return self.next_batch(n)
            finally:
                self.params = self.evolution.params = kept
        rejected = self.evolution.rejected
        before = rejected.counts.copy()
        batch = self._next_batch(n)
        new = rejected.counts - before
        self.stats["rejected"] = dict(new)
        if new:
            warnings.warn(f"autosched: task {self.task.desc or self.task.workload_key}: {sum(new.values())} "
                          f"candidate program(s) left out of this round because making them raised: "
                          f"{rejected.describe(new)}", RuntimeWarning, stacklevel=2)
        return batch

    def _next_batch(self, n: int) -> list[ir.State]:
        p = self.params
        if not getattr(self.model, "can_rank", True):
            batch = self.random_batch(n)
            self.stats = {"init_population": len(batch), "evolved": 0, "eps": 1.0}
            return batch
        n = self._probe_size(n)
        for _ in range(max(1, p.retry_on_empty)):
            init = self.sample_initial()
            n_measured = min(len(self.measured), int(p.init_use_measured_ratio * p.population))
            population = init + self.best_measured(n_measured) + list(self.extra_initial.values())
            scored = self.evolve_scored(population, CANDIDATES_PER_PICK * n)
            best = [s for _, s in scored]
            eps = self._epsilon(best[:2 * n])  # the uncertainty of the likely picks, as before twins
            n_random = int(round(eps * n)) if len(self.measured) else 0
            batch = pick_distinguishable(scored, n - n_random)
            fresh = [s for s in init if s.key not in self.measured_keys and s.key not in batch]
            self.rng.shuffle(fresh)
            for s in fresh:
                if len(batch) >= n:
                    break
                batch[s.key] = s
            for s in best:  # top up from the predictions if random ones ran out
                if len(batch) >= n:
                    break
                batch.setdefault(s.key, s)
            if batch:
                self.stats = {"init_population": len(init), "evolved": len(best), "eps": eps}
                return list(batch.values())
        return []

    def _probe_size(self, n: int) -> int:
        """How many of ``n`` programs a round measures: at most ``PROBE_BATCH`` (and half of
        ``n``) while the task has no measurement (see ``next_batch``)."""
        return min(n // 2, PROBE_BATCH) if not self.measured and n > 1 else n

    def best_of(self, states, n: int) -> list[ir.State]:
        """Up to ``n`` of ``states`` (programs of this task found elsewhere: the runners-up of
        a search under the base model) never measured, the best that this policy's model
        predicts, at most ``MAX_TWINS`` of one score, and as few as ``next_batch``'s probe
        rule says: a round that ranks what another search found instead of searching again.
        In the given order when the model cannot rank."""
        fresh = list({s.key: s for s in states if s.key not in self.measured_keys}.values())
        n = self._probe_size(n)
        if not fresh or not getattr(self.model, "can_rank", True):
            return fresh[:n]
        scores = self.model.predict(self.task, fresh)
        order = sorted(range(len(fresh)), key=lambda i: -scores[i])
        return list(pick_distinguishable([(scores[i], fresh[i]) for i in order], n).values())

    def random_batch(self, n: int) -> list[ir.State]:
        """Up to ``n`` fresh random programs never measured: the batch while the model cannot
        rank yet (Ansor's RandomSampleStates), when evolving under random scores would only
        cost time."""
        batch: dict[str, ir.State] = {}
        fruitless = 0
        while len(batch) < n and fruitless <= max(1, self.params.retry_on_empty):
            before = len(batch)
            for s in sketch_rules.sample_programs(self.task, self.sketches, 2 * (n - len(batch)), self.rng,
                                                  on_error=self.evolution.rejected.add):
                key = s.key
                if key not in self.measured_keys and len(batch) < n:
                    batch.setdefault(key, s)
            fruitless = fruitless + 1 if len(batch) == before else 0
        return list(batch.values())

    def _epsilon(self, candidates) -> float:
        """Fixed ``eps_greedy``, or (AdaTune) the model's relative uncertainty on the best
        candidates, clipped to [0.02, 0.5]: explore more while the model is unsure."""
        if not self.params.contextual_eps or not candidates or not hasattr(self.model, "predict_with_uncertainty"):
            self.last_eps = self.params.eps_greedy
            return self.last_eps
        mean, std = self.model.predict_with_uncertainty(self.task, candidates)
        mean, std = np.asarray(mean, float), np.asarray(std, float)
        ok = np.isfinite(mean) & np.isfinite(std)
        if not ok.any():
            return self.params.eps_greedy
        rel = float(np.mean(std[ok]) / (np.mean(np.abs(mean[ok])) + 1e-9))
        self.last_eps = float(np.clip(rel, 0.02, 0.5))
        return self.last_eps
