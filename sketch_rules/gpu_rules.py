"""GPU derivation rules (Ansor 4.3): "SSSRRSRS" tiling fused at level 3, shared-memory
cache reads and cross-thread reduction. They produce States with thread bindings as loop
annotations, which ``ir.cuda.lower`` lowers for the cuda target."""
from __future__ import annotations

import ir

from . import analysis as A
from .cpu_rules import (AddCacheWrite, AlwaysInline, MultiLevelTiling, MultiLevelTilingWithFusion,
                        SimplifyComputeWithConstTensor, SkipStage, split_fused_reduction)
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


class AddRfactorGPU(SketchRule):
    """Not in Ansor: a reduction whose space cannot fill the GPU (fewer points than SMs)
    and whose reduction is longer than a block's threads (a 2-norm of a whole matrix)
    reduces in two stages, one sketch beside cross-thread reduction alone. The fused
    reduce loop is split and its inner part factored out (``rfactor``) as the space of a
    stage of partial sums: neighbouring threads of many blocks sum neighbouring elements,
    each along the outer part; the partial sums are then reduced across threads (the
    original stage). The partial-sum stage is left as it is (thread binding spreads it
    over blocks), as the CPU's rfactor stage is."""
    name = "add_rfactor_gpu"

    def condition(self, ctx, state, stage_id):
        st = state.stages[stage_id]
        if (st.is_placeholder or st.compute_at == "inline" or not st.reduce_axes or st.transforms
                or st.origin != "op" or A.needs_multi_level_tiling(state, stage_id)):
            return Condition.PASS
        space, reduce = A.space_and_reduce_length(state, stage_id)
        hw = _gpu(ctx.hardware)
        return Condition.APPLY if space < hw.num_sms and reduce > hw.max_threads_per_block else Condition.PASS

    def apply(self, ctx, state, stage_id):
        s, fused, n_space = split_fused_reduction(state, stage_id)
        s = s.rfactor(stage_id, f"{fused}.1", n_space)
        # the rfactor stage took this index; the final reduction, now after it, reduces across threads
        (s, _), = CrossThreadReduction().apply(ctx, s, stage_id + 1)
        return [(s, stage_id - 1)]


class CrossThreadReduction(SketchRule):
    """A reduction with little space parallelism (for a tiled stage, a space no larger
    than a block's threads and smaller than the reduction): its fused reduce loop is split
    and the inner part bound to threadIdx.x (threads reduce together; their number is
    chosen by random annotation, a multiple of the warp size where one divides)."""
    name = "cross_thread_reduction"

    def condition(self, ctx, state, stage_id):
        st = state.stages[stage_id]
        if st.is_placeholder or st.compute_at == "inline" or not st.reduce_axes or st.transforms:
            return Condition.PASS
        space, reduce = A.space_and_reduce_length(state, stage_id)
        hw = _gpu(ctx.hardware)
        if A.needs_multi_level_tiling(state, stage_id):
            return Condition.APPLY if space <= hw.max_threads_per_block and space < reduce else Condition.PASS
        return Condition.APPLY if reduce > hw.warp_size else Condition.PASS

    def apply(self, ctx, state, stage_id):
        st = state.stages[stage_id]
        space = [it.name for it in st.iters if it.kind == "space"]
        reduce = [it.name for it in st.iters if it.kind == "reduce"]
        s = state.reorder(stage_id, space + reduce)
        if len(reduce) > 1:
            s = s.fuse(stage_id, reduce)
        fused = s.stages[stage_id].iters[-1].name
        s = s.split(stage_id, fused, [None])
        s = s.apply(ir.steps.AnnotationStep(stage_id, len(s.stages[stage_id].iters) - 1, "threadIdx.x"))
        return [(s, stage_id - 1)]


def _gpu(hw) -> ir.HardwareParams:
    """The GPU parameters rules read: a CPU task asking for GPU sketches gets a GPU's."""
    return hw if hw.is_gpu else ir.HardwareParams.cuda()


def gpu_rules() -> list[SketchRule]:
    return [AddCacheReadShared(), AlwaysInline(), SimplifyComputeWithConstTensor(), AddRfactorGPU(),
            CrossThreadReduction(), AddCacheWriteGPU(), MultiLevelTilingWithFusionGPU(), MultiLevelTiling(GPU_STRUCTURE),
            SkipStage()]
