"""Operators that index by position or by data, as exporters write them: tile, gather along
an axis by an index tensor (``gather_elements``), the running sum (``cumsum``), the index
of the largest or smallest element (``arg_reduce``), the ``k`` largest or smallest
elements (``topk``) and the product over an axis (``reduce_prod``).

Indices read from data are not proven in range; lowering checks them at run time and the
call raises ``IndexError`` for one outside its tensor (``ir.index_check``), as onnxruntime
refuses them.
"""
from __future__ import annotations

import numpy as np

import ir

from .nn import _axis
from .reference import f64
from .registry import INJECTIVE, REDUCE, node_kind


def _at(index, ax: int, value) -> tuple:
    return (*index[:ax], value, *index[ax + 1:])


def tile(x, repeats, name: str = "tile"):
    """``x`` repeated ``repeats[k]`` times along each axis ``k`` (numpy.tile, same rank)."""
    repeats = tuple(int(r) for r in repeats)
    if len(repeats) != x.ndim or min(repeats) < 1:
        raise ValueError(f"{name}: repeats {repeats} must be {x.ndim} positive counts for shape {x.shape}")
    shape = tuple(s * r for s, r in zip(x.shape, repeats))
    return ir.compute(shape, lambda *i: x[tuple(k % s if r > 1 else k for k, s, r in zip(i, x.shape, repeats))],
                      name=name, tag="injective")


def gather_elements(data, indices, axis: int = 0, name: str = "gather_elements"):
    """``out[i] = data[i with i[axis] replaced by indices[i]]`` (numpy.take_along_axis;
    negative indices count from the end)."""
    ax = _axis(data, axis, name)
    if not indices.dtype.startswith("int"):
        raise ValueError(f"{name}: indices must be integers, got {indices.dtype}")
    if indices.ndim != data.ndim:
        raise ValueError(f"{name}: indices of rank {indices.ndim} for data of rank {data.ndim}")
    n = data.shape[ax]

    def body(*i):
        k = ir.cast(indices[i], "int64")
        k = k + ir.cast(k < 0, "int64") * n
        return data[_at(i, ax, k)]

    return ir.compute(indices.shape, body, name=name, tag="injective")


def cumsum(x, axis: int, exclusive: bool = False, reverse: bool = False, name: str = "cumsum"):
    """The running sum along ``axis`` (ONNX CumSum: ``exclusive`` leaves the element itself
    out, ``reverse`` sums from the end)."""
    ax = _axis(x, axis, name)
    n = x.shape[ax]
    r = ir.reduce_axis(n, "rk")

    def body(*i):
        k = i[ax]
        if reverse:
            cond = r > k if exclusive else r >= k
        else:
            cond = r < k if exclusive else r <= k
        return ir.sum(x[_at(i, ax, r)], axis=r, where=cond)

    return ir.compute(x.shape, body, name=name, tag="comm_reduce")


def arg_reduce(x, axis: int, largest: bool = True, keepdims: bool = True, select_last: bool = False,
               name: str = "argmax"):
    """The int64 index of the largest (or smallest) element along ``axis``; of equal ones the
    first (or with ``select_last`` the last), as ONNX ArgMax/ArgMin."""
    ax = _axis(x, axis, name)
    n = x.shape[ax]
    r = ir.reduce_axis(n, "ra")
    kept = tuple(1 if a == ax else s for a, s in enumerate(x.shape))
    best = ir.compute(kept, lambda *i: (ir.max if largest else ir.min)(x[_at(i, ax, r)], axis=r),
                      name=f"{name}_value", tag="comm_reduce")

    def index(*i):
        hit = x[_at(i, ax, r)] == best[i]
        pos = ir.cast(r, "int64")
        if select_last:
            return ir.max(ir.select(hit, pos, ir.const(-1, "int64")), axis=r)
        return ir.min(ir.select(hit, pos, ir.const(n, "int64")), axis=r)

    out = ir.compute(kept, index, name=name, tag="comm_reduce")
    if keepdims:
        return out
    shape = tuple(s for a, s in enumerate(x.shape) if a != ax)
    return ir.compute(shape, lambda *i: out[(*i[:ax], 0, *i[ax:])], name=f"{name}_squeeze", tag="injective")


def topk_rank(x, axis: int, largest: bool = True, name: str = "topk_rank"):
    """Each element's int64 place in the order of ``x`` along ``axis`` (largest first, or
    smallest), ties broken by position, as ONNX TopK orders them."""
    ax = _axis(x, axis, name)
    r = ir.reduce_axis(x.shape[ax], "rt")

    def rank(*i):
        other, mine = x[_at(i, ax, r)], x[i]
        before = other > mine if largest else other < mine
        tie_before = (other == mine) & (r < i[ax])
        return ir.sum(ir.cast(before | tie_before, "int64"), axis=r)

    return ir.compute(x.shape, rank, name=name, tag="comm_reduce")


def topk_select(x, rank, k: int, axis: int, indices: bool = False, name: str = "topk"):
    """The elements of places ``0..k-1`` of ``rank`` (``topk_rank``) along ``axis`` in that
    order: their values, or with ``indices`` their int64 positions."""
    ax = _axis(x, axis, name)
    n = x.shape[ax]
    if not 1 <= k <= n:
        raise ValueError(f"{name}: k = {k} for an axis of extent {n}")
    r = ir.reduce_axis(n, "rs")
    shape = _at(x.shape, ax, k)

    def body(*i):
        hit = rank[_at(i, ax, r)] == ir.cast(i[ax], "int64")
        value = ir.cast(r, "int64") if indices else x[_at(i, ax, r)]
        return ir.sum(value, axis=r, where=hit)

    return ir.compute(shape, body, name=name, tag="comm_reduce")


#: the longest axis ``reduce_prod`` multiplies out (its expression has one product per element)
MAX_PRODUCT_EXTENT = 64


def reduce_prod(x, axis: int, keepdims: bool = True, name: str = "reduce_prod"):
    """The product of the elements along ``axis`` (written out: at most ``MAX_PRODUCT_EXTENT``)."""
    ax = _axis(x, axis, name)
    n = x.shape[ax]
    if n > MAX_PRODUCT_EXTENT:
        raise ValueError(f"{name}: a product over {n} elements; at most {MAX_PRODUCT_EXTENT} are supported")

    def body(*i):
        full = i if keepdims else (*i[:ax], 0, *i[ax:])
        acc = x[_at(full, ax, 0)]
        for j in range(1, n):
            acc = acc * x[_at(full, ax, j)]
        return acc

    shape = _at(x.shape, ax, 1) if keepdims else tuple(s for a, s in enumerate(x.shape) if a != ax)
    return ir.compute(shape, body, name=name, tag="injective")


# references ----------------------------------------------------------------------------------

def cumsum_reference(x, axis: int, exclusive: bool = False, reverse: bool = False):
    x = np.asarray(x)
    if reverse:
        x = np.flip(x, axis)
    out = np.cumsum(x, axis=axis, dtype=np.float64 if x.dtype.kind == "f" else x.dtype)
    if exclusive:
        out = np.concatenate([np.zeros_like(np.take(out, [0], axis=axis)), np.delete(out, -1, axis=axis)], axis=axis)
    return np.flip(out, axis) if reverse else out


def arg_reduce_reference(x, axis: int, largest: bool = True, keepdims: bool = True, select_last: bool = False):
    x = np.asarray(x)
    fn = np.argmax if largest else np.argmin
    if select_last:
        n = x.shape[axis]
        out = n - 1 - fn(np.flip(x, axis), axis=axis)
    else:
        out = fn(x, axis=axis)
    return np.expand_dims(out, axis) if keepdims else out


def topk_rank_reference(x, axis: int, largest: bool = True):
    x = np.asarray(x)
    order = np.argsort(-x if largest else x, axis=axis, kind="stable")
    return np.argsort(order, axis=axis, kind="stable").astype(np.int64)


def topk_select_reference(x, rank, k: int, axis: int, indices: bool = False):
    """The values (or positions) of places ``0..k-1`` of ``rank`` along ``axis``."""
    positions = np.take(np.argsort(rank, axis=axis, kind="stable"), np.arange(k), axis=axis)
    return positions.astype(np.int64) if indices else np.take_along_axis(np.asarray(x), positions, axis)


# graph node kinds ------------------------------------------------------------------------

node_kind("tile", INJECTIVE, lambda t, a, name: tile(t[0], a["repeats"], name),
          lambda x, a: np.tile(x[0], a["repeats"]), 1)
node_kind("gather_elements", INJECTIVE, lambda t, a, name: gather_elements(t[0], t[1], a.get("axis", 0), name),
          lambda x, a: np.take_along_axis(x[0], np.where(x[1] < 0, x[1] + x[0].shape[a.get("axis", 0)], x[1]),
                                          a.get("axis", 0)), 2)
node_kind("cumsum", REDUCE,
          lambda t, a, name: cumsum(t[0], a["axis"], a.get("exclusive", False), a.get("reverse", False), name),
          lambda x, a: cumsum_reference(x[0], a["axis"], a.get("exclusive", False), a.get("reverse", False)), 1)
node_kind("arg_reduce", REDUCE,
          lambda t, a, name: arg_reduce(t[0], a["axis"], a["largest"], a["keepdims"], a["select_last"], name),
          lambda x, a: arg_reduce_reference(x[0], a["axis"], a["largest"], a["keepdims"], a["select_last"]), 1)
node_kind("topk_rank", REDUCE, lambda t, a, name: topk_rank(t[0], a["axis"], a["largest"], name),
          lambda x, a: topk_rank_reference(x[0], a["axis"], a["largest"]), 1)
node_kind("topk_select", REDUCE, lambda t, a, name: topk_select(t[0], t[1], a["k"], a["axis"], a["indices"], name),
          lambda x, a: topk_select_reference(x[0], x[1], a["k"], a["axis"], a["indices"]), 2)
node_kind("reduce_prod", INJECTIVE, lambda t, a, name: reduce_prod(t[0], a["axis"], a["keepdims"], name),
          lambda x, a: np.prod(f64(x[0]), axis=a["axis"], keepdims=a["keepdims"]), 1)
