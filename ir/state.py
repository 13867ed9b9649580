"""State: a program written as the DAG plus the transform steps applied to it.

Applying a step builds a new State that shares every stage it did not touch, so copying a
State costs nothing (see ``stage`` for how a stage's loops are derived and shared).
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from . import expr as E
from . import steps as S
from .bounds import reinfer
from .frozen import replace
from .loops import LEAKS, InvalidStep, check, leaked
from .memo import IdentityMemo
from .stage import Stage, make_stage
from .state_printer import state_str
from .tensor import Tensor

__all__ = ["State"]

#: the tensors each body reads (ids), by body: bodies are shared by every program of a DAG
_READS = IdentityMemo(20_000)


def _tensors_read(body) -> frozenset:
    return _READS.get((body,), None, lambda: frozenset(id(e.tensor) for e in E.walk(body)
                                                         if isinstance(e, E.TensorRead)))


@dataclass(frozen=True, eq=False)
class State:
    """A program: the DAG, its stages (in a valid computation order) and the steps that
    made them from the naive program. The transform methods (``split``, ``fuse``,
    ``reorder``, ``parallel``, ``vectorize``, ``unroll``, ``compute_at``, ``cache_write``,
    ...) take stages and iterators by name or index, apply one step of ``ir.steps`` and
    return a new State.

    ``State.from_steps(dag, steps)`` is the one way to rebuild a program from its steps (a
    log's records, a mutated gene list); ``key`` is its identity (a hash of the printed
    loop nest, computed once): two States with the same key are the same program.

    Regions of attached stages are inferred lazily: a loop transform marks them stale and
    the first read of ``stages`` settles them, so that replaying a chain of steps infers
    bounds once rather than after every step."""
    dag: object
    raw_stages: tuple[Stage, ...]
    steps: tuple = ()
    bounds_stale: bool = False
    _key: str | None = field(default=None, init=False, repr=False, compare=False)

    @classmethod
    def initial(cls, dag) -> "State":
        """The naive program; one shared instance per DAG (States are immutable), so that
        replays start from the same stage objects and share derived loops."""
        cached = getattr(dag, "_initial_state", None)
        if cached is None:
            cached = cls(dag, tuple(make_stage(op) for op in dag.ops), ())
            dag._initial_state = cached
        return cached

    @classmethod
    def from_steps(cls, dag, steps) -> "State":
        """The program that ``steps`` (``ir.steps.Step`` objects or their JSON records) make
        from the naive program of ``dag``, with its regions settled. Raises ``InvalidStep``
        (and nothing else) when a step does not apply."""
        state = cls.initial(dag)
        for step in steps:
            if not isinstance(step, S.Step):
                try:
                    step = S.Step.from_record(step)
                except InvalidStep:
                    raise
                except LEAKS as err:
                    raise leaked(step, err) from err
            state = state.apply(step)
        try:
            state.stages  # an invalid attachment shows when the regions are inferred
        except InvalidStep:
            raise
        except LEAKS as err:
            raise leaked(state.steps[-1] if state.steps else "none", err) from err
        return state

    @property
    def key(self) -> str:
        """The program's identity: a hash of its printed loop nest (``str(state)``),
        computed once. Deduplicates candidates, measured programs and records."""
        if self._key is None:
            object.__setattr__(self, "_key", hashlib.sha1(str(self).encode()).hexdigest()[:20])
        return self._key

    @property
    def stages(self) -> tuple[Stage, ...]:
        """The stages with every attached stage's region up to date."""
        if self.bounds_stale:
            settled = reinfer(State(self.dag, self.raw_stages, self.steps))
            object.__setattr__(self, "raw_stages", settled.raw_stages)
            object.__setattr__(self, "bounds_stale", False)
        return self.raw_stages

    # lookup (structure only: names, attach relations and bodies do not depend on bounds) --
    def stage_index(self, stage) -> int:
        """Index of a stage given as an index, a Stage, an Operation, a Tensor or a name."""
        stages = self.raw_stages
        if isinstance(stage, int):
            check(0 <= stage < len(stages), lambda: f"no stage {stage}; the state has {len(stages)} stages")
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
        tensor = id(self.raw_stages[index].op.output)
        return [i for i, st in enumerate(self.raw_stages) if st.body is not None and tensor in _tensors_read(st.body)]

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
        """Apply one step (see ``ir.steps``); returns the new State. A step that does not
        apply raises ``InvalidStep``, whatever went wrong inside it."""
        try:
            return step.apply(self)
        except InvalidStep:
            raise
        except LEAKS as err:
            raise leaked(step, err) from err

    def replay(self) -> "State":
        """This program rebuilt from the naive one and its steps alone."""
        return State.from_steps(self.dag, self.steps)

    # builders: one step each, stages and iterators by name or index -------------------------
    def _ids(self, stage, it=None):
        sid = self.stage_index(stage)
        if it is None:
            return sid
        return sid, self.raw_stages[sid].iter_index(it)

    def split(self, stage, it, lengths, inner_to_outer: bool = True) -> "State":
        """Split a loop into ``len(lengths) + 1`` loops (``lengths``: the inner parts, or the
        outer ones when not ``inner_to_outer``)."""
        sid, iid = self._ids(stage, it)
        return self.apply(S.SplitStep(sid, iid, tuple(lengths), bool(inner_to_outer)))

    def follow_split(self, stage, it, src_step_id: int, n_split: int) -> "State":
        """Split a loop like split step ``src_step_id`` (its first ``n_split - 1`` lengths)."""
        sid, iid = self._ids(stage, it)
        return self.apply(S.FollowSplitStep(sid, iid, src_step_id, n_split))

    def follow_fused_split(self, stage, it, src_step_ids, level: int, factor_or_nparts: bool) -> "State":
        """Split a loop by the product of the ``level``-th lengths of several split steps."""
        sid, iid = self._ids(stage, it)
        return self.apply(S.FollowFusedSplitStep(sid, iid, tuple(src_step_ids), level, bool(factor_or_nparts)))

    def fuse(self, stage, iters) -> "State":
        """Fuse consecutive loops into one."""
        sid = self._ids(stage)
        return self.apply(S.FuseStep(sid, tuple(self.raw_stages[sid].iter_index(i) for i in iters)))

    def reorder(self, stage, order) -> "State":
        """Put a stage's loops in this order (all of them)."""
        sid = self._ids(stage)
        return self.apply(S.ReorderStep(sid, tuple(self.raw_stages[sid].iter_index(i) for i in order)))

    def annotate(self, stage, it, annotation: str) -> "State":
        """Mark a loop "parallel", "vectorize", "unroll" (or "none")."""
        sid, iid = self._ids(stage, it)
        return self.apply(S.AnnotationStep(sid, iid, annotation))

    def parallel(self, stage, it) -> "State":
        return self.annotate(stage, it, "parallel")

    def vectorize(self, stage, it) -> "State":
        return self.annotate(stage, it, "vectorize")

    def unroll(self, stage, it) -> "State":
        return self.annotate(stage, it, "unroll")

    def pragma_auto_unroll(self, stage, auto_unroll_max_step: int) -> "State":
        """Unroll the stage's loop nests of at most this many iterations."""
        return self.apply(S.PragmaStep(self._ids(stage), int(auto_unroll_max_step)))

    def compute_at(self, stage, target, it) -> "State":
        """Compute a stage inside loop ``it`` of ``target`` (a stage that reads it)."""
        sid = self._ids(stage)
        tid, iid = self._ids(target, it)
        return self.apply(S.ComputeAtStep(sid, tid, iid))

    def compute_inline(self, stage) -> "State":
        return self.apply(S.ComputeInlineStep(self._ids(stage)))

    def compute_root(self, stage) -> "State":
        return self.apply(S.ComputeRootStep(self._ids(stage)))

    def cache_write(self, stage, scope: str = "local") -> "State":
        """Compute a stage into a new buffer ``NAME.scope``, copied to the original."""
        return self.apply(S.CacheWriteStep(self._ids(stage), scope))

    def cache_read(self, stage, scope: str, readers) -> "State":
        """Copy a tensor into ``NAME.scope``, which ``readers`` read instead."""
        sid = self._ids(stage)
        return self.apply(S.CacheReadStep(sid, scope, tuple(self.stage_index(r) for r in readers)))

    def rfactor(self, stage, it, factor_iter_id: int) -> "State":
        """Factor a reduction over loop ``it`` into a new stage ``NAME.rf``."""
        sid, iid = self._ids(stage, it)
        return self.apply(S.RfactorStep(sid, iid, factor_iter_id))

    def __str__(self) -> str:
        return state_str(self)

    __repr__ = __str__
