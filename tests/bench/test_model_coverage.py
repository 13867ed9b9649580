"""bench/model_coverage.py's smoke run: two tiny models (a light model of the onnx wheel and a
tiny Hugging Face BERT), each in its child process, import, run and match onnxruntime, and
the JSON line keeps the benchmark contract; a model that fails is a row, not a stopped bench."""
from __future__ import annotations

import json
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


def test_a_failing_model_is_a_row():
    args = types.SimpleNamespace(exporter="torchscript", time=False, default_schedules=True, timeout=120,
                                 memory_gb=8.0)
    row = model_coverage.run_child("light_no_such_model", args, None, import_only=True)
    assert row["imports"] is False and "no light model 'no_such_model'" in row["error"]
