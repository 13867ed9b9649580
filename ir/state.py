"""State: a program written as the DAG plus the transform steps applied to it.

Stages are frozen; applying a step builds a new State that shares every stage it did not
touch, so copying a State costs nothing. A stage's loops are derived from its root axes
and its primitive loop transforms (see ``loops``); a stage computed inside another one
has root axes sized by bound inference, re-derived whenever its target's loops change.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from . import expr as E
from . import loops as L
from .loops import InvalidStep, Iterator, LoopTransform, Loops, check
from .tensor import ComputeOp, Operation, PlaceholderOp, Tensor

__all__ = ["State", "Stage", "Iterator", "InvalidStep"]


@dataclass(frozen=True, eq=False)
class Stage:
    """How one operation is computed: its body, loops, location and pragmas."""
    op: Operation
    #: the computation (``op.body`` unless a cache/rfactor step rewrote it); None for inputs
    body: E.Expr | None
    axes: tuple[E.IterVar, ...]
    reduce_axes: tuple[E.IterVar, ...]
    root_extents: tuple[int, ...]
    root_starts: tuple[E.Expr | None, ...]
    transforms: tuple[LoopTransform, ...]
    loops: Loops
    #: "root", "inline" or "iter" (computed inside loop ``attach`` = (stage, iterator))
    compute_at: str = "root"
    attach: tuple[int, int] | None = None
    auto_unroll_max_step: int = 0
    #: how the stage came to be: "op", "cache_write", "cache_read" or "rfactor"
    origin: str = "op"
    #: which dimensions of an attached stage's region may run outside its tensor, as
    #: (dimension, ">=" or "<") (set by bound inference; the guards are built from the
    #: current loops, so they never refer to loop variables of an earlier derivation)
    region_guard_specs: tuple[tuple[int, str], ...] = ()

    @property
    def is_placeholder(self) -> bool:
        return isinstance(self.op, PlaceholderOp)

    @property
    def name(self) -> str:
        return self.op.name

    @property
    def iters(self) -> tuple[Iterator, ...]:
        return self.loops.iters

    @property
    def axis_values(self) -> tuple[E.Expr, ...]:
        return self.loops.axis_values

    @property
    def guards(self) -> tuple[E.Expr, ...]:
        return self.loops.guards + tuple(
            E.Compare(">=", self.axis_values[d], E.Const(0, "int64")) if kind == ">=" else
            E.Compare("<", self.axis_values[d], E.Const(self.op.shape[d], "int64"))
            for d, kind in self.region_guard_specs)

    @property
    def all_axes(self) -> tuple[E.IterVar, ...]:
        return self.axes + self.reduce_axes

    def iter_bounds(self) -> dict:
        return {it.var: (0, it.extent - 1) for it in self.iters}

    def iter_index(self, it) -> int:
        if isinstance(it, int):
            check(0 <= it < len(self.iters), f"stage '{self.name}' has no iterator {it} "
                                              f"(it has {len(self.iters)}: {[i.name for i in self.iters]})")
            return it
        for pos, x in enumerate(self.iters):
            if x is it or x.name == it:
                return pos
        raise InvalidStep(f"stage '{self.name}' has no iterator {getattr(it, 'name', it)!r}; "
                          f"its iterators are {[i.name for i in self.iters]}")

    def with_transform(self, t: LoopTransform) -> "Stage":
        return replace(self, loops=_LOOP_MEMO.apply(self.loops, t), transforms=self.transforms + (t,))

    def with_root(self, extents, starts, region_guard_specs=()) -> "Stage":
        """Re-derive the loops over new root extents/starts, replaying the transforms."""
        loops = _LOOP_MEMO.root(self, tuple(extents), tuple(starts))
        for t in self.transforms:
            loops = _LOOP_MEMO.apply(loops, t)
        return replace(self, root_extents=tuple(extents), root_starts=tuple(starts), loops=loops,
                       region_guard_specs=tuple(region_guard_specs))


class _LoopMemo:
    """Loops derived once and shared: programs of one sketch differ in a few tile lengths,
    so most of a replay derives loops some other program already derived. Loops are
    immutable, so sharing them (and their loop variables) between States is safe. Entries
    keep their key objects alive, so the ids in the keys stay theirs."""

    def __init__(self, limit: int = 200_000):
        self.limit = limit
        self.entries: dict = {}

    def _put(self, key, keep, value):
        if len(self.entries) >= self.limit:
            self.entries.clear()
        self.entries[key] = (keep, value)
        return value

    def apply(self, loops: Loops, t: LoopTransform) -> Loops:
        key = (id(loops), t)
        hit = self.entries.get(key)
        if hit is not None and hit[0] is loops:
            return hit[1]
        return self._put(key, loops, L.apply(loops, t))

    def root(self, stage: "Stage", extents: tuple, starts: tuple) -> Loops:
        from .simplify import structural_key
        axes = stage.all_axes  # an rfactor gives the same op other axes: they are part of the key
        key = ("root", id(stage.op), tuple(id(a) for a in axes), extents,
               tuple(None if s is None else structural_key(s) for s in starts))
        hit = self.entries.get(key)
        if hit is not None and hit[0][0] is stage.op and hit[0][1] == axes:
            return hit[1]
        loops = L.root_loops([a.name for a in axes], [a.kind for a in axes], extents, starts)
        return self._put(key, (stage.op, axes, starts), loops)


_LOOP_MEMO = _LoopMemo()


def make_stage(op: Operation, body=None, axes=None, reduce_axes=None, origin: str = "op") -> Stage:
    if isinstance(op, PlaceholderOp):
        return Stage(op, None, (), (), (), (), (), Loops((), (), ()))
    assert isinstance(op, ComputeOp)
    body = op.body if body is None else body
    axes = tuple(op.axis) if axes is None else tuple(axes)
    if reduce_axes is None:
        reduce_axes = tuple(body.axes) if isinstance(body, E.Reduce) else ()
    all_axes = axes + tuple(reduce_axes)
    extents = tuple(a.extent for a in all_axes)
    starts = tuple(None if a.lo == 0 else E.Const(a.lo, a.dtype) for a in all_axes)
    loops = L.root_loops([a.name for a in all_axes], [a.kind for a in all_axes], extents, starts)
    return Stage(op, body, axes, tuple(reduce_axes), extents, starts, (), loops, origin=origin)


@dataclass(frozen=True, eq=False)
class State:
    """A program: the DAG, its stages (in a valid computation order) and the steps that
    made them from the naive program. Transform methods (``split``, ``fuse``, ``reorder``,
    ``parallel``, ``vectorize``, ``unroll``, ``compute_at``, ``cache_write``, ... attached by
    ``ir.steps``) take stages and iterators by name or index and return a new State.

    Regions of attached stages are inferred lazily: a loop transform marks them stale and
    the first read of ``stages`` settles them, so that replaying a chain of steps infers
    bounds once rather than after every step."""
    dag: object
    raw_stages: tuple[Stage, ...]
    steps: tuple = ()
    bounds_stale: bool = False

    @classmethod
    def initial(cls, dag) -> "State":
        """The naive program; one shared instance per DAG (States are immutable), so that
        replays start from the same stage objects and share derived loops."""
        cached = getattr(dag, "_initial_state", None)
        if cached is None:
            cached = cls(dag, tuple(make_stage(op) for op in dag.ops), ())
            dag._initial_state = cached
        return cached

    @property
    def stages(self) -> tuple[Stage, ...]:
        """The stages with every attached stage's region up to date."""
        if self.bounds_stale:
            from .bounds import reinfer
            settled = reinfer(State(self.dag, self.raw_stages, self.steps))
            object.__setattr__(self, "raw_stages", settled.raw_stages)
            object.__setattr__(self, "bounds_stale", False)
        return self.raw_stages

    # lookup (structure only: names, attach relations and bodies do not depend on bounds) --
    def stage_index(self, stage) -> int:
        """Index of a stage given as an index, a Stage, an Operation, a Tensor or a name."""
        stages = self.raw_stages
        if isinstance(stage, int):
            check(0 <= stage < len(stages), f"no stage {stage}; the state has {len(stages)} stages")
            return stage
        if isinstance(stage, Tensor):
            stage = stage.op
        for i, st in enumerate(stages):
            if st is stage or st.op is stage or st.op.name == stage:
                return i
        raise InvalidStep(f"no stage {getattr(stage, 'name', stage)!r}; stages are {[s.name for s in stages]}")

    def __getitem__(self, stage) -> Stage:
        return self.stages[self.stage_index(stage)]

    def with_stage(self, index: int, stage: Stage) -> "State":
        stages = list(self.raw_stages)
        stages[index] = stage
        return replace(self, raw_stages=tuple(stages))

    def attached_to(self, index: int) -> list[int]:
        return [i for i, st in enumerate(self.raw_stages) if st.compute_at == "iter" and st.attach[0] == index]

    def readers(self, index: int) -> list[int]:
        """Stages whose body reads stage ``index``'s tensor."""
        tensor = self.raw_stages[index].op.output
        out = []
        for i, st in enumerate(self.raw_stages):
            if st.body is not None and any(isinstance(e, E.TensorRead) and e.tensor is tensor
                                           for e in E.walk(st.body)):
                out.append(i)
        return out

    def consumers(self, index: int) -> list[int]:
        """Non-inlined stages that read stage ``index``, looking through inlined ones."""
        out: list[int] = []
        for r in self.readers(index):
            if self.raw_stages[r].compute_at == "inline":
                out.extend(c for c in self.consumers(r) if c not in out)
            elif r not in out:
                out.append(r)
        return sorted(out)

    # steps -------------------------------------------------------------------------------
    def apply(self, step) -> "State":
        """Apply one step (see ``ir.steps``); returns the new State."""
        return step.apply(self)

    def replay(self) -> "State":
        """Rebuild this program from the naive one and its steps alone."""
        state = State.initial(self.dag)
        for step in self.steps:
            state = step.apply(state)
        return state

    def __str__(self) -> str:
        from .state_printer import state_str
        return state_str(self)

    __repr__ = __str__
