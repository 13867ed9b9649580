"""Measurement on the cuda target: the builder works without a GPU (PTX, a cubin where
ptxas is installed, the launch plan); without a GPU, tuning says so; with one, programs
are verified against the CPU reference and timed."""
import pickle
import shutil

import numpy as np
import pytest

import autosched
import ir
import sketch_rules as SR
from autosched import LocalBuilder, LocalRunner, MeasureErrorNo, MeasureInput, ProgramMeasurer, ops
from ir.cuda.runtime import device_attributes

HAS_GPU = device_attributes() is not None
needs_gpu = pytest.mark.skipif(not HAS_GPU, reason="no CUDA device: needs an NVIDIA GPU, its driver and cuda-python")


@pytest.fixture(scope="module")
def task():
    w = ops.suite_workload("GMM-1x128x128x128")
    return ir.SearchTask(ir.ComputeDAG(w.tensors), target="cuda", hardware=ir.HardwareParams.cuda(), desc="GMM-128")


@pytest.fixture(scope="module")
def programs(task):
    return SR.sample_programs(task, SR.generate_sketches(task), 3, np.random.default_rng(0))


def test_the_builder_makes_ptx_and_a_launch_plan_without_a_gpu(task, programs):
    over = task.dag.init_state().split("batch_matmul", "ax1", [32]).fuse("batch_matmul", ["ax1.1", "ax2"])
    over = over.apply(ir.steps.AnnotationStep(over.stage_index("batch_matmul"), 2, "threadIdx.x"))  # 4096 threads
    with LocalBuilder(timeout=60, n_parallel=2) as builder:
        results = builder.build([MeasureInput(task, s) for s in programs + [over]])
    *good, bad = results
    for res in good:
        assert res.error_no == MeasureErrorNo.NO_ERROR, res.error_msg
        ptx, cubin, plan = pickle.loads(res.object)
        assert ".entry" in ptx and (cubin is not None) == (shutil.which("ptxas") is not None)
        assert [b[0] for b in plan.buffers[:3]] == ["A", "B", "batch_matmul"]
        (name, grid, block, params), = plan.kernels
        assert grid >= 1 and 32 <= block <= 1024 and params == ("A", "B", "batch_matmul")
    assert bad.error_no == MeasureErrorNo.COMPILE_HOST and "threads per block" in bad.error_msg


@pytest.mark.skipif(HAS_GPU, reason="checks the error of a machine without a GPU")
def test_tuning_for_cuda_without_a_gpu_says_no_device_found(task):
    with pytest.raises(ir.NoCudaDevice, match="no CUDA device found|cuda-python is not installed"):
        autosched.auto_schedule(task, trials=4)


@needs_gpu
def test_gpu_programs_are_verified_and_timed_on_the_device(task, programs):
    with ProgramMeasurer(LocalBuilder(timeout=60, n_parallel=2), LocalRunner(timeout=30, min_repeat_ms=5)) as m:
        results = m.measure(task, programs)
    for res in results:
        assert res.ok and res.verified, res.error_msg
        assert 0 < res.mean_cost < 1e-2


@needs_gpu
def test_auto_schedule_for_cuda_returns_a_gpu_kernel_that_matches_numpy():
    w = ops.suite_workload("GMM-1x128x128x128")
    result = autosched.auto_schedule(ir.ComputeDAG(w.tensors), target="cuda", trials=16, measure_batch=8,
                                     search_params=autosched.tune.SearchParams(population=64, islands=1), verbose=0)
    assert isinstance(result.kernel, ir.CudaKernel) and result.gflops > 0
    inputs, outputs = w.random_inputs(np.random.default_rng(0)), w.output_buffers()
    result.kernel(*inputs, *outputs)
    np.testing.assert_allclose(outputs[0], w.reference(inputs)[0], rtol=1e-3, atol=1e-3)


@pytest.mark.skipif(HAS_GPU, reason="checks the error of a machine without a GPU")
def test_the_command_line_says_no_device_found_without_a_traceback(capsys):
    from autosched.cli import main
    assert main(["tune", "GMM-1x128x128x128", "--target", "cuda", "--trials", "4"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert "autosched: error: target 'cuda': no CUDA device found" in err or "cuda-python is not installed" in err


def test_the_command_line_prints_gpu_sketches_and_programs(capsys):
    from autosched.cli import main
    assert main(["sketches", "GMM-1x128x128x128", "--target", "cuda", "--samples", "1"]) == 0
    out = capsys.readouterr().out
    assert "A.shared" in out and "blockIdx.x" in out and "threadIdx.x" in out


@pytest.mark.skipif(HAS_GPU, reason="checks the error of a machine without a GPU")
@pytest.mark.parametrize("command", [["tune", "--network", "resnet50", "--trials", "4"],
                                     ["tune", "GMM-1x128x128x128", "--trials", "4"], ["build", "GMM-1x128x128x128"]])
def test_tuning_a_network_for_cuda_without_a_gpu_fails_in_one_line_and_tunes_nothing(command, capsys, monkeypatch):
    from autosched import networks
    from autosched.cli import main
    monkeypatch.setattr(networks, "tune_networks", lambda *a, **k: pytest.fail("the CPU was tuned"))
    monkeypatch.setattr(autosched.tune, "tune_tasks", lambda *a, **k: pytest.fail("something was tuned"))
    monkeypatch.setattr(ir, "build", lambda *a, **k: pytest.fail("something was built"))
    assert main([*command, "--target", "cuda"]) == 1
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err and len(captured.err.strip().splitlines()) == 1 and not captured.out
    assert captured.err.startswith("autosched: error: target 'cuda': ")


@pytest.mark.skipif(HAS_GPU, reason="checks the error of a machine without a GPU")
def test_tune_networks_for_cuda_without_a_gpu_says_no_device_found():
    from autosched.graph import get_network
    with pytest.raises(ir.NoCudaDevice):
        autosched.tune_networks(get_network("dcgan"), trials=4, target="cuda", verbose=0)


def test_the_command_line_refuses_a_base_model_for_cuda(capsys, tmp_path):
    from autosched.cli import main
    model = tmp_path / "base.json"
    model.write_text("{}")
    assert main(["tune", "GMM-1x128x128x128", "--target", "cuda", "--trials", "0", "--base-model", str(model)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert err.startswith("autosched: error: --base-model does not apply to --target cuda -arch=sm_")


def test_targets_parse_from_every_spelling_and_refuse_unknown_ones():
    host = ir.Target.host()
    assert ir.Target.parse("cpu") == ir.Target.parse("llvm") == ir.Target.parse(str(host)) == host
    assert ir.Target.parse("gpu") == ir.Target.parse("cuda") == ir.Target.parse(str(ir.Target.parse("cuda")))
    sm80 = ir.Target.parse("cuda -arch=sm_80")
    assert str(sm80) == "cuda -arch=sm_80" and sm80.device == "sm_80" and sm80.hardware.is_gpu
    assert ir.Target.parse(sm80) is sm80 and ir.SearchTask(ir.ComputeDAG(
        ops.suite_workload("GMM-1x128x128x128").tensors), target=sm80).target is sm80
    for bad, message in [("rocm", "unknown target 'rocm'"), ("cuda -arch", "not of the form -key=value"),
                         ("llvm -arch=sm_80", "takes -mcpu=NAME only"), ("", "unknown target ''")]:
        with pytest.raises(ValueError, match=message):
            ir.Target.parse(bad)
    with pytest.raises(ValueError, match="needs GPU hardware parameters"):
        ir.Target.parse("cuda", host.hardware)
    with pytest.raises(ValueError, match="needs GPU hardware parameters"):   # a Target too, not only a string
        ir.Target.parse(sm80, host.hardware)
    with pytest.raises(ValueError, match="needs CPU hardware parameters"):
        ir.Target.parse(host, sm80.hardware)
    with pytest.raises(ValueError, match="-arch=sm90 is not a compute capability"):
        ir.Target.parse("cuda -arch=sm90")
    assert sm80.hardware.compute_capability == "sm_80"   # the target and its hardware agree
