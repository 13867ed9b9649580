"""The CPU derivation rules of Ansor's Table 1, in the order they are tried."""
from __future__ import annotations

from . import analysis as A
from .rule import Condition, SketchRule
from .tiling import follow_tiling, multi_level_tiling

CPU_STRUCTURE = "SSRSRS"


class SkipStage(SketchRule):
    """Rule 1: leave the stage as it is and go on to the previous one."""
    name = "skip_stage"

    def condition(self, ctx, state, stage_id):
        return Condition.APPLY

    def apply(self, ctx, state, stage_id):
        return [(state, stage_id - 1)]


class AlwaysInline(SketchRule):
    """Rule 2: inline a strictly inlinable (elementwise, cheap) stage into its consumers.
    With ``guarded_reads=False`` (the CPU rules) a stage that reads under a condition on
    its indices (padding) is left to random annotation, which computes it at root, inside
    one of its consumer's outer loops, or inlined: on CPU a convolution with its padding
    inlined pays the bounds check at every read (C2D-1x224x224x3x64-k7s2p3, one tiling:
    78 GFLOPS inlined, 111 computed at root)."""
    name = "always_inline"

    def __init__(self, guarded_reads: bool = True):
        self.guarded_reads = guarded_reads

    def condition(self, ctx, state, stage_id):
        inline = A.should_always_inline(state, stage_id, self.guarded_reads)
        return Condition.APPLY_AND_SKIP_REST if inline else Condition.PASS

    def apply(self, ctx, state, stage_id):
        return [(state.compute_inline(stage_id), stage_id - 1)]


class MultiLevelTiling(SketchRule):
    """Rule 3: tile a stage with data reuse as "SSRSRS" (lengths chosen later)."""
    name = "multi_level_tiling"

    def __init__(self, structure: str = CPU_STRUCTURE):
        self.structure = structure

    def condition(self, ctx, state, stage_id):
        return Condition.APPLY_AND_SKIP_REST if A.needs_multi_level_tiling(state, stage_id) else Condition.PASS

    def apply(self, ctx, state, stage_id):
        return [(multi_level_tiling(state, stage_id, self.structure)[0], stage_id - 1)]


class MultiLevelTilingWithFusion(SketchRule):
    """Rule 4: tile the stage and compute it inside its elementwise consumer's tiles, at
    each of the fusion levels (1 and 2 on CPU): one sketch per level. Forced (no plain
    tiling alternative) when the consumer is the stage's own cache_write copy."""
    name = "multi_level_tiling_with_fusion"

    def __init__(self, structure: str = CPU_STRUCTURE, levels: tuple[int, ...] = (1, 2)):
        self.structure = structure
        self.levels = levels

    def condition(self, ctx, state, stage_id):
        if not A.needs_multi_level_tiling(state, stage_id) or A.single_elementwise_consumer(state, stage_id) is None:
            return Condition.PASS
        return Condition.APPLY_AND_SKIP_REST if A.has_cache_write_stage(state, stage_id) else Condition.APPLY

    def apply(self, ctx, state, stage_id):
        target = A.single_elementwise_consumer(state, stage_id)
        base, split_ids = multi_level_tiling(state, stage_id, self.structure)
        out = []
        for level in self.levels:
            if self.structure[level - 1] != "S":
                continue
            s = follow_tiling(base, target, split_ids, level)
            s = s.compute_at(stage_id, target, level * len(split_ids) - 1)
            out.append((s, stage_id - 1))
        return out


class AddCacheWrite(SketchRule):
    """Rule 5: a stage with data reuse but no fusible consumer (typically the output)
    computes into a cache stage, which Rule 4 then tiles inside the copy-out's tiles."""
    name = "add_cache_write"

    def condition(self, ctx, state, stage_id):
        if (A.needs_multi_level_tiling(state, stage_id) and A.single_elementwise_consumer(state, stage_id) is None
                and state.stages[stage_id].origin == "op" and not state.stages[stage_id].transforms):
            return Condition.APPLY
        return Condition.PASS

    def apply(self, ctx, state, stage_id):
        # the cache stage takes this index; the original (now a copy) moves one up
        return [(state.cache_write(stage_id, "local"), stage_id)]


class AddRfactor(SketchRule):
    """Rule 6: a reduction with little space parallelism: fuse its reduce loops, split,
    and factor one part out into a stage of its own (two sketches: the inner or the outer
    part factored; the inner one reordered innermost, for vectorisation)."""
    name = "add_rfactor"

    def condition(self, ctx, state, stage_id):
        if A.needs_rfactor(state, stage_id, ctx.hardware.num_cores) and not A.has_cache_write_stage(state, stage_id):
            return Condition.APPLY
        return Condition.PASS

    def apply(self, ctx, state, stage_id):
        base, fused, n_space = split_fused_reduction(state, stage_id)
        out = []
        for part in (f"{fused}.0", f"{fused}.1"):
            s = base.rfactor(stage_id, part, n_space)
            rf = s.stages[stage_id]  # the new rf stage takes this index
            if part.endswith(".1"):
                names = [it.name for it in rf.iters]
                factor = names[n_space]
                s = s.reorder(stage_id, names[:n_space] + names[n_space + 1:] + [factor])
            out.append((s, stage_id - 1))
        return out


class VectorInsideReduction(SketchRule):
    """Not in Ansor: a reduction without data reuse whose inputs are contiguous along its
    last space axis, not along its reduce axes (NHWC global pooling: the channels are
    innermost in memory, the sum runs over H and W), split that axis and move its inner
    part inside the reduce loops, to be vectorised: every read is a contiguous vector,
    where Ansor's sketches (the stage as it is, or rfactored) read it one element, or one
    gather, a stride apart. Where that axis spans at least a vector register, the only
    sketch: the others' programs read strided and give only the threads a sum over few
    channels could use, and the base model, which has seen few such reductions, ranked
    them first (EfficientNet-B0's poolings: 1.6 ms where these take 0.1); a narrower axis
    gets this sketch beside the others."""
    name = "vector_inside_reduction"

    def condition(self, ctx, state, stage_id):
        if not A.contiguous_along_last_space_axis(state, stage_id):
            return Condition.PASS
        wide = state.stages[stage_id].axes[-1].extent >= ctx.hardware.vector_lanes
        return Condition.APPLY_AND_SKIP_REST if wide else Condition.APPLY

    def apply(self, ctx, state, stage_id):
        iters = state.stages[stage_id].iters
        space = [it.name for it in iters if it.kind == "space"]
        reduce = [it.name for it in iters if it.kind == "reduce"]
        s = state.split(stage_id, space[-1], [None])
        return [(s.reorder(stage_id, space[:-1] + [f"{space[-1]}.0"] + reduce + [f"{space[-1]}.1"]), stage_id - 1)]


def split_fused_reduction(state, stage_id: int):
    """Reorder a stage's loops as space then reduce, fuse the reduce loops and split the
    fused one in two (length chosen later): what rfactor rules start from. Returns the
    state, the fused loop's name (its parts are NAME.0 and NAME.1) and the number of
    space loops."""
    st = state.stages[stage_id]
    space = [it.name for it in st.iters if it.kind == "space"]
    reduce = [it.name for it in st.iters if it.kind == "reduce"]
    s = state.reorder(stage_id, space + reduce) if [it.name for it in st.iters] != space + reduce else state
    if len(reduce) > 1:
        s = s.fuse(stage_id, reduce)
    fused = s.stages[stage_id].iters[-1].name
    return s.split(stage_id, fused, [None]), fused, len(space)


class SimplifyComputeWithConstTensor(SketchRule):
    """For ops marked ``attrs["simplify_const_tensor_indices"] = [axis names]`` (e.g. the
    transform matrices of Winograd): unroll those axes innermost and tile the other space
    axes in three levels, so that reads of the constant tensor fold to constants."""
    name = "simplify_compute_with_const_tensor"
    KEY = "simplify_const_tensor_indices"

    def condition(self, ctx, state, stage_id):
        st = state.stages[stage_id]
        if st.is_placeholder or st.compute_at == "inline" or not st.op.attrs.get(self.KEY) or st.transforms:
            return Condition.PASS
        return Condition.APPLY_AND_SKIP_REST

    def apply(self, ctx, state, stage_id):
        const_names = set(state.stages[stage_id].op.attrs[self.KEY])
        levels: list[list[str]] = [[], [], []]
        unrolled: list[str] = []
        for it in list(state.stages[stage_id].iters):
            if it.name in const_names:
                unrolled.append(it.name)
            elif it.kind == "space":
                state = state.split(stage_id, it.name, [None, None])
                for lv in range(3):
                    levels[lv].append(f"{it.name}.{lv}")
            else:
                levels[2].append(it.name)
        state = state.reorder(stage_id, levels[0] + levels[1] + levels[2] + unrolled)
        for name in unrolled:
            state = state.unroll(stage_id, name)
        return [(state, stage_id - 1)]


class AddCacheReadPack(SketchRule):
    """Not in Ansor: read an input of a tiled reduction through a local copy (a second
    sketch beside the one without it), which random annotation computes inside one of the
    consumer's tiles. The copy holds the tile's column panel contiguously, as BLAS packs
    GEMM's B; for inputs that are not constant (constants get the layout rewrite). The
    copy's place (how large the panel is, how often it is made) is a mutable decision."""
    name = "add_cache_read_pack"

    def condition(self, ctx, state, stage_id):
        return Condition.APPLY if A.packing_consumer(ctx.task, state, stage_id) is not None else Condition.PASS

    def apply(self, ctx, state, stage_id):
        target = A.packing_consumer(ctx.task, state, stage_id)
        return [(state.cache_read(stage_id, "local", [target]), stage_id - 1)]


def cpu_rules() -> list[SketchRule]:
    """The built-in CPU rules: Ansor's, in its order, with the vector-inside-reduction
    rule before rfactor (which it may rule out) and the packing rule before the last (skip)."""
    return [AlwaysInline(guarded_reads=False), SimplifyComputeWithConstTensor(), VectorInsideReduction(),
            AddRfactor(), AddCacheWrite(), MultiLevelTilingWithFusion(), MultiLevelTiling(), AddCacheReadPack(),
            SkipStage()]
