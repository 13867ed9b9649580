"""A small graph IR for networks: operator nodes with attributes and inputs, graph inputs,
and constants (weights) whose values are made on demand from a seed.

``GraphBuilder`` composes layers (``conv2d``, ``batch_norm``, ``dense``...) and infers each
node's shape by building its tensor with the ``autosched.ops`` tensor functions on
placeholders, so shapes follow exactly the operators that will run. Data is channel-last
(NWC, NHWC, NDHWC); conv weights are (*kernel, CI/groups, CO), dense weights (out, in).

A constant's value is drawn from ``numpy.random.default_rng([seed, index])`` (index: its
creation order), so that a network's weights depend only on its seed, not on which
constants are looked at first; a big network builds its graph without materialising them.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

import ir
from ir.tensor import as_int
from ..ops.registry import opdef


@dataclass(eq=False)
class Node:
    """One value of the graph: a graph input ("input"), a constant ("const") or the output
    of an operator (``kind`` in ``OPDEFS``)."""
    kind: str
    inputs: tuple = ()
    attrs: dict = field(default_factory=dict)
    shape: tuple = ()
    dtype: str = "float32"
    name: str = ""
    #: constants: how to make the value — ``init(rng) -> ndarray`` — and the rng seed
    init: Callable | None = None
    seed: tuple | None = None
    _value: np.ndarray | None = field(default=None, repr=False)

    @property
    def is_input(self) -> bool:
        return self.kind == "input"

    @property
    def is_const(self) -> bool:
        return self.kind == "const"

    @property
    def is_op(self) -> bool:
        return self.kind not in ("input", "const")

    @property
    def value(self) -> np.ndarray:
        """A constant's array (made once, on first use)."""
        if not self.is_const:
            raise ValueError(f"node '{self.name}' ({self.kind}) is not a constant")
        if self._value is None:
            rng = np.random.default_rng(list(self.seed or (0,)))
            v = np.ascontiguousarray(np.asarray(self.init(rng), dtype=self.dtype))
            if v.shape != tuple(self.shape):
                raise ValueError(f"constant '{self.name}': init made shape {v.shape}, expected {self.shape}")
            self._value = v
        return self._value

    def __repr__(self) -> str:
        ins = ", ".join(p.name for p in self.inputs)
        return f"Node({self.name}: {self.kind}({ins}) -> {list(self.shape)})"


def _interface_dtypes(dtypes, nodes, what: str) -> list:
    if dtypes is None:
        return [n.dtype for n in nodes]
    if len(dtypes) != len(nodes):
        raise ValueError(f"{what} dtypes {list(dtypes)} for {len(nodes)} {what}s")
    return list(dtypes)


def topological_order(outputs: Sequence[Node]) -> list[Node]:
    """Every node reachable from ``outputs``, producers before consumers, in a stable order."""
    order: list[Node] = []
    seen: set[int] = set()
    for root in outputs:
        stack = [(root, False)]
        while stack:
            node, expanded = stack.pop()
            if expanded:
                order.append(node)
                continue
            if id(node) in seen:
                continue
            seen.add(id(node))
            stack.append((node, True))
            for p in reversed(node.inputs):
                if id(p) not in seen:
                    stack.append((p, False))
    return order


class Graph:
    """A network: ``inputs`` (graph input nodes, in call order) and ``outputs``.
    ``input_dtypes``, ``output_dtypes``: the dtypes of the model's interface where they differ
    from the nodes' (a float16 model computed in float32): a run returns its outputs in
    ``output_dtypes`` and ``random_inputs`` are made in ``input_dtypes``; default the nodes' own."""

    def __init__(self, inputs: Sequence[Node], outputs: Sequence[Node], name: str = "network",
                 input_dtypes: Sequence[str] | None = None, output_dtypes: Sequence[str] | None = None):
        self.inputs = list(inputs)
        self.outputs = list(outputs)
        self.name = name
        self.input_dtypes = _interface_dtypes(input_dtypes, self.inputs, f"graph '{name}': input")
        self.output_dtypes = _interface_dtypes(output_dtypes, self.outputs, f"graph '{name}': output")
        self.nodes = topological_order(self.outputs)
        ids = {id(n) for n in self.nodes}
        for n in self.nodes:
            if n.is_input and not any(n is i for i in self.inputs):
                raise ValueError(f"graph '{name}': input node '{n.name}' is not in the inputs list")
        for i in self.inputs:
            if id(i) not in ids:
                raise ValueError(f"graph '{name}': input '{i.name}' is not used by any output")
        self._consumers: dict[int, list[Node]] = {id(n): [] for n in self.nodes}
        for n in self.nodes:
            for p in n.inputs:
                if n not in self._consumers[id(p)]:
                    self._consumers[id(p)].append(n)

    @property
    def op_nodes(self) -> list[Node]:
        return [n for n in self.nodes if n.is_op]

    @property
    def constants(self) -> list[Node]:
        return [n for n in self.nodes if n.is_const]

    def consumers(self, node: Node) -> list[Node]:
        return self._consumers[id(node)]

    def is_output(self, node: Node) -> bool:
        return any(node is o for o in self.outputs)

    def n_params(self) -> int:
        return sum(math.prod(c.shape) for c in self.constants)

    def random_inputs(self, seed: int = 0) -> list[np.ndarray]:
        """Standard-normal floats; integers (e.g. token ids) uniform in ``[0, attrs["high"])``
        (default 2), the range an importer records for indices into a table."""
        rng = np.random.default_rng(seed)
        return [rng.integers(0, i.attrs.get("high", 2), size=i.shape).astype(dtype)
                if np.issubdtype(np.dtype(i.dtype), np.integer) else rng.standard_normal(i.shape).astype(dtype)
                for i, dtype in zip(self.inputs, self.input_dtypes)]

    def flop_count(self) -> int:
        """Floating-point operations of one run, as the operators' ComputeDAGs count them."""
        total = 0
        for n in self.op_nodes:
            tensors = [ir.placeholder(p.shape, p.dtype, name=f"x{k}") for k, p in enumerate(n.inputs)]
            out = opdef(n.kind).build(tensors, n.attrs, n.kind)
            total += ir.ComputeDAG(tensors + [out]).flop_count()
        return total

    def summary(self) -> str:
        kinds: dict[str, int] = {}
        for n in self.op_nodes:
            kinds[n.kind] = kinds.get(n.kind, 0) + 1
        ops_txt = ", ".join(f"{k} {v}" for k, v in sorted(kinds.items(), key=lambda kv: -kv[1]))
        return (f"{self.name}: {len(self.op_nodes)} operators ({ops_txt}); {self.n_params() / 1e6:.2f} M parameters; "
                f"inputs {[list(i.shape) for i in self.inputs]}, outputs {[list(o.shape) for o in self.outputs]}")

    def __repr__(self) -> str:
        return f"Graph({self.name}, {len(self.op_nodes)} operators)"


# initialisers ------------------------------------------------------------------------------

def normal(std: float, mean: float = 0.0) -> Callable:
    return lambda shape: (lambda rng: mean + std * rng.standard_normal(shape))


def uniform(lo: float, hi: float) -> Callable:
    return lambda shape: (lambda rng: rng.uniform(lo, hi, shape))


def constant(value: float) -> Callable:
    return lambda shape: (lambda rng: np.full(shape, value))


class GraphBuilder:
    """Builds a ``Graph`` layer by layer with random weights from ``seed``::

        b = GraphBuilder("tiny", seed=0)
        x = b.input((1, 8, 8, 3))
        y = b.relu(b.batch_norm(b.conv2d(x, 16, 3, padding=1)))
        graph = b.graph([y])

    Weights: He-normal for conv and dense weights (std sqrt(2 / fan_in)), batch-norm
    gamma ~ U(``gamma``), beta ~ N(0, 0.1), mean ~ N(0, 0.1), var ~ U(0.5, 1.5); biases N(0, 0.05).
    """

    def __init__(self, name: str = "network", seed: int = 0, dtype: str = "float32"):
        self.name = name
        self.seed = seed
        self.dtype = dtype
        self.inputs: list[Node] = []
        self._n_const = 0
        self._names: dict[str, int] = {}

    def _name(self, base: str) -> str:
        k = self._names.get(base, 0)
        self._names[base] = k + 1
        return base if k == 0 else f"{base}_{k}"

    # leaves -------------------------------------------------------------------------------
    def input(self, shape, name: str = "data", dtype: str | None = None, high: int | None = None) -> Node:
        """A graph input; integer inputs take values in ``[0, high)`` (see ``Graph.random_inputs``)."""
        node = Node("input", shape=tuple(int(s) for s in shape), dtype=dtype or self.dtype, name=self._name(name),
                    attrs={} if high is None else {"high": int(high)})
        self.inputs.append(node)
        return node

    def const(self, shape, init: Callable, name: str = "w") -> Node:
        """A constant made by ``init(shape)(rng)`` (see ``normal``, ``uniform``, ``constant``)."""
        shape = tuple(int(s) for s in shape)
        node = Node("const", shape=shape, dtype=self.dtype, name=self._name(name), init=init(shape),
                    seed=(self.seed, self._n_const))
        self._n_const += 1
        return node

    def derived_const(self, shape, fn: Callable, sources: Sequence[Node], name: str) -> Node:
        """A constant computed from other constants' values: ``fn(*values)`` (graph passes)."""
        node = Node("const", shape=tuple(shape), dtype=self.dtype, name=name,
                    init=lambda rng: fn(*[s.value for s in sources]), seed=(self.seed, -1))
        return node

    def op(self, kind: str, inputs: Sequence[Node], name: str | None = None, **attrs) -> Node:
        """A node of operator ``kind``; its shape comes from building its tensor. An operator
        that leaves its input as it is (a pad or slice of nothing) is no node: the input is
        returned (a subgraph whose output is one of its inputs has no ComputeDAG)."""
        d = opdef(kind)
        if d.arity is not None and len(inputs) != d.arity:
            raise ValueError(f"{kind} takes {d.arity} inputs, got {len(inputs)}")
        tensors = [ir.placeholder(p.shape, p.dtype, name=f"x{k}") for k, p in enumerate(inputs)]
        try:
            out = d.build(tensors, attrs, kind)
        except TypeError as err:
            if "dtype mismatch" not in str(err):
                raise
            raise ValueError(f"{kind} {name or ''} of inputs {[p.name for p in inputs]}: their element types "
                             f"{[p.dtype for p in inputs]} disagree ({err})") from None
        for p, t in zip(inputs, tensors):
            if out is t:
                return p
        return Node(kind, tuple(inputs), dict(attrs), tuple(out.shape), out.dtype, self._name(name or kind))

    def graph(self, outputs: Sequence[Node], name: str | None = None) -> Graph:
        return Graph(self.inputs, list(outputs), name or self.name)

    # layers -------------------------------------------------------------------------------
    def conv(self, x: Node, channels: int, kernel, stride=1, padding=0, dilation=1, groups=1,
             name: str = "conv") -> Node:
        """A 1-3d convolution (from ``x``'s rank) with a He-normal weight, no bias."""
        sd = len(x.shape) - 2
        k = (kernel,) * sd if as_int(kernel) is not None else tuple(kernel)
        cig = x.shape[-1] // groups
        w = self.const((*k, cig, channels), normal(math.sqrt(2.0 / (cig * math.prod(k)))), f"{name}_weight")
        return self.op("conv", [x, w], name, stride=stride, padding=padding, dilation=dilation, groups=groups)

    conv2d = conv
    conv3d = conv

    def depthwise_conv2d(self, x: Node, kernel: int, stride=1, padding=0, multiplier: int = 1,
                         name: str = "dwconv") -> Node:
        w = self.const((kernel, kernel, x.shape[-1], multiplier), normal(math.sqrt(2.0 / (kernel * kernel))),
                       f"{name}_weight")
        return self.op("depthwise_conv2d", [x, w], name, stride=stride, padding=padding)

    def conv2d_transpose(self, x: Node, channels: int, kernel: int, stride=1, padding=0,
                         name: str = "deconv") -> Node:
        ci = x.shape[-1]
        w = self.const((kernel, kernel, ci, channels), normal(math.sqrt(2.0 / (ci * kernel * kernel / 4))),
                       f"{name}_weight")
        return self.op("conv2d_transpose", [x, w], name, stride=stride, padding=padding)

    def dense(self, x: Node, units: int, bias: bool = True, name: str = "dense", std: float | None = None) -> Node:
        w = self.const((units, x.shape[-1]), normal(std if std is not None else math.sqrt(2.0 / x.shape[-1])),
                       f"{name}_weight")
        y = self.op("dense", [x, w], name)
        return self.bias_add(y, name=f"{name}_bias") if bias else y

    def bias_add(self, x: Node, axis: int = -1, name: str = "bias") -> Node:
        b = self.const((x.shape[axis],), normal(0.05), name)
        return self.op("bias_add", [x, b], f"{name}_add", axis=axis)

    def batch_norm(self, x: Node, gamma=(0.8, 1.2), eps: float = 1e-5, name: str = "bn") -> Node:
        c = (x.shape[-1],)
        params = [self.const(c, uniform(*gamma), f"{name}_gamma"), self.const(c, normal(0.1), f"{name}_beta"),
                  self.const(c, normal(0.1), f"{name}_mean"), self.const(c, uniform(0.5, 1.5), f"{name}_var")]
        return self.op("batch_norm", [x, *params], name, eps=eps, axis=-1)

    def layer_norm(self, x: Node, eps: float = 1e-5, name: str = "ln") -> Node:
        c = (x.shape[-1],)
        gamma = self.const(c, uniform(0.8, 1.2), f"{name}_gamma")
        beta = self.const(c, normal(0.05), f"{name}_beta")
        return self.op("layer_norm", [x, gamma, beta], name, eps=eps)

    def relu(self, x: Node) -> Node:
        return self.op("relu", [x])

    def relu6(self, x: Node) -> Node:
        return self.op("relu6", [x])

    def gelu(self, x: Node) -> Node:
        return self.op("gelu", [x])

    def tanh(self, x: Node) -> Node:
        return self.op("tanh", [x])

    def sigmoid(self, x: Node) -> Node:
        return self.op("sigmoid", [x])

    def scale(self, x: Node, value: float) -> Node:
        return self.op("scale", [x], value=float(value))

    def add(self, a: Node, b: Node) -> Node:
        return self.op("add", [a, b])

    def multiply(self, a: Node, b: Node) -> Node:
        return self.op("multiply", [a, b])

    def max_pool(self, x: Node, kernel, stride=1, padding=0) -> Node:
        return self.op("pool", [x], "max_pool", kernel=kernel, stride=stride, padding=padding, pool_type="max")

    def avg_pool(self, x: Node, kernel, stride=1, padding=0) -> Node:
        return self.op("pool", [x], "avg_pool", kernel=kernel, stride=stride, padding=padding, pool_type="avg")

    def global_avg_pool(self, x: Node) -> Node:
        return self.op("global_pool", [x], "global_avg_pool", pool_type="avg")

    def softmax(self, x: Node) -> Node:
        return self.op("softmax", [x])

    def reshape(self, x: Node, shape) -> Node:
        return self.op("reshape", [x], shape=tuple(shape))

    def transpose(self, x: Node, axes) -> Node:
        return self.op("transpose", [x], axes=tuple(axes))

    def matmul(self, a: Node, b: Node, transpose_a: bool = False, transpose_b: bool = False) -> Node:
        return self.op("matmul", [a, b], transpose_a=transpose_a, transpose_b=transpose_b)

    def batch_matmul(self, a: Node, b: Node, transpose_a: bool = False, transpose_b: bool = False) -> Node:
        return self.op("batch_matmul", [a, b], transpose_a=transpose_a, transpose_b=transpose_b)
