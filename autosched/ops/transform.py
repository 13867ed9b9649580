"""Data movement: pad, transpose, reshape (tag ``injective``: every output reads one input).

They do no arithmetic, so their workloads count 0 flops; judge them by bytes moved.
"""
from __future__ import annotations

import functools
import operator as pyop

import numpy as np

import ir
from ir.tensor import as_int

from .common import check_shape, numel, pad, scaled
from .registry import operator


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
