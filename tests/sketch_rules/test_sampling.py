"""Random annotation: programs sampled from every sketch compile and match numpy."""
import numpy as np
import pytest

import ir
import sketch_rules as SR
from sketch_rules import analysis as A
from autosched import ops

WORKLOADS = {
    "matmul": lambda: ops.workload("matmul", 24, 40, 32),
    "matmul+bias+relu": lambda: ops.workload("dense", 12, 32, 20, bias=True),
    "conv_layer": lambda: ops.workload("conv_layer", 1, 8, 8, 4, 8, 3, stride=1, padding=1),
    "norm": lambda: ops.suite_workload("NRM-1x48x40"),
    "softmax": lambda: ops.workload("softmax", (6, 40)),
    "softmax-long-rows": lambda: ops.workload("softmax", (3, 500)),
    "tbs": lambda: ops.suite_workload("TBS-1x16x2x8"),
    "conv2d_transpose-phase-major": lambda: ops.suite_workload("T2D-1x4x4x8x16-k4s2p1"),
    "conv_residual": lambda: ops.workload("conv_residual", 1, 6, 6, 8, 16, 1),
    "conv+silu (sigmoid inlined, fused)": lambda: ops.workload("conv2d_chain", 1, 6, 6, 8, 16, 1, epilogue="bias-silu"),
    "dense+gelu (erf inlined, fused)": lambda: ops.workload("dense_chain", (1, 10), 16, 24, epilogue="add-gelu"),
}


def run_program(w, task, state, inputs):
    kernel = ir.build(task.dag, state, layout_rewrite=True)
    args = [kernel.pack(t.name, a) if t.name in kernel.layouts else a for t, a in zip(task.dag.inputs, inputs)]
    outputs = w.output_buffers()
    kernel(*args, *outputs)
    return outputs


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_programs_sampled_from_every_sketch_match_numpy(name):
    w = WORKLOADS[name]()
    task = ir.SearchTask(ir.ComputeDAG(w.tensors), hardware=ir.HardwareParams(num_cores=2, vector_lanes=16))
    rng = np.random.default_rng(1)
    inputs = w.random_inputs(rng)
    expected = w.reference(inputs)
    sketches = SR.generate_sketches(task)
    per_sketch = 1 if len(sketches) > 8 else 3
    checked = 0
    for sketch in sketches:
        for state in SR.sample_programs(task, [sketch], per_sketch, rng):
            for got, want in zip(run_program(w, task, state, inputs), expected):
                np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-4, err_msg=str(state))
            checked += 1
    assert checked >= len(sketches)


def test_sampled_programs_are_annotated():
    w = WORKLOADS["matmul"]()
    # (every stage with work for the threads: this matmul alone has too little by default)
    hardware = ir.HardwareParams(num_cores=2, vector_lanes=16, min_parallel_work=0)
    task = ir.SearchTask(ir.ComputeDAG(w.tensors), hardware=hardware)
    states = SR.sample_programs(task, SR.generate_sketches(task), 30, np.random.default_rng(0))
    assert len(states) == 30 and len({str(s) for s in states}) == 30
    annotations = {it.annotation for s in states for st in s.stages for it in st.iters}
    assert {"parallel", "vectorize"} <= annotations
    assert {st.auto_unroll_max_step for s in states for st in s.stages} <= {0, 16, 64, 512}
    assert any(st.auto_unroll_max_step for s in states for st in s.stages)
    for s in states:  # every split length was chosen, and exactly
        for step in s.steps:
            if isinstance(step, ir.steps.SplitStep):
                assert None not in step.lengths


def test_sampling_is_deterministic_with_a_seed():
    w = WORKLOADS["conv_layer"]()
    task = ir.SearchTask(ir.ComputeDAG(w.tensors))
    sketches = SR.generate_sketches(task)
    a = SR.sample_programs(task, sketches, 10, np.random.default_rng(7))
    b = SR.sample_programs(task, sketches, 10, np.random.default_rng(7))
    assert [str(s) for s in a] == [str(s) for s in b]
    assert [ir.steps.steps_to_json(s.steps) for s in a] == [ir.steps.steps_to_json(s.steps) for s in b]


def test_change_compute_location_moves_flexible_stages():
    """The rfactor stages of softmax are not tiled: sampling puts them at root and inside
    their consumers."""
    w = WORKLOADS["softmax"]()
    task = ir.SearchTask(ir.ComputeDAG(w.tensors))
    states = SR.sample_programs(task, SR.generate_sketches(task), 60, np.random.default_rng(0))
    locations = {st.compute_at for s in states for st in s.stages if st.name == "softmax_maxelem"}
    assert {"root", "iter"} <= locations


def test_padding_is_computed_at_root_inside_the_convolution_or_inlined():
    """The CPU rules leave a convolution's padding to random annotation: every place it
    can be computed is sampled, and each program matches numpy."""
    w = ops.workload("conv2d", 1, 10, 10, 3, 8, 3, stride=2, padding=1, layout="NHWC")
    task = ir.SearchTask(ir.ComputeDAG(w.tensors), hardware=ir.HardwareParams(num_cores=2, vector_lanes=16))
    rng = np.random.default_rng(3)
    inputs = w.random_inputs(rng)
    expected = w.reference(inputs)
    states = SR.sample_programs(task, SR.generate_sketches(task), 120, rng)
    assert {s["pad"].compute_at for s in states} == {"root", "iter", "inline"}
    one_of_each = {s["pad"].compute_at: s for s in states}.values()
    for state in list(one_of_each) + states[:12]:
        for got, want in zip(run_program(w, task, state, inputs), expected):
            np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-4, err_msg=str(state))


def _sampled_matmuls(min_parallel_work: int, n: int = 40) -> list[tuple[int, bool, ir.State]]:
    """``n`` programs sampled for the 24x40x32 matmul (its root stage: 24·40 copies with
    24·40·32 multiply-adds inside, and a packed copy in some sketches), each with its root
    stage's work and whether it has a parallel loop."""
    w = WORKLOADS["matmul"]()
    hardware = ir.HardwareParams(num_cores=2, vector_lanes=16, min_parallel_work=min_parallel_work)
    task = ir.SearchTask(ir.ComputeDAG(w.tensors), hardware=hardware)
    out = []
    for s in SR.sample_programs(task, SR.generate_sketches(task), n, np.random.default_rng(3)):
        (root,) = [i for i, st in enumerate(s.stages) if not st.is_placeholder and st.compute_at == "root"]
        out.append((A.stage_work(s, root), any(it.annotation == "parallel" for st in s.stages for it in st.iters), s))
    return out


def test_stages_with_little_work_stay_serial_and_mid_sized_ones_are_a_choice():
    """A parallel region wakes the threads (microseconds): a stage with fewer iterations
    than ``min_parallel_work`` runs on one thread, one with up to PARALLEL_OPTIONAL_FACTOR
    times as many either way (the search chooses), a larger one in parallel."""
    assert not any(parallel for _, parallel, _ in _sampled_matmuls(10 ** 6))
    assert all(parallel for _, parallel, _ in _sampled_matmuls(1))
    least = 33000
    sampled = _sampled_matmuls(least)
    assert all(not parallel for work, parallel, _ in sampled if work < least)
    assert all(parallel for work, parallel, _ in sampled if work >= least * SR.annotation.PARALLEL_OPTIONAL_FACTOR)
    assert {parallel for work, parallel, _ in sampled if work >= least} == {True, False}
    assert min(work for work, _, _ in sampled) == 24 * 40 * 32   # (the stage fused into its output's tiles)
    w = WORKLOADS["matmul"]()
    inputs = w.random_inputs(np.random.default_rng(0))
    expected = w.reference(inputs)
    task = ir.SearchTask(sampled[0][2].dag)
    some = [s for _, p, s in sampled if p][:4] + [s for _, p, s in sampled if not p][:4]
    for state in some:   # serial and parallel ones alike compute the matmul
        for got, want in zip(run_program(w, task, state, inputs), expected):
            np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-4, err_msg=str(state))


def test_an_elementwise_stage_never_vectorises_one_lane_where_longer_loops_exist():
    """A stage whose innermost loop has extent 1 vectorises it fused with the loops outside
    (two or all three here), never alone; and computes what numpy does."""
    x = ir.placeholder((4, 8, 1), name="x")
    dag = ir.ComputeDAG([x, ops.relu(x, name="y")])
    task = ir.SearchTask(dag, hardware=ir.HardwareParams(num_cores=2, vector_lanes=16))
    states = SR.sample_programs(task, SR.generate_sketches(task), 12, np.random.default_rng(2))
    extents = {it.extent for s in states for st in s.stages for it in st.iters if it.annotation == "vectorize"}
    assert extents == {8, 32}
    data = np.random.default_rng(0).standard_normal((4, 8, 1)).astype(np.float32)
    for state in states[:3]:
        out = np.empty_like(data)
        ir.build(dag, state)(data, out)
        np.testing.assert_array_equal(out, np.maximum(data, 0))


class _CountingRule:
    """An init rule that counts the samples drawn (it runs once per sample, first)."""

    def __init__(self, rule):
        self.rule, self.name, self.calls = rule, rule.name, 0

    def apply(self, ctx, state, rng):
        self.calls += 1
        return self.rule.apply(ctx, state, rng)


def _counted_sampling(task, n, seed=0):
    sketches = SR.generate_sketches(task)
    rules = list(SR.search_space(task).init_rules())
    rules[0] = counter = _CountingRule(rules[0])
    states = SR.sample_programs(task, sketches, n, np.random.default_rng(seed), init_rules=rules)
    return states, counter.calls


def test_sampling_stops_once_a_small_space_is_exhausted():
    """A global pooling's space holds a few dozen programs: asking for 256 returns them all
    after a few hundred draws, not the thousands ``max_tries`` allows."""
    w = ops.workload("global_avg_pool2d", 1, 14, 14, 96, layout="NHWC")
    task = ir.SearchTask(ir.ComputeDAG(w.tensors), hardware=ir.HardwareParams(num_cores=2, vector_lanes=16))
    states, draws = _counted_sampling(task, 256)
    found = {s.key for s in states}
    assert 1 < len(found) < 256
    assert draws < 20 * 256 // 4
    trailing = SR.sampling.exhausted_after(len(found))
    assert draws >= len(found) + trailing   # it stopped only after that many repeats in a row
    # what it found is the space: another seed drawing until it too sees only repeats finds
    # the same programs (at most one rare one more)
    more, _ = _counted_sampling(task, 256, seed=1)
    assert len({s.key for s in more} ^ found) <= 1


def test_sampling_a_large_space_fills_the_request():
    w = WORKLOADS["conv_layer"]()
    task = ir.SearchTask(ir.ComputeDAG(w.tensors), hardware=ir.HardwareParams(num_cores=2, vector_lanes=16))
    states, draws = _counted_sampling(task, 64)
    assert len({s.key for s in states}) == 64
    assert draws < 2 * 64
