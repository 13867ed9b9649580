"""Data movement: pad, transpose, reshape, concat, slices, gather (tag ``injective``: every output
reads one input element).

They do no arithmetic, so their workloads count 0 flops; judge them by bytes moved.
"""
from __future__ import annotations

import functools
import operator as pyop

import numpy as np

import ir
from ir.tensor import as_int

from .common import check_shape, numel, pad, scaled
from . import reference as ref
from .reference import f64
from .registry import INJECTIVE, node_kind, operator


def transpose(x, axes=None, name: str = "transpose"):
    """``out[i_0, ..., i_n] = x[...]`` with ``out.shape[k] = x.shape[axes[k]]`` (numpy's rule)."""
    axes = tuple(reversed(range(x.ndim))) if axes is None else tuple(axes)
    if sorted(axes) != list(range(x.ndim)):
        raise ValueError(f"{name}: axes {axes} are not a permutation of range({x.ndim}) for shape {x.shape}")
    shape = tuple(x.shape[a] for a in axes)

    def body(*i):
        src = [None] * x.ndim
        for out_pos, a in enumerate(axes):
            src[a] = i[out_pos]
        return x[tuple(src)]

    return ir.compute(shape, body, name=name, tag="injective")


def _resolve_shape(new_shape, size: int, name: str) -> tuple:
    new_shape = tuple(new_shape) if isinstance(new_shape, (tuple, list)) else (new_shape,)
    ints = tuple(as_int(s) for s in new_shape)
    if ints.count(-1) > 1 or not all(s is not None and (s >= 1 or s == -1) for s in ints):
        raise ValueError(f"{name}: new_shape must be positive ints with at most one -1, got {new_shape}")
    new_shape = ints
    if -1 in new_shape:
        known = numel(s for s in new_shape if s != -1)
        if size % known:
            raise ValueError(f"{name}: cannot infer the -1 in {new_shape} for {size} elements")
        new_shape = tuple(size // known if s == -1 else s for s in new_shape)
    if numel(new_shape) != size:
        raise ValueError(f"{name}: new_shape {new_shape} has {numel(new_shape)} elements, the input has {size}")
    return new_shape


def _strides(shape) -> list[int]:
    return [int(np.prod(shape[k + 1:], dtype=np.int64)) for k in range(len(shape))]


def reshape(x, new_shape, name: str = "reshape"):
    """Row-major reshape (numpy's); one ``-1`` in ``new_shape`` is inferred."""
    new_shape = _resolve_shape(new_shape, numel(x.shape), name)
    out_strides, in_strides = _strides(new_shape), _strides(x.shape)

    def body(*i):
        terms = [scaled(idx, s) for idx, s, extent in zip(i, out_strides, new_shape) if extent > 1]
        flat = functools.reduce(pyop.add, terms) if terms else 0
        src = []
        for k, (s, extent) in enumerate(zip(in_strides, x.shape)):
            v = flat if s == 1 else flat // s
            src.append(0 if extent == 1 else (v if k == 0 else v % extent))
        return x[tuple(src)]

    return ir.compute(new_shape, body, name=name, tag="injective")


def concat(xs, axis: int, name: str = "concat"):
    """The tensors ``xs`` joined along ``axis`` (all other extents equal)."""
    xs = list(xs)
    if not xs:
        raise ValueError(f"{name}: nothing to concatenate")
    ax = axis + xs[0].ndim if axis < 0 else axis
    for x in xs:
        if x.ndim != xs[0].ndim or not 0 <= ax < x.ndim or any(
                a != b for k, (a, b) in enumerate(zip(x.shape, xs[0].shape)) if k != ax):
            raise ValueError(f"{name}: shapes {[t.shape for t in xs]} do not concatenate along axis {axis}")
    if len({x.dtype for x in xs}) > 1:
        raise ValueError(f"{name}: dtypes {[x.dtype for x in xs]} differ")
    starts = [0]
    for x in xs:
        starts.append(starts[-1] + x.shape[ax])
    shape = (*xs[0].shape[:ax], starts[-1], *xs[0].shape[ax + 1:])

    def body(*i):
        def part(lo, hi):
            """The element from one of ``xs[lo:hi]``: a balanced tree of selects, so that an
            element (or a vector, whose untaken side is skipped) takes log2(n) tests, not n."""
            if hi - lo == 1:
                return xs[lo][(*i[:ax], i[ax] - starts[lo] if starts[lo] else i[ax], *i[ax + 1:])]
            mid = (lo + hi) // 2
            return ir.select(i[ax] < starts[mid], part(lo, mid), part(mid, hi))
        return part(0, len(xs))

    return ir.compute(shape, body, name=name, tag="injective")


def strided_slice(x, begin, step, shape, name: str = "strided_slice"):
    """``out[i] = x[begin + i·step]`` per axis (steps may be negative); every index read must
    lie inside ``x``."""
    begin, step, shape = tuple(begin), tuple(step), tuple(shape)
    if not len(begin) == len(step) == len(shape) == x.ndim:
        raise ValueError(f"{name}: begin {begin}, step {step} and shape {shape} need {x.ndim} entries each")
    for b, s, n, size in zip(begin, step, shape, x.shape):
        if s == 0 or n < 1 or not (0 <= b < size and 0 <= b + (n - 1) * s < size):
            raise ValueError(f"{name}: begin {begin}, step {step}, shape {shape} read outside {x.shape}")
    return ir.compute(shape, lambda *i: x[tuple(b + scaled(k, s) if b else scaled(k, s)
                                               for k, b, s in zip(i, begin, step))], name=name, tag="injective")


def gather(data, indices, axis: int = 0, name: str = "gather"):
    """``data`` indexed along ``axis`` by the integer tensor ``indices`` (numpy.take; negative
    indices count from the end). An index outside ``data`` makes the kernel raise IndexError
    (lowering checks reads whose index comes from data), as onnxruntime refuses it."""
    ax = axis + data.ndim if axis < 0 else axis
    if not 0 <= ax < data.ndim:
        raise ValueError(f"{name}: axis {axis} is out of range for data of shape {data.shape}")
    if not indices.dtype.startswith("int"):
        raise ValueError(f"{name}: indices must be integers, got {indices.dtype}")
    n, r = data.shape[ax], indices.ndim
    shape = (*data.shape[:ax], *indices.shape, *data.shape[ax + 1:])

    def body(*i):
        k = ir.cast(indices[i[ax:ax + r]], "int64")
        k = k + ir.cast(k < 0, "int64") * n      # arithmetic, not a select: the load stays unmasked
        return data[(*i[:ax], k, *i[ax + r:])]

    return ir.compute(shape, body, name=name, tag="injective")


PAD_MODES = ("constant", "reflect", "edge", "wrap")


def pad_mode(x, pad_before, pad_after, mode: str = "constant", value: float = 0.0, name: str = "pad"):
    """``x`` padded per axis: with ``value`` ("constant"), mirrored without repeating the edge
    ("reflect"), repeating the edge ("edge") or wrapping around ("wrap"), as numpy.pad."""
    if mode not in PAD_MODES:
        raise ValueError(f"{name}: unknown mode {mode!r}; expected one of {', '.join(PAD_MODES)}")
    if mode == "constant":
        return pad(x, pad_before, pad_after, value, name)
    before, after = tuple(pad_before), tuple(pad_after)
    for b, a, size in zip(before, after, x.shape):
        if min(b, a) < 0 or (mode == "reflect" and max(b, a) >= size) or (mode == "wrap" and max(b, a) > size):
            raise ValueError(f"{name}: {mode} padding {before}/{after} does not fit the shape {x.shape}")
    shape = tuple(s + b + a for s, b, a in zip(x.shape, before, after))

    def source(i, b, a, size):
        if not b and not a:
            return i
        j = i - b if b else i
        if mode == "edge":
            return ir.min(ir.max(j, 0), size - 1)
        if mode == "wrap":
            return ir.select(j < 0, j + size, ir.select(j >= size, j - size, j))
        return ir.select(j < 0, -j, ir.select(j >= size, 2 * (size - 1) - j, j))

    return ir.compute(shape, lambda *i: x[tuple(source(*t) for t in zip(i, before, after, x.shape))],
                      name=name, tag="injective,pad")


# workloads -----------------------------------------------------------------------------

@operator("pad", reference=lambda ins, p: [np.pad(ins[0], list(zip(*_pad_widths(p, ins[0].ndim))),
                                                  constant_values=p.pad_value)],
          flops=lambda ts, p: 0)
def pad_workload(shape, pad_before, pad_after=None, pad_value=0.0, dtype="float32"):
    """``shape`` padded by ``pad_before`` / ``pad_after`` (ints or per-axis tuples; after defaults to before)."""
    x = ir.placeholder(check_shape(shape, "pad: shape"), dtype, name="x")
    return [x, pad(x, pad_before, pad_after, pad_value)]


def _pad_widths(p, ndim):
    t = lambda v: (v,) * ndim if as_int(v) is not None else tuple(v)  # noqa: E731
    return t(p.pad_before), t(p.pad_before if p.pad_after is None else p.pad_after)


@operator("transpose", reference=lambda ins, p: [np.transpose(ins[0], p.axes)], flops=lambda ts, p: 0)
def transpose_workload(shape, axes=None, dtype="float32"):
    """``shape`` permuted by ``axes`` (default: reversed), numpy's convention."""
    x = ir.placeholder(check_shape(shape, "transpose: shape"), dtype, name="x")
    return [x, transpose(x, axes)]


@operator("reshape", reference=lambda ins, p: [np.reshape(ins[0], p.new_shape)], flops=lambda ts, p: 0)
def reshape_workload(shape, new_shape, dtype="float32"):
    """``shape`` reshaped row-major to ``new_shape`` (one -1 allowed)."""
    x = ir.placeholder(check_shape(shape, "reshape: shape"), dtype, name="x")
    return [x, reshape(x, new_shape)]


# graph node kinds ------------------------------------------------------------------------

def _pad_node_reference(x, a):
    mode = a.get("mode", "constant")
    value = {"constant_values": a.get("value", 0.0)} if mode == "constant" else {}
    return np.pad(f64(x[0]), list(zip(a["pad_before"], a["pad_after"])), mode=mode, **value)


node_kind("reshape", INJECTIVE, lambda t, a, name: reshape(t[0], a["shape"], name),
          lambda x, a: np.reshape(x[0], a["shape"]), 1)
node_kind("transpose", INJECTIVE, lambda t, a, name: transpose(t[0], a["axes"], name),
          lambda x, a: np.transpose(x[0], a["axes"]), 1)
node_kind("concat", INJECTIVE, lambda t, a, name: concat(t, a["axis"], name),
          lambda x, a: np.concatenate([f64(v) for v in x], axis=a["axis"]))
node_kind("strided_slice", INJECTIVE, lambda t, a, name: strided_slice(t[0], a["begin"], a["step"], a["shape"], name),
          lambda x, a: ref.strided_slice(x[0], a["begin"], a["step"], a["shape"]), 1)
node_kind("gather", INJECTIVE, lambda t, a, name: gather(t[0], t[1], a.get("axis", 0), name),
          lambda x, a: ref.gather(x[0], x[1], a.get("axis", 0)), 2)
node_kind("pad", INJECTIVE,
          lambda t, a, name: pad_mode(t[0], a["pad_before"], a["pad_after"], a.get("mode", "constant"),
                                      a.get("value", 0.0), name),
          _pad_node_reference, 1)
