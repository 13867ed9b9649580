"""Index arithmetic simplification and interval bounds.

Integer expressions are normalised to affine forms ``sum(coef * atom) + const`` (an atom is
a variable or a non-affine subexpression, compared structurally). ``floordiv``/``floormod``
by a positive constant split off the part of the form that the divisor divides and drop
what the variable bounds prove to be zero. This is what keeps index code and bound
inference tight after splits and fusions.
"""
from __future__ import annotations

import math

import numpy as np

from . import dtype as dt
from . import expr as E

INF = math.inf
Bounds = dict  # Var -> (lo, hi), inclusive integer bounds


def structural_key(e: E.Expr):
    """A hashable key equal for structurally equal expressions (variables by identity)."""
    t = type(e)
    if t is E.Var or isinstance(e, E.Var):
        return ("v", id(e))
    if t is E.Const:
        return ("c", e.dtype, e.value)
    if t is E.Binary:  # the common case, written out: no buffer, op, no func
        return ("Binary", e.op, e.dtype, None, structural_key(e.a), structural_key(e.b))
    if isinstance(e, E.Const):
        return ("c", e.dtype, e.value)
    if isinstance(e, E.TensorRead):
        return ("t", id(e.tensor), tuple(structural_key(i) for i in e.indices))
    buffer = getattr(e, "buffer", None)  # a loop-IR Load: which buffer matters, not just where
    head = (type(e).__name__, getattr(e, "op", None) or getattr(e, "func", None), e.dtype,
            None if buffer is None else id(buffer))
    return head + tuple(structural_key(c) for c in e.children())


# intervals -----------------------------------------------------------------------------

def interval(e: E.Expr, bounds: Bounds | None = None) -> tuple[float, float]:
    """Inclusive lower and upper bound of an integer expression (±inf where unknown)."""
    bounds = bounds or {}
    if isinstance(e, E.Const):
        return (e.value, e.value)
    if isinstance(e, E.Var):
        b = bounds.get(e)
        if b is not None:
            return b
        if isinstance(e, E.IterVar):
            return (e.lo, e.lo + e.extent - 1)
        return (-INF, INF)
    if isinstance(e, E.Binary):
        a_lo, a_hi = interval(e.a, bounds)
        b_lo, b_hi = interval(e.b, bounds)
        op = e.op
        if op == "+":
            return (a_lo + b_lo, a_hi + b_hi)
        if op == "-":
            return (a_lo - b_hi, a_hi - b_lo)
        if op == "*":
            products = [_mul(x, y) for x in (a_lo, a_hi) for y in (b_lo, b_hi)]
            return (min(products), max(products))
        if op == "//" and b_lo == b_hi and b_lo > 0:
            return (_floordiv(a_lo, b_lo), _floordiv(a_hi, b_lo))
        if op == "%" and b_lo == b_hi and b_lo > 0:
            if a_lo >= 0 and a_hi < b_lo:
                return (a_lo, a_hi)
            if _floordiv(a_lo, b_lo) == _floordiv(a_hi, b_lo):
                return (a_lo % b_lo, a_hi % b_lo)
            return (0, b_lo - 1)
        if op == "min":
            return (min(a_lo, b_lo), min(a_hi, b_hi))
        if op == "max":
            return (max(a_lo, b_lo), max(a_hi, b_hi))
        return (-INF, INF)
    if isinstance(e, E.Select):
        t, f = interval(e.t, bounds), interval(e.f, bounds)
        return (min(t[0], f[0]), max(t[1], f[1]))
    if isinstance(e, E.Cast) and dt.is_int(e.dtype) and dt.is_int(e.value.dtype):
        return interval(e.value, bounds)
    return (-INF, INF)


def _mul(x, y):
    if x == 0 or y == 0:
        return 0
    return x * y


def _floordiv(x, c):
    if x in (INF, -INF):
        return x
    return x // c


# affine forms --------------------------------------------------------------------------

class Affine:
    """``sum(coef * atom) + const`` over integer atoms, keyed structurally."""

    __slots__ = ("terms", "const")

    def __init__(self, terms=None, const=0):
        self.terms: dict = terms if terms is not None else {}  # key -> [atom, coef]
        self.const = const

    def add(self, other: "Affine", scale: int = 1) -> "Affine":
        terms = {k: [a, c] for k, (a, c) in self.terms.items()}
        for k, (atom, coef) in other.terms.items():
            hit = terms.get(k)
            if hit is None:
                terms[k] = [atom, coef * scale]
            else:
                hit[1] += coef * scale
        for v in terms.values():
            if v[1] == 0:  # rare: a term cancelled
                terms = {k: v for k, v in terms.items() if v[1] != 0}
                break
        return Affine(terms, self.const + other.const * scale)

    def scale(self, s: int) -> "Affine":
        if s == 0:
            return Affine()
        return Affine({k: [a, c * s] for k, (a, c) in self.terms.items()}, self.const * s)

    def to_expr(self, dtype: str) -> E.Expr:
        return linear_expr(self.terms.values(), self.const, dtype)

    def interval(self, bounds: Bounds) -> tuple[float, float]:
        lo = hi = self.const
        for atom, coef in self.terms.values():
            a_lo, a_hi = interval(atom, bounds)
            x, y = _mul(a_lo, coef), _mul(a_hi, coef)
            lo += min(x, y)
            hi += max(x, y)
        return lo, hi


def split_affine(form: Affine, inner: set, bounds: dict):
    """Split an affine form into a symbolic base (outer variables only) and the interval
    of the rest (inner variables, and non-affine atoms relaxed over all bounds)."""
    base = Affine({}, form.const)
    lo = hi = 0
    for key, (atom, coef) in form.terms.items():
        if isinstance(atom, E.Var):
            outer = id(atom) not in inner
        else:
            outer = not {id(v) for v in E.free_vars(atom)} & inner
        if outer:
            base.terms[key] = [atom, coef]
            continue
        a_lo, a_hi = interval(atom, bounds)
        x, y = a_lo * coef, a_hi * coef
        lo += min(x, y)
        hi += max(x, y)
    return base, lo, hi


def linear_expr(terms, const: int, dtype: str) -> E.Expr:
    """``sum(coef * atom) + const`` from ``(atom, coef)`` pairs, written as the simplifier
    writes every affine form (terms in order, the constant last)."""
    result: E.Expr | None = None
    for atom, coef in terms:
        if coef == 1:
            term = atom
        elif coef == -1 and result is not None:
            result = E.Binary("-", result, atom)
            continue
        else:
            term = E.Binary("*", atom, E.Const(coef, dtype))
        result = term if result is None else E.Binary("+", result, term)
    if result is None:
        return E.Const(const, dtype)
    if const > 0:
        return E.Binary("+", result, E.Const(const, dtype))
    if const < 0:
        return E.Binary("-", result, E.Const(-const, dtype))
    return result


def linear_terms(e: E.Expr) -> tuple[list, int] | None:
    """The ``(variable, coef)`` terms (in order) and the constant of ``e`` when it is a sum
    of variables times constants as ``linear_expr`` writes it; None for anything else."""
    items = []
    while isinstance(e, E.Binary) and e.op in ("+", "-"):
        items.append((e.b, 1 if e.op == "+" else -1))
        e = e.a
    items.append((e, 1))
    terms, const = [], 0
    for x, sign in reversed(items):
        if isinstance(x, E.Const) and dt.is_int(x.dtype):
            const += sign * x.value
        elif isinstance(x, E.Var):
            terms.append((x, sign))
        elif isinstance(x, E.Binary) and x.op == "*" and isinstance(x.a, E.Var) and isinstance(x.b, E.Const) \
                and dt.is_int(x.b.dtype):
            terms.append((x.a, sign * x.b.value))
        else:
            return None
    return terms, const


def _atom(e: E.Expr) -> Affine:
    return Affine({structural_key(e): [e, 1]}, 0)


class Simplifier:
    """Simplify expressions under inclusive bounds for some variables."""

    def __init__(self, bounds: Bounds | None = None):
        self.bounds: Bounds = dict(bounds or {})
        self._memo: dict[int, tuple[E.Expr, E.Expr]] = {}

    def __call__(self, e: E.Expr) -> E.Expr:
        hit = self._memo.get(id(e))
        if hit is not None and hit[0] is e:
            return hit[1]
        out = self._simplify(e)
        self._memo[id(e)] = (e, out)
        return out

    # integer affine part -----------------------------------------------------------
    def normal_affine(self, e: E.Expr) -> Affine:
        """``self.affine(self(e))``: the affine form of ``e`` simplified. A plain sum of
        variables times constants (a loop's axis value) is not simplified first: its form
        is what simplifying it would keep (bound inference and layout plans read
        thousands of them a search round)."""
        if linear_terms(e) is not None:
            return self.affine(e)
        return self.affine(self(e))

    def affine(self, e: E.Expr) -> Affine:
        if isinstance(e, E.Const):
            return Affine({}, e.value)
        if isinstance(e, E.Binary):
            op = e.op
            if op == "+" or op == "-":
                return self.affine(e.a).add(self.affine(e.b), 1 if op == "+" else -1)
            if op == "*":
                a, b = self.affine(e.a), self.affine(e.b)
                if not b.terms:
                    return a.scale(b.const)
                if not a.terms:
                    return b.scale(a.const)
                return _atom(E.Binary("*", a.to_expr(e.dtype), b.to_expr(e.dtype)))
            if op == "//" or op == "%":
                return self._divmod(e)
        elif isinstance(e, E.Var):
            b = self.bounds.get(e)
            if b is not None and b[0] == b[1]:
                return Affine({}, b[0])  # a loop of one iteration
            return Affine({("v", id(e)): [e, 1]}, 0)  # _atom(e), its key written out
        s = self(e)
        if isinstance(s, E.Const):
            return Affine({}, s.value)
        return _atom(s)

    def _divmod(self, e: E.Binary) -> Affine:
        num = self.affine(e.a)
        den = self.affine(e.b)
        if den.terms or den.const <= 0:
            return _atom(E.Binary(e.op, num.to_expr(e.dtype), den.to_expr(e.dtype)))
        c = den.const
        if c == 1:
            return num if e.op == "//" else Affine()
        quotient = Affine({}, num.const // c)
        rest = Affine({}, num.const % c)
        for key, (atom, coef) in num.terms.items():
            q, r = divmod(coef, c)
            if q:
                quotient.terms[key] = [atom, q]
            if r:
                rest.terms[key] = [atom, r]
        lo, hi = rest.interval(self.bounds)
        if e.op == "%":
            if 0 <= lo and hi < c:
                return rest
        elif lo != -INF and hi != INF and lo // c == hi // c:
            return quotient.add(Affine({}, lo // c))
        aligned = self._aligned_split(rest, c)
        if aligned is not None:  # (g·B + S) // c == B // (c/g) and % c == (B % (c/g))·g + S
            big, small, g = aligned
            part = self.affine(E.Binary(e.op, big.to_expr(e.dtype), E.Const(c // g, e.dtype)))
            return quotient.add(part) if e.op == "//" else part.scale(g).add(small)
        if e.op == "%":
            return _atom(E.Binary("%", rest.to_expr(e.dtype), E.Const(c, e.dtype)))
        inner = rest.to_expr(e.dtype)
        # (x // a) // b == x // (a * b) for positive a, b
        if isinstance(inner, E.Binary) and inner.op == "//" and isinstance(inner.b, E.Const) and inner.b.value > 0:
            inner = E.Binary("//", inner.a, E.Const(inner.b.value * c, e.dtype))
            return quotient.add(_atom(inner))
        return quotient.add(_atom(E.Binary("//", inner, E.Const(c, e.dtype))))

    def _aligned_split(self, rest: Affine, c: int):
        """``(B, S, g)`` with ``rest == g·B + S``, ``g > 1`` dividing ``c`` and ``0 <= S < g``
        on the bounds (a split loop's outer part times its factor plus its inner part:
        ``(8·co.0 + co.1) // 32 == co.0 // 4``), or None. The terms with the largest
        coefficients go to B."""
        terms = sorted(rest.terms.items(), key=lambda kv: -abs(kv[1][1]))
        for k in range(1, len(terms) + 1):
            g = math.gcd(c, *(coef for _, (_, coef) in terms[:k]))
            if g == 1:
                break
            small = Affine(dict(terms[k:]), rest.const)
            lo, hi = small.interval(self.bounds)
            if 0 <= lo and hi < g:
                big = Affine({key: [atom, coef // g] for key, (atom, coef) in terms[:k]}, 0)
                return big, small, g
        return None

    # general ---------------------------------------------------------------------------
    def _simplify(self, e: E.Expr) -> E.Expr:
        if isinstance(e, (E.Var, E.Const)):
            return e
        if dt.is_int(e.dtype) and isinstance(e, E.Binary) and e.op in ("+", "-", "*", "//", "%"):
            return self.affine(e).to_expr(e.dtype)
        kids = e.children()
        new = [self(k) for k in kids]
        if any(n is not o for n, o in zip(new, kids)):
            e = E.rebuild(e, new)
        if isinstance(e, E.Binary):
            return self._binary(e)
        if isinstance(e, E.Compare):
            return self._compare(e)
        if isinstance(e, E.Not) and isinstance(e.a, E.Const):
            return E.Const(not e.a.value, "bool")
        if isinstance(e, E.Select) and isinstance(e.cond, E.Const):
            return e.t if e.cond.value else e.f
        if isinstance(e, E.Cast) and isinstance(e.value, E.Const):
            return E.Const(e.value.value, e.dtype)
        return e

    def _binary(self, e: E.Binary) -> E.Expr:
        a, b, op = e.a, e.b, e.op
        if op in ("and", "or"):
            for x, y in ((a, b), (b, a)):
                if isinstance(x, E.Const):
                    if op == "and":
                        return y if x.value else x
                    return x if x.value else y
            return e
        if isinstance(a, E.Const) and isinstance(b, E.Const):
            return _fold(e)
        if op in ("min", "max") and dt.is_int(e.dtype):
            a_lo, a_hi = interval(a, self.bounds)
            b_lo, b_hi = interval(b, self.bounds)
            if a_hi <= b_lo:
                return a if op == "min" else b
            if b_hi <= a_lo:
                return b if op == "min" else a
        if dt.is_float(e.dtype):
            if op == "*" and (_is_const(a, 1) or _is_const(b, 1)):
                return b if _is_const(a, 1) else a
            if op == "+" and (_is_const(a, 0) or _is_const(b, 0)):
                return b if _is_const(a, 0) else a
        return e

    def _compare(self, e: E.Compare) -> E.Expr:
        a, b = e.a, e.b
        if isinstance(a, E.Const) and isinstance(b, E.Const):
            return _fold(e)
        if not dt.is_int(a.dtype):
            return e
        lo, hi = self.affine(a).add(self.affine(b), -1).interval(self.bounds)
        verdict = {"<": (hi < 0, lo >= 0), "<=": (hi <= 0, lo > 0), ">": (lo > 0, hi <= 0),
                   ">=": (lo >= 0, hi < 0), "==": (lo == hi == 0, lo > 0 or hi < 0),
                   "!=": (lo > 0 or hi < 0, lo == hi == 0)}[e.op]
        if verdict[0]:
            return E.Const(True, "bool")
        if verdict[1]:
            return E.Const(False, "bool")
        return e


def _is_const(e: E.Expr, value) -> bool:
    return isinstance(e, E.Const) and e.value == value


def _fold(e) -> E.Const:
    """Evaluate an operation on two constants with the dtype's own arithmetic."""
    a, b = e.a.value, e.b.value
    op = e.op
    if isinstance(e, E.Compare):
        return E.Const({"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b, "==": a == b, "!=": a != b}[op], "bool")
    if dt.is_float(e.dtype):
        npt = np.dtype(e.dtype).type
        x, y = npt(a), npt(b)
        with np.errstate(all="ignore"):
            value = {"+": lambda: x + y, "-": lambda: x - y, "*": lambda: x * y, "/": lambda: x / y,
                     "min": lambda: np.minimum(x, y), "max": lambda: np.maximum(x, y)}[op]()
        return E.Const(value, e.dtype)
    if op in ("//", "%") and b == 0:
        return e  # leave division by zero to run time rather than fail here
    value = {"+": lambda: a + b, "-": lambda: a - b, "*": lambda: a * b, "//": lambda: a // b,
             "%": lambda: a % b, "min": lambda: min(a, b), "max": lambda: max(a, b)}[op]()
    return E.Const(value, e.dtype)


def simplify(e: E.Expr, bounds: Bounds | None = None) -> E.Expr:
    """Simplify ``e``; ``bounds`` maps variables to inclusive ``(lo, hi)`` ranges."""
    return Simplifier(bounds)(e)
