"""Expression nodes of the tensor language.

Expressions are immutable trees built with Python operators. ``==`` and ``!=`` build
comparison nodes (as in TVM); their truth value is identity of the two sides, which keeps
expressions usable as dictionary keys. Every node has a ``dtype``; operands of a binary
operation must share it (Python numbers adapt to the other side), so mixing precisions
needs an explicit ``cast``.
"""
from __future__ import annotations

import math
from typing import Iterable, Sequence

import numpy as np

from . import dtype as dt

MATH_FUNCS = ("exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "erf", "abs", "pow", "floor", "ceil")
#: the math functions that cost many instructions (the rest are one each): a stage calling
#: one is not inlined, and features count them as math
TRANSCENDENTAL_FUNCS = frozenset(("exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "erf", "pow"))


class Expr:
    """Base of all expression nodes."""

    __slots__ = ("dtype",)
    __hash__ = object.__hash__

    # arithmetic ----------------------------------------------------------------------
    def __add__(self, other):
        return binary("+", self, other)

    def __radd__(self, other):
        return binary("+", other, self)

    def __sub__(self, other):
        return binary("-", self, other)

    def __rsub__(self, other):
        return binary("-", other, self)

    def __mul__(self, other):
        return binary("*", self, other)

    def __rmul__(self, other):
        return binary("*", other, self)

    def __truediv__(self, other):
        return binary("/", self, other)

    def __rtruediv__(self, other):
        return binary("/", other, self)

    def __floordiv__(self, other):
        return binary("//", self, other)

    def __rfloordiv__(self, other):
        return binary("//", other, self)

    def __mod__(self, other):
        return binary("%", self, other)

    def __rmod__(self, other):
        return binary("%", other, self)

    def __pow__(self, other):
        return call("pow", self, other)

    def __rpow__(self, other):
        return call("pow", other, self)

    def __neg__(self):
        return binary("-", const(0, self.dtype), self)

    def __abs__(self):
        return call("abs", self)

    # comparisons and logic ---------------------------------------------------------
    def __lt__(self, other):
        return compare("<", self, other)

    def __le__(self, other):
        return compare("<=", self, other)

    def __gt__(self, other):
        return compare(">", self, other)

    def __ge__(self, other):
        return compare(">=", self, other)

    def __eq__(self, other):
        return compare("==", self, other)

    def __ne__(self, other):
        return compare("!=", self, other)

    def __and__(self, other):
        return logical("and", self, other)

    def __rand__(self, other):
        return logical("and", other, self)

    def __or__(self, other):
        return logical("or", self, other)

    def __ror__(self, other):
        return logical("or", other, self)

    def __invert__(self):
        return Not(self)

    def __bool__(self):
        raise TypeError(f"the expression {self} has no Python truth value; "
                        "use ir.select(cond, a, b) or & | ~ to combine conditions")

    def astype(self, dtype) -> "Expr":
        return cast(self, dtype)

    def children(self) -> tuple["Expr", ...]:
        return ()

    def __repr__(self) -> str:
        return expr_str(self)


class Var(Expr):
    """A named scalar variable: a loop index or a compute axis."""

    __slots__ = ("name",)

    def __init__(self, name: str, dtype: str = dt.INDEX):
        self.name = name
        self.dtype = dt.canonical(dtype)


class IterVar(Var):
    """An axis with a domain ``[lo, lo + extent)``: a compute op's space axis or a reduce axis."""

    __slots__ = ("lo", "extent", "kind")

    def __init__(self, name: str, lo: int, extent: int, kind: str):
        super().__init__(name, dt.INDEX)
        self.lo = lo
        self.extent = extent
        self.kind = kind  # "space" or "reduce"


class Const(Expr):
    __slots__ = ("value",)

    def __init__(self, value, dtype: str):
        self.dtype = dt.canonical(dtype)
        if dt.is_float(self.dtype):
            self.value = float(np.dtype(self.dtype).type(value))
        elif self.dtype == "bool":
            self.value = bool(value)
        else:
            self.value = int(value)


class Binary(Expr):
    """Arithmetic (``+ - * / // % min max``) or logic (``and or``) on two operands of one dtype."""

    __slots__ = ("op", "a", "b")

    def __init__(self, op: str, a: Expr, b: Expr):
        self.op, self.a, self.b = op, a, b
        self.dtype = a.dtype

    def children(self):
        return (self.a, self.b)


class Compare(Expr):
    __slots__ = ("op", "a", "b")

    def __init__(self, op: str, a: Expr, b: Expr):
        self.op, self.a, self.b = op, a, b
        self.dtype = "bool"

    def children(self):
        return (self.a, self.b)

    def __bool__(self):
        # lets dict/set lookups (which call ==) work on expressions, as in TVM
        if self.op == "==":
            return self.a is self.b
        if self.op == "!=":
            return self.a is not self.b
        return Expr.__bool__(self)


class Not(Expr):
    __slots__ = ("a",)

    def __init__(self, a):
        a = as_expr(a)
        if a.dtype != "bool":
            raise TypeError(f"logical not needs a bool expression, got {a.dtype}: {a}")
        self.a = a
        self.dtype = "bool"

    def children(self):
        return (self.a,)


class Select(Expr):
    """``cond ? t : f``. Lazy for tensor reads: a branch's reads happen only where it is taken,
    so ``select(in_bounds, A[i - 1], 0.0)`` is the way to write padding."""

    __slots__ = ("cond", "t", "f")

    def __init__(self, cond: Expr, t: Expr, f: Expr):
        self.cond, self.t, self.f = cond, t, f
        self.dtype = t.dtype

    def children(self):
        return (self.cond, self.t, self.f)


class Cast(Expr):
    __slots__ = ("value",)

    def __init__(self, dtype: str, value: Expr):
        self.dtype = dtype
        self.value = value

    def children(self):
        return (self.value,)


class Call(Expr):
    """A pure math function of one or two float operands."""

    __slots__ = ("func", "args")

    def __init__(self, func: str, args: tuple, dtype: str):
        self.func, self.args, self.dtype = func, args, dtype

    def children(self):
        return self.args


class TensorRead(Expr):
    """``tensor[indices]``: one element of a placeholder or of another compute op's output."""

    __slots__ = ("tensor", "indices")

    def __init__(self, tensor, indices: tuple):
        self.tensor, self.indices = tensor, indices
        self.dtype = tensor.dtype

    def children(self):
        return self.indices


class Reduce(Expr):
    """A commutative reduction of ``source`` over ``axes`` where ``condition`` holds."""

    __slots__ = ("combiner", "source", "axes", "condition")

    def __init__(self, combiner: str, source: Expr, axes: tuple, condition: Expr | None):
        self.combiner, self.source, self.axes, self.condition = combiner, source, axes, condition
        self.dtype = source.dtype

    def children(self):
        return (self.source,) if self.condition is None else (self.source, self.condition)

    def identity(self) -> Const:
        if self.combiner == "sum":
            return const(0, self.dtype)
        return const(min_value(self.dtype) if self.combiner == "max" else max_value(self.dtype), self.dtype)


# construction helpers ------------------------------------------------------------------

def const(value, dtype: str | None = None) -> Const:
    if dtype is None:
        if isinstance(value, (bool, np.bool_)):
            dtype = "bool"
        elif isinstance(value, (int, np.integer)):
            dtype = dt.INDEX
        elif isinstance(value, (float, np.floating)):
            dtype = "float32"
        else:
            raise TypeError(f"cannot make a constant from {value!r} of type {type(value).__name__}")
    return Const(value, dtype)


def as_expr(value, like: str | None = None) -> Expr:
    """Wrap a Python number as a constant, taking the dtype ``like`` of the other operand."""
    if isinstance(value, Expr):
        return value
    if isinstance(value, (bool, np.bool_)):
        return Const(value, "bool")
    if isinstance(value, (int, np.integer)):
        return Const(value, like if like is not None and like != "bool" else dt.INDEX)
    if isinstance(value, (float, np.floating)):
        if like is not None and not dt.is_float(like):
            raise TypeError(f"cannot combine the float {value!r} with a {like} expression; "
                            "cast the expression to a float type first")
        return Const(value, like or "float32")
    raise TypeError(f"expected an expression or a number, got {value!r} of type {type(value).__name__}")


def _operands(a, b) -> tuple[Expr, Expr]:
    if isinstance(a, Expr):
        b = as_expr(b, a.dtype)
    elif isinstance(b, Expr):
        a = as_expr(a, b.dtype)
    else:
        a, b = as_expr(a), as_expr(b)
    if a.dtype != b.dtype:
        raise TypeError(f"dtype mismatch: {a} is {a.dtype} but {b} is {b.dtype}; "
                        "use ir.cast to convert one side")
    return a, b


def binary(op: str, a, b) -> Expr:
    a, b = _operands(a, b)
    if a.dtype == "bool":
        raise TypeError(f"arithmetic '{op}' on bool operands {a} and {b}; cast them first")
    if op == "/" and not dt.is_float(a.dtype):
        raise TypeError(f"'/' on integer operands {a} and {b}: use '//' (floor division)")
    if op == "%" and dt.is_float(a.dtype):
        raise TypeError(f"'%' on float operands {a} and {b} is not supported")
    if op == "//" and dt.is_float(a.dtype):
        return Call("floor", (Binary("/", a, b),), a.dtype)
    return Binary(op, a, b)


def compare(op: str, a, b) -> Compare:
    a, b = _operands(a, b)
    return Compare(op, a, b)


def logical(op: str, a, b) -> Binary:
    a, b = _operands(a, b)
    if a.dtype != "bool":
        raise TypeError(f"'{op}' needs bool operands, got {a.dtype}: {a} {op} {b}")
    return Binary(op, a, b)


def select(cond, true_value, false_value) -> Expr:
    """``true_value`` where ``cond`` holds, else ``false_value`` (like numpy.where)."""
    cond = as_expr(cond)
    if cond.dtype != "bool":
        raise TypeError(f"select needs a bool condition, got {cond.dtype}: {cond}")
    t, f = _operands(true_value, false_value)
    return Select(cond, t, f)


def cast(value, dtype) -> Expr:
    dtype = dt.canonical(dtype)
    value = as_expr(value)
    if value.dtype == dtype:
        return value
    if isinstance(value, Const):
        return Const(value.value, dtype)
    return Cast(dtype, value)


def call(func: str, *args) -> Expr:
    if func not in MATH_FUNCS:
        raise ValueError(f"unknown math function {func!r}; expected one of {', '.join(MATH_FUNCS)}")
    if len(args) == 2:
        a, b = _operands(*args)
        args = (a, b)
    else:
        args = tuple(as_expr(a) for a in args)
    expected = 2 if func == "pow" else 1
    if len(args) != expected:
        raise TypeError(f"{func} takes {expected} argument(s), got {len(args)}")
    dtype = args[0].dtype
    if func == "abs" and dt.is_int(dtype):
        x = args[0]
        return Select(Compare("<", x, Const(0, dtype)), Binary("-", Const(0, dtype), x), x)
    if not dt.is_float(dtype):
        raise TypeError(f"{func} needs a float operand, got {dtype}: {args[0]}")
    return Call(func, args, dtype)


def max_value(dtype: str):
    dtype = dt.canonical(dtype)
    if dt.is_float(dtype):
        return math.inf
    if dtype == "bool":
        return True
    return int(np.iinfo(dtype).max)


def min_value(dtype: str):
    dtype = dt.canonical(dtype)
    if dt.is_float(dtype):
        return -math.inf
    if dtype == "bool":
        return False
    return int(np.iinfo(dtype).min)


def _reducer(combiner: str):
    def reduce_fn(expr, b=None, axis=None, where=None):
        if axis is None:
            if b is None or combiner == "sum":
                raise TypeError(f"ir.{combiner} needs axis=<reduce axis or list of them>"
                                + ("" if combiner == "sum" else f", or two operands for an elementwise {combiner}"))
            return binary(combiner, expr, b)
        if b is not None:
            raise TypeError(f"ir.{combiner} takes either two operands or one operand with axis=, not both")
        axes = tuple(axis) if isinstance(axis, (list, tuple)) else (axis,)
        for ax in axes:
            if not isinstance(ax, IterVar) or ax.kind != "reduce":
                raise TypeError(f"ir.{combiner} axis must be reduce axes made by ir.reduce_axis, got {ax!r}")
        if len(set(map(id, axes))) != len(axes):
            raise ValueError(f"ir.{combiner} lists the same reduce axis twice: {[a.name for a in axes]}")
        source = as_expr(expr)
        if source.dtype == "bool":
            raise TypeError(f"ir.{combiner} of a bool expression; cast it to a number type first")
        cond = None if where is None else as_expr(where)
        if cond is not None and cond.dtype != "bool":
            raise TypeError(f"ir.{combiner} where= needs a bool condition, got {cond.dtype}")
        return Reduce(combiner, source, axes, cond)

    reduce_fn.__name__ = combiner
    reduce_fn.__doc__ = (f"``ir.{combiner}(expr, axis=k, where=cond)`` reduces over reduce axes (TVM style)"
                         + ("." if combiner == "sum" else f"; ``ir.{combiner}(a, b)`` is the elementwise {combiner}."))
    return reduce_fn


sum = _reducer("sum")  # noqa: A001 - TVM's name, deliberately
max = _reducer("max")  # noqa: A001
min = _reducer("min")  # noqa: A001


def _math(func: str):
    def fn(*args):
        return call(func, *args)
    fn.__name__ = func
    fn.__doc__ = f"Elementwise {func}; vectorised to float32 precision by the code generator."
    return fn


exp, log, sqrt, rsqrt, tanh, sigmoid, erf, abs, pow, floor, ceil = (_math(f) for f in MATH_FUNCS)  # noqa: A001


def all_of(conds: Iterable) -> Expr:
    """The conjunction of several bool expressions (True for none)."""
    result: Expr | None = None
    for c in conds:
        c = as_expr(c)
        result = c if result is None else logical("and", result, c)
    return Const(True, "bool") if result is None else result


# traversal -----------------------------------------------------------------------------

def walk(expr: Expr):
    """Yield every node of ``expr`` (pre-order)."""
    stack = [expr]
    while stack:
        e = stack.pop()
        yield e
        stack.extend(reversed(e.children()))


def rebuild(expr: Expr, new_children: Sequence[Expr]) -> Expr:
    """A copy of ``expr`` with other children (same kinds and order as ``expr.children()``)."""
    if isinstance(expr, Binary):
        return Binary(expr.op, *new_children)
    if isinstance(expr, Compare):
        return Compare(expr.op, *new_children)
    if isinstance(expr, Not):
        return Not(new_children[0])
    if isinstance(expr, Select):
        return Select(*new_children)
    if isinstance(expr, Cast):
        return Cast(expr.dtype, new_children[0])
    if isinstance(expr, Call):
        return Call(expr.func, tuple(new_children), expr.dtype)
    if isinstance(expr, TensorRead):
        return TensorRead(expr.tensor, tuple(new_children))
    if isinstance(expr, Reduce):
        cond = new_children[1] if len(new_children) > 1 else None
        return Reduce(expr.combiner, new_children[0], expr.axes, cond)
    rebuild_fn = getattr(expr, "rebuild", None)
    if rebuild_fn is not None:
        return rebuild_fn(new_children)
    return expr


def _rebuilt(expr: Expr, kids, new_kids) -> Expr:
    """``expr`` with ``new_kids`` for its children ``kids``: itself when none changed."""
    for n, o in zip(new_kids, kids):
        if n is not o:
            return rebuild(expr, new_kids)
    return expr


def transform(expr: Expr, fn) -> Expr:
    """Rewrite bottom-up: ``fn(node)`` returns a replacement or None to keep the node."""
    memo: dict[int, Expr] = {}

    def visit(e: Expr) -> Expr:
        done = memo.get(id(e))
        if done is not None:
            return done
        kids = e.children()
        e2 = _rebuilt(e, kids, [visit(k) for k in kids]) if kids else e
        out = fn(e2)
        result = e2 if out is None else out
        memo[id(e)] = result
        return result

    result = visit(expr)
    visit = None  # the closure refers to itself: let its memo go now, not at the next cyclic GC
    return result


def substitute(expr: Expr, mapping: dict) -> Expr:
    """Replace variables (keys, compared by identity) with expressions. (``transform`` with
    a variable lookup, written out: lowering and bound inference substitute hundreds of
    thousands of trees a search round.)"""
    if not mapping:
        return expr
    by_id = {id(k): v for k, v in mapping.items()}
    memo: dict[int, Expr] = {}

    def visit(e: Expr) -> Expr:
        t = type(e)
        if t is Const:
            return e
        key = id(e)
        done = memo.get(key)
        if done is not None:
            return done
        if t is Binary:
            a, b = e.a, e.b
            na, nb = visit(a), visit(b)
            out = e if na is a and nb is b else Binary(e.op, na, nb)
        elif isinstance(e, Var):
            out = by_id.get(key, e)
        else:
            kids = e.children()
            out = _rebuilt(e, kids, [visit(k) for k in kids]) if kids else e
        memo[key] = out
        return out

    result = visit(expr)
    visit = None  # the closure refers to itself: let its memo go now, not at the next cyclic GC
    return result


def free_vars(expr: Expr) -> list[Var]:
    """The variables of ``expr``, each once, in pre-order (``walk``'s order)."""
    seen: dict[int, Var] = {}
    stack = [expr]
    while stack:
        e = stack.pop()
        if isinstance(e, Var):
            seen.setdefault(id(e), e)
            continue
        kids = e.children()
        if kids:
            stack.extend(reversed(kids))
    return list(seen.values())


# printing ------------------------------------------------------------------------------

_INFIX = {"+", "-", "*", "/", "//", "%"}


def expr_str(e: Expr) -> str:
    """Readable text for an expression (repr, DAG printing, printed loop nests)."""
    if isinstance(e, Var):
        return e.name
    if isinstance(e, Const):
        if e.dtype == "float32":
            return f"{e.value!r}f"
        return repr(e.value)
    if isinstance(e, Binary):
        a, b = expr_str(e.a), expr_str(e.b)
        if e.op in _INFIX:
            return f"({a} {e.op} {b})"
        if e.op in ("and", "or"):
            return f"({a} {'&&' if e.op == 'and' else '||'} {b})"
        return f"{e.op}({a}, {b})"
    if isinstance(e, Compare):
        return f"({expr_str(e.a)} {e.op} {expr_str(e.b)})"
    if isinstance(e, Not):
        return f"!{expr_str(e.a)}"
    if isinstance(e, Select):
        return f"select({expr_str(e.cond)}, {expr_str(e.t)}, {expr_str(e.f)})"
    if isinstance(e, Cast):
        return f"{e.dtype}({expr_str(e.value)})"
    if isinstance(e, Call):
        return f"{e.func}({', '.join(expr_str(a) for a in e.args)})"
    if isinstance(e, TensorRead):
        return f"{e.tensor.name}[{', '.join(expr_str(i) for i in e.indices)}]"
    if isinstance(e, Reduce):
        axes = ", ".join(a.name for a in e.axes)
        where = "" if e.condition is None else f", where={expr_str(e.condition)}"
        return f"{e.combiner}({expr_str(e.source)}, axis=[{axes}]{where})"
    to_str = getattr(e, "to_str", None)
    if to_str is not None:
        return to_str()
    return f"<{type(e).__name__}>"
