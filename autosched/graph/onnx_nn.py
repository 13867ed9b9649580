"""ONNX's window and normalisation operators as graph nodes: Conv, ConvTranspose, the
poolings, BatchNormalization, LayerNormalization, LRN, Softmax, the reductions and Resize
(the converters' conventions: ``onnx_ops``). Convolutions and pooling work channel-last:
their input is brought there (``channel_last``) and their output stays there; weights are
rearranged once, here. Normalisations and reductions work in any layout, their axis mapped
through the value's ``perm``."""
from __future__ import annotations

import math

import numpy as np

from .onnx_layout import Value, channel_last, identity
from ..ops.indexing import MAX_PRODUCT_EXTENT
from .onnx_ops import Unsupported, as_ints, converts


# convolutions and pooling ------------------------------------------------------------------

def window_params(attrs: dict, spatial, kernel) -> tuple:
    """(strides, dilations, pads before, pads after) of an ONNX Conv or pooling node with
    these attributes on input extents ``spatial``, auto_pad resolved."""
    sd = len(kernel)
    strides = as_ints(attrs.get("strides", [1] * sd))
    dilations = as_ints(attrs.get("dilations", [1] * sd))
    auto_pad = attrs.get("auto_pad", "NOTSET")
    if auto_pad in ("NOTSET", "VALID"):
        pads = as_ints(attrs.get("pads", [0] * 2 * sd)) if auto_pad == "NOTSET" else (0,) * 2 * sd
        before, after = pads[:sd], pads[sd:]
    elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        totals = [max(0, (-(-i // s) - 1) * s + (k - 1) * d + 1 - i)
                  for i, s, k, d in zip(spatial, strides, kernel, dilations)]
        small = [t // 2 for t in totals]
        big = [t - t // 2 for t in totals]
        before, after = (small, big) if auto_pad == "SAME_UPPER" else (big, small)
    else:
        raise Unsupported(f"auto_pad={auto_pad!r}")
    if min(before) < 0 or min(after) < 0:
        raise Unsupported(f"negative pads {before}/{after}")
    return strides, dilations, tuple(before), tuple(after)


def conv_transpose_params(attrs: dict, spatial, kernel) -> tuple:
    """(strides, output padding, pads before, pads after) of an ONNX ConvTranspose node
    (2-d, no groups or dilation), ``output_shape`` and auto_pad resolved."""
    if int(attrs.get("group", 1)) != 1 or any(d != 1 for d in as_ints(attrs.get("dilations", [1, 1]))):
        raise Unsupported("group or dilation other than 1")
    strides = as_ints(attrs.get("strides", [1, 1]))
    extra = as_ints(attrs.get("output_padding", [0, 0]))
    auto_pad = attrs.get("auto_pad", "NOTSET")
    if attrs.get("output_shape") is not None or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        wanted = (as_ints(attrs["output_shape"])[-2:] if attrs.get("output_shape") is not None
                  else tuple(i * s for i, s in zip(spatial, strides)))
        totals = [s * (i - 1) + e + k - o for s, i, e, k, o in zip(strides, spatial, extra, kernel, wanted)]
        if min(totals) < 0:
            raise Unsupported(f"output_shape {wanted} larger than the full transposed convolution")
        small, big = [t // 2 for t in totals], [t - t // 2 for t in totals]
        before, after = (small, big) if auto_pad == "SAME_UPPER" else (big, small)
    elif auto_pad == "VALID":
        before = after = (0, 0)
    else:
        pads = as_ints(attrs.get("pads", [0, 0, 0, 0]))
        before, after = pads[:2], pads[2:]
    return strides, extra, tuple(before), tuple(after)


def _spatial_input(n, x: Value) -> Value:
    if not 3 <= x.rank <= 5:
        raise Unsupported(f"a {x.rank}-d input (1 to 3 spatial dimensions are supported)")
    return x


def _pad_attrs(before, after) -> dict:
    return {"padding": before} if before == after else {"padding": before, "pad_after": after}


@converts("Conv")
def _conv(b, n):
    x = _spatial_input(n, n.runtime_input(0))
    w = np.asarray(n.const_input(1, "weight"), np.float32)
    bias = n.const_input(2, "bias")
    kernel = w.shape[2:]
    strides, dilations, before, after = window_params(n.attrs, x.onnx_shape[2:], kernel)
    groups = int(n.attr("group", 1))
    ci, co = x.onnx_shape[1], w.shape[0]
    data = b.to_layout(x, channel_last(x.rank))
    pads = _pad_attrs(before, after)
    sd = len(kernel)
    if groups > 1 and groups == ci and sd == 2 and w.shape[1] == 1:   # depthwise: weight (kh, kw, C, M)
        weight = w.reshape(ci, co // ci, *kernel).transpose(2, 3, 0, 1)
        y = b.op("depthwise_conv2d", [data, b.const(weight, f"{n.name}_weight")], n.name, stride=strides,
                 dilation=dilations, **pads)
    else:                                                                # (*kernel, CI/groups, CO)
        weight = w.transpose(*range(2, 2 + sd), 1, 0)
        y = b.op("conv", [data, b.const(weight, f"{n.name}_weight")], n.name, stride=strides,
                 dilation=dilations, groups=groups, **pads)
    if bias is not None:
        y = b.op("bias_add", [y, b.const(np.asarray(bias, np.float32), f"{n.name}_bias")], f"{n.name}_bias_add",
                 axis=-1)
    return [Value(y, channel_last(x.rank))]


@converts("ConvTranspose")
def _conv_transpose(b, n):
    x = _spatial_input(n, n.runtime_input(0))
    w = np.asarray(n.const_input(1, "weight"), np.float32)
    bias = n.const_input(2, "bias")
    if x.rank != 4:
        raise Unsupported("only 2-d transposed convolutions are supported")
    strides, extra, before, after = conv_transpose_params(n.attrs, x.onnx_shape[2:], w.shape[2:])
    weight = w.transpose(2, 3, 0, 1)                                       # (kh, kw, CI, CO)
    y = b.op("conv2d_transpose", [b.to_layout(x, channel_last(4)), b.const(weight, f"{n.name}_weight")], n.name,
             stride=strides, output_padding=extra, **_pad_attrs(before, after))
    if bias is not None:
        y = b.op("bias_add", [y, b.const(np.asarray(bias, np.float32), f"{n.name}_bias")], f"{n.name}_bias_add",
                 axis=-1)
    return [Value(y, channel_last(4))]


@converts("MaxPool", "AveragePool")
def _pool(b, n):
    n.only_first_output()
    x = _spatial_input(n, n.runtime_input(0))
    kernel = as_ints(n.attr("kernel_shape"))
    strides, dilations, before, after = window_params(n.attrs, x.onnx_shape[2:], kernel)
    if n.attr("storage_order", 0):
        raise Unsupported("storage_order=1")
    y = b.op("pool", [b.to_layout(x, channel_last(x.rank))], n.name, kernel=kernel, stride=strides,
             pool_type="max" if n.op_type == "MaxPool" else "avg", ceil_mode=bool(n.attr("ceil_mode", 0)),
             count_include_pad=bool(n.attr("count_include_pad", 0)), dilation=dilations,
             **_pad_attrs(before, after))
    return [Value(y, channel_last(x.rank))]


@converts("GlobalAveragePool", "GlobalMaxPool")
def _global_pool(b, n):
    x = _spatial_input(n, n.runtime_input(0))
    y = b.op("global_pool", [b.to_layout(x, channel_last(x.rank))], n.name,
             pool_type="avg" if n.op_type == "GlobalAveragePool" else "max")
    return [Value(y, channel_last(x.rank))]


# normalisation ------------------------------------------------------------------------------

@converts("BatchNormalization")
def _batch_norm(b, n):
    n.only_first_output()
    if n.attr("training_mode", 0):
        raise Unsupported("training_mode=1")
    x = n.runtime_input(0)
    params = [np.asarray(n.const_input(k, what), np.float32)
              for k, what in ((1, "scale"), (2, "bias"), (3, "mean"), (4, "var"))]
    if x.rank >= 3 and x.perm == identity(x.rank):       # a batch norm on channel-first data: go channel-last
        x = Value(b.to_layout(x, channel_last(x.rank)), channel_last(x.rank))
    axis = x.graph_axis(1)
    nodes = [b.const(p, f"{n.name}_{k}") for k, p in enumerate(params)]
    y = b.op("batch_norm", [x.node, *nodes], n.name, eps=float(n.attr("epsilon", 1e-5)),
             axis=-1 if axis == x.rank - 1 else axis)
    return [Value(y, x.perm)]


@converts("LayerNormalization")
def _layer_norm(b, n):
    n.only_first_output()
    x = n.runtime_input(0)
    axis = int(n.attr("axis", -1)) % x.rank
    width = math.prod(x.onnx_shape[axis:])
    scale = np.broadcast_to(np.asarray(n.const_input(1, "scale"), np.float32), x.onnx_shape[axis:]).reshape(width)
    bias = n.const_input(2, "bias", np.zeros(x.onnx_shape[axis:], np.float32))
    bias = np.broadcast_to(np.asarray(bias, np.float32), x.onnx_shape[axis:]).reshape(width)
    eps = float(n.attr("epsilon", 1e-5))
    gamma, beta = b.const(scale, f"{n.name}_scale"), b.const(bias, f"{n.name}_bias")
    if axis == x.rank - 1 and x.perm[-1] == x.rank - 1:
        return [Value(b.op("layer_norm", [x.node, gamma, beta], n.name, eps=eps), x.perm)]
    rows = b.reshape(b.plain(x), (math.prod(x.onnx_shape[:axis]), width), n.name)
    y = b.op("layer_norm", [rows, gamma, beta], n.name, eps=eps)
    return [Value(b.reshape(y, x.onnx_shape, f"{n.name}_out"), identity(x.rank))]


@converts("LRN")
def _lrn(b, n):
    x = n.runtime_input(0)
    y = b.op("lrn", [x.node], n.name, size=int(n.attr("size")), alpha=float(n.attr("alpha", 1e-4)),
             beta=float(n.attr("beta", 0.75)), bias=float(n.attr("bias", 1.0)), axis=x.graph_axis(1))
    return [Value(y, x.perm)]


@converts("Softmax", "LogSoftmax")
def _softmax(b, n):
    x = n.runtime_input(0)
    kind = "softmax" if n.op_type == "Softmax" else "log_softmax"
    axis = int(n.attr("axis", -1 if n.opset >= 13 else 1)) % x.rank
    if n.opset >= 13 or all(s == 1 for s in x.onnx_shape[axis + 1:]):
        return [Value(b.op(kind, [x.node], n.name, axis=x.graph_axis(axis)), x.perm)]
    # before opset 13: the axes from ``axis`` on are flattened into one
    rows = b.reshape(b.plain(x), (math.prod(x.onnx_shape[:axis]), math.prod(x.onnx_shape[axis:])), n.name)
    y = b.op(kind, [rows], n.name, axis=-1)
    return [Value(b.reshape(y, x.onnx_shape, f"{n.name}_out"), identity(x.rank))]


def _reduce_axes(n, x: Value):
    """The ONNX axes a reduction node reduces (sorted), or None for a no-op."""
    axes_as_input = n.opset >= 18 or (n.op_type == "ReduceSum" and n.opset >= 13)
    axes = n.const_input(1, "axes") if axes_as_input else n.attr("axes")
    if axes is None or np.size(axes) == 0:
        if n.attr("noop_with_empty_axes", 0):
            return None
        axes = range(x.rank)
    return sorted({int(a) % x.rank for a in np.ravel(axes)})


def _reduced(b, x: Value, onnx_axes, reducer: str, keepdims: bool, name: str) -> Value:
    y = b.op("reduce", [x.node], name, axes=tuple(x.graph_axis(a) for a in onnx_axes), reducer=reducer,
             keepdims=keepdims)
    if keepdims:
        return Value(y, x.perm)
    kept = [a for a in x.perm if a not in onnx_axes]
    return Value(y, tuple(sorted(kept).index(a) for a in kept))


_REDUCERS = {"ReduceMean": "mean", "ReduceSum": "sum", "ReduceMax": "max", "ReduceMin": "min"}
#: reductions of a map of the input, then a map of the result: (before, reducer, after)
_MAPPED_REDUCERS = {"ReduceL1": ("abs", "sum", None), "ReduceL2": ("square", "sum", "sqrt"),
                    "ReduceSumSquare": ("square", "sum", None), "ReduceLogSum": (None, "sum", "log"),
                    "ReduceLogSumExp": ("exp", "sum", "log")}


def _product(b, x: Value, onnx_axes, keepdims: bool, name: str) -> Value:
    for k, a in enumerate(reversed(onnx_axes)):      # from the last axis, so the others keep their place
        if x.onnx_shape[a] > MAX_PRODUCT_EXTENT:
            raise Unsupported(f"a product over {x.onnx_shape[a]} elements (at most {MAX_PRODUCT_EXTENT})")
        y = b.op("reduce_prod", [x.node], f"{name}_{k}", axis=x.graph_axis(a), keepdims=keepdims)
        x = Value(y, x.perm if keepdims else tuple(p - (p > a) for p in x.perm if p != a))
    return x


@converts(*_REDUCERS, *_MAPPED_REDUCERS, "ReduceProd")
def _reduce(b, n):
    x = n.runtime_input(0)
    onnx_axes = _reduce_axes(n, x)
    if onnx_axes is None:
        return [x]
    keepdims = bool(n.attr("keepdims", 1))
    if n.op_type in _REDUCERS:
        return [_reduced(b, x, onnx_axes, _REDUCERS[n.op_type], keepdims, n.name)]
    if n.op_type == "ReduceProd":
        return [_product(b, x, onnx_axes, keepdims, n.name)]
    if not x.dtype.startswith("float"):
        raise Unsupported(f"an input of dtype {x.dtype}")
    before, reducer, after = _MAPPED_REDUCERS[n.op_type]
    if before == "square":
        x = Value(b.op("multiply", [x.node, x.node], f"{n.name}_square"), x.perm)
    elif before is not None:
        x = Value(b.op(before, [x.node], f"{n.name}_{before}"), x.perm)
    y = _reduced(b, x, onnx_axes, reducer, keepdims, n.name if after is None else f"{n.name}_{reducer}")
    return [y if after is None else Value(b.op(after, [y.node], n.name), y.perm)]


def _normalised(b, x: Value, axes: tuple, eps: float, name: str) -> Value:
    """``(x - mean) / sqrt(var + eps)`` over the graph axes ``axes`` of ``x``'s node."""
    mean = b.op("reduce", [x.node], f"{name}_mean", axes=axes, reducer="mean", keepdims=True)
    centred = b.op("subtract", [x.node, mean], f"{name}_centred")
    square = b.op("multiply", [centred, centred], f"{name}_square")
    var = b.op("reduce", [square], f"{name}_var", axes=axes, reducer="mean", keepdims=True)
    std = b.op("sqrt", [b.op("scalar", [var], f"{name}_eps", op="+", value=eps)], f"{name}_std")
    return Value(b.op("divide", [centred, std], f"{name}_norm"), x.perm)


def _affine(b, x: Value, scale, bias, name: str) -> Value:
    """``x · scale + bias``, the two per channel (ONNX axis 1)."""
    axis = x.graph_axis(1)
    shape = [1] * x.rank
    shape[axis] = x.onnx_shape[1]
    gamma = b.const(np.asarray(scale, np.float32).reshape(shape), f"{name}_scale")
    beta = b.const(np.asarray(bias, np.float32).reshape(shape), f"{name}_bias")
    y = b.op("multiply", [x.node, gamma], f"{name}_mul")
    return Value(b.op("add", [y, beta], name), x.perm)


@converts("InstanceNormalization")
def _instance_norm(b, n):
    x = n.runtime_input(0)
    if x.rank < 3:
        raise Unsupported(f"a {x.rank}-d input")
    scale, bias = n.const_input(1, "scale"), n.const_input(2, "bias")
    y = _normalised(b, x, tuple(x.graph_axis(a) for a in range(2, x.rank)), float(n.attr("epsilon", 1e-5)),
                    n.name)
    return [_affine(b, y, scale, bias, n.name)]


@converts("GroupNormalization")
def _group_norm(b, n):
    """Channels in ``num_groups`` groups, each normalised over its channels and the spatial
    axes; scale and bias per group (opset 18) or per channel (opset 21)."""
    x = n.runtime_input(0)
    groups = int(n.attr("num_groups"))
    N, C = x.onnx_shape[:2]
    scale, bias = (np.asarray(n.const_input(k, what), np.float32) for k, what in ((1, "scale"), (2, "bias")))
    if scale.size == groups and groups != C:
        scale, bias = np.repeat(scale, C // groups), np.repeat(bias, C // groups)
    rows = b.reshape(b.plain(x), (N, groups, math.prod(x.onnx_shape[1:]) // groups), f"{n.name}_groups")
    y = _normalised(b, Value(rows, identity(3)), (2,), float(n.attr("epsilon", 1e-5)), n.name)
    back = Value(b.reshape(y.node, x.onnx_shape, f"{n.name}_ungroup"), identity(x.rank))
    return [_affine(b, back, scale, bias, n.name)]


@converts("Resize", "Upsample")
def _resize(b, n):
    """Resize, and opset 9's Upsample (Resize-10's inputs and coordinates under another name)."""
    x = n.runtime_input(0)
    mode = n.attr("mode", "nearest")
    if mode not in ("nearest", "linear"):
        raise Unsupported(f"mode={mode!r} (nearest and linear are supported)")
    if n.opset < 11:
        scales, sizes = n.const_input(1, "scales"), None
        coord, nearest = "asymmetric", "floor"
    else:
        scales, sizes = n.const_input(2, "scales"), n.const_input(3, "sizes")
        coord = n.attr("coordinate_transformation_mode", "half_pixel")
        nearest = n.attr("nearest_mode", "round_prefer_floor")
    if coord == "tf_crop_and_resize" or n.attr("antialias", 0) or n.attr("keep_aspect_ratio_policy",
                                                                            "stretch") != "stretch":
        raise Unsupported("tf_crop_and_resize, antialias or a keep_aspect_ratio_policy")
    axes = n.attr("axes")
    axes = [int(a) % x.rank for a in axes] if axes is not None else list(range(x.rank))
    full_scales, shape = [1.0] * x.rank, list(x.onnx_shape)
    if sizes is not None and np.size(sizes):
        for a, s in zip(axes, as_ints(sizes)):
            shape[a], full_scales[a] = s, s / x.onnx_shape[a]
    elif scales is not None and np.size(scales):
        for a, s in zip(axes, np.ravel(scales)):
            full_scales[a], shape[a] = float(s), int(math.floor(x.onnx_shape[a] * float(s)))
    else:
        raise Unsupported("neither scales nor sizes are given")
    y = b.op("resize", [x.node], n.name, shape=x.to_graph_order(shape), scales=x.to_graph_order(full_scales),
             mode=mode, coordinate_mode=coord, nearest_mode=nearest)
    return [Value(y, x.perm)]
