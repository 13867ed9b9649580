"""Pointwise operators that exported models hold beside the activations: math functions
(exp, log, floor, round...), comparisons and logic (bool results), Mod, PRelu and the
three-way select ``where``.

Each is a row of a table, its expression and its numpy reference, declared in a loop as an
elementwise operator (a workload and a node kind of the network graph, ``registry``).
"""
from __future__ import annotations

import numpy as np

import ir

from .elementwise import POSITIVE, _broadcast_index, broadcast_shape, unary
from .registry import BROADCAST, elementwise_operator, node_kind


def _round_half_even(v):
    """Round to the nearest integer, halves to the even one (ONNX Round, numpy.round)."""
    r = ir.floor(v + 0.5)
    halfway_odd = (r - v == 0.5) & (r - 2.0 * ir.floor(r * 0.5) == 1.0)
    integral = 2.0 ** (52 if v.dtype == "float64" else 23)   # from here on every value is an integer
    return ir.select(ir.abs(v) >= integral, v, r - ir.cast(halfway_odd, v.dtype))   # (v + 0.5 would round)


def _softplus(v):
    """``log(1 + exp(v))`` without overflow: ``max(v, 0) + log(1 + exp(-|v|))``."""
    return ir.max(v, ir.const(0.0, v.dtype)) + ir.log(1.0 + ir.exp(-ir.abs(v)))


def _sign(v):
    zero = ir.const(0, v.dtype)
    return ir.cast(v > zero, v.dtype) - ir.cast(v < zero, v.dtype)


def _np_softplus(x):
    return np.logaddexp(0.0, np.asarray(x, np.float64))


#: kind -> (expression of one element, numpy reference, needs a float operand)
UNARY = {
    "negative": (lambda v: -v, np.negative, False),
    "abs": (ir.abs, np.abs, False),
    "exp": (ir.exp, np.exp, True),
    "log": (ir.log, np.log, True),
    "floor": (ir.floor, np.floor, True),
    "ceil": (ir.ceil, np.ceil, True),
    "round": (_round_half_even, np.round, True),
    "softplus": (_softplus, _np_softplus, True),
    "sign": (_sign, np.sign, False),
    "logical_not": (lambda v: ir.cast(v, "bool") == ir.const(False, "bool"), np.logical_not, False),
    "isnan": (lambda v: v != v, np.isnan, True),
}


def _declare_unary(kind: str, expr, reference, needs_float: bool) -> None:
    def fn(x, name: str = kind):
        if needs_float and not x.dtype.startswith("float"):
            raise ValueError(f"{name}: needs a float tensor, got {x.dtype}")
        return unary(x, expr, name)

    fn.__name__ = fn.__qualname__ = kind
    fn.__doc__ = f"``{kind}`` of every element of ``x``."
    elementwise_operator(kind, reference=reference, inputs={"x": POSITIVE} if kind == "log" else None,
                         dtype="bool" if kind == "logical_not" else "float32")(fn)


for _kind, _row in UNARY.items():
    _declare_unary(_kind, *_row)


def _float_mod(a, b):
    """Python's modulo (the result has the divisor's sign): ONNX Mod with fmod=0."""
    return a - b * ir.floor(a / b)


def _c_fmod(a, b):
    """C's fmod (the result has the dividend's sign): ONNX Mod with fmod=1."""
    q = a / b
    return a - b * ir.select(q < ir.const(0.0, q.dtype), ir.ceil(q), ir.floor(q))


def _prelu(x, slope):
    return ir.select(x < ir.const(0, x.dtype), x * slope, x)


#: kind -> (expression of two elements, numpy reference)
BINARY = {
    "equal": (lambda a, b: a == b, np.equal),
    "less": (lambda a, b: a < b, np.less),
    "less_equal": (lambda a, b: a <= b, np.less_equal),
    "greater": (lambda a, b: a > b, np.greater),
    "greater_equal": (lambda a, b: a >= b, np.greater_equal),
    "logical_and": (lambda a, b: a & b, np.logical_and),
    "logical_or": (lambda a, b: a | b, np.logical_or),
    "logical_xor": (lambda a, b: a != b, np.logical_xor),
    "mod": (_float_mod, np.mod),
    "fmod": (_c_fmod, np.fmod),
    "prelu": (_prelu, lambda x, s: np.where(x < 0, x * s, x)),
}


def _declare_binary(kind: str, expr, reference) -> None:
    def fn(a, b, name: str = kind):
        if a.dtype != b.dtype:
            raise ValueError(f"{name}: operands of dtypes {a.dtype} and {b.dtype}; expected one dtype")
        if kind in ("mod", "fmod") and not a.dtype.startswith("float"):
            raise ValueError(f"{name}: needs float operands, got {a.dtype}")
        shape = broadcast_shape(a.shape, b.shape, name)
        tag = "elemwise" if a.shape == b.shape else "broadcast"
        return ir.compute(shape, lambda *i: expr(a[_broadcast_index(i, a.shape)], b[_broadcast_index(i, b.shape)]),
                          name=name, tag=tag)

    fn.__name__ = fn.__qualname__ = kind
    fn.__doc__ = f"``{kind}`` of ``a`` and ``b`` elementwise, numpy broadcasting."
    elementwise_operator(kind, reference=reference, arity=2, inputs={"b": POSITIVE} if "mod" in kind else None,
                         dtype="bool" if kind.startswith("logical") else "float32")(fn)


for _kind, _row in BINARY.items():
    _declare_binary(_kind, *_row)


def where(cond, x, y, name: str = "where"):
    """``x`` where ``cond`` holds, else ``y`` (numpy.where), the three broadcast together."""
    if cond.dtype != "bool":
        raise ValueError(f"{name}: the condition must be bool, got {cond.dtype}")
    if x.dtype != y.dtype:
        raise ValueError(f"{name}: the values have dtypes {x.dtype} and {y.dtype}; expected one dtype")
    shape = broadcast_shape(broadcast_shape(cond.shape, x.shape, name), y.shape, name)
    return ir.compute(shape, lambda *i: ir.select(cond[_broadcast_index(i, cond.shape)],
                                                  x[_broadcast_index(i, x.shape)], y[_broadcast_index(i, y.shape)]),
                      name=name, tag="broadcast")


node_kind("where", BROADCAST, lambda t, a, name: where(t[0], t[1], t[2], name),
          lambda x, a: np.where(x[0], x[1], x[2]), 3, maps_elements=True)
