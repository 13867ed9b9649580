"""The paper's subgraph benchmarks: ConvLayer (conv + bias + batch norm + ReLU) and TBS;
the residual block's tail that ResNets fuse (conv + bias + shortcut + ReLU); and the fused
tasks that partitioning real models makes (an anchor with its epilogue: ``dense_chain``,
``conv2d_chain``, ``winograd_chain``, ``depthwise_chain``, ``se_gate``), stage for stage as
the ONNX importer builds them, so that the base model can be trained on their families.

They exist to test fusion: the elementwise tail of ConvLayer must be inlined into or
computed at the convolution, and TBS's transposes into the batch matmul, which softmax
follows. Stages are named after Ansor's artifact (bias_add, bn_mul, bn_add, relu; query_T,
key_T). Flops add the parts: conv + 4 (residual: 3) per output element; batch matmul +
softmax's 5.
"""
from __future__ import annotations

import math

import numpy as np

import ir

from . import reference as ref
from . import winograd
from .common import as_tuple, check_dims, numel, out_size, parse_layout
from .conv import conv, depthwise_conv2d
from .elementwise import (add, bias_add, channelwise, erf, hard_sigmoid, hard_swish, multiply, relu, scalar_op,
                          sigmoid)
from .linalg import batch_matmul, dense
from .nn import softmax
from .registry import operator
from .transform import transpose


def conv_bn_relu(data, weight, bias, bn_scale, bn_shift, stride=1, padding=0, dilation=1, layout="NHWC"):
    """relu((conv(data, weight) + bias) · bn_scale + bn_shift), per output channel."""
    out = conv(data, weight, stride, padding, dilation, 1, layout)
    axis = parse_layout(layout, data.ndim - 2, "conv_layer").channel_axis
    out = channelwise(out, bias, "+", axis, name="bias_add")
    out = channelwise(out, bn_scale, "*", axis, name="bn_mul")
    out = channelwise(out, bn_shift, "+", axis, name="bn_add")
    return relu(out)


def conv_residual(data, weight, bias, shortcut, stride=1, padding=0, layout="NHWC"):
    """relu(conv(data, weight) + bias + shortcut): a residual block's last convolution with
    its per-channel bias (batch norm folded in), the shortcut tensor added, then ReLU."""
    out = conv(data, weight, stride, padding, 1, 1, layout)
    axis = parse_layout(layout, data.ndim - 2, "conv_residual").channel_axis
    if shortcut.shape != out.shape:
        raise ValueError(f"conv_residual: the shortcut has shape {shortcut.shape}, expected the "
                         f"convolution's output shape {out.shape}")
    return relu(add(channelwise(out, bias, "+", axis, name="bias_add"), shortcut, name="add"))


def transpose_batch_matmul(query, key, apply_softmax: bool = True):
    """softmax(Q·Kᵀ) per head: Q, K (batch, seq, head, dim) -> scores (batch, head, seq, seq)."""
    if query.ndim != 4 or query.shape != key.shape:
        raise ValueError(f"transpose_batch_matmul: query {query.shape} and key {key.shape} must both be "
                         "(batch, seq_len, n_head, n_dim)")
    q_t = transpose(query, (0, 2, 1, 3), name="query_T")
    k_t = transpose(key, (0, 2, 1, 3), name="key_T")
    scores = batch_matmul(q_t, k_t, transpose_b=True, name="scores")
    return softmax(scores) if apply_softmax else scores


def _conv_layer_reference(ins, p):
    data, weight, bias, scale, shift = ins
    sd = data.ndim - 2
    cl = p.layout == "NHWC"
    out = ref.conv(data, weight, as_tuple(p.stride, sd, "stride"), as_tuple(p.padding, sd, "padding", 0),
                   as_tuple(p.dilation, sd, "dilation"), 1, cl)
    axis = -1 if cl else 1
    out = (out + ref.along_axis(bias, out.ndim, axis)) * ref.along_axis(scale, out.ndim, axis)
    return [ref.relu(out + ref.along_axis(shift, out.ndim, axis))]


def _conv_layer_flops(ts, p):
    k = as_tuple(p.kernel, 2, "kernel")
    out = numel(ts[-1].shape)
    return 2 * out * p.CI * k[0] * k[1] + 4 * out


@operator("conv_layer", reference=_conv_layer_reference, flops=_conv_layer_flops)
def conv_layer_workload(N, H, W, CI, CO, kernel, stride=1, padding=0, dilation=1, layout="NHWC",
                        weight_constant=True, dtype="float32"):
    """The suite's ConvLayer (CBR): conv2d + bias + batch norm (scale, shift) + ReLU."""
    lay = parse_layout(layout, 2, "conv_layer")
    check_dims("conv_layer", N=N, H=H, W=W, CI=CI, CO=CO)
    kernel = as_tuple(kernel, 2, "conv_layer: kernel")
    data = ir.placeholder(lay.shape(N, CI, (H, W)), dtype, name="data")
    w_shape = (*kernel, CI, CO) if lay.channel_last else (CO, CI, *kernel)
    weight = ir.placeholder(w_shape, dtype, name="weight", constant=weight_constant)
    vecs = [ir.placeholder((CO,), dtype, name=n, constant=weight_constant) for n in ("bias", "bn_scale", "bn_shift")]
    return [data, weight, *vecs, conv_bn_relu(data, weight, *vecs, stride, padding, dilation, layout)]


def _conv_residual_reference(ins, p):
    data, weight, bias, shortcut = ins
    cl = p.layout == "NHWC"
    out = ref.conv(data, weight, as_tuple(p.stride, 2, "stride"), as_tuple(p.padding, 2, "padding", 0),
                   (1, 1), 1, cl)
    return [ref.relu(out + ref.along_axis(bias, out.ndim, -1 if cl else 1) + shortcut)]


@operator("conv_residual", reference=_conv_residual_reference,
          flops=lambda ts, p: 2 * numel(ts[-1].shape) * p.CI * math.prod(as_tuple(p.kernel, 2, "kernel"))
          + 3 * numel(ts[-1].shape))
def conv_residual_workload(N, H, W, CI, CO, kernel, stride=1, padding=0, layout="NHWC", weight_constant=True,
                           dtype="float32"):
    """A residual block's fused tail (``conv_residual``): data, HWIO (or OIHW) weight, bias
    and the shortcut, which has the output's shape."""
    lay = parse_layout(layout, 2, "conv_residual")
    check_dims("conv_residual", N=N, H=H, W=W, CI=CI, CO=CO)
    kernel = as_tuple(kernel, 2, "conv_residual: kernel")
    data = ir.placeholder(lay.shape(N, CI, (H, W)), dtype, name="data")
    weight = ir.placeholder((*kernel, CI, CO) if lay.channel_last else (CO, CI, *kernel), dtype, name="weight",
                            constant=weight_constant)
    bias = ir.placeholder((CO,), dtype, name="bias", constant=weight_constant)
    stride, padding = as_tuple(stride, 2, "conv_residual: stride"), as_tuple(padding, 2, "conv_residual: padding", 0)
    out_sp = [out_size(size, k, s, pp) for size, k, s, pp in zip((H, W), kernel, stride, padding)]
    if min(out_sp) < 1:
        raise ValueError(f"conv_residual: the kernel {kernel} does not fit the input {(H, W)} padded by {padding}")
    shortcut = ir.placeholder(lay.shape(N, CO, out_sp), dtype, name="shortcut")
    return [data, weight, bias, shortcut, conv_residual(data, weight, bias, shortcut, stride, padding, layout)]


def _tbs_reference(ins, p):
    q, k = (a.transpose(0, 2, 1, 3) for a in ins)
    scores = ref.matmul(q, k, transpose_b=True)
    return [ref.softmax(scores) if p.softmax else scores]


@operator("transpose_batch_matmul", reference=_tbs_reference,
          flops=lambda ts, p: (2 * p.n_dim + 5 * p.softmax) * p.batch * p.n_head * p.seq_len ** 2)
def transpose_batch_matmul_workload(batch, seq_len, n_head, n_dim, softmax=True, dtype="float32"):
    """The suite's TBS: Q and K (batch, seq, head, dim) transposed per head, Q·Kᵀ, then softmax."""
    check_dims("transpose_batch_matmul", batch=batch, seq_len=seq_len, n_head=n_head, n_dim=n_dim)
    q = ir.placeholder((batch, seq_len, n_head, n_dim), dtype, name="query")
    k = ir.placeholder((batch, seq_len, n_head, n_dim), dtype, name="key")
    return [q, k, transpose_batch_matmul(q, k, softmax)]


# a network's fused tasks: an anchor and its epilogue -----------------------------------------

#: the stages of an epilogue (``"bias-gelu"``: a bias, then GELU), each as the ONNX importer
#: builds it: bias (a per-channel constant, Conv's and Gemm's bias), add (MatMul's bias: a
#: broadcast Add of a constant), relu, hard_swish, silu (x · sigmoid(x)), gelu (the erf
#: form, exported as x / √2, erf, + 1, · x, · 0.5), scale (a per-channel constant multiply:
#: ConvNeXt's layer scale), residual (add a tensor of the output's shape)
EPILOGUE_STAGES = ("bias", "add", "relu", "hard_swish", "silu", "gelu", "scale", "residual")
#: flops per output element of each stage
_STAGE_FLOPS = {"bias": 1, "add": 1, "relu": 1, "hard_swish": 5, "silu": 5, "gelu": 5, "scale": 1, "residual": 1}


def epilogue_stages(epilogue: str, what: str) -> list[str]:
    """The stages of ``epilogue`` ('-'-joined names of ``EPILOGUE_STAGES``; "" for none)."""
    stages = [s for s in epilogue.split("-") if s]
    unknown = [s for s in stages if s not in EPILOGUE_STAGES]
    if unknown:
        raise ValueError(f"{what}: unknown epilogue stage(s) {unknown} in {epilogue!r}; expected '-'-joined names "
                         f"of {', '.join(EPILOGUE_STAGES)}")
    return stages


def apply_epilogue(y, stages: list[str], weight_constant: bool = True) -> tuple[list, object]:
    """(its new input placeholders, the output) of ``y`` followed by ``stages`` along its
    last (channel) axis."""
    inputs = []
    channels = (y.shape[-1],)
    for i, stage in enumerate(stages):
        if stage in ("bias", "add", "scale"):
            # (named apart from the stages: a placeholder and the output of one name clash)
            v = ir.placeholder(channels, y.dtype, name=f"{stage}_input_{i}", constant=weight_constant)
            inputs.append(v)
            y = {"bias": lambda: bias_add(y, v, name=f"bias_add_{i}"), "add": lambda: add(y, v, name=f"add_{i}"),
                 "scale": lambda: multiply(y, v, name=f"multiply_{i}")}[stage]()
        elif stage == "residual":
            r = ir.placeholder(y.shape, y.dtype, name=f"residual_input_{i}")
            inputs.append(r)
            y = add(y, r, name=f"add_{i}")
        elif stage == "relu":
            y = relu(y, name=f"relu_{i}")
        elif stage == "hard_swish":
            y = hard_swish(y, name=f"hard_swish_{i}")
        elif stage == "silu":
            y = multiply(y, sigmoid(y, name=f"sigmoid_{i}"), name=f"multiply_{i}")
        else:   # gelu
            t = scalar_op(y, "/", math.sqrt(2.0), name=f"scalar_{i}")
            t = scalar_op(erf(t, name=f"erf_{i}"), "+", 1.0, name=f"scalar_{i}_1")
            y = scalar_op(multiply(y, t, name=f"multiply_{i}"), "*", 0.5, name=f"scalar_{i}_2")
    return inputs, y


def epilogue_reference(y, stages: list[str], extra: list):
    """numpy: ``y`` (float64) followed by ``stages``, taking their inputs from ``extra`` in order."""
    extra = iter(extra)
    for stage in stages:
        if stage in ("bias", "add", "residual"):
            y = y + next(extra)
        elif stage == "scale":
            y = y * next(extra)
        elif stage == "relu":
            y = ref.relu(y)
        elif stage == "hard_swish":
            y = y * ref.hard_sigmoid(y, 1.0 / 6.0, 0.5)
        elif stage == "silu":
            y = y * ref.sigmoid(y)
        else:
            y = ref.gelu(y)
    return y


def _epilogue_flops(ts, p) -> int:
    return numel(ts[-1].shape) * sum(_STAGE_FLOPS[s] for s in epilogue_stages(p.epilogue, "flops"))


@operator("dense_chain", flops=lambda ts, p: 2 * numel(ts[-1].shape) * p.in_features + _epilogue_flops(ts, p),
          reference=lambda ins, p: [epilogue_reference(ref.dense(ins[0], ins[1]), epilogue_stages(p.epilogue, ""),
                                                       ins[2:])])
def dense_chain_workload(rows, in_features, out_features, epilogue="bias", weight_constant=True, dtype="float32"):
    """A network's dense task: x (*rows, in) · W (out, in)ᵀ, then ``epilogue`` (e.g. "add-gelu":
    a transformer's MLP; rows (1, 56, 56): ConvNeXt's pointwise MLP on a 56x56 map)."""
    rows = (rows,) if isinstance(rows, int) else tuple(rows)
    check_dims("dense_chain", in_features=in_features, out_features=out_features,
               **{f"rows[{i}]": r for i, r in enumerate(rows)})
    stages = epilogue_stages(epilogue, "dense_chain")
    x = ir.placeholder((*rows, in_features), dtype, name="x")
    w = ir.placeholder((out_features, in_features), dtype, name="weight", constant=weight_constant)
    extra, out = apply_epilogue(dense(x, w), stages, weight_constant)
    return [x, w, *extra, out]


def _conv_chain_reference(ins, p):
    out = ref.conv(ins[0], ins[1], as_tuple(p.stride, 2, "stride"), as_tuple(p.padding, 2, "padding", 0), (1, 1),
                   p.groups, True)
    return [epilogue_reference(out, epilogue_stages(p.epilogue, ""), ins[2:])]


@operator("conv2d_chain", reference=_conv_chain_reference,
          flops=lambda ts, p: 2 * numel(ts[-1].shape) * (p.CI // p.groups) * math.prod(as_tuple(p.kernel, 2, "k"))
          + _epilogue_flops(ts, p))
def conv2d_chain_workload(N, H, W, CI, CO, kernel, stride=1, padding=0, groups=1, epilogue="bias",
                          weight_constant=True, dtype="float32"):
    """A network's convolution task (NHWC): conv2d, then ``epilogue`` (e.g. "bias-hard_swish")."""
    check_dims("conv2d_chain", N=N, H=H, W=W, CI=CI, CO=CO)
    kernel = as_tuple(kernel, 2, "conv2d_chain: kernel")
    stages = epilogue_stages(epilogue, "conv2d_chain")
    if CI % groups or CO % groups:
        raise ValueError(f"conv2d_chain: groups={groups} must divide CI={CI} and CO={CO}")
    data = ir.placeholder((N, H, W, CI), dtype, name="data")
    weight = ir.placeholder((*kernel, CI // groups, CO), dtype, name="weight", constant=weight_constant)
    extra, out = apply_epilogue(conv(data, weight, stride, padding, 1, groups, "NHWC"), stages, weight_constant)
    return [data, weight, *extra, out]


def _winograd_chain_reference(ins, p):
    out = winograd.reference(ins[0], ins[1], p.padding, None, p.tile)
    return [epilogue_reference(out, epilogue_stages(p.epilogue, ""), ins[2:])]


@operator("winograd_chain", reference=_winograd_chain_reference,
          flops=lambda ts, p: 2 * numel(ts[-1].shape) * p.CI * 9 + _epilogue_flops(ts, p))
def winograd_chain_workload(N, H, W, CI, CO, padding=1, tile=2, epilogue="bias-relu", weight_constant=True,
                            dtype="float32"):
    """A network's 3x3 stride-1 convolution task once ``graph.passes.use_winograd`` made it
    ``conv2d_winograd`` (its weight the transformed one, ((tile+2)², CI, CO)), then ``epilogue``."""
    check_dims("winograd_chain", N=N, H=H, W=W, CI=CI, CO=CO)
    stages = epilogue_stages(epilogue, "winograd_chain")
    data = ir.placeholder((N, H, W, CI), dtype, name="data")
    weight = ir.placeholder(((tile + 2) ** 2, CI, CO), dtype, name="weight", constant=weight_constant)
    extra, out = apply_epilogue(winograd.conv2d_winograd(data, weight, padding, tile=tile), stages, weight_constant)
    return [data, weight, *extra, out]


def _depthwise_chain_reference(ins, p):
    out = ref.depthwise_conv(ins[0], ins[1], as_tuple(p.stride, 2, "stride"), as_tuple(p.padding, 2, "padding", 0),
                             (1, 1), True)
    return [epilogue_reference(out, epilogue_stages(p.epilogue, ""), ins[2:])]


@operator("depthwise_chain", reference=_depthwise_chain_reference,
          flops=lambda ts, p: 2 * numel(ts[-1].shape) * math.prod(as_tuple(p.kernel, 2, "k")) + _epilogue_flops(ts, p))
def depthwise_chain_workload(N, H, W, C, kernel, stride=1, padding=0, epilogue="bias", weight_constant=True,
                             dtype="float32"):
    """A network's depthwise convolution task (NHWC, multiplier 1), then ``epilogue``."""
    check_dims("depthwise_chain", N=N, H=H, W=W, C=C)
    kernel = as_tuple(kernel, 2, "depthwise_chain: kernel")
    stages = epilogue_stages(epilogue, "depthwise_chain")
    data = ir.placeholder((N, H, W, C), dtype, name="data")
    weight = ir.placeholder((*kernel, C, 1), dtype, name="weight", constant=weight_constant)
    extra, out = apply_epilogue(depthwise_conv2d(data, weight, stride, padding, 1, "NHWC"), stages, weight_constant)
    return [data, weight, *extra, out]


#: squeeze-excitation gates: the function, its numpy reference
_GATES = {"hard_sigmoid": (lambda t: hard_sigmoid(t, 1.0 / 6.0, 0.5), lambda v: ref.hard_sigmoid(v, 1.0 / 6.0, 0.5)),
          "sigmoid": (sigmoid, ref.sigmoid)}


def _se_gate_reference(ins, p):
    squeezed, weight, bias, features = ins
    gate = _GATES[p.gate][1](np.einsum("c,cd->d", squeezed.reshape(-1).astype(np.float64),
                                       weight.reshape(weight.shape[-2:])) + bias)
    return [features * gate]


@operator("se_gate", reference=_se_gate_reference,
          flops=lambda ts, p: 2 * p.C_reduced * p.C + 4 * p.C + numel(ts[-1].shape))
def se_gate_workload(H, W, C_reduced, C, gate="hard_sigmoid", weight_constant=True, dtype="float32"):
    """Squeeze-excitation's last task: the expanding 1x1 convolution of the squeezed
    (1, 1, 1, C_reduced) vector, its bias, the ``gate`` ("hard_sigmoid": MobileNet-V3;
    "sigmoid": EfficientNet), times the (1, H, W, C) feature map."""
    check_dims("se_gate", H=H, W=W, C_reduced=C_reduced, C=C)
    if gate not in _GATES:
        raise ValueError(f"se_gate: unknown gate {gate!r}; expected one of {', '.join(_GATES)}")
    squeezed = ir.placeholder((1, 1, 1, C_reduced), dtype, name="squeezed")
    weight = ir.placeholder((1, 1, C_reduced, C), dtype, name="weight", constant=weight_constant)
    bias = ir.placeholder((C,), dtype, name="bias", constant=weight_constant)
    features = ir.placeholder((1, H, W, C), dtype, name="features")
    g = _GATES[gate][0](bias_add(conv(squeezed, weight, 1, 0, 1, 1, "NHWC"), bias))
    return [squeezed, weight, bias, features, multiply(g, features)]
