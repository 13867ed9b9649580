"""A program's genes are its transform steps: helpers to rebuild a program from edited
steps and to tell the steps of the sketch from the random annotation's decisions.

A program is its steps: two equal step lists are one program. Inside ``shared_replays()``
(one search round) ``replay`` builds the State of a step list once and hands the same
State to every later replay of an equal list, so that a program a round makes again (a
mutation undone by a later one, a crossover equal to a parent, a parallel or location
mutation replaying its parent's prefix) costs neither a replay nor, since the feature
cache and the round's scores know that State, another scoring."""
from __future__ import annotations

import contextlib
from typing import Sequence

import ir
from ir.steps import (AnnotationStep, ComputeAtStep, ComputeInlineStep, ComputeRootStep, FuseStep, PragmaStep,
                      SplitStep, Step)


#: the replays of the round under way ({(dag id, steps): State or None}), or None outside one
_replays: dict | None = None
#: at most this many remembered replays (a round of population 2048 makes about 10000)
MAX_SHARED_REPLAYS = 50_000


@contextlib.contextmanager
def shared_replays():
    """Within: ``replay`` remembers what it built by step list (see the module's docstring);
    nested uses share the outermost's memory, which ends with it."""
    global _replays
    if _replays is not None:
        yield
        return
    _replays = {}
    try:
        yield
    finally:
        _replays = None


def replay(dag, steps: Sequence[Step]) -> ir.State | None:
    """``ir.State.from_steps(dag, steps)``, or None if a step does not apply (the edit
    made the program invalid); inside ``shared_replays()``, the State built before for an
    equal step list of the same DAG."""
    memo = _replays
    if memo is None:
        return _build(dag, steps)
    key = (id(dag), tuple(steps))
    if key in memo:
        return memo[key][1]
    state = _build(dag, steps)
    if len(memo) >= MAX_SHARED_REPLAYS:
        memo.clear()
    memo[key] = (dag, state)  # the DAG kept alive, so that its id stays its own
    return state


def _build(dag, steps: Sequence[Step]) -> ir.State | None:
    try:
        return ir.State.from_steps(dag, steps)
    except ir.InvalidStep:
        return None


def with_step(state: ir.State, index: int, step: Step | None) -> ir.State | None:
    """``state`` rebuilt with step ``index`` replaced (or removed, for None)."""
    steps = list(state.steps)
    if step is None:
        del steps[index]
    else:
        steps[index] = step
    return replay(state.dag, steps)


def split_parts(step: SplitStep) -> list[int] | None:
    """All tile lengths of a split, outermost first (the derived one included), or None
    when its extent is unknown or its lengths are neither exact nor a padded vector tile's
    (an innermost length that does not divide the extent, the other levels dividing the
    number of its tiles: 408 as (1, 13, 2, 16), the product 416)."""
    if step.extent is None or any(x is None for x in step.lengths):
        return None
    prod = 1
    for x in step.lengths:
        prod *= x
    if step.extent % prod == 0:
        rest = step.extent // prod
    else:  # a padded vector tile (``sketch_rules.padded_vector_length``): the levels tile its tiles
        innermost = step.lengths[-1]
        tiles = -(-step.extent // innermost)
        if not step.inner_to_outer or step.extent % innermost == 0 or tiles % (prod // innermost):
            return None
        rest = tiles // (prod // innermost)
    return [rest] + list(step.lengths) if step.inner_to_outer else list(step.lengths) + [rest]


def lengths_from_parts(step: SplitStep, parts: list[int]) -> tuple:
    return tuple(parts[1:]) if step.inner_to_outer else tuple(parts[:-1])


#: the phase of the random annotation a decision step belongs to (Ansor's init rules)
PHASE_LOCATION, PHASE_PARALLEL, PHASE_UNROLL, PHASE_VECTORIZE = range(4)


def decision_phase(step: Step, state: ir.State) -> int:
    """Which random-annotation rule made a step after the sketch (for crossover's merge)."""
    if isinstance(step, (ComputeAtStep, ComputeRootStep, ComputeInlineStep)):
        return PHASE_LOCATION
    if isinstance(step, PragmaStep):
        return PHASE_UNROLL
    if isinstance(step, AnnotationStep):
        return PHASE_PARALLEL if step.annotation == "parallel" else PHASE_VECTORIZE
    if isinstance(step, FuseStep):
        # a fuse belongs to the annotation that follows it on the same stage
        steps = state.steps
        at = next(i for i, s in enumerate(steps) if s is step)
        for later in steps[at + 1:]:
            if isinstance(later, AnnotationStep) and later.stage_id == step.stage_id:
                return PHASE_PARALLEL if later.annotation == "parallel" else PHASE_VECTORIZE
        return PHASE_VECTORIZE
    return PHASE_LOCATION


#: the kinds of step random annotation adds after a sketch: a program's decisions
DECISION_STEPS = (ComputeAtStep, ComputeRootStep, ComputeInlineStep, FuseStep, AnnotationStep, PragmaStep)


def sketch_length(state: ir.State, sketches: Sequence[ir.State]) -> tuple[int, int] | None:
    """(index of the sketch ``state`` was sampled from, number of its steps): the steps
    before that are the sketch's (tile lengths aside), the rest are decisions. The sketch
    is the longest whose steps the program's first steps follow and after which only
    decisions come (a shorter sketch can be a prefix of a longer one: the cache_read a
    packing sketch adds after the tiling of another); None if no sketch fits."""
    found = None
    for k, sketch in enumerate(sketches):
        n = len(sketch.steps)
        if len(state.steps) < n or (found is not None and n <= found[1]):
            continue
        if all(_same_shape(a, b) for a, b in zip(sketch.steps, state.steps[:n])) and \
                all(isinstance(s, DECISION_STEPS) for s in state.steps[n:]):
            found = k, n
    return found


def _same_shape(a: Step, b: Step) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, SplitStep):
        return (a.stage_id, a.iter_id, len(a.lengths), a.inner_to_outer) == \
               (b.stage_id, b.iter_id, len(b.lengths), b.inner_to_outer)
    return a == b
