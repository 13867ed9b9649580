"""Neural-network layers built of reductions: softmax, layer and batch norm, pooling.

Each is written as the separate stages a kernel needs (a reduction must be the whole body
of a compute): softmax is max, exp, sum and divide, so that the sketch rules see the
reductions and can fuse or rfactor them. Flops are the conventional counts, with
per-row or per-channel quantities counted once per row or channel:
softmax 5 per element; layer_norm 8 per element + 4 per row; batch_norm 3 per element
+ 3 per channel; max pooling one per window element, average pooling one more per output.
Average pooling divides by the number of in-bounds samples (padding excluded, TVM's
``count_include_pad=False``).
"""
from __future__ import annotations

import math

import ir
from ir.tensor import as_int

from . import reference as ref
from .common import (as_tuple, check_dims, check_shape, data_layout, numel, parse_layout, reduce_axes,
                     scaled, sliding, window)
from .registry import operator, uniform


def _rows(x, what: str):
    if x.ndim < 2:
        raise ValueError(f"{what}: expected at least 2 dimensions (rows..., last axis), got shape {x.shape}; "
                         "reshape a vector to (1, n)")
    return x.shape[:-1], x.shape[-1]


def softmax(x, name: str = "softmax"):
    """Softmax over the last axis, numerically stable: exp(x − max) / Σ exp(x − max)."""
    outer, n = _rows(x, name)
    k1, k2 = ir.reduce_axis(n, "k"), ir.reduce_axis(n, "k")
    mx = ir.compute(outer, lambda *i: ir.max(x[(*i, k1)], axis=k1), name=f"{name}_maxelem", tag="comm_reduce")
    e = ir.compute(x.shape, lambda *i: ir.exp(x[i] - mx[i[:-1]]), name=f"{name}_exp", tag="broadcast")
    s = ir.compute(outer, lambda *i: ir.sum(e[(*i, k2)], axis=k2), name=f"{name}_expsum", tag="comm_reduce")
    return ir.compute(x.shape, lambda *i: e[i] / s[i[:-1]], name=name, tag="softmax_output")


def layer_norm(x, gamma, beta, eps: float = 1e-5, name: str = "layer_norm"):
    """(x − mean) / sqrt(var + eps) · gamma + beta over the last axis (two-pass variance)."""
    outer, n = _rows(x, name)
    if gamma.shape != (n,) or beta.shape != (n,):
        raise ValueError(f"{name}: gamma {gamma.shape} and beta {beta.shape} must both have shape ({n},), "
                         f"the last axis of x {x.shape}")
    inv_n = 1.0 / n
    k1, k2 = ir.reduce_axis(n, "k"), ir.reduce_axis(n, "k")
    s = ir.compute(outer, lambda *i: ir.sum(x[(*i, k1)], axis=k1), name=f"{name}_sum", tag="comm_reduce")

    def var_sum(*i):
        d = x[(*i, k2)] - s[i] * inv_n
        return ir.sum(d * d, axis=k2)

    v = ir.compute(outer, var_sum, name=f"{name}_var_sum", tag="comm_reduce")

    def normalise(*i):
        r, c = i[:-1], i[-1]
        return (x[i] - s[r] * inv_n) * ir.rsqrt(v[r] * inv_n + eps) * gamma[c] + beta[c]

    return ir.compute(x.shape, normalise, name=name, tag="broadcast")


def batch_norm(x, gamma, beta, mean, var, eps: float = 1e-5, axis: int = -1, name: str = "batch_norm"):
    """Inference batch norm along the channel ``axis``: (x − mean)·gamma/sqrt(var + eps) + beta."""
    ax = axis + x.ndim if axis < 0 else axis
    if not 0 <= ax < x.ndim:
        raise ValueError(f"{name}: axis {axis} is out of range for data of shape {x.shape}")
    for label, v in (("gamma", gamma), ("beta", beta), ("mean", mean), ("var", var)):
        if v.shape != (x.shape[ax],):
            raise ValueError(f"{name}: {label} has shape {v.shape}, expected ({x.shape[ax]},) "
                             f"for axis {axis} of data {x.shape}")

    def body(*i):
        c = i[ax]
        return (x[i] - mean[c]) * (gamma[c] * ir.rsqrt(var[c] + eps)) + beta[c]

    return ir.compute(x.shape, body, name=name, tag="broadcast")


def pool(data, kernel, stride=1, padding=0, pool_type: str = "max", layout: str = "NHWC", name=None):
    """Max or average pooling over 1 to 3 spatial dimensions; padding excluded from averages."""
    if pool_type not in ("max", "avg"):
        raise ValueError(f"pool: unknown pool_type {pool_type!r}; expected 'max' or 'avg'")
    what = name or f"pool_{pool_type}"
    lay = data_layout(data, layout, what)
    kernel = as_tuple(kernel, lay.spatial_dims, f"{what}: kernel")
    fill = ir.min_value(data.dtype) if pool_type == "max" else 0
    win = sliding(data, kernel, stride, padding, 1, layout, what, pad_value=fill)
    if any(p >= k for p, k in zip(win.padding, kernel)):
        raise ValueError(f"{what}: padding {win.padding} must be smaller than the kernel {kernel}, "
                         "or some windows would hold padding only")
    rk = reduce_axes(kernel, lay)
    shape = lay.shape(win.batch, win.channels, win.out_spatial)

    def read_window(idx):
        n, c, sp = lay.unpack(idx)
        return win.padded[lay.index(n, c, window(sp, rk, win.stride, win.dilation))]

    if pool_type == "max":
        return ir.compute(shape, lambda *i: ir.max(read_window(i), axis=rk), name=what, tag="pool_max")
    total = ir.compute(shape, lambda *i: ir.sum(read_window(i), axis=rk), name=f"{what}_sum", tag="pool_sum")

    def average(*i):
        count = 1  # in-bounds samples of the window, per dimension
        for o, k, s, p, size in zip(lay.unpack(i)[2], kernel, win.stride, win.padding, win.in_spatial):
            start = scaled(o, s) - p
            count = count * (ir.min(start + k, size) - ir.max(start, 0) if p else k)
        return total[i] / ir.cast(count, data.dtype)

    return ir.compute(shape, average, name=what, tag="pool_avg")


def global_pool(data, pool_type: str = "avg", layout: str = "NHWC", name=None):
    """Max or mean over all spatial positions; the spatial axes stay, with extent 1."""
    if pool_type not in ("max", "avg"):
        raise ValueError(f"global_pool: unknown pool_type {pool_type!r}; expected 'max' or 'avg'")
    what = name or f"global_pool_{pool_type}"
    lay = data_layout(data, layout, what)
    n, c, sp = lay.unpack(data.shape)
    rk = reduce_axes(sp, lay)
    shape = lay.shape(n, c, (1,) * len(sp))

    def read(idx):
        n_, c_, _ = lay.unpack(idx)
        return data[lay.index(n_, c_, rk)]

    if pool_type == "max":
        return ir.compute(shape, lambda *i: ir.max(read(i), axis=rk), name=what, tag="global_pool_max")
    total = ir.compute(shape, lambda *i: ir.sum(read(i), axis=rk), name=f"{what}_sum", tag="global_pool_sum")
    return ir.compute(shape, lambda *i: total[i] * (1.0 / numel(sp)), name=what, tag="global_pool_avg")


# workloads -----------------------------------------------------------------------------

@operator("softmax", reference=lambda ins, p: [ref.softmax(ins[0])],
          flops=lambda ts, p: 5 * numel(ts[-1].shape))
def softmax_workload(shape, dtype="float32"):
    """Softmax over the last axis of a tensor of ``shape`` (2 or more dimensions)."""
    x = ir.placeholder(check_shape(shape, "softmax: shape"), dtype, name="x")
    return [x, softmax(x)]


@operator("layer_norm", reference=lambda ins, p: [ref.layer_norm(*ins, p.eps)],
          flops=lambda ts, p: 8 * numel(ts[0].shape) + 4 * numel(ts[0].shape[:-1]))
def layer_norm_workload(shape, eps=1e-5, dtype="float32"):
    """Layer norm over the last axis of ``shape``, with gamma and beta (weights)."""
    shape = check_shape(shape, "layer_norm: shape")
    x = ir.placeholder(shape, dtype, name="x")
    gamma = ir.placeholder(shape[-1:], dtype, name="gamma", constant=True)
    beta = ir.placeholder(shape[-1:], dtype, name="beta", constant=True)
    return [x, gamma, beta, layer_norm(x, gamma, beta, eps)]


@operator("batch_norm",
          reference=lambda ins, p: [ref.batch_norm(*ins, p.eps, 1 if p.layout == "NCHW" else -1)],
          flops=lambda ts, p: 3 * numel(ts[0].shape) + 3 * p.C, inputs={"var": uniform(0.5, 2.0)})
def batch_norm_workload(N, H, W, C, eps=1e-5, layout="NHWC", dtype="float32"):
    """Inference batch norm of NHWC (or NCHW) data with per-channel gamma, beta, mean, var."""
    lay = parse_layout(layout, 2, "batch_norm")
    check_dims("batch_norm", N=N, H=H, W=W, C=C)
    x = ir.placeholder(lay.shape(N, C, (H, W)), dtype, name="x")
    params = [ir.placeholder((C,), dtype, name=n, constant=True) for n in ("gamma", "beta", "mean", "var")]
    return [x, *params, batch_norm(x, *params, eps=eps, axis=lay.channel_axis)]


def _register_pool(pool_type: str) -> None:
    name = f"{pool_type}_pool2d"

    def build(N, H, W, C, kernel, stride=1, padding=0, layout="NHWC", dtype="float32"):
        lay = parse_layout(layout, 2, name)
        check_dims(name, N=N, H=H, W=W, C=C)
        x = ir.placeholder(lay.shape(N, C, (H, W)), dtype, name="data")
        return [x, pool(x, kernel, stride, padding, pool_type, layout)]

    def reference(ins, p):
        t = lambda v: (v, v) if as_int(v) is not None else tuple(v)  # noqa: E731
        return [ref.pool(ins[0], t(p.kernel), t(p.stride), t(p.padding), pool_type, p.layout == "NHWC")]

    def flops(ts, p):
        window_size = math.prod((p.kernel, p.kernel) if as_int(p.kernel) is not None else p.kernel)
        return numel(ts[-1].shape) * (window_size + (pool_type == "avg"))

    build.__name__ = build.__qualname__ = f"{name}_workload"
    build.__doc__ = f"{pool_type} pooling of NHWC (or NCHW) data; padding is excluded from averages."
    operator(name, reference=reference, flops=flops)(build)


def _register_global_pool(pool_type: str) -> None:
    name = f"global_{pool_type}_pool2d"

    def build(N, H, W, C, layout="NHWC", dtype="float32"):
        lay = parse_layout(layout, 2, name)
        check_dims(name, N=N, H=H, W=W, C=C)
        x = ir.placeholder(lay.shape(N, C, (H, W)), dtype, name="data")
        return [x, global_pool(x, pool_type, layout)]

    build.__name__ = build.__qualname__ = f"{name}_workload"
    build.__doc__ = f"global {pool_type} pooling of NHWC (or NCHW) data to (N, 1, 1, C) (or (N, C, 1, 1))."
    operator(name, reference=lambda ins, p: [ref.global_pool(ins[0], pool_type, p.layout == "NHWC")],
             flops=lambda ts, p: numel(ts[0].shape) + (pool_type == "avg") * p.N * p.C)(build)


for _t in ("max", "avg"):
    _register_pool(_t)
    _register_global_pool(_t)
