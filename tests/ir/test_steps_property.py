"""Property tests: random valid step sequences compile to programs that match numpy and
whose records (JSON round trip, ``replay()``) rebuild the same program.

A strategy draws a schedule for a workload the way Ansor builds one: first the steps that
add or remove stages (cache_write of a fresh reduction, rfactor, cache_read, inlining of
injective stages), then random loop steps (splits by divisors and non-divisors, follow
splits, fuses of consecutive iterators of one kind, reorders, annotations, pragmas,
compute_at of a producer into a loop of its consumer, compute_root). Arguments are drawn
from what the current State offers, so most steps are valid; a step that still raises
``InvalidStep`` is skipped. (The ir bugs these tests found are regression tests in
``test_steps.py``.)
"""
from __future__ import annotations

import importlib.util
import pathlib
import sys

from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

import ir
from ir.steps import SplitStep, steps_from_json, steps_to_json

_spec = importlib.util.spec_from_file_location("_ir_test_steps_shared",
                                               pathlib.Path(__file__).with_name("test_steps.py"))
shared = sys.modules.setdefault(_spec.name, importlib.util.module_from_spec(_spec))
if not hasattr(shared, "WORKLOADS"):
    _spec.loader.exec_module(shared)

SETTINGS = settings(max_examples=20, deadline=None, derandomize=True, database=None, print_blob=False,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.filter_too_much])



# the strategy ------------------------------------------------------------------------------------

def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _lengths(draw, extent: int) -> list:
    """1 or 2 split lengths: divisors of the extent, or any length up to it (non-dividing)."""
    one = st.one_of(st.sampled_from(_divisors(extent)), st.integers(1, max(1, extent)))
    return draw(st.lists(one, min_size=1, max_size=2))


class ScheduleBuilder:
    """Draws steps for one workload; ``state`` is the schedule so far."""

    def __init__(self, draw, wl):
        self.draw, self.wl = draw, wl
        self.state = wl.dag.init_state()
        self.skipped = 0

    # helpers -------------------------------------------------------------------------------
    def apply(self, name: str, *args) -> bool:
        try:
            self.state = getattr(self.state, name)(*args)
        except ir.InvalidStep as e:
            self.skipped += 1
            note(f"skipped {name}{args}: {e}")
            return False
        note(f"{name}{args}")
        return True

    def compute_stages(self, pred=lambda i, s: True) -> list[int]:
        return [i for i, s in enumerate(self.state.stages)
                if not s.is_placeholder and s.compute_at != "inline" and pred(i, s)]

    def pick(self, options):
        return self.draw(st.sampled_from(options)) if options else None

    # structural steps (Ansor's sketch derivation) ---------------------------------------------
    def structure(self) -> None:
        s = self.state
        for i in self.compute_stages(lambda i, st_: st_.reduce_axes and st_.origin == "op"):
            choice = self.draw(st.sampled_from(["none", "none", "cache_write", "rfactor"]))
            name = s.stages[i].name  # names stay valid while new stages shift the indices
            if choice == "cache_write":
                self.apply("cache_write", name, "local")
            elif choice == "rfactor":
                self.rfactor(name)
        for i in self.compute_stages(lambda i, st_: not st_.reduce_axes):
            st_ = self.state.stages[i]
            if not any(t.op is st_.op for t in self.wl.dag.tensors) and self.draw(st.booleans()):
                self.apply("compute_inline", st_.name)
        if self.draw(st.integers(0, 3)) == 0:
            self.cache_read()

    def rfactor(self, name: str) -> None:
        stage = self.state[name]
        reduce = [it.name for it in stage.iters if it.kind == "reduce"]
        if len(reduce) >= 2 and self.draw(st.booleans()):
            self.apply("fuse", name, reduce)   # the 2-norm way: one loop over all reduce axes
            reduce = [self.state[name].iters[-1].name]
        it = self.pick(reduce)
        extent = self.state[name].iters[self.state[name].iter_index(it)].extent
        if self.draw(st.booleans()) and self.apply("split", name, it, _lengths(self.draw, extent)):
            it = self.pick([x.name for x in self.state[name].iters if x.name.startswith(it + ".")])
        self.apply("rfactor", name, it, self.draw(st.integers(0, len(self.state[name].axes))))

    def cache_read(self) -> None:
        s = self.state
        candidates = [i for i, x in enumerate(s.stages)
                      if x.compute_at == "root" and s.readers(i)]
        i = self.pick(candidates)
        if i is not None:
            readers = s.readers(i)
            chosen = self.draw(st.lists(st.sampled_from(readers), min_size=1, max_size=len(readers), unique=True))
            self.apply("cache_read", s.stages[i].name, "shared", [s.stages[r].name for r in chosen])

    # loop steps ---------------------------------------------------------------------------------
    def loop_step(self) -> None:
        kind = self.draw(st.sampled_from([
            "split", "split", "split", "follow_split", "follow_fused_split", "fuse", "reorder", "reorder",
            "vectorize", "vectorize", "parallel", "unroll", "pragma", "compute_at", "compute_at", "compute_at",
            "compute_root", "compute_inline"]))
        i = self.pick(self.compute_stages())
        stage = self.state.stages[i]
        getattr(self, "step_" + kind)(i, stage)

    def step_split(self, i, stage):
        free = [p for p, it in enumerate(stage.iters) if it.annotation == "none" and it.extent > 1]
        if free:
            p = self.pick(free)
            self.apply("split", i, p, _lengths(self.draw, stage.iters[p].extent), self.draw(st.booleans()))

    def _split_steps(self) -> list[int]:
        return [n for n, step in enumerate(self.state.steps) if isinstance(step, SplitStep)]

    def step_follow_split(self, i, stage):
        src = self.pick(self._split_steps())
        free = [p for p, it in enumerate(stage.iters) if it.annotation == "none"]
        if src is not None and free:
            n_split = self.draw(st.integers(1, len(self.state.steps[src].lengths)))
            self.apply("follow_split", i, self.pick(free), src, n_split)

    def step_follow_fused_split(self, i, stage):
        splits = self._split_steps()
        free = [p for p, it in enumerate(stage.iters) if it.annotation == "none"]
        if splits and free:
            src = self.draw(st.lists(st.sampled_from(splits), min_size=1, max_size=2, unique=True))
            level = self.draw(st.integers(0, min(len(self.state.steps[s].lengths) for s in src) - 1))
            self.apply("follow_fused_split", i, self.pick(free), src, level, self.draw(st.booleans()))

    def step_fuse(self, i, stage):
        its = stage.iters
        runs = [(a, b) for a in range(len(its)) for b in range(a + 1, min(a + 3, len(its)))
                if len({it.kind for it in its[a:b + 1]}) == 1 and all(it.annotation == "none" for it in its[a:b + 1])]
        if runs:
            a, b = self.pick(runs)
            if self.apply("fuse", i, list(range(a, b + 1))) and a == 0 and its[0].kind == "space" \
                    and self.draw(st.booleans()):
                self.apply("parallel", i, 0)  # Ansor's way: fuse the outer space loops, run them in parallel

    def step_reorder(self, i, stage):
        self.apply("reorder", i, self.draw(st.permutations(range(len(stage.iters)))))

    def step_vectorize(self, i, stage):
        self.apply("vectorize", i, len(stage.iters) - 1)

    def step_parallel(self, i, stage):
        outer = [p for p, it in enumerate(stage.iters[:2]) if it.kind == "space"]
        if outer:
            self.apply("parallel", i, self.pick(outer))

    def step_unroll(self, i, stage):
        small = [p for p, it in enumerate(stage.iters) if it.extent <= 16]
        if small:
            self.apply("unroll", i, self.pick(small))

    def step_pragma(self, i, stage):
        self.apply("pragma_auto_unroll", i, self.draw(st.sampled_from([0, 16, 64, 512])))

    def step_compute_at(self, i, stage):
        consumers = self.state.consumers(i)
        if consumers and not self.wl.dag.is_output(stage.op):
            target = self.pick(consumers)  # with several, valid once the others are inside it
            pos = self.draw(st.integers(0, len(self.state.stages[target].iters) - 1))
            self.apply("compute_at", i, target, pos)

    def step_compute_root(self, i, stage):
        attached = self.compute_stages(lambda j, s: s.compute_at == "iter")
        if attached:
            self.apply("compute_root", self.pick(attached))

    def step_compute_inline(self, i, stage):
        injective = self.compute_stages(lambda j, s: not s.reduce_axes and not self.wl.dag.is_output(s.op))
        if injective:
            self.apply("compute_inline", self.pick(injective))


@st.composite
def schedules(draw, wl, max_loop_steps: int = 12):
    b = ScheduleBuilder(draw, wl)
    b.structure()
    for _ in range(draw(st.integers(2, max_loop_steps))):
        b.loop_step()
    note(f"program:\n{b.state}\nrecords: {steps_to_json(b.state.steps)}")
    return b.state


# the properties ----------------------------------------------------------------------------------

def check_schedule(wl, state) -> None:
    shared.assert_matches_numpy(wl, state, rtol=1e-4, atol=1e-4)
    # the records alone rebuild the same program
    rebuilt = wl.dag.init_state()
    for step in steps_from_json(steps_to_json(state.steps)):
        rebuilt = rebuilt.apply(step)
    text, lowered = str(state), str(ir.lower(state))
    for other in (rebuilt, state.replay()):
        assert str(other) == text
        assert str(ir.lower(other)) == lowered


_WORKLOADS = {name: make() for name, make in shared.WORKLOADS.items()}


@st.composite
def programs(draw, name: str):
    """A workload (one DAG per workload, shared by the examples) and a schedule of it."""
    wl = _WORKLOADS[name]
    return wl, draw(schedules(wl))


def _property(name: str):
    @SETTINGS
    @given(program=programs(name))
    def test(program):
        check_schedule(*program)

    test.__name__ = f"test_random_schedule_{name}"
    return test


test_random_schedule_matmul = _property("matmul")
test_random_schedule_conv2d = _property("conv2d")
test_random_schedule_depthwise_conv2d = _property("depthwise_conv2d")
test_random_schedule_softmax = _property("softmax")
test_random_schedule_matrix_norm = _property("matrix_norm")
test_random_schedule_conv_layer = _property("conv_layer")


def test_strategy_draws_mostly_valid_steps():
    """The strategy is worth its time only if most drawn steps apply: count them."""
    counts = {"applied": 0, "skipped": 0}

    @settings(max_examples=30, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(data=st.data(), name=st.sampled_from(sorted(_WORKLOADS)))
    def count(data, name):
        b = ScheduleBuilder(data.draw, _WORKLOADS[name])
        b.structure()
        for _ in range(8):
            b.loop_step()
        counts["applied"] += len(b.state.steps)
        counts["skipped"] += b.skipped

    count()
    assert counts["applied"] >= 3 * counts["skipped"], counts
