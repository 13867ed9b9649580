"""GPU derivation rules (Ansor 4.3): "SSSRRSRS" tiling fused at level 3, shared-memory
cache reads and cross-thread reduction. They produce States with thread bindings as loop
annotations, which ``ir.lower_gpu`` lowers for the cuda target."""
from __future__ import annotations

import ir

from . import analysis as A
from .cpu_rules import (AddCacheWrite, AlwaysInline, MultiLevelTiling, MultiLevelTilingWithFusion,
                        SimplifyComputeWithConstTensor, SkipStage)
from .rule import Condition, SketchRule

GPU_STRUCTURE = "SSSRRSRS"


class AddCacheWriteGPU(AddCacheWrite):
    """On GPU every tiled output is computed into registers first (no alternative)."""

    def condition(self, ctx, state, stage_id):
        c = super().condition(ctx, state, stage_id)
        return Condition.APPLY_AND_SKIP_REST if c is Condition.APPLY else c


class MultiLevelTilingWithFusionGPU(MultiLevelTilingWithFusion):
    """Fuse the consumer at tile level 3 (below block, virtual thread and thread tiles)."""

    def __init__(self):
        super().__init__(GPU_STRUCTURE, levels=(3,))

    def condition(self, ctx, state, stage_id):
        c = super().condition(ctx, state, stage_id)
        return Condition.APPLY_AND_SKIP_REST if c is not Condition.PASS else c


class AddCacheReadShared(SketchRule):
    """Read an input of a tiled stage through shared memory: a cache_read stage computed
    inside the consumer's outermost reduce tile."""
    name = "add_cache_read_shared"

    def condition(self, ctx, state, stage_id):
        st = state.stages[stage_id]
        if st.compute_at == "inline" or st.origin == "cache_read":
            return Condition.PASS
        consumers = state.consumers(stage_id)
        if len(consumers) != 1 or consumers[0] not in state.readers(stage_id):
            return Condition.PASS  # only a direct producer of a single consumer
        target = consumers[0]
        if not A.needs_multi_level_tiling(state, target) or not A.is_tiled(state, target):
            return Condition.PASS
        if not any(it.kind == "reduce" for it in state.stages[target].iters):
            return Condition.PASS
        return Condition.APPLY_AND_SKIP_REST

    def apply(self, ctx, state, stage_id):
        target = state.consumers(stage_id)[0]
        s = state.cache_read(stage_id, "shared", [target])
        target += 1  # the cache stage was inserted right after this stage
        iters = s.stages[target].iters
        first_reduce = next(p for p, it in enumerate(iters) if it.kind == "reduce")
        last = first_reduce
        while last + 1 < len(iters) and iters[last + 1].kind == "reduce":
            last += 1
        s = s.compute_at(stage_id + 1, target, last)
        return [(s, stage_id)]


class CrossThreadReduction(SketchRule):
    """A reduction with little space parallelism (for a tiled stage, a space no larger
    than a block's threads and smaller than the reduction): its fused reduce loop is split
    by the warp size and the inner part bound to threadIdx.x (threads reduce together)."""
    name = "cross_thread_reduction"

    def condition(self, ctx, state, stage_id):
        st = state.stages[stage_id]
        if st.is_placeholder or st.compute_at == "inline" or not st.reduce_axes or st.transforms:
            return Condition.PASS
        space, reduce = A.space_and_reduce_length(state, stage_id)
        hw = ctx.hardware
        if A.needs_multi_level_tiling(state, stage_id):
            return Condition.APPLY if space <= _max_threads(hw) and space < reduce else Condition.PASS
        return Condition.APPLY if reduce > _warp_size(hw) else Condition.PASS

    def apply(self, ctx, state, stage_id):
        st = state.stages[stage_id]
        space = [it.name for it in st.iters if it.kind == "space"]
        reduce = [it.name for it in st.iters if it.kind == "reduce"]
        s = state.reorder(stage_id, space + reduce)
        if len(reduce) > 1:
            s = s.fuse(stage_id, reduce)
        fused = s.stages[stage_id].iters[-1].name
        s = s.split(stage_id, fused, [_warp_size(ctx.hardware)])
        s = s.apply(ir.steps.AnnotationStep(stage_id, len(s.stages[stage_id].iters) - 1, "threadIdx.x"))
        return [(s, stage_id - 1)]


def _warp_size(hw) -> int:
    return hw.warp_size or 32  # a CPU task asking for GPU sketches gets a GPU's defaults


def _max_threads(hw) -> int:
    return hw.max_threads_per_block or 1024


def gpu_rules() -> list[SketchRule]:
    return [AddCacheReadShared(), AlwaysInline(), SimplifyComputeWithConstTensor(), CrossThreadReduction(),
            AddCacheWriteGPU(), MultiLevelTilingWithFusionGPU(), MultiLevelTiling(GPU_STRUCTURE), SkipStage()]
