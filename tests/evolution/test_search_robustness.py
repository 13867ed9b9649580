"""The search never dies: mutation and crossover work on programs whose stages differ from
the DAG's (cache stages and rfactor stages added by sketches), and any exception while making
one candidate costs that candidate, never the round.

The property test runs every mutation and crossover unguarded on programs of many suite
workloads, fused subgraphs included; its long variant (``python -m pytest -m long
tests/evolution/test_search_robustness.py``) runs thousands of evolution steps per workload.
"""
import dataclasses

import numpy as np
import pytest

import ir
import sketch_rules as SR
from autosched import ops
from evolution import Crossover, SearchParams, SketchPolicy, evolve, islands
from evolution.genes import sketch_length
from evolution.mutation import (Mutation, MutationContext, cpu_mutations, draw_mutation, mutate_compute_location,
                                mutate_tile_size)
from ir.step_limits import MAX_VECTOR_LANES
from tests.autosched.stand_ins import StandInModel

HW = ir.HardwareParams(num_cores=2, vector_lanes=16)


def dense_bias_relu(m=64, k=96, n=80):
    """The reproducer of the crash: a fused dense + bias + relu whose weight is not constant
    (so one sketch reads it through a packed cache_read copy)."""
    x = ir.placeholder((m, k), name="X")
    w = ir.placeholder((k, n), name="W")
    b = ir.placeholder((n,), name="b")
    r = ir.reduce_axis(k, name="k")
    d = ir.compute((m, n), lambda i, j: ir.sum(x[i, r] * w[r, j], axis=r), name="D", tag="dense")
    y = ir.compute((m, n), lambda i, j: ir.max(d[i, j] + b[j], 0.0), name="Y")
    return ir.SearchTask(ir.ComputeDAG([x, w, b, y]), hardware=HW, desc="dense_bias_relu")


def suite_task(name):
    return ir.SearchTask(ir.ComputeDAG(ops.suite_workload(name).tensors), hardware=HW, desc=name)


#: workloads whose sketches add stages in every way (cache_write, cache_read packing,
#: rfactor, fused consumers, inlined pads and softmax)
WORKLOADS = ["GMM-1x128x128x128", "C1D-1x256x64x128-k3s2p1", "C2D-1x14x14x256x256-k3s1p1", "GRP-1x14x14x256x256-k3s1p1g4",
             "DEP-1x14x14x512-k3s2p1", "T2D-1x4x4x512x256-k4s2p1", "CAP-1x8x8x16x16-k3s1p1", "NRM-1x256x256",
             "CBR-1x28x28x128x256-k1s2p0", "TBS-1x64x12x128"]


def test_crossover_of_programs_of_the_packing_sketch_does_not_crash():
    """Was: KeyError 'W.local' in crossover after 128 trials of a fused dense + bias +
    relu: the compute-location mutation read a step's stage id against the final stages
    (shifted by the cache_read stage), moved the sketch's own compute_at, and the child
    was then taken for a program of a shorter sketch."""
    task = dense_bias_relu()
    sketches = SR.generate_sketches(task)
    assert any(st.origin == "cache_read" for s in sketches for st in s.raw_stages)
    rng = np.random.default_rng(0)
    pool = SR.sample_programs(task, sketches, 40, rng)
    crossover = Crossover(sketches)
    for _ in range(600):
        a, b = pool[rng.integers(len(pool))], pool[rng.integers(len(pool))]
        for child in (crossover(a, b, rng), mutate_compute_location(a, rng, sketch_length(a, sketches)[1])):
            if child is not None:
                assert sketch_length(child, sketches) is not None
                pool.append(child)


def test_compute_location_mutation_leaves_the_sketch_alone():
    task = dense_bias_relu()
    sketches = SR.generate_sketches(task)
    packed = [s for s in SR.sample_programs(task, sketches, 60, np.random.default_rng(1))
              if any(st.origin == "cache_read" for st in s.raw_stages)]
    for seed, parent in enumerate(packed[:10]):
        k, n = sketch_length(parent, sketches)
        child = mutate_compute_location(parent, np.random.default_rng(seed), decisions_from=n)
        if child is None:
            continue
        assert sketch_length(child, sketches) == (k, n)
        assert [s.record() for s in child.steps[:n]] == [s.record() for s in parent.steps[:n]]
        moved = [i for i, (a, b) in enumerate(zip(parent.steps, child.steps)) if a != b]
        assert len(moved) == 1 and child.raw_stages[child.steps[moved[0]].stage_id].origin == "cache_read"


def test_a_program_is_taken_for_its_own_sketch_not_a_shorter_one():
    task = dense_bias_relu()
    sketches = SR.generate_sketches(task)
    for s in SR.sample_programs(task, sketches, 30, np.random.default_rng(2)):
        k, n = sketch_length(s, sketches)
        assert [st.name for st in sketches[k].raw_stages] == [st.name for st in s.raw_stages]
        assert all(type(a) is type(b) for a, b in zip(sketches[k].steps, s.steps[:n]))


def _longest_vector(state) -> int:
    return max([it.extent for st in state.stages if not st.is_placeholder and st.compute_at != "inline"
                for it in st.iters if it.annotation == "vectorize"] or [0])


def test_a_child_that_lengthens_a_vector_loop_past_the_hardware_is_dropped():
    """Was: a tuning log of EfficientNet-B0 held a measured program vectorising 1152 lanes
    (a consumer's loop following its producer's tiles, lengthened by a tile-size mutation),
    which no log could give back (over ``ir.step_limits``'s cap of 1024 lanes): the
    evolution now drops a child whose vector loop is longer than ``max_vectorize_size``."""
    task = dense_bias_relu(m=8, k=32, n=1152)
    limit = task.hardware.max_vectorize_size
    evolution = evolve.Evolution(task, StandInModel(), SearchParams(islands=1), SR.generate_sketches(task),
                                 np.random.default_rng(0))
    pool = SR.sample_programs(task, evolution.sketches, 40, np.random.default_rng(0))
    assert max(_longest_vector(s) for s in pool) <= limit  # sampling keeps to it
    rng, kept, dropped = np.random.default_rng(0), 0, []
    for _ in range(1500):
        child = mutate_tile_size(pool[rng.integers(len(pool))], rng, 64)
        if child is None:
            continue
        if evolution.runs_on_target(child):
            assert _longest_vector(child) <= limit
            kept += 1
            pool.append(child)
        else:
            dropped.append(_longest_vector(child))
    assert kept > 500 and dropped and min(dropped) > limit and max(dropped) > MAX_VECTOR_LANES // 2


class _Boom:
    """Draws mutations as the evolution does, and makes every other one raise (as a bug in
    one would)."""

    def __init__(self):
        self.calls = 0

    def __call__(self, rng, mutations, weights=None):
        return _Raising(draw_mutation(rng, mutations, weights), self)


class _Raising(Mutation):
    def __init__(self, inner: Mutation, boom: _Boom):
        super().__init__(inner.weight)
        self.name, self.inner, self.boom = inner.name, inner, boom

    def apply(self, state, rng, ctx):
        self.boom.calls += 1
        if self.boom.calls % 2:
            raise KeyError("W.local")
        return self.inner.apply(state, rng, ctx)


def test_an_exception_making_a_candidate_costs_that_candidate_not_the_round(monkeypatch):
    task = suite_task("GMM-1x128x128x128")
    boom = _Boom()
    monkeypatch.setattr(evolve, "draw_mutation", boom)
    model = StandInModel()
    model.seen = 100  # ranks from the start
    policy = SketchPolicy(task, model, SearchParams(population=32, generations=2, init_min_population=8,
                                                    islands=1), seed=0)
    with pytest.warns(RuntimeWarning, match=r"left out of this round because making them raised: \d+x mutation "
                                            r"\w+: KeyError \(e.g. \"'W.local'\"\)") as caught:
        batch = policy.next_batch(16)  # (a first round: a probe of half the batch)
    assert len(caught) == 1  # one report a round
    assert len(batch) == 8 and boom.calls > 10
    assert sum(policy.stats["rejected"].values()) == (boom.calls + 1) // 2


def test_island_workers_count_rejected_candidates_and_merge_them(monkeypatch):
    """What an island returns (run here: the worker function itself) carries its rejections."""
    task = suite_task("GMM-1x128x128x128")
    monkeypatch.setattr(evolve, "draw_mutation", _Boom())
    sketches = SR.generate_sketches(task)
    population = SR.sample_programs(task, sketches, 16, np.random.default_rng(0))
    params = SearchParams(population=16, generations=2, islands=2)
    result = islands.evolve_island(task, [tuple(s.steps) for s in sketches], StandInModel(), params, [],
                                   [tuple(s.steps) for s in population], 4, seed=3)
    best, counts, examples = result
    assert len(best) == 4 and sum(counts.values()) > 0 and all("W.local" in m for m in examples.values())
    rejected = evolve.Rejections()
    merged = islands.merge_islands(task.dag, [result, result], 4, rejected)
    assert len(merged) == 4 and rejected.counts == {k: 2 * n for k, n in counts.items()}


def _evolution_steps(task, steps: int, seed: int) -> int:
    """Mutations (each kind) and crossovers, unguarded, on an evolving pool; every child must
    replay to itself and stay a program of a sketch. Returns how many children were made."""
    sketches = SR.generate_sketches(task)
    rng = np.random.default_rng(seed)
    pool = SR.sample_programs(task, sketches, 24, rng)
    crossover = Crossover(sketches)
    mutations = {m.name: m for m in cpu_mutations()}
    kinds = list(mutations) + ["random_walk", "crossover"]
    ctx = MutationContext(SR.CPU_SPACE.auto_unroll_choices)
    made = 0
    for _ in range(steps):
        a = pool[rng.integers(len(pool))]
        kind = kinds[rng.integers(len(kinds))]
        if kind == "crossover":
            child = crossover(a, pool[rng.integers(len(pool))], rng)
        elif kind == "random_walk":
            child = mutations["tile_size"].apply(a, rng, dataclasses.replace(ctx, random_walk_q=0.5))
        else:
            child = mutations[kind].apply(a, rng, dataclasses.replace(ctx, decisions_from=sketch_length(a, sketches)[1]))
        if child is None:
            continue
        made += 1
        assert ir.State.from_steps(task.dag, [s.record() for s in child.steps]).key == child.key, kind
        assert sketch_length(child, sketches) is not None, kind
        pool[rng.integers(len(pool))] = child  # the pool evolves: children become parents
    return made


@pytest.mark.parametrize("name", WORKLOADS + ["dense_bias_relu"])
def test_mutations_and_crossover_never_raise(name):
    task = dense_bias_relu() if name == "dense_bias_relu" else suite_task(name)
    assert _evolution_steps(task, 150, seed=0) > 20


@pytest.mark.long
@pytest.mark.parametrize("name", WORKLOADS + ["dense_bias_relu"])
def test_mutations_and_crossover_never_raise_long(name):
    task = dense_bias_relu() if name == "dense_bias_relu" else suite_task(name)
    assert _evolution_steps(task, 3000, seed=1) > 300


def _search_rounds(task, rounds: int, population: int, generations: int) -> None:
    model = StandInModel()
    policy = SketchPolicy(task, model, SearchParams(population=population, generations=generations,
                                                    init_min_population=12, islands=1), seed=0)
    for _ in range(rounds):
        batch = policy.next_batch(8)
        assert batch and policy.stats["rejected"] == {}
        policy.update(batch, [1e-3 * (1 + i) for i in range(len(batch))])


@pytest.mark.parametrize("name", ["CBR-1x28x28x128x256-k1s2p0", "NRM-1x256x256", "dense_bias_relu"])
def test_search_rounds_reject_nothing(name):
    """Whole rounds of the policy (sampling, evolution, picking) under a stand-in model:
    no candidate is lost to an exception."""
    _search_rounds(dense_bias_relu() if name == "dense_bias_relu" else suite_task(name), 4, 48, 2)


@pytest.mark.long
@pytest.mark.parametrize("name", WORKLOADS + ["dense_bias_relu"])
def test_search_rounds_reject_nothing_long(name):
    """Thousands of evolution steps a workload (8 rounds of 3 generations of 128)."""
    _search_rounds(dense_bias_relu() if name == "dense_bias_relu" else suite_task(name), 8, 128, 3)
