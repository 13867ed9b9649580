"""Multi-level tiling of a stage ("SSRSRS") and tiling a consumer like its producer."""
from __future__ import annotations

import ir


def multi_level_tiling(state: ir.State, stage_id: int, structure: str) -> tuple[ir.State, list[int]]:
    """Split every space iterator into as many levels as ``structure`` has S's and every
    reduce iterator into its number of R's (lengths left unchosen), then order the levels
    as ``structure`` says. Returns the state and the ids of the space split steps."""
    n_space, n_reduce = structure.count("S"), structure.count("R")
    space_levels: list[list[str]] = [[] for _ in range(n_space)]
    reduce_levels: list[list[str]] = [[] for _ in range(n_reduce)]
    space_split_ids: list[int] = []
    names = [(it.name, it.kind) for it in state.stages[stage_id].iters]
    for name, kind in names:
        levels, count = (space_levels, n_space) if kind == "space" else (reduce_levels, n_reduce)
        if count == 1:
            levels[0].append(name)
            continue
        state = state.split(stage_id, name, [None] * (count - 1))
        if kind == "space":
            space_split_ids.append(len(state.steps) - 1)
        for level in range(count):
            levels[level].append(f"{name}.{level}")
    order: list[str] = []
    s_i = r_i = 0
    for c in structure:
        if c == "S":
            order.extend(space_levels[s_i])
            s_i += 1
        else:
            order.extend(reduce_levels[r_i])
            r_i += 1
    return state.reorder(stage_id, order), space_split_ids


def follow_tiling(state: ir.State, stage_id: int, split_step_ids: list[int], level: int) -> ir.State:
    """Tile a consumer's space iterators like the producer's first ``level`` tile levels
    (one follow_split per iterator) and order them level by level."""
    names = [it.name for it in state.stages[stage_id].iters]
    if len(names) != len(split_step_ids):
        raise ir.InvalidStep(f"follow_tiling: stage '{state.stages[stage_id].name}' has {len(names)} iterators, "
                             f"the producer {len(split_step_ids)} tiled space iterators")
    levels: list[list[str]] = [[] for _ in range(level + 1)]
    for name, step_id in zip(names, split_step_ids):
        state = state.follow_split(stage_id, name, step_id, level)
        for lv in range(level + 1):
            levels[lv].append(f"{name}.{lv}")
    return state.reorder(stage_id, [n for lv in levels for n in lv])
