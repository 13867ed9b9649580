"""Graph passes that run before partitioning.

``fold_batch_norm``: an inference batch norm right after a conv, depthwise conv, transposed
conv or dense (whose only consumer it is), or after such an operator's bias_add, becomes
part of the weights: scale = gamma / sqrt(var + eps), w' = w · scale (per output channel),
followed by a bias_add of beta − (mean − bias) · scale. The graph keeps its inputs and
outputs; the folded weights are new constants computed from the old ones on first use.

``sink_reshapes``: an operator that maps elements (``OpDef.maps_elements``: GELU's Pow,
Mul, Add and Tanh, a residual add) applied to a reshaped tensor is computed in the shape
the tensor had before the reshape, and the reshape moves after it (its other operands
reshaped alike where their broadcasting carries over: a scalar, a vector along the
unchanged last axes, a constant of the whole shape, reshaped once, or a reshape of a tensor
of the same shape as the first operand's source); a reshape of a reshape reads the first
one's source. A dense layer exported as Gemm between reshapes (GPT-2's Conv1D:
``Reshape -> Gemm -> Reshape -> GELU``) then has its GELU right after it, where the
partitioner fuses it into its task, and the reshapes between anchors are views. A run-time
operand of the whole shape that is not such a reshape (a residual stream) stays: moving the
reshape would make it a view of that tensor and the add an epilogue of the dense layer, a
workload whose zero-trial program measured slower on GPT-2 (its residual add, at root,
was not vectorised) than the dense layer and a separate add.

``recognise_activations``: an activation that an exporter wrote as a chain of elementwise
operators of one tensor (GELU's erf form, ``x / √2, Erf, + 1, · x, · 0.5``, and its tanh
form, ``Pow, Mul, Add, Mul, Tanh, Add, Mul``: ``x`` read by several operators whose paths
meet again, then maybe a few more operators with one reader each) becomes the one operator
it computes (``gelu``, ``gelu_tanh``). The chain is recognised by what it computes, not by
how it is written: its operators, given only ``x`` and one-element constants, are evaluated
in float64 over a range of ``x`` and compared with each activation's reference. As one
operator the activation is the epilogue of the dense layer before it, computed in its
tiles with vector math; as a chain its expensive call (erf, tanh) is a stage of its own
that the dense layer's program cannot compute inside its tiles.

``copy_transposed_operands``: a product whose second operand is computed at run time and
read transposed (attention's Q·Kᵀ, the key matrix stored as it was made, tokens by
features) reads a transposed copy instead, made from the key matrix as stored by a kernel
of its own (``STARTS_KERNEL``): the product's vector loop then runs along the copy's rows
(tokens) and loads them whole, where it read each key's features along the reduction one
scalar at a time. Where the token count has
no whole vector tile (ViT's 197, a prime), the copy's rows run on to
``sketch_rules.annotation.padded_extent`` (216) in zeros and the product computes only
the real columns (``columns``), so its vector tiles may run past the end
(``sketch_rules.annotation.paddable``) instead of falling back to scalar code.

``use_winograd``: a 3×3, stride-1, undilated, ungrouped convolution with constant weights,
wide enough and with enough output tiles, becomes ``conv2d_winograd`` (``autosched.ops.winograd``), its
weight transformed once (``U = G g Gᵀ``) into a new constant, as TVM's CPU strategy and
its weight pre-transform do for NHWC.
"""
from __future__ import annotations

import math

import numpy as np

from sketch_rules.annotation import padded_extent

from ..ops import reference as ref
from ..ops import winograd
from ..ops.registry import BROADCAST, opdef
from .graph import Graph, Node

_FOLDABLE = ("conv", "depthwise_conv2d", "conv2d_transpose", "dense")


def _scaled_weight(kind: str, shape):
    def fn(w, gamma, var, eps):
        scale = gamma.astype(np.float64) / np.sqrt(var.astype(np.float64) + eps)
        w = w.astype(np.float64)
        if kind == "dense":                       # (out, in)
            return w * scale[:, None]
        if kind == "depthwise_conv2d":            # (kh, kw, C, M): out channel c·M + q
            return w * scale.reshape(shape[-2], shape[-1])
        return w * scale                          # (*kernel, CI, CO): the last axis
    return fn


def _single_use(graph: Graph, producer: Node, consumer: Node) -> bool:
    return not graph.is_output(producer) and all(c is consumer for c in graph.consumers(producer))


def _foldable(graph: Graph, bn: Node):
    """(anchor, its bias or None) when ``bn`` follows a conv/dense, possibly through a
    bias_add (ONNX convs carry their bias), each used only by the next; else None."""
    if bn.kind != "batch_norm" or bn.attrs.get("axis", -1) not in (-1, len(bn.shape) - 1):
        return None
    if not all(p.is_const for p in bn.inputs[1:]):
        return None
    src, bias = bn.inputs[0], None
    if (src.kind == "bias_add" and src.inputs[1].is_const and _single_use(graph, src, bn)
            and src.attrs.get("axis", -1) in (-1, len(src.shape) - 1)):
        src, bias, bn = src.inputs[0], src.inputs[1], src
    if src.kind in _FOLDABLE and src.inputs[1].is_const and _single_use(graph, src, bn):
        return src, bias
    return None


def _rewrite(graph: Graph, replace) -> Graph:
    """``graph`` with each operator node for which ``replace(node, mapped)`` returns a node
    replaced by it (``mapped(n)``: what an earlier node became); nodes reading a replaced
    one are copied, the others shared. ``graph`` itself when nothing was replaced."""
    new: dict[int, Node] = {}

    def mapped(n: Node) -> Node:
        return new.get(id(n), n)

    changed = False
    for node in graph.nodes:
        if not node.is_op:
            continue
        replacement = replace(node, mapped)
        if replacement is not None:
            new[id(node)] = replacement
            changed = True
            continue
        inputs = tuple(mapped(p) for p in node.inputs)
        if any(a is not b for a, b in zip(inputs, node.inputs)):
            new[id(node)] = Node(node.kind, inputs, dict(node.attrs), node.shape, node.dtype, node.name)
    if not changed:
        return graph
    return Graph(graph.inputs, [mapped(o) for o in graph.outputs], graph.name, graph.input_dtypes, graph.output_dtypes)


def _folded(graph: Graph, node: Node, mapped) -> Node | None:
    """The bias_add of the folded convolution/dense that replaces batch norm ``node``, or None."""
    found = _foldable(graph, node)
    if found is None:
        return None
    anchor, bias = found
    x, w = (mapped(p) for p in anchor.inputs)
    gamma, beta, mean, var = node.inputs[1:]
    eps = float(node.attrs.get("eps", 1e-5))
    weight_fn = _scaled_weight(anchor.kind, w.shape)
    w2 = Node("const", shape=w.shape, dtype=w.dtype, name=f"{w.name}_folded",
              init=lambda rng, w=w, g=gamma, v=var, f=weight_fn, e=eps: f(w.value, g.value, v.value, e))
    b2 = Node("const", shape=beta.shape, dtype=beta.dtype, name=f"{node.name}_shift",
              init=lambda rng, b=beta, g=gamma, m=mean, v=var, e=eps, c=bias:
              b.value - (m.value.astype(np.float64) - (0.0 if c is None else c.value)) * g.value
              / np.sqrt(v.value.astype(np.float64) + e))
    conv = Node(anchor.kind, (x, w2), dict(anchor.attrs), anchor.shape, anchor.dtype, anchor.name)
    return Node("bias_add", (conv, b2), {"axis": -1}, node.shape, node.dtype, f"{node.name}_folded")


#: the most nodes a diamond (``elementwise_diamonds``) may hold
_DIAMOND_LIMIT = 16


def elementwise_diamonds(graph: Graph) -> dict[int, Node]:
    """Each node of a diamond, mapped to the node its paths start from: a node read by
    several elementwise/broadcast operators whose paths all meet again (GELU as exporters
    write it; x·sigmoid(x)), the nodes of those paths up to where they meet (the last is
    the diamond's output), as Relay fuses up to the post-dominator."""
    order = {id(n): k for k, n in enumerate(graph.nodes)}
    member_of: dict[int, Node] = {}
    nodes = graph.nodes
    for p in graph.op_nodes:
        if len(graph.consumers(p)) < 2 or graph.is_output(p):
            continue
        region, inside = [], {id(p)}
        for m in nodes[order[id(p)] + 1:]:
            if not any(id(q) in inside for q in m.inputs):
                continue
            if opdef(m.kind).pattern > BROADCAST or len(region) == _DIAMOND_LIMIT:
                break                      # a path leaves the elementwise ops before they meet
            region.append(m)
            inside.add(id(m))
            upstream = [p] + region[:-1]
            if all(id(c) in inside for x in upstream for c in graph.consumers(x)) and \
                    not any(graph.is_output(x) for x in upstream):
                if not any(id(r) in member_of for r in region):
                    member_of.update((id(r), p) for r in region)
                break
    return member_of


#: the activations ``recognise_activations`` knows: node kind -> numpy reference
ACTIVATIONS = {"gelu": ref.gelu, "gelu_tanh": ref.gelu_tanh}
#: where the chains are compared with them: both tails, the bend, and zero
_PROBE = np.concatenate([np.linspace(-8.0, 8.0, 321), [-1e-3, 1e-3, 0.0]])
#: the most operators with one reader each that may follow a diamond within an activation
_TAIL_LIMIT = 3


def _function_of(source: Node, chain: list, x: np.ndarray):
    """What ``chain`` (operators in order, the last its output) computes from ``source = x``
    in float64, or None where it reads anything but ``source``, itself and one-element
    constants, or is not elementwise on ``source``'s shape."""
    values = {id(source): x}
    for node in chain:
        if not opdef(node.kind).maps_elements or tuple(node.shape) != tuple(source.shape):
            return None
        args = []
        for q in node.inputs:
            if id(q) in values:
                args.append(values[id(q)])
            elif q.is_const and math.prod(q.shape) == 1:
                args.append(np.float64(q.value.reshape(())))
            else:
                return None
        with np.errstate(all="ignore"):
            values[id(node)] = np.asarray(opdef(node.kind).reference(args, node.attrs), np.float64)
    return values[id(chain[-1])]


def _activation_chains(graph: Graph) -> dict[int, tuple[str, Node]]:
    """The output of each chain that computes one of ``ACTIVATIONS``, mapped to (its kind,
    the chain's input)."""
    member_of = elementwise_diamonds(graph)
    regions: dict[int, list] = {}
    sources: dict[int, Node] = {}
    for node in graph.nodes:                       # diamonds by source, their nodes in order
        source = member_of.get(id(node))
        if source is not None:
            regions.setdefault(id(source), []).append(node)
            sources[id(source)] = source
    found = {}
    for key, chain in regions.items():
        source = sources[key]
        if source.dtype != "float32":
            continue
        for _ in range(_TAIL_LIMIT + 1):
            y = _function_of(source, chain, _PROBE)
            if y is None:
                break
            kind = next((k for k, fn in ACTIVATIONS.items() if np.allclose(y, fn(_PROBE), rtol=1e-5, atol=1e-6)),
                        None)
            if kind is not None:
                found[id(chain[-1])] = (kind, source)
                break
            readers = graph.consumers(chain[-1])
            if len(readers) != 1 or graph.is_output(chain[-1]):
                break
            chain = chain + readers
    return found


def recognise_activations(graph: Graph) -> Graph:
    """``graph`` with each chain of elementwise operators that computes a known activation
    replaced by that one operator (see the module docstring; a new Graph, unchanged nodes
    shared with ``graph``)."""
    chains = _activation_chains(graph)

    def replace(node: Node, mapped) -> Node | None:
        if id(node) not in chains:
            return None
        kind, source = chains[id(node)]
        return Node(kind, (mapped(source),), {}, node.shape, node.dtype, node.name)
    return _rewrite(graph, replace)


def fold_batch_norm(graph: Graph) -> Graph:
    """``graph`` with batch norms folded into the preceding conv/dense weights (and bias) (a
    new Graph; nodes that do not change are shared with ``graph``)."""
    return _rewrite(graph, lambda node, mapped: _folded(graph, node, mapped))


def _reshaped(node: Node, shape: tuple, name: str) -> Node:
    """``node``'s elements in ``shape`` (C order): what a reshape of a reshape reads is the
    first one's source; a constant is reshaped once (a new constant)."""
    shape = tuple(shape)
    while node.kind == "reshape":
        node = node.inputs[0]
    if tuple(node.shape) == shape:
        return node
    if node.is_const:
        return Node("const", shape=shape, dtype=node.dtype, name=f"{node.name}_reshaped",
                    init=lambda rng, c=node, s=shape: c.value.reshape(s))
    return Node("reshape", (node,), {"shape": shape}, shape, node.dtype, name)


def _operand_before_reshape(operand: Node, before: tuple, after: tuple, name: str) -> Node | None:
    """``operand`` of an elementwise node of shape ``after``, for the same node computed in
    shape ``before`` (both C-order views of the same elements); None where its broadcasting
    does not carry over (it varies along an axis that the reshape changes)."""
    if tuple(operand.shape) == after:
        if operand.is_const or operand.kind == "reshape" and tuple(operand.inputs[0].shape) == before:
            return _reshaped(operand, before, name)
        return None     # a run-time tensor: left where it is (see the module docstring)
    core = tuple(operand.shape)
    while core and core[0] == 1:      # leading axes of extent 1 broadcast in any shape
        core = core[1:]
    if len(core) > len(before) or before[len(before) - len(core):] != after[len(after) - len(core):]:
        return None
    return operand if len(operand.shape) <= len(before) else _reshaped(operand, core or (1,), name)


class _ReshapeSinker:
    """``sink_reshapes``'s replacement of each node (see the module docstring). Where several
    operands are reshapes, the one whose source was computed last leads (the operator is
    computed in its source's shape): that source is the one most likely to have no other
    reader (a dense layer's output beside the residual stream), so the operator can join
    its group; the other operands are reshaped to match (views)."""

    def __init__(self, graph: Graph):
        #: a node's position in the graph; what replaces or copies a node takes its position
        self.position = {id(n): k for k, n in enumerate(graph.nodes)}

    def __call__(self, node: Node, mapped) -> Node | None:
        inputs = [mapped(p) for p in node.inputs]
        for p, q in zip(node.inputs, inputs):
            self.position.setdefault(id(q), self.position[id(p)])
        if node.kind == "reshape":
            return _reshaped(inputs[0], node.shape, node.name) if inputs[0].kind == "reshape" else None
        if not opdef(node.kind).maps_elements:
            return None
        after = tuple(node.shape)
        leads = [p for p in inputs if p.kind == "reshape" and tuple(p.shape) == after and p.inputs[0].is_op]
        if not leads:
            return None
        lead = max(leads, key=lambda p: self.position.get(id(p.inputs[0]), -1))
        before = tuple(lead.inputs[0].shape)
        operands = [_operand_before_reshape(p, before, after, f"{node.name}_in{k}") for k, p in enumerate(inputs)]
        if any(o is None for o in operands):
            return None
        inner = Node(node.kind, tuple(operands), dict(node.attrs), before, node.dtype, node.name)
        self.position[id(inner)] = self.position[id(node)]
        return Node("reshape", (inner,), {"shape": after}, after, node.dtype, f"{node.name}_reshaped")


def sink_reshapes(graph: Graph) -> Graph:
    """``graph`` with reshapes moved after the elementwise operators that read them (see the
    module docstring; a new Graph, unchanged nodes shared with ``graph``)."""
    return _rewrite(graph, _ReshapeSinker(graph))


#: Winograd pays off on wide layers (``autosched.ops.winograd``: its transforms cost about
#: 16/CO and 4/CI of the batched product); at 64 trials here (bias and ReLU fused, 64
#: channels and more) it was 1.1-2.1x the direct convolution on ResNet-50's 3x3 layers
WINOGRAD_MIN_CHANNELS = 64
#: the fewest output tiles per image (7x7 outputs make 16 tiles of 2x2)
WINOGRAD_MIN_TILES = 16
WINOGRAD_TILE = 2


def _winograd_candidate(node: Node, min_channels: int, min_tiles: int) -> bool:
    if node.kind != "conv" or not node.inputs[1].is_const or len(node.shape) != 4:
        return False
    a = node.attrs
    if not winograd.winograd_applicable(node.inputs[1].shape[:2], a["stride"], a.get("dilation", 1),
                                        a.get("groups", 1), len(node.inputs[0].shape)):
        return False
    _, oh, ow, co = node.shape
    ci = node.inputs[0].shape[3]
    tiles = -(-oh // WINOGRAD_TILE) * -(-ow // WINOGRAD_TILE)
    return min(ci, co) >= min_channels and tiles >= min_tiles


def use_winograd(graph: Graph, min_channels: int = WINOGRAD_MIN_CHANNELS,
                 min_tiles: int = WINOGRAD_MIN_TILES) -> Graph:
    """``graph`` with each convolution that qualifies (see the module docstring) replaced by
    ``conv2d_winograd`` on a transformed constant weight (a new Graph; nodes that do not
    change are shared with ``graph``)."""
    def replace(node: Node, mapped) -> Node | None:
        if not _winograd_candidate(node, min_channels, min_tiles):
            return None
        x, w = (mapped(p) for p in node.inputs)
        alpha = WINOGRAD_TILE + 2
        u = Node("const", shape=(alpha * alpha, *w.shape[2:]), dtype=w.dtype, name=f"{w.name}_winograd",
                 init=lambda rng, w=w: winograd.winograd_weight(w.value, WINOGRAD_TILE))
        attrs = {"padding": node.attrs["padding"], "pad_after": node.attrs.get("pad_after"), "tile": WINOGRAD_TILE}
        return Node("conv2d_winograd", (x, u), attrs, node.shape, node.dtype, node.name)
    return _rewrite(graph, replace)


#: the attribute of a node that starts a fused group of its own (``partition``'s rule 4)
STARTS_KERNEL = "starts_kernel"


def _transposed_copy(operand: Node) -> Node:
    """``operand`` (..., M, K) as a new (..., K, M') tensor: its last two axes swapped, its
    rows padded with zeros to M' = ``padded_extent(M)`` where M has no whole vector tile."""
    *batch, m, k = operand.shape
    axes = (*range(len(batch)), len(batch) + 1, len(batch))
    copy = Node("transpose", (operand,), {"axes": axes, STARTS_KERNEL: True}, (*batch, k, m), operand.dtype,
                f"{operand.name}_T")
    wide = padded_extent(m)
    if wide == m:
        return copy
    zeros = (0,) * len(copy.shape)
    return Node("pad", (copy,), {"pad_before": zeros, "pad_after": (*zeros[:-1], wide - m), "mode": "constant",
                                 "value": 0.0}, (*batch, k, wide), operand.dtype, f"{operand.name}_T_padded")


def copy_transposed_operands(graph: Graph) -> Graph:
    """``graph`` with each matmul or batch_matmul that reads a run-time operand transposed
    reading a transposed (and maybe padded) copy of it (see the module docstring); nodes
    that do not change are shared with ``graph``."""
    def replace(node: Node, mapped) -> Node | None:
        if node.kind not in ("matmul", "batch_matmul") or not node.attrs.get("transpose_b") \
                or node.inputs[1].is_const or node.attrs.get("columns") is not None:
            return None
        a, b = (mapped(p) for p in node.inputs)
        attrs = dict(node.attrs, transpose_b=False, columns=b.shape[-2])
        return Node(node.kind, (a, _transposed_copy(b)), attrs, node.shape, node.dtype, node.name)
    return _rewrite(graph, replace)
