"""Random annotation: programs sampled from every sketch compile and match numpy."""
import numpy as np
import pytest

import ir
import sketch_rules as SR
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
    task = ir.SearchTask(ir.ComputeDAG(w.tensors), hardware=ir.HardwareParams(num_cores=2, vector_lanes=16))
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
