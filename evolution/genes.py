"""A program's genes are its transform steps: helpers to rebuild a program from edited
steps and to tell the steps of the sketch from the random annotation's decisions."""
from __future__ import annotations

from collections import OrderedDict
from typing import Sequence

import ir
from ir.steps import (AnnotationStep, ComputeAtStep, ComputeInlineStep, ComputeRootStep, FuseStep, PragmaStep,
                      SplitStep, Step)


class ReplayChains:
    """The States a replay went through, per program it made (by identity; at most
    ``limit`` programs, the oldest forgotten first), so that a child that keeps the first
    ``k`` steps of its parent is replayed from its parent's State after step ``k``, and
    pays only for the steps after it (a mutation edits one step; the steps before it are
    often a third of the program)."""

    def __init__(self, limit: int = 6144):
        self.limit = limit
        self._chains: OrderedDict = OrderedDict()  # id(program) -> (program, States after 0..n-1 steps)

    def clear(self) -> None:
        self._chains.clear()

    def replay(self, dag, steps: Sequence[Step], parent: ir.State | None = None) -> ir.State | None:
        """``ir.State.from_steps(dag, steps)`` (the same program), starting from the longest
        prefix of ``steps`` that ``parent``'s replay went through; None if a step does not
        apply."""
        steps = tuple(steps)
        chain = self._chains.get(id(parent)) if parent is not None else None
        prefix: list = []
        if chain is not None and chain[0] is parent:
            shared = _common_prefix(parent.steps, steps)
            prefix = list(chain[1][:min(shared, len(steps) - 1) + 1])
        states = prefix or [ir.State.initial(dag)]

        def keep(state):  # the step after may settle this State's regions: keep it as made
            states.append(state.snapshot())

        try:
            child = ir.State.from_steps(dag, steps, start=states[-1], trace=keep)
        except ir.InvalidStep:
            return None
        states.pop()  # the last is the program itself
        self._chains[id(child)] = (child, tuple(states))
        if len(self._chains) > self.limit:
            self._chains.popitem(last=False)
        return child


def _common_prefix(a: tuple, b: tuple) -> int:
    n = 0
    for x, y in zip(a, b):
        if x is not y and x != y:
            break
        n += 1
    return n


_CHAINS = ReplayChains()


def replay(dag, steps: Sequence[Step], parent: ir.State | None = None) -> ir.State | None:
    """``ir.State.from_steps(dag, steps)``, or None if a step does not apply (the edit
    made the program invalid). With ``parent`` (the program the steps were edited from),
    the steps it shares with the parent are not applied again (``ReplayChains``)."""
    return _CHAINS.replay(dag, steps, parent)


def with_step(state: ir.State, index: int, step: Step | None) -> ir.State | None:
    """``state`` rebuilt with step ``index`` replaced (or removed, for None)."""
    steps = list(state.steps)
    if step is None:
        del steps[index]
    else:
        steps[index] = step
    return replay(state.dag, steps, parent=state)


def split_parts(step: SplitStep) -> list[int] | None:
    """All tile lengths of a split, outermost first (the derived one included), or None
    when its extent is unknown or its lengths are not exact."""
    if step.extent is None or any(x is None for x in step.lengths):
        return None
    prod = 1
    for x in step.lengths:
        prod *= x
    if step.extent % prod:
        return None
    rest = step.extent // prod
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
