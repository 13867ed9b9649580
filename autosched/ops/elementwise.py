"""Elementwise and broadcast operators: activations, casts, bias_add, arithmetic with broadcasting.

These are the stages that the sketch rules inline into their producers or consumers
(tags ``elemwise`` for same-shape maps, ``broadcast`` where an operand is smaller). Each is
declared once (``@elementwise_operator``): its tensor function, numpy reference and flops
make both its workload and its node kind of the network graph.
Flops: one per arithmetic operation per output element, a math call (erf, tanh...) as one.
"""
from __future__ import annotations

import math
import operator as pyop

import numpy as np

import ir

from . import reference as ref
from .common import check_shape, numel
from .reference import f64
from .registry import BROADCAST, ELEMWISE, elementwise_operator, node_kind, operator, uniform

_BINARY = {"+": pyop.add, "-": pyop.sub, "*": pyop.mul, "/": pyop.truediv, "max": ir.max, "min": ir.min,
           "pow": ir.pow}
#: positive values: bases of fractional powers, square roots, divisors
POSITIVE = uniform(0.25, 2.0)


def unary(x, fn, name: str, tag: str = "elemwise"):
    """``fn`` applied to every element of ``x``."""
    return ir.compute(x.shape, lambda *i: fn(x[i]), name=name, tag=tag)


@elementwise_operator("relu", reference=ref.relu)
def relu(x, name: str = "relu"):
    return unary(x, lambda v: ir.max(v, ir.const(0, x.dtype)), name)


@elementwise_operator("gelu", reference=ref.gelu, flops=5)
def gelu(x, name: str = "gelu"):
    """The exact (erf) form: ``x · (1 + erf(x/√2)) / 2``."""
    return unary(x, lambda v: v * 0.5 * (1.0 + ir.erf(v * (1.0 / math.sqrt(2.0)))), name)


@elementwise_operator("sigmoid", reference=ref.sigmoid)
def sigmoid(x, name: str = "sigmoid"):
    return unary(x, ir.sigmoid, name)


@elementwise_operator("tanh", reference=ref.tanh)
def tanh(x, name: str = "tanh"):
    return unary(x, ir.tanh, name)


@elementwise_operator("leaky_relu", reference=lambda x, alpha: np.where(x < 0, alpha * f64(x), f64(x)), flops=2)
def leaky_relu(x, alpha: float = 0.01, name: str = "leaky_relu"):
    return unary(x, lambda v: ir.select(v < ir.const(0, x.dtype), v * float(alpha), v), name)


@elementwise_operator("clip", reference=lambda x, min, max: np.clip(f64(x), min, max), flops=2)
def clip(x, min: float | None = None, max: float | None = None, name: str = "clip"):
    """``x`` limited to ``[min, max]`` (a missing bound does not limit)."""
    def fn(v):
        if min is not None:
            v = ir.max(v, ir.const(float(min), x.dtype))
        return v if max is None else ir.min(v, ir.const(float(max), x.dtype))
    return unary(x, fn, name)


def _hard_sigmoid(v, alpha: float, beta: float, dtype: str):
    return ir.min(ir.max(v * float(alpha) + float(beta), ir.const(0.0, dtype)), ir.const(1.0, dtype))


@elementwise_operator("hard_sigmoid", reference=ref.hard_sigmoid, flops=4)
def hard_sigmoid(x, alpha: float = 0.2, beta: float = 0.5, name: str = "hard_sigmoid"):
    """``max(0, min(1, alpha·x + beta))``."""
    return unary(x, lambda v: _hard_sigmoid(v, alpha, beta, x.dtype), name)


@elementwise_operator("hard_swish", reference=lambda x: f64(x) * ref.hard_sigmoid(x, 1.0 / 6.0, 0.5), flops=5)
def hard_swish(x, name: str = "hard_swish"):
    """``x · max(0, min(1, x/6 + 1/2))``."""
    return unary(x, lambda v: v * _hard_sigmoid(v, 1.0 / 6.0, 0.5, x.dtype), name)


@elementwise_operator("gelu_tanh", reference=ref.gelu_tanh, flops=8)
def gelu_tanh(x, name: str = "gelu_tanh"):
    """GELU's tanh approximation: ``x · (1 + tanh(√(2/π)·(x + 0.044715·x³))) / 2``."""
    c = math.sqrt(2.0 / math.pi)
    return unary(x, lambda v: v * 0.5 * (1.0 + ir.tanh((v + v * v * v * 0.044715) * c)), name)


@elementwise_operator("relu6", reference=lambda x: np.clip(f64(x), 0.0, 6.0), flops=2)
def relu6(x, name: str = "relu6"):
    """``min(max(x, 0), 6)``."""
    return unary(x, lambda v: ir.min(ir.max(v, ir.const(0, x.dtype)), ir.const(6, x.dtype)), name)


@elementwise_operator("scale", reference=lambda x, value: f64(x) * value)
def scale(x, value: float, name: str = "scale"):
    """``x`` times a number, kept in the code as an immediate."""
    return unary(x, lambda v: v * float(value), name)


@elementwise_operator("erf", reference=ref.erf)
def erf(x, name: str = "erf"):
    return unary(x, ir.erf, name)


@elementwise_operator("sqrt", reference=lambda x: np.sqrt(f64(x)), inputs={"x": POSITIVE})
def sqrt(x, name: str = "sqrt"):
    return unary(x, ir.sqrt, name)


@elementwise_operator("reciprocal", reference=lambda x: 1.0 / f64(x), inputs={"x": POSITIVE})
def reciprocal(x, name: str = "reciprocal"):
    return unary(x, lambda v: 1.0 / v, name)


@elementwise_operator("power_scalar", reference=lambda x, exponent: np.power(f64(x), exponent), inputs={"x": POSITIVE})
def power_scalar(x, exponent: float, name: str = "power_scalar"):
    """``x ** exponent`` for a constant exponent: squares as a product, square roots as sqrt."""
    exponent = float(exponent)
    special = {1.0: lambda v: v, 2.0: lambda v: v * v, 3.0: lambda v: v * v * v, 0.5: ir.sqrt,
               -1.0: lambda v: 1.0 / v}
    return unary(x, special.get(exponent, lambda v: ir.pow(v, ir.const(exponent, x.dtype))), name)


def cast(x, dtype: str, name: str = "cast"):
    """``x`` converted to ``dtype`` (floats to integers round toward zero, as C and numpy)."""
    return unary(x, lambda v: ir.cast(v, dtype), name)


node_kind("cast", ELEMWISE, lambda t, a, name: cast(t[0], a["dtype"], name),
          lambda x, a: np.asarray(x[0]).astype(a["dtype"]), 1, maps_elements=True)


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


@elementwise_operator("add", reference=lambda a, b: f64(a) + b, arity=2)
def add(a, b, name: str = "add"):
    return binary(a, b, "+", name)


@elementwise_operator("multiply", reference=lambda a, b: f64(a) * b, arity=2)
def multiply(a, b, name: str = "multiply"):
    return binary(a, b, "*", name)


@elementwise_operator("subtract", reference=lambda a, b: f64(a) - b, arity=2)
def subtract(a, b, name: str = "subtract"):
    return binary(a, b, "-", name)


@elementwise_operator("divide", reference=lambda a, b: f64(a) / b, arity=2, inputs={"b": POSITIVE})
def divide(a, b, name: str = "divide"):
    return binary(a, b, "/", name)


@elementwise_operator("maximum", reference=lambda a, b: np.maximum(f64(a), b), arity=2)
def maximum(a, b, name: str = "maximum"):
    return binary(a, b, "max", name)


@elementwise_operator("minimum", reference=lambda a, b: np.minimum(f64(a), b), arity=2)
def minimum(a, b, name: str = "minimum"):
    return binary(a, b, "min", name)


@elementwise_operator("power", reference=lambda a, b: np.power(f64(a), b), arity=2, inputs={"a": POSITIVE})
def power(a, b, name: str = "power"):
    """``a ** b`` elementwise, both tensors (numpy.power)."""
    return binary(a, b, "pow", name)


_SCALAR_REFERENCE = {"+": np.add, "-": np.subtract, "*": np.multiply, "/": np.divide, "max": np.maximum,
                     "min": np.minimum, "pow": np.power}


def _scalar_reference(x, op, value, reverse):
    fn = _SCALAR_REFERENCE[op]
    return fn(value, f64(x)) if reverse else fn(f64(x), value)


@elementwise_operator("scalar", reference=_scalar_reference, inputs={"x": POSITIVE})
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


node_kind("broadcast_to", BROADCAST, lambda t, a, name: broadcast_to(t[0], a["shape"], name),
          lambda x, a: np.broadcast_to(f64(x[0]), a["shape"]), 1)


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


node_kind("bias_add", BROADCAST, lambda t, a, name: bias_add(t[0], t[1], a.get("axis", -1), name),
          lambda x, a: f64(x[0]) + ref.along_axis(x[1], x[0].ndim, a.get("axis", -1)), 2)
