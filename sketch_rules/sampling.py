"""Random programs of a task: a sketch picked at random, completed by the init rules of
the task's search space (``annotation`` for CPUs, ``gpu_annotation`` for GPUs)."""
from __future__ import annotations

import numpy as np

import ir

from .rule import SketchContext
from .spaces import search_space


def sample_programs(task: ir.SearchTask, sketches: list[ir.State], n: int, rng: np.random.Generator,
                    init_rules=None, max_tries: int | None = None, space: str | None = None,
                    on_error=None) -> list[ir.State]:
    """Up to ``n`` unique random programs (unique by ``State.key``): pick a sketch at
    random, apply every init rule (by default those of the search ``space``, default the
    task's target's: "cpu", "gpu"); samples a
    rule rejects (``ir.InvalidStep``) are dropped. ``on_error(what, exception)``: called for
    a sample that raised anything else, which is then dropped too (without it, the
    exception propagates).

    Sampling stops early once the space looks exhausted: ``exhausted_after(found)``
    valid samples in a row repeated a program already found (a global pooling's space
    holds a dozen programs; drawing thousands of samples to fill ``n`` cost seconds a
    task). Samples a rule rejects do not count towards it; ``max_tries`` bounds them."""
    if not sketches:
        raise ValueError("sample_programs: no sketches to sample from")
    ctx = SketchContext(task, search_space(space or task))
    rules = init_rules if init_rules is not None else ctx.space.init_rules()
    out: dict[str, ir.State] = {}
    tries = repeats = 0
    max_tries = max_tries if max_tries is not None else 20 * n + 50
    while len(out) < n and tries < max_tries and repeats < exhausted_after(len(out)):
        tries += 1
        state = sketches[int(rng.integers(len(sketches)))]
        rule = None
        try:
            for rule in rules:
                state = rule.apply(ctx, state, rng)
            key = state.key
        except ir.InvalidStep:
            continue
        except Exception as err:  # noqa: BLE001 - reported, and the sample is dropped
            if on_error is None:
                raise
            on_error(f"sampling {getattr(rule, 'name', 'init rule')}", err)
            continue
        repeats = repeats + 1 if key in out else 0
        out.setdefault(key, state)
    return list(out.values())


def exhausted_after(found: int) -> int:
    """How many valid samples in a row must repeat one of the ``found`` programs before
    the space counts as exhausted: twice as many as were found, and at least 64. A program
    left out then is a rare one (a program drawn once in 64 samples escapes 64 draws in a
    row with a chance of 37 %), and it stays reachable by the search's mutations."""
    return max(64, 2 * found)
