"""Search spaces: which derivation rules, init rules and unroll choices tune a target's
programs. A target's back end names its space (``ir.Backend.search_space``); targets
alike (two CPUs, two GPUs) share one. A target needing another space registers one here
(``register_search_space``); mutations per space are in ``evolution.mutation``."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import ir


@dataclass(frozen=True)
class SearchSpace:
    """``sketch_rules()`` and ``init_rules()`` make fresh rule lists (rules may keep state
    per search); ``auto_unroll_choices``: the ``auto_unroll_max_step`` values a program
    may take (init rule ``Unroll``, the unroll mutation); ``default_schedule(dag,
    hardware)``: the program an untuned workload runs."""
    name: str
    sketch_rules: Callable[[], list]
    init_rules: Callable[[], list]
    auto_unroll_choices: tuple[int, ...]
    default_schedule: Callable


_SPACES: dict[str, SearchSpace] = {}


def register_search_space(space: SearchSpace) -> SearchSpace:
    if space.name in _SPACES:
        raise ValueError(f"a search space named {space.name!r} is registered already")
    _SPACES[space.name] = space
    return space


def search_space(which) -> SearchSpace:
    """The space of a task (its target's), a target, or a space's name ("cpu", "gpu")."""
    if isinstance(which, SearchSpace):
        return which
    if isinstance(which, ir.SearchTask):
        which = which.target
    if isinstance(which, ir.Target):
        which = which.backend.search_space
    space = _SPACES.get(which)
    if space is None:
        raise ValueError(f"unknown search space {which!r}; expected one of {sorted(_SPACES)}")
    return space
