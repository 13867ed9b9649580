"""What makes a search round cheap must not change what it computes: replays of one sketch
share the stages that cache steps add, their derived loops, reads and inferred regions
(``ir.steps``, ``ir.stage``, ``ir.bounds``), and features are cached per nest by what the
nest is made of (``evolution.features``). Programs built that way by evolution must print,
split and score exactly as the same steps replayed alone from cold memos, one program at a
time, with regions settled after every step.
"""
from __future__ import annotations

import dataclasses
import gc
import weakref

import numpy as np
import pytest

import ir
import sketch_rules as SR
from autosched import ops
from evolution import Crossover, FeatureExtractor
from evolution.evolve import fewer_gc_passes
from evolution.genes import sketch_length
from evolution.mutation import MutationContext, cpu_mutations
from ir import bounds, layout, stage, steps
from ir import state as ir_state
from ir.frozen import replace
from ir.steps import CacheReadStep, CacheWriteStep, RfactorStep, SplitStep

HW = ir.HardwareParams(num_cores=2, vector_lanes=16)

#: matmuls with packing (cache_read) and register (cache_write) sketches, a fused conv +
#: bias + relu, grouped and depthwise convs with inlined pads, rfactor reductions
WORKLOADS = ["GMM-1x128x128x128", "C2D-1x14x14x256x256-k3s1p1", "CBR-1x28x28x128x256-k1s2p0",
             "GRP-1x14x14x256x256-k3s1p1g4", "DEP-1x14x14x512-k3s2p1", "NRM-1x256x256", "TBS-1x64x12x128"]


def evolved_programs(task, n_sampled: int, n_children: int, seed: int = 0) -> list[ir.State]:
    """Sampled programs and children of them by every mutation and crossover, as a round
    makes them (each built from its parent by replaying edited steps)."""
    sketches = SR.generate_sketches(task)
    rng = np.random.default_rng(seed)
    pool = SR.sample_programs(task, sketches, n_sampled, rng)
    crossover = Crossover(sketches)
    mutations = cpu_mutations()
    for _ in range(n_children):
        a = pool[int(rng.integers(len(pool)))]
        if rng.random() < 0.3:
            child = crossover(a, pool[int(rng.integers(len(pool)))], rng)
        else:
            k = sketch_length(a, sketches)
            mutation = mutations[int(rng.integers(len(mutations)))]
            child = mutation.apply(a, rng, MutationContext(SR.CPU_SPACE.auto_unroll_choices, None, 64,
                                                           k[1] if k else len(a.steps)))
        if child is not None:
            pool.append(child)
    return pool


def clear_shared_memos() -> None:
    stage._LOOP_MEMO.entries.clear()
    bounds._REGIONS.entries.clear()
    bounds._READS.entries.clear()
    steps._SHARED.entries.clear()
    layout._PLANS.entries.clear()
    layout._READS.entries.clear()
    ir_state._READS.entries.clear()


def replay_alone(dag, program_steps) -> ir.State:
    """The program rebuilt from cold memos, its regions settled after every step."""
    clear_shared_memos()
    state = ir.State.initial(dag)
    for step in program_steps:
        state = state.apply(ir.steps.Step.from_record(step))
        state.stages
    return state


def split_extents(state) -> list:
    return [s.extent for s in state.steps if isinstance(s, SplitStep)]


@pytest.mark.parametrize("name", WORKLOADS)
def test_evolved_programs_print_split_and_score_as_replayed_alone(name):
    task = ir.SearchTask(ir.ComputeDAG(ops.suite_workload(name).tensors), hardware=HW, desc=name)
    clear_shared_memos()
    programs = evolved_programs(task, 12, 40)
    shared = FeatureExtractor()
    fast = shared(task, programs)
    assert shared.stats["hits"] > 0  # the nests children did not change come from the cache
    for state, rows in zip(programs, fast):
        alone = replay_alone(task.dag, [s.record() for s in state.steps])
        assert str(alone) == str(state)
        assert split_extents(alone) == split_extents(state)
        np.testing.assert_array_equal(FeatureExtractor().program(task, alone), rows)


def _plan_fields(p) -> tuple | None:
    if p is None:
        return None
    return ([str(a) for a in p.atoms], p.lows, p.shape, p.forms, p.stage_name, p.original_shape)


@pytest.mark.parametrize("name", ["C2D-1x14x14x256x256-k3s1p1", "DEP-1x14x14x512-k3s2p1",
                                  "CBR-1x28x28x128x256-k1s2p0"])
def test_layout_plans_from_the_memo_are_the_plans_made_afresh(name):
    task = ir.SearchTask(ir.ComputeDAG(ops.suite_workload(name).tensors), hardware=HW, desc=name)
    clear_shared_memos()
    programs = evolved_programs(task, 8, 30, seed=1)
    constants = [t for t in task.dag.inputs if getattr(t.op, "constant", False)]
    assert constants
    memoised = [layout.plan_all(p) for p in programs + programs]  # the second pass hits the memo
    assert sum(1 for p in memoised if p) > len(programs)  # plans were made (not all refused)
    for state, plans in zip(programs + programs, memoised):
        for t in constants:
            layout._READS.entries.clear()  # the reference starts from cold memos
            assert _plan_fields(plans.get(id(t.op))) == _plan_fields(layout.plan(state, t))


def test_the_workloads_cover_every_step_that_adds_a_stage():
    kinds = set()
    for name in WORKLOADS:
        task = ir.SearchTask(ir.ComputeDAG(ops.suite_workload(name).tensors), hardware=HW)
        kinds |= {type(s) for sk in SR.generate_sketches(task) for s in sk.steps}
    assert {CacheReadStep, CacheWriteStep, RfactorStep} <= kinds


def test_replays_of_one_sketch_share_added_stages_loops_and_nest_features():
    task = ir.SearchTask(ir.ComputeDAG(ops.suite_workload("GMM-1x128x128x128").tensors), hardware=HW)
    sketch = next(s for s in SR.generate_sketches(task)
                  if {CacheReadStep, CacheWriteStep} <= {type(x) for x in s.steps})
    (program,) = SR.sample_programs(task, [sketch], 1, np.random.default_rng(3))
    again = ir.State.from_steps(task.dag, program.steps)
    assert again is not program and again.key == program.key
    for a, b in zip(program.stages, again.stages):
        assert a.op is b.op and a.loops is b.loops
    ex = FeatureExtractor()
    first, second = ex(task, [program, again])
    np.testing.assert_array_equal(first, second)
    n_roots = sum(1 for st in program.stages if not st.is_placeholder and st.compute_at == "root")
    assert ex.stats == {"hits": n_roots, "misses": n_roots, "errors": 0}


def test_frozen_replace_is_dataclasses_replace_and_forgets_the_cached_key():
    dag = ir.ComputeDAG(ops.suite_workload("GMM-1x128x128x128").tensors)
    state = dag.init_state().split(2, 0, [8])
    state.key
    st = state.stages[-1]
    ours, theirs = replace(st, auto_unroll_max_step=16), dataclasses.replace(st, auto_unroll_max_step=16)
    assert {f.name: getattr(ours, f.name) for f in dataclasses.fields(st)} == \
        {f.name: getattr(theirs, f.name) for f in dataclasses.fields(st)}
    copy = replace(state, steps=state.steps[:1])
    assert copy._key is None and copy.raw_stages is state.raw_stages and state._key is not None
    with pytest.raises(TypeError, match="no init field"):
        replace(st, colour="red")
    with pytest.raises(TypeError, match="_key"):
        replace(state, _key="x")


class _Node:
    """An object that can be part of a reference cycle and have a weak reference."""


def test_fewer_gc_passes_collects_only_young_objects_inside():
    before = gc.get_threshold()
    try:
        gc.set_threshold(700, 10, 10)
        with fewer_gc_passes(5000):
            assert gc.get_threshold() == (5000, 1000, 1000)
            assert gc.get_freeze_count() > 0  # the heap from before is not rescanned
            with fewer_gc_passes(20_000):  # nested: the outermost's settings stay
                assert gc.get_threshold() == (5000, 1000, 1000) and gc.get_freeze_count() > 0
            assert gc.get_threshold() == (5000, 1000, 1000) and gc.get_freeze_count() > 0
            cycle = _Node()
            cycle.me = cycle  # a cycle made inside is still collected after
            alive = weakref.ref(cycle)
            del cycle
        assert gc.get_threshold() == (700, 10, 10) and gc.get_freeze_count() == 0
        gc.collect()
        assert alive() is None
        gc.freeze()  # somebody else's frozen objects stay frozen
        with fewer_gc_passes(5000):
            pass
        assert gc.get_freeze_count() > 0
        gc.unfreeze()
        gc.set_threshold(0, 10, 10)
        with fewer_gc_passes(5000):
            assert gc.get_threshold()[0] == 0 and gc.get_freeze_count() == 0
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
