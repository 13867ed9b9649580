"""A small ONNX CNN end to end through the cuda target without a GPU: its tasks are cuda
tasks, the programs the GPU search space samples and the GPU default schedules compile to
PTX that ``ptxas`` accepts, and the network run by the emulator (``ir.cuda.emulator``: the
kernels' semantics, with bounds and race checks) matches onnxruntime. On a machine with a
GPU the same executor runs on the device, and the network is tuned there, both checked
against onnxruntime. Skipped without onnx or onnxruntime."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="ONNX import needs the onnx package (pip install 'autosched[onnx]')")
ort = pytest.importorskip("onnxruntime", reason="checking the network needs onnxruntime")
from onnx import helper  # noqa: E402

import autosched  # noqa: E402
import ir  # noqa: E402
import sketch_rules as SR  # noqa: E402
from autosched import graph as G  # noqa: E402
from ir.cuda import codegen  # noqa: E402
from ir.cuda.runtime import device_attributes  # noqa: E402

from .test_onnx import make_model  # noqa: E402

CUDA = ir.Target.parse("cuda")
needs_gpu = pytest.mark.skipif(device_attributes() is None,
                               reason="no CUDA device: needs an NVIDIA GPU, its driver and cuda-python")


@pytest.fixture(scope="module")
def model():
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Flatten", ["p1"], ["f"]),
             helper.make_node("Gemm", ["f", "w2", "b2"], ["y"], transB=1)]
    inits = {"w1": rng.normal(0, 0.3, (4, 3, 3, 3)).astype("float32"), "b1": rng.normal(0, 0.1, 4).astype("float32"),
             "w2": rng.normal(0, 0.3, (5, 64)).astype("float32"), "b2": rng.normal(0, 0.1, 5).astype("float32")}
    return make_model(nodes, {"x": (1, 3, 8, 8)}, ["y"], inits)


@pytest.fixture(scope="module")
def partitioned(model):
    return G.partition(G.from_onnx(model))


@pytest.fixture(scope="module")
def sampled(partitioned):
    """One program of each task sampled from the GPU search space (what tuning measures)."""
    rng = np.random.default_rng(0)
    states = {}
    for w in partitioned.tasks:
        task = w.search_task(target=CUDA)
        states[w.workload_key] = SR.sample_programs(task, SR.generate_sketches(task), 1, rng)[0]
    return states


def onnxruntime_outputs(model, inputs):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": inputs[0]})


def test_the_tasks_of_a_network_are_cuda_tasks(partitioned):
    tasks = [w.search_task(target="cuda") for w in partitioned.tasks]
    assert len(tasks) >= 2
    for task in tasks:
        assert task.target == CUDA and task.hardware.is_gpu and not task.layout_rewrite
        assert SR.search_space(task).name == "gpu"


@pytest.mark.parametrize("programs", ["sampled", "default"])
def test_the_network_on_the_gpu_path_matches_onnxruntime_in_the_emulator(model, partitioned, sampled, programs):
    states = sampled if programs == "sampled" else None
    ex = G.GraphExecutor(partitioned, states=states, target="cuda", emulate=True, warn_untuned=False)
    assert all(isinstance(p.kernel, ir.CudaKernel) for p in ex.programs.values())
    assert all(p.tuned == (programs == "sampled") for w, p in ex.programs.items()
               if w in {t.workload_key for t in partitioned.tasks})
    inputs = partitioned.graph.random_inputs(0)
    (ours,), (theirs,) = ex.run(*inputs), onnxruntime_outputs(model, inputs)
    np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-4 * float(np.max(np.abs(theirs))))


@needs_gpu
@pytest.mark.parametrize("programs", ["sampled", "default"])
def test_the_network_on_the_device_matches_onnxruntime(model, partitioned, sampled, programs):
    states = sampled if programs == "sampled" else None
    ex = G.GraphExecutor(partitioned, states=states, target="cuda", warn_untuned=False)
    inputs = partitioned.graph.random_inputs(1)
    (ours,), (theirs,) = ex.run(*inputs), onnxruntime_outputs(model, inputs)
    np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-4 * float(np.max(np.abs(theirs))))
    assert ex.benchmark(*inputs, repeat=3)["median"] > 0


@needs_gpu
def test_the_network_tunes_on_the_device_and_its_tuned_programs_match_onnxruntime(model, partitioned, tmp_path):
    log = tmp_path / "cnn.cuda.jsonl"
    result = autosched.tune_networks(partitioned, trials=3 * len(partitioned.tasks), target="cuda", log_file=str(log),
                                     seed=0, measure_batch=4, verbose=0)
    assert result.trials >= len(partitioned.tasks) and log.stat().st_size > 0
    ex = result.executor(0)
    assert not ex.untuned and all(isinstance(p.kernel, ir.CudaKernel) for p in ex.programs.values())
    inputs = partitioned.graph.random_inputs(2)
    (ours,), (theirs,) = ex.run(*inputs), onnxruntime_outputs(model, inputs)
    np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-4 * float(np.max(np.abs(theirs))))


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="checking PTX needs NVIDIA's ptxas on the PATH")
def test_every_kernel_of_the_network_assembles_with_ptxas(partitioned, sampled):
    ex = G.GraphExecutor(partitioned, states=sampled, target="cuda", emulate=True, warn_untuned=False)
    for program in ex.programs.values():
        ptx = program.kernel.ptx
        assert ".entry" in ptx and f".target {CUDA.device}" in ptx
        assert codegen.assemble(ptx, CUDA.device)  # a cubin: ptxas accepted it (it raises otherwise)


def test_options_that_do_not_apply_to_the_gpu_are_refused(partitioned, tmp_path):
    with pytest.raises(ValueError, match="base_model=.* does not apply to target 'cuda"):
        G.GraphExecutor(partitioned, target="cuda", base_model=str(tmp_path / "model.json"), emulate=True)
    with pytest.raises(ValueError, match="emulate=True does not apply to target 'llvm"):
        G.GraphExecutor(partitioned, emulate=True, warn_untuned=False)
