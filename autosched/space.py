"""The search space of a computation, shown to a user: its sketches and sampled programs."""
from __future__ import annotations

import numpy as np

import ir
import sketch_rules


def as_task(dag_or_task, **task_kwargs) -> ir.SearchTask:
    if isinstance(dag_or_task, ir.SearchTask):
        return dag_or_task
    if isinstance(dag_or_task, ir.ComputeDAG):
        return ir.SearchTask(dag_or_task, **task_kwargs)
    raise TypeError(f"expected an ir.ComputeDAG or ir.SearchTask, got {type(dag_or_task).__name__}")


def generate_sketches(dag_or_task, *, samples: int = 3, seed: int = 0, target_kind: str = "cpu",
                      custom_rules=None, verbose: bool = True) -> list[ir.State]:
    """The sketches of a computation (Ansor's derivation rules, with any registered and
    ``custom_rules``); with ``verbose``, print them and ``samples`` random programs."""
    task = as_task(dag_or_task)
    sketches = sketch_rules.generate_sketches(task, target_kind=target_kind, custom_rules=custom_rules)
    if verbose:
        for i, sketch in enumerate(sketches):
            print(f"# sketch {i} of {len(sketches)}\n{sketch}\n")
        if samples and target_kind == "cpu":
            rng = np.random.default_rng(seed)
            for i, state in enumerate(sketch_rules.sample_programs(task, sketches, samples, rng)):
                print(f"# sampled program {i}\n{state}\n")
    return sketches
