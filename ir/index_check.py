"""Index safety of definitions: every tensor read of a compute stays inside its tensor.

Checked on the definition, over the domain of its axes, not on a program: a schedule
reorders, tiles and fuses the same reads, and the iterations of partial tiles that fall
outside the domain are guarded (region guards, vector masks), so a read that is safe on
the domain is safe in every program. Each read of a body is

- proven: under the conditions that guard it (a ``select``'s condition for its branches,
  a reduction's ``where=`` for its source), the interval of every index lies inside its
  dimension. The reads of real operators (padding included) are proven, and cost nothing
  in the kernel;
- out of range: a point of the domain that meets the guards reads outside the tensor
  (looked for where the index is extreme). ``ComputeDAG`` rejects the definition with
  ``IndexOutOfRange``, naming the tensor, the index, its range and the point;
- unproven (an index read from data, or one that interval arithmetic cannot bound):
  lowering checks it at run time (``loop_ir.Load.in_range``): a read outside its tensor
  reads element 0 instead and flags the call, which raises ``IndexError``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from . import dtype as dt
from . import expr as E
from .expr import expr_str
from .simplify import Affine, Simplifier

_NEGATED = {"<": ">=", "<=": ">", ">": "<=", ">=": "<", "==": "!=", "!=": "=="}


class IndexOutOfRange(IndexError):
    """A definition reads outside a tensor on its own domain; the message says where."""


@dataclass(frozen=True)
class Violation:
    """Dimension ``dim`` of ``read`` (in ``compute``) leaves its tensor at ``point``."""
    compute: str
    read: E.TensorRead
    dim: int
    low: float
    high: float
    point: dict
    value: int

    def __str__(self) -> str:
        t = self.read.tensor
        where = ", ".join(f"{v.name}={x}" for v, x in self.point.items())
        return (f"compute '{self.compute}' reads {expr_str(self.read)} outside '{t.name}' (shape {t.shape}): "
                f"index {self.dim} ({expr_str(self.read.indices[self.dim])}) ranges over {_span(self.low, self.high)} "
                f"but must stay in 0..{t.shape[self.dim] - 1}; {f'at {where} ' if where else ''}it is {self.value}")


def _span(lo, hi) -> str:
    return f"{'-inf' if lo == -float('inf') else int(lo)}..{'inf' if hi == float('inf') else int(hi)}"


def check_reads(ops) -> None:
    """Raise ``IndexOutOfRange`` listing every read of ``ops`` (compute operations) that
    leaves its tensor somewhere on the operation's domain."""
    found = []
    for op in ops:
        found += analyse(op.name, op.body, tuple(op.axis) + tuple(op.reduce_axis))[0]
    if found:
        raise IndexOutOfRange("\n".join(str(v) for v in found))


def analyse(name: str, body: E.Expr, axes) -> tuple[list[Violation], frozenset]:
    """The violations of ``body`` (over the domain of ``axes``) and the ids of the
    tensors that it reads at an unproven index."""
    domain = {ax: (ax.lo, ax.lo + ax.extent - 1) for ax in axes}
    violations, unproven = [], set()
    for read, conds in _guarded_reads(body):
        for dim, status in enumerate(_check_read(read, conds, domain)):
            if isinstance(status, tuple):
                point, value, low, high = status
                violations.append(Violation(name, read, dim, low, high, point, value))
            elif status == "unproven":
                unproven.add(id(read.tensor))
    return violations, frozenset(unproven)


#: body id -> (body, tensor ids); emptied when full (bodies are shared by the programs
#: of a task, so the same few are asked for again and again)
_RUNTIME_CACHE: dict = {}
_RUNTIME_CACHE_SIZE = 4096


def runtime_checked(body: E.Expr, axes) -> frozenset:
    """Ids of the tensors that ``body`` reads at an index that needs a run-time check:
    unproven, or out of range (a stage derived by a transform; its definition was
    checked). Cached by the body's identity: lowering asks for every read it lowers."""
    hit = _RUNTIME_CACHE.get(id(body))
    if hit is not None and hit[0] is body:
        return hit[1]
    violations, unproven = analyse("", body, axes)
    result = unproven | {id(v.read.tensor) for v in violations}
    if len(_RUNTIME_CACHE) >= _RUNTIME_CACHE_SIZE:
        _RUNTIME_CACHE.clear()
    _RUNTIME_CACHE[id(body)] = (body, result)
    return result


def in_range(tensor, indices) -> E.Expr:
    """The condition that ``indices`` lie inside ``tensor``."""
    conds = []
    for i, n in zip(indices, tensor.shape):
        conds += [E.Compare(">=", i, E.Const(0, i.dtype)), E.Compare("<", i, E.Const(n, i.dtype))]
    return E.all_of(conds)


# where reads happen --------------------------------------------------------------------

def _guarded_reads(body: E.Expr):
    """``(read, conditions)`` for every tensor read: the conditions hold wherever the read
    happens (a select's branches and a reduction's source are evaluated lazily)."""
    out = []

    def visit(e: E.Expr, conds: tuple):
        if isinstance(e, E.Select):
            visit(e.cond, conds)
            visit(e.t, conds + (e.cond,))
            visit(e.f, conds + (E.Not(e.cond),))
            return
        if isinstance(e, E.Reduce):
            if e.condition is not None:
                visit(e.condition, conds)
                conds = conds + (e.condition,)
            visit(e.source, conds)
            return
        if isinstance(e, E.TensorRead):
            out.append((e, conds))
        for child in e.children():
            visit(child, conds)

    visit(body, ())
    return out


def _conjuncts(cond: E.Expr):
    """Integer comparisons implied by ``cond`` (through ``and`` and ``not``)."""
    if isinstance(cond, E.Binary) and cond.op == "and":
        yield from _conjuncts(cond.a)
        yield from _conjuncts(cond.b)
    elif isinstance(cond, E.Not) and isinstance(cond.a, E.Not):
        yield from _conjuncts(cond.a.a)
    elif isinstance(cond, E.Not) and isinstance(cond.a, E.Compare):
        yield E.Compare(_NEGATED[cond.a.op], cond.a.a, cond.a.b)
    elif isinstance(cond, E.Compare) and dt.is_int(cond.a.dtype) and cond.a.dtype != "bool":
        yield cond


def _constraints(conds, simplify: Simplifier) -> list[tuple[Affine, float, float]]:
    """``(form, lo, hi)``: the conditions say ``lo <= form <= hi``."""
    inf = float("inf")
    out = []
    for cond in conds:
        for c in _conjuncts(cond):
            form = simplify.affine(c.a).add(simplify.affine(c.b), -1)
            span = {"<": (-inf, -1), "<=": (-inf, 0), ">": (1, inf), ">=": (0, inf), "==": (0, 0)}.get(c.op)
            if span is not None:
                out.append((form, *span))
    return out


def _narrow(domain: dict, constraints) -> dict | None:
    """The domain with every one-variable constraint applied (None when it is empty)."""
    bounds = dict(domain)
    for form, lo, hi in constraints:
        if len(form.terms) != 1:
            continue
        (atom, coef), = form.terms.values()
        if not isinstance(atom, E.Var) or atom not in bounds:
            continue
        v_lo, v_hi = bounds[atom]
        # lo <= coef * v + const <= hi
        a, b = lo - form.const, hi - form.const
        if coef < 0:
            a, b, coef = -b, -a, -coef
        if a != -float("inf"):
            v_lo = max(v_lo, -(-a // coef))
        if b != float("inf"):
            v_hi = min(v_hi, b // coef)
        if v_lo > v_hi:
            return None
        bounds[atom] = (int(v_lo), int(v_hi))
    return bounds


def _check_read(read: E.TensorRead, conds, domain: dict) -> list:
    """Per dimension: "proven", "unproven", or ``(point, value, low, high)`` of a violation."""
    simplify = Simplifier(domain)
    constraints = _constraints(conds, simplify)
    bounds = _narrow(domain, constraints)
    if bounds is None:
        return ["proven"] * len(read.indices)  # the guards never hold: the read never happens
    simplify = Simplifier(bounds)
    out = []
    for dim, (index, n) in enumerate(zip(read.indices, read.tensor.shape)):
        form = simplify.normal_affine(index)
        lo, hi = form.interval(bounds)
        for c_form, c_lo, c_hi in constraints:
            scaled = _multiple(form, c_form)
            if scaled is not None:  # the index is a multiple of a guarded form plus a constant
                s, d = scaled
                ends = sorted((s * c_lo + d, s * c_hi + d))
                lo, hi = max(lo, ends[0]), min(hi, ends[1])
        if 0 <= lo and hi < n:
            out.append("proven")
            continue
        witness = _witness(index, n, form, conds, bounds, lo < 0, hi >= n)
        out.append("unproven" if witness is None else witness + (lo, hi))
    return out


def _multiple(form: Affine, base: Affine):
    """``(s, d)`` with ``form == s * base + d`` for an integer ``s != 0``, else None."""
    if not base.terms or not form.terms:
        return None
    key, (_, coef) = next(iter(base.terms.items()))
    entry = form.terms.get(key)
    if entry is None or entry[1] % coef:
        return None
    s = entry[1] // coef
    diff = form.add(base, -s)
    return None if diff.terms else (s, diff.const)


#: a read's variables with at most this many points between them are searched exhaustively
EXHAUSTIVE_POINTS = 1 << 16


def _witness(index, n: int, form: Affine, conds, bounds: dict, low: bool, high: bool):
    """A point of the (narrowed) domain where every condition holds and ``index`` is
    outside ``0..n-1``: ``(point, value)``, or None when none is found. Every point is
    tried when there are few; otherwise the corners where the index is extreme."""
    names = {id(v) for e in (index, *conds) for v in E.free_vars(e)}
    ranges = {v: bounds[v] for v in bounds if id(v) in names}
    if len(ranges) == len(names) and math.prod(hi - lo + 1 for lo, hi in ranges.values()) <= EXHAUSTIVE_POINTS:
        axes = [np.arange(lo, hi + 1, dtype=np.int64) for lo, hi in ranges.values()]
        points = {v: g.ravel() for v, g in zip(ranges, np.meshgrid(*axes, indexing="ij"))}
    else:
        points = _corners(form, ranges, low, high)
    try:
        value = np.broadcast_to(evaluate_at(index, points), next(iter(points.values())).shape if points else (1,))
        hit = (value < 0) | (value >= n)
        for c in conds:
            hit = hit & evaluate_at(c, points)
    except DependsOnData:
        return None
    found = np.flatnonzero(hit)
    if not found.size:
        return None
    return {v: int(x[found[0]]) for v, x in points.items()}, int(value[found[0]])


def _corners(form: Affine, ranges: dict, low: bool, high: bool) -> dict:
    """Points where the affine ``form`` is smallest (``low``) or largest (``high``), the
    variables it does not use at their first or their last value."""
    coefs = {id(atom): coef for atom, coef in form.terms.values() if isinstance(atom, E.Var)}
    points = {v: [] for v in ranges}
    for direction in [d for d, wanted in ((-1, low), (1, high)) if wanted]:
        for rest in (0, 1):
            for var, (v_lo, v_hi) in ranges.items():
                coef = coefs.get(id(var), 0)
                points[var].append(v_hi if (coef * direction > 0 if coef else rest) else v_lo)
    return {v: np.array(x, dtype=np.int64) for v, x in points.items()}


class DependsOnData(Exception):
    """The expression reads data (or a variable the points do not give)."""


_ARRAY_OPS = {"+": np.add, "-": np.subtract, "*": np.multiply, "min": np.minimum, "max": np.maximum,
              "and": np.logical_and, "or": np.logical_or, "<": np.less, "<=": np.less_equal,
              ">": np.greater, ">=": np.greater_equal, "==": np.equal, "!=": np.not_equal}


def evaluate_at(e: E.Expr, points: dict):
    """An integer or bool expression at every one of ``points`` (variable -> values)."""
    if isinstance(e, E.Const):
        return np.asarray(e.value)
    if isinstance(e, E.Var):
        if e not in points:
            raise DependsOnData
        return points[e]
    if isinstance(e, (E.Binary, E.Compare)):
        a, b = evaluate_at(e.a, points), evaluate_at(e.b, points)
        if e.op in ("//", "%"):  # floor semantics; by zero gives 0, as in kernels
            safe = np.where(b == 0, 1, b)
            out = np.floor_divide(a, safe) if e.op == "//" else np.mod(a, safe)
            return np.where(b == 0, 0, out)
        if e.op not in _ARRAY_OPS or (isinstance(e, E.Binary) and dt.is_float(e.dtype)):
            raise DependsOnData
        return _ARRAY_OPS[e.op](a, b)
    if isinstance(e, E.Not):
        return np.logical_not(evaluate_at(e.a, points))
    if isinstance(e, E.Select):
        return np.where(evaluate_at(e.cond, points), evaluate_at(e.t, points), evaluate_at(e.f, points))
    if isinstance(e, E.Cast) and (dt.is_int(e.dtype) or e.dtype == "bool") and not dt.is_float(e.value.dtype):
        value = evaluate_at(e.value, points)
        return value != 0 if e.dtype == "bool" else value
    raise DependsOnData
