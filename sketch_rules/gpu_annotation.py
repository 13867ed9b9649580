"""Random annotation for the GPU (Ansor's GPU initial-population rules): fill tile sizes,
bind loops to blocks, virtual threads and threads, choose the unrolling. The only
random choices are the tile sizes and the unroll step; thread binding follows the tile
structure, and a program that breaks a block's limits is rejected (``InvalidStep``).

- tile sizes: a tiled stage's space tiles are drawn until the block they make is within
  the device's limits (``FillTileSizeGPU``);
- a multi-level tiled root ("SSSRRSRS" and the stage fused into it): the fused ``.0``
  tiles are the blocks, the ``.1`` tiles virtual threads, the ``.2`` tiles threads;
- a shared-memory copy: all its loops fused and split by the thread count of its
  consumer's tiles (``follow_fused_split``), the inner part bound to threads, so that
  the block loads its tile cooperatively (plus an inner loop of 1 for vectorisation that
  mutation may lengthen);
- a cross-thread reduction: its outer space loops fused into blocks;
- any other root stage: its outer space loops fused and split by the warp size into
  blocks and threads.
"""
from __future__ import annotations

from dataclasses import replace

import ir
from ir.bounds import SHARED_SCOPE, storage_scope
from ir.cuda.lower import MAX_THREAD_LOCAL_BYTES, block_limits_violation
from ir.steps import AnnotationStep, CacheReadStep, CacheWriteStep, FollowFusedSplitStep, RfactorStep, SplitStep

from . import analysis as A
from .annotation import FillTileSize, InitRule, Unroll, divisors, factorizations


def _bind(state: ir.State, stage_id: int, iter_id: int, binding: str) -> ir.State:
    return state.apply(AnnotationStep(stage_id, iter_id, binding))


def _fuse(state: ir.State, stage_id: int, positions: list[int]) -> ir.State:
    return state.fuse(stage_id, positions) if len(positions) > 1 else state


def has_cross_thread_reduction(stage) -> bool:
    return any(it.kind == "reduce" and it.annotation == "threadIdx.x" for it in stage.iters)


def outer_space_positions(state: ir.State, stage_id: int) -> list[int]:
    """The outer loops ``FuseAllOuterSpaceIterators`` fuses: space, unannotated, up to the
    first loop that has stages computed inside it."""
    st = state.stages[stage_id]
    attach = {state.stages[c].attach[1] for c in state.attached_to(stage_id)}
    out = []
    for pos, it in enumerate(st.iters):
        if it.kind == "reduce" or it.annotation != "none" or (pos - 1) in attach:
            break
        out.append(pos)
    return out


def spatial_split_steps(state: ir.State, stage_id: int) -> list[int]:
    """The ids of the split steps that tiled the space axes of stage ``stage_id`` (the
    first of its splits, one per space axis, as multi-level tiling makes them), found
    by following the stage's index back through the steps that inserted stages."""
    sid, found = stage_id, []
    for i in range(len(state.steps) - 1, -1, -1):
        step = state.steps[i]
        if isinstance(step, (CacheReadStep, CacheWriteStep, RfactorStep)):
            inserted = step.stage_id + 1 if isinstance(step, CacheReadStep) else step.stage_id
            if sid == inserted:
                break  # the stage was made by this step: nothing earlier names it
            if sid > inserted:
                sid -= 1
        elif isinstance(step, SplitStep) and step.stage_id == sid:
            found.append(i)
    found.reverse()
    return found[:len(state.stages[stage_id].axes)]


#: draws of a tiled stage's tile sizes before a sample is given up
TILE_DRAWS = 200


class FillTileSizeGPU(FillTileSize):
    """``FillTileSize`` for the GPU's "SSSRRSRS" tiles: most random factorisations give a
    block too many virtual threads, too few or too many threads, or a thread too large a
    register tile, which thread binding would then reject after replaying the program.
    The space tiles of each stage (its splits into five parts: block, virtual thread,
    thread and two register levels) are drawn together, as numbers, until their products
    are within the device's limits; the program is replayed once."""
    name = "fill_tile_size"

    def apply(self, ctx, state, rng):
        hw = ctx.hardware
        limit = hw.max_innermost_split_factor
        steps = list(state.steps)
        todo = [i for i, s in enumerate(steps) if isinstance(s, SplitStep) and any(x is None for x in s.lengths)]
        groups: dict[int, list[int]] = {}
        for i in todo:
            if len(steps[i].lengths) == 4:
                groups.setdefault(steps[i].stage_id, []).append(i)
        chosen: dict[int, tuple] = {}
        current = ir.State.initial(state.dag)
        for i, step in enumerate(steps):
            if i in todo and i not in chosen:
                group = groups.get(step.stage_id) if len(step.lengths) == 4 else None
                if group:  # the axes' extents (recorded when the sketch split them) do not depend on choices
                    chosen.update(self._draw_tiles(hw, [steps[j] for j in group], group, limit, rng))
                else:
                    extent = current.stages[step.stage_id].iters[step.iter_id].extent
                    schemes = _parallel_split_choices(steps, i, extent, hw) or \
                        factorizations(extent, len(step.lengths), limit)
                    chosen[i] = schemes[int(rng.integers(len(schemes)))]
            current = (replace(step, lengths=chosen[i]) if i in chosen else step).apply(current)
        return current

    @staticmethod
    def _draw_tiles(hw, splits, ids, limit, rng) -> dict:
        for _ in range(TILE_DRAWS):
            lengths = []
            for step in splits:
                schemes = factorizations(step.extent, 4, limit)
                lengths.append(schemes[int(rng.integers(len(schemes)))])
            if _tiles_fit(hw, lengths, [step.extent for step in splits]):
                return dict(zip(ids, lengths))
        raise ir.InvalidStep(f"no tile sizes within the block's limits in {TILE_DRAWS} draws")


def _parallel_split_choices(steps, i: int, extent: int, hw) -> list[tuple] | None:
    """The lengths a split whose inner part runs in parallel may take (it is no register
    tile, so the innermost limit does not hold): the threads of a cross-thread reduction
    (the next step binds the part to threadIdx.x; multiples of the warp size up to a
    block, where one divides the loop) or the partial sums of an rfactor (the next step
    factors it out; at least a warp of them). None for any other split."""
    step, nxt = steps[i], steps[i + 1] if i + 1 < len(steps) else None
    if len(step.lengths) != 1 or nxt is None or nxt.stage_id != step.stage_id:
        return None
    options = divisors(extent)
    if isinstance(nxt, RfactorStep):
        return [(d,) for d in options if d >= hw.warp_size] or [(d,) for d in options]
    if isinstance(nxt, AnnotationStep) and nxt.annotation == "threadIdx.x":
        fit = [d for d in options if d <= hw.max_threads_per_block]
        warps = [d for d in fit if d % hw.warp_size == 0]
        return [(d,) for d in (warps or fit)]
    return None


def _tiles_fit(hw, lengths: list[tuple], extents: list[int]) -> bool:
    """Whether the space tiles of one stage (lengths: virtual thread, thread, two register
    levels per axis) give a block InitThreadBind accepts and a register tile that fits."""
    vthreads = threads = registers = total = 1
    for (v, t, r1, r2), extent in zip(lengths, extents):
        vthreads *= v
        threads *= t
        registers *= r1 * r2
        total *= extent
    if vthreads > hw.max_vthread_extent or threads > hw.max_threads_per_block:
        return False
    if total > 2 * hw.warp_size and threads < hw.warp_size:
        return False
    return registers * vthreads * 4 <= MAX_THREAD_LOCAL_BYTES


def bind_simple(state: ir.State, stage_id: int, warp_size: int) -> ir.State:
    """An untiled root stage's outer space loops fused and split by the warp size into
    blocks and threads (one block of threads when they fit in a warp)."""
    outer = outer_space_positions(state, stage_id)
    if not outer:
        return state
    state = _fuse(state, stage_id, outer)
    if state.stages[stage_id].iters[outer[0]].extent <= warp_size:
        return _bind(state, stage_id, outer[0], "threadIdx.x")
    state = state.split(stage_id, outer[0], [warp_size])
    state = _bind(state, stage_id, outer[0], "blockIdx.x")
    return _bind(state, stage_id, outer[0] + 1, "threadIdx.x")


class InitThreadBind(InitRule):
    """Ansor's InitThreadBind (see the module docstring)."""
    name = "thread_bind"

    def apply(self, ctx, state, rng):
        tiled_roots = {st.attach[0] for sid, st in enumerate(state.stages)
                       if st.compute_at == "iter" and A.needs_multi_level_tiling(state, sid)}
        for stage_id in range(len(state.stages) - 1, -1, -1):
            st = state.stages[stage_id]
            if st.is_placeholder or st.compute_at == "inline":
                continue
            if has_cross_thread_reduction(st):
                if st.compute_at == "root":
                    outer = outer_space_positions(state, stage_id)
                    if outer:
                        state = _bind(_fuse(state, stage_id, outer), stage_id, outer[0], "blockIdx.x")
                continue
            if any(it.annotation == "threadIdx.x" for it in st.iters):
                continue
            if st.compute_at == "root" and stage_id in tiled_roots:
                state = self._bind_tiled(ctx, state, stage_id)
            elif st.compute_at == "root":
                state = bind_simple(state, stage_id, ctx.hardware.warp_size)
            elif st.compute_at == "iter" and storage_scope(st) == SHARED_SCOPE:
                state = self._cooperative_fetch(state, stage_id)
        return state

    def _bind_tiled(self, ctx, state, stage_id):
        hw = ctx.hardware
        st = state.stages[stage_id]
        n_axes = len(st.axes)
        total = 1
        for n in st.op.shape:
            total *= n
        for level, binding in enumerate(("blockIdx.x", "vthread", "threadIdx.x")):
            iters = state.stages[stage_id].iters
            positions = []
            for p in range(level, min(level + n_axes, len(iters))):
                if not iters[p].name.endswith(f".{level}"):
                    break
                positions.append(p)
            if not positions:
                raise ir.InvalidStep(f"thread binding: stage '{st.name}' has no tile level {level}")
            state = _fuse(state, stage_id, positions)
            extent = state.stages[stage_id].iters[level].extent
            if binding == "vthread" and extent > hw.max_vthread_extent:
                raise ir.InvalidStep(f"thread binding: {extent} virtual threads (at most {hw.max_vthread_extent})")
            if binding == "threadIdx.x" and total > 2 * hw.warp_size and extent < hw.warp_size:
                raise ir.InvalidStep(f"thread binding: {extent} threads, fewer than a warp")
            state = _bind(state, stage_id, level, binding)
        return state

    def _cooperative_fetch(self, state, stage_id):
        target = state.stages[stage_id].attach[0]
        split_ids = spatial_split_steps(state, target)
        state = _fuse(state, stage_id, list(range(len(state.stages[stage_id].iters))))
        state = state.split(stage_id, 0, [1])
        state = state.vectorize(stage_id, 1)
        state = state.apply(FollowFusedSplitStep(stage_id, 0, tuple(split_ids), 1, True))
        return _bind(state, stage_id, 1, "threadIdx.x")


class CheckGPULimits(InitRule):
    """Reject a sampled program that breaks the device's limits of a block."""
    name = "check_gpu_limits"

    def apply(self, ctx, state, rng):
        why = block_limits_violation(state, ctx.hardware)
        if why is not None:
            raise ir.InvalidStep(f"over the device's limits: {why}")
        return state


def gpu_init_rules() -> list[InitRule]:
    """Ansor's initial-population rules for GPU, in order, and the check of a block's limits."""
    return [FillTileSizeGPU(), InitThreadBind(), Unroll(), CheckGPULimits()]
