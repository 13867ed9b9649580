"""The cuda target: GPU lowering, NVPTX code generation and PTX, run three ways — through
NVIDIA's ptxas (the PTX is valid for sm_90), in the numpy emulator (the program computes
the right values and has no races or out-of-bounds accesses) and, where a GPU is present,
on the device against numpy."""
from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

import ir
import sketch_rules as SR
from autosched import ops
from ir.cuda.runtime import device_attributes
from ir.cuda.emulator import EmulationError
from ir.cuda.passes import children, walk, with_children
from ir.loop_ir import AllReduce, Barrier, For, Stmt
from ir.lower import LoweringError

HAS_PTXAS = shutil.which("ptxas") is not None
HAS_GPU = device_attributes() is not None
needs_ptxas = pytest.mark.skipif(not HAS_PTXAS, reason="NVIDIA's ptxas is not on the PATH (CUDA toolkit)")
needs_gpu = pytest.mark.skipif(not HAS_GPU, reason="no CUDA device: needs an NVIDIA GPU, its driver and cuda-python")

#: the issue's workloads at sizes whose programs build in a second or two
WORKLOADS = {
    "GMM": lambda: ops.suite_workload("GMM-1x128x128x128"),
    "C2D": lambda: ops.workload("conv2d", 1, 14, 14, 32, 32, 3, stride=1, padding=1),
    "DEP": lambda: ops.workload("depthwise_conv2d", 1, 28, 28, 32, 3, stride=2, padding=1),
    "NRM": lambda: ops.workload("norm", 1, 256, 256),
    "SMX": lambda: ops.workload("softmax", (64, 256)),
    "CBR": lambda: ops.workload("conv_layer", 1, 14, 14, 32, 32, 3, stride=1, padding=1),
}
#: the same computations small enough for the emulator (a few seconds each)
TINY = {
    "GMM": lambda: ops.workload("batch_matmul", 1, 32, 32, 32),
    "C2D": lambda: ops.workload("conv2d", 1, 6, 6, 8, 16, 3, stride=1, padding=1),
    "DEP": lambda: ops.workload("depthwise_conv2d", 1, 8, 8, 16, 3, stride=2, padding=1),
    "NRM": lambda: ops.workload("norm", 1, 64, 64),
    "SMX": lambda: ops.workload("softmax", (8, 128)),
    "CBR": lambda: ops.workload("conv_layer", 1, 6, 6, 8, 16, 3, stride=1, padding=1),
}


def cuda_task(w) -> ir.SearchTask:
    return ir.SearchTask(ir.ComputeDAG(w.tensors), target="cuda", hardware=ir.HardwareParams.cuda())


def programs_of_every_sketch(task, per_sketch: int, seed: int = 0):
    sketches = SR.generate_sketches(task)
    assert sketches
    out = []
    for i, sketch in enumerate(sketches):
        got = SR.sample_programs(task, [sketch], per_sketch, np.random.default_rng(seed + i))
        assert got, f"no program sampled from sketch {i}:\n{sketch}"
        out.extend(got)
    return out


def check_against_numpy(w, run) -> None:
    inputs = w.random_inputs(np.random.default_rng(1))
    outputs = w.output_buffers()
    run(*inputs, *outputs)
    for got, want in zip(outputs, w.reference(inputs)):
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3)


# PTX accepted by ptxas --------------------------------------------------------------------

@needs_ptxas
@pytest.mark.parametrize("name", list(WORKLOADS))
def test_programs_of_every_gpu_sketch_lower_to_ptx_that_ptxas_accepts(name, tmp_path):
    w = WORKLOADS[name]()
    task = cuda_task(w)
    for i, state in enumerate(programs_of_every_sketch(task, 2)):
        ptx = ir.build(task.dag, state, target="cuda", emit="ptx")
        assert ".target sm_90" in ptx and ".entry" in ptx
        path = tmp_path / f"{name}{i}.ptx"
        path.write_text(ptx)
        got = subprocess.run(["ptxas", "-arch=sm_90", str(path), "-o", str(tmp_path / "out.cubin")],
                             capture_output=True, text=True)
        assert got.returncode == 0, f"ptxas rejected the PTX of\n{state}\n{got.stderr}"


def test_generated_llvm_uses_address_spaces_and_nvvm_intrinsics():
    w = WORKLOADS["GMM"]()
    task = cuda_task(w)
    state = programs_of_every_sketch(task, 1)[0]
    text = ir.build(task.dag, state, target="cuda", emit="llvm")
    for needle in ("ptx_kernel", "ptr addrspace(1) noalias readonly", "addrspace(3) global",
                   "@llvm.nvvm.read.ptx.sreg.tid.x", "@llvm.nvvm.read.ptx.sreg.ctaid.x", "@llvm.nvvm.barrier0",
                   '"nvvm.maxntid"'):
        assert needle in text, needle
    ptx = ir.build(task.dag, state, target="cuda", emit="ptx")
    assert "ld.global.nc" in ptx and "st.shared" in ptx and "bar.sync" in ptx


def test_cross_thread_reduction_is_warp_shuffles():
    task = cuda_task(WORKLOADS["NRM"]())
    crossed = [s for s in programs_of_every_sketch(task, 1)
               if any(it.annotation == "threadIdx.x" and it.kind == "reduce" for it in s["norm_square_sum"].iters)]
    assert crossed
    ptx = ir.build(task.dag, crossed[0], target="cuda", emit="ptx")
    assert "shfl.sync.bfly" in ptx


# the emulator: right values, no races --------------------------------------------------------

@pytest.mark.parametrize("name", list(TINY))
def test_programs_of_every_gpu_sketch_compute_the_reference_in_the_emulator(name):
    w = TINY[name]()
    task = cuda_task(w)
    for state in programs_of_every_sketch(task, 2, seed=3):
        kernel = ir.build(task.dag, state, target="cuda", emit="kernel")
        check_against_numpy(w, kernel.emulate)


def _without_barriers(s: Stmt) -> Stmt:
    kids = children(s)
    return with_children(s, tuple(_without_barriers(k) for k in kids if not isinstance(k, Barrier))) if kids else s


def test_the_emulator_finds_the_race_of_a_missing_barrier():
    w = TINY["GMM"]()
    task = cuda_task(w)
    state = next(s for s in programs_of_every_sketch(task, 4) if "A.shared" in str(s))
    kernel = ir.build(task.dag, state, target="cuda")
    check_against_numpy(w, kernel.emulate)  # with its barriers: fine
    for k in kernel.program.kernels:
        k.body = _without_barriers(k.body)
        assert not any(isinstance(x, Barrier) for x in walk(k.body))
    with pytest.raises(EmulationError, match="race on"):
        check_against_numpy(w, kernel.emulate)


# lowering ---------------------------------------------------------------------------------------

def test_a_shared_tile_is_loaded_by_the_whole_block_between_two_barriers():
    w = TINY["GMM"]()
    task = cuda_task(w)
    state = programs_of_every_sketch(task, 1)[0]
    (kernel,) = ir.lower_gpu(state, "k", task.hardware).kernels
    # one tile per block, sized by bound inference over all the block's threads
    sizes = [int(np.prod(state[name].root_extents)) for name in ("A.shared", "B.shared")]
    assert kernel.shared_bytes == 4 * sum(sizes)
    stores = [x for x in walk(kernel.body) if hasattr(x, "value") and x.buffer.scope == "shared"]
    assert len(stores) == 2 and all("threadIdx.x" in str(x.index) for x in stores)  # each thread its share
    lines = [ln.strip() for ln in str(kernel).splitlines()]
    first = lines.index("barrier")
    second = lines.index("barrier", first + 1)
    assert sum(ln.startswith(("A.shared[", "B.shared[")) for ln in lines[first:second]) == 2


def test_virtual_threads_get_their_own_registers_and_share_the_tile():
    w = TINY["GMM"]()
    task = cuda_task(w)
    for state in programs_of_every_sketch(task, 8, seed=5):
        vt = [it.extent for it in state.stages[-1].iters if it.annotation == "vthread"]
        if vt and vt[0] > 1:
            break
    else:
        pytest.fail("no sampled program has virtual threads")
    program = ir.lower_gpu(state, "k", task.hardware)
    (kernel,) = program.kernels
    assert not any(isinstance(x, For) and x.kind in ("vthread", "threadIdx.x", "blockIdx.x") for x in walk(kernel.body))
    local = next(x.buffer for x in walk(kernel.body) if getattr(x, "buffer", None) is not None
                 and x.buffer.name.endswith(".local"))
    region = 1
    for n in state["batch_matmul.local"].root_extents[:3]:
        region *= n
    assert local.capacity == region * vt[0]  # one register tile per virtual thread
    assert str(kernel).count("barrier") == 2  # the shared loads are not repeated per virtual thread
    check_against_numpy(w, ir.build(task.dag, state, target="cuda").emulate)


def test_cross_thread_reduction_lowers_to_an_allreduce_and_one_store():
    task = cuda_task(TINY["NRM"]())
    state = next(s for s in programs_of_every_sketch(task, 1) if "norm_square_sum.rf" not in str(s) and
                 any(it.kind == "reduce" and it.annotation == "threadIdx.x" for it in s["norm_square_sum"].iters))
    threads = next(it.extent for it in state["norm_square_sum"].iters if it.annotation == "threadIdx.x")
    program = ir.lower_gpu(state, "k", task.hardware)
    first = program.kernels[0]
    assert first.block == threads and sum(isinstance(x, AllReduce) for x in walk(first.body)) == 1
    assert "(threadIdx.x == 0)" in str(first)  # one thread writes the result to global memory
    assert [b.name for b in program.temporaries] == ["norm_square_sum"]


def test_a_long_reduction_without_space_is_split_over_blocks_by_rfactor():
    """A 2-norm of a whole matrix: partial sums over many blocks, then one block's
    cross-thread reduction of them."""
    task = cuda_task(TINY["NRM"]())
    state = next(s for s in programs_of_every_sketch(task, 1) if "norm_square_sum.rf" in str(s))
    rf, final, _ = ir.lower_gpu(state, "k", task.hardware).kernels
    assert rf.grid * rf.block == state["norm_square_sum.rf"].op.shape[1]  # one partial sum per thread
    assert sum(isinstance(x, AllReduce) for x in walk(final.body)) == 1


def test_block_limits_are_errors():
    w = ops.workload("batch_matmul", 1, 64, 64, 64)
    dag = ir.ComputeDAG(w.tensors)
    s = dag.init_state().split("batch_matmul", "ax1", [32]).fuse("batch_matmul", ["ax1.1", "ax2"])
    s = s.apply(ir.steps.AnnotationStep(s.stage_index("batch_matmul"), 2, "threadIdx.x"))  # 32 x 64 threads
    with pytest.raises(LoweringError, match="2048 threads per block \\(at most 1024\\)"):
        ir.lower_gpu(s, "k", ir.HardwareParams.cuda())
    with pytest.raises(LoweringError, match="GPU thread binding: build it for target='cuda'"):
        ir.lower(s)


def test_a_cuda_task_has_gpu_parameters_and_no_layout_rewrite():
    dag = ir.ComputeDAG(WORKLOADS["GMM"]().tensors)
    task = ir.SearchTask(dag, target="cuda")
    assert task.target.backend is ir.Target.parse("gpu").backend and str(task.target).startswith("cuda -arch=sm_")
    hw = task.hardware
    assert hw.is_gpu and hw.warp_size == 32 and hw.max_threads_per_block >= 1024 and hw.max_vthread_extent == 8
    assert not task.layout_rewrite
    assert ir.SearchTask(dag).target == ir.Target.host() and not ir.SearchTask(dag).hardware.is_gpu
    with pytest.raises(ValueError, match="unknown target 'rocm'"):
        ir.SearchTask(dag, target="rocm")
    with pytest.raises(ValueError, match="emit='ptx' is for target 'cuda'"):
        ir.build(dag, emit="ptx")


@pytest.mark.skipif(HAS_GPU, reason="checks the error of a machine without a GPU")
def test_without_a_gpu_running_says_no_device_but_ptx_still_builds():
    w = ops.workload("batch_matmul", 1, 8, 8, 8)
    dag = ir.ComputeDAG(w.tensors)
    kernel = ir.build(dag, target="cuda")  # the naive program: one thread
    assert ".entry" in kernel.ptx
    inputs, outputs = w.random_inputs(np.random.default_rng(0)), w.output_buffers()
    with pytest.raises(ir.NoCudaDevice, match="no CUDA device found|cuda-python is not installed"):
        kernel(*inputs, *outputs)
    check_against_numpy(w, kernel.emulate)


# on the device ------------------------------------------------------------------------------

@needs_gpu
@pytest.mark.parametrize("name", list(WORKLOADS))
def test_programs_of_every_gpu_sketch_match_numpy_on_the_device(name):
    w = WORKLOADS[name]()
    task = cuda_task(w)
    for state in programs_of_every_sketch(task, 2):
        kernel = ir.build(task.dag, state, target="cuda")
        check_against_numpy(w, kernel)
        assert kernel.time(*w.random_inputs(np.random.default_rng(0)), *w.output_buffers(), number=2).median > 0


def test_float64_math_that_would_call_libm_is_a_clear_error():
    a = ir.placeholder((64,), "float64", name="A")
    dag = ir.ComputeDAG([a, ir.compute((64,), lambda i: ir.exp(a[i]), name="B")])
    with pytest.raises(LoweringError, match="exp on float64 is not available on the cuda target"):
        ir.build(dag, target="cuda", emit="ptx")
