"""The programs a workload runs untuned (no tuning record, no zero-trial program): one
per search space, deterministic and cheap, never a search (``SearchSpace.default_schedule``)."""
from __future__ import annotations

import ir

from . import analysis as A
from .gpu_annotation import bind_simple


#: parallel iterations enough to share among the threads: a loop nest that cannot vectorise
#: fuses only that many outer loops and keeps the rest serial inside, since a fused loop
#: pays a division per iteration to recover the indices it fused
_PARALLEL_ITERATIONS = 128


def _vector_lanes(extent: int) -> int:
    for lanes in (16, 8):
        if extent % lanes == 0 and extent > lanes:
            return lanes
    return 0


def _enough_parallel(space_iters) -> list[str]:
    """The leading space loops whose product first reaches ``_PARALLEL_ITERATIONS`` (all of
    them if it never does): e.g. the input layout transpose (1, 224, 224, 3) fuses (n, h) and
    runs (w, c) as plain loops, instead of one fused loop of 150528 divisions."""
    names, product = [], 1
    for it in space_iters:
        names.append(it.name)
        product *= it.extent
        if product >= _PARALLEL_ITERATIONS:
            break
    return names


def _annotate_stage(state: ir.State, sid: int, min_parallel_work: int) -> ir.State:
    """Parallel outer loops (with at least ``min_parallel_work`` iterations in all) and a
    vectorised innermost space loop (moved inside the reduction loops, so that each vector
    lane accumulates its own output)."""
    st = state.stages[sid]
    spaces = [it.name for it in st.iters if it.kind == "space"]
    reduces = [it.name for it in st.iters if it.kind == "reduce"]
    if not spaces:
        return state
    last = state.stages[sid].iters[len(spaces) - 1]
    outer, inner = spaces[:-1], None
    lanes = _vector_lanes(last.extent)
    if lanes:
        state = state.split(sid, last.name, [lanes])
        outer, inner = spaces[:-1] + [f"{last.name}.0"], f"{last.name}.1"
    elif last.extent in (2, 4, 8, 16) and not reduces:
        inner = last.name
    else:
        outer = _enough_parallel(st.iters[:len(spaces)])
    if reduces and inner is not None:
        state = state.reorder(sid, outer + reduces + [inner])
    if len(outer) > 1:
        state = state.fuse(sid, outer)
        outer = ["@".join(outer) + "@"]
    if outer and A.stage_work(state, sid) >= min_parallel_work:   # a parallel region wakes the threads
        state = state.parallel(sid, outer[0])
    if inner is not None:
        state = state.vectorize(sid, inner)
    return state


def _inlined(dag: ir.ComputeDAG) -> ir.State:
    """The naive program with cheap elementwise stages inlined (as Ansor's AlwaysInline)."""
    state = dag.init_state()
    for sid in reversed(range(len(state.stages))):
        if A.should_always_inline(state, sid):
            state = state.compute_inline(sid)
    return state


def _each_root_stage(state: ir.State, schedule) -> ir.State:
    """``schedule(state, stage)`` on every root compute stage; a stage where it does not
    apply (``InvalidStep``) keeps its loops."""
    for sid in range(len(state.stages)):
        st = state.stages[sid]
        if st.is_placeholder or st.compute_at != "root":
            continue
        try:
            state = schedule(state, sid)
        except ir.InvalidStep:
            pass
    return state


def annotate_naive_stages(state: ir.State, hardware) -> ir.State:
    """``state`` with every root compute stage whose loops are still its operation's own
    (none split, fused or annotated: no step scheduled it) annotated as the default schedule
    annotates it: a program carried over from a DAG of fewer operations
    (``evolution.transfer``) leaves the extra ones so, and a naive loop over a whole map or
    matrix runs serial and scalar (GPT-2's GELU after a dense layer: 128 x 3072 elements)."""
    least = hardware.min_parallel_work

    def naive(state: ir.State, sid: int) -> ir.State:
        st = state.stages[sid]
        if st.origin != "op" or len(st.iters) != len(st.op.axis) + len(st.op.reduce_axis) or \
                any(it.annotation != "none" for it in st.iters):
            return state
        return _annotate_stage(state, sid, least)
    return _each_root_stage(state, naive)


def cpu_default_schedule(dag: ir.ComputeDAG, hardware=None) -> ir.State:
    """The CPU program an untuned workload runs: cheap elementwise stages inlined, each
    remaining stage's outer space loops fused and parallel (when it has the work for
    threads: ``HardwareParams.min_parallel_work``, default this CPU's) and its innermost
    space loop vectorised when its extent allows; a stage where that does not apply keeps
    its naive loops."""
    least = (hardware or ir.HardwareParams.host()).min_parallel_work
    return _each_root_stage(_inlined(dag), lambda state, sid: _annotate_stage(state, sid, least))


def gpu_default_schedule(dag: ir.ComputeDAG, hardware) -> ir.State:
    """The GPU program an untuned workload runs: cheap elementwise stages inlined, each
    remaining stage's outer space loops fused and split into blocks of a warp's threads
    (the binding of the GPU's init rules for an untiled stage); reductions run serially
    in each thread."""
    return _each_root_stage(_inlined(dag), lambda state, sid: bind_simple(state, sid, hardware.warp_size))
