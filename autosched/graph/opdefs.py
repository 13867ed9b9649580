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
from ..ops import indexing, pointwise, winograd
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


def _pads(a, sd: int) -> tuple[tuple, tuple]:
    """Padding before and after each spatial axis (``pad_after`` defaults to ``padding``)."""
    before = _t(a.get("padding", 0), sd)
    return before, (_t(a["pad_after"], sd) if a.get("pad_after") is not None else before)


def _f64(x):
    return np.asarray(x, np.float64)


# anchors ---------------------------------------------------------------------------------

def _conv_build(t, a, name):
    return ops.conv(t[0], t[1], a["stride"], a["padding"], a.get("dilation", 1), a.get("groups", 1),
                    _layout(t[0].ndim), name=name, pad_after=a.get("pad_after"))


def _conv_ref(x, a):
    sd = x[0].ndim - 2
    before, after = _pads(a, sd)
    return R.conv(x[0], x[1], _t(a["stride"], sd), before, _t(a.get("dilation", 1), sd), a.get("groups", 1), True,
                  pad_after=after)


def _depthwise_build(t, a, name):
    return ops.depthwise_conv2d(t[0], t[1], a["stride"], a["padding"], a.get("dilation", 1), "NHWC", name=name,
                                pad_after=a.get("pad_after"))


def _depthwise_ref(x, a):
    before, after = _pads(a, 2)
    return R.depthwise_conv(x[0], x[1], _t(a["stride"], 2), before, _t(a.get("dilation", 1), 2), True,
                            pad_after=after)


def _deconv_build(t, a, name):
    return ops.conv2d_transpose(t[0], t[1], a["stride"], a["padding"], "NHWC", name=name,
                                pad_after=a.get("pad_after"), output_padding=a.get("output_padding", 0))


def _deconv_ref(x, a):
    before, after = _pads(a, 2)
    return R.conv_transpose(x[0], x[1], _t(a["stride"], 2), before, True, pad_after=after,
                            output_padding=_t(a.get("output_padding", 0), 2))


_register("conv", ANCHOR, _conv_build, _conv_ref, 2)
_register("conv2d_winograd", ANCHOR,
          lambda t, a, name: ops.conv2d_winograd(t[0], t[1], a["padding"], a.get("pad_after"), a["tile"], name=name),
          lambda x, a: winograd.reference(x[0], x[1], a["padding"], a.get("pad_after"), a["tile"]), 2)
_register("depthwise_conv2d", ANCHOR, _depthwise_build, _depthwise_ref, 2)
_register("conv2d_transpose", ANCHOR, _deconv_build, _deconv_ref, 2)
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
_register("gelu_tanh", ELEMWISE, lambda t, a, name: ops.gelu_tanh(t[0], name), lambda x, a: R.gelu_tanh(x[0]), 1)
_register("tanh", ELEMWISE, lambda t, a, name: ops.tanh(t[0], name), lambda x, a: R.tanh(x[0]), 1)
_register("sigmoid", ELEMWISE, lambda t, a, name: ops.sigmoid(t[0], name), lambda x, a: R.sigmoid(x[0]), 1)
_register("erf", ELEMWISE, lambda t, a, name: ops.erf(t[0], name), lambda x, a: R.erf(x[0]), 1)
_register("sqrt", ELEMWISE, lambda t, a, name: ops.sqrt(t[0], name), lambda x, a: np.sqrt(_f64(x[0])), 1)
_register("reciprocal", ELEMWISE, lambda t, a, name: ops.reciprocal(t[0], name), lambda x, a: 1.0 / _f64(x[0]), 1)
_register("leaky_relu", ELEMWISE, lambda t, a, name: ops.leaky_relu(t[0], a["alpha"], name),
          lambda x, a: np.where(x[0] < 0, a["alpha"] * _f64(x[0]), _f64(x[0])), 1)
_register("clip", ELEMWISE, lambda t, a, name: ops.clip(t[0], a.get("min"), a.get("max"), name),
          lambda x, a: np.clip(_f64(x[0]), a.get("min"), a.get("max")), 1)
_register("hard_sigmoid", ELEMWISE, lambda t, a, name: ops.hard_sigmoid(t[0], a["alpha"], a["beta"], name),
          lambda x, a: R.hard_sigmoid(x[0], a["alpha"], a["beta"]), 1)
_register("hard_swish", ELEMWISE, lambda t, a, name: ops.hard_swish(t[0], name),
          lambda x, a: _f64(x[0]) * R.hard_sigmoid(x[0], 1.0 / 6.0, 0.5), 1)
_register("power_scalar", ELEMWISE, lambda t, a, name: ops.power_scalar(t[0], a["exponent"], name),
          lambda x, a: np.power(_f64(x[0]), a["exponent"]), 1)
_register("cast", ELEMWISE, lambda t, a, name: ops.cast(t[0], a["dtype"], name),
          lambda x, a: np.asarray(x[0]).astype(a["dtype"]), 1)
_register("scale", ELEMWISE, lambda t, a, name: unary(t[0], lambda v: v * float(a["value"]), name),
          lambda x, a: np.asarray(x[0], np.float64) * a["value"], 1)
_register("add", BROADCAST, lambda t, a, name: ops.add(t[0], t[1], name),
          lambda x, a: np.asarray(x[0], np.float64) + x[1], 2)
_register("multiply", BROADCAST, lambda t, a, name: ops.multiply(t[0], t[1], name),
          lambda x, a: np.asarray(x[0], np.float64) * x[1], 2)
_register("subtract", BROADCAST, lambda t, a, name: ops.subtract(t[0], t[1], name),
          lambda x, a: _f64(x[0]) - x[1], 2)
_register("divide", BROADCAST, lambda t, a, name: ops.divide(t[0], t[1], name),
          lambda x, a: _f64(x[0]) / x[1], 2)
_register("power", BROADCAST, lambda t, a, name: ops.power(t[0], t[1], name),
          lambda x, a: np.power(_f64(x[0]), x[1]), 2)
_register("maximum", BROADCAST, lambda t, a, name: ops.maximum(t[0], t[1], name),
          lambda x, a: np.maximum(_f64(x[0]), x[1]), 2)
_register("minimum", BROADCAST, lambda t, a, name: ops.minimum(t[0], t[1], name),
          lambda x, a: np.minimum(_f64(x[0]), x[1]), 2)
_SCALAR_REFERENCE = {"+": np.add, "-": np.subtract, "*": np.multiply, "/": np.divide, "max": np.maximum,
                     "min": np.minimum, "pow": np.power}


def _scalar_ref(x, a):
    fn, v = _SCALAR_REFERENCE[a["op"]], _f64(x[0])
    return fn(a["value"], v) if a.get("reverse") else fn(v, a["value"])


_register("scalar", ELEMWISE,
          lambda t, a, name: ops.scalar_op(t[0], a["op"], a["value"], a.get("reverse", False), name), _scalar_ref, 1)
_register("broadcast_to", BROADCAST, lambda t, a, name: ops.broadcast_to(t[0], a["shape"], name),
          lambda x, a: np.broadcast_to(_f64(x[0]), a["shape"]), 1)
_register("bias_add", BROADCAST, lambda t, a, name: ops.bias_add(t[0], t[1], a.get("axis", -1), name),
          lambda x, a: np.asarray(x[0], np.float64) + R.along_axis(x[1], x[0].ndim, a.get("axis", -1)), 2)
_register("batch_norm", BROADCAST,
          lambda t, a, name: ops.batch_norm(*t, eps=a.get("eps", 1e-5), axis=a.get("axis", -1), name=name),
          lambda x, a: R.batch_norm(*x, a.get("eps", 1e-5), a.get("axis", -1)), 5)

for _kind, (_fn, _reference, _) in pointwise.UNARY.items():
    _register(_kind, ELEMWISE, lambda t, a, name, k=_kind: pointwise.pointwise(t[0], k, name),
              lambda x, a, ref=_reference: ref(x[0]), 1)
for _kind, (_fn, _reference) in pointwise.BINARY.items():
    _register(_kind, BROADCAST, lambda t, a, name, k=_kind: pointwise.pointwise2(t[0], t[1], k, name),
              lambda x, a, ref=_reference: ref(x[0], x[1]), 2)
_register("where", BROADCAST, lambda t, a, name: pointwise.where(t[0], t[1], t[2], name),
          lambda x, a: np.where(x[0], x[1], x[2]), 3)

# data movement -----------------------------------------------------------------------------

_register("reshape", INJECTIVE, lambda t, a, name: ops.reshape(t[0], a["shape"], name),
          lambda x, a: np.reshape(x[0], a["shape"]), 1)
_register("transpose", INJECTIVE, lambda t, a, name: ops.transpose(t[0], a["axes"], name),
          lambda x, a: np.transpose(x[0], a["axes"]), 1)
_register("concat", INJECTIVE, lambda t, a, name: ops.concat(t, a["axis"], name),
          lambda x, a: np.concatenate([_f64(v) for v in x], axis=a["axis"]))
_register("strided_slice", INJECTIVE,
          lambda t, a, name: ops.strided_slice(t[0], a["begin"], a["step"], a["shape"], name),
          lambda x, a: R.strided_slice(x[0], a["begin"], a["step"], a["shape"]), 1)
_register("gather", INJECTIVE, lambda t, a, name: ops.gather(t[0], t[1], a.get("axis", 0), name),
          lambda x, a: R.gather(x[0], x[1], a.get("axis", 0)), 2)
_register("pad", INJECTIVE,
          lambda t, a, name: ops.pad_mode(t[0], a["pad_before"], a["pad_after"], a.get("mode", "constant"),
                                          a.get("value", 0.0), name),
          lambda x, a: np.pad(_f64(x[0]), list(zip(a["pad_before"], a["pad_after"])), mode=a.get("mode", "constant"),
                              **({"constant_values": a.get("value", 0.0)} if a.get("mode", "constant") == "constant"
                                 else {})), 1)
_register("resize", INJECTIVE,
          lambda t, a, name: ops.resize(t[0], a["shape"], a["scales"], a["mode"], a["coordinate_mode"],
                                        a["nearest_mode"], name),
          lambda x, a: R.resize(x[0], a["shape"], a["scales"], a["mode"], a["coordinate_mode"], a["nearest_mode"]), 1)

_register("tile", INJECTIVE, lambda t, a, name: indexing.tile(t[0], a["repeats"], name),
          lambda x, a: np.tile(x[0], a["repeats"]), 1)
_register("gather_elements", INJECTIVE,
          lambda t, a, name: indexing.gather_elements(t[0], t[1], a.get("axis", 0), name),
          lambda x, a: np.take_along_axis(x[0], np.where(x[1] < 0, x[1] + x[0].shape[a.get("axis", 0)], x[1]),
                                          a.get("axis", 0)), 2)

# reductions --------------------------------------------------------------------------------

def _pool_build(t, a, name):
    return ops.pool(t[0], a["kernel"], a["stride"], a["padding"], a["pool_type"], _layout(t[0].ndim), name=name,
                    pad_after=a.get("pad_after"), ceil_mode=a.get("ceil_mode", False),
                    count_include_pad=a.get("count_include_pad", False), dilation=a.get("dilation", 1))


def _pool_ref(x, a):
    sd = x[0].ndim - 2
    before, after = _pads(a, sd)
    return R.pool(x[0], _t(a["kernel"], sd), _t(a["stride"], sd), before, a["pool_type"], True, pad_after=after,
                  ceil_mode=a.get("ceil_mode", False), count_include_pad=a.get("count_include_pad", False),
                  dilation=_t(a.get("dilation", 1), sd))


_register("pool", REDUCE, _pool_build, _pool_ref, 1)
_register("global_pool", REDUCE,
          lambda t, a, name: ops.global_pool(t[0], a["pool_type"], _layout(t[0].ndim), name=name),
          lambda x, a: R.global_pool(x[0], a["pool_type"], True), 1)
_register("softmax", REDUCE, lambda t, a, name: ops.softmax(t[0], name, a.get("axis", -1)),
          lambda x, a: R.softmax(x[0], a.get("axis", -1)), 1)
_register("log_softmax", REDUCE, lambda t, a, name: ops.log_softmax(t[0], name, a.get("axis", -1)),
          lambda x, a: R.log_softmax(x[0], a.get("axis", -1)), 1)
_register("layer_norm", REDUCE, lambda t, a, name: ops.layer_norm(t[0], t[1], t[2], a.get("eps", 1e-5), name),
          lambda x, a: R.layer_norm(x[0], x[1], x[2], a.get("eps", 1e-5)), 3)
_register("reduce", REDUCE, lambda t, a, name: ops.reduce(t[0], a["axes"], a["reducer"], a["keepdims"], name),
          lambda x, a: getattr(np, a["reducer"])(_f64(x[0]), axis=tuple(a["axes"]), keepdims=a["keepdims"]), 1)
_register("lrn", REDUCE,
          lambda t, a, name: ops.lrn(t[0], a["size"], a["alpha"], a["beta"], a["bias"], a.get("axis", -1), name),
          lambda x, a: R.lrn(x[0], a["size"], a["alpha"], a["beta"], a["bias"], a.get("axis", -1)), 1)
_register("cumsum", REDUCE,
          lambda t, a, name: indexing.cumsum(t[0], a["axis"], a.get("exclusive", False), a.get("reverse", False),
                                             name),
          lambda x, a: indexing.cumsum_reference(x[0], a["axis"], a.get("exclusive", False),
                                                 a.get("reverse", False)), 1)
_register("arg_reduce", REDUCE,
          lambda t, a, name: indexing.arg_reduce(t[0], a["axis"], a["largest"], a["keepdims"], a["select_last"],
                                                 name),
          lambda x, a: indexing.arg_reduce_reference(x[0], a["axis"], a["largest"], a["keepdims"],
                                                     a["select_last"]), 1)
_register("topk_rank", REDUCE, lambda t, a, name: indexing.topk_rank(t[0], a["axis"], a["largest"], name),
          lambda x, a: indexing.topk_rank_reference(x[0], a["axis"], a["largest"]), 1)
_register("topk_select", REDUCE,
          lambda t, a, name: indexing.topk_select(t[0], t[1], a["k"], a["axis"], a["indices"], name),
          lambda x, a: indexing.topk_select_reference(x[0], x[1], a["k"], a["axis"], a["indices"]), 2)
_register("reduce_prod", INJECTIVE, lambda t, a, name: indexing.reduce_prod(t[0], a["axis"], a["keepdims"], name),
          lambda x, a: np.prod(_f64(x[0]), axis=a["axis"], keepdims=a["keepdims"]), 1)


def opdef(kind: str) -> OpDef:
    try:
        return OPDEFS[kind]
    except KeyError:
        raise ValueError(f"unknown operator kind {kind!r}; known: {', '.join(sorted(OPDEFS))}") from None
