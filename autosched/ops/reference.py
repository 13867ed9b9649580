"""Numpy references of the operators, written independently of the tensor expressions.

They are the oracle that generated code is checked against, so they favour the obvious
formulation (np.pad, one einsum per kernel offset, float64) over speed. Window operators
work in channel-last order internally; channel-first data is moved there and back.
"""
from __future__ import annotations

import functools
import itertools
import math

import numpy as np



@functools.cache
def _erf_function():
    """scipy's erf where installed (imported on first use: it costs every process that
    imports autosched, measurement workers included, 0.4 s); math.erf elementwise, exact
    but slower, without it."""
    try:
        from scipy.special import erf
    except ImportError:
        return np.vectorize(math.erf, otypes=[np.float64])
    return erf


def _erf(x):
    return _erf_function()(x)

F64 = np.float64


def f64(x) -> np.ndarray:
    return np.asarray(x, F64)


def to_channel_last(x: np.ndarray, channel_last: bool) -> np.ndarray:
    return np.asarray(x, F64) if channel_last else np.moveaxis(np.asarray(x, F64), 1, -1)


def from_channel_last(x: np.ndarray, channel_last: bool) -> np.ndarray:
    return x if channel_last else np.moveaxis(x, -1, 1)


def _pad_spatial(x: np.ndarray, padding, value=0.0, pad_after=None) -> np.ndarray:
    """Pad the spatial axes (all but the first and the last) of channel-last data."""
    after = padding if pad_after is None else pad_after
    widths = [(0, 0)] + [(p, a) for p, a in zip(padding, after)] + [(0, 0)] * (x.ndim - 1 - len(padding))
    return np.pad(x, widths, constant_values=value)


def _patches(xp: np.ndarray, kernel, stride, dilation, out_sp):
    """Yield ``(offset, patch)`` per kernel offset: the input samples each output reads."""
    for offs in itertools.product(*(range(k) for k in kernel)):
        sl = tuple(slice(o * d, o * d + s * (n - 1) + 1, s)
                   for o, d, s, n in zip(offs, dilation, stride, out_sp))
        yield offs, xp[(slice(None),) + sl]


def _out_spatial(xp_spatial, kernel, stride, dilation):
    return [(n - d * (k - 1) - 1) // s + 1 for n, k, s, d in zip(xp_spatial, kernel, stride, dilation)]


# linear algebra ------------------------------------------------------------------------

def matmul(a, b, transpose_a=False, transpose_b=False):
    a, b = np.asarray(a, F64), np.asarray(b, F64)
    if transpose_a:
        a = np.swapaxes(a, -1, -2)
    if transpose_b:
        b = np.swapaxes(b, -1, -2)
    return np.matmul(a, b)


def dense(x, w, bias=None):
    y = np.asarray(x, F64) @ np.asarray(w, F64).T
    return y if bias is None else y + bias


def norm(a):
    a = np.asarray(a, F64)
    return np.sqrt(np.sum(a * a, axis=tuple(range(1, a.ndim))))


# convolutions --------------------------------------------------------------------------

def conv(x, w, stride, padding, dilation, groups, channel_last, pad_after=None):
    """Grouped N-d convolution; weight (*K, CI/groups, CO) channel-last, (CO, CI/groups, *K) else."""
    x = to_channel_last(x, channel_last)
    w = np.asarray(w, F64) if channel_last else np.moveaxis(np.asarray(w, F64), (0, 1), (-1, -2))
    sd = x.ndim - 2
    kernel, (cig, co) = w.shape[:sd], w.shape[sd:]
    xp = _pad_spatial(x, padding, pad_after=pad_after)
    out_sp = _out_spatial(xp.shape[1:-1], kernel, stride, dilation)
    wg = w.reshape(*kernel, cig, groups, co // groups)
    out = np.zeros((x.shape[0], *out_sp, groups, co // groups))
    for offs, patch in _patches(xp, kernel, stride, dilation, out_sp):
        patch = patch.reshape(*patch.shape[:-1], groups, cig)
        out += np.einsum("...gc,cgo->...go", patch, wg[offs])
    return from_channel_last(out.reshape(*out.shape[:-2], co), channel_last)


def depthwise_conv(x, w, stride, padding, dilation, channel_last, pad_after=None):
    """Weight (*K, C, multiplier) channel-last, (C, multiplier, *K) else; out channel c*m + q."""
    x = to_channel_last(x, channel_last)
    w = np.asarray(w, F64) if channel_last else np.moveaxis(np.asarray(w, F64), (0, 1), (-2, -1))
    sd = x.ndim - 2
    kernel, (c, m) = w.shape[:sd], w.shape[sd:]
    xp = _pad_spatial(x, padding, pad_after=pad_after)
    out_sp = _out_spatial(xp.shape[1:-1], kernel, stride, dilation)
    out = np.zeros((x.shape[0], *out_sp, c, m))
    for offs, patch in _patches(xp, kernel, stride, dilation, out_sp):
        out += patch[..., None] * w[offs]
    return from_channel_last(out.reshape(*out.shape[:-2], c * m), channel_last)


def conv_transpose(x, w, stride, padding, channel_last, pad_after=None, output_padding=None):
    """Scatter form: input pixel i adds x[i]·w[r] to output i·stride + r − padding; the
    output is cropped by ``pad_after`` at the end and extended by ``output_padding`` zeros.
    Weight (*K, CI, CO) channel-last, (CI, CO, *K) channel-first (TVM's)."""
    x = to_channel_last(x, channel_last)
    w = np.asarray(w, F64) if channel_last else np.moveaxis(np.asarray(w, F64), (0, 1), (-2, -1))
    sd = x.ndim - 2
    kernel, in_sp = w.shape[:sd], x.shape[1:-1]
    full = np.zeros((x.shape[0], *[(n - 1) * s + k for n, s, k in zip(in_sp, stride, kernel)], w.shape[-1]))
    for offs in itertools.product(*(range(k) for k in kernel)):
        sl = tuple(slice(o, o + (n - 1) * s + 1, s) for o, n, s in zip(offs, in_sp, stride))
        full[(slice(None),) + sl] += np.einsum("...c,co->...o", x, w[offs])
    after = padding if pad_after is None else pad_after
    extra = [0] * sd if output_padding is None else output_padding
    full = np.pad(full, [(0, 0)] + [(0, e) for e in extra] + [(0, 0)])
    crop = tuple(slice(p, n - a) for p, a, n in zip(padding, after, full.shape[1:-1]))
    return from_channel_last(full[(slice(None),) + crop], channel_last)


def capsule_conv2d(x, w, stride, padding):
    """x (N, H, W, cap, cap, CI), w (k, k, cap, cap, CI, CO) -> (N, H', W', cap, cap, CO)."""
    x, w = np.asarray(x, F64), np.asarray(w, F64)
    xp = _pad_spatial(x, padding)
    kernel = w.shape[:2]
    out_sp = _out_spatial(xp.shape[1:3], kernel, stride, (1, 1))
    out = np.zeros((x.shape[0], *out_sp, x.shape[3], w.shape[3], w.shape[5]))
    for offs, patch in _patches(xp, kernel, stride, (1, 1), out_sp):
        out += np.einsum("nhwikc,kjco->nhwijo", patch, w[offs])
    return out


# pooling and normalisation -------------------------------------------------------------

def _outer_and(masks):
    """The n-d mask that holds where every per-axis 1-d mask holds."""
    out = np.ones([len(m) for m in masks], bool)
    for k, m in enumerate(masks):
        out &= m.reshape([-1 if a == k else 1 for a in range(len(masks))])
    return out


def pool(x, kernel, stride, padding, pool_type, channel_last, pad_after=None, ceil_mode=False,
         count_include_pad=False, dilation=None):
    """Max or average pooling of every window (explicit loops over the output positions);
    averages over the in-bounds samples, or also the explicit padding with ``count_include_pad``.
    In ``ceil_mode`` a last window that starts inside the input or its leading padding counts."""
    x = to_channel_last(x, channel_last)
    sd = x.ndim - 2
    after = padding if pad_after is None else pad_after
    dilation = (1,) * sd if dilation is None else dilation
    in_sp = x.shape[1:-1]
    out_sp = []
    for n, k, s, p, a, d in zip(in_sp, kernel, stride, padding, after, dilation):
        span = n + p + a - d * (k - 1) - 1
        o = (-(-span // s) if ceil_mode else span // s) + 1
        out_sp.append(o - 1 if ceil_mode and (o - 1) * s >= n + p else o)
    best = np.full((x.shape[0], *out_sp, x.shape[-1]), -np.inf)
    total = np.zeros_like(best)
    counted = np.zeros(out_sp)
    for offs in itertools.product(*(range(k) for k in kernel)):
        coords = [np.arange(o) * s - p + r * d for o, s, p, r, d in zip(out_sp, stride, padding, offs, dilation)]
        inside = [(c >= 0) & (c < n) for c, n in zip(coords, in_sp)]
        in_pads = [(c >= -p) & (c < n + a) for c, n, p, a in zip(coords, in_sp, padding, after)]
        valid = _outer_and(inside)
        sample = x[(slice(None), *np.ix_(*[np.clip(c, 0, n - 1) for c, n in zip(coords, in_sp)]))]
        best = np.where(valid[None, ..., None], np.maximum(best, sample), best)
        total += np.where(valid[None, ..., None], sample, 0.0)
        counted += _outer_and(in_pads if count_include_pad else inside)
    out = best if pool_type == "max" else total / counted[None, ..., None]
    return from_channel_last(out, channel_last)


def global_pool(x, pool_type, channel_last):
    x = to_channel_last(x, channel_last)
    axes = tuple(range(1, x.ndim - 1))
    out = x.max(axis=axes, keepdims=True) if pool_type == "max" else x.mean(axis=axes, keepdims=True)
    return from_channel_last(out, channel_last)


def softmax(x, axis=-1):
    x = np.asarray(x, F64)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def log_softmax(x, axis=-1):
    x = np.asarray(x, F64)
    shifted = x - x.max(axis=axis, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))


def lrn(x, size, alpha, beta, bias, axis=-1):
    """Each element divided by (bias + alpha/size · the sum of squares of its channel window)^beta."""
    x = np.moveaxis(np.asarray(x, F64), axis, -1)
    c = x.shape[-1]
    sq = np.zeros_like(x)
    for ch in range(c):
        lo, hi = max(0, ch - (size - 1) // 2), min(c - 1, ch + size // 2)
        sq[..., ch] = np.sum(x[..., lo:hi + 1] ** 2, axis=-1)
    return np.moveaxis(x / (bias + alpha / size * sq) ** beta, -1, axis)


def layer_norm(x, gamma, beta, eps):
    x = np.asarray(x, F64)
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def along_axis(v, ndim: int, axis: int):
    """A per-channel vector shaped to broadcast against ``ndim``-d data at ``axis``."""
    shape = [1] * ndim
    shape[axis] = -1
    return np.asarray(v, F64).reshape(shape)


def batch_norm(x, gamma, beta, mean, var, eps, axis):
    x = np.asarray(x, F64)
    g, b, m, v = (along_axis(a, x.ndim, axis) for a in (gamma, beta, mean, var))
    return (x - m) / np.sqrt(v + eps) * g + b


# data movement -------------------------------------------------------------------------

def gather(data, indices, axis):
    """numpy.take with negative indices counted from the end; one out of range raises
    IndexError (as the kernel and onnxruntime do)."""
    n = data.shape[axis]
    idx = np.asarray(indices, np.int64)
    idx = np.where(idx < 0, idx + n, idx)
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        raise IndexError(f"gather: an index outside [-{n}, {n}) for an axis of extent {n}")
    return np.take(np.asarray(data, F64), idx, axis=axis)


def strided_slice(x, begin, step, shape):
    """The elements at ``begin + i·step`` along every axis."""
    index = [b + s * np.arange(n) for b, s, n in zip(begin, step, shape)]
    return np.asarray(x, F64)[np.ix_(*index)]


def _resize_coordinates(o, n, m, s, mode):
    """ONNX Resize's coordinate transformations, in float32 as onnxruntime computes them."""
    o, s = o.astype(np.float32), np.float32(s)
    half = np.float32(0.5)
    if mode == "half_pixel":
        return (o + half) / s - half
    if mode == "half_pixel_symmetric":
        adj = np.float32(m / (s * n))
        return np.float32(n / 2) * (1 - adj) + (o + half) / s - half
    if mode == "pytorch_half_pixel":
        return (o + half) / s - half if m > 1 else np.zeros_like(o)
    if mode == "align_corners":
        return o * np.float32((n - 1) / (m - 1)) if m > 1 else np.zeros_like(o)
    if mode == "asymmetric":
        return o / s
    return (o + half) / s  # tf_half_pixel_for_nearest


def resize(x, shape, scales, mode, coordinate_mode, nearest_mode):
    """Resize one axis after the other (separable), with ONNX's coordinate formulas."""
    out = np.asarray(x, F64)
    for k, (n, m, s) in enumerate(zip(x.shape, shape, scales)):
        if n == m and s == 1.0:
            continue
        coord = _resize_coordinates(np.arange(m), n, m, s, coordinate_mode).astype(F64)
        if mode == "nearest":
            rounded = {"round_prefer_floor": np.ceil(coord - 0.5), "round_prefer_ceil": np.floor(coord + 0.5),
                       "floor": np.floor(coord), "ceil": np.ceil(coord)}[nearest_mode]
            out = np.take(out, np.clip(rounded.astype(np.int64), 0, n - 1), axis=k)
        else:
            c = np.clip(coord, 0, n - 1)
            lo = np.floor(c).astype(np.int64)
            hi = np.minimum(lo + 1, n - 1)
            w = (c - lo).reshape([-1 if a == k else 1 for a in range(out.ndim)])
            out = np.take(out, lo, axis=k) * (1 - w) + np.take(out, hi, axis=k) * w
    return out


# elementwise ---------------------------------------------------------------------------

def relu(x):
    return np.maximum(np.asarray(x, F64), 0.0)


def gelu(x):
    x = np.asarray(x, F64)
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-np.asarray(x, F64)))


def tanh(x):
    return np.tanh(np.asarray(x, F64))


def gelu_tanh(x):
    x = np.asarray(x, F64)
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def erf(x):
    return _erf(np.asarray(x, F64))


def hard_sigmoid(x, alpha, beta):
    return np.clip(alpha * np.asarray(x, F64) + beta, 0.0, 1.0)
