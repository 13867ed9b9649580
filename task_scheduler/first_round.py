"""The first round of every task, cheap: the warm-up pass visits every task before the
gradient can allocate anything, and a model of 53 small tasks that paid a full search
round (population 2048, 4 generations: seconds of evolution) for each of them had most
of them still unmeasured after ten minutes.

A task's first round measures its zero-trial program (what the task runs untuned: the
base model's pick, handed in as a callable, since this package does not import
``autosched``) and the best others of the search that found it, as the model learnt so
far ranks them (``runners_up``; where there are none, as for a program the records
database remembered, the best of a short search: ``params``, a small population, few
generations); the policy's probe rule (``evolution.search_policy.PROBE_BATCH``) keeps it a
probe for the model. Full rounds come after, where the gradient sends the time.

``transfer_seeds`` carries measured programs between tasks of one operator family
(``evolution.transfer``): when a task's round starts, the best programs measured for the
other tasks with its ``similarity_tag``, their tile lengths fitted to its extents, join
its initial population.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Callable

from evolution import SearchParams
from evolution.transfer import adapt_programs


@dataclass
class FirstRound:
    """How a task's first round searches: ``params`` (None: the policy's own), ``batch``
    programs asked of the search (the probe rule measures at most half of them before any
    measurement of the task), and ``zero_trial`` (a task -> State callable, or None),
    whose program is measured first. ``runners_up`` (a task -> States callable, or None):
    the programs that the zero-trial search ranked after its pick; where it offers any
    that were never measured, the best of them that the policy's model predicts
    (``best_of``) take the short search's place: that search under the base model has just
    explored the task, and searching it again cost MobileNet-V3's warm-up pass 0.7 s a
    task. ``train_every``: the cost model learns the first rounds' measurements every that
    many first rounds (and before any other round), not after each: retraining it costs
    about as much as a first round's search."""
    params: SearchParams | None = None
    batch: int = 8
    zero_trial: Callable | None = None
    train_every: int = 1
    runners_up: Callable | None = None

    def __post_init__(self):
        if self.batch < 1 or self.train_every < 1:
            raise ValueError(f"the first round's batch and train_every must be >= 1, got {self.batch} and "
                             f"{self.train_every}")

    def next_batch(self, task, policy, n: int) -> list:
        """Up to ``n`` programs of ``task``'s first round from ``policy``: the zero-trial
        program (unless measured before) and the best of its search's runners-up or the
        short search's picks. Nothing when the policy proposes nothing (the scheduler then
        retires the task)."""
        ask = min(n, self.batch)
        found = self._ranked_runners_up(task, policy, ask) if n >= 2 else []
        if not found:
            found = policy.next_batch(ask, params=self.params) if self.params is not None else policy.next_batch(ask)
        zero = self._zero_trial_program(task) if found and n >= 2 else None
        if zero is None or zero.key in getattr(policy, "measured_keys", ()):
            return found
        return [zero] + [s for s in found if s.key != zero.key][:n - 1]

    def _zero_trial_program(self, task):
        """``task``'s zero-trial program, or None (no ``zero_trial``, or it failed: said in a
        warning, and the search's picks are measured all the same)."""
        if self.zero_trial is None:
            return None
        try:
            return self.zero_trial(task)
        except Exception as err:  # noqa: BLE001 - the search's picks are measured all the same
            warnings.warn(f"autosched: no zero-trial program for task {getattr(task, 'desc', task)} "
                          f"({type(err).__name__}: {err}); its first round measures the search's picks only",
                          RuntimeWarning, stacklevel=4)
            return None

    def _ranked_runners_up(self, task, policy, n: int) -> list:
        """The best ``n`` of the zero-trial search's runners-up by ``policy``'s model (none
        when there are none, the policy cannot rank what it did not find, or asking for them
        failed: said in a warning)."""
        if self.runners_up is None or not hasattr(policy, "best_of"):
            return []
        try:
            offered = self.runners_up(task)
        except Exception as err:  # noqa: BLE001 - the short search takes their place
            warnings.warn(f"autosched: no runners-up of the zero-trial search for task {getattr(task, 'desc', task)} "
                          f"({type(err).__name__}: {err}); its first round searches instead",
                          RuntimeWarning, stacklevel=4)
            return []
        return policy.best_of(offered, n)


def family_seeds(i: int, tags, flops, policies, per_task: int, limit: int) -> list:
    """The best ``per_task`` measured programs of each other task with task i's (non-empty)
    tag, nearest in flop count first, at most ``limit`` in all (policies without
    ``best_measured`` offer none)."""
    if not tags[i] or per_task < 1:
        return []
    family = [j for j in range(len(tags)) if j != i and tags[j] == tags[i]
              and hasattr(policies[j], "best_measured")]
    family.sort(key=lambda j: abs(math.log((flops[j] + 1) / (flops[i] + 1))))
    out = []
    for j in family:
        out.extend(policies[j].best_measured(per_task))
        if len(out) >= limit:
            return out[:limit]
    return out


def seed_from_family(i: int, task, tags, flops, policies, per_task: int, limit: int, seen: set) -> int:
    """Adapt the family's programs (``family_seeds``) not offered to task i before and add
    them to its policy's initial population; returns how many new programs it got."""
    policy = policies[i]
    if not hasattr(policy, "add_initial"):
        return 0
    sources = [s for s in family_seeds(i, tags, flops, policies, per_task, limit) if s.key not in seen]
    seen.update(s.key for s in sources)
    return policy.add_initial(adapt_programs(sources, task)) if sources else 0
