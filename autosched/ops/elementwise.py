"""Elementwise and broadcast operators: activations, bias_add, add, multiply.

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

_BINARY = {"+": pyop.add, "-": pyop.sub, "*": pyop.mul, "max": ir.max, "min": ir.min}


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
    """``a op b`` elementwise with numpy broadcasting; ``op`` is one of + - * max min."""
    shape = broadcast_shape(a.shape, b.shape, name)
    fn = _BINARY[op]
    tag = "elemwise" if a.shape == b.shape else "broadcast"
    return ir.compute(shape, lambda *i: fn(a[_broadcast_index(i, a.shape)], b[_broadcast_index(i, b.shape)]),
                      name=name, tag=tag)


def add(a, b, name: str = "add"):
    return binary(a, b, "+", name)


def multiply(a, b, name: str = "multiply"):
    return binary(a, b, "*", name)


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
