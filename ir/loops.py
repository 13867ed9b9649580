"""The loop structure of one stage and the primitive transforms on it.

A stage's loops are derived from its *root* axes (one per space/reduce axis, each with an
extent and a start offset: the whole axis at root, the needed region when computed inside
another stage) by replaying its primitive loop transforms (split, fuse, reorder, annotate).
Keeping the primitives lets bound inference change the root extents and re-derive every
loop, as TVM's InferBound does. Each transform also says how iterator positions move, so
that attach points follow their iterators.
"""
from __future__ import annotations

from dataclasses import dataclass

from . import expr as E
from .simplify import Simplifier, linear_expr, linear_terms


class InvalidStep(ValueError):
    """A transform step that does not apply to this State; the message says why."""


def check(cond: bool, message) -> None:
    """Raise ``InvalidStep(message)`` unless ``cond``: how every step says it does not apply.
    ``message``: the text, or a function that makes it (a replay checks ~10^5 conditions a
    search round; formatting their messages up front cost more than the checks)."""
    if not cond:
        raise InvalidStep(message() if callable(message) else message)


#: what a step that does not apply may raise before a ``check`` catches its case (an
#: iterator index out of range, a field of the wrong type in a hand-edited record):
#: ``State.apply`` turns them into ``InvalidStep`` with ``leaked``, so callers catch one type
LEAKS = (IndexError, KeyError, ValueError, TypeError, ZeroDivisionError)


def leaked(step, err: Exception) -> InvalidStep:
    """The ``InvalidStep`` that ``err``, leaked by ``step`` (a Step or what it was read
    from), stands for; the step is shown as its record (its fields may be malformed)."""
    shown = step.record() if hasattr(step, "record") else step
    return InvalidStep(f"step {shown!r} does not apply: {type(err).__name__}: {err}")


@dataclass(frozen=True, eq=False, init=False)
class Iterator:
    """One loop of a stage."""
    name: str
    extent: int
    kind: str  # "space" or "reduce"
    var: E.Var
    annotation: str = "none"

    def __init__(self, name: str, extent: int, kind: str, var: E.Var, annotation: str = "none"):
        # written out: a frozen dataclass's own __init__ sets each field through
        # object.__setattr__, three times slower, and a search round makes ~10^6 loops
        d = self.__dict__
        d["name"], d["extent"], d["kind"], d["var"], d["annotation"] = name, extent, kind, var, annotation


@dataclass(frozen=True)
class LoopTransform:
    """A resolved primitive: ("split", iter, lengths, inner_to_outer), ("fuse", iters),
    ("reorder", order) or ("annotate", iter, annotation)."""
    kind: str
    args: tuple


@dataclass(frozen=True, eq=False, init=False)
class Loops:
    iters: tuple[Iterator, ...]
    #: value of each root axis in terms of the iterators' variables
    axis_values: tuple[E.Expr, ...]
    #: conditions for an iteration to be real (from splits that do not divide)
    guards: tuple[E.Expr, ...]
    #: ids of the loop variables each axis value uses (so a split touches only its own)
    deps: tuple[frozenset, ...] = ()

    def __init__(self, iters, axis_values, guards, deps=()):
        d = self.__dict__  # written out, as ``Iterator``'s
        d["iters"], d["axis_values"], d["guards"], d["deps"] = iters, axis_values, guards, deps


def _var_ids(e: E.Expr) -> frozenset:
    return frozenset(id(n) for n in E.walk(e) if isinstance(n, E.Var))


def root_loops(names, kinds, extents, starts) -> Loops:
    iters, values = [], []
    for name, kind, extent, start in zip(names, kinds, extents, starts):
        var = E.Var(name)
        iters.append(Iterator(name, extent, kind, var))
        values.append(var if start is None else E.Binary("+", start, var))
    return Loops(tuple(iters), tuple(values), (), tuple(_var_ids(v) for v in values))


def _compose_linear(value: E.Expr, var: E.Var, var_terms: list, bounds: dict):
    """``value`` with ``var`` replaced by ``sum(coef * part)`` (``var_terms``), composed on
    the linear forms when ``value`` is a plain sum of loop variables: the expression the
    simplifier would give, without substituting and re-simplifying a tree (splits are most
    of a replay's work). (new value, ids of its variables), or None to take the general way."""
    parsed = linear_terms(value)
    if parsed is None:
        return None
    terms, const = parsed
    out = []
    for atom, coef in terms:
        if atom is var:
            out.extend((part, coef * c) for part, c in var_terms)
            continue
        b = bounds.get(atom)
        if b is not None and b[0] == b[1]:  # a loop of one iteration is its constant
            const += coef * b[0]
        else:
            out.append((atom, coef))
    ids = frozenset(id(atom) for atom, _ in out)
    if len(ids) != len(out):
        return None  # a variable twice: the simplifier would merge the terms
    return linear_expr(out, const, value.dtype), ids


def _substitute(loops: Loops, mapping: dict, iters: tuple[Iterator, ...], new_guards=(),
                linear: tuple | None = None) -> Loops:
    """Loops over ``iters`` whose axis values and guards have ``mapping`` substituted and
    simplified. ``linear``: (var, [(part, coef)...]) when the mapping is one variable's
    split, for the fast composition of plain sums."""
    bounds = {it.var: (0, it.extent - 1) for it in iters}
    simplifier = None  # made when needed (plain sums of loop variables compose without it)

    def simplify(e):
        nonlocal simplifier
        simplifier = simplifier or Simplifier(bounds)
        return simplifier(e)

    replaced = frozenset(id(k) for k in mapping)
    values, deps = list(loops.axis_values), list(loops.deps)
    for d, used in enumerate(deps):
        if used & replaced:  # only the values of the replaced loops change
            fast = _compose_linear(values[d], *linear, bounds) if linear is not None else None
            if fast is not None:
                values[d], deps[d] = fast
            else:
                values[d] = simplify(E.substitute(values[d], mapping))
                deps[d] = _var_ids(values[d])
    guards = [simplify(E.substitute(g, mapping)) if _var_ids(g) & replaced else g for g in loops.guards]
    guards += [simplify(g) for g in new_guards]
    guards = tuple(g for g in guards if not (isinstance(g, E.Const) and g.value))
    check(not any(isinstance(g, E.Const) for g in guards), "a split leaves no valid iteration")
    return Loops(iters, tuple(values), guards, tuple(deps))


def tight_extents(extent: int, lengths, inner_to_outer: bool) -> list[int]:
    """The extents of a split's parts, outermost first, as TVM's bound inference makes them:
    the split is applied one length at a time from the side the lengths give, and each
    part is at most what is left of the loop (``min(left, length)``), the rest derived by
    ceiling division. A stage computed inside another one has a region smaller than its
    tiles: its outer tile loops then have extent 1 instead of running guarded-out
    iterations (and a stage attached inside them is not recomputed for nothing)."""
    left, parts = extent, []
    for length in (reversed(lengths) if inner_to_outer else lengths):
        parts.append(min(left, length))
        left = -(-left // length)
    return [left] + parts[::-1] if inner_to_outer else parts + [left]


def split(loops: Loops, iter_id: int, lengths, inner_to_outer: bool) -> Loops:
    """Split iterator ``iter_id`` into ``len(lengths) + 1`` parts. ``lengths`` give the inner
    parts' extents (outer part derived) when ``inner_to_outer``, else the outer parts'
    (innermost derived); ``None`` means 1 (a length not chosen yet)."""
    check(0 <= iter_id < len(loops.iters), lambda: f"split: iterator {iter_id} out of range 0..{len(loops.iters) - 1}")
    it = loops.iters[iter_id]
    check(it.annotation == "none",
          lambda: f"split: iterator '{it.name}' is annotated {it.annotation}; split before annotating")
    lengths = [1 if x is None else int(x) for x in lengths]
    check(len(lengths) >= 1 and all(x >= 1 for x in lengths),
          lambda: f"split: lengths must be positive ints, got {lengths}")
    extents = tight_extents(it.extent, lengths, inner_to_outer)
    prod = 1
    for x in extents:
        prod *= x
    names = [f"{it.name}.{n}" for n in range(len(extents))]
    parts = tuple(Iterator(name, ext, it.kind, E.Var(name)) for name, ext in zip(names, extents))
    value: E.Expr = parts[0].var
    for p in parts[1:]:
        value = E.Binary("+", E.Binary("*", value, E.Const(p.extent, value.dtype)), p.var)
    guards = [] if prod == it.extent else [E.Compare("<", value, E.Const(it.extent, value.dtype))]
    iters = loops.iters[:iter_id] + parts + loops.iters[iter_id + 1:]
    stride, var_terms = 1, []
    for p in reversed(parts):
        if p.extent > 1:
            var_terms.append((p.var, stride))
        stride *= p.extent
    return _substitute(loops, {it.var: value}, iters, guards, linear=(it.var, var_terms[::-1]))


def fuse(loops: Loops, iter_ids) -> Loops:
    ids = list(iter_ids)
    check(len(ids) >= 1, "fuse: needs at least one iterator")
    check(ids == list(range(ids[0], ids[0] + len(ids))), lambda: f"fuse: iterators must be consecutive, got {ids}")
    check(0 <= ids[0] and ids[-1] < len(loops.iters), lambda: f"fuse: iterators {ids} out of range")
    group = loops.iters[ids[0]:ids[-1] + 1]
    kinds = {it.kind for it in group}
    check(len(kinds) == 1, lambda: f"fuse: cannot fuse space and reduce iterators together ({[i.name for i in group]})")
    for it in group:
        check(it.annotation == "none", lambda: f"fuse: iterator '{it.name}' is annotated {it.annotation}")
    if len(group) == 1:
        return loops
    extent = 1
    for it in group:
        extent *= it.extent
    name = "@".join(it.name for it in group) + "@"
    fused = Iterator(name, extent, group[0].kind, E.Var(name))
    mapping, stride = {}, 1
    for pos in range(len(group) - 1, -1, -1):
        it = group[pos]
        value: E.Expr = fused.var
        if stride > 1:
            value = E.Binary("//", value, E.Const(stride, value.dtype))
        if pos > 0:
            value = E.Binary("%", value, E.Const(it.extent, value.dtype))
        mapping[it.var] = value
        stride *= it.extent
    iters = loops.iters[:ids[0]] + (fused,) + loops.iters[ids[-1] + 1:]
    return _substitute(loops, mapping, iters)


def reorder(loops: Loops, order) -> Loops:
    order = list(order)
    check(sorted(order) == list(range(len(loops.iters))),
          lambda: f"reorder: order must be a permutation of 0..{len(loops.iters) - 1}, got {order}")
    return Loops(tuple(loops.iters[i] for i in order), loops.axis_values, loops.guards, loops.deps)


#: GPU thread bindings are annotations too (the GPU sketch rules produce them; CPU code
#: generation rejects them)
GPU_BINDINGS = ("blockIdx.x", "vthread", "threadIdx.x")
ANNOTATIONS = ("none", "parallel", "vectorize", "unroll") + GPU_BINDINGS


def annotate(loops: Loops, iter_id: int, annotation: str) -> Loops:
    check(annotation in ANNOTATIONS,
          lambda: f"annotate: unknown annotation {annotation!r}; expected one of {ANNOTATIONS}")
    check(0 <= iter_id < len(loops.iters),
          lambda: f"annotate: iterator {iter_id} out of range 0..{len(loops.iters) - 1}")
    it = loops.iters[iter_id]
    if annotation in ("parallel", "blockIdx.x", "vthread"):
        check(it.kind == "space",
              lambda: f"annotate: cannot bind reduce iterator '{it.name}' to {annotation} (a data race)")
    if annotation == "vectorize" and it.kind == "reduce":
        check(iter_id == len(loops.iters) - 1,
              lambda: f"annotate: reduce iterator '{it.name}' can be vectorised only as the innermost loop "
              "(a horizontal reduction); reorder it inside first")
    iters = list(loops.iters)
    iters[iter_id] = Iterator(it.name, it.extent, it.kind, it.var, annotation)
    return Loops(tuple(iters), loops.axis_values, loops.guards, loops.deps)


def apply(loops: Loops, t: LoopTransform) -> Loops:
    if t.kind == "split":
        return split(loops, *t.args)
    if t.kind == "fuse":
        return fuse(loops, *t.args)
    if t.kind == "reorder":
        return reorder(loops, *t.args)
    return annotate(loops, *t.args)


def position_map(t: LoopTransform):
    """Where each old iterator position goes (a split iterator maps to its innermost part,
    fused ones to the fused iterator)."""
    if t.kind == "split":
        iter_id, lengths = t.args[0], t.args[1]
        extra = len(lengths)
        return lambda i: i if i < iter_id else (i + extra)
    if t.kind == "fuse":
        ids = list(t.args[0])
        lo, hi = ids[0], ids[-1]
        return lambda i: i if i < lo else (lo if i <= hi else i - (hi - lo))
    if t.kind == "reorder":
        order = list(t.args[0])
        inverse = {old: new for new, old in enumerate(order)}
        return lambda i: inverse[i]
    return lambda i: i
