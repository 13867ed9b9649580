"""bench/base_model_picks.py: the quality of a ranking's picks, and a run on a training log
that keeps the benchmark's JSON contract."""
from __future__ import annotations

import json
import tarfile

import numpy as np
import pytest

from autosched.history.base_model import SHIPPED_MODEL

from .test_bench_common import ROOT, _load

picks = _load("base_model_picks")


def test_pick_quality_of_a_ranking():
    throughputs = np.array([1.0, 2.0, 4.0])
    pairwise, top1, top8 = picks.pick_quality([3.0, 2.0, 1.0], throughputs)  # exactly backwards
    assert pairwise == 0.0 and top1 == 0.25 and top8 == 1.0
    assert picks.pick_quality([1.0, 2.0, 3.0], throughputs) == (1.0, 1.0, 1.0)


def test_a_run_on_a_training_log_keeps_the_json_contract(tmp_path, capsys):
    name = "training/NRM-1x128x512.json"
    with tarfile.open(ROOT / "bench" / "data" / "training_records.tar.gz") as tar:
        tar.extract(name, tmp_path, filter="data")
    shipped = ["--base-model", SHIPPED_MODEL]  # (the tests turn the default off)
    assert picks.main([str(tmp_path / name), "--probe", "8", "--json-only", *shipped]) == 0
    (row,) = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["rows"]
    assert row["workload"] == "NRM-1x128x512" and row["probe"] == 8 and row["programs"] > 100
    for kind in ("alone", "probe"):
        assert 0 <= row[f"{kind}_pairwise"] <= 1
        assert 0 < row[f"{kind}_top1"] <= row[f"{kind}_top8"] <= 1
    with pytest.raises(SystemExit):
        picks.main([str(tmp_path / name), "--probe", "100000", *shipped])
