"""Everyday mistakes on the command line, as the reliability issue found them: each is one
line ``autosched: error: ...`` naming what was given and what was expected, exit code 2
(1 for the machine's errors), never a traceback; ``--debug`` or ``AUTOSCHED_DEBUG=1``
shows the traceback. Files given are regular files of bounded size (a device reads
forever, a FIFO blocks); ``run --output`` writes exactly the path it prints."""
import os
import subprocess
import sys

import numpy as np
import pytest

import autosched
from autosched import cli

GMM = "GMM-1x128x128x128"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def one_line_error(capsys, code, expected_code=2) -> str:
    err = capsys.readouterr().err
    assert code == expected_code, err
    assert err.startswith("autosched: error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    return err


def run_main(argv):
    """``cli.main``'s exit code, whether it returns it or argparse exits with it."""
    try:
        return cli.main(argv)
    except SystemExit as exit_:
        return exit_.code


def test_files_that_are_not_regular_files_are_refused(tmp_path, capsys):
    fifo, model_fifo = tmp_path / "fifo", tmp_path / "model.onnx"
    os.mkfifo(fifo)
    os.mkfifo(model_fifo)
    cases = [["tune", GMM, "--log-file", str(fifo)], ["tune", GMM, "--records-db", str(fifo)],
             ["tune", str(model_fifo)], ["run", str(model_fifo), "--log-file", str(fifo)],
             ["tune", GMM, "--base-model", str(fifo)], ["pretrain", str(fifo), "-o", str(tmp_path / "m.json")]]
    if os.path.exists("/dev/full"):
        cases += [["tune", GMM, "--log-file", "/dev/full"], ["tune", GMM, "--records-db", "/dev/full"]]
    for argv in cases:
        err = one_line_error(capsys, run_main(argv))
        assert "FIFO" in err or "device" in err or "not a regular file" in err, err


def test_a_foreign_file_as_the_log_is_one_line(tmp_path, capsys):
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    err = one_line_error(capsys, run_main(["tune", GMM, "--log-file", str(notes), "--trials", "0"]))
    assert "is not a tuning log" in err and notes.read_text() == "my notes\n"


def test_a_garbage_or_mismatched_base_model_is_one_line(tmp_path, capsys):
    """The issue's case: 21 frames from XGBoost, at the first prediction of a search."""
    xgboost = pytest.importorskip("xgboost")
    garbage, other = tmp_path / "model.json", tmp_path / "other.json"
    garbage.write_text('{"learner": 3}')
    rng = np.random.default_rng(0)
    xgboost.train({}, xgboost.DMatrix(rng.random((20, 3)), label=rng.random(20)), 2).save_model(str(other))
    for model, message in ((garbage, "cannot be read"), (other, "ranks programs by 3 features")):
        err = one_line_error(capsys, run_main(["tune", GMM, "--trials", "0", "--base-model", str(model),
                                               "--no-records-db"]))
        assert "base cost model" in err and str(model) in err and message in err


def test_pretrain_into_a_folder_or_a_bad_name_is_one_line(tmp_path, capsys):
    log = tmp_path / "log.json"
    log.write_text("# empty\n")
    for out, message in ((tmp_path, "must end in .json"), (tmp_path / "no" / "m.json", "does not exist")):
        err = one_line_error(capsys, run_main(["pretrain", str(log), "-o", str(out)]))
        assert message in err


@pytest.mark.parametrize("argv, message", [
    (["sketches", GMM, "--samples", "-1"], "--samples must be >= 0, got -1"),
    (["sketches", GMM, "--target", "tpu"], "unknown target 'tpu'"),
    (["build", "GMM-1x3"], "unknown workload 'GMM-1x3'"),
    (["tune", GMM, "--strategy", "fast"], "invalid choice: 'fast'"),
    (["tune", GMM, "--input-shape", "x=1xa"], "expected NAME=DIMS"),
    (["tune", GMM, "--dask", ""], "expected a Dask scheduler address"),
    (["tune", GMM, "--dask", "tcp://host:port"], "expected a Dask scheduler address"),
    (["tune", GMM, "--dask", "a b"], "expected a Dask scheduler address"),
    # mistakes in the arguments are said before a cluster is connected to (none listens there)
    (["tune", "GMM-1x3", "--dask", "tcp://127.0.0.1:9"], "unknown workload 'GMM-1x3'"),
    (["tune", GMM, "--network", "resnet50", "--dask", "tcp://127.0.0.1:9"], "not both"),
    (["tune", GMM, "--batch-size", "2", "--dask", "tcp://127.0.0.1:9"], "applies only to --network"),
    (["pretrain", "nolog.json", "-o", "m.json"], "no tuning log at 'nolog.json'"),
    (["pretrain", "--rounds", "0", "nolog.json", "-o", "m.json"], "--rounds must be >= 1, got 0"),
    (["run", "nomodel.onnx", "--log-file", "x"], "no model file at 'nomodel.onnx'"),
])
def test_bad_values_of_the_other_commands_are_one_line(argv, message, capsys):
    assert message in one_line_error(capsys, run_main(argv))


def test_the_python_api_refuses_trials_that_are_not_counts():
    import ir
    dag = ir.ComputeDAG(autosched.ops.suite_workload(GMM).tensors)
    for trials in (2.5, "8", True):
        with pytest.raises(TypeError, match=f"trials must be an integer >= 0 or None, got {trials!r}"):
            autosched.auto_schedule(dag, trials=trials)
        with pytest.raises(TypeError, match="trials must be an integer"):
            autosched.tune_networks("resnet18", trials=trials)
    with pytest.raises(ValueError, match="measure_batch must be >= 1, got 0"):
        autosched.auto_schedule(dag, trials=1, measure_batch=0)
    with pytest.raises(ValueError, match="time_budget_s must be positive and finite"):
        autosched.auto_schedule(dag, trials=1, time_budget_s=float("nan"))


# ONNX files ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """Small ONNX models, valid and broken, by name -> path."""
    onnx = pytest.importorskip("onnx", reason="ONNX models need the onnx package")
    from onnx import TensorProto as T, helper as h, numpy_helper as nh
    folder = tmp_path_factory.mktemp("models")
    x, y = h.make_tensor_value_info("x", T.FLOAT, [1, 8]), h.make_tensor_value_info("y", T.FLOAT, [1, 8])
    z = h.make_tensor_value_info("z", T.FLOAT, [1, 8])

    def save(name, nodes, inputs, outputs, inits=(), **kwargs):
        graph = h.make_graph(nodes, name, inputs, outputs, initializer=list(inits))
        onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]), str(folder / f"{name}.onnx"),
                  **kwargs)
        return folder / f"{name}.onnx"

    w = nh.from_array(np.full((8, 8), 0.5, np.float32), "w")
    paths = {
        "matmul": save("matmul", [h.make_node("MatMul", ["x", "w"], ["y"])], [x], [y], [w]),
        "two outputs": save("two", [h.make_node("MatMul", ["x", "w"], ["y"]), h.make_node("Relu", ["y"], ["z"])],
                            [x], [y, z], [w]),
        "identity": save("identity", [h.make_node("Identity", ["x"], ["y"])], [x], [y]),
        "integer Div": save("intdiv", [h.make_node("Div", ["x", "c"], ["y"])],
                            [h.make_tensor_value_info("x", T.INT64, [1, 8])],
                            [h.make_tensor_value_info("y", T.INT64, [1, 8])],
                            [nh.from_array(np.full((1, 8), 3, np.int64), "c")]),
        "dangling output": save("dangling", [h.make_node("Relu", ["x"], ["y"])], [x], [y, z]),
        "declared shapes contradict the graph": save("contra", [h.make_node("Relu", ["x"], ["y"])],
                                                     [h.make_tensor_value_info("x", T.FLOAT, [7, 8])], [y]),
        "too large": save("huge", [h.make_node("ConstantOfShape", ["s"], ["big"],
                                               value=nh.from_array(np.ones(1, np.float32))),
                                   h.make_node("ReduceSum", ["big"], ["r"], keepdims=0),
                                   h.make_node("Add", ["x", "r"], ["y"])], [x], [y],
                          [nh.from_array(np.array([200000, 200000], np.int64), "s")]),
        "missing external data": save("ext", [h.make_node("MatMul", ["x", "w"], ["y"])], [x], [y], [w],
                                      save_as_external_data=True, location="ext.data", size_threshold=0),
    }
    os.remove(folder / "ext.data")
    data = paths["matmul"].read_bytes()
    paths["garbage"] = folder / "garbage.onnx"
    paths["garbage"].write_bytes(bytes(np.random.default_rng(0).integers(0, 256, 300, dtype=np.uint8)))
    paths["truncated"] = folder / "truncated.onnx"
    paths["truncated"].write_bytes(data[:len(data) // 2])
    return paths


@pytest.mark.parametrize("case", ["garbage", "truncated", "missing external data", "integer Div",
                                  "dangling output", "declared shapes contradict the graph", "too large", "identity"])
def test_a_model_that_cannot_be_tuned_is_one_line(models, case, capsys):
    err = one_line_error(capsys, run_main(["tune", str(models[case]), "--trials", "0", "--no-records-db",
                                           "--no-base-model"]))
    assert str(models[case]) in err or "no task to tune" in err, err


def test_debug_shows_the_traceback(models):
    env = dict(os.environ, PYTHONPATH=ROOT)
    for argv, extra in ((["--debug"], {}), ([], {"AUTOSCHED_DEBUG": "1"})):
        proc = subprocess.run([sys.executable, "-m", "autosched", *argv, "tune", str(models["garbage"]),
                               "--trials", "0", "--no-records-db"], capture_output=True, text=True,
                              env={**env, **extra}, timeout=120, cwd=ROOT)
        assert proc.returncode == 1 and "Traceback" in proc.stderr and "DecodeError" in proc.stderr


def test_run_writes_exactly_the_output_path_it_prints(models, tmp_path, capsys):
    log = tmp_path / "log.json"
    log.write_text("# no records: untuned programs\n")
    x = tmp_path / "x.npy"
    np.save(x, np.ones((1, 8), np.float32))
    base = ["--log-file", str(log), "--input", str(x), "--no-base-model"]
    for model, output, n in (("matmul", "one.npy", 1), ("two outputs", "two.npz", 2)):
        out = tmp_path / output
        assert run_main(["run", str(models[model]), *base, "--output", str(out)]) == 0
        assert f"# written to {out}" in capsys.readouterr().out
        got = np.load(out)
        arrays = [got] if n == 1 else [got[k] for k in got.files]
        assert len(arrays) == n and np.allclose(arrays[0], np.full((1, 8), 4.0))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["log.json", "one.npy", "two.npz", "x.npy"]
    for model, output, message in (("matmul", "outdir", "expected a .npy file"),
                                   ("two outputs", "two.npy", "2 output(s), which go to a .npz file"),
                                   ("matmul", "one.npz", "1 output(s), which go to a .npy file")):
        err = one_line_error(capsys, run_main(["run", str(models[model]), *base, "--output", str(tmp_path / output)]))
        assert message in err
    assert not (tmp_path / "outdir.npy").exists() and not (tmp_path / "two.npy.npz").exists()


def test_run_checks_its_inputs_before_reading_them(models, tmp_path, capsys):
    log = tmp_path / "log.json"
    log.write_text("# no records\n")
    wrong, junk = tmp_path / "wrong.npy", tmp_path / "junk.npy"
    np.save(wrong, np.ones((2, 8), np.float64))
    junk.write_bytes(b"not an array")
    for path, message in ((wrong, "holds a float64 array of shape [2, 8]; the model's input 'x' is float32 [1, 8]"),
                          (junk, "is not a .npy array file")):
        err = one_line_error(capsys, run_main(["run", str(models["matmul"]), "--log-file", str(log), "--input",
                                               str(path), "--no-base-model"]))
        assert message in err


def test_a_lost_dask_cluster_says_what_was_saved_and_how_to_resume(tmp_path, monkeypatch, capsys):
    """The issue's case ended in a ``ClosedClientError`` traceback."""
    from autosched.measure.common import MeasurementLost

    def tune(task, options, **kwargs):
        with open(options.log_file, "a") as f:
            f.writelines('{"v":1,"workload_key":"k","n":%d}\n' % i for i in range(5))
        raise MeasurementLost("a Dask job was lost before it reported: it was cancelled")
    monkeypatch.setattr(autosched.tune, "auto_schedule", tune)
    log = tmp_path / "log.json"
    err = one_line_error(capsys, cli.main(["tune", GMM, "--trials", "8", "--log-file", str(log)]), 1)
    assert "the Dask cluster is gone: 5 new programs were saved in" in err
    assert err.rstrip().endswith(f"--log-file {log} --trials 3")
