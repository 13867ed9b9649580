"""bench/tune_onnx.py's models: MobileNet-V2 and BERT written in PyTorch and exported with
torch.onnx.export (a real exporter's output, shape chains and all) import and match both
onnxruntime and the PyTorch module; a smoke run keeps the benchmark's JSON contract."""
from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("onnx", reason="the ONNX benchmark needs the onnx package")
pytest.importorskip("onnxruntime", reason="the ONNX benchmark compares with onnxruntime")
torch = pytest.importorskip("torch", reason="MobileNet-V2 and BERT are exported from PyTorch")

from autosched import graph as G  # noqa: E402
from autosched.graph.onnx_baselines import onnxruntime_runner  # noqa: E402

from .test_bench_common import _load  # noqa: E402

onnx_models = _load("onnx_models")


@pytest.mark.parametrize("name, exporter_ops", [("mobilenet_v2", {"Conv", "Clip", "Gemm"}),
                                                ("bert", {"Shape", "Gather", "Concat", "Range", "Reshape"})])
def test_exported_models_match_onnxruntime_and_pytorch(name, exporter_ops, tmp_path, monkeypatch):
    import onnx
    monkeypatch.setattr(onnx_models, "CACHE", str(tmp_path))
    src = onnx_models.load(name, smoke=True)
    assert exporter_ops <= {n.op_type for n in onnx.load(src.path).graph.node}
    graph = G.from_onnx(src.path, src.input_shapes)
    inputs = [x.numpy() for x in src.example]
    ours = G.GraphExecutor(G.partition(graph), warn_untuned=False).run(*inputs)[0]
    theirs = onnxruntime_runner(src.path, 1)(*inputs)[0]
    with torch.no_grad():
        module = src.torch_module(*src.example).numpy()
    scale = float(np.abs(theirs).max())
    np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-4 * scale)
    np.testing.assert_allclose(module, theirs, rtol=1e-4, atol=1e-4 * scale)


def test_smoke_run_keeps_the_json_contract(capsys):
    tune_onnx = _load("tune_onnx")
    assert tune_onnx.main(["--smoke", "--json-only", "--minutes", "0.02"]) == 0
    row = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["rows"][0]
    for key in ("latency_ms", "onnxruntime_ms", "torch_ms", "vs_onnxruntime", "vs_torch", "untuned_ms", "tuning_s",
                "e2e_over_tasks", "curve"):
        assert key in row
    assert row["verified"] and row["latency_ms"] > 0 and row["untuned_ms"] > 0 and row["curve"]
    assert row["untuned_programs"] in ("zero-trial programs", "default schedules")
    assert row["untuned_over_tuned"] == pytest.approx(row["untuned_ms"] / row["latency_ms"])
