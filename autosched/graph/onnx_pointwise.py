"""ONNX's pointwise operators beyond the activations, as graph nodes: math (Neg, Abs, Exp,
Log, Floor, Ceil, Round, Softplus, Sign), comparisons and logic (Equal, Less, Greater,
And, Or, Xor, Not, IsNaN: bool results), Where, Mod, PRelu and Expand. They broadcast and
keep their leading operand's layout as the arithmetic converters do (``onnx_ops``)."""
from __future__ import annotations

import numpy as np

from .onnx_layout import Value
from .onnx_ops import Unsupported, _elementwise, _lift, as_ints, converts

_UNARY = {"Neg": "negative", "Abs": "abs", "Exp": "exp", "Log": "log", "Floor": "floor", "Ceil": "ceil",
          "Round": "round", "Softplus": "softplus", "Sign": "sign", "Not": "logical_not", "IsNaN": "isnan"}
_FLOAT_ONLY = {"Exp", "Log", "Floor", "Ceil", "Round", "Softplus", "IsNaN"}


@converts(*_UNARY)
def _unary(b, n):
    x = n.runtime_input(0)
    if n.op_type in _FLOAT_ONLY and not x.dtype.startswith("float"):
        raise Unsupported(f"an input of dtype {x.dtype}")
    return [Value(b.op(_UNARY[n.op_type], [x.node], n.name), x.perm)]


_BINARY = {"Equal": "equal", "Less": "less", "LessOrEqual": "less_equal", "Greater": "greater",
           "GreaterOrEqual": "greater_equal", "And": "logical_and", "Or": "logical_or", "Xor": "logical_xor",
           "PRelu": "prelu"}


def _dtype(v) -> str:
    return v.dtype if isinstance(v, Value) else np.asarray(v).dtype.name


def _same_dtype(n, values) -> list:
    """The operands, constants converted to the run-time operands' dtype (an exporter's
    ``x == 0`` may compare an int64 tensor with an int32 literal folded to a constant)."""
    dtype = next(v.dtype for v in values if isinstance(v, Value))
    out = []
    for v in values:
        if isinstance(v, Value):
            if v.dtype != dtype:
                raise Unsupported(f"operands of dtypes {dtype} and {v.dtype}")
            out.append(v)
        else:
            out.append(np.asarray(v).astype(dtype))
    return out


@converts(*_BINARY)
def _binary(b, n):
    return [_elementwise(b, _BINARY[n.op_type], _same_dtype(n, n.inputs), n.name)]


@converts("Mod")
def _mod(b, n):
    values = _same_dtype(n, n.inputs)
    dtype = _dtype(values[0])
    if not dtype.startswith("float"):
        raise Unsupported(f"integer operands ({dtype}) computed at run time")
    return [_elementwise(b, "fmod" if n.attr("fmod", 0) else "mod", values, n.name)]


@converts("Where")
def _where(b, n):
    cond, x, y = n.inputs
    if not isinstance(x, Value) and not isinstance(y, Value):
        dtype = np.result_type(np.asarray(x), np.asarray(y)).name
        x, y = np.asarray(x, dtype), np.asarray(y, dtype)
    else:
        x, y = _same_dtype(n, [x, y])
    if not isinstance(cond, Value):
        cond = np.asarray(cond, bool)
    return [_elementwise(b, "where", [cond, x, y], n.name)]


@converts("Expand")
def _expand(b, n):
    x = n.runtime_input(0)
    target = as_ints(n.const_input(1, "shape"))
    shape = tuple(np.broadcast_shapes(x.onnx_shape, target))
    if shape == x.onnx_shape:
        return [x]
    lifted = _lift(b, x, len(shape), n.name)
    node = b.op("broadcast_to", [lifted.node], n.name, shape=lifted.to_graph_order(shape))
    return [Value(node, lifted.perm)]
