"""The search space of a computation, shown to a user: its sketches and sampled programs."""
from __future__ import annotations

import numpy as np

import ir
import sketch_rules


def as_task(dag_or_task, target=None, **task_kwargs) -> ir.SearchTask:
    """``dag_or_task`` as a SearchTask: a ComputeDAG gets one for ``target`` (an
    ``ir.Target`` or its spelling; default this CPU); a SearchTask is taken as it is (a
    ``target`` given must be of its back end)."""
    if isinstance(dag_or_task, ir.SearchTask):
        if target is not None and ir.Target.parse(target).backend is not dag_or_task.target.backend:
            raise ValueError(f"target={str(target)!r} was given with a task for {str(dag_or_task.target)!r}")
        return dag_or_task
    if isinstance(dag_or_task, ir.ComputeDAG):
        return ir.SearchTask(dag_or_task, target=target, **task_kwargs)
    raise TypeError(f"expected an ir.ComputeDAG or ir.SearchTask, got {type(dag_or_task).__name__}")


def generate_sketches(dag_or_task, *, samples: int = 3, seed: int = 0, target=None,
                      custom_rules=None, verbose: bool = True) -> list[ir.State]:
    """The sketches of a computation (Ansor's derivation rules of its target's search
    space, with any registered and ``custom_rules``); with ``verbose``, print them and
    ``samples`` random programs. ``target`` (e.g. "cuda") makes a ComputeDAG a task for it
    (default this CPU)."""
    task = as_task(dag_or_task, target=target)
    sketches = sketch_rules.generate_sketches(task, custom_rules=custom_rules)
    if verbose:
        for i, sketch in enumerate(sketches):
            print(f"# sketch {i} of {len(sketches)}\n{sketch}\n")
        if samples:
            rng = np.random.default_rng(seed)
            for i, state in enumerate(sketch_rules.sample_programs(task, sketches, samples, rng)):
                print(f"# sampled program {i}\n{state}\n")
    return sketches
