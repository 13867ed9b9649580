"""Bound inference: the region of a stage's tensor that one iteration of its attach point
needs, so that a stage computed inside another computes (and stores) only that region.

The region of each dimension is ``start + [0, extent)`` where ``start`` is an expression of
the loop variables outside the attach point and ``extent`` a constant: the reads of the
consumer are affine-decomposed, loop variables inside the attach point contribute their
interval, those outside stay symbolic, and anything not affine is relaxed to its whole
range (always safe, never wrong).
"""
from __future__ import annotations

from . import expr as E
from .frozen import replace
from .memo import IdentityMemo
from .simplify import Simplifier, interval, split_affine, structural_key


#: the storage scope of a cache_read stage named ``NAME.shared``: GPU shared memory, one
#: copy per thread block (every other attached stage is private to a thread)
SHARED_SCOPE = "shared"
#: GPU bindings whose loops a shared stage covers entirely (TVM's rank rule: threads and
#: virtual threads of a block share it; blocks do not)
BLOCK_SHARED_BINDINGS = ("threadIdx.x", "vthread")


def storage_scope(stage) -> str:
    """"shared" for a cache_read stage in GPU shared memory, else "local" (per thread)."""
    return SHARED_SCOPE if stage.origin == "cache_read" and stage.name.endswith("." + SHARED_SCOPE) else "local"


def all_iter_bounds(state) -> dict:
    bounds = {}
    for st in state.stages:
        for it in st.iters:
            bounds[it.var] = (0, it.extent - 1)
    return bounds


#: reads by what they depend on (see ``expand_reads``)
_READS = IdentityMemo(50_000)


def expand_reads(state, body: E.Expr, tensor) -> tuple[tuple[E.Expr, ...], ...]:
    """Index tuples of every read of ``tensor`` in ``body``, looking through inlined stages.
    Memoised by what they depend on: the body, the tensor and the inlined stages'
    operations, bodies and axes (the sketch rules and bound inference ask for the same
    reads of every program of a sketch)."""
    inline = [st for st in state.raw_stages if st.compute_at == "inline"]  # (settling never touches them)
    sources = [body, tensor] + [x for st in inline for x in (st.op, st.body, st.axes)]
    return _READS.get(sources, None, lambda: _expand_reads(body, tensor, inline))


def _expand_reads(body: E.Expr, tensor, inline_stages) -> tuple[tuple[E.Expr, ...], ...]:
    inline = {id(st.op): st for st in inline_stages}
    out: list[tuple] = []

    def visit(e: E.Expr, mapping: dict):
        for node in E.walk(e):
            if not isinstance(node, E.TensorRead):
                continue
            indices = tuple(E.substitute(i, mapping) for i in node.indices)
            if node.tensor is tensor:
                out.append(indices)
            st = inline.get(id(node.tensor.op))
            if st is not None:
                visit(st.body, dict(zip(st.axes, indices)))

    visit(body, {})
    return tuple(out)


def scope_stages(state, target: int, pos: int) -> list[int]:
    """Stages computed inside loop ``pos`` of stage ``target`` (directly or nested)."""
    out: list[int] = []
    for child in state.attached_to(target):
        if state.raw_stages[child].attach[1] >= pos:
            out.append(child)
            out.extend(c for c in scope_stages(state, child, 0) if c not in out)
    return out


#: regions by what they depend on (see ``infer_region``)
_REGIONS = IdentityMemo(50_000)


def infer_region(state, index: int):
    """Root extents, starts and guard specs (tuples) of attached stage ``index``: the region
    its consumers inside the attach point (the target and stages computed within it) read.
    Memoised by what it depends on: the attached stage's operation, body and axes, and the
    loops and bodies of the stages that read it there (and of the inlined stages those read
    through); programs of one sketch share their loops (see ``stage``), so a mutation that
    leaves a stage's readers alone finds its region here."""
    st = state.stages[index]
    if storage_scope(st) == SHARED_SCOPE:  # depends on the thread loops of every stage
        return tuple(tuple(x) for x in _infer_region(state, index))
    target_idx, pos = st.attach
    readers = [target_idx] + [c for c in scope_stages(state, target_idx, pos) if c != index]
    sources = [st.op, st.body, *st.all_axes] + \
        [x for c in readers for x in (state.stages[c].loops, state.stages[c].body)] + \
        [x for s in state.stages if s.compute_at == "inline" for x in (s.op, s.body)]
    return _REGIONS.get(sources, (st.attach, tuple(readers)),
                        lambda: tuple(tuple(x) for x in _infer_region(state, index)))


def _infer_region(state, index: int):
    st = state.stages[index]
    target_idx, pos = st.attach
    target = state.stages[target_idx]
    inside = [c for c in scope_stages(state, target_idx, pos) if c != index]
    inner = {id(it.var) for it in target.iters[pos + 1:]}
    if storage_scope(st) == SHARED_SCOPE:  # one copy serves every thread of the block
        inner |= {id(it.var) for s in state.stages for it in s.iters if it.annotation in BLOCK_SHARED_BINDINGS}
    reads = []
    for c in [target_idx] + inside:
        cst = state.stages[c]
        if c != target_idx:
            inner |= {id(it.var) for it in cst.iters}
        mapping = dict(zip(cst.all_axes, cst.axis_values))
        reads.extend(tuple(E.substitute(i, mapping) for i in r) for r in expand_reads(state, cst.body, st.op.output))
    bounds = all_iter_bounds(state)
    simplify = Simplifier(bounds)
    shape = st.op.shape
    extents, starts, guards = [], [], []
    for d in range(len(st.axes)):
        base0, lo0, hi0 = None, None, None
        relax = False
        for indices in reads:
            form = simplify.normal_affine(indices[d])
            base, lo, hi = split_affine(form, inner, bounds)
            if lo == -float("inf") or hi == float("inf"):
                relax = True
                break
            if base0 is None:
                base0, lo0, hi0 = base, lo, hi
                continue
            diff = base.add(base0, -1)
            if diff.terms:
                relax = True
                break
            lo0, hi0 = min(lo0, lo + diff.const), max(hi0, hi + diff.const)
        extent = None if base0 is None or relax else int(hi0 - lo0 + 1)
        if extent is None or extent >= shape[d]:
            extents.append(shape[d])
            starts.append(None)
            continue
        start = simplify(E.Binary("+", base0.to_expr("int64"), E.Const(int(lo0), "int64")))
        extents.append(extent)
        starts.append(start)
        s_lo, s_hi = interval(start, bounds)
        if s_lo < 0:
            guards.append((d, ">="))
        if s_hi + extent > shape[d]:
            guards.append((d, "<"))
    for ax in st.reduce_axes:
        extents.append(ax.extent)
        starts.append(None if ax.lo == 0 else E.Const(ax.lo, "int64"))
    return extents, starts, guards


def _same_root(st, extents, starts) -> bool:
    if tuple(extents) != st.root_extents:
        return False
    for a, b in zip(starts, st.root_starts):
        if (a is None) != (b is None) or (a is not None and structural_key(a) != structural_key(b)):
            return False
    return True


def reinfer(state):
    """Recompute the region of every attached stage, consumers before producers (a region
    depends on the loops of the stages that read it); stages whose region did not change
    keep their loops (and loop variables)."""
    for index in range(len(state.stages) - 1, -1, -1):
        st = state.stages[index]
        if st.compute_at == "iter":
            extents, starts, guard_specs = infer_region(state, index)
        elif st.compute_at == "root" and any(s is not None and not isinstance(s, E.Const) for s in st.root_starts):
            extents = [a.extent for a in st.all_axes]
            starts = [None if a.lo == 0 else E.Const(a.lo, "int64") for a in st.all_axes]
            guard_specs = []
        else:
            continue
        if _same_root(st, extents, starts):
            if st.region_guard_specs != tuple(guard_specs):
                state = state.with_stage(index, replace(st, region_guard_specs=tuple(guard_specs)))
            continue
        state = state.with_stage(index, st.with_root(extents, starts, guard_specs))
    return state
