"""Bound inference: the region of a stage's tensor that one iteration of its attach point
needs, so that a stage computed inside another computes (and stores) only that region.

The region of each dimension is ``start + [0, extent)`` where ``start`` is an expression of
the loop variables outside the attach point and ``extent`` a constant: the reads of the
consumer are affine-decomposed, loop variables inside the attach point contribute their
interval, those outside stay symbolic, and anything not affine is relaxed to its whole
range (always safe, never wrong).
"""
from __future__ import annotations

from dataclasses import replace

from . import expr as E
from .simplify import Affine, Simplifier, interval


def all_iter_bounds(state) -> dict:
    bounds = {}
    for st in state.stages:
        for it in st.iters:
            bounds[it.var] = (0, it.extent - 1)
    return bounds


def expand_reads(state, body: E.Expr, tensor) -> list[tuple[E.Expr, ...]]:
    """Index tuples of every read of ``tensor`` in ``body``, looking through inlined stages."""
    inline = {id(st.op): st for st in state.stages if st.compute_at == "inline"}
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
    return out


def _split_affine(form: Affine, inner: set, bounds: dict):
    """Split an affine form into a symbolic base (outer variables only) and the interval
    of the rest (inner variables, and non-affine atoms relaxed over all bounds)."""
    base = Affine({}, form.const)
    lo = hi = 0
    for key, (atom, coef) in form.terms.items():
        vars_ = {id(v) for v in E.free_vars(atom)}
        if not vars_ & inner:
            base.terms[key] = [atom, coef]
            continue
        a_lo, a_hi = interval(atom, bounds)
        x, y = a_lo * coef, a_hi * coef
        lo += min(x, y)
        hi += max(x, y)
    return base, lo, hi


def infer_region(state, index: int):
    """Root extents, starts and guards of attached stage ``index``."""
    st = state.stages[index]
    target_idx, pos = st.attach
    target = state.stages[target_idx]
    reads = expand_reads(state, target.body, st.op.output)
    mapping = dict(zip(target.all_axes, target.axis_values))
    inner = {id(it.var) for it in target.iters[pos + 1:]}
    bounds = all_iter_bounds(state)
    simplify = Simplifier(bounds)
    shape = st.op.shape
    n_space = len(st.axes)
    extents, starts, guards = [], [], []
    for d in range(n_space):
        base0, lo0, hi0 = None, None, None
        relax = False
        for indices in reads:
            form = simplify.affine(simplify(E.substitute(indices[d], mapping)))
            base, lo, hi = _split_affine(form, inner, bounds)
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


def reinfer(state, index: int):
    """Recompute the region of attached stage ``index`` and of everything attached below it."""
    st = state.stages[index]
    if st.compute_at == "iter":
        extents, starts, guard_specs = infer_region(state, index)
        st = st.with_root(extents, starts)
        guards = []
        for d, kind in guard_specs:
            value = st.axis_values[d]
            guards.append(E.Compare(">=", value, E.Const(0, "int64")) if kind == ">=" else
                          E.Compare("<", value, E.Const(st.op.shape[d], "int64")))
        st = replace(st, region_guards=tuple(guards))
    elif st.compute_at == "root" and any(s is not None and not isinstance(s, E.Const) for s in st.root_starts):
        st = st.with_root([a.extent for a in st.all_axes],
                          [None if a.lo == 0 else E.Const(a.lo, "int64") for a in st.all_axes])
    state = state.with_stage(index, st)
    for child in state.attached_to(index):
        state = reinfer(state, child)
    return state
