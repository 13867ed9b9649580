"""Partition a network into fused subgraphs, and the subgraphs into tuning tasks.

Before fusing, the graph passes fold batch norms into their convolutions, move reshapes after
the elementwise operators that read them and make GELU written as a chain of operators one
operator (``passes.sink_reshapes``, ``passes.recognise_activations``), make products read a
transposed copy of a run-time operand they read transposed (``passes.copy_transposed_operands``),
then compute the qualifying 3x3 convolutions by Winograd's algorithm.

The fusion rules follow Relay's FuseOps (patterns in ``ops.registry``), walking the nodes in
topological order; a node joins a producer's group only when that producer is the group's
output and has no other consumer (so every group has one output and the groups form a DAG):

1. an anchor (conv, dense, matmul, batch_matmul) starts a group and absorbs the chain of
   elementwise/broadcast consumers after it (bias, batch norm, residual add, activation);
2. elementwise, broadcast and injective nodes join an elementwise/injective producer group
   (elementwise ones also an anchor group, which they prefer), making chains of cheap ops
   one kernel;
3. a reduction (softmax, layer norm, pooling) starts a group and takes in the
   elementwise/injective groups that feed only it (e.g. the residual add before a layer norm);
4. a node marked ``STARTS_KERNEL`` (the transposed copy that ``passes.copy_transposed_operands``
   makes) joins no producer's group: it reads its source as stored; joined to the chain
   that made it, it would recompute that chain's index arithmetic per element;
5. where a node's consumers are several elementwise/broadcast nodes whose paths all meet
   again (a diamond, ``passes.elementwise_diamonds``: x·sigmoid(x); GELU unless recognised),
   the nodes of those paths up to where they meet join the node's group (an anchor's or an
   elementwise one's), as Relay fuses up to the post-dominator.

Each group becomes a ComputeDAG built with the ``autosched.ops`` tensor functions: its
external inputs are placeholders in order of first use (constants marked ``constant`` so
that layout rewrite may repack them), its output the group's last node. Subgraphs with the
same ``ComputeDAG.workload_key()`` are one workload, whose weight is how many times it
occurs. Workloads with an anchor or a reduction are the tuning tasks; the others ("simple":
only elementwise or data movement) run with a default schedule, as TVM's
``include_simple_tasks=False``.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import ir
from ir.dtype import itemsize
from .graph import Graph, Node
from ..ops.registry import ANCHOR, BROADCAST, ELEMWISE, INJECTIVE, PATTERN_NAMES, REDUCE, opdef
from .passes import STARTS_KERNEL, copy_transposed_operands, elementwise_diamonds
from .passes import fold_batch_norm as _fold_batch_norm
from .passes import recognise_activations as _recognise_activations
from .passes import sink_reshapes as _sink_reshapes
from .passes import use_winograd as _use_winograd


@dataclass(eq=False)
class Subgraph:
    """One fused group of nodes: ``nodes`` (topological order; the last is the output),
    ``inputs`` (the external nodes its placeholders stand for, in argument order), its
    ``dag`` and the ``workload`` it belongs to."""
    index: int
    nodes: list
    pattern: int
    inputs: list = field(default_factory=list)
    dag: object = None
    workload: "Workload" = None

    @property
    def output(self) -> Node:
        return self.nodes[-1]

    @property
    def name(self) -> str:
        return "fused_" + "_".join(n.kind for n in self.nodes)

    def __repr__(self) -> str:
        return f"Subgraph({self.index}: {self.name} -> {list(self.output.shape)})"


@dataclass(eq=False)
class Workload:
    """Unique subgraphs by workload key: ``dag`` (the first occurrence's), ``weight`` (how
    many subgraphs share it), whether it is a tuning task (``tunable``)."""
    index: int
    name: str
    dag: object
    workload_key: str
    pattern: int
    subgraphs: list = field(default_factory=list)

    @property
    def weight(self) -> int:
        return len(self.subgraphs)

    @property
    def tunable(self) -> bool:
        return self.pattern in (ANCHOR, REDUCE)

    @property
    def flops(self) -> int:
        return self.dag.flop_count()

    @property
    def desc(self) -> str:
        """The name and the shapes of the main node's inputs (the anchor's, else the first node's)."""
        nodes = self.subgraphs[0].nodes
        main = next((n for n in nodes if opdef(n.kind).pattern == ANCHOR), nodes[0])
        shapes = ",".join("x".join(str(s) for s in p.shape) for p in main.inputs if not p.is_const or
                          opdef(main.kind).pattern == ANCHOR)
        return f"{self.name}({shapes})"

    def search_task(self, layout_rewrite: bool = True, target=None) -> ir.SearchTask:
        """The task of tuning this workload for ``target`` (an ``ir.Target`` or its spelling;
        default this CPU)."""
        return ir.SearchTask(self.dag, target=target, layout_rewrite=layout_rewrite, desc=self.desc)

    def __repr__(self) -> str:
        return f"Workload({self.index}: {self.desc} x{self.weight}, {PATTERN_NAMES[self.pattern]})"


class PartitionedGraph:
    """A network split into ``subgraphs`` (topological order), their unique ``workloads``
    and the ``tasks`` to tune (the workloads with an anchor or a reduction, or all with
    ``include_simple_tasks``). ``graph`` is the graph that runs (after passes such as
    batch-norm folding); ``original`` the one given, which the numpy reference runs."""

    def __init__(self, graph: Graph, original: Graph, subgraphs: list, workloads: list,
                 include_simple_tasks: bool = False):
        self.graph = graph
        self.original = original
        self.subgraphs = subgraphs
        self.workloads = workloads
        self.tasks = [w for w in workloads if w.tunable or include_simple_tasks]

    @property
    def name(self) -> str:
        return self.original.name

    @property
    def constant_bytes(self) -> int:
        """The bytes of constants (weights) its kernels read in one run of the network."""
        return sum(w.weight * sum(math.prod(t.shape) * itemsize(t.dtype) for t in w.dag.tensors
                                  if isinstance(t.op, ir.PlaceholderOp) and t.op.constant)
                   for w in self.workloads)

    def task_weights(self) -> list[int]:
        return [t.weight for t in self.tasks]

    def summary(self) -> str:
        lines = [f"{self.name}: {len(self.subgraphs)} subgraphs, {len(self.workloads)} unique, "
                 f"{len(self.tasks)} tasks"]
        for k, t in enumerate(self.tasks):
            lines.append(f"  task {k:3d}: {t.desc} x{t.weight} ({t.flops / 1e6:.1f} MFLOP)")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"PartitionedGraph({self.name}: {len(self.subgraphs)} subgraphs, {len(self.tasks)} tasks)"


def _ident(name: str) -> str:
    s = re.sub(r"\W", "_", name)
    return s if s and not s[0].isdigit() else f"t_{s}"


#: the most operators one fused group holds (Relay's ``max_fuse_depth``): a longer chain of
#: elementwise operators is cut, so that no kernel's expressions nest thousands deep
MAX_FUSE_DEPTH = 64


def _fuse_groups(graph: Graph) -> list[list[Node]]:
    """The fused groups of ``graph``'s operator nodes (rules in the module docstring),
    each in topological order, ordered by their outputs."""
    order = {id(n): k for k, n in enumerate(graph.nodes)}
    group_of: dict[int, dict] = {}
    diamond_of = elementwise_diamonds(graph)

    def eligible(p: Node, n: Node) -> bool:
        g = group_of.get(id(p))
        return (g is not None and g["nodes"][-1] is p and not graph.is_output(p)
                and all(c is n for c in graph.consumers(p)))

    for n in graph.op_nodes:
        pat = opdef(n.kind).pattern
        producers = [p for p in n.inputs if p.is_op]
        joined = None
        source = diamond_of.get(id(n))
        if source is not None and group_of[id(source)]["pattern"] in (ELEMWISE, BROADCAST, INJECTIVE, ANCHOR):
            joined = group_of[id(source)]
        elif pat <= INJECTIVE and not n.attrs.get(STARTS_KERNEL):
            # an anchor's group first: its epilogue saves a pass over memory, a reshape's group a view
            for p in sorted(producers, key=lambda p: group_of[id(p)]["pattern"] != ANCHOR):
                g = group_of.get(id(p))
                if not eligible(p, n):
                    continue
                if g["pattern"] <= INJECTIVE or (g["pattern"] == ANCHOR and pat <= BROADCAST):
                    joined = g
                    break
        if joined is not None and len(joined["nodes"]) >= MAX_FUSE_DEPTH:
            joined = None
        if joined is not None:
            joined["nodes"].append(n)
            joined["pattern"] = max(joined["pattern"], pat)
            group_of[id(n)] = joined
            continue
        g = {"nodes": [n], "pattern": pat}
        if pat == REDUCE:
            for p in producers:
                if eligible(p, n) and group_of[id(p)]["pattern"] <= INJECTIVE and \
                        len(group_of[id(p)]["nodes"]) < MAX_FUSE_DEPTH:
                    src = group_of[id(p)]
                    g["nodes"] = sorted(src["nodes"] + g["nodes"], key=lambda x: order[id(x)])
                    for m in src["nodes"]:
                        group_of[id(m)] = g
        group_of[id(n)] = g
    groups, seen = [], set()
    for n in graph.op_nodes:
        g = group_of[id(n)]
        if id(g) not in seen:
            seen.add(id(g))
            groups.append(g)
    groups.sort(key=lambda g: order[id(g["nodes"][-1])])
    return [(g["nodes"], g["pattern"]) for g in groups]


def subgraph_dag(nodes: list) -> tuple[ir.ComputeDAG, list]:
    """The ComputeDAG of a fused group and the external nodes of its placeholders."""
    tensors: dict[int, ir.Tensor] = {}
    inputs: list[tuple[Node, ir.Tensor]] = []
    used: dict[str, int] = {}
    for node in nodes:
        args = []
        for p in node.inputs:
            if id(p) not in tensors:
                t = ir.placeholder(p.shape, p.dtype, name=_ident(p.name) + f"_{len(inputs)}",
                                   constant=p.is_const)
                tensors[id(p)] = t
                inputs.append((p, t))
            args.append(tensors[id(p)])
        k = used.get(node.kind, 0)
        used[node.kind] = k + 1
        tensors[id(node)] = opdef(node.kind).build(args, node.attrs, node.kind if k == 0 else f"{node.kind}_{k}")
    dag = ir.ComputeDAG([t for _, t in inputs] + [tensors[id(nodes[-1])]])
    return dag, [p for p, _ in inputs]


def partition(graph: Graph, fold_batch_norm: bool = True, include_simple_tasks: bool = False,
              winograd: bool = True) -> PartitionedGraph:
    """Fuse ``graph`` into subgraphs and deduplicate them into workloads and tasks.
    ``fold_batch_norm``: first fold each batch norm that follows a conv or dense into its
    weights and a bias (what Relay's FoldScaleAxis and FoldConstant do). ``winograd``: then
    compute the 3×3 stride-1 convolutions that qualify by Winograd's algorithm
    (``passes.use_winograd``); a tuning log made one way does not fit the other's tasks."""
    if hasattr(graph, "open_axes"):   # a graph.DynamicModel: no shapes to partition yet
        raise ValueError(f"{graph!r} leaves input axes open ({graph.describe_open_axes()}); partition the model of "
                         "one set of shapes (from_onnx(path, input_shapes={...})), or run it through "
                         "model.executor(), which imports it per shape")
    runnable = _fold_batch_norm(graph) if fold_batch_norm else graph
    runnable = copy_transposed_operands(_recognise_activations(_sink_reshapes(runnable)))
    runnable = _use_winograd(runnable) if winograd else runnable
    subgraphs, workloads, by_key = [], [], {}
    for nodes, pattern in _fuse_groups(runnable):
        dag, inputs = subgraph_dag(nodes)
        sg = Subgraph(len(subgraphs), nodes, pattern, inputs, dag)
        key = dag.workload_key()
        w = by_key.get(key)
        if w is None:
            w = by_key[key] = Workload(len(workloads), sg.name, dag, key, pattern)
            workloads.append(w)
        w.subgraphs.append(sg)
        sg.workload = w
        subgraphs.append(sg)
    return PartitionedGraph(runnable, graph, subgraphs, workloads, include_simple_tasks)
