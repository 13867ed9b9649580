"""The operator kinds of the network graph IR: for each, its fusion pattern, how it becomes
tensors (``autosched.ops`` tensor functions) and its numpy reference.

Patterns, from the most to the least fusible (after Relay's ``OpPatternKind``):
ELEMWISE (same-shape map), BROADCAST (an operand smaller, e.g. a per-channel vector),
INJECTIVE (data movement: reshape, transpose), REDUCE (softmax, layer norm, pooling) and
ANCHOR (the compute-heavy ops: conv, dense, matmul, batch_matmul).

Every node's inputs are listed first, constants (weights) among them; ``attrs`` are plain
Python values. References compute in float64 (``autosched.ops.reference``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

import ir
from ir.tensor import as_int
from .. import ops
from ..ops import reference as R
from ..ops.elementwise import unary

ELEMWISE, BROADCAST, INJECTIVE, REDUCE, ANCHOR = 0, 1, 2, 3, 4
PATTERN_NAMES = {ELEMWISE: "elemwise", BROADCAST: "broadcast", INJECTIVE: "injective", REDUCE: "reduce",
                 ANCHOR: "anchor"}


@dataclass(frozen=True)
class OpDef:
    """``build(tensors, attrs, name) -> ir.Tensor``; ``reference(arrays, attrs) -> ndarray``."""
    kind: str
    pattern: int
    build: Callable
    reference: Callable
    arity: int | None = None     # number of inputs, None for "any"


OPDEFS: dict[str, OpDef] = {}


def _register(kind: str, pattern: int, build, reference, arity=None) -> None:
    OPDEFS[kind] = OpDef(kind, pattern, build, reference, arity)


def _t(v, n):
    return (v,) * n if as_int(v) is not None else tuple(v)


def _layout(x_ndim: int) -> str:
    return {3: "NWC", 4: "NHWC", 5: "NDHWC"}[x_ndim]


# anchors ---------------------------------------------------------------------------------

def _conv_build(t, a, name):
    return ops.conv(t[0], t[1], a["stride"], a["padding"], a.get("dilation", 1), a.get("groups", 1),
                    _layout(t[0].ndim), name=name)


def _conv_ref(x, a):
    sd = x[0].ndim - 2
    return R.conv(x[0], x[1], _t(a["stride"], sd), _t(a["padding"], sd), _t(a.get("dilation", 1), sd),
                  a.get("groups", 1), True)


_register("conv", ANCHOR, _conv_build, _conv_ref, 2)
_register("depthwise_conv2d", ANCHOR,
          lambda t, a, name: ops.depthwise_conv2d(t[0], t[1], a["stride"], a["padding"], a.get("dilation", 1),
                                                  "NHWC", name=name),
          lambda x, a: R.depthwise_conv(x[0], x[1], _t(a["stride"], 2), _t(a["padding"], 2),
                                        _t(a.get("dilation", 1), 2), True), 2)
_register("conv2d_transpose", ANCHOR,
          lambda t, a, name: ops.conv2d_transpose(t[0], t[1], a["stride"], a["padding"], "NHWC", name=name),
          lambda x, a: R.conv_transpose(x[0], x[1], _t(a["stride"], 2), _t(a["padding"], 2), True), 2)
_register("dense", ANCHOR, lambda t, a, name: ops.dense(t[0], t[1], name=name),
          lambda x, a: R.dense(x[0], x[1]), 2)
_register("matmul", ANCHOR,
          lambda t, a, name: ops.matmul(t[0], t[1], a.get("transpose_a", False), a.get("transpose_b", False), name),
          lambda x, a: R.matmul(x[0], x[1], a.get("transpose_a", False), a.get("transpose_b", False)), 2)
_register("batch_matmul", ANCHOR,
          lambda t, a, name: ops.batch_matmul(t[0], t[1], a.get("transpose_a", False), a.get("transpose_b", False),
                                              name),
          lambda x, a: R.matmul(x[0], x[1], a.get("transpose_a", False), a.get("transpose_b", False)), 2)

# elementwise and broadcast -----------------------------------------------------------------

_register("relu", ELEMWISE, lambda t, a, name: ops.relu(t[0], name), lambda x, a: R.relu(x[0]), 1)
_register("relu6", ELEMWISE,
          lambda t, a, name: unary(t[0], lambda v: ir.min(ir.max(v, ir.const(0, t[0].dtype)),
                                                          ir.const(6, t[0].dtype)), name),
          lambda x, a: np.clip(np.asarray(x[0], np.float64), 0.0, 6.0), 1)
_register("gelu", ELEMWISE, lambda t, a, name: ops.gelu(t[0], name), lambda x, a: R.gelu(x[0]), 1)
_register("tanh", ELEMWISE, lambda t, a, name: ops.tanh(t[0], name), lambda x, a: R.tanh(x[0]), 1)
_register("sigmoid", ELEMWISE, lambda t, a, name: ops.sigmoid(t[0], name), lambda x, a: R.sigmoid(x[0]), 1)
_register("scale", ELEMWISE, lambda t, a, name: unary(t[0], lambda v: v * float(a["value"]), name),
          lambda x, a: np.asarray(x[0], np.float64) * a["value"], 1)
_register("add", BROADCAST, lambda t, a, name: ops.add(t[0], t[1], name),
          lambda x, a: np.asarray(x[0], np.float64) + x[1], 2)
_register("multiply", BROADCAST, lambda t, a, name: ops.multiply(t[0], t[1], name),
          lambda x, a: np.asarray(x[0], np.float64) * x[1], 2)
_register("bias_add", BROADCAST, lambda t, a, name: ops.bias_add(t[0], t[1], a.get("axis", -1), name),
          lambda x, a: np.asarray(x[0], np.float64) + R.along_axis(x[1], x[0].ndim, a.get("axis", -1)), 2)
_register("batch_norm", BROADCAST,
          lambda t, a, name: ops.batch_norm(*t, eps=a.get("eps", 1e-5), axis=a.get("axis", -1), name=name),
          lambda x, a: R.batch_norm(*x, a.get("eps", 1e-5), a.get("axis", -1)), 5)

# data movement -----------------------------------------------------------------------------

_register("reshape", INJECTIVE, lambda t, a, name: ops.reshape(t[0], a["shape"], name),
          lambda x, a: np.reshape(x[0], a["shape"]), 1)
_register("transpose", INJECTIVE, lambda t, a, name: ops.transpose(t[0], a["axes"], name),
          lambda x, a: np.transpose(x[0], a["axes"]), 1)

# reductions --------------------------------------------------------------------------------

_register("pool", REDUCE,
          lambda t, a, name: ops.pool(t[0], a["kernel"], a["stride"], a["padding"], a["pool_type"],
                                      _layout(t[0].ndim), name=name),
          lambda x, a: R.pool(x[0], _t(a["kernel"], x[0].ndim - 2), _t(a["stride"], x[0].ndim - 2),
                              _t(a["padding"], x[0].ndim - 2), a["pool_type"], True), 1)
_register("global_pool", REDUCE,
          lambda t, a, name: ops.global_pool(t[0], a["pool_type"], _layout(t[0].ndim), name=name),
          lambda x, a: R.global_pool(x[0], a["pool_type"], True), 1)
_register("softmax", REDUCE, lambda t, a, name: ops.softmax(t[0], name), lambda x, a: R.softmax(x[0]), 1)
_register("layer_norm", REDUCE, lambda t, a, name: ops.layer_norm(t[0], t[1], t[2], a.get("eps", 1e-5), name),
          lambda x, a: R.layer_norm(x[0], x[1], x[2], a.get("eps", 1e-5)), 3)


def opdef(kind: str) -> OpDef:
    try:
        return OPDEFS[kind]
    except KeyError:
        raise ValueError(f"unknown operator kind {kind!r}; known: {', '.join(sorted(OPDEFS))}") from None
