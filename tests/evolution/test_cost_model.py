"""Cost models: objectives against finite differences, the XGBoost wiring (custom objective,
custom metric, early stopping, base margin) on the installed xgboost, and the models'
contracts (update/predict, warm-up, -inf for programs that do not lower, save/load,
transfer, ensemble uncertainty, expected improvement, metrics)."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

import ir
from evolution import N_FEATURES
from evolution.cost_model import (ENSEMBLE_KEY, MeasuredProgram, RandomModel, TrainingSet, XGBoostEnsemble,
                                  XGBoostModel, expected_improvement, normalized_throughputs, pack, pairwise_accuracy,
                                  r2, recall_at_k, rmse)
from evolution.cost_model import objectives as O

FAST = {"max_rounds": 60, "early_stopping_rounds": 10}


# objectives --------------------------------------------------------------------------------------

def numeric_grad(f, x, eps=1e-6):
    g = np.zeros_like(x)
    for i in range(len(x)):
        d = np.zeros_like(x)
        d[i] = eps
        g[i] = (f(x + d) - f(x - d)) / (2 * eps)
    return g


def test_pack_sum_gradient_matches_finite_differences():
    rng = np.random.default_rng(0)
    pack_ids = np.array([0, 0, 1, 2, 2, 2])
    labels, weights = np.array([0.5, 1.0, 0.2]), np.array([0.5, 1.0, 0.2])
    x = rng.normal(size=6)
    grad, hess = O.pack_sum_gradient(x, pack_ids, labels, weights)
    np.testing.assert_allclose(grad, numeric_grad(lambda p: O.pack_sum_loss(p, pack_ids, labels, weights), x),
                               rtol=1e-5, atol=1e-8)
    np.testing.assert_array_equal(hess, weights[pack_ids])
    # the gradient of a row is its program's: w_p (sum_p - y_p)
    assert grad[0] == grad[1] == pytest.approx(0.5 * (x[0] + x[1] - 0.5))
    assert O.pack_sum_rmse(x, pack_ids, labels) == pytest.approx(
        math.sqrt(np.mean((np.bincount(pack_ids, x) - labels) ** 2)))


def test_rank_gradient_matches_finite_differences():
    rng = np.random.default_rng(1)
    pack_ids = np.array([0, 1, 1, 2, 3, 3, 4])
    labels = np.array([0.9, 0.1, 0.5, 0.5, 1.0])
    groups = np.array([0, 0, 0, 1, 1])
    better, worse, weight = O.ranking_pairs(labels, groups, rng)
    # pairs within a group, the better one first, ties (0.5 vs 0.5 are in different groups anyway) left out;
    # a pair weighs 1 / (pairs per program of its group): 3 programs in 3 pairs, 2 in 1
    assert sorted(zip(better.tolist(), worse.tolist(), weight.tolist())) == [(0, 1, 0.5), (0, 2, 0.5), (2, 1, 0.5),
                                                                             (4, 3, 1.0)]
    x = rng.normal(size=7)
    grad, hess = O.rank_gradient(x, pack_ids, 5, better, worse, weight)
    np.testing.assert_allclose(grad, numeric_grad(lambda p: O.rank_loss(p, pack_ids, 5, better, worse, weight), x),
                               rtol=1e-5, atol=1e-8)
    # hessian: the diagonal of the program-level hessian, broadcast to rows
    sums = np.bincount(pack_ids, x, minlength=5)
    s = 1 / (1 + np.exp(-(sums[4] - sums[3])))
    assert hess[6] == pytest.approx(s * (1 - s))
    unweighted, _ = O.rank_gradient(x, pack_ids, 5, better, worse)
    assert unweighted[6] == pytest.approx(-(1 - s))


def test_ranking_pairs_samples_large_groups_and_skips_ties():
    rng = np.random.default_rng(2)
    labels = np.concatenate([np.linspace(0, 1, 1000), np.zeros(3)])
    groups = np.concatenate([np.zeros(1000, int), np.ones(3, int)])
    better, worse, _ = O.ranking_pairs(labels, groups, rng, max_pairs_per_program=8)
    assert 0 < len(better) <= 8000 and np.all(labels[better] > labels[worse])
    assert np.all(groups[better] == groups[worse]) and not np.any(better >= 1000)   # the tied group gives none


def test_top_weight_moves_a_groups_pair_weight_onto_its_fast_programs():
    labels = np.array([1.0, 0.5, 0.25, 0.5, 1.0])
    groups = np.array([0, 0, 0, 1, 1])
    plain = O.ranking_pairs(labels, groups, np.random.default_rng(0))
    better, worse, weight = O.ranking_pairs(labels, groups, np.random.default_rng(0), top_weight=2)
    assert better.tolist() == plain[0].tolist() and worse.tolist() == plain[1].tolist()
    w = {(b, v): x for b, v, x in zip(better.tolist(), worse.tolist(), weight.tolist())}
    # group 0's 1.5 of weight over its pairs by the better one's label squared: 1, 1, 1/4
    assert w[(0, 1)] == pytest.approx(1.5 / 2.25) and w[(0, 2)] == pytest.approx(1.5 / 2.25)
    assert w[(1, 2)] == pytest.approx(1.5 / 2.25 / 4)
    assert w[(4, 3)] == pytest.approx(1.0)      # a one-pair group keeps its weight


def test_a_rank_model_with_top_weight_learns_the_order_of_the_fast_programs():
    """Many slow programs ordered by feature 0, a few fast ones ordered by feature 1: with few
    trees, uniform pairs learn feature 0; pairs weighted towards the fast learn feature 1."""
    rng = np.random.default_rng(3)
    x = rng.uniform(size=(400, 2))
    fast = x[:, 0] > 0.9
    speed = np.where(fast, 1.0 + x[:, 1], 0.1 * x[:, 0])
    features = [np.array([row], dtype=np.float32) for row in x]
    data = TrainingSet()
    data.add(features, list(1.0 / speed), ["w"] * len(x))
    accuracy = {}
    for top_weight in (0.0, 4.0):
        model = XGBoostModel("rank", seed=0, num_warmup_sample=1, max_rounds=8, top_weight=top_weight,
                             params={"max_depth": 2})
        model.fit(data)
        accuracy[top_weight] = pairwise_accuracy(model.predict_features(features)[fast], speed[fast])
    assert accuracy[4.0] > 0.85 and accuracy[4.0] > accuracy[0.0] + 0.2, accuracy


# data and metrics -------------------------------------------------------------------------------

def test_normalized_throughputs_per_task_with_failures():
    y = normalized_throughputs([2.0, 1.0, None, 4.0, float("inf"), 8.0], ["a", "a", "a", "b", "b", "b"])
    np.testing.assert_allclose(y, [0.5, 1.0, 0.0, 1.0, 0.0, 0.5])


def test_metrics_by_hand():
    y = np.array([1.0, 0.5, 0.2, 0.0])
    assert pairwise_accuracy(y, y) == 1.0 and pairwise_accuracy(-y, y) == 0.0
    assert pairwise_accuracy(np.array([1.0, 0.2, 0.5, 0.0]), y) == 5 / 6
    assert pairwise_accuracy(np.zeros(4), y) == 0.5                      # ties count half
    # only pairs within a group count: across groups this prediction would be mostly wrong
    assert pairwise_accuracy(np.array([10, 20, 0, 1.0]), np.array([0, 1, 0.5, 0.7]), groups=[0, 0, 1, 1]) == 1.0
    assert recall_at_k(np.array([0.1, 0.9, 0.8, 0.0]), y, 2) == 0.5
    assert rmse([1, 2], [1, 4]) == pytest.approx(math.sqrt(2)) and r2(y, y) == 1.0


def test_pack_stacks_rows_with_program_ids():
    feats = [np.ones((2, N_FEATURES)), np.zeros((0, N_FEATURES)), 2 * np.ones((1, N_FEATURES))]
    rows, ids = pack(feats)
    assert rows.shape == (3, N_FEATURES) and ids.tolist() == [0, 0, 2]


# XGBoost on synthetic programs ---------------------------------------------------------------------

def synthetic(n_programs=150, seed=0):
    """Programs of 1-3 rows whose throughput is the sum of a function of their rows."""
    rng = np.random.default_rng(seed)
    feats, costs = [], []
    for _ in range(n_programs):
        rows = np.zeros((int(rng.integers(1, 4)), N_FEATURES), np.float32)
        rows[:, :8] = rng.uniform(0, 4, size=(len(rows), 8))      # 2 informative columns, 6 of noise
        score = float(np.sum(rows[:, 0] + 0.5 * (rows[:, 1] > 2)))
        feats.append(rows)
        costs.append(1.0 / (score + 0.1))
    data = TrainingSet()
    data.add(feats, costs, ["t"] * n_programs)
    return data


@pytest.mark.parametrize("objective", ["pack-sum", "rank"])
def test_xgboost_objectives_learn_program_sums(objective):
    data = synthetic()
    test = synthetic(100, seed=1)
    model = XGBoostModel(objective, seed=0, max_rounds=300, early_stopping_rounds=20, params={"max_bin": 64})
    model.fit(data)
    assert model.booster is not None and 0 < model.rounds <= 300
    pred = model.predict_features(test.features)
    assert pairwise_accuracy(pred, test.labels()) > 0.85
    if objective == "pack-sum":    # the program sums approximate the normalised throughputs
        assert rmse(pred, test.labels()) < 0.15


def test_early_stopping_keeps_the_best_iteration():
    data = synthetic(60)
    model = XGBoostModel("pack-sum", seed=0, max_rounds=2000, early_stopping_rounds=5)
    model.fit(data)
    assert model.rounds < 2000


def test_update_predict_on_states_with_warmup_and_failures():
    from evolution.features import FeatureExtractor
    A = ir.placeholder((64, 64), name="A")
    k = ir.reduce_axis(64, "k")
    B = ir.compute((64,), lambda i: ir.sum(A[i, k], axis=k), name="B")
    dag = ir.ComputeDAG([A, B])
    task = ir.SearchTask(dag, layout_rewrite=False)
    states = [dag.init_state().split("B", "k", [f]) for f in (1, 2, 4, 8, 16, 32, 64)]
    model = XGBoostModel(num_warmup_sample=5, seed=0, extractor=FeatureExtractor(), **FAST)
    model.update([(task, states[0], 1.0), MeasuredProgram(task, states[1], 0.5)])
    assert model.booster is None                      # warm-up: random scores, deterministic by seed
    assert len(model.predict(task, states)) == 7
    model.update([(task, s, c) for s, c in zip(states[2:], [0.25, 0.2, None, 0.3, 0.4])])
    assert model.booster is not None and len(model.data) == 7
    np.testing.assert_allclose(model.data.labels(), [0.2, 0.4, 0.8, 1.0, 0.0, 2 / 3, 0.5])
    scores = model.predict(task, states)
    assert scores.shape == (7,) and np.all(np.isfinite(scores))
    # a program that cannot be lowered scores -inf
    assert model.predict_features([np.zeros((0, N_FEATURES), np.float32)])[0] == -np.inf


def test_save_load_round_trip(tmp_path):
    data = synthetic(80)
    model = XGBoostModel("rank", seed=0, **FAST)
    model.fit(data)
    path = str(tmp_path / "model.json")
    model.save(path)
    loaded = XGBoostModel.from_file(path)
    assert loaded.objective == "rank"
    np.testing.assert_allclose(loaded.predict_features(data.features), model.predict_features(data.features),
                               rtol=1e-6)
    with pytest.raises(ValueError, match="not trained"):
        XGBoostModel().save(path)


def test_transfer_base_model_margin():
    base = XGBoostModel(seed=0, **FAST)
    base.fit(synthetic(200))
    new = synthetic(40, seed=3)
    local = XGBoostModel(seed=0, base_model=base, **FAST)
    assert np.array_equal(local.predict_features(new.features), base.predict_features(new.features))  # before any data
    local.fit(new)
    rows, ids = pack(new.features)
    import xgboost as xgb
    own = local.booster.predict(xgb.DMatrix(rows), output_margin=True)
    np.testing.assert_allclose(local.predict_rows(rows), base.predict_rows(rows) + own, rtol=1e-5, atol=1e-6)


def test_ensemble_uncertainty_and_expected_improvement():
    data = synthetic(120)
    ens = XGBoostEnsemble(3, seed=0, **FAST)
    ens.fit(data)
    scores = np.stack([m.predict_features(data.features) for m in ens.members])
    np.testing.assert_allclose(ens.predict_features(data.features), scores.mean(0))
    assert np.all(scores.std(0) >= 0) and np.any(scores.std(0) > 0)
    ei = expected_improvement([1.0, 1.0, 2.0, -np.inf], [1.0, 0.0, 0.0, 1.0], best=1.0)
    np.testing.assert_allclose(ei, [1 / math.sqrt(2 * math.pi), 0.0, 1.0, 0.0])
    # more uncertainty, more expected improvement at the same mean
    assert expected_improvement([0.5], [2.0], 1.0)[0] > expected_improvement([0.5], [0.5], 1.0)[0] > 0


def test_an_ensemble_file_holds_its_members_and_ranks_by_their_mean(tmp_path):
    data = synthetic(120)
    ens = XGBoostEnsemble(3, "rank", seed=0, **FAST)
    ens.fit(data)
    path = str(tmp_path / "ens.json")
    ens.save(path)
    saved = json.loads(open(path).read())
    assert saved[ENSEMBLE_KEY] == {"objective": "rank", "members": 3} and len(saved["members"]) == 3
    members = [XGBoostModel.from_file(json.dumps(m).encode()) for m in saved["members"]]
    loaded = XGBoostEnsemble.from_members(members)
    assert loaded.objective == "rank" and len(loaded.boosters()) == 3
    np.testing.assert_allclose(loaded.predict_features(data.features), ens.predict_features(data.features), rtol=1e-6)
    rows, _ = pack(data.features)
    np.testing.assert_allclose(loaded.predict_rows(rows), np.mean([m.predict_rows(rows) for m in ens.members], 0),
                               rtol=1e-6)
    # as a tuning's base model: its mean is where the task's own model starts
    local = XGBoostModel(seed=0, base_model=loaded, **FAST)
    np.testing.assert_allclose(local.predict_features(data.features), loaded.predict_features(data.features))
    assert len(local.boosters()) == 3


def test_random_model_is_seeded():
    a, b = RandomModel(seed=3), RandomModel(seed=3)
    a.update([(None, None, 1.0)])
    np.testing.assert_array_equal(a.predict(None, [0] * 5), b.predict(None, [0] * 5))
