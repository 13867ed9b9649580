"""bench/cost_model_families.py (``bench/cost_model.py --families``): the families of the
model-family training workloads, the folds, and a held-out run on small stand-in logs."""
import importlib.util
import os
import sys

import numpy as np
import pytest

import autosched
import ir
from autosched.history import base_model as B
from evolution import SearchParams
from tests.autosched.stand_ins import StandInBuilder, StandInRunner

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "bench")
sys.path.insert(0, BENCH)
spec = importlib.util.spec_from_file_location("cost_model_families", os.path.join(BENCH, "cost_model_families.py"))
families = importlib.util.module_from_spec(spec)
spec.loader.exec_module(families)


def test_every_model_family_workload_has_a_family_of_the_brief():
    got = {label: families.family(label) for label in B.MODEL_FAMILY_OPERATORS}
    assert got["dense_chain-1x1152x1000-bias"] == "dense, one row (classifier)"
    assert got["dense_chain-1x100x640x2560-add-gelu"] == "dense (MLP, projection)"
    assert got["conv2d_chain-1x1x1x240x64-k1-bias-relu"] == "squeeze-excitation"
    assert got["conv2d_chain-1x12x12x256x256-k3g16-bias-relu"] == "grouped conv"
    assert got["conv2d_chain-1x24x24x40x240-k1-bias-hard_swish"] == "1x1 conv"
    assert set(got.values()) == {"dense, one row (classifier)", "dense (MLP, projection)", "squeeze-excitation",
                                 "grouped conv", "1x1 conv", "3x3 conv", "3x3 conv (Winograd)", "depthwise conv",
                                 "layer norm", "attention batch matmul"}
    assert got["winograd_chain-1x7x7x640x640-bias-residual-relu"] == "3x3 conv (Winograd)"
    assert got["conv2d_chain-1x20x20x320x320-k3s2-bias-relu"] == "3x3 conv"


def test_folds_hold_a_share_of_every_family_and_every_workload_once():
    labels = list(B.MODEL_FAMILY_OPERATORS)
    folds = families.folds_of(labels, 3)
    assert sorted(sum(folds, [])) == sorted(labels)
    depthwise = [sum(families.family(x) == "depthwise conv" for x in f) for f in folds]
    assert max(depthwise) - min(depthwise) <= 1 and sum(depthwise) == 12


def test_scores_quality_of_a_perfect_and_a_reversed_ranking():
    data = {"costs": [1.0, 2.0, None, 4.0], "groups": ["a"] * 4}
    perfect = families.scores_quality(np.array([4.0, 3.0, 1.0, 2.0]), data)
    assert perfect == {"pairwise": 1.0, "recall": 1.0, "top1": 1.0}
    worst = families.scores_quality(np.array([1.0, 2.0, 4.0, 3.0]), data)
    assert worst["pairwise"] == 0.0 and worst["top1"] == 0.0


def _stand_in_log(folder, label, seed, lanes=16):
    task = ir.SearchTask(ir.ComputeDAG(B.training_workloads()[label].tensors), desc=label,
                         target=f"llvm -mcpu={'znver4' if lanes == 16 else 'znver3'}",
                         hardware=ir.HardwareParams(num_cores=2, vector_lanes=lanes))
    autosched.auto_schedule(task, trials=12, measure_batch=6, seed=seed, verbose=0, base_model=None,
                            records_db=None, log_file=str(folder / f"{label}.json"), builder=StandInBuilder(),
                            runner=StandInRunner(),
                            search_params=SearchParams(population=16, generations=1, init_min_population=6,
                                                       islands=1))


def test_held_out_accuracy_ranks_each_workload_with_a_model_that_has_not_seen_it(tmp_path):
    labels = ["layer_norm-1x100x640", "layer_norm-1x24x24x192", "global_avg_pool2d-1x24x24x240"]
    for seed, label in enumerate(labels):
        _stand_in_log(tmp_path, label, seed)
    (tmp_path / "notes.txt").write_text("not a log")
    lines = []
    rows = families.held_out_accuracy(str(tmp_path), B.SHIPPED_MODEL, n_folds=2, rounds=5, log=lines.append,
                                      archive=None)
    assert sorted(r["workload"] for r in rows) == sorted(labels)
    assert {r["vector_lanes"] for r in rows} == {16}
    assert "36 programs of 3 workloads; 3 held out in 2 folds" in lines[0]
    assert [line.strip() for line in lines[1:]] == ["fold of 2 held out: trained on 12 programs",
                                                    "fold of 1 held out: trained on 24 programs"]
    for r in rows:
        for model in ("shipped", "retrained"):
            assert 0.0 <= r[model]["pairwise"] <= 1.0 and 0.0 <= r[model]["top1"] <= 1.0
    summary = families.by_family(rows)
    assert summary["all"]["workloads"] == 3 and summary["layer norm"]["workloads"] == 2
    assert families.by_family(rows, 8) == {}


def test_each_vector_width_is_ranked_against_its_own_measurements(tmp_path):
    """A workload measured on AVX2 and on AVX-512 is two rows, each group its own CPU's
    programs; the ablated model ranks with the register features zeroed; the top-weighted
    model is one more ranking of each row."""
    labels = ["layer_norm-1x100x640", "layer_norm-1x24x24x192"]
    for seed, label in enumerate(labels):
        _stand_in_log(tmp_path, label, seed, lanes=16)
        _stand_in_log(tmp_path, label, seed + 10, lanes=8)
    rows = families.held_out_accuracy(str(tmp_path), B.SHIPPED_MODEL, n_folds=2, rounds=5, log=lambda *a: None,
                                      archive=None, ablate=True, top_weight=2.0)
    assert sorted((r["workload"], r["vector_lanes"]) for r in rows) == sorted(
        (label, lanes) for label in labels for lanes in (8, 16))
    assert all(r["programs"] == 12 and "no_target" in r and 0 <= r["top_weighted"]["top1"] <= 1 for r in rows)
    avx2 = families.by_family(rows, 8)
    assert avx2["all"]["workloads"] == 2 and set(avx2["all"]) >= {"no_target_pairwise", "retrained_top1"}
    data = families.workload_data(str(tmp_path / "layer_norm-1x100x640.json"))
    assert sorted(data) == [8, 16]
    assert {g[1] for g in data[8]["groups"]} == {"llvm -mcpu=znver3"}
    plain = families._without_target_features(data[8]["features"])
    assert all((p[:, families.TARGET_BASE:] == 0).all() and (p[:, :families.TARGET_BASE] == f[:, :families.TARGET_BASE]).all()
               for p, f in zip(plain, data[8]["features"]))
    assert any((f[:, families.TARGET_BASE] > 0).any() for f in data[8]["features"])


def test_held_out_accuracy_needs_a_model_family_log(tmp_path):
    with pytest.raises(ValueError, match="no log of a model-family training workload"):
        families.held_out_accuracy(str(tmp_path), B.SHIPPED_MODEL, archive=None, log=lambda *a: None)


@pytest.mark.parametrize("power", ["-1", "nan"])
def test_the_bench_refuses_a_top_weight_that_is_not_a_power_in_one_line(power, capsys):
    from .test_bench_common import _load
    with pytest.raises(SystemExit) as exit_:
        _load("cost_model").main(["--families", "--top-weight", power])
    assert exit_.value.code == 2 and "--top-weight must be a number >= 0" in capsys.readouterr().err
