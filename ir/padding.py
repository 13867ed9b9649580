"""Padding taps skipped in whole blocks: the loop partition of a padded reduction.

A convolution over an inlined padding stage sums ``select(in_bounds, x, 0) * w``; outside
the image every such term is zero. The conditions are conjunctions of bounds on a few loop
variables (an output row and a kernel row, say): each conjunct is decided as soon as its
innermost loop is entered, so it is checked there once, as a branch around everything
inside, and dropped from the select. A 3x3 convolution of a 7x7 image (pad 1) spends 18 %
of its multiply-adds on padding taps otherwise; TVM's loop partition does the same. What
stays in the select (a conjunct decided only in small inner blocks) the code generator
decides where unrolled loops make it constant (``ir.codegen.cpu``).

A NaN or infinite weight at a padding tap no longer reaches the output: the one difference
from adding the zeros, as in every convolution library.
"""
from __future__ import annotations

from dataclasses import replace

from . import expr as E
from .loop_ir import For, IfThenElse, Load, Stmt, Store, nest_trips

#: a conjunct becomes a branch only around at least this many iterations (vector lanes
#: counted): a branch per multiply-add costs more than the select it replaces
MIN_SKIPPED_TRIPS = 256


def identity_select(value: E.Expr, store: Store) -> tuple | None:
    """For a reduction update ``acc = acc (+|max|min) t``: the select in ``t`` whose other
    branch is the combiner's identity (``t`` itself, or one factor of a summed product),
    and a function that rebuilds the update with something in its place; else None."""
    if not (isinstance(value, E.Binary) and value.op in ("+", "max", "min") and isinstance(value.a, Load)
            and value.a.buffer is store.buffer):
        return None
    acc, term = value.a, value.b
    identity = {"+": 0, "max": E.min_value(value.dtype), "min": E.max_value(value.dtype)}[value.op]

    def is_identity_select(e) -> bool:
        return isinstance(e, E.Select) and isinstance(e.f, E.Const) and e.f.value == identity

    if is_identity_select(term):
        return term, lambda x: E.Binary(value.op, acc, x)
    if value.op == "+" and isinstance(term, E.Binary) and term.op == "*":
        if is_identity_select(term.a):
            return term.a, lambda x: E.Binary("+", acc, E.Binary("*", x, term.b))
        if is_identity_select(term.b):
            return term.b, lambda x: E.Binary("+", acc, E.Binary("*", term.a, x))
    return None


def conjuncts(cond: E.Expr) -> list[E.Expr]:
    if isinstance(cond, E.Binary) and cond.op == "and":
        return conjuncts(cond.a) + conjuncts(cond.b)
    return [cond]


def skip_padding(nest: Stmt) -> Stmt:
    """``nest`` (a chain of loops around one reduction update, possibly under a guard) with
    every conjunct of its identity select that is decided around at least
    ``MIN_SKIPPED_TRIPS`` iterations turned into a branch at that loop (around the whole
    nest where only loops outside it decide it)."""
    chain: list[For] = []
    node = nest
    while isinstance(node, For):
        chain.append(node)
        node = node.body
    guard = None
    if isinstance(node, IfThenElse) and node.otherwise is None:
        guard, node = node, node.then
    if not isinstance(node, Store):
        return nest
    found = identity_select(node.value, node)
    if found is None:
        return nest
    select, rebuild = found
    level = {id(lp.var): i for i, lp in enumerate(chain)}
    kept, hoisted = [], {}
    for c in conjuncts(select.cond):
        # variables of loops outside the nest are fixed in all of it (level -1: around it)
        at = max((level.get(id(v), -1) for v in E.free_vars(c)), default=-1)
        inside = chain[at].body if at >= 0 else nest
        if (at >= 0 and chain[at].kind == "vectorize") or nest_trips(inside) < MIN_SKIPPED_TRIPS:
            kept.append(c)
            continue
        hoisted.setdefault(at, []).append(c)
    if not hoisted:
        return nest
    term = E.Select(E.all_of(kept), select.t, select.f) if kept else select.t
    body: Stmt = Store(node.buffer, node.index, rebuild(term))
    if guard is not None:
        body = IfThenElse(guard.cond, body)
    for i in range(len(chain) - 1, -2, -1):
        if i in hoisted:
            body = IfThenElse(E.all_of(hoisted[i]), body)
        if i >= 0:
            body = replace(chain[i], body=body)
    return body
