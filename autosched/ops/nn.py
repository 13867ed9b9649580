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

import numpy as np

import ir
from ir.tensor import as_int

from . import reference as ref
from .common import (as_tuple, attr_tuple, check_dims, check_positive, check_shape, data_layout, node_layout,
                     node_pads, numel, pad, parse_layout, reduce_axes, scaled, sliding, window)
from .reference import f64
from .registry import BROADCAST, REDUCE, node_kind, operator, uniform


def _rows(x, what: str):
    if x.ndim < 2:
        raise ValueError(f"{what}: expected at least 2 dimensions (rows..., last axis), got shape {x.shape}; "
                         "reshape a vector to (1, n)")
    return x.shape[:-1], x.shape[-1]


def _axis(x, axis: int, what: str) -> int:
    ax = axis + x.ndim if axis < 0 else axis
    if not 0 <= ax < x.ndim:
        raise ValueError(f"{what}: axis {axis} is out of range for data of shape {x.shape}")
    return ax


def _with(index, ax: int, value) -> tuple:
    """``index`` (without axis ``ax``) with ``value`` inserted at position ``ax``."""
    return (*index[:ax], value, *index[ax:])


def _without(index, ax: int) -> tuple:
    return (*index[:ax], *index[ax + 1:])


def _softmax_parts(x, axis: int, name: str):
    """The row maximum and the stage of ``exp(x − max)`` along ``axis`` (default the last)."""
    ax = _axis(x, axis, name)
    if x.ndim < 2:
        raise ValueError(f"{name}: expected at least 2 dimensions (rows..., last axis), got shape {x.shape}; "
                         "reshape a vector to (1, n)")
    outer, n = _without(x.shape, ax), x.shape[ax]
    k1 = ir.reduce_axis(n, "k")
    mx = ir.compute(outer, lambda *i: ir.max(x[_with(i, ax, k1)], axis=k1), name=f"{name}_maxelem",
                    tag="comm_reduce")
    return ax, outer, n, mx


def softmax(x, name: str = "softmax", axis: int = -1):
    """Softmax along ``axis`` (the last by default), numerically stable: exp(x − max) / Σ exp(x − max)."""
    ax, outer, n, mx = _softmax_parts(x, axis, name)
    k2 = ir.reduce_axis(n, "k")
    e = ir.compute(x.shape, lambda *i: ir.exp(x[i] - mx[_without(i, ax)]), name=f"{name}_exp", tag="broadcast")
    s = ir.compute(outer, lambda *i: ir.sum(e[_with(i, ax, k2)], axis=k2), name=f"{name}_expsum", tag="comm_reduce")
    return ir.compute(x.shape, lambda *i: e[i] / s[_without(i, ax)], name=name, tag="softmax_output")


def log_softmax(x, name: str = "log_softmax", axis: int = -1):
    """``x − max − log Σ exp(x − max)`` along ``axis``."""
    ax, outer, n, mx = _softmax_parts(x, axis, name)
    k2 = ir.reduce_axis(n, "k")
    s = ir.compute(outer, lambda *i: ir.sum(ir.exp(x[_with(i, ax, k2)] - mx[i]), axis=k2), name=f"{name}_expsum",
                   tag="comm_reduce")
    return ir.compute(x.shape, lambda *i: x[i] - mx[_without(i, ax)] - ir.log(s[_without(i, ax)]), name=name,
                      tag="log_softmax_output")


def reduce(x, axes, reducer: str = "sum", keepdims: bool = True, name=None):
    """Sum, mean, max or min over ``axes``; they stay with extent 1 when ``keepdims``."""
    if reducer not in ("sum", "mean", "max", "min"):
        raise ValueError(f"reduce: unknown reducer {reducer!r}; expected 'sum', 'mean', 'max' or 'min'")
    what = name or f"reduce_{reducer}"
    axes = sorted({_axis(x, a, what) for a in axes})
    if not axes:
        raise ValueError(f"{what}: no axis to reduce over")
    kept = [a for a in range(x.ndim) if a not in axes]
    if not kept and not keepdims:
        raise ValueError(f"{what}: reducing every axis of {x.shape} without keepdims leaves a scalar; keep one axis")
    shape = tuple(1 if a in axes else x.shape[a] for a in range(x.ndim)) if keepdims else tuple(x.shape[a] for a in kept)
    rk = [ir.reduce_axis(x.shape[a], f"r{a}") for a in axes]

    def source(*i):
        src, out = [], list(i) if not keepdims else [i[a] for a in kept]
        for a in range(x.ndim):
            src.append(rk[axes.index(a)] if a in axes else out.pop(0))
        return x[tuple(src)]

    combine = {"sum": ir.sum, "mean": ir.sum, "max": ir.max, "min": ir.min}[reducer]
    if reducer != "mean":
        return ir.compute(shape, lambda *i: combine(source(*i), axis=rk), name=what, tag="comm_reduce")
    total = ir.compute(shape, lambda *i: ir.sum(source(*i), axis=rk), name=f"{what}_sum", tag="comm_reduce")
    inv = 1.0 / numel(x.shape[a] for a in axes)
    return ir.compute(shape, lambda *i: total[i] * inv, name=what, tag="elemwise")


def lrn(x, size: int, alpha: float = 1e-4, beta: float = 0.75, bias: float = 1.0, axis: int = -1,
        name: str = "lrn"):
    """Local response normalisation across channels (ONNX's LRN): ``x / (bias + alpha/size ·
    Σ x²)^beta``, the sum over the ``size`` neighbouring channels along ``axis`` (zero-padded)."""
    ax = _axis(x, axis, name)
    check_positive(f"{name}: size", size)
    before = [0] * x.ndim
    after = [0] * x.ndim
    before[ax], after[ax] = (size - 1) // 2, size // 2
    padded = pad(x, before, after, 0.0, f"{name}_pad")
    r = ir.reduce_axis(size, "rc")

    def square_sum(*i):
        v = padded[_with(_without(i, ax), ax, i[ax] + r)]
        return ir.sum(v * v, axis=r)

    sq = ir.compute(x.shape, square_sum, name=f"{name}_square_sum", tag="comm_reduce")
    scale = float(alpha) / size

    def normalise(*i):
        base = sq[i] * scale + float(bias)
        denom = base if beta == 1 else ir.pow(base, ir.const(float(beta), x.dtype))
        return x[i] / denom

    return ir.compute(x.shape, normalise, name=name, tag="broadcast")


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


def pool(data, kernel, stride=1, padding=0, pool_type: str = "max", layout: str = "NHWC", name=None,
         pad_after=None, ceil_mode: bool = False, count_include_pad: bool = False, dilation=1):
    """Max or average pooling over 1 to 3 spatial dimensions. ``padding`` before each spatial
    axis, ``pad_after`` (default: the same) after it; ``ceil_mode`` keeps a last partial
    window. Averages divide by the in-bounds samples, or with ``count_include_pad`` by the
    samples inside the explicit padding too (never the ceil-mode overhang), as ONNX does."""
    if pool_type not in ("max", "avg"):
        raise ValueError(f"pool: unknown pool_type {pool_type!r}; expected 'max' or 'avg'")
    what = name or f"pool_{pool_type}"
    lay = data_layout(data, layout, what)
    kernel = as_tuple(kernel, lay.spatial_dims, f"{what}: kernel")
    fill = ir.min_value(data.dtype) if pool_type == "max" else 0
    win = sliding(data, kernel, stride, padding, dilation, layout, what, pad_value=fill, pad_after=pad_after,
                  ceil_mode=ceil_mode)
    if any(p >= k for p, k in zip(win.padding + win.pad_after, kernel + kernel)):
        pads = win.padding if win.pad_after == win.padding else f"{win.padding} before, {win.pad_after} after"
        raise ValueError(f"{what}: padding {pads} must be smaller than the kernel {kernel}, "
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
        count = 1  # the samples of the window that count, per dimension
        for o, k, s, p, a, size, d, n_out in zip(lay.unpack(i)[2], kernel, win.stride, win.padding, win.pad_after,
                                                 win.in_spatial, win.dilation, win.out_spatial):
            lo, hi = (-p, size + a) if count_include_pad else (0, size)
            crosses_lo = -p < lo
            crosses_hi = (n_out - 1) * s - p + d * (k - 1) + 1 > hi
            if not crosses_lo and not crosses_hi:
                count = count * k
            else:
                count = count * _window_count(scaled(o, s) - p, k, d, lo, hi)
        return total[i] / ir.cast(count, data.dtype)

    return ir.compute(shape, average, name=what, tag="pool_avg")


def _window_count(start, k: int, d: int, lo: int, hi: int):
    """How many of the window's samples ``start + j·d`` (j < k) lie in ``[lo, hi)``."""
    if d == 1:
        return ir.min(start + k, hi) - ir.max(start, lo)
    first = ir.max((lo - start + (d - 1)) // d, 0)
    last = ir.min((hi - 1 - start) // d, k - 1)
    return last - first + 1


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


# graph node kinds (channel-last data) ----------------------------------------------------

def _pool_node_reference(x, a):
    sd = x[0].ndim - 2
    before, after = node_pads(a, sd)
    return ref.pool(x[0], attr_tuple(a["kernel"], sd), attr_tuple(a["stride"], sd), before, a["pool_type"], True,
                    pad_after=after, ceil_mode=a.get("ceil_mode", False),
                    count_include_pad=a.get("count_include_pad", False), dilation=attr_tuple(a.get("dilation", 1), sd))


node_kind("batch_norm", BROADCAST,
          lambda t, a, name: batch_norm(*t, eps=a.get("eps", 1e-5), axis=a.get("axis", -1), name=name),
          lambda x, a: ref.batch_norm(*x, a.get("eps", 1e-5), a.get("axis", -1)), 5)
node_kind("pool", REDUCE,
          lambda t, a, name: pool(t[0], a["kernel"], a["stride"], a["padding"], a["pool_type"], node_layout(t[0].ndim),
                                  name=name, pad_after=a.get("pad_after"), ceil_mode=a.get("ceil_mode", False),
                                  count_include_pad=a.get("count_include_pad", False),
                                  dilation=a.get("dilation", 1)),
          _pool_node_reference, 1)
node_kind("global_pool", REDUCE,
          lambda t, a, name: global_pool(t[0], a["pool_type"], node_layout(t[0].ndim), name=name),
          lambda x, a: ref.global_pool(x[0], a["pool_type"], True), 1)
node_kind("softmax", REDUCE, lambda t, a, name: softmax(t[0], name, a.get("axis", -1)),
          lambda x, a: ref.softmax(x[0], a.get("axis", -1)), 1)
node_kind("log_softmax", REDUCE, lambda t, a, name: log_softmax(t[0], name, a.get("axis", -1)),
          lambda x, a: ref.log_softmax(x[0], a.get("axis", -1)), 1)
node_kind("layer_norm", REDUCE, lambda t, a, name: layer_norm(t[0], t[1], t[2], a.get("eps", 1e-5), name),
          lambda x, a: ref.layer_norm(x[0], x[1], x[2], a.get("eps", 1e-5)), 3)
node_kind("reduce", REDUCE, lambda t, a, name: reduce(t[0], a["axes"], a["reducer"], a["keepdims"], name),
          lambda x, a: getattr(np, a["reducer"])(f64(x[0]), axis=tuple(a["axes"]), keepdims=a["keepdims"]), 1)
node_kind("lrn", REDUCE,
          lambda t, a, name: lrn(t[0], a["size"], a["alpha"], a["beta"], a["bias"], a.get("axis", -1), name),
          lambda x, a: ref.lrn(x[0], a["size"], a["alpha"], a["beta"], a["bias"], a.get("axis", -1)), 1)
