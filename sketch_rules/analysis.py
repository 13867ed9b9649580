"""What the derivation rules ask of a (state, stage): the ComputeDAG's analyses, seen
through the steps already applied (inlined stages, cache stages, rfactor stages)."""
from __future__ import annotations

import math

import ir
from ir import expr as E
from ir.bounds import expand_reads


def is_output(state: ir.State, stage_id: int) -> bool:
    op = state.stages[stage_id].op
    return any(t.op is op for t in state.dag.tensors)


def is_strict_inlinable(state: ir.State, stage_id: int) -> bool:
    """Injective, no reduction, and either no expensive math or math that inlining does
    not repeat (``read_once_elementwise``): inlining it into its consumers costs nothing
    and removes a buffer (Ansor's AlwaysInline condition, which excludes all expensive
    math)."""
    st = state.stages[stage_id]
    if st.is_placeholder or st.reduce_axes:
        return False
    if not any(isinstance(e, E.Call) and e.func in E.TRANSCENDENTAL_FUNCS for e in E.walk(st.body)):
        return True
    return read_once_elementwise(state, stage_id)


def read_once_elementwise(state: ir.State, stage_id: int) -> bool:
    """The stage's one consumer reads it once per element, at its own index: inlined, its
    math runs once per element as before. An activation exported as two nodes (SiLU's
    sigmoid and multiply, GELU's erf and the multiplies after it) is such a stage; left as
    a buffer it gives the anchor (convolution, dense) two consumers, which keeps the
    anchor from being computed inside its epilogue's tiles: the whole output written,
    read back and written again (EfficientNet's 1x1 convolutions with SiLU)."""
    found = _elementwise_reads(state, stage_id)
    return found is not None and len(found[1]) == 1


def should_always_inline(state: ir.State, stage_id: int, guarded_reads: bool = True) -> bool:
    """A strictly inlinable stage that is not an output; with ``guarded_reads=False``, not
    one that reads under a condition on its indices either (``has_guarded_read``)."""
    st = state.stages[stage_id]
    return (not st.is_placeholder and st.compute_at != "inline" and not is_output(state, stage_id)
            and st.origin == "op" and is_strict_inlinable(state, stage_id)
            and (guarded_reads or not has_guarded_read(state, stage_id)))


def has_guarded_read(state: ir.State, stage_id: int) -> bool:
    """The stage reads a tensor only where a condition on its indices holds (padding,
    concatenation). Inlined into a convolution,
    that condition is evaluated at every read of its innermost loop; computed into a
    buffer first (at root or inside the consumer's outer tiles), it is evaluated once per
    element (MetaSchedule's AutoInline keeps such blocks on CPU for the same reason)."""
    st = state.stages[stage_id]
    if st.is_placeholder:
        return False
    return any(isinstance(e, E.Select) and not any(isinstance(c, E.TensorRead) for c in E.walk(e.cond))
               and any(isinstance(r, E.TensorRead) for branch in (e.t, e.f) for r in E.walk(branch))
               for e in E.walk(st.body))


def needs_multi_level_tiling(state: ir.State, stage_id: int) -> bool:
    """Data reuse (TVM's rule): two input tensors each miss a space axis in their reads
    (matmul's A misses j, B misses i), or one does and the stage reduces. A broadcast
    (bias_add's bias misses n, h, w) alone is not reuse worth tiling for."""
    st = state.stages[stage_id]
    if st.is_placeholder or st.compute_at == "inline":
        return False
    reads = [expand_reads(state, st.body, s.op.output) for s in state.stages
             if s.compute_at != "inline" and s is not st]
    return reads_have_reuse([r for r in reads if r], st.axes, bool(st.reduce_axes))


def reads_have_reuse(reads_per_tensor, axes, reduces: bool) -> bool:
    """TVM's data-reuse rule over the index tuples with which each input tensor is read:
    two tensors each miss a space axis, or one does and the op reduces."""
    n_missing = 0
    for accesses in reads_per_tensor:
        used = {id(v) for indices in accesses for i in indices for v in E.free_vars(i)}
        if any(id(ax) not in used and ax.extent > 1 for ax in axes):  # (one iteration: nothing to reuse)
            n_missing += 1
        if n_missing >= 2 or (n_missing >= 1 and reduces):
            return True
    return False


def contiguous_along_last_space_axis(state: ir.State, stage_id: int) -> bool:
    """A reduction of an op's own stage, untransformed and without data reuse, whose last
    space axis (of more than one iteration) is the last index of every read that moves
    with its reduce axes (constant weights aside; a value read once per output, as layer
    norm's variance reads the mean, does not count): what ``VectorInsideReduction``
    vectorises inside the reduce loops."""
    st = state.stages[stage_id]
    if (st.is_placeholder or st.compute_at == "inline" or not st.reduce_axes or st.origin != "op"
            or st.transforms or not st.axes or st.axes[-1].extent <= 1
            or needs_multi_level_tiling(state, stage_id)):
        return False
    last = st.axes[-1]
    reduce = {id(a) for a in st.reduce_axes}
    moving = [indices for s in state.stages
              if s.compute_at != "inline" and s is not st and not getattr(s.op, "constant", False)
              for indices in expand_reads(state, st.body, s.op.output)
              if any(id(v) in reduce for i in indices for v in E.free_vars(i))]
    return bool(moving) and all(indices[-1] is last for indices in moving)


def single_elementwise_consumer(state: ir.State, stage_id: int) -> int | None:
    """The one consumer (through inlined stages) that reads this stage elementwise, with
    the same space shape: the stage can be computed inside its tiles."""
    found = _elementwise_reads(state, stage_id)
    return found[0] if found is not None else None


def _elementwise_reads(state: ir.State, stage_id: int) -> tuple[int, tuple] | None:
    """(the one consumer, its reads of this stage) when that consumer reads it elementwise
    (``single_elementwise_consumer``), else None."""
    st = state.stages[stage_id]
    consumers = state.consumers(stage_id)
    if len(consumers) != 1 or is_output(state, stage_id) and st.origin == "op":
        return None
    target = state.stages[consumers[0]]
    if target.reduce_axes or target.op.shape != st.op.shape or len(target.axes) != len(st.axes):
        return None
    reads = expand_reads(state, target.body, st.op.output)
    if not reads:
        return None
    for indices in reads:
        if not all(at_axis(i, ax) for i, ax in zip(indices, target.axes)):
            return None
    return consumers[0], reads


def at_axis(index: E.Expr, axis: E.IterVar) -> bool:
    """Whether ``index`` is ``axis``'s own value: the axis, or 0 on an axis of one iteration
    (a broadcasting operator reads a batch of one at 0: ``(1, H, W, C) + (1, H, W, C)``
    is still elementwise)."""
    return index is axis or axis.extent == 1 and isinstance(index, E.Const) and index.value == 0


def has_cache_write_stage(state: ir.State, stage_id: int) -> bool:
    """Whether this stage is the cache of a cache_write (its consumer is the original)."""
    return state.stages[stage_id].origin == "cache_write"


def space_and_reduce_length(state: ir.State, stage_id: int) -> tuple[int, int]:
    space = reduce = 1
    for it in state.stages[stage_id].iters:
        if it.kind == "space":
            space *= it.extent
        else:
            reduce *= it.extent
    return space, reduce


def needs_rfactor(state: ir.State, stage_id: int, num_cores: int) -> bool:
    """More parallelism in the reduction than in the space loops (Ansor's NeedsRfactor)."""
    st = state.stages[stage_id]
    if st.is_placeholder or st.compute_at == "inline" or not st.reduce_axes or st.origin != "op":
        return False
    space, reduce = space_and_reduce_length(state, stage_id)
    if needs_multi_level_tiling(state, stage_id):
        return not (space > reduce or space > num_cores * 16)
    return reduce > 1 and reduce > num_cores


def stage_work(state: ir.State, stage_id: int) -> int:
    """Loop iterations of a stage and of the stages computed inside its loops (each
    counted as often as the loops around its attach point run): the work a parallel
    region around the stage would share."""
    iters = state.stages[stage_id].iters
    work = 1
    for it in iters:
        work *= it.extent
    for child in state.attached_to(stage_id):
        outer = 1
        for it in iters[:state.stages[child].attach[1] + 1]:
            outer *= it.extent
        work += outer * stage_work(state, child)
    return work


def is_tiled(state: ir.State, stage_id: int) -> bool:
    """Multi-level tiled by a sketch rule (its iterators carry split names)."""
    return any(t.kind == "split" for t in state.stages[stage_id].transforms)


def packing_consumer(task: ir.SearchTask, state: ir.State, stage_id: int) -> int | None:
    """The tiled reduction that would gain from reading input ``stage_id`` through a
    packed copy, or None. It gains when every read indexes the input's last (contiguous)
    dimension by space loops only and another dimension by the reduction: a tile then
    reads a narrow column panel of rows far apart (GEMM's B[k, j]), which a copy made
    inside the consumer's outer tiles turns into one contiguous block. Constant inputs are
    left to the layout rewrite, which packs them once for free."""
    st = state.stages[stage_id]
    if not st.is_placeholder or (st.op.constant and task.layout_rewrite):
        return None
    consumers = state.consumers(stage_id)
    if len(consumers) != 1 or consumers[0] not in state.readers(stage_id):
        return None
    target = state.stages[consumers[0]]
    if not is_tiled(state, consumers[0]) or not target.reduce_axes or not needs_multi_level_tiling(state, consumers[0]):
        return None
    space, reduce = set(target.axes), set(target.reduce_axes)
    reads = expand_reads(state, target.body, st.op.output)
    for indices in reads:
        if len(indices) < 2:
            return None
        last = {n for n in E.walk(indices[-1]) if isinstance(n, E.IterVar)}
        if not last or not last <= space:
            return None
        if not any(isinstance(n, E.IterVar) and n in reduce for i in indices[:-1] for n in E.walk(i)):
            return None
    return consumers[0] if reads else None


def parallel_region_starts(state: ir.State) -> int:
    """How many times one call of ``state`` starts a parallel region, counted for its worst
    parallel loop: the product of the extents of the loops around that loop (its stage's
    outer loops and, for a stage computed inside another, that stage's loops up to the
    attach point). 1 when every parallel loop is outermost, or none. A tile-size mutation
    can put a serial loop of 19 channel tiles around a stage's parallel loop (whose parallel
    sampling saw extent 1 there): 19 x 2 regions (of 7 and 49 iterations) a call for
    RegNet's 7x7 1x1 convolution, 6x slower than its runners-up, which the base model
    ranked first."""
    worst = 1
    for st in state.stages:
        if st.is_placeholder or st.compute_at == "inline":
            continue
        for pos, it in enumerate(st.iters):
            if it.annotation != "parallel":
                continue
            starts = math.prod(o.extent for o in st.iters[:pos])
            outer = st
            while outer.compute_at == "iter":
                target, at = outer.attach
                outer = state.stages[target]
                starts *= math.prod(o.extent for o in outer.iters[:at + 1])
            worst = max(worst, starts)
    return worst
