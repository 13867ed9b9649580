"""Padding taps skipped in whole blocks: the loop partition of a padded reduction.

A convolution over an inlined padding stage sums ``select(in_bounds, x, 0) * w``; outside
the image every such term is zero. The conditions are conjunctions of bounds on a few loop
variables (an output row and a kernel row, say): each conjunct is decided as soon as its
innermost loop is entered, so it is checked there once, as a branch around everything
inside, and dropped from the select. A 3x3 convolution of a 7x7 image (pad 1) spends 18 %
of its multiply-adds on padding taps otherwise; TVM's loop partition does the same. What
stays in the select (a conjunct decided only in small inner blocks) the code generator
decides where unrolled loops make it constant (``ir.llvm_codegen``).

A conjunct decided only in a small inner block can still hold for a whole block further
out: in a tile of 7 output rows of a 7x7 image, ``1 <= row + kernel_row <= 7`` holds for every
kernel row in rows 1 to 5. Such a conjunct is unswitched at the outermost loop it names:
where it holds for every iteration inside (the affine bound of its inner loops) the
block runs without it, elsewhere with the select. When that loop alone decides it (the
tile is the whole image), the loop is cut into its edge rows and the middle, as TVM's
loop partition does, so that in an edge piece of one row the code generator knows the
row; when an outer tile also decides it, a branch inside the loop chooses.

A NaN or infinite weight at a padding tap no longer reaches the output: the one difference
from adding the zeros, as in every convolution library.
"""
from __future__ import annotations

from dataclasses import replace

from . import expr as E
from .loop_ir import For, IfThenElse, Load, Seq, Stmt, Store, nest_trips
from .simplify import Simplifier, simplify, split_affine, structural_key

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
            and value.a.buffer is store.buffer
            and (value.a.index is store.index or structural_key(value.a.index) == structural_key(store.index))):
        return None  # not an accumulation into the element it stores (skipping it would lose a value)
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


def skip_padding(nest: Stmt, cut_loops: bool = True) -> Stmt:
    """``nest`` (a chain of loops around one reduction update, possibly under a guard) with
    every conjunct of its identity select that is decided around at least
    ``MIN_SKIPPED_TRIPS`` iterations turned into a branch at that loop (around the whole
    nest where only loops outside it decide it), and the others unswitched where they
    hold for whole blocks (with ``cut_loops``, by cutting the loop where it alone decides)."""
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
        if ((at >= 0 and chain[at].kind == "vectorize") or nest_trips(inside) < MIN_SKIPPED_TRIPS
                or _reads_memory(c)):
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
    fast = wrap(update(kept), innermost, at)
    edges = wrap(update(kept + [c for _, c in unswitched]), innermost, at)
    pieces = _partition(chain[at], everywhere) if cut_loops else None
    if pieces is None:
        return wrap(IfThenElse(everywhere, fast, edges), at, -2)
    loops = []
    var = chain[at].var  # each piece binds it anew (features know a loop by its variable)
    for start, stop, holds in pieces:
        shifted = {var: E.Binary("+", var, E.Const(start, var.dtype))} if start else {}
        body = _substitute(fast if holds else edges, shifted)
        if at in hoisted:
            body = IfThenElse(_substitute_expr(E.all_of(hoisted[at]), shifted), body)
        loops.append(replace(chain[at], extent=stop - start, body=body))
    return wrap(Seq(tuple(loops)), at - 1, -2)


#: a loop is cut into pieces (TVM's loop partition) when its condition names no other loop
#: and it has at most this many iterations to try the condition on
MAX_PARTITIONED_EXTENT = 256


def _partition(loop: For, cond: E.Expr) -> list[tuple[int, int, bool]] | None:
    """Where ``cond`` is a function of ``loop``'s variable alone and holds on one range of
    it: the pieces (start, stop, holds) that cut the loop there, so that in a piece of one
    iteration the code generator knows the variable (and drops the taps unrolled loops
    prove outside the image); else None (the branch stays inside the loop)."""
    if (loop.kind not in ("serial", "unroll") or loop.extent > MAX_PARTITIONED_EXTENT
            or any(v is not loop.var for v in E.free_vars(cond))):
        return None
    holds = []
    for i in range(loop.extent):
        value = simplify(E.substitute(cond, {loop.var: E.Const(i, loop.var.dtype)}))
        if not isinstance(value, E.Const):
            return None
        holds.append(bool(value.value))
    if True not in holds:
        return None
    start = holds.index(True)
    stop = start + holds[start:].index(False) if False in holds[start:] else loop.extent
    if any(holds[stop:]):
        return None
    pieces = [(0, start, False), (start, stop, True), (stop, loop.extent, False)]
    return [p for p in pieces if p[1] > p[0]]


def _substitute_expr(e: E.Expr, mapping: dict) -> E.Expr:
    return simplify(E.substitute(e, mapping))


def _substitute(s: Stmt, mapping: dict) -> Stmt:
    """A chain of loops, branches and one store (what ``skip_padding`` builds) with
    variables replaced."""
    if isinstance(s, For):
        return replace(s, body=_substitute(s.body, mapping))
    if isinstance(s, IfThenElse):
        return IfThenElse(_substitute_expr(s.cond, mapping), _substitute(s.then, mapping),
                          None if s.otherwise is None else _substitute(s.otherwise, mapping))
    if isinstance(s, Store):
        return Store(s.buffer, E.substitute(s.index, mapping), E.substitute(s.value, mapping))
    raise TypeError(f"unexpected statement in a reduction nest: {type(s).__name__}")


def _reads_memory(cond: E.Expr) -> bool:
    """A condition that reads memory stays in the select, where the guards around the
    update hold (outside them its index may be outside the tensor)."""
    return any(isinstance(n, Load) for n in E.walk(cond))


def _unswitchable(kept: list, chain: list, level: dict) -> tuple[int, list, list]:
    """The level of the unswitch branch, the conjuncts among ``kept`` worth unswitching
    there, each as (its condition for every iteration inside that loop, the conjunct),
    and the others. All are tested at one level (the innermost of their outermost loops,
    so that each is quantified over as few loops as possible), where the block inside is
    at least ``MIN_UNSWITCHED_TRIPS``."""
    outermost = {}
    for c in kept:
        levels = [level[id(v)] for v in E.free_vars(c) if id(v) in level]
        if (isinstance(c, E.Compare) and c.op in (">=", ">", "<", "<=") and len(levels) > 1
                and not _reads_memory(c)):
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
