"""Stage: how one operation of a State is computed (its body, loops, location, pragmas).

Stages are frozen; a stage's loops are derived from its root axes and its primitive loop
transforms (see ``loops``), and shared between States through a memo (programs of one
sketch derive the same loops over and over). A stage computed inside another one has root
axes sized by bound inference (``bounds``), re-derived whenever its target's loops change.
"""
from __future__ import annotations

from dataclasses import dataclass

from . import expr as E
from . import loops as L
from .frozen import replace
from .loops import InvalidStep, Iterator, LoopTransform, Loops, check
from .simplify import structural_key
from .tensor import ComputeOp, Operation, PlaceholderOp

__all__ = ["Stage", "make_stage"]


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

    def iter_index(self, it) -> int:
        if isinstance(it, int):
            check(0 <= it < len(self.iters), lambda: f"stage '{self.name}' has no iterator {it} "
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
