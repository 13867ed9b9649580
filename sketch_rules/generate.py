"""Sketch generation (Ansor 4.1): derivation rules applied from the last stage to the
first, over a queue of states; user rules registered globally or given per task."""
from __future__ import annotations

import ir

from .rule import Condition, SketchContext, SketchRule
from .spaces import search_space

#: globally registered rules: (rule, search space name, position), position = ("first",),
#: ("before", name) or ("after", name) relative to the built-in rules
_REGISTERED: list[tuple[SketchRule, str, tuple]] = []


def register_sketch_rule(rule: SketchRule, *, before: str | None = None, after: str | None = None,
                         space: str = "cpu") -> SketchRule:
    """Add a derivation rule to every task of search ``space`` ("cpu" or "gpu": the
    ``search_space`` of the targets' back ends). By default it is
    tried first; ``before="multi_level_tiling"`` or ``after="always_inline"`` place it
    relative to a built-in rule (by its ``name``). Returns the rule (for unregistering)."""
    if not isinstance(rule, SketchRule):
        raise TypeError(f"register_sketch_rule expects a SketchRule, got {type(rule).__name__}")
    if before is not None and after is not None:
        raise ValueError("give at most one of before= and after=")
    names = {r.name for r in search_space(space).sketch_rules()}
    anchor = before or after
    if anchor is not None and anchor not in names:
        raise ValueError(f"no built-in {space} rule named {anchor!r}; the built-in rules are {sorted(names)}")
    position = ("first",) if anchor is None else ("before" if before else "after", anchor)
    _REGISTERED.append((rule, space, position))
    return rule


def unregister_sketch_rule(rule: SketchRule) -> None:
    _REGISTERED[:] = [entry for entry in _REGISTERED if entry[0] is not rule]


def rules_for(space: str = "cpu", custom_rules=None) -> list[SketchRule]:
    """The rules of search ``space`` (a name, a task or a target) in the order they are
    tried: per-task custom rules, then the built-in rules with the registered ones placed
    where they asked to be."""
    space = search_space(space)
    rules = space.sketch_rules()
    for rule, name, position in _REGISTERED:
        if name != space.name:
            continue
        if position[0] == "first":
            rules.insert(0, rule)
            continue
        at = next(i for i, r in enumerate(rules) if r.name == position[1])
        rules.insert(at if position[0] == "before" else at + 1, rule)
    return list(custom_rules or []) + rules


def generate_sketches(task: ir.SearchTask, rules=None, space: str | None = None,
                      custom_rules=None) -> list[ir.State]:
    """All sketches of ``task``: terminal states of the derivation, unique by program text.
    ``rules`` replaces the rule list; ``custom_rules`` are tried before the others;
    ``space`` (a search space's name, "cpu" or "gpu") defaults to the task's target's."""
    ctx = SketchContext(task, search_space(space or task))
    rules = list(rules) if rules is not None else rules_for(ctx.space, custom_rules)
    init = task.dag.init_state()
    now = [(init, len(init.stages) - 1)]
    sketches: dict[str, ir.State] = {}
    while now:
        nxt = []
        for state, stage_id in now:
            if stage_id < 0:
                sketches.setdefault(state.key, state)
                continue
            for rule in rules:
                cond = rule.condition(ctx, state, stage_id)
                if cond is Condition.PASS:
                    continue
                nxt.extend(rule.apply(ctx, state, stage_id))
                if cond is Condition.APPLY_AND_SKIP_REST:
                    break
        now = nxt
    return list(sketches.values())
