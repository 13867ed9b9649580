"""bench/resnet50_gpu.py needs an NVIDIA GPU: without one it refuses, clearly and before
tuning anything, and still prints its JSON line; with one, its smoke run tunes, verifies
and times the network."""
from __future__ import annotations

import json

import pytest

from ir.cuda.runtime import device_attributes

from .test_bench_common import _load

resnet50_gpu = _load("resnet50_gpu")


@pytest.mark.skipif(device_attributes() is not None, reason="checks the refusal of a machine without a GPU")
def test_without_a_gpu_the_bench_refuses_and_tunes_nothing(capsys, monkeypatch):
    monkeypatch.setattr(resnet50_gpu.autosched, "tune_networks", lambda *a, **k: pytest.fail("it tuned"))
    assert resnet50_gpu.main(["--smoke", "--json-only"]) == 2
    out, err = capsys.readouterr()
    assert "this benchmark runs on an NVIDIA GPU and this machine has none" in err
    line = json.loads(out.strip().splitlines()[-1])
    assert line["bench"] == "resnet50_gpu" and line["rows"][0]["error"].startswith("no GPU: ")


@pytest.mark.skipif(device_attributes() is None, reason="no CUDA device: needs an NVIDIA GPU, its driver and cuda-python")
def test_on_a_gpu_the_smoke_run_tunes_verifies_and_times_resnet50(capsys):
    assert resnet50_gpu.main(["--smoke", "--json-only"]) == 0
    row, = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["rows"]
    assert row["verified"] and row["trials"] > 0 and row["latency_ms"] > 0
    assert all(row[f"{stage}_s"] >= 0 for stage in ("tune", "build", "verify", "time", "torch"))


@pytest.mark.parametrize("argv, message", [(["--minutes", "-1"], "--minutes must be a number > 0"),
                                           (["--minutes", "inf"], "--minutes must be a number > 0")])
def test_a_bad_time_budget_is_one_line_before_anything_runs(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        resnet50_gpu.main(argv)
    assert exit_.value.code == 2 and message in capsys.readouterr().err
