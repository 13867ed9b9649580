"""Zero-trial programs: for a task that was never measured, the program the base cost model
ranks best after a short search without any measurement (a few seconds a task), instead
of the naive or default schedule. ``GraphExecutor`` and ``apply_history_best`` use it for
untuned tasks (still with a loud ``UntunedWorkloadWarning``: nothing was measured).

Every program the search proposes is a chain of transform steps applied to the task's
DAG, so it computes what the DAG says; what the model may get wrong is its speed.
"""
from __future__ import annotations

import ir
from evolution import SearchParams, SketchPolicy

from .base_model import load_base_model

#: the short search: small population, few generations, one process
ZERO_TRIAL_PARAMS = SearchParams(population=256, generations=3, init_min_population=64, islands=1)


def zero_trial_program(task: ir.SearchTask, model, seed: int = 0, candidates=(),
                       params: SearchParams | None = None) -> ir.State:
    """The program of ``task`` that ``model`` ranks best among a short evolutionary search's
    and the given ``candidates`` (States of ``task.dag``, e.g. a default schedule)."""
    policy = SketchPolicy(task, model, params or ZERO_TRIAL_PARAMS, seed=seed)
    found = policy.evolve(policy.sample_initial(), 4)
    options = found + [c for c in candidates if c is not None]
    if not options:
        raise ValueError(f"the search found no program of {task}")
    scores = model.predict(task, options)
    return options[max(range(len(options)), key=lambda i: scores[i])]


class ZeroTrial:
    """Zero-trial programs from one base model (``load_base_model``'s ``spec``), remembered
    per workload and target as their steps (replayed on the DAG asked for)."""

    def __init__(self, model, seed: int = 0):
        self.model = model
        self.seed = seed
        self._steps: dict[tuple, tuple] = {}

    @classmethod
    def from_spec(cls, base_model="default", seed: int = 0) -> "ZeroTrial | None":
        """One from the base model ``base_model`` names; None when there is none."""
        model = load_base_model(base_model)
        return cls(model, seed) if model is not None else None

    def program(self, dag: ir.ComputeDAG, target: str | None = None, candidates=()) -> ir.State:
        """The zero-trial program of ``dag`` (layout-rewritten: build it with
        ``layout_rewrite=True``)."""
        task = ir.SearchTask(dag, target=target)
        ident = (task.workload_key, task.target)
        if ident not in self._steps:
            state = zero_trial_program(task, self.model, self.seed, candidates)
            self._steps[ident] = state.steps
        return ir.State.from_steps(dag, self._steps[ident])
