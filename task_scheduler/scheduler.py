"""``TaskScheduler``: which task gets the next round of search when many are tuned at once.

A round of task i (``tune_task``, the one tuning round of autosched: tuning one
computation is a scheduler with one task) is ``policy.next_batch(measure_batch)``,
``measurer.measure(task, states)``, ``policy.update(states, costs)``, then the task's best
latency ``measurer.best_cost(task)``. The policies and the measurer are handed in (the
dependency rule: this package does not import ``autosched``); anything with those methods
will do, e.g. a fake measurer in tests.

Strategies: "gradient" (Ansor: one warm-up pass of round robin, then the task with the
largest |∂f/∂t_i| by the gradient approximation in ``gradient``, ε-greedy) and
"round-robin" (equal rounds for all tasks: the ablation of the paper's Fig. 10).

A ``first_round`` (``first_round.FirstRound``) makes every task's first round cheap, and
``transfer_seeds`` lets tasks of one operator family seed each other's search
(``first_round.seed_from_family``).
"""
from __future__ import annotations

import math
import time
from typing import Sequence

import numpy as np

from .first_round import FirstRound, seed_from_family
from .gradient import (ALPHA, BACKWARD_WINDOW, BETA, EPS_GREEDY, NO_PROGRAM, choose_task, similarity_groups,
                       task_gradients)
from .objectives import Objective, make_objective

STRATEGIES = ("gradient", "round-robin")
#: programs of other tasks offered to one task before a round, at most
TRANSFER_LIMIT = 16


def similarity_tag(dag) -> str:
    """The operator tag of a task for similarity: the tags of its stages with a reduction
    (e.g. "conv2d_nhwc"), "" for a task without any (such tasks group with nothing)."""
    tags = []
    for op in dag.compute_ops:
        if getattr(op, "reduce_axis", ()) and op.tag and op.tag not in tags:
            tags.append(op.tag)
    return "+".join(tags)


class TaskScheduler:
    """Allocates search rounds to ``tasks`` (``ir.SearchTask``s) to minimise ``objective``.

    ``objective``: an ``Objective``, a name ("latency" f1, "requirement" f2, "speedup" f3,
    "early_stopping" f4; see ``objectives.make_objective``) or a callable of the task
    latencies; ``weights`` ((networks × tasks) counts, default one network with every task
    once) feeds the named ones. ``flops``/``tags``/``names`` default to each task's flop
    count, ``similarity_tag`` and ``desc``. ``early_stopping_per_task``: a task that went
    this many trials without improving is retired. ``callbacks``: objects with any of
    ``on_start(scheduler)``, ``on_round(scheduler, task_index)``, ``on_end(scheduler)``.
    ``first_round``: a ``FirstRound`` for every task's first round (None: a round like
    the others). ``transfer_seeds``: before each round of a task, the best that many
    measured programs of every other task with its tag (at most ``TRANSFER_LIMIT`` in all,
    the nearest in flops first), adapted to its extents, join its initial population (0:
    none). ``first_measured[i]``: seconds into ``tune`` when task i had its first valid
    program (None before). Deterministic for a ``seed`` given the same measurements."""

    def __init__(self, tasks: Sequence, objective=None, *, weights=None, network_names=None, flops=None,
                 tags=None, names=None, strategy: str = "gradient", alpha: float = ALPHA, beta: float = BETA,
                 backward_window: int = BACKWARD_WINDOW, eps_greedy: float = EPS_GREEDY,
                 early_stopping_per_task: int | None = None, seed: int = 0, callbacks=(),
                 first_round: FirstRound | None = None, transfer_seeds: int = 0, **objective_kwargs):
        self.tasks = list(tasks)
        n = len(self.tasks)
        if n == 0:
            raise ValueError("TaskScheduler needs at least one task")
        if strategy not in STRATEGIES:
            raise ValueError(f"unknown strategy {strategy!r}; expected one of {STRATEGIES}")
        if weights is None:
            weights = np.ones((1, n))
        self.objective: Objective = make_objective(objective, weights, network_names, **objective_kwargs)
        if self.objective.n_tasks != n:
            raise ValueError(f"the objective has {self.objective.n_tasks} tasks, the scheduler {n}")
        self.flops = [float(f) for f in (flops if flops is not None else [t.dag.flop_count() for t in self.tasks])]
        self.tags = list(tags) if tags is not None else [similarity_tag(t.dag) for t in self.tasks]
        self.names = list(names) if names is not None else \
            [getattr(t, "desc", "") or f"task{i}" for i, t in enumerate(self.tasks)]
        self.groups = similarity_groups(self.tags, self.flops)
        self.strategy = strategy
        self.alpha, self.beta, self.backward_window, self.eps_greedy = alpha, beta, backward_window, eps_greedy
        self.early_stopping_per_task = early_stopping_per_task
        self.rng = np.random.default_rng(seed)
        self.callbacks = list(callbacks)
        if transfer_seeds < 0:
            raise ValueError(f"transfer_seeds must be >= 0, got {transfer_seeds}")
        self.first_round = first_round
        self.transfer_seeds = transfer_seeds
        self._offered: list[set] = [set() for _ in range(n)]  # programs of other tasks offered to each
        self._pending: dict[int, tuple] = {}  # id(model) -> (model, first-round records it has not learnt)
        self._pending_rounds = 0
        # per task
        self.best_costs = np.full(n, NO_PROGRAM)
        self.histories: list[list[float]] = [[] for _ in range(n)]
        self.rounds = [0] * n
        self.trials = [0] * n
        self.last_improved = [0] * n
        self.first_measured: list[float | None] = [None] * n
        self.dead = [False] * n
        #: seconds spent on each task: proposing programs ("search"), measuring them
        #: ("measure"), and of the latter compiling ("build") and running ("run") them,
        #: summed over the measurement's workers
        self.seconds = [dict.fromkeys(("search", "measure", "build", "run"), 0.0) for _ in range(n)]
        # the run
        self.total_trials = 0           # measured in this session
        self.choices: list[int] = []    # the task of each round, in order
        self.curve: list[dict] = []     # after each round: trials, seconds, objective, network latencies
        self.stop_reason = ""
        self.measurer = None            # the measurer of the running ``tune`` (for callbacks)
        self._rr_next = 0
        self._start = time.perf_counter()

    @property
    def n_tasks(self) -> int:
        return len(self.tasks)

    # state ------------------------------------------------------------------------------
    def restore(self, i: int, best_cost: float, measured: int, measure_batch: int) -> None:
        """Take in what a resumed log says of task i: its best latency and how many of its
        programs were measured (counted as ceil(measured / measure_batch) past rounds)."""
        if measured <= 0:
            return
        rounds = max(1, math.ceil(measured / measure_batch))
        self.best_costs[i] = min(self.best_costs[i], best_cost)
        if self.best_costs[i] < NO_PROGRAM:
            self.first_measured[i] = 0.0
        self.rounds[i] += rounds
        self.trials[i] += measured
        self.last_improved[i] = self.trials[i]
        self.histories[i].extend([float(self.best_costs[i])] * rounds)

    def record_round(self, i: int, best_cost: float, measured: int) -> None:
        """Book one round of task i that measured ``measured`` programs and left its best
        latency at ``best_cost`` (callbacks run here)."""
        improved = best_cost < self.best_costs[i]
        self.best_costs[i] = min(float(best_cost), self.best_costs[i])
        self.rounds[i] += 1
        self.trials[i] += measured
        self.total_trials += measured
        self.histories[i].append(float(self.best_costs[i]))
        self.choices.append(i)
        if self.first_measured[i] is None and self.best_costs[i] < NO_PROGRAM:
            self.first_measured[i] = time.perf_counter() - self._start
        if improved:
            self.last_improved[i] = self.trials[i]
        elif self.early_stopping_per_task is not None and \
                self.trials[i] - self.last_improved[i] >= self.early_stopping_per_task:
            self.dead[i] = True
        self.curve.append({"trials": self.total_trials, "seconds": time.perf_counter() - self._start,
                           "task": i, "objective": self.objective_value(),
                           "latencies": [float(x) for x in self.network_latencies()]})
        for cb in self.callbacks:
            if hasattr(cb, "on_round"):
                cb.on_round(self, i)

    def all_measured_at(self) -> float | None:
        """Seconds into ``tune`` when the last task that has a valid program got its first
        (None while an alive task has none)."""
        if any(t is None and not d for t, d in zip(self.first_measured, self.dead)):
            return None
        times = [t for t in self.first_measured if t is not None]
        return max(times) if times else None

    def objective_value(self) -> float:
        return self.objective.value(self.best_costs, self.histories)

    def network_latencies(self) -> np.ndarray:
        """Estimated end-to-end latency of each network (seconds): Σ_i w_ij·g_i."""
        return self.objective.network_latencies(self.best_costs)

    def objective_gradient(self) -> np.ndarray:
        return np.asarray(self.objective.gradient(self.best_costs, self.histories), dtype=np.float64)

    def gradients(self) -> np.ndarray:
        """∂f/∂t_i of every task now (0 for retired tasks)."""
        return task_gradients(self.best_costs, self.histories, self.rounds, self.flops, self.groups,
                              self.objective_gradient(), self.alpha, self.beta, self.backward_window, self.dead)

    # choosing ---------------------------------------------------------------------------
    def next_task(self) -> int | None:
        """The task of the next round: first every alive task once (warm-up), then by the
        strategy. None when no task is alive, or (gradient strategy) when the objective has
        nothing more to gain from any alive task (∂f/∂g_i = 0 for all of them)."""
        alive = [not d for d in self.dead]
        if not any(alive):
            self.stop_reason = "every task is retired"
            return None
        for i in range(self.n_tasks):
            if alive[i] and self.rounds[i] == 0:
                return i
        if self.strategy == "round-robin":
            for k in range(self.n_tasks):
                i = (self._rr_next + k) % self.n_tasks
                if alive[i]:
                    self._rr_next = i + 1
                    return i
        dfdg = self.objective_gradient()
        if not any(alive[i] and dfdg[i] != 0 for i in range(self.n_tasks)):
            self.stop_reason = "the objective has nothing left to gain"
            return None
        return choose_task(self.gradients(), alive, self.rng, self.eps_greedy)

    # tuning -----------------------------------------------------------------------------
    def tune_task(self, i: int, policy, measurer, n: int) -> int:
        """One round of task i: up to ``n`` new programs measured; returns how many. A task
        whose policy proposes nothing is retired. The measurements of first rounds train
        the cost model every ``first_round.train_every`` first rounds, and before any other
        round (policies with ``remember`` and ``model``; the others train at once). Before
        a task's first search, a measurer with ``prepare`` starts what its runs need (the
        task's reference output), so that the two overlap."""
        task = self.tasks[i]
        t0 = time.perf_counter()
        first = self.rounds[i] == 0 and self.first_round is not None
        if self.rounds[i] == 0 and hasattr(measurer, "prepare"):
            measurer.prepare(task)   # its reference is computed while its programs are searched
        if first:
            states = self.first_round.next_batch(task, policy, n)
        else:
            self.train_pending()
            states = policy.next_batch(n)
        t1 = time.perf_counter()
        self.seconds[i]["search"] += t1 - t0
        if not states:
            self.dead[i] = True
            return 0
        results = measurer.measure(task, states)
        seconds = self.seconds[i]
        seconds["measure"] += time.perf_counter() - t1
        seconds["build"] += sum(getattr(r, "build_time", 0.0) for r in results)
        seconds["run"] += sum(getattr(r, "run_time", 0.0) for r in results)
        costs = [r.mean_cost if r.ok else None for r in results]
        if first and self.first_round.train_every > 1 and hasattr(policy, "remember") and hasattr(policy, "model"):
            self._pending.setdefault(id(policy.model), (policy.model, []))[1].extend(policy.remember(states, costs))
            self._pending_rounds += 1
            if self._pending_rounds >= self.first_round.train_every:
                self.train_pending()
        else:
            policy.update(states, costs)
        self.record_round(i, measurer.best_cost(task), len(states))
        return len(states)

    def train_pending(self) -> None:
        """Train the cost models on the first rounds' measurements they have not learnt yet."""
        pending, self._pending, self._pending_rounds = self._pending, {}, 0
        for model, records in pending.values():
            model.update(records)

    def tune(self, policies: Sequence, measurer, trials: int, measure_batch: int = 64,
             early_stopping: int | None = None, time_budget_s: float | None = None) -> "TaskScheduler":
        """Spend up to ``trials`` measurements, ``measure_batch`` per round, over the tasks
        (``policies[i]`` searches task i). ``early_stopping``: stop once the objective has
        not improved for that many trials. ``time_budget_s``: start no round that would end
        after this many wall seconds since the call, judged by the mean duration of the
        rounds of its kind so far (first rounds, when ``first_round`` makes them cheap, or
        the others; of the other kind while none of its own has run); the first round
        always runs, so only it can overrun."""
        if len(policies) != self.n_tasks:
            raise ValueError(f"{len(policies)} policies for {self.n_tasks} tasks")
        if trials < 0 or measure_batch < 1:
            raise ValueError(f"trials must be >= 0 and measure_batch >= 1, got {trials} and {measure_batch}")
        if time_budget_s is not None and not time_budget_s > 0:
            raise ValueError(f"time_budget_s must be a positive number of seconds or None, got {time_budget_s}")
        self._start = time.perf_counter()
        self.measurer = measurer
        for cb in self.callbacks:
            if hasattr(cb, "on_start"):
                cb.on_start(self)
        best_value, best_at = self.objective_value(), 0
        try:
            durations: dict[bool, list[float]] = {True: [], False: []}  # seconds of first rounds, of others
            while self.total_trials < trials:
                i = self.next_task()
                if i is None:
                    break
                first = self.rounds[i] == 0 and self.first_round is not None
                expected = durations[first] or durations[not first]
                if time_budget_s is not None and expected and \
                        time.perf_counter() - self._start + sum(expected) / len(expected) > time_budget_s:
                    self.stop_reason = f"the time budget of {time_budget_s:g} s spent"
                    break
                t0 = time.perf_counter()
                if self.transfer_seeds:
                    seed_from_family(i, self.tasks[i], self.tags, self.flops, policies, self.transfer_seeds,
                                     TRANSFER_LIMIT, self._offered[i])
                    self.seconds[i]["search"] += time.perf_counter() - t0
                self.tune_task(i, policies[i], measurer, min(measure_batch, trials - self.total_trials))
                durations[first].append(time.perf_counter() - t0)
                value = self.objective_value()
                if value < best_value:
                    best_value, best_at = value, self.total_trials
                elif early_stopping is not None and self.total_trials - best_at >= early_stopping:
                    self.stop_reason = f"no improvement of the objective in {early_stopping} trials"
                    break
            else:
                self.stop_reason = f"{trials} trials spent"
        finally:
            self.train_pending()
            for cb in self.callbacks:
                if hasattr(cb, "on_end"):
                    cb.on_end(self)
        return self

    def time_split(self) -> dict:
        """Seconds so far over all tasks, by kind (``seconds``' keys): what a tuning's wall
        time went to, proposing programs (the cost model's training included) against
        measuring them."""
        total = dict.fromkeys(("search", "measure", "build", "run"), 0.0)
        for seconds in self.seconds:
            for kind, value in seconds.items():
                total[kind] += value
        return total

    # display ----------------------------------------------------------------------------
    def table(self) -> str:
        """The per-task table (latency, speed, weight, trials, seconds into the tuning of its
        first measured program) and the estimate per network."""
        weight = self.objective.weights.sum(axis=0)
        width = max([len("Task")] + [min(len(n), 48) for n in self.names])
        head = f"|  ID | {'Task':<{width}} | Weight | Latency (ms) | Speed (GFLOPS) | Trials | First (s) | Status |"
        rule = "-" * len(head)
        lines = [rule, head, rule]
        for i in range(self.n_tasks):
            ok = self.best_costs[i] < NO_PROGRAM
            lat = f"{1e3 * self.best_costs[i]:.4f}" if ok else "-"
            speed = f"{self.flops[i] / self.best_costs[i] / 1e9:.2f}" if ok and self.flops[i] else "-"
            status = "retired" if self.dead[i] else ""
            first = f"{self.first_measured[i]:.1f}" if self.first_measured[i] is not None else "-"
            lines.append(f"| {i:3d} | {self.names[i][:48]:<{width}} | {weight[i]:6g} | {lat:>12} | {speed:>14} | "
                         f"{self.trials[i]:6d} | {first:>9} | {status:>6} |")
        lines.append(rule)
        lat = self.network_latencies()
        est = ", ".join(f"{n}: {1e3 * v:.3f} ms" if v < NO_PROGRAM else f"{n}: -" for n, v in
                        zip(self.objective.names, lat))
        split = self.time_split()
        lines.append(f"Estimated latency: {est} | objective ({self.objective.name}): {self.objective_value():.6g} | "
                     f"trials: {self.total_trials} | {time.perf_counter() - self._start:.0f} s: "
                     f"search {split['search']:.0f} s, measuring {split['measure']:.0f} s")
        return "\n".join(lines)
