"""Resizing: nearest-neighbour and (multi-)linear interpolation along any axes, with the
coordinate conventions of ONNX's Resize (which cover PyTorch's and TensorFlow's).

Each output index ``o`` of a resized axis maps to a source coordinate ``x`` in the input
(``source_coordinate``); nearest takes one sample there, linear blends the two around it
(clamped to the edge), and several resized axes multiply their weights. The coordinates
are computed in the kernel in float32, as onnxruntime does, so no index table is stored.
"""
from __future__ import annotations

import itertools

import ir

from . import reference as ref
from .registry import INJECTIVE, node_kind

COORDINATE_MODES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
                    "tf_half_pixel_for_nearest")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def source_coordinate(o, in_size: int, out_size: int, scale: float, mode: str):
    """The input coordinate of output index ``o`` (an expression or a number) along one axis."""
    if mode == "half_pixel":
        return (o + 0.5) / scale - 0.5
    if mode == "half_pixel_symmetric":
        adjustment = out_size / (scale * in_size)
        return in_size / 2 * (1 - adjustment) + (o + 0.5) / scale - 0.5
    if mode == "pytorch_half_pixel":
        return (o + 0.5) / scale - 0.5 if out_size > 1 else 0.0 * o
    if mode == "align_corners":
        return o * ((in_size - 1) / (out_size - 1)) if out_size > 1 else 0.0 * o
    if mode == "asymmetric":
        return o / scale
    if mode == "tf_half_pixel_for_nearest":
        return (o + 0.5) / scale
    raise ValueError(f"resize: unknown coordinate mode {mode!r}; expected one of {', '.join(COORDINATE_MODES)}")


def _nearest(x, mode: str):
    if mode == "round_prefer_floor":
        return ir.ceil(x - 0.5)
    if mode == "round_prefer_ceil":
        return ir.floor(x + 0.5)
    if mode == "floor":
        return ir.floor(x)
    if mode == "ceil":
        return ir.ceil(x)
    raise ValueError(f"resize: unknown nearest mode {mode!r}; expected one of {', '.join(NEAREST_MODES)}")


def _clamp_index(v, size: int):
    return ir.min(ir.max(ir.cast(v, "int64"), 0), size - 1)


def resize(x, shape, scales, mode: str = "nearest", coordinate_mode: str = "half_pixel",
           nearest_mode: str = "round_prefer_floor", name: str = "resize"):
    """``x`` resized to ``shape``; ``scales[k]`` is output/input along axis k (as given to
    ONNX's Resize, which may differ from the ratio of the integer sizes). ``mode``:
    "nearest" or "linear"."""
    shape, scales = tuple(shape), tuple(float(s) for s in scales)
    if not len(shape) == len(scales) == x.ndim:
        raise ValueError(f"{name}: shape {shape} and scales {scales} need {x.ndim} entries each")
    if mode not in ("nearest", "linear"):
        raise ValueError(f"{name}: unknown mode {mode!r}; expected 'nearest' or 'linear'")
    if x.dtype != "float32":
        raise ValueError(f"{name}: resizes float32 data, got {x.dtype}")
    axes = [k for k, (a, b, s) in enumerate(zip(x.shape, shape, scales)) if a != b or s != 1.0]

    def coordinate(i, k):
        o = ir.cast(i[k], "float32")
        return source_coordinate(o, x.shape[k], shape[k], scales[k], coordinate_mode)

    if mode == "nearest":
        def body(*i):
            idx = list(i)
            for k in axes:
                idx[k] = _clamp_index(_nearest(coordinate(i, k), nearest_mode), x.shape[k])
            return x[tuple(idx)]
        return ir.compute(shape, body, name=name, tag="injective")

    def linear(*i):
        lo, hi, frac = {}, {}, {}
        for k in axes:
            c = ir.min(ir.max(coordinate(i, k), ir.const(0.0, "float32")),
                       ir.const(float(x.shape[k] - 1), "float32"))
            f = ir.floor(c)
            lo[k] = _clamp_index(f, x.shape[k])
            hi[k] = ir.min(lo[k] + 1, x.shape[k] - 1)
            frac[k] = c - f
        total = None
        for corner in itertools.product((0, 1), repeat=len(axes)):
            idx, weight = list(i), None
            for k, side in zip(axes, corner):
                idx[k] = hi[k] if side else lo[k]
                w = frac[k] if side else 1.0 - frac[k]
                weight = w if weight is None else weight * w
            term = x[tuple(idx)] if weight is None else x[tuple(idx)] * weight
            total = term if total is None else total + term
        return total

    return ir.compute(shape, linear, name=name, tag="injective")


node_kind("resize", INJECTIVE,
          lambda t, a, name: resize(t[0], a["shape"], a["scales"], a["mode"], a["coordinate_mode"], a["nearest_mode"],
                                    name),
          lambda x, a: ref.resize(x[0], a["shape"], a["scales"], a["mode"], a["coordinate_mode"], a["nearest_mode"]), 1)
