"""ONNX operators as graph nodes: one converter per operator type (``CONVERTERS``).

A converter gets the node (``OnnxNode``: type, name, attributes, and inputs that are either
a ``Value`` computed at run time, a numpy array known at import, or None for an omitted
optional input) and returns its outputs the same way. It raises ``Unsupported`` with the
reason for what it cannot express (an attribute value, an input that must be constant), so
that the importer can list every such node in one error. Layouts: see ``onnx_layout``.
This module holds the elementwise, linear-algebra and data-movement operators; ``onnx_nn``
the window, normalisation, reduction and resize ones (imported by ``onnx`` to register).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .onnx_layout import Builder, Value, identity


class Unsupported(Exception):
    """What a converter cannot import, with the reason."""


@dataclass
class OnnxNode:
    op_type: str
    name: str
    opset: int
    attrs: dict
    inputs: list
    outputs_used: list = field(default_factory=list)   # per output: is it read by anything?

    def attr(self, key: str, default=None):
        return self.attrs.get(key, default)

    def const_input(self, k: int, what: str, default=None):
        """Input ``k`` as a numpy array; it must be known at import (or omitted: ``default``)."""
        v = self.inputs[k] if k < len(self.inputs) else None
        if v is None:
            return default
        if isinstance(v, Value):
            raise Unsupported(f"its {what} (input {k}) is computed at run time; it must be a constant")
        return v

    def runtime_input(self, k: int) -> Value:
        v = self.inputs[k]
        if not isinstance(v, Value):
            raise Unsupported(f"input {k} is a constant where a run-time tensor is expected")
        return v

    def only_first_output(self) -> None:
        if any(self.outputs_used[1:]):
            raise Unsupported("its optional extra outputs are used")


CONVERTERS: dict = {}


def converts(*op_types):
    def register(fn):
        for t in op_types:
            CONVERTERS[t] = fn
        return fn
    return register


def as_ints(v) -> tuple:
    return tuple(int(x) for x in np.asarray(v).ravel())


# operands: constants and run-time values side by side ---------------------------------------

def _operand(b: Builder, v, like: Value | None, name: str):
    """A node for one operand of an elementwise operator, in the layout of ``like`` (a
    run-time value of the full rank): constants are rearranged in numpy, values by
    ``Builder.to_layout``; a lower-rank operand gets leading axes of extent 1 (numpy's
    broadcasting)."""
    rank = like.rank
    if not isinstance(v, Value):
        a = np.asarray(v)
        if a.dtype == np.float64 and like.dtype == "float32":
            a = a.astype(np.float32)
        if a.size == 1:
            return b.const(a.reshape(1), name)
        a = a.reshape((1,) * (rank - a.ndim) + a.shape)
        return b.const(np.transpose(a, like.perm), name)
    return b.to_layout(_lift(b, v, rank, name), like.perm)


def _lift(b: Builder, v: Value, rank: int, name: str) -> Value:
    """``v`` with leading axes of extent 1 up to ``rank`` (numpy's broadcasting), a view."""
    extra = rank - v.rank
    if extra <= 0:
        return v
    return Value(b.reshape(v.node, (1,) * extra + v.node.shape, name), identity(extra) + tuple(p + extra for p in v.perm))


def _leader(values) -> Value:
    """The run-time operand whose layout the result takes: the highest rank, and among
    those one not in ONNX order (a channel-last conv output), else the first."""
    runtime = [v for v in values if isinstance(v, Value)]
    rank = max(v.rank for v in runtime)
    top = [v for v in runtime if v.rank == rank]
    return next((v for v in top if v.perm != identity(rank)), top[0])


def _broadcast_rank(values) -> int:
    return max(np.ndim(v) if not isinstance(v, Value) else v.rank for v in values)


_SCALAR_OPS = {"add": "+", "subtract": "-", "multiply": "*", "divide": "/", "maximum": "max", "minimum": "min",
               "power": "pow"}


def _elementwise(b: Builder, kind: str, values, name: str, **attrs) -> Value:
    """``kind`` of the operands, broadcast; a one-element constant beside a float run-time
    value becomes an immediate of the code (``scalar``), not an input of the kernel."""
    if len(values) == 2 and kind in _SCALAR_OPS and not attrs:
        for k in (0, 1):
            c, v = values[k], values[1 - k]
            if not isinstance(c, Value) and isinstance(v, Value) and np.size(c) == 1 and v.dtype == "float32" \
                    and np.ndim(c) <= v.rank:
                return Value(b.op("scalar", [v.node], name, op=_SCALAR_OPS[kind], value=float(np.ravel(c)[0]),
                                  reverse=k == 0), v.perm)
    rank = _broadcast_rank(values)
    lead = _lift(b, _leader(values), rank, name)     # a constant may have the highest rank
    nodes = [_operand(b, v, lead, f"{name}_in{k}") for k, v in enumerate(values)]
    return Value(b.op(kind, nodes, name, **attrs), lead.perm)


# elementwise -------------------------------------------------------------------------------

_UNARY = {"Relu": "relu", "Sigmoid": "sigmoid", "Tanh": "tanh", "Erf": "erf", "Sqrt": "sqrt",
          "Reciprocal": "reciprocal", "HardSwish": "hard_swish"}


@converts(*_UNARY)
def _unary(b, n):
    x = n.runtime_input(0)
    return [Value(b.op(_UNARY[n.op_type], [x.node], n.name), x.perm)]


@converts("LeakyRelu")
def _leaky_relu(b, n):
    x = n.runtime_input(0)
    return [Value(b.op("leaky_relu", [x.node], n.name, alpha=float(n.attr("alpha", 0.01))), x.perm)]


@converts("HardSigmoid")
def _hard_sigmoid(b, n):
    x = n.runtime_input(0)
    return [Value(b.op("hard_sigmoid", [x.node], n.name, alpha=float(n.attr("alpha", 0.2)),
                       beta=float(n.attr("beta", 0.5))), x.perm)]


@converts("Gelu")
def _gelu(b, n):
    x = n.runtime_input(0)
    approximate = n.attr("approximate", "none")
    if approximate not in ("none", "tanh"):
        raise Unsupported(f"approximate={approximate!r}")
    return [Value(b.op("gelu" if approximate == "none" else "gelu_tanh", [x.node], n.name), x.perm)]


@converts("Clip")
def _clip(b, n):
    x = n.runtime_input(0)
    if n.opset < 11:
        lo, hi = n.attr("min"), n.attr("max")
    else:
        lo, hi = (n.const_input(k, what) for k, what in ((1, "min"), (2, "max")))
        lo, hi = (None if v is None else float(np.asarray(v).ravel()[0]) for v in (lo, hi))
    return [Value(b.op("clip", [x.node], n.name, min=lo, max=hi), x.perm)]


_BINARY = {"Add": "add", "Sub": "subtract", "Mul": "multiply", "Div": "divide", "Max": "maximum",
           "Min": "minimum", "Sum": "add"}


@converts(*_BINARY)
def _binary(b, n):
    """Add, Sub, Mul, Div and the n-ary Sum, Max and Min, with numpy broadcasting."""
    values = list(n.inputs)
    if any(v is None for v in values):
        raise Unsupported("an input is omitted")
    if len(values) == 1:
        return [values[0]]
    acc = values[0]
    for k, v in enumerate(values[1:]):
        acc = _elementwise(b, _BINARY[n.op_type], [acc, v], n.name if k == len(values) - 2 else f"{n.name}_{k}")
    return [acc]


@converts("Pow")
def _pow(b, n):
    base, exponent = n.inputs
    if isinstance(base, Value) and not isinstance(exponent, Value) and np.size(exponent) == 1:
        return [Value(b.op("power_scalar", [base.node], n.name, exponent=float(np.ravel(exponent)[0])), base.perm)]
    if isinstance(exponent, Value) and exponent.dtype != "float32":
        raise Unsupported(f"exponent of dtype {exponent.dtype}")
    return [_elementwise(b, "power", [base, exponent], n.name)]


#: ONNX element types -> our dtypes (what inputs and casts may have)
ONNX_DTYPES = {1: "float32", 11: "float64", 6: "int32", 7: "int64", 3: "int8", 2: "uint8", 5: "int16",
               9: "bool"}


@converts("Cast")
def _cast(b, n):
    x = n.runtime_input(0)
    dtype = ONNX_DTYPES.get(int(n.attr("to")))
    if dtype is None:
        raise Unsupported(f"cast to ONNX type {n.attr('to')} (supported: float, double, int8-64, uint8)")
    return [x if dtype == x.dtype else Value(b.op("cast", [x.node], n.name, dtype=dtype), x.perm)]


@converts("Identity", "Dropout")
def _identity(b, n):
    n.only_first_output()
    return [n.runtime_input(0)]


# linear algebra ----------------------------------------------------------------------------

def _dense(b, x: Value, weight: np.ndarray, name: str) -> Value:
    """x (..., K) · weight (N, K)ᵀ: the dense operator (its weight laid out once, at import)."""
    node = b.op("dense", [b.plain(x), b.const(np.asarray(weight, np.float32), f"{name}_weight")], name)
    return Value(node, identity(len(node.shape)))


def _matmul_operand(b, v: Value, batch: tuple):
    """The node of a matmul operand with the batch axes ``batch`` and whether it is stored
    with its last two axes swapped (then an ONNX Transpose of a key matrix costs nothing)."""
    r = v.rank
    if v.onnx_shape[:-2] == batch and v.perm == identity(r)[:-2] + (r - 1, r - 2):
        return v.node, True
    node = b.plain(v)
    full = batch + v.onnx_shape[-2:]
    if node.shape != full:              # numpy broadcasting of the batch axes
        node = b.reshape(node, (1,) * (len(full) - r) + node.shape, f"{node.name}_lift")
        if node.shape != full:
            node = b.op("broadcast_to", [node], f"{node.name}_expand", shape=full)
    return node, False


@converts("MatMul")
def _matmul(b, n):
    a, w = n.inputs
    if not isinstance(a, Value):
        raise Unsupported("its first operand is a constant (a weight times a run-time matrix)")
    if not isinstance(w, Value) and np.ndim(w) == 2 and a.rank >= 2:
        return [_dense(b, a, np.asarray(w).T, n.name)]
    if not isinstance(w, Value):
        w = Value(b.const(np.asarray(w, np.float32), f"{n.name}_B"), identity(np.ndim(w)))
    if a.rank < 2 or w.rank < 2:
        raise Unsupported(f"a 1-d operand ({a.onnx_shape} x {w.onnx_shape})")
    batch = tuple(np.broadcast_shapes(a.onnx_shape[:-2], w.onnx_shape[:-2]))
    (na, ta), (nb, tb) = _matmul_operand(b, a, batch), _matmul_operand(b, w, batch)
    out = b.op("batch_matmul" if batch else "matmul", [na, nb], n.name, transpose_a=ta, transpose_b=tb)
    return [Value(out, identity(len(out.shape)))]


@converts("Gemm")
def _gemm(b, n):
    a, w = n.inputs[:2]
    c = n.inputs[2] if len(n.inputs) > 2 else None
    alpha, beta = float(n.attr("alpha", 1.0)), float(n.attr("beta", 1.0))
    if not isinstance(a, Value) or isinstance(w, Value):
        raise Unsupported("Gemm needs a run-time A and a constant B")
    if n.attr("transA", 0):
        a = Value(b.op("transpose", [b.plain(a)], f"{n.name}_At", axes=(1, 0)), (0, 1))
    w = np.asarray(w, np.float32)                 # float32 throughout: a classifier's weight is 100s of MB
    weight = w if n.attr("transB", 0) else w.T
    if alpha != 1.0:
        weight = weight * np.float32(alpha)        # one float32 rounding, as of the float64 product
    y = _dense(b, a, weight, n.name)
    if c is None or beta == 0.0:
        return [y]
    if isinstance(c, Value):
        return [_elementwise(b, "add", [y, c if beta == 1.0 else _scaled(b, c, beta, n.name)], f"{n.name}_C")]
    c = np.asarray(c, np.float64) * beta
    units = y.node.shape[-1]
    if c.size == units and c.shape in ((units,), (1, units)):
        return [Value(b.op("bias_add", [y.node, b.const(c.reshape(units).astype(np.float32), f"{n.name}_bias")],
                           f"{n.name}_bias_add", axis=-1), y.perm)]
    return [_elementwise(b, "add", [y, c.astype(np.float32)], f"{n.name}_C")]


def _scaled(b, v: Value, factor: float, name: str) -> Value:
    return Value(b.op("scale", [v.node], f"{name}_scaled", value=factor), v.perm)


# shapes and data movement --------------------------------------------------------------------

@converts("Reshape")
def _reshape(b, n):
    x = n.runtime_input(0)
    target = list(as_ints(n.const_input(1, "shape")))
    allowzero = bool(n.attr("allowzero", 0))
    for k, s in enumerate(target):
        if s == 0 and not allowzero:
            target[k] = x.onnx_shape[k]
    if -1 in target:
        known = math.prod(s for s in target if s != -1)
        target[target.index(-1)] = math.prod(x.onnx_shape) // known
    return [Value(b.reshape(b.plain(x), target, n.name), identity(len(target)))]


@converts("Flatten")
def _flatten(b, n):
    x = n.runtime_input(0)
    axis = int(n.attr("axis", 1)) % (x.rank + 1)
    shape = (math.prod(x.onnx_shape[:axis]), math.prod(x.onnx_shape[axis:]))
    return [Value(b.reshape(b.plain(x), shape, n.name), (0, 1))]


@converts("Squeeze")
def _squeeze(b, n):
    x = n.runtime_input(0)
    axes = n.const_input(1, "axes") if n.opset >= 13 else n.attr("axes")
    gone = ({int(a) % x.rank for a in np.ravel(axes)} if axes is not None
            else {a for a, s in enumerate(x.onnx_shape) if s == 1})
    kept = [(j, p) for j, p in enumerate(x.perm) if p not in gone]
    node = b.reshape(x.node, [x.node.shape[j] for j, _ in kept], n.name)
    return [Value(node, tuple(p - sum(g < p for g in gone) for _, p in kept))]


@converts("Unsqueeze")
def _unsqueeze(b, n):
    x = n.runtime_input(0)
    axes = n.const_input(1, "axes") if n.opset >= 13 else n.attr("axes")
    rank = x.rank + np.size(axes)
    new = sorted(int(a) % rank for a in np.ravel(axes))
    old_to_new = [a for a in range(rank) if a not in new]
    node = b.reshape(x.node, x.node.shape + (1,) * len(new), n.name)
    return [Value(node, tuple(old_to_new[p] for p in x.perm) + tuple(new))]


@converts("Transpose")
def _transpose(b, n):
    x = n.runtime_input(0)
    order = as_ints(n.attr("perm", list(reversed(range(x.rank)))))
    return [Value(x.node, tuple(order.index(p) for p in x.perm))]


@converts("Concat")
def _concat(b, n):
    values = [v for v in n.inputs if v is not None and (isinstance(v, Value) or np.size(v))]
    lead = _leader(values)
    axis = int(n.attr("axis")) % lead.rank
    nodes = [_operand(b, v, lead, f"{n.name}_in{k}") for k, v in enumerate(values)]
    return [Value(b.op("concat", nodes, n.name, axis=lead.graph_axis(axis)), lead.perm)]


def _slice(b, x: Value, begin, step, shape, name: str) -> Value:
    """A strided slice given per ONNX axis, made on the node in its own order."""
    if tuple(shape) == x.onnx_shape and all(s == 1 for s in step):
        return x
    node = b.op("strided_slice", [x.node], name, begin=x.to_graph_order(begin), step=x.to_graph_order(step),
                shape=x.to_graph_order(shape))
    return Value(node, x.perm)


@converts("Split")
def _split(b, n):
    x = n.runtime_input(0)
    axis = int(n.attr("axis", 0)) % x.rank
    size = x.onnx_shape[axis]
    parts = n.const_input(1, "split") if n.opset >= 13 else n.attr("split")
    count = len(n.outputs_used)
    if parts is None:
        chunk = -(-size // int(n.attr("num_outputs", count)))
        parts = [min(chunk, size - k * chunk) for k in range(count)]
    outs, start = [], 0
    for k, length in enumerate(as_ints(parts)):
        begin = [0] * x.rank
        begin[axis] = start
        shape = list(x.onnx_shape)
        shape[axis] = length
        outs.append(_slice(b, x, begin, [1] * x.rank, shape, f"{n.name}_{k}"))
        start += length
    return outs


@converts("Slice")
def _slice_op(b, n):
    x = n.runtime_input(0)
    if n.opset < 10:
        starts, ends, axes, steps = n.attr("starts"), n.attr("ends"), n.attr("axes"), None
    else:
        starts, ends = n.const_input(1, "starts"), n.const_input(2, "ends")
        axes, steps = n.const_input(3, "axes"), n.const_input(4, "steps")
    starts, ends = as_ints(starts), as_ints(ends)
    axes = as_ints(axes) if axes is not None else tuple(range(len(starts)))
    steps = as_ints(steps) if steps is not None else (1,) * len(starts)
    begin, step, shape = [0] * x.rank, [1] * x.rank, list(x.onnx_shape)
    for s, e, a, st in zip(starts, ends, axes, steps):
        a %= x.rank
        dim = x.onnx_shape[a]
        s, e = (s + dim if s < 0 else s), (e + dim if e < 0 else e)
        s, e = (min(max(s, 0), dim), min(max(e, 0), dim)) if st > 0 else (min(max(s, 0), dim - 1),
                                                                           min(max(e, -1), dim - 1))
        length = max(0, -(-(e - s) // st))
        if length == 0:
            raise Unsupported(f"an empty slice along axis {a}")
        begin[a], step[a], shape[a] = s, st, length
    return [_slice(b, x, begin, step, shape, n.name)]


@converts("Gather")
def _gather(b, n):
    data, indices = n.inputs
    if isinstance(data, Value):
        axis = int(n.attr("axis", 0)) % data.rank
        if isinstance(indices, Value):
            raise Unsupported("both the data and the indices are computed at run time")
        idx = np.asarray(indices, np.int64)
        node = b.op("gather", [b.plain(data), b.const(idx.reshape(idx.shape or (1,)), f"{n.name}_indices")],
                    n.name, axis=axis)
        out_shape = data.onnx_shape[:axis] + idx.shape + data.onnx_shape[axis + 1:]
        return [Value(b.reshape(node, out_shape, n.name), identity(len(out_shape)))]
    table = np.asarray(data)
    axis = int(n.attr("axis", 0)) % table.ndim
    if indices.node.is_input:      # token ids: random inputs stay inside the table
        indices.node.attrs["high"] = table.shape[axis]
    node = b.op("gather", [b.const(table, f"{n.name}_table"), b.plain(indices)], n.name, axis=axis)
    return [Value(node, identity(len(node.shape)))]


@converts("Pad")
def _pad(b, n):
    x = n.runtime_input(0)
    mode = n.attr("mode", "constant")
    if n.opset < 11:
        pads, value, axes = as_ints(n.attr("pads")), float(n.attr("value", 0.0)), None
    else:
        pads = as_ints(n.const_input(1, "pads"))
        value = float(np.ravel(n.const_input(2, "constant_value", np.zeros(1)))[0])
        axes = n.const_input(3, "axes")
    axes = [int(a) % x.rank for a in np.ravel(axes)] if axes is not None else list(range(x.rank))
    before, after = [0] * x.rank, [0] * x.rank
    for k, a in enumerate(axes):
        before[a], after[a] = pads[k], pads[k + len(axes)]
    if min(before + after) < 0:
        raise Unsupported(f"negative pads {pads}")
    y = b.op("pad", [x.node], n.name, pad_before=x.to_graph_order(before), pad_after=x.to_graph_order(after),
             mode=mode, value=value)
    return [Value(y, x.perm)]
