"""bench/deploy.py: a smoke run compiles SqueezeNet, loads it in a fresh interpreter without
the compiler, checks it against onnxruntime and keeps the benchmark's JSON contract."""
from __future__ import annotations

import json
import shutil

import pytest

pytest.importorskip("onnx", reason="the deployment benchmark reads an ONNX model")
pytest.importorskip("onnxruntime", reason="the deployment benchmark compares with onnxruntime")
if shutil.which("cc") is None and shutil.which("gcc") is None:
    pytest.skip("compiling an artifact links it with the system's C compiler (cc)", allow_module_level=True)

from .test_bench_common import _load  # noqa: E402


def test_smoke_run_keeps_the_json_contract(capsys):
    deploy = _load("deploy")
    assert deploy.main(["--smoke", "--json-only"]) == 0
    row = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["rows"][0]
    assert row["workload"] == "squeezenet" and row["verified"]
    assert row["artifact_bytes"] > 1 << 20 and 0 < row["load_s"] < 1.0   # the goal: load under a second
    assert row["artifact_s"] > 0 and row["executor_s"] > 0 and row["onnxruntime_s"] > 0
    assert row["vs_executor"] == pytest.approx(row["executor_s"] / row["artifact_s"])
