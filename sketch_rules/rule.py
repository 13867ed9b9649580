"""The interface of a derivation rule, and what a rule may ask of the task."""
from __future__ import annotations

import enum
from dataclasses import dataclass

import ir


class Condition(enum.Enum):
    """What a rule says about a (state, stage) pair (Ansor's ConditionKind)."""
    PASS = 0                  # the rule does not apply; try the next one
    APPLY = 1                 # apply it, and let the following rules apply too (more sketches)
    APPLY_AND_SKIP_REST = 2   # apply it, and no other rule for this stage


@dataclass(frozen=True)
class SketchContext:
    """What rules may look at besides the state: the task and the search space (a
    ``sketch_rules.spaces.SearchSpace``: the task's target's, unless a caller asks for
    another's rules)."""
    task: ir.SearchTask
    space: object

    @property
    def hardware(self) -> ir.HardwareParams:
        return self.task.hardware


class SketchRule:
    """A derivation rule: ``condition`` on a (state, stage); ``apply`` returns the derived
    (state, next stage) pairs — several when a rule has alternatives (e.g. two fusion
    levels). Stages are visited from the last to the first; a next stage below 0 ends the
    derivation and the state is a sketch."""

    name = "rule"

    def condition(self, ctx: SketchContext, state: ir.State, stage_id: int) -> Condition:
        raise NotImplementedError

    def apply(self, ctx: SketchContext, state: ir.State, stage_id: int) -> list[tuple[ir.State, int]]:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"
