"""ComputeDAG: the operations of one subgraph, their access maps, flop count and identity
(the predicates the sketch rules ask are in ``sketch_rules/analysis.py``, on States)."""
from __future__ import annotations

import hashlib
from functools import cached_property
from typing import Sequence

import networkx as nx

from . import dtype as dt
from . import expr as E
from .index_check import check_reads
from .expr import expr_str
from .state import State
from .tensor import ComputeOp, Operation, PlaceholderOp, Tensor

def _collect_ops(tensors: Sequence[Tensor]) -> list[Operation]:
    """Operations reachable from ``tensors`` in a stable topological (post-)order."""
    order: list[Operation] = []
    state: dict[int, int] = {}  # 1 = on stack, 2 = done
    for root in tensors:
        stack = [(root.op, False)]
        while stack:
            op, expanded = stack.pop()
            if expanded:
                state[id(op)] = 2
                order.append(op)
                continue
            if state.get(id(op)) is not None:
                continue
            state[id(op)] = 1
            stack.append((op, True))
            for t in reversed(op.input_tensors):
                if state.get(id(t.op)) is None:
                    stack.append((t.op, False))
    return order


class ComputeDAG:
    """The computation of one task. ``tensors`` lists its inputs and outputs (TVM convention):
    they are the kernel's arguments, in that order; other computes become internal buffers."""

    def __init__(self, tensors: Sequence[Tensor]):
        tensors = list(tensors)
        if not tensors:
            raise ValueError("ComputeDAG needs a non-empty list of tensors (inputs and outputs)")
        for pos, t in enumerate(tensors):
            if not isinstance(t, Tensor):
                raise TypeError(f"ComputeDAG: item {pos} is {type(t).__name__}, expected an ir.Tensor")
        if len({id(t) for t in tensors}) != len(tensors):
            raise ValueError("ComputeDAG: a tensor appears twice in the tensor list")
        self.tensors: list[Tensor] = tensors
        self.ops: list[Operation] = _collect_ops(tensors)
        arg_ids = {id(t.op) for t in tensors}
        for op in self.ops:
            if isinstance(op, PlaceholderOp) and id(op) not in arg_ids:
                raise ValueError(f"ComputeDAG: placeholder '{op.name}' is read but is not in the tensor list; "
                                 "pass every input tensor as well as the outputs")
        if not any(isinstance(t.op, ComputeOp) for t in tensors):
            raise ValueError("ComputeDAG: the tensor list holds no compute tensor (no output)")
        self.graph = nx.DiGraph()
        for op in self.ops:
            self.graph.add_node(op, name=op.name)
        for op in self.ops:
            for t in op.input_tensors:
                self.graph.add_edge(t.op, op)
        self._index = {id(op): i for i, op in enumerate(self.ops)}
        self._workload_key: str | None = None
        check_reads(self.compute_ops)

    def __reduce__(self):
        # rebuilt from its tensors, so that identity-keyed tables stay right after pickling
        return (ComputeDAG, (self.tensors,))

    # structure -----------------------------------------------------------------------
    @property
    def inputs(self) -> list[Tensor]:
        return [t for t in self.tensors if isinstance(t.op, PlaceholderOp)]

    @property
    def outputs(self) -> list[Tensor]:
        return [t for t in self.tensors if isinstance(t.op, ComputeOp)]

    @property
    def compute_ops(self) -> list[ComputeOp]:
        return [op for op in self.ops if isinstance(op, ComputeOp)]

    def op_index(self, op: Operation) -> int:
        return self._index[id(op)]

    def is_output(self, op: Operation) -> bool:
        return any(t.op is op for t in self.outputs)

    def consumers(self, op: Operation) -> list[Operation]:
        return sorted(self.graph.successors(op), key=self.op_index)

    def producers(self, op: Operation) -> list[Operation]:
        return sorted(self.graph.predecessors(op), key=self.op_index)

    # access maps -----------------------------------------------------------------------
    def read_accesses(self, op: Operation) -> dict[Tensor, list[tuple[E.Expr, ...]]]:
        """For each tensor ``op`` reads, the index tuples of its reads (in body order)."""
        return self._read_accesses.get(id(op), {})

    def write_access(self, op: Operation) -> tuple[E.Expr, ...]:
        """The index tuple ``op`` writes: its own space axes."""
        return tuple(op.axis) if isinstance(op, ComputeOp) else ()

    @cached_property
    def _read_accesses(self) -> dict[int, dict[Tensor, list[tuple[E.Expr, ...]]]]:
        out: dict[int, dict[Tensor, list]] = {}
        for op in self.compute_ops:
            reads: dict[Tensor, list] = {}
            for e in E.walk(op.body):
                if isinstance(e, E.TensorRead):
                    reads.setdefault(e.tensor, []).append(e.indices)
            out[id(op)] = reads
        return out

    # cost ------------------------------------------------------------------------------
    def flop_count(self) -> int:
        """Floating-point operations of one run: arithmetic, comparisons and math calls on
        float values, a reduction's combine counting one per element. A stage whose
        ``attrs["flop_count"]`` is set counts that instead (a fast algorithm reports the
        operations of the computation it replaces, e.g. Winograd convolution those of the
        direct one, so that GFLOPS compare across algorithms)."""
        total = 0
        for op in self.compute_ops:
            if "flop_count" in op.attrs:
                total += int(op.attrs["flop_count"])
                continue
            per_point = _float_ops(op.body)
            if isinstance(op.body, E.Reduce):
                per_point += 1 if dt.is_float(op.dtype) else 0
            points = _prod(op.shape) * _prod(ax.extent for ax in op.reduce_axis)
            total += per_point * points
        return total

    # identity and printing --------------------------------------------------------
    def canonical_text(self) -> str:
        """The computation with names replaced by positions: equal for equal computations."""
        lines = []
        for op in self.ops:
            idx = self.op_index(op)
            arg = next((p for p, t in enumerate(self.tensors) if t.op is op), None)
            if isinstance(op, PlaceholderOp):
                lines.append(f"T{idx} = placeholder{op.shape} {op.dtype} const={op.constant} arg={arg}")
                continue
            names: dict[int, str] = {}
            for n, ax in enumerate(op.axis):
                names[id(ax)] = f"i{n}"
            for n, ax in enumerate(op.reduce_axis):
                names[id(ax)] = f"r{n}[{ax.lo}:{ax.lo + ax.extent}]"
            body = _canonical_expr(op.body, names, self)
            lines.append(f"T{idx} = compute{op.shape} {op.dtype} arg={arg}: {body}")
        return "\n".join(lines)

    def workload_key(self) -> str:
        """A stable hash of the computation (structure, shapes, dtypes): the key of records.
        Computed once (a DAG does not change; its canonical text took 0.1 ms a call, and a
        model's zero-trial programs asked for keys ten thousand times)."""
        if self._workload_key is None:
            self._workload_key = hashlib.sha256(self.canonical_text().encode()).hexdigest()[:32]
        return self._workload_key

    def __str__(self) -> str:
        lines = []
        for op in self.ops:
            if isinstance(op, PlaceholderOp):
                kind = "constant placeholder" if op.constant else "placeholder"
                lines.append(f"{op.name} = {kind}{list(op.shape)} {op.dtype}")
            else:
                axes = ", ".join(ax.name for ax in op.axis)
                lines.append(f"{op.name}[{axes}] = {expr_str(op.body)}    # {list(op.shape)} {op.dtype}")
        return "\n".join(lines)

    __repr__ = __str__

    def init_state(self):
        """The naive program: one loop per axis, every op computed at root."""
        return State.initial(self)


def _prod(values) -> int:
    out = 1
    for v in values:
        out *= int(v)
    return out


def _float_ops(e: E.Expr) -> int:
    count = 0
    for node in E.walk(e):
        if isinstance(node, (E.Binary, E.Compare)) and dt.is_float(node.a.dtype):
            count += 1
        elif isinstance(node, E.Call):
            count += 1
        elif isinstance(node, E.Select) and dt.is_float(node.dtype):
            count += 1
    return count


def _canonical_expr(e: E.Expr, names: dict[int, str], dag: ComputeDAG) -> str:
    if isinstance(e, E.Var):
        return names.get(id(e), f"?{e.name}")
    if isinstance(e, E.Const):
        return f"{e.value!r}:{e.dtype}"
    if isinstance(e, E.TensorRead):
        idx = ",".join(_canonical_expr(i, names, dag) for i in e.indices)
        return f"T{dag.op_index(e.tensor.op)}[{idx}]"
    if isinstance(e, E.Reduce):
        axes = ",".join(names[id(a)] for a in e.axes)
        cond = "" if e.condition is None else _canonical_expr(e.condition, names, dag)
        return f"{e.combiner}<{axes}>({_canonical_expr(e.source, names, dag)};{cond})"
    head = getattr(e, "op", None) or getattr(e, "func", None) or ""
    kids = ",".join(_canonical_expr(c, names, dag) for c in e.children())
    return f"{type(e).__name__}{head}:{e.dtype}({kids})"
