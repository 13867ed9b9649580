"""bench/winograd.py: both forms of a layer compute the same convolution, and a smoke run
keeps the benchmark's JSON contract."""
from __future__ import annotations

import json

import numpy as np
import pytest

import ir

from .test_bench_common import _load

bench = _load("winograd")


def test_both_layer_forms_match_the_reference():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 6, 6, 8)).astype(np.float32)
    w = rng.standard_normal((3, 3, 8, 8)).astype(np.float32)
    b = rng.standard_normal(8).astype(np.float32)
    want = bench.reference(x, w, b)
    assert want.shape == (1, 6, 6, 8) and (want >= 0).all() and (want > 0).any()
    for winograd, weight in ((False, w), (True, bench.W.winograd_weight(w))):
        kernel = ir.build(bench.layer_dag(6, 8, winograd))
        timer = bench._timer(kernel, [("data", x), ("weight", weight), ("bias", b)], want)
        assert timer() > 0


def test_smoke_run_keeps_the_json_contract(capsys):
    assert bench.main(["--smoke", "--json-only"]) == 0
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    (row,) = line["rows"]
    assert line["bench"] == "winograd" and row["workload"] == "6x6x16" and row["trials"] == 4
    assert row["speedup"] == pytest.approx(row["winograd_gflops"] / row["direct_gflops"])
    assert row["ours_gflops"] == row["winograd_gflops"] > 0 and row["direct_tuning_s"] > 0
    with pytest.raises(SystemExit):
        bench.main(["--layers", "14-256"])
