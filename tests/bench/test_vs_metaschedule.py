"""bench/vs_metaschedule.py's bookkeeping: the workload map, the geometric means, and the
MetaSchedule wrapper without TVM installed."""
from __future__ import annotations

import importlib.util
import pathlib
import sys

import pytest

import ir
from autosched import MeasureInput, MeasureResult, TuningRecord, ops

from .test_bench_common import _load

vs_ms = _load("vs_metaschedule")
SHARED = pathlib.Path(vs_ms.DEFAULT_MS_DIR) / "workloads.py"


def test_every_workload_is_a_suite_workload_of_the_same_flops():
    for ms_name, name in vs_ms.SUITE_NAMES.items():
        assert ops.suite_workload(name).flops > 0, ms_name


@pytest.mark.skipif(not SHARED.exists(), reason="../shared/metaschedule is not beside this checkout")
def test_the_map_is_the_shared_scripts_map():
    spec = importlib.util.spec_from_file_location("ms_workloads", SHARED)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)  # defines TE workloads lazily: no TVM needed
    assert vs_ms.SUITE_NAMES == module.SUITE_NAMES
    for ms_name, name in vs_ms.SUITE_NAMES.items():  # the same computation counts the same FLOPs
        assert module.WORKLOADS[ms_name].flops == pytest.approx(ops.suite_workload(name).flops), ms_name


def test_geomean_ignores_missing_values():
    assert vs_ms.geomean([2.0, None, 8.0]) == pytest.approx(4.0)
    assert vs_ms.geomean([None]) is None


def test_single_variant_rows():
    rows = [{"workload": "A", "trials": 64}, {"workload": "B", "trials": 64}, {"workload": "B", "trials": 64}]
    assert vs_ms._single_variant(rows, rows[0]) and not vs_ms._single_variant(rows, rows[1])


def test_metaschedule_without_its_venv_is_unavailable(tmp_path):
    ms = vs_ms.MetaSchedule(str(tmp_path / "no-python"), vs_ms.DEFAULT_MS_DIR, str(tmp_path))
    assert not ms.available


def test_tuning_seconds_span_the_logs_trials_and_retimings(tmp_path):
    task = ir.SearchTask(ir.ComputeDAG(ops.suite_workload("GMM-1x512x512x512").tensors))
    state = task.dag.init_state()
    log = tmp_path / "log.jsonl"
    log.write_text("".join(
        TuningRecord.from_measure(MeasureInput(task, state),
                                  MeasureResult((1e-3,), all_cost=2.0, timestamp=t, retimed=r)).to_json() + "\n"
        for t, r in ((10.0, False), (15.0, False), (19.0, True))))
    assert vs_ms.log_seconds(str(log), task) == pytest.approx(11.0)  # from 10 - 2 s to 19
    other = ir.SearchTask(ir.ComputeDAG(ops.suite_workload("GMM-1x1024x1024x1024").tensors))
    assert vs_ms.log_seconds(str(log), other) == 0.0


def test_a_resumed_log_is_tuned_only_for_the_trials_it_lacks(tmp_path, monkeypatch):
    """auto_schedule spends ``trials`` more measurements on a resumed log: the bench asks
    only for the missing ones, and for none when the log is complete."""
    name = "GMM-1x512x512x512"
    task = ir.SearchTask(ir.ComputeDAG(ops.suite_workload(name).tensors), desc=name)
    log = tmp_path / f"{name}.t4.json"
    state = task.dag.init_state()
    log.write_text("".join(
        TuningRecord.from_measure(MeasureInput(task, state),
                                  MeasureResult((1e-3,), all_cost=1.0, timestamp=t, retimed=r)).to_json() + "\n"
        for t, r in ((10.0, False), (12.0, False), (13.0, True))))
    assert vs_ms.trials_in_log(str(log), task) == 2 and vs_ms.trials_in_log(str(tmp_path / "none"), task) == 0
    asked = []
    monkeypatch.setattr(vs_ms.autosched, "auto_schedule", lambda task, trials, **kw: asked.append(trials))
    monkeypatch.setattr(vs_ms.ir, "build", lambda *a, **kw: "kernel")
    args = type("Args", (), {"log_dir": str(tmp_path), "batch": 2, "seed": 0, "retime_best": 0})()
    assert vs_ms.tune_ours(name, 4, args, True)[1] == "kernel" and asked == [2]
    (tmp_path / f"{name}.t2.json").write_text(log.read_text())
    vs_ms.tune_ours(name, 2, args, True)   # a complete log: re-timed only
    assert asked == [2]
