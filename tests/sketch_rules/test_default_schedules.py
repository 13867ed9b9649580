"""The CPU default schedule (what an untuned workload runs) uses threads only where a
stage has the work for them (``HardwareParams.min_parallel_work``), and computes the same
either way."""
import numpy as np
import pytest

import ir
from autosched import ops
from sketch_rules import analysis as A
from sketch_rules.default_schedules import cpu_default_schedule


def _parallel_stages(state: ir.State) -> list[str]:
    return [st.op.name for st in state.stages if any(it.annotation == "parallel" for it in st.iters)]


@pytest.mark.parametrize("least, parallel", [(1 << 16, False), (1 << 10, True)])
def test_a_stage_with_little_work_runs_on_one_thread(least, parallel):
    w = ops.workload("dense", 4, 64, 48)          # 4·48·64 = 12288 multiply-adds
    dag = ir.ComputeDAG(w.tensors)
    state = cpu_default_schedule(dag, ir.HardwareParams(num_cores=2, vector_lanes=16, min_parallel_work=least))
    (stage,) = [i for i, st in enumerate(state.stages) if not st.is_placeholder and st.compute_at == "root"]
    assert A.stage_work(state, stage) == 4 * 48 * 64
    assert bool(_parallel_stages(state)) is parallel, str(state)
    assert "vectorize" in str(state)
    inputs = w.random_inputs(np.random.default_rng(0))
    out = w.output_buffers()
    ir.build(dag, state)(*inputs, *out)
    np.testing.assert_allclose(out[0], w.reference(inputs)[0], rtol=1e-4, atol=1e-4)


def test_the_threshold_defaults_to_this_cpus():
    big = ir.ComputeDAG(ops.workload("dense", 64, 256, 256).tensors)   # 4M multiply-adds
    small = ir.ComputeDAG(ops.workload("dense", 1, 72, 24).tensors)    # a squeeze-excitation layer
    assert _parallel_stages(cpu_default_schedule(big)) and not _parallel_stages(cpu_default_schedule(small))
    assert ir.HardwareParams.host().min_parallel_work == ir.HardwareParams(num_cores=1, vector_lanes=1).min_parallel_work


def test_stage_work_counts_the_stages_computed_inside():
    """A stage computed inside another's loops counts once per iteration of the loops
    around it: the work a parallel region around the outer stage shares."""
    A_, B_ = ir.placeholder((16, 8), name="A"), ir.placeholder((8, 12), name="B")
    C = ops.matmul(A_, B_, name="C")
    D = ops.relu(C, name="D")
    s = ir.ComputeDAG([A_, B_, D]).init_state()
    s = s.split("D", "ax0", [4]).compute_at("C", "D", "ax0.0")
    d, c = s.stage_index("D"), s.stage_index("C")
    assert A.stage_work(s, c) == 4 * 12 * 8                  # per iteration of ax0.0
    assert A.stage_work(s, d) == 16 * 12 + 4 * (4 * 12 * 8)   # its own loops, and C's in each of 4 ax0.0
