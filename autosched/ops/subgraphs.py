"""The paper's subgraph benchmarks: ConvLayer (conv + bias + batch norm + ReLU) and TBS;
and the residual block's tail that ResNets fuse (conv + bias + shortcut + ReLU).

They exist to test fusion: the elementwise tail of ConvLayer must be inlined into or
computed at the convolution, and TBS's transposes into the batch matmul, which softmax
follows. Stages are named after Ansor's artifact (bias_add, bn_mul, bn_add, relu; query_T,
key_T). Flops add the parts: conv + 4 (residual: 3) per output element; batch matmul +
softmax's 5.
"""
from __future__ import annotations

import math

import ir

from . import reference as ref
from .common import as_tuple, check_dims, numel, out_size, parse_layout
from .conv import conv
from .elementwise import add, channelwise, relu
from .linalg import batch_matmul
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
