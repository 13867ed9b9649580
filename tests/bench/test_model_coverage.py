"""bench/model_coverage.py's smoke run: two tiny models (a light model of the onnx wheel and a
tiny Hugging Face BERT), each in its child process, import, run and match onnxruntime, and
the JSON line keeps the benchmark contract; a model that fails is a row, not a stopped bench."""
from __future__ import annotations

import json
import pathlib
import types

import pytest

pytest.importorskip("onnx", reason="the coverage bench needs the onnx package")
pytest.importorskip("onnxruntime", reason="the coverage bench compares with onnxruntime")
pytest.importorskip("torch", reason="the coverage bench exports models from PyTorch")
pytest.importorskip("transformers", reason="the smoke run exports a tiny Hugging Face BERT")

from .test_bench_common import _load  # noqa: E402

model_coverage = _load("model_coverage")


def test_smoke_run_matches_onnxruntime(capsys):
    assert model_coverage.main(["--smoke"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert "2/2 models import, run and match onnxruntime" in out
    rows = json.loads(out[-1])["rows"]
    assert [r["workload"] for r in rows] == list(model_coverage.SMOKE_MODELS)
    for r in rows:
        assert r["imports"] and r["matches"] and r["matches_onnxruntime"] < 1e-4
        assert r["tasks"] > 0 and r["programs"] == "default" and r["default_ms"] > 0 and r["onnxruntime_ms"] > 0
        assert r["vs_onnxruntime"] == pytest.approx(r["onnxruntime_ms"] / r["default_ms"])


def _args():
    return types.SimpleNamespace(exporter="torchscript", time=False, default_schedules=True, timeout=120,
                                 memory_gb=8.0)


def test_a_model_that_fails_to_export_is_a_row(capsys):
    exported = model_coverage.run_export("light_no_such_model", _args(), "unused")
    assert list(exported) == ["error"]
    assert exported["error"].startswith("export: ValueError: no light model 'no_such_model'")
    assert model_coverage.main(["--models", "light_no_such_model", "--import-only"]) == 1
    row = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["rows"][0]
    assert row["imports"] is False and row["error"].startswith("export: ") and "no_such_model" in row["error"]


def test_a_model_that_fails_to_import_is_a_row(tmp_path):
    """The exported file is measured in a second child: a file that is no ONNX model is its row's error."""
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    row = model_coverage.run_child("bad", str(bad), _args(), None, import_only=True)
    assert row["workload"] == "bad" and row["imports"] is False and row["error"]


def test_the_timed_run_reports_the_warm_second_run_beside_the_cold_one(monkeypatch, capsys):
    """``--time`` runs each model twice with one records database: the first row's cold
    seconds and counts, the second run's as ``zero_trial_warm_*``."""
    calls = []

    def child(name, path, args, records_db, import_only, tune_minutes=None):
        assert path == "m.onnx"                              # the one export, read by both runs
        calls.append(records_db)
        warm = len(calls) == 2
        return {"workload": name, "imports": True, "matches_onnxruntime": 0.0, "vs_onnxruntime": 1.0,
                "zero_trial_s": 2.0 if warm else 30.0, "zero_trial_search_s": 0.5 if warm else 28.0,
                "zero_trial_searched": 0 if warm else 7, "zero_trial_remembered": 7 if warm else 0}

    monkeypatch.setattr(model_coverage, "run_child", child)
    monkeypatch.setattr(model_coverage, "run_export", lambda name, args, directory: {"path": "m.onnx"})
    assert model_coverage.main(["--models", "m", "--time"]) == 0
    row = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["rows"][0]
    assert calls[0] is not None and calls[0] == calls[1]   # one database, shared by the two runs
    assert (row["zero_trial_s"], row["zero_trial_searched"]) == (30.0, 7)
    assert (row["zero_trial_warm_s"], row["zero_trial_warm_search_s"]) == (2.0, 0.5)
    assert (row["zero_trial_warm_remembered"], row["zero_trial_warm_searched"]) == (7, 0)


def _tiny_dense():
    """(partitioned graph, inputs, numpy's outputs) of a one-task model: a dense layer and ReLU."""
    from autosched import graph as G
    from autosched.graph.executor import run_reference
    b = G.GraphBuilder("tiny", seed=0)
    graph = b.graph([b.relu(b.dense(b.input((2, 16)), 8))])
    inputs = graph.random_inputs(0)
    return G.partition(graph), inputs, run_reference(graph, inputs)


def test_tuning_a_model_times_and_checks_its_tuned_programs(tmp_path):
    """``--tune-minutes``: the model tuned for the minutes, its tuned programs checked against the
    reference, then timed with the baselines timed again beside them (the ratios are theirs)."""
    import time
    part, inputs, want = _tiny_dense()

    def baseline(seconds):
        return lambda *arrays: (time.sleep(seconds), want)[1]
    row = {"onnxruntime_ms": 1000.0, "openvino_ms": 1000.0}   # readings of long ago: not used
    model_coverage._tune(row, part, inputs, minutes=0.05, log=str(tmp_path / "tuned.json"),
                         others={"zero_trial": baseline(0.001), "onnxruntime": baseline(0.002),
                                 "openvino": baseline(0.004)})
    assert row["tuned_trials"] > 0 and row["tuned_tasks_measured"] == len(part.tasks) == 1
    assert row["tuned_matches_onnxruntime"] < 1e-5 and row["tuned_ms"] > 0
    assert 2.0 <= row["onnxruntime_ms_after_tuning"] < row["openvino_ms_after_tuning"] < 1000.0
    assert row["tuned_vs_onnxruntime"] == pytest.approx(row["onnxruntime_ms_after_tuning"] / row["tuned_ms"])
    assert row["tuned_vs_openvino"] == pytest.approx(row["openvino_ms_after_tuning"] / row["tuned_ms"])
    assert row["tuned_vs_zero_trial"] == pytest.approx(row["zero_trial_ms_after_tuning"] / row["tuned_ms"])
    assert (tmp_path / "tuned.json").stat().st_size > 0      # the log of what was measured


def test_a_kept_tuning_log_is_appended_to_not_overwritten(tmp_path):
    """A second tuning into a kept log keeps every line the first wrote and adds its own."""
    part, inputs, want = _tiny_dense()
    others = {label: (lambda *arrays: want) for label in ("zero_trial", "onnxruntime", "openvino")}
    log = tmp_path / "tiny.json"
    model_coverage._tune({}, part, inputs, minutes=0.03, log=str(log), others=others)
    first = log.read_text()
    model_coverage._tune({}, part, inputs, minutes=0.03, log=str(log), others=others)
    assert first and log.read_text().startswith(first) and len(log.read_text()) > len(first)


def test_the_child_tunes_into_the_log_dir(monkeypatch, tmp_path):
    """``--log-dir``: each model's child is given the directory as an absolute path, and its
    log is the file named for the model there."""
    seen = {}
    monkeypatch.setattr(model_coverage, "_run", lambda cmd, args, env, timeout: seen.setdefault("cmd", cmd) and {})
    args = types.SimpleNamespace(exporter="torchscript", time=False, default_schedules=False, log_dir="logs",
                                 timeout=1.0)
    model_coverage.run_child("tiny", "tiny.onnx", args, None, False, tune_minutes=0.5)
    cmd = seen["cmd"]
    assert cmd[cmd.index("--log-dir") + 1] == str(pathlib.Path("logs").resolve())
    calls = []
    monkeypatch.setattr(model_coverage, "_tune", lambda row, part, inputs, minutes, log, others: calls.append(log))
    monkeypatch.setattr(model_coverage, "_openvino", lambda path: None)
    path = model_coverage.model_file("light_squeezenet", "torchscript", str(tmp_path))
    model_coverage.measure({"workload": "light_squeezenet"}, path, "torchscript", False, False,
                           zero_trial=False, tune_minutes=0.5, log_dir=str(tmp_path))
    assert calls == [str(tmp_path / "light_squeezenet.json")]


def test_a_log_dir_without_tuning_is_refused(capsys):
    with pytest.raises(SystemExit) as exit_info:
        model_coverage.main(["--log-dir", "logs", "--models", "resnet18"])
    assert exit_info.value.code == 2 and "--log-dir" in capsys.readouterr().err
