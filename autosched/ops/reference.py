"""Numpy references of the operators, written independently of the tensor expressions.

They are the oracle that generated code is checked against, so they favour the obvious
formulation (np.pad, one einsum per kernel offset, float64) over speed. Window operators
work in channel-last order internally; channel-first data is moved there and back.
"""
from __future__ import annotations

import itertools
import math

import numpy as np

try:
    from scipy.special import erf as _erf
except ImportError:  # scipy is optional: math.erf elementwise is exact, only slower
    _erf = np.vectorize(math.erf, otypes=[np.float64])

F64 = np.float64


def to_channel_last(x: np.ndarray, channel_last: bool) -> np.ndarray:
    return np.asarray(x, F64) if channel_last else np.moveaxis(np.asarray(x, F64), 1, -1)


def from_channel_last(x: np.ndarray, channel_last: bool) -> np.ndarray:
    return x if channel_last else np.moveaxis(x, -1, 1)


def _pad_spatial(x: np.ndarray, padding, value=0.0) -> np.ndarray:
    """Pad the spatial axes (all but the first and the last) of channel-last data."""
    widths = [(0, 0)] + [(p, p) for p in padding] + [(0, 0)] * (x.ndim - 1 - len(padding))
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

def conv(x, w, stride, padding, dilation, groups, channel_last):
    """Grouped N-d convolution; weight (*K, CI/groups, CO) channel-last, (CO, CI/groups, *K) else."""
    x = to_channel_last(x, channel_last)
    w = np.asarray(w, F64) if channel_last else np.moveaxis(np.asarray(w, F64), (0, 1), (-1, -2))
    sd = x.ndim - 2
    kernel, (cig, co) = w.shape[:sd], w.shape[sd:]
    xp = _pad_spatial(x, padding)
    out_sp = _out_spatial(xp.shape[1:-1], kernel, stride, dilation)
    wg = w.reshape(*kernel, cig, groups, co // groups)
    out = np.zeros((x.shape[0], *out_sp, groups, co // groups))
    for offs, patch in _patches(xp, kernel, stride, dilation, out_sp):
        patch = patch.reshape(*patch.shape[:-1], groups, cig)
        out += np.einsum("...gc,cgo->...go", patch, wg[offs])
    return from_channel_last(out.reshape(*out.shape[:-2], co), channel_last)


def depthwise_conv(x, w, stride, padding, dilation, channel_last):
    """Weight (*K, C, multiplier) channel-last, (C, multiplier, *K) else; out channel c*m + q."""
    x = to_channel_last(x, channel_last)
    w = np.asarray(w, F64) if channel_last else np.moveaxis(np.asarray(w, F64), (0, 1), (-2, -1))
    sd = x.ndim - 2
    kernel, (c, m) = w.shape[:sd], w.shape[sd:]
    xp = _pad_spatial(x, padding)
    out_sp = _out_spatial(xp.shape[1:-1], kernel, stride, dilation)
    out = np.zeros((x.shape[0], *out_sp, c, m))
    for offs, patch in _patches(xp, kernel, stride, dilation, out_sp):
        out += patch[..., None] * w[offs]
    return from_channel_last(out.reshape(*out.shape[:-2], c * m), channel_last)


def conv_transpose(x, w, stride, padding, channel_last):
    """Scatter form: input pixel i adds x[i]·w[r] to output i·stride + r − padding.
    Weight (*K, CI, CO) channel-last, (CI, CO, *K) channel-first (TVM's)."""
    x = to_channel_last(x, channel_last)
    w = np.asarray(w, F64) if channel_last else np.moveaxis(np.asarray(w, F64), (0, 1), (-2, -1))
    sd = x.ndim - 2
    kernel, in_sp = w.shape[:sd], x.shape[1:-1]
    full = np.zeros((x.shape[0], *[(n - 1) * s + k for n, s, k in zip(in_sp, stride, kernel)], w.shape[-1]))
    for offs in itertools.product(*(range(k) for k in kernel)):
        sl = tuple(slice(o, o + (n - 1) * s + 1, s) for o, n, s in zip(offs, in_sp, stride))
        full[(slice(None),) + sl] += np.einsum("...c,co->...o", x, w[offs])
    crop = tuple(slice(p, n - p) for p, n in zip(padding, full.shape[1:-1]))
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

def pool(x, kernel, stride, padding, pool_type, channel_last):
    """Max pooling, or average pooling over the in-bounds samples only (padding excluded)."""
    x = to_channel_last(x, channel_last)
    xp = _pad_spatial(x, padding, -np.inf if pool_type == "max" else 0.0)
    ones = _pad_spatial(np.ones_like(x), padding, 0.0)
    out_sp = _out_spatial(xp.shape[1:-1], kernel, stride, (1,) * len(kernel))
    dil = (1,) * len(kernel)
    windows = [p for _, p in _patches(xp, kernel, stride, dil, out_sp)]
    if pool_type == "max":
        out = np.max(windows, axis=0)
    else:
        counts = np.sum([p for _, p in _patches(ones, kernel, stride, dil, out_sp)], axis=0)
        out = np.sum(windows, axis=0) / counts
    return from_channel_last(out, channel_last)


def global_pool(x, pool_type, channel_last):
    x = to_channel_last(x, channel_last)
    axes = tuple(range(1, x.ndim - 1))
    out = x.max(axis=axes, keepdims=True) if pool_type == "max" else x.mean(axis=axes, keepdims=True)
    return from_channel_last(out, channel_last)


def softmax(x):
    x = np.asarray(x, F64)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


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
