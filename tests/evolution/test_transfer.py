"""Programs carried between tasks of one operator family (``evolution.transfer``): the
adapted program replays on the other DAG, its splits fit that DAG's extents, and it
computes what that DAG says (against numpy); the policy takes adapted programs into its
initial population; a round can use its own search parameters."""
import numpy as np
import pytest

import ir
import sketch_rules as SR
from autosched import ops
from evolution import SearchParams, SketchPolicy
from evolution.transfer import adapt_program, adapt_programs, nearest_factorization
from ir.steps import SplitStep
from tests.evolution.programs import check_computes

HW = ir.HardwareParams(num_cores=2, vector_lanes=16)

PAIRS = {
    "conv2d": (ops.workload("conv2d", 1, 6, 6, 4, 8, 3, stride=1, padding=1, layout="NHWC"),
               ops.workload("conv2d", 1, 10, 10, 6, 12, 3, stride=1, padding=1, layout="NHWC")),
    "conv2d_1x1": (ops.workload("conv2d", 1, 8, 8, 16, 24, 1, layout="NHWC"),
                   ops.workload("conv2d", 1, 14, 14, 40, 20, 1, layout="NHWC")),
    "dense": (ops.workload("dense", 4, 24, 16, bias=True), ops.workload("dense", 6, 40, 36, bias=True)),
    "depthwise": (ops.workload("depthwise_conv2d", 1, 12, 12, 8, 3, padding=1),
                  ops.workload("depthwise_conv2d", 1, 7, 7, 20, 3, padding=1)),
}


def task_of(w):
    return ir.SearchTask(ir.ComputeDAG(w.tensors), hardware=HW)


def sampled(task, n, seed=0):
    return SR.sample_programs(task, SR.generate_sketches(task), n, np.random.default_rng(seed))


@pytest.mark.parametrize("family", sorted(PAIRS))
def test_adapted_programs_replay_and_compute_the_other_dag(family):
    small, large = PAIRS[family]
    for source_w, dest_w in ((small, large), (large, small)):
        source, dest = task_of(source_w), task_of(dest_w)
        programs = sampled(source, 6, seed=len(family))
        adapted = [adapt_program(p, dest) for p in programs]
        ok = [a for a in adapted if a is not None]
        assert len(ok) >= len(programs) // 2, f"{family}: only {len(ok)} of {len(programs)} programs adapted"
        for state in ok:
            assert state.dag is dest.dag
            replayed = ir.State.from_steps(dest.dag, state.steps)
            assert replayed.key == state.key
            for step in state.steps:
                if isinstance(step, SplitStep):
                    assert step.extent % int(np.prod(step.lengths)) == 0
                    assert step.lengths[-1] <= HW.max_innermost_split_factor
        for state in ok[:2]:
            check_computes(dest_w, dest, state)


def test_a_program_adapted_to_its_own_task_is_itself():
    w = PAIRS["conv2d"][0]
    task = task_of(w)
    for program in sampled(task, 4):
        assert adapt_program(program, task).key == program.key


def test_a_program_of_another_family_is_not_adapted():
    conv = task_of(PAIRS["conv2d"][0])
    dense = task_of(PAIRS["dense"][0])
    programs = sampled(conv, 4)
    assert adapt_programs(programs, dense) == []
    assert all(adapt_program(p, dense) is None for p in programs)


def test_a_program_of_a_dag_of_fewer_operations_gets_its_extra_stages_annotated():
    """A depthwise layer with a bias only and one with a bias and a ReLU are one operator
    family; the first's steps schedule the second's first stages and would leave its ReLU a
    serial scalar loop (MobileNet-V3's 112x112 layer took such a library program: 3.6x
    slower): the ReLU gets the default schedule's annotations. The other way
    (a program of more operations) is not adapted."""
    def chain(hw, epilogue):
        w = ops.workload("depthwise_chain", 1, hw, hw, 16, 3, padding=1, epilogue=epilogue)
        return w, task_of(w)
    (_, bias), (bias_relu_w, bias_relu) = chain(12, "bias"), chain(28, "bias-relu")
    assert len(bias.dag.compute_ops) < len(bias_relu.dag.compute_ops)
    programs = sampled(bias, 4)
    adapted = [adapt_program(p, bias_relu) for p in programs]
    assert all(a is not None for a in adapted)
    at_root = 0
    for state in adapted:
        relu = next(st for st in state.stages if st.name.startswith("relu"))
        if relu.compute_at == "root":   # (the source's steps never place it)
            at_root += 1
            assert "vectorize" in {it.annotation for it in relu.iters}, str(state)   # (too little work for threads)
        check_computes(bias_relu_w, bias_relu, state)
    assert at_root == len(adapted)
    assert all(adapt_program(p, bias) is None for p in sampled(bias_relu, 4))


def test_nearest_factorization():
    assert nearest_factorization((4, 8), 32, 64) == (4, 8)          # it fits: kept
    assert nearest_factorization((4, 8), 48, 64, source_extent=32) in ((4, 12), (6, 8))
    assert nearest_factorization((4, 8), 48, 64) in ((3, 8), (4, 6))      # the outer part free
    assert nearest_factorization((1, 16), 7, 64) == (1, 7)      # a prime extent
    assert nearest_factorization((2, 128), 256, 64) == (2, 64)      # innermost capped
    got = nearest_factorization((3, 5, 2), 96, 16)
    assert 96 % int(np.prod(got)) == 0 and got[-1] <= 16
    assert nearest_factorization((1, 16), 408, 64) == (1, 17)             # the nearest is an odd width
    assert nearest_factorization((1, 16), 408, 64, group=8) == (1, 24)     # on the 8-lane grid


class KeyModel:
    """Ranks one program first (by key), every other one equal."""
    can_rank = True

    def __init__(self, favourite=None):
        self.favourite, self.calls = favourite, []

    def predict(self, task, states):
        self.calls.append(len(states))
        return np.array([1.0 if s.key == self.favourite else 0.0 for s in states])

    def update(self, records):
        pass


def test_policy_takes_adapted_programs_into_its_population():
    small, large = PAIRS["dense"]
    source, dest = task_of(small), task_of(large)
    seed = adapt_programs(sampled(source, 4, seed=5), dest)[0]
    model = KeyModel(seed.key)
    policy = SketchPolicy(dest, model, SearchParams(population=16, generations=1, init_min_population=8), seed=0)
    assert policy.add_initial([seed]) == 1
    assert policy.add_initial([seed]) == 0          # known already
    batch = policy.next_batch(4)
    assert seed.key in {s.key for s in batch}, "the favourite seed was not proposed"
    policy.update([seed], [1e-3])
    assert seed.key not in policy.extra_initial     # measured: no longer an extra
    assert policy.add_initial([seed]) == 0


def test_a_round_can_use_its_own_search_params():
    task = task_of(PAIRS["dense"][0])
    model = KeyModel()
    own = SearchParams(population=32, generations=3, init_min_population=8)
    policy = SketchPolicy(task, model, own, seed=0)
    short = SearchParams(population=8, generations=1, init_min_population=4)
    assert policy.next_batch(4, params=short)
    assert len(model.calls) == short.generations + 1   # generation 0 and 1 scored
    assert policy.params is own and policy.evolution.params is own
    model.calls.clear()
    policy.next_batch(4)
    assert len(model.calls) == own.generations + 1


def test_adapted_programs_keep_vector_loops_on_the_lane_grid(monkeypatch):
    """Fitted to 408 = 8 x 51 channels, a 16-, 32- or 64-lane vector would become 17, 34 or 51
    lanes, which the CPU space leaves out (``good_vector_length``): such programs are not
    carried over; without the rule some would be."""
    from evolution import transfer
    from sketch_rules.annotation import off_grid_vector_loops
    source = task_of(ops.workload("conv2d", 1, 8, 8, 32, 64, 1, layout="NHWC"))
    dest_w = ops.workload("conv2d", 1, 7, 7, 24, 408, 1, layout="NHWC")
    dest = task_of(dest_w)
    programs = sampled(source, 24)
    assert all(off_grid_vector_loops(p) == 0 for p in programs)
    adapted = adapt_programs(programs, dest)
    assert adapted and all(off_grid_vector_loops(a) == 0 for a in adapted)
    check_computes(dest_w, dest, adapted[0])
    monkeypatch.setattr(transfer, "vector_lane_group", lambda task: None)
    assert any(off_grid_vector_loops(a) for a in adapt_programs(programs, dest))
