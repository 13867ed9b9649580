"""Elementwise and broadcast operators: activations, casts, bias_add, arithmetic with broadcasting.

These are the stages that the sketch rules inline into their producers or consumers
(tags ``elemwise`` for same-shape maps, ``broadcast`` where an operand is smaller).
Flops: one per arithmetic operation per output element, a math call (erf, tanh...) as one.
"""
from __future__ import annotations

import math
import operator as pyop

import numpy as np

import ir

from . import reference as ref
from .common import check_shape, numel
from .registry import operator

_BINARY = {"+": pyop.add, "-": pyop.sub, "*": pyop.mul, "/": pyop.truediv, "max": ir.max, "min": ir.min,
           "pow": ir.pow}


def unary(x, fn, name: str, tag: str = "elemwise"):
    """``fn`` applied to every element of ``x``."""
    return ir.compute(x.shape, lambda *i: fn(x[i]), name=name, tag=tag)


def relu(x, name: str = "relu"):
    return unary(x, lambda v: ir.max(v, ir.const(0, x.dtype)), name)


def gelu(x, name: str = "gelu"):
    """The exact (erf) form: ``x · (1 + erf(x/√2)) / 2``."""
    return unary(x, lambda v: v * 0.5 * (1.0 + ir.erf(v * (1.0 / math.sqrt(2.0)))), name)


def sigmoid(x, name: str = "sigmoid"):
    return unary(x, ir.sigmoid, name)


def tanh(x, name: str = "tanh"):
    return unary(x, ir.tanh, name)


def leaky_relu(x, alpha: float = 0.01, name: str = "leaky_relu"):
    return unary(x, lambda v: ir.select(v < ir.const(0, x.dtype), v * float(alpha), v), name)


def clip(x, lo: float | None = None, hi: float | None = None, name: str = "clip"):
    """``x`` limited to ``[lo, hi]`` (a missing bound does not limit)."""
    def fn(v):
        if lo is not None:
            v = ir.max(v, ir.const(float(lo), x.dtype))
        return v if hi is None else ir.min(v, ir.const(float(hi), x.dtype))
    return unary(x, fn, name)


def _hard_sigmoid(v, alpha: float, beta: float, dtype: str):
    return ir.min(ir.max(v * float(alpha) + float(beta), ir.const(0.0, dtype)), ir.const(1.0, dtype))


def hard_sigmoid(x, alpha: float = 0.2, beta: float = 0.5, name: str = "hard_sigmoid"):
    """``max(0, min(1, alpha·x + beta))``."""
    return unary(x, lambda v: _hard_sigmoid(v, alpha, beta, x.dtype), name)


def hard_swish(x, name: str = "hard_swish"):
    """``x · max(0, min(1, x/6 + 1/2))``."""
    return unary(x, lambda v: v * _hard_sigmoid(v, 1.0 / 6.0, 0.5, x.dtype), name)


def gelu_tanh(x, name: str = "gelu_tanh"):
    """GELU's tanh approximation: ``x · (1 + tanh(√(2/π)·(x + 0.044715·x³))) / 2``."""
    c = math.sqrt(2.0 / math.pi)
    return unary(x, lambda v: v * 0.5 * (1.0 + ir.tanh((v + v * v * v * 0.044715) * c)), name)


def erf(x, name: str = "erf"):
    return unary(x, ir.erf, name)


def sqrt(x, name: str = "sqrt"):
    return unary(x, ir.sqrt, name)


def reciprocal(x, name: str = "reciprocal"):
    return unary(x, lambda v: 1.0 / v, name)


def power_scalar(x, exponent: float, name: str = "power_scalar"):
    """``x ** exponent`` for a constant exponent: squares as a product, square roots as sqrt."""
    exponent = float(exponent)
    special = {1.0: lambda v: v, 2.0: lambda v: v * v, 3.0: lambda v: v * v * v, 0.5: ir.sqrt,
               -1.0: lambda v: 1.0 / v}
    return unary(x, special.get(exponent, lambda v: ir.pow(v, ir.const(exponent, x.dtype))), name)


def cast(x, dtype: str, name: str = "cast"):
    """``x`` converted to ``dtype`` (floats to integers round toward zero, as C and numpy)."""
    return unary(x, lambda v: ir.cast(v, dtype), name)


def broadcast_shape(a_shape, b_shape, what: str) -> tuple:
    """Numpy's broadcasting rule, with an error that shows both shapes."""
    try:
        return tuple(np.broadcast_shapes(tuple(a_shape), tuple(b_shape)))
    except ValueError:
        raise ValueError(f"{what}: shapes {tuple(a_shape)} and {tuple(b_shape)} do not broadcast "
                         "(numpy rules: trailing axes must be equal or 1)") from None


def _broadcast_index(idx, shape):
    """The index into an operand of ``shape`` for output index ``idx`` (numpy broadcasting)."""
    idx = idx[len(idx) - len(shape):]
    return tuple(0 if s == 1 else i for i, s in zip(idx, shape))


def binary(a, b, op: str, name: str):
    """``a op b`` elementwise with numpy broadcasting; ``op`` is one of + - * / max min pow."""
    shape = broadcast_shape(a.shape, b.shape, name)
    fn = _BINARY[op]
    tag = "elemwise" if a.shape == b.shape else "broadcast"
    return ir.compute(shape, lambda *i: fn(a[_broadcast_index(i, a.shape)], b[_broadcast_index(i, b.shape)]),
                      name=name, tag=tag)


def add(a, b, name: str = "add"):
    return binary(a, b, "+", name)


def multiply(a, b, name: str = "multiply"):
    return binary(a, b, "*", name)


def subtract(a, b, name: str = "subtract"):
    return binary(a, b, "-", name)


def divide(a, b, name: str = "divide"):
    return binary(a, b, "/", name)


def maximum(a, b, name: str = "maximum"):
    return binary(a, b, "max", name)


def minimum(a, b, name: str = "minimum"):
    return binary(a, b, "min", name)


def power(a, b, name: str = "power"):
    """``a ** b`` elementwise, both tensors (numpy.power)."""
    return binary(a, b, "pow", name)


def scalar_op(x, op: str, value: float, reverse: bool = False, name: str = "scalar_op"):
    """``x op value`` (``value op x`` with ``reverse``) for a number ``value``, kept in the
    code as an immediate; ``op`` is one of + - * / max min pow."""
    fn = _BINARY[op]
    c = ir.const(float(value), x.dtype)
    return unary(x, (lambda v: fn(c, v)) if reverse else (lambda v: fn(v, c)), name)


def broadcast_to(x, shape, name: str = "broadcast_to"):
    """``x`` repeated along its axes of extent 1 (and new leading axes) to ``shape``."""
    shape = tuple(shape)
    if broadcast_shape(x.shape, shape, name) != shape:
        raise ValueError(f"{name}: shape {x.shape} does not broadcast to {shape}")
    return ir.compute(shape, lambda *i: x[_broadcast_index(i, x.shape)], name=name, tag="broadcast")


def channelwise(x, v, op: str, axis: int = -1, name: str = "channelwise"):
    """``x op v[i_axis]``: a per-channel vector applied along one axis of ``x`` (bias, scale)."""
    ax = axis + x.ndim if axis < 0 else axis
    if not 0 <= ax < x.ndim:
        raise ValueError(f"{name}: axis {axis} is out of range for data of shape {x.shape}")
    if v.shape != (x.shape[ax],):
        raise ValueError(f"{name}: the vector has shape {v.shape}, expected ({x.shape[ax]},) to match "
                         f"axis {axis} of data of shape {x.shape}")
    fn = _BINARY[op]
    return ir.compute(x.shape, lambda *i: fn(x[i], v[i[ax]]), name=name, tag="broadcast")


def bias_add(x, b, axis: int = -1, name: str = "bias_add"):
    return channelwise(x, b, "+", axis, name)


# workloads -----------------------------------------------------------------------------

def _register_unary(name: str, fn, reference, flops_per_element: int) -> None:
    def build(shape, dtype="float32"):
        x = ir.placeholder(check_shape(shape, f"{name}: shape"), dtype, name="x")
        return [x, fn(x)]

    build.__name__ = build.__qualname__ = f"{name}_workload"
    build.__doc__ = f"{name} of a tensor of ``shape``."
    operator(name, reference=lambda ins, p: [reference(ins[0])],
             flops=lambda ts, p: flops_per_element * numel(ts[-1].shape))(build)


_register_unary("relu", relu, ref.relu, 1)
_register_unary("gelu", gelu, ref.gelu, 5)
_register_unary("sigmoid", sigmoid, ref.sigmoid, 1)
_register_unary("tanh", tanh, ref.tanh, 1)


@operator("bias_add", reference=lambda ins, p: [ins[0] + ref.along_axis(ins[1], ins[0].ndim, p.axis)],
          flops=lambda ts, p: numel(ts[-1].shape))
def bias_add_workload(shape, axis=-1, dtype="float32"):
    """x of ``shape`` plus a bias vector along ``axis``."""
    shape = check_shape(shape, "bias_add: shape")
    x = ir.placeholder(shape, dtype, name="x")
    if not -len(shape) <= axis < len(shape):
        raise ValueError(f"bias_add: axis {axis} is out of range for shape {shape}")
    b = ir.placeholder((shape[axis],), dtype, name="bias")
    return [x, b, bias_add(x, b, axis)]


def _register_binary(name: str, fn, reference) -> None:
    def build(shape_a, shape_b=None, dtype="float32"):
        a = ir.placeholder(check_shape(shape_a, f"{name}: shape_a"), dtype, name="a")
        b = ir.placeholder(check_shape(shape_a if shape_b is None else shape_b, f"{name}: shape_b"),
                           dtype, name="b")
        return [a, b, fn(a, b)]

    build.__name__ = build.__qualname__ = f"{name}_workload"
    build.__doc__ = f"{name} of two tensors (``shape_b`` broadcasts, numpy rules; default ``shape_a``)."
    operator(name, reference=lambda ins, p: [reference(np.asarray(ins[0], np.float64), ins[1])],
             flops=lambda ts, p: numel(ts[-1].shape))(build)


_register_binary("add", add, np.add)
_register_binary("multiply", multiply, np.multiply)
