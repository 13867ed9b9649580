"""Caps on a program read from a file (a tuning log, the records database), checked before
any lowering, so that replaying and building any one record costs bounded time and memory.

Logs travel between people: a crafted record such as ``["PR", 2, 1000000000]`` (unroll
nests of a billion iterations) or a split of length 10^9 that is then vectorised would
otherwise make lowering and LLVM run for minutes and exhaust memory. The caps are far
above what the search proposes (auto-unroll 1024 at most, vectors of
``max_vectorize_size`` lanes, 64: the back end's ``limits_violation`` drops a mutated child
over it), so a record of ours never meets them.

``check_step_records`` looks at the records alone (how many steps, how large a number,
how long a list, how many stages the steps add); ``check_state_limits`` at the program
they replay to (how long a vectorised or unrolled loop, how many iterations a stage's
unrolled loops make together). Both raise ``StepLimitExceeded``, an ``InvalidStep``: the
callers that replay records already skip those with a warning.
"""
from __future__ import annotations

import math

from .loops import InvalidStep
from .steps import STEP_TYPES, Step

#: steps of one program (the search's have at most a few hundred)
MAX_STEPS = 4096
#: any integer of a step record (ids, lengths, unroll steps)
MAX_INT = 1 << 31
#: entries of a list in a step record (split lengths, fused or reordered iterators)
MAX_LIST = 64
#: characters of a string in a step record (an annotation, a memory scope)
MAX_STRING = 64
#: ``auto_unroll_max_step`` (the search's largest: 1024 on a GPU, 512 on a CPU)
MAX_AUTO_UNROLL = 4096
#: steps that add a stage (cache read/write, rfactor) in one program
MAX_ADDED_STAGES = 64
#: the extent of one vectorised loop (the search's largest: ``max_vectorize_size``, 64)
MAX_VECTOR_LANES = 1024
#: iterations that a stage's unrolled and vectorised loops make together (the code they emit)
MAX_UNROLLED = 1 << 16


class StepLimitExceeded(InvalidStep):
    """A program read from a file is over one of the caps above: refused, never lowered."""


def check_step_records(records) -> None:
    """Refuse step records (JSON lists, as ``Step.record()`` writes them) that are over the
    caps: too many steps, numbers or lists too large, unknown tags, too many added stages."""
    if not isinstance(records, (list, tuple)):
        raise StepLimitExceeded(f"the steps are a {type(records).__name__}, expected a list of step records")
    if len(records) > MAX_STEPS:
        raise StepLimitExceeded(f"{len(records)} steps; a program read from a file may have at most {MAX_STEPS}")
    added = 0
    for number, rec in enumerate(records):
        if not isinstance(rec, (list, tuple)) or not rec or rec[0] not in STEP_TYPES:
            raise StepLimitExceeded(f"step {number} is {str(rec)[:80]}, not a step record "
                                    f"(known tags: {', '.join(sorted(STEP_TYPES))})")
        for value in rec[1:]:
            _check_value(value, number)
        if rec[0] == "PR" and len(rec) == 3 and isinstance(rec[2], int) and rec[2] > MAX_AUTO_UNROLL:
            raise StepLimitExceeded(f"step {number} {list(rec)}: auto_unroll_max_step {rec[2]} is over the cap "
                                    f"of {MAX_AUTO_UNROLL}")
        added += STEP_TYPES[rec[0]].added_stage is not Step.added_stage
    if added > MAX_ADDED_STAGES:
        raise StepLimitExceeded(f"the steps add {added} stages; a program read from a file may add at most "
                                f"{MAX_ADDED_STAGES}")


def _check_value(value, number: int) -> None:
    if isinstance(value, bool) or value is None:
        return
    if isinstance(value, int):
        if abs(value) > MAX_INT:
            raise StepLimitExceeded(f"step {number} holds the number {str(value)[:40]}, over the cap of {MAX_INT}")
    elif isinstance(value, str):
        if len(value) > MAX_STRING:
            raise StepLimitExceeded(f"step {number} holds a string of {len(value)} characters (cap {MAX_STRING})")
    elif isinstance(value, (list, tuple)):
        if len(value) > MAX_LIST:
            raise StepLimitExceeded(f"step {number} holds a list of {len(value)} entries (cap {MAX_LIST})")
        for v in value:
            if isinstance(v, (list, tuple)):
                raise StepLimitExceeded(f"step {number} holds a nested list; step records hold flat lists")
            _check_value(v, number)
    else:
        raise StepLimitExceeded(f"step {number} holds a {type(value).__name__} ({str(value)[:40]}); step records "
                                "hold numbers, strings, booleans and lists of them")


def check_state_limits(state) -> None:
    """Refuse a replayed program whose loops would make code too large to build: a loop
    longer than its stage's whole iteration space (a split length over the extent), a
    vectorised loop over ``MAX_VECTOR_LANES`` lanes, or unrolled and vectorised loops of a
    stage that make more than ``MAX_UNROLLED`` iterations together."""
    for stage in state.stages:
        if stage.is_placeholder:
            continue
        space = math.prod(stage.root_extents) if stage.root_extents else 1
        unrolled = 1
        for it in stage.iters:
            if it.extent > max(space, 1):
                raise StepLimitExceeded(f"stage '{stage.name}': loop {it.name} has {it.extent} iterations, more "
                                        f"than the stage's {space} (a split length over the loop's extent)")
            if it.annotation == "vectorize" and it.extent > MAX_VECTOR_LANES:
                raise StepLimitExceeded(f"stage '{stage.name}': a vectorised loop of {it.extent} lanes "
                                        f"(cap {MAX_VECTOR_LANES})")
            if it.annotation in ("vectorize", "unroll"):
                unrolled *= it.extent
        if unrolled > MAX_UNROLLED:
            raise StepLimitExceeded(f"stage '{stage.name}': its unrolled and vectorised loops make {unrolled} "
                                    f"iterations together (cap {MAX_UNROLLED})")
