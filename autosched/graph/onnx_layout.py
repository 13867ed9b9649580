"""The importer's values and layouts: how an ONNX tensor lives in the channel-last graph.

ONNX tensors are channel-first (NCHW); our operators are channel-last. Instead of a
transpose around every convolution, each imported tensor is a ``Value``: a graph node plus
``perm``, the ONNX axis that each of the node's axes holds (``node.shape[j] ==
onnx_shape[perm[j]]``). A convolution's output is channel-last ((0, 2, 3, 1) for NCHW);
elementwise operators keep their input's layout; operators with an axis (concat, softmax,
reductions, slices, batch norm) map it through ``perm``; an ONNX Transpose only changes
``perm``. A node in another order is made (``Builder.to_layout``) only where an operator
needs one, e.g. a reshape after a convolution; it is a free reshape when the axes that move
have extent 1 (NHWC (1, 1, 1, C) and NCHW (1, C, 1, 1) hold the same bytes). As TVM's
ConvertLayout, this leaves transposes at the graph's inputs and outputs only, for CNNs.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from .graph import Graph, GraphBuilder, Node


def identity(rank: int) -> tuple:
    return tuple(range(rank))


def channel_last(rank: int) -> tuple:
    """(0, 2, ..., rank-1, 1): NCHW axes in NHWC order."""
    return (0, *range(2, rank), 1)


@dataclass(frozen=True, eq=False)
class Value:
    """An ONNX tensor computed at run time: ``node`` holds its axes in the order ``perm``."""
    node: Node
    perm: tuple

    @property
    def rank(self) -> int:
        return len(self.perm)

    @property
    def onnx_shape(self) -> tuple:
        return tuple(self.node.shape[self.perm.index(a)] for a in range(self.rank))

    @property
    def dtype(self) -> str:
        return self.node.dtype

    def graph_axis(self, onnx_axis: int) -> int:
        """Where ONNX axis ``onnx_axis`` (negative counts from the end) is in the node."""
        return self.perm.index(onnx_axis % self.rank)

    def to_graph_order(self, per_onnx_axis) -> tuple:
        """A per-axis sequence given in ONNX order, rearranged into the node's order."""
        return tuple(per_onnx_axis[a] for a in self.perm)


def _non_unit_order(shape, perm) -> list:
    return [p for p, s in zip(perm, shape) if s != 1]


def _ident(name: str) -> str:
    s = re.sub(r"\W", "_", name).strip("_")
    return s or "t"


class Builder:
    """Makes the graph's nodes: constants (each ONNX constant once per layout), operators
    (shapes checked by building their tensors) and the layout changes between them (each
    made once per node and order)."""

    def __init__(self, name: str):
        self.graph_builder = GraphBuilder(name)
        self._consts: dict = {}
        self._layouts: dict = {}

    def input(self, shape, dtype: str, name: str) -> Node:
        return self.graph_builder.input(shape, name=name, dtype=dtype)

    def const(self, array: np.ndarray, name: str) -> Node:
        """A constant node holding ``array`` (made once per name, shape and bytes)."""
        array = np.ascontiguousarray(array)
        if array.ndim == 0:
            array = array.reshape(1)
        key = (name, array.shape, array.dtype.str, array.tobytes() if array.size <= 64 else id(array))
        node = self._consts.get(key)
        if node is None:
            node = Node("const", shape=array.shape, dtype=array.dtype.name, name=_ident(name),
                        init=lambda rng, a=array: a, seed=(0,))
            self._consts[key] = node
        return node

    def op(self, kind: str, inputs, name: str, **attrs) -> Node:
        return self.graph_builder.op(kind, list(inputs), _ident(name), **attrs)

    def reshape(self, node: Node, shape, name: str) -> Node:
        """``node`` reshaped (row-major); a reshape of a reshape starts from the first's input."""
        shape = tuple(int(s) for s in shape)
        if shape == node.shape:
            return node
        if math.prod(shape) != math.prod(node.shape):
            raise ValueError(f"reshape of '{node.name}' {node.shape} to {shape}: the sizes differ")
        while node.kind == "reshape":
            node = node.inputs[0]
        return node if shape == node.shape else self.op("reshape", [node], f"{name}_reshape", shape=shape)

    def to_layout(self, value: Value, perm: tuple) -> Node:
        """A node holding ``value``'s axes in the order ``perm`` (ONNX axes): the node itself,
        a free reshape when only axes of extent 1 move, else a transpose (made once)."""
        perm = tuple(perm)
        if perm == value.perm:
            return value.node
        shape = tuple(value.onnx_shape[a] for a in perm)
        if _non_unit_order(value.node.shape, value.perm) == _non_unit_order(shape, perm):
            return self.reshape(value.node, shape, value.node.name)
        key = (id(value.node), perm)
        node = self._layouts.get(key)
        if node is None:
            axes = tuple(value.perm.index(a) for a in perm)
            node = self.op("transpose", [value.node], f"{value.node.name}_T", axes=axes)
            self._layouts[key] = node
        return node

    def plain(self, value: Value) -> Node:
        """``value`` in ONNX's own axis order."""
        return self.to_layout(value, identity(value.rank))

    def graph(self, outputs, name: str) -> Graph:
        return self.graph_builder.graph(outputs, name)
