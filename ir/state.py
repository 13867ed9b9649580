"""State: a program written as the DAG plus the transform steps applied to it.

Stages and iterators are frozen; applying a step builds a new State that shares every
stage it did not touch, so copying a State costs nothing. Each stage keeps the value of
every original axis of its op as an expression over its current loop variables, so that
lowering never has to replay split/fuse relations.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from . import expr as E
from .tensor import ComputeOp, Operation, PlaceholderOp

ANNOTATIONS = ("none", "parallel", "vectorize", "unroll")


@dataclass(frozen=True, eq=False)
class Iterator:
    """One loop of a stage."""
    name: str
    extent: int
    kind: str  # "space" or "reduce"
    var: E.Var
    annotation: str = "none"

    def annotated(self, annotation: str) -> "Iterator":
        return replace(self, annotation=annotation)


@dataclass(frozen=True, eq=False)
class Stage:
    """How one operation is computed: its loops, where it is computed and its pragmas."""
    op: Operation
    iters: tuple[Iterator, ...]
    #: value of each of ``op.axis + op.reduce_axis`` in terms of the iterators' variables
    axis_values: tuple[E.Expr, ...]
    #: conditions that must hold for an iteration to be real (from non-dividing splits)
    guards: tuple[E.Expr, ...] = ()
    #: "root", "inline" or "iter" (computed inside loop ``attach`` of another stage)
    compute_at: str = "root"
    attach: tuple[int, int] | None = None
    auto_unroll_max_step: int = 0

    @property
    def is_placeholder(self) -> bool:
        return isinstance(self.op, PlaceholderOp)

    @property
    def name(self) -> str:
        return self.op.name

    def iter_bounds(self) -> dict:
        return {it.var: (0, it.extent - 1) for it in self.iters}


def initial_stage(op: Operation) -> Stage:
    if isinstance(op, PlaceholderOp):
        return Stage(op, (), ())
    assert isinstance(op, ComputeOp)
    iters, values = [], []
    for ax in tuple(op.axis) + tuple(op.reduce_axis):
        var = E.Var(ax.name)
        iters.append(Iterator(ax.name, ax.extent, ax.kind, var))
        values.append(var if ax.lo == 0 else E.Binary("+", var, E.Const(ax.lo, var.dtype)))
    return Stage(op, tuple(iters), tuple(values))


@dataclass(frozen=True, eq=False)
class State:
    """A program: the DAG, its stages (one per operation, in topological order) and the
    steps that made them from the naive program."""
    dag: object
    stages: tuple[Stage, ...]
    steps: tuple = ()

    @classmethod
    def initial(cls, dag) -> "State":
        return cls(dag, tuple(initial_stage(op) for op in dag.ops), ())

    def stage_index(self, op_or_name) -> int:
        for i, st in enumerate(self.stages):
            if st.op is op_or_name or st.op.name == op_or_name:
                return i
        raise KeyError(f"no stage for {op_or_name!r}; stages are {[s.name for s in self.stages]}")

    def with_stage(self, index: int, stage: Stage) -> "State":
        stages = list(self.stages)
        stages[index] = stage
        return replace(self, stages=tuple(stages))

    def __str__(self) -> str:
        from .state_printer import state_str
        return state_str(self)

    __repr__ = __str__
