"""Random annotation for the GPU: every sampled program binds its kernels to blocks and
threads the way Ansor's InitThreadBind does, and stays within the device's limits."""
import numpy as np
import pytest

import ir
import sketch_rules as SR
from autosched import ops
from ir.cuda.lower import block_limits_violation
from ir.steps import SplitStep
from sketch_rules.gpu_annotation import spatial_split_steps


def cuda_task(w):
    return ir.SearchTask(ir.ComputeDAG(w.tensors), target="cuda", hardware=ir.HardwareParams.cuda())


@pytest.fixture(scope="module")
def gmm():
    task = cuda_task(ops.suite_workload("GMM-1x1024x1024x1024"))
    return task, SR.sample_programs(task, SR.generate_sketches(task), 24, np.random.default_rng(0))


def test_a_tiled_root_binds_blocks_virtual_threads_and_threads_in_that_order(gmm):
    task, programs = gmm
    hw = task.hardware
    assert len(programs) == 24
    for s in programs:
        root = s["batch_matmul"]
        assert [it.annotation for it in root.iters[:3]] == ["blockIdx.x", "vthread", "threadIdx.x"]
        threads, vthreads = root.iters[2].extent, root.iters[1].extent
        assert hw.warp_size <= threads <= hw.max_threads_per_block and vthreads <= hw.max_vthread_extent
        assert block_limits_violation(s, hw) is None
        # every block loads its shared tiles with all its threads
        for name in ("A.shared", "B.shared"):
            bound = [it for it in s[name].iters if it.annotation == "threadIdx.x"]
            assert len(bound) == 1 and bound[0].extent == min(threads, bound[0].extent)
            assert s[name].iters[-1].annotation == "vectorize"


def test_the_cooperative_fetch_follows_the_thread_tiles_of_the_local_stage(gmm):
    task, programs = gmm
    s = programs[0]
    local = s.stage_index("batch_matmul.local")
    ids = spatial_split_steps(s, local)
    # the splits of its three space axes into five tile levels (made when it had another index)
    assert len(ids) == 3 and all(isinstance(s.steps[i], SplitStep) and len(s.steps[i].lengths) == 4 for i in ids)
    assert len({s.steps[i].stage_id for i in ids}) == 1 and [s.steps[i].iter_id for i in ids] == [0, 5, 10]
    threads = 1
    for i in ids:
        threads *= s.steps[i].lengths[1]  # level 1 of the lengths: the thread tile
    assert threads == s["batch_matmul"].iters[2].extent


def test_simple_stages_and_cross_thread_reductions_are_bound_too():
    task = cuda_task(ops.workload("softmax", (64, 1024)))
    for s in SR.sample_programs(task, SR.generate_sketches(task), 12, np.random.default_rng(1)):
        for st in s.stages:
            if st.is_placeholder or st.compute_at != "root":
                continue
            annotations = {it.annotation for it in st.iters}
            assert "threadIdx.x" in annotations, f"'{st.name}' runs on one thread:\n{s}"
            reduce_threads = [it for it in st.iters if it.kind == "reduce" and it.annotation == "threadIdx.x"]
            if reduce_threads:  # cross-thread: the rows are the blocks, a multiple of the warp threads each
                assert st.iters[0].annotation == "blockIdx.x" and reduce_threads[0].extent % 32 == 0


def test_programs_over_the_limits_are_never_sampled():
    small = ir.HardwareParams.cuda()
    from dataclasses import replace
    tight = replace(small, max_threads_per_block=64, max_shared_memory_per_block=4096)
    task = ir.SearchTask(ir.ComputeDAG(ops.suite_workload("GMM-1x512x512x512").tensors), target="cuda",
                         hardware=tight)
    programs = SR.sample_programs(task, SR.generate_sketches(task), 16, np.random.default_rng(2))
    assert programs
    for s in programs:
        assert block_limits_violation(s, tight) is None
        assert s["batch_matmul"].iters[2].extent <= 64
