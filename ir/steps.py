"""Transform steps: the genes of a program.

Each step is a frozen record naming stages and iterators by integer index, with four
duties: ``apply(state)`` (validate, then build the new State), ``record()`` / ``from_record``
(a short tagged JSON list), and ``__str__`` (one readable line).

Checklist for adding a step:
1. a frozen dataclass subclass of ``Step`` with a unique ``TAG``; its fields are ints,
   strings and tuples only (so records round-trip);
2. ``apply``: validate with ``check(cond, message)`` (raises ``InvalidStep``; anything else
   it leaks, ``State.apply`` turns into ``InvalidStep`` too), build the new State with
   ``_finish(state, self)``; if it adds a stage, say where and under what name in
   ``added_stage`` and renumber with ``_insert_stage`` there; if it changes a stage's
   loops, go through ``_loop_change`` so attached stages follow;
3. a builder method on ``State`` (``ir/state.py``: ``state.NAME(...)`` taking names or indices);
4. a test that applies it, compiles the program and compares with numpy, and a
   record/replay round trip (tests/ir/test_steps.py).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from typing import ClassVar

from typing import TYPE_CHECKING

from . import expr as E
from .bounds import scope_stages
from .frozen import replace
from .loops import LoopTransform, check, position_map
from .memo import IdentityMemo
from .stage import make_stage
from .tensor import ComputeOp

if TYPE_CHECKING:
    from .state import State

STEP_TYPES: dict[str, type] = {}


class Step:
    TAG: ClassVar[str] = ""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.TAG:
            STEP_TYPES[cls.TAG] = cls

    def apply(self, state: State) -> State:
        raise NotImplementedError

    def added_stage(self) -> tuple[int, str] | None:
        """For a step that adds a stage: (the index it goes to, the suffix of its name after
        the name of stage ``stage_id``), so that stage ids can be followed through steps
        without replaying them (``stage_names_along``); None for the others."""
        return None

    def record(self) -> list:
        return [self.TAG] + [_to_json(getattr(self, f.name)) for f in _recorded(type(self))]

    @classmethod
    def from_record(cls, rec) -> "Step":
        step_cls = STEP_TYPES.get(rec[0]) if rec else None
        if step_cls is None:
            raise ValueError(f"unknown step record {rec!r}; known tags are {sorted(STEP_TYPES)}")
        names = [f.name for f in _recorded(step_cls)]
        if len(rec) - 1 != len(names):
            raise ValueError(f"step record {rec!r} has {len(rec) - 1} fields, {rec[0]} expects {names}")
        return step_cls(*[_from_json(v) for v in rec[1:]])

    def __str__(self) -> str:
        args = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in fields(self))
        return f"{type(self).__name__}({args})"


def _recorded(step_cls) -> list:
    """The fields that make a step's record (derived ones, filled in by ``apply``, are not)."""
    return [f for f in fields(step_cls) if f.metadata.get("record", True)]


def _to_json(v):
    return [_to_json(x) for x in v] if isinstance(v, tuple) else v


def _from_json(v):
    return tuple(_from_json(x) for x in v) if isinstance(v, list) else v


def steps_to_json(steps) -> str:
    return json.dumps([s.record() for s in steps], separators=(",", ":"))


def steps_from_json(text: str) -> list[Step]:
    return [Step.from_record(r) for r in json.loads(text)]


#: what a step that adds a stage makes (the new operation, its stage, the rewritten bodies),
#: made once per source and shared by every replay: programs of one sketch then keep the
#: same operations and root loops, so the loops derived from them (``stage._LOOP_MEMO``)
#: and the features of nests they did not change are shared too
_SHARED = IdentityMemo(20_000)


def _finish(state: State, step: Step) -> State:
    return replace(state, steps=state.steps + (step,))


def _compute_stage(state: State, stage_id: int, what: str):
    st = state.raw_stages[state.stage_index(stage_id)]
    check(not st.is_placeholder, lambda: f"{what}: stage '{st.name}' is an input placeholder")
    check(st.compute_at != "inline", lambda: f"{what}: stage '{st.name}' is inlined")
    return st


def _loop_change(state: State, stage_id: int, t: LoopTransform, step: Step) -> State:
    """Apply a loop transform to a stage; attached stages follow their iterators and have
    their regions inferred again."""
    stages = list(state.raw_stages)
    stages[stage_id] = stages[stage_id].with_transform(t)
    if t.kind == "annotate":
        return replace(state, raw_stages=tuple(stages), steps=state.steps + (step,))
    moved = None
    for child, cst in enumerate(stages):
        if cst.compute_at == "iter" and cst.attach[0] == stage_id:
            moved = moved or position_map(t)
            stages[child] = replace(cst, attach=(stage_id, moved(cst.attach[1])))
    return replace(state, raw_stages=tuple(stages), bounds_stale=True, steps=state.steps + (step,))


def stage_names_along(dag, steps) -> list[str | None]:
    """The name of the stage each step names (its ``stage_id``) when it applies, from the
    steps alone: stage ids shift as steps add stages (None for an id out of range)."""
    names = [op.name for op in dag.ops]
    out: list[str | None] = []
    for step in steps:
        sid = step.stage_id
        out.append(names[sid] if 0 <= sid < len(names) else None)
        added = step.added_stage()
        if added is not None and out[-1] is not None:
            names.insert(added[0], f"{out[-1]}.{added[1]}")
    return out


def _insert_stage(state: State, index: int, stage) -> State:
    """Insert a stage at ``index``; attach points to later stages are renumbered."""
    stages = []
    for st in state.raw_stages:
        if st.compute_at == "iter" and st.attach[0] >= index:
            st = replace(st, attach=(st.attach[0] + 1, st.attach[1]))
        stages.append(st)
    stages.insert(index, stage)
    return replace(state, raw_stages=tuple(stages))


# loop structure ----------------------------------------------------------------------

@dataclass(frozen=True)
class SplitStep(Step):
    """Split an iterator into ``len(lengths) + 1`` loops (``lengths``: inner parts when
    ``inner_to_outer``, else outer parts; ``None`` = not chosen yet, taken as 1)."""
    TAG: ClassVar[str] = "SP"
    stage_id: int
    iter_id: int
    lengths: tuple
    inner_to_outer: bool = True
    #: the split loop's extent when the step was applied (derived: not part of the record);
    #: tile-size mutation moves factors between the parts of this extent
    extent: int | None = field(default=None, compare=False, metadata={"record": False})

    def apply(self, state):
        st = _compute_stage(state, self.stage_id, "split")
        check(len(self.lengths) >= 1, "split: needs at least one length")
        extent = st.iters[self.iter_id].extent if 0 <= self.iter_id < len(st.iters) else None
        step = self if extent == self.extent else replace(self, extent=extent)
        return _loop_change(state, self.stage_id,
                            LoopTransform("split", (self.iter_id, tuple(self.lengths), self.inner_to_outer)), step)

    def __str__(self):
        return f"split(stage={self.stage_id}, iter={self.iter_id}, lengths={list(self.lengths)}, " \
               f"inner_to_outer={self.inner_to_outer})"


def _split_lengths(state: State, step_id: int, what: str) -> tuple:
    check(0 <= step_id < len(state.steps), lambda: f"{what}: no step {step_id} (the state has {len(state.steps)})")
    src = state.steps[step_id]
    check(isinstance(src, SplitStep), lambda: f"{what}: step {step_id} is {type(src).__name__}, not a split")
    return src.lengths


@dataclass(frozen=True)
class FollowSplitStep(Step):
    """Split like an earlier split step: its first ``n_split - 1`` lengths and the product
    of the rest (Ansor uses it to tile a consumer or cache stage like its producer)."""
    TAG: ClassVar[str] = "FSP"
    stage_id: int
    iter_id: int
    src_step_id: int
    n_split: int

    def apply(self, state):
        _compute_stage(state, self.stage_id, "follow_split")
        src = _split_lengths(state, self.src_step_id, "follow_split")
        check(1 <= self.n_split <= len(src),
              lambda: f"follow_split: n_split must be in 1..{len(src)}, got {self.n_split}")
        rest = 1
        for x in src[self.n_split - 1:]:
            rest *= 1 if x is None else x
        lengths = tuple(src[:self.n_split - 1]) + (rest,)
        return _loop_change(state, self.stage_id, LoopTransform("split", (self.iter_id, lengths, True)), self)


@dataclass(frozen=True)
class FollowFusedSplitStep(Step):
    """Split by the product of the ``level``-th lengths of several split steps (for a loop
    fused from iterators that were split by them)."""
    TAG: ClassVar[str] = "FFSP"
    stage_id: int
    iter_id: int
    src_step_ids: tuple
    level: int
    factor_or_nparts: bool

    def apply(self, state):
        _compute_stage(state, self.stage_id, "follow_fused_split")
        length = 1
        for sid in self.src_step_ids:
            src = _split_lengths(state, sid, "follow_fused_split")
            check(0 <= self.level < len(src),
                  lambda: f"follow_fused_split: level {self.level} out of range for step {sid}")
            length *= 1 if src[self.level] is None else src[self.level]
        return _loop_change(state, self.stage_id,
                            LoopTransform("split", (self.iter_id, (length,), self.factor_or_nparts)), self)


@dataclass(frozen=True)
class FuseStep(Step):
    TAG: ClassVar[str] = "FU"
    stage_id: int
    iter_ids: tuple

    def apply(self, state):
        _compute_stage(state, self.stage_id, "fuse")
        return _loop_change(state, self.stage_id, LoopTransform("fuse", (tuple(self.iter_ids),)), self)


@dataclass(frozen=True)
class ReorderStep(Step):
    TAG: ClassVar[str] = "RE"
    stage_id: int
    order: tuple

    def apply(self, state):
        _compute_stage(state, self.stage_id, "reorder")
        return _loop_change(state, self.stage_id, LoopTransform("reorder", (tuple(self.order),)), self)


@dataclass(frozen=True)
class AnnotationStep(Step):
    """Mark a loop parallel, vectorize, unroll (or none)."""
    TAG: ClassVar[str] = "AN"
    stage_id: int
    iter_id: int
    annotation: str

    def apply(self, state):
        _compute_stage(state, self.stage_id, "annotate")
        return _loop_change(state, self.stage_id, LoopTransform("annotate", (self.iter_id, self.annotation)), self)


@dataclass(frozen=True)
class PragmaStep(Step):
    """``auto_unroll_max_step``: unroll the stage's loop nests of at most this many iterations."""
    TAG: ClassVar[str] = "PR"
    stage_id: int
    auto_unroll_max_step: int

    def apply(self, state):
        st = _compute_stage(state, self.stage_id, "pragma")
        check(self.auto_unroll_max_step >= 0,
              lambda: f"pragma: auto_unroll_max_step must be >= 0, got {self.auto_unroll_max_step}")
        state = state.with_stage(self.stage_id, replace(st, auto_unroll_max_step=self.auto_unroll_max_step))
        return _finish(state, self)


# compute location ----------------------------------------------------------------------

def _attached_below(state: State, index: int) -> set[int]:
    out: set[int] = set()
    for child in state.attached_to(index):
        out.add(child)
        out |= _attached_below(state, child)
    return out


@dataclass(frozen=True)
class ComputeAtStep(Step):
    """Compute a stage inside loop ``target_iter_id`` of the stage that consumes it; its
    loops then cover only the region one iteration of that loop needs."""
    TAG: ClassVar[str] = "CA"
    stage_id: int
    target_stage_id: int
    target_iter_id: int

    def apply(self, state):
        st = _compute_stage(state, self.stage_id, "compute_at")
        target = _compute_stage(state, self.target_stage_id, "compute_at")
        check(self.stage_id != self.target_stage_id, lambda: f"compute_at: stage '{st.name}' into itself")
        check(not state.dag.is_output(st.op) or st.origin != "op",
              lambda: f"compute_at: '{st.name}' is an output of the DAG and must stay at root")
        check(0 <= self.target_iter_id < len(target.iters),
              lambda: f"compute_at: stage '{target.name}' has no iterator {self.target_iter_id}")
        check(self.target_stage_id not in _attached_below(state, self.stage_id),
              lambda: f"compute_at: '{target.name}' is itself computed inside '{st.name}'")
        consumers = state.consumers(self.stage_id)
        inside = set(scope_stages(state, self.target_stage_id, self.target_iter_id)) - {self.stage_id}
        outside = [c for c in consumers if c != self.target_stage_id and c not in inside]
        check(self.target_stage_id in consumers or (consumers and not outside),
              lambda: f"compute_at: stage '{target.name}' does not consume '{st.name}' "
              f"(its consumers are {[state.raw_stages[c].name for c in consumers]})")
        check(not outside,
              lambda: f"compute_at: '{st.name}' is also read by {[state.raw_stages[c].name for c in outside]}, "
              f"which are not computed inside '{target.name}' at iterator {self.target_iter_id}")
        st = replace(st, compute_at="iter", attach=(self.target_stage_id, self.target_iter_id))
        state = replace(state.with_stage(self.stage_id, st), bounds_stale=True)
        return _finish(state, self)


@dataclass(frozen=True)
class ComputeRootStep(Step):
    TAG: ClassVar[str] = "CR"
    stage_id: int

    def apply(self, state):
        st = _compute_stage(state, self.stage_id, "compute_root")
        st = replace(st, compute_at="root", attach=None)
        state = replace(state.with_stage(self.stage_id, st), bounds_stale=True)
        return _finish(state, self)


@dataclass(frozen=True)
class ComputeInlineStep(Step):
    """Compute a stage's elements where they are read (no buffer, no loops)."""
    TAG: ClassVar[str] = "CI"
    stage_id: int

    def apply(self, state):
        st = _compute_stage(state, self.stage_id, "compute_inline")
        check(not st.reduce_axes, lambda: f"compute_inline: '{st.name}' is a reduction and cannot be inlined")
        check(not any(t.op is st.op for t in state.dag.tensors),
              lambda: f"compute_inline: '{st.name}' is an argument of the kernel and must be stored")
        check(not state.attached_to(self.stage_id),
              lambda: f"compute_inline: stages {[state.raw_stages[c].name for c in state.attached_to(self.stage_id)]} "
              f"are computed inside '{st.name}'")
        state = state.with_stage(self.stage_id, replace(st, compute_at="inline", attach=None))
        return _finish(state, self)


# stages that add stages ------------------------------------------------------------------

def _fresh_stage_check(state: State, index: int, what: str):
    st = _compute_stage(state, index, what)
    check(not st.transforms, lambda: f"{what}: stage '{st.name}' already has loop transforms; apply {what} first")
    check(not state.attached_to(index), lambda: f"{what}: stages are computed inside '{st.name}'")
    check(st.compute_at == "root", lambda: f"{what}: stage '{st.name}' must be at root")
    return st


@dataclass(frozen=True)
class CacheWriteStep(Step):
    """Compute a stage into a new buffer ``NAME.scope`` and copy it to the original tensor
    (Ansor's AddCacheWrite: the cache is computed inside the copy's tiles, in registers)."""
    TAG: ClassVar[str] = "CHW"
    stage_id: int
    scope: str

    def apply(self, state):
        st = _fresh_stage_check(state, self.stage_id, "cache_write")
        op = st.op

        def make():
            cache_op = ComputeOp(f"{op.name}.{self.scope}", op.shape, op.dtype, st.axes, st.body, op.tag, op.attrs)
            copy_body = cache_op.output[tuple(st.axes)]
            main = make_stage(op, body=copy_body, axes=st.axes, reduce_axes=())
            return main, make_stage(cache_op, origin="cache_write")

        main, cache = _SHARED.get((op, st.body) + tuple(st.axes), ("cache_write", self.scope), make)
        new_main = replace(main, origin=st.origin, auto_unroll_max_step=st.auto_unroll_max_step)
        state = state.with_stage(self.stage_id, new_main)
        state = _insert_stage(state, self.added_stage()[0], cache)
        return _finish(state, self)

    def added_stage(self) -> tuple[int, str]:
        return self.stage_id, self.scope


@dataclass(frozen=True)
class CacheReadStep(Step):
    """Copy a tensor into ``NAME.scope`` that the given readers read instead."""
    TAG: ClassVar[str] = "CHR"
    stage_id: int
    scope: str
    reader_stage_ids: tuple

    def apply(self, state):
        st = state.raw_stages[state.stage_index(self.stage_id)]
        check(st.compute_at == "root" or st.is_placeholder,
              lambda: f"cache_read: stage '{st.name}' is "
                      f"{'inlined' if st.compute_at == 'inline' else 'computed inside another'}"
                      "; only a tensor stored at root can be cached")
        readers = state.readers(self.stage_id)
        check(len(self.reader_stage_ids) >= 1, "cache_read: needs at least one reader stage")
        for r in self.reader_stage_ids:
            check(r in readers, lambda: f"cache_read: stage {r} does not read '{st.name}' "
                                f"(its readers are {[state.raw_stages[x].name for x in readers]})")
        tensor = st.op.output
        name = f"{st.name}.{self.scope}"

        def make_cache():
            axes = tuple(E.IterVar(f"ax{d}", 0, n, "space") for d, n in enumerate(tensor.shape))
            cache_op = ComputeOp(name, tensor.shape, tensor.dtype, axes, tensor[axes], "cache_read", {})
            return make_stage(cache_op, origin="cache_read")

        cache = _SHARED.get((tensor,), ("cache_read", name), make_cache)
        cache_tensor = cache.op.output

        def redirect(e):
            if isinstance(e, E.TensorRead) and e.tensor is tensor:
                return E.TensorRead(cache_tensor, e.indices)
            return None

        for r in self.reader_stage_ids:
            rs = state.raw_stages[r]
            body = _SHARED.get((rs.body, tensor, cache_tensor), "read_cache", lambda: E.transform(rs.body, redirect))
            state = state.with_stage(r, replace(rs, body=body))
        state = _insert_stage(state, self.added_stage()[0], cache)
        return _finish(state, self)

    def added_stage(self) -> tuple[int, str]:
        return self.stage_id + 1, self.scope


@dataclass(frozen=True)
class RfactorStep(Step):
    """Factor a reduction: a new stage ``NAME.rf`` reduces over all reduce loops but
    ``iter_id``, which becomes its space axis at position ``factor_iter_id``; the original
    stage then reduces that axis (Ansor's AddRfactor, for reductions with little space
    parallelism)."""
    TAG: ClassVar[str] = "RF"
    stage_id: int
    iter_id: int
    factor_iter_id: int

    def apply(self, state):
        st = _compute_stage(state, self.stage_id, "rfactor")
        check(st.compute_at == "root" and not state.attached_to(self.stage_id),
              lambda: f"rfactor: stage '{st.name}' must be at root with nothing computed inside it")
        body = st.body
        check(isinstance(body, E.Reduce), lambda: f"rfactor: stage '{st.name}' is not a reduction")
        factor = st.iters[st.iter_index(self.iter_id)]
        check(factor.kind == "reduce", lambda: f"rfactor: iterator '{factor.name}' is not a reduce iterator")
        space_iters = [it for it in st.iters if it.kind == "space"]
        for ax, value in zip(st.axes, st.axis_values):
            check(isinstance(value, E.Var) and any(value is it.var for it in space_iters),
                  lambda: f"rfactor: the space axes of '{st.name}' must not be split or fused before rfactor")
        check(0 <= self.factor_iter_id <= len(st.axes),
              lambda: f"rfactor: factor_iter_id must be in 0..{len(st.axes)}, got {self.factor_iter_id}")
        main, rf = _SHARED.get((st.op, st.body, st.loops) + tuple(st.axes),
                               ("rfactor", self.iter_id, self.factor_iter_id, st.region_guard_specs),
                               lambda: _rfactor_stages(st, factor, self.factor_iter_id))
        new_main = replace(main, origin=st.origin, auto_unroll_max_step=st.auto_unroll_max_step)
        state = state.with_stage(self.stage_id, new_main)
        state = _insert_stage(state, self.added_stage()[0], rf)
        return _finish(state, self)

    def added_stage(self) -> tuple[int, str]:
        return self.stage_id, "rf"


def _rfactor_stages(st, factor, factor_iter_id: int):
    """The stages rfactor makes of stage ``st`` factoring loop ``factor``: the main stage
    (its origin and pragma still to be set) and the rf stage."""
    body = st.body
    # the rf stage: space = original space axes + the factored loop; reduce = other reduce loops
    new_space = [E.IterVar(ax.name, 0, ax.extent, "space") for ax in st.axes]
    f_axis = E.IterVar(factor.name.replace(".", "_"), 0, factor.extent, "space")
    new_space.insert(factor_iter_id, f_axis)
    red_iters = [it for it in st.iters if it.kind == "reduce" and it is not factor]
    new_reduce = tuple(E.IterVar(it.name.replace(".", "_"), 0, it.extent, "reduce") for it in red_iters)
    var_map = {factor.var: f_axis}
    for it, ax in zip(red_iters, new_reduce):
        var_map[it.var] = ax
    space_new = [a for a in new_space if a is not f_axis]
    for ax, value, new_ax in zip(st.axes, st.axis_values, space_new):
        var_map[value] = new_ax
    axis_map = {ax: E.substitute(val, var_map) for ax, val in zip(st.all_axes, st.axis_values)}
    source = E.substitute(body.source, axis_map)
    conds = [E.substitute(g, var_map) for g in st.guards]
    if body.condition is not None:
        conds.append(E.substitute(body.condition, axis_map))
    cond = E.all_of(conds) if conds else None
    if new_reduce:
        rf_body = E.Reduce(body.combiner, source, new_reduce, cond)
    else:
        rf_body = source if cond is None else E.Select(cond, source, body.identity())
    op = st.op
    rf_shape = tuple(a.extent for a in new_space)
    rf_op = ComputeOp(f"{op.name}.rf", rf_shape, op.dtype, tuple(new_space), rf_body, op.tag, op.attrs)
    r = E.IterVar(f"{factor.name.replace('.', '_')}_v", 0, factor.extent, "reduce")
    idx = list(st.axes)
    idx.insert(factor_iter_id, r)
    main_body = E.Reduce(body.combiner, rf_op.output[tuple(idx)], (r,), None)
    return make_stage(op, body=main_body, axes=st.axes, reduce_axes=(r,)), make_stage(rf_op, origin="rfactor")


__all__ = ["Step", "STEP_TYPES", "steps_to_json", "steps_from_json", "stage_names_along"] + \
    [cls.__name__ for cls in STEP_TYPES.values()]
