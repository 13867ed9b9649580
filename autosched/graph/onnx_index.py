"""ONNX's indexing and rearranging operators as graph nodes: Tile, GatherElements, CumSum,
ArgMax/ArgMin, TopK, DepthToSpace/SpaceToDepth and Einsum (the contractions exporters write,
as batched matrix products). They work on values in ONNX's own axis order (``plain``),
except the ones that only need an axis mapped (CumSum, ArgMax)."""
from __future__ import annotations

import math
import re

import numpy as np

from .onnx_layout import Value, identity
from .onnx_ops import Unsupported, as_ints, converts


def _plain(b, v) -> Value:
    node = b.plain(v)
    return Value(node, identity(len(node.shape)))


@converts("Tile")
def _tile(b, n):
    x = n.runtime_input(0)
    repeats = as_ints(n.const_input(1, "repeats"))
    if len(repeats) != x.rank:
        raise Unsupported(f"repeats {repeats} for a {x.rank}-d input")
    if all(r == 1 for r in repeats):
        return [x]
    return [Value(b.op("tile", [x.node], n.name, repeats=x.to_graph_order(repeats)), x.perm)]


@converts("GatherElements")
def _gather_elements(b, n):
    data, indices = n.inputs
    axis = int(n.attr("axis", 0))
    lead = data if isinstance(data, Value) else indices
    rank = lead.rank
    nodes = [b.plain(v) if isinstance(v, Value) else b.const(np.asarray(v), f"{n.name}_in{k}")
             for k, v in enumerate((data, indices))]
    node = b.op("gather_elements", nodes, n.name, axis=axis % rank)
    return [Value(node, identity(rank))]


@converts("CumSum")
def _cumsum(b, n):
    x = n.runtime_input(0)
    axis = int(np.ravel(n.const_input(1, "axis"))[0]) % x.rank
    node = b.op("cumsum", [x.node], n.name, axis=x.graph_axis(axis), exclusive=bool(n.attr("exclusive", 0)),
                reverse=bool(n.attr("reverse", 0)))
    return [Value(node, x.perm)]


@converts("ArgMax", "ArgMin")
def _arg_reduce(b, n):
    x = n.runtime_input(0)
    axis = int(n.attr("axis", 0)) % x.rank
    keepdims = bool(n.attr("keepdims", 1))
    node = b.op("arg_reduce", [x.node], n.name, axis=x.graph_axis(axis), largest=n.op_type == "ArgMax",
                keepdims=keepdims, select_last=bool(n.attr("select_last_index", 0)))
    if keepdims:
        return [Value(node, x.perm)]
    kept = [p for p in x.perm if p != axis]
    return [Value(node, tuple(p - (p > axis) for p in kept))]


@converts("TopK")
def _topk(b, n):
    x = n.runtime_input(0)
    k = int(np.ravel(n.const_input(1, "k"))[0]) if n.opset >= 10 else int(n.attr("k"))
    axis = x.graph_axis(int(n.attr("axis", -1)))
    if not n.attr("sorted", 1):
        raise Unsupported("sorted=0")
    rank = b.op("topk_rank", [x.node], f"{n.name}_rank", axis=axis, largest=bool(n.attr("largest", 1)))
    return [Value(b.op("topk_select", [x.node, rank], f"{n.name}_{which}", k=k, axis=axis,
                       indices=which == "indices"), x.perm) for which in ("values", "indices")]


@converts("DepthToSpace", "SpaceToDepth")
def _depth_space(b, n):
    """Both as reshape, transpose, reshape (ONNX's definition), on NCHW."""
    x = n.runtime_input(0)
    if x.rank != 4:
        raise Unsupported(f"a {x.rank}-d input")
    s = int(n.attr("blocksize"))
    N, C, H, W = x.onnx_shape
    if n.op_type == "SpaceToDepth":
        split, axes, out = (N, C, H // s, s, W // s, s), (0, 3, 5, 1, 2, 4), (N, C * s * s, H // s, W // s)
    elif n.attr("mode", "DCR") == "DCR":
        split, axes, out = (N, s, s, C // (s * s), H, W), (0, 3, 4, 1, 5, 2), (N, C // (s * s), H * s, W * s)
    else:
        split, axes, out = (N, C // (s * s), s, s, H, W), (0, 1, 4, 2, 5, 3), (N, C // (s * s), H * s, W * s)
    parts = b.reshape(b.plain(x), split, f"{n.name}_split")
    moved = b.op("transpose", [parts], f"{n.name}_move", axes=axes)
    return [Value(b.reshape(moved, out, n.name), identity(4))]


# einsum --------------------------------------------------------------------------------------

def _parse_einsum(equation: str, ranks) -> tuple[list, str]:
    equation = equation.replace(" ", "")
    if "..." in equation:
        raise Unsupported(f"an ellipsis in the equation {equation!r}")
    lhs, arrow, rhs = equation.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks) or any(len(t) != r for t, r in zip(terms, ranks)):
        raise Unsupported(f"equation {equation!r} for operands of ranks {list(ranks)}")
    if not arrow:                        # implicit output: the letters that occur once, sorted
        letters = "".join(terms)
        rhs = "".join(sorted(c for c in set(letters) if letters.count(c) == 1))
    elif not re.fullmatch(r"[A-Za-z]*", rhs):
        raise Unsupported(f"the output {rhs!r} of the equation {equation!r}")
    if any(len(set(t)) != len(t) for t in terms):
        raise Unsupported(f"a repeated index within one operand of {equation!r} (a diagonal)")
    return terms, rhs


def _sum_out(b, v: Value, term: str, keep: set, name: str) -> tuple[Value, str]:
    """``v`` summed over the letters of ``term`` not in ``keep``."""
    gone = [k for k, c in enumerate(term) if c not in keep]
    if not gone:
        return v, term
    node = b.op("reduce", [b.plain(v)], f"{name}_sum", axes=tuple(gone), reducer="sum", keepdims=False)
    return Value(node, identity(len(node.shape))), "".join(c for c in term if c in keep)


def _arrange(b, v: Value, term: str, order: str, shape, name: str):
    """``v`` (letters ``term``) with its axes in the letter order ``order``, reshaped to ``shape``."""
    axes = tuple(term.index(c) for c in order)
    node = b.plain(v)
    if axes != identity(len(axes)):
        node = b.op("transpose", [node], f"{name}_T", axes=axes)
    return b.reshape(node, shape, f"{name}_flat")


@converts("Einsum")
def _einsum(b, n):
    """One or two operands: letters summed in one operand only are reduced first; then batch
    letters (in both and the output), contracted ones (in both, not the output) and the
    free ones of each side make one batched matrix product, rearranged to the output."""
    values = [v if isinstance(v, Value) else Value(b.const(np.asarray(v, np.float32), f"{n.name}_c{k}"),
                                                   identity(np.ndim(v)))
              for k, v in enumerate(n.inputs)]
    if not 1 <= len(values) <= 2:
        raise Unsupported(f"{len(values)} operands (one or two are supported)")
    terms, out = _parse_einsum(n.attr("equation"), [v.rank for v in values])
    sizes = {}
    for v, t in zip(values, terms):
        for c, s in zip(t, v.onnx_shape):
            sizes[c] = s
    if len(values) == 1:
        v, t = _sum_out(b, values[0], terms[0], set(out), n.name)
        return [Value(b.op("transpose", [b.plain(v)], n.name, axes=tuple(t.index(c) for c in out)),
                      identity(len(out)))]
    (a, ta), (c, tc) = (_sum_out(b, v, t, set(out) | set(other), f"{n.name}_{k}")
                        for k, (v, t, other) in enumerate(zip(values, terms, reversed(terms))))
    batch = "".join(x for x in out if x in ta and x in tc)
    contract = "".join(x for x in ta if x in tc and x not in out)
    left = "".join(x for x in out if x in ta and x not in tc)
    right = "".join(x for x in out if x in tc and x not in ta)
    B, M, K, N = (math.prod(sizes[x] for x in part) for part in (batch, left, contract, right))
    na = _arrange(b, a, ta, batch + left + contract, (B, M, K), f"{n.name}_a")
    nc = _arrange(b, c, tc, batch + contract + right, (B, K, N), f"{n.name}_b")
    product = b.op("batch_matmul", [na, nc], f"{n.name}_mm")
    order = batch + left + right
    unflat = b.reshape(product, [sizes[x] for x in order] or [1], f"{n.name}_unflat")
    axes = tuple(order.index(x) for x in out)
    if axes != identity(len(axes)):
        unflat = b.op("transpose", [unflat], n.name, axes=axes)
    return [Value(unflat, identity(len(out)))]
