"""bench/torch_compile.py: a smoke run (BERT at CI size, default schedules) compiles the model
with the autosched backend, matches PyTorch at two batch sizes and keeps the JSON contract."""
from __future__ import annotations

import json

import pytest

pytest.importorskip("onnx", reason="the backend imports the graph through ONNX")
pytest.importorskip("torch", reason="the benchmark compiles a PyTorch module")

from .test_bench_common import _load  # noqa: E402


def test_smoke_run_keeps_the_json_contract(capsys, tmp_path, monkeypatch):
    bench = _load("torch_compile")
    monkeypatch.setattr(bench.onnx_models, "CACHE", str(tmp_path))
    assert bench.main(["--smoke", "--json-only", "--models", "bert", "--base-model", "none",
                       "--second-batch", "2"]) == 0
    row = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["rows"][0]
    assert row["workload"] == "bert" and row["graphs"] >= 1 and row["eager_fallbacks"] == 0
    assert row["max_rel_error"] < 1e-4 and row["second_shape_rel_error"] < 1e-4 and row["second_batch"] == 2
    assert row["compile_s"] > 0 and row["autosched_ms"] > 0 and row["torch_ms"] > 0
    assert row["vs_torch"] == pytest.approx(row["torch_ms"] / row["autosched_ms"])
