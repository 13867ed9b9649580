"""Padding taps skipped in whole blocks: the loop partition of a padded reduction.

A convolution over an inlined padding stage sums ``select(in_bounds, x, 0) * w``; outside
the image every such term is zero. The conditions are conjunctions of bounds on a few loop
variables (an output row and a kernel row, say): each conjunct is decided as soon as its
innermost loop is entered, so it is checked there once, as a branch around everything
inside, and dropped from the select. A 3x3 convolution of a 7x7 image (pad 1) spends 18 %
of its multiply-adds on padding taps otherwise; TVM's loop partition does the same. What
stays in the select (a conjunct decided only in small inner blocks) the code generator
decides where unrolled loops make it constant (``ir.codegen.cpu``).

A conjunct decided only in a small inner block can still hold for a whole block further
out: in a tile of 7 output rows of a 7x7 image, ``row + kernel_row >= 1`` holds for every
kernel row in rows 1 to 6. Such a conjunct is unswitched at the outermost loop it names:
there a branch tests whether it holds for every iteration inside (the affine bound of
its inner loops) and runs the block without it, else the block with the select; the
edge tiles keep the select, the others lose it (TVM's loop partition cuts the loop into
the same pieces).

A NaN or infinite weight at a padding tap no longer reaches the output: the one difference
from adding the zeros, as in every convolution library.
"""
from __future__ import annotations

from dataclasses import replace

from . import expr as E
from .loop_ir import For, IfThenElse, Load, Stmt, Store, nest_trips
from .simplify import Simplifier, split_affine

#: a conjunct becomes a branch only around at least this many iterations (vector lanes
#: counted): a branch per multiply-add costs more than the select it replaces
MIN_SKIPPED_TRIPS = 256
#: an unswitch tests its condition once per this many iterations at least (it duplicates
#: the block, and a branch per few vector operations would cost what it saves)
MIN_UNSWITCHED_TRIPS = 64


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
    at, unswitched, kept = _unswitchable(kept, chain, level)
    if not hoisted and not unswitched:
        return nest

    def update(conds) -> Stmt:
        term = E.Select(E.all_of(conds), select.t, select.f) if conds else select.t
        body: Stmt = Store(node.buffer, node.index, rebuild(term))
        return IfThenElse(guard.cond, body) if guard is not None else body

    def wrap(body: Stmt, inside: int, outside: int) -> Stmt:
        """``body`` in the loops (and hoisted branches) of levels ``inside`` down to
        ``outside`` (exclusive; -1 includes the branch around the whole nest)."""
        for i in range(inside, outside, -1):
            if i in hoisted:
                body = IfThenElse(E.all_of(hoisted[i]), body)
            if i >= 0:
                body = replace(chain[i], body=body)
        return body

    innermost = len(chain) - 1
    if not unswitched:
        return wrap(update(kept), innermost, -2)
    everywhere = E.all_of(cond for cond, _ in unswitched)
    edges = update(kept + [c for _, c in unswitched])
    body = IfThenElse(everywhere, wrap(update(kept), innermost, at), wrap(edges, innermost, at))
    return wrap(body, at, -2)


def _unswitchable(kept: list, chain: list, level: dict) -> tuple[int, list, list]:
    """The level of the unswitch branch, the conjuncts among ``kept`` worth unswitching
    there, each as (its condition for every iteration inside that loop, the conjunct),
    and the others. All are tested at one level (the innermost of their outermost loops,
    so that each is quantified over as few loops as possible), where the block inside is
    at least ``MIN_UNSWITCHED_TRIPS``."""
    outermost = {}
    for c in kept:
        levels = [level[id(v)] for v in E.free_vars(c) if id(v) in level]
        if isinstance(c, E.Compare) and c.op in (">=", ">", "<", "<=") and len(levels) > 1:
            outermost[id(c)] = min(levels)
    if not outermost:
        return -1, [], kept
    at = max(outermost.values())
    if chain[at].kind == "vectorize" or nest_trips(chain[at].body) < MIN_UNSWITCHED_TRIPS:
        return -1, [], kept
    inner = {id(lp.var) for lp in chain[at + 1:]}
    bounds = {lp.var: (0, lp.extent - 1) for lp in chain[at + 1:]}
    unswitched, rest = [], []
    for c in kept:
        everywhere = _for_every(c, inner, bounds) if id(c) in outermost else None
        if everywhere is None:
            rest.append(c)
        else:
            unswitched.append((everywhere, c))
    return at, unswitched, rest


def _for_every(c: E.Compare, inner: set, bounds: dict) -> E.Expr | None:
    """A condition on the loops outside ``inner`` under which comparison ``c`` holds for
    every value of the ``inner`` loops (bounds: their ranges); None when it has no such
    affine form."""
    simplifier = Simplifier()
    form = simplifier.affine(E.Binary("-", c.a, c.b))
    base, lo, hi = split_affine(form, inner, bounds)
    worst = lo if c.op in (">=", ">") else hi
    if abs(worst) == float("inf"):
        return None
    dtype = c.a.dtype
    return simplifier(E.Compare(c.op, E.Binary("+", base.to_expr(dtype), E.Const(int(worst), dtype)),
                                         E.Const(0, dtype)))
