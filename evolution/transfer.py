"""Programs of one task carried over to another task of the same operator family (a conv of
another shape, a dense of another size): the tasks of one model learn from each other.

A program is its steps; its loop structure (stages, iterators, fusions, orders, cache
stages) depends on the operator, its tile lengths on the shapes. ``adapt_program`` replays
a program's steps on another task's DAG, each split's lengths replaced by the nearest
valid factorisation of this DAG's extent (nearest in log space, level by level), compute
locations and annotations kept where they apply and dropped where they do not; a program
whose structure does not fit this DAG (a step that changes its loops or stages fails) is
not adapted. What it returns was replayed on this DAG, so it computes what the DAG says.
"""
from __future__ import annotations

import functools
from dataclasses import replace

import numpy as np

import ir
from ir.loops import LEAKS, check
from ir.steps import (AnnotationStep, ComputeAtStep, ComputeInlineStep, ComputeRootStep, FollowFusedSplitStep,
                      FollowSplitStep, PragmaStep, SplitStep)
from sketch_rules.annotation import factorizations, off_grid_vector_loops, vector_lengths
from sketch_rules.default_schedules import annotate_naive_stages

from .mutation import vector_lane_group

#: steps that only place a stage or annotate a loop: a program stays valid without them
DROPPABLE = (AnnotationStep, PragmaStep, ComputeAtStep, ComputeInlineStep, ComputeRootStep)


@functools.lru_cache(maxsize=1024)
def _log_factorizations(extent: int, n: int, max_innermost: int, group: int | None) -> tuple[tuple, np.ndarray]:
    """The factorisations of ``extent`` (``n`` lengths; with a lane ``group``, innermost
    lengths on its grid only: ``vector_lengths``) and the logs of their levels, the outer one
    (the quotient) first."""
    innermost = vector_lengths(extent, max_innermost, group) if group else None
    schemes = factorizations(extent, n, max_innermost, innermost)
    parts = np.asarray(schemes, dtype=np.float64).reshape(len(schemes), n)
    return schemes, np.log(np.column_stack([extent / parts.prod(axis=1), parts]))


def nearest_factorization(lengths, extent: int, max_innermost: int,
                          source_extent: int | None = None, group: int | None = None) -> tuple[int, ...] | None:
    """The split lengths for a loop of ``extent`` nearest to ``lengths`` (of a loop of
    ``source_extent``: its outer part is compared too), by the sum over levels of
    |log new − log old| (the first of equals), among the exact factorisations with an
    innermost length of at most ``max_innermost`` (and on the lane ``group``'s grid when
    given); None if there is none."""
    n = len(lengths)
    schemes, logs = _log_factorizations(int(extent), n, int(max_innermost), group)
    if not schemes:
        return None
    inner = [max(1, x or 1) for x in lengths]
    old = np.log(np.asarray([max(1.0, (source_extent or 0) / np.prod(inner))] + inner, dtype=np.float64))
    if source_extent is None:
        logs, old = logs[:, 1:], old[1:]
    return schemes[int(np.argmin(np.abs(logs - old).sum(axis=1)))]


def _split_extent(state: ir.State, step: SplitStep) -> int:
    """The extent of the loop ``step`` splits in ``state`` (InvalidStep if there is none)."""
    stages = state.stages
    check(0 <= step.stage_id < len(stages) and 0 <= step.iter_id < len(stages[step.stage_id].iters),
                   f"split: no loop {step.iter_id} of stage {step.stage_id}")
    extent = stages[step.stage_id].iters[step.iter_id].extent
    check(isinstance(extent, int), f"split: the loop's extent {extent} is not a number")
    return extent


def _renumbered(step, new_index: dict[int, int]):
    """``step`` with its references to earlier steps renumbered after dropped ones (None if
    it refers to a dropped step)."""
    if isinstance(step, FollowSplitStep):
        if step.src_step_id not in new_index:
            return None
        return replace(step, src_step_id=new_index[step.src_step_id])
    if isinstance(step, FollowFusedSplitStep):
        if any(s not in new_index for s in step.src_step_ids):
            return None
        return replace(step, src_step_ids=tuple(new_index[s] for s in step.src_step_ids))
    return step


def adapt_program(program: ir.State, task: ir.SearchTask) -> ir.State | None:
    """``program`` (a State of another DAG of the same operator family) as a program of
    ``task``: its steps replayed on ``task.dag`` with every split's lengths fitted to this
    DAG's extents (``nearest_factorization``), placement and annotation steps that no longer
    apply dropped. A fit that leaves more vector loops off the lane grid than ``program``
    has (16 lanes fitted to 408 = 8 x 51 channels: 17; ``good_vector_length``) is made again
    with every split's innermost length on the grid. A program of a DAG of fewer operations
    (a dense layer with a bias, carried to one with a bias and GELU) leaves the extra ones
    unscheduled: they get the default schedule's annotations
    (``sketch_rules.default_schedules.annotate_naive_stages``; without, MobileNet-V3's 112x112
    depthwise layer took a program whose ReLU ran serial and scalar, 3.6x slower, ranked first).
    None when ``program``'s DAG has more operations (or fewer, on a GPU), when a step that
    shapes the loops or stages does not apply, or when the result breaks the task's device
    limits or the grid."""
    extra = len(task.dag.compute_ops) - len(program.dag.compute_ops)
    if extra < 0 or extra and task.hardware.is_gpu:
        return None   # steps name stages by index: here some would name other operations
    group = vector_lane_group(task)
    state = _fitted(program, task, None)
    if state is not None and group and off_grid_vector_loops(state, group) > off_grid_vector_loops(program, group):
        state = _fitted(program, task, group)
        if state is not None and off_grid_vector_loops(state, group) > off_grid_vector_loops(program, group):
            return None
    if state is not None and extra:
        state = annotate_naive_stages(state, task.hardware)
    return state


def _fitted(program: ir.State, task: ir.SearchTask, group: int | None) -> ir.State | None:
    """``program``'s steps replayed on ``task.dag``, splits fitted (innermost lengths on the
    lane ``group``'s grid when given), as ``adapt_program`` says."""
    max_innermost = task.hardware.max_innermost_split_factor
    state = ir.State.initial(task.dag)
    new_index: dict[int, int] = {}
    for k, step in enumerate(program.steps):
        step = _renumbered(step, new_index)
        if step is None:
            return None
        try:
            if isinstance(step, SplitStep) and all(x is not None for x in step.lengths):
                lengths = nearest_factorization(step.lengths, _split_extent(state, step), max_innermost,
                                                step.extent if isinstance(step.extent, int) else None, group)
                if lengths is None:
                    return None
                step = replace(step, lengths=tuple(lengths), extent=None)
            state = state.apply(step)
        except (ir.InvalidStep, *LEAKS):
            if isinstance(step, DROPPABLE):
                continue
            return None
        new_index[k] = len(state.steps) - 1
    try:
        state.key  # printing settles the regions of attached stages: that may fail too
    except (ir.InvalidStep, *LEAKS):
        return None
    if task.target.backend.limits_violation(state, task.hardware) is not None:
        return None
    return state


def adapt_programs(programs, task: ir.SearchTask) -> list[ir.State]:
    """The programs of ``programs`` that ``adapt_program`` carries over to ``task``, each
    once (by key), in order."""
    out: dict[str, ir.State] = {}
    for program in programs:
        state = adapt_program(program, task)
        if state is not None:
            out.setdefault(state.key, state)
    return list(out.values())
