"""XGBoost cost models: Ansor's pack-sum model, the rank-loss variant, an ensemble with
uncertainty (AdaTune) and transfer from a model trained on other workloads (AutoTVM).

XGBoost fits one value per statement; a program's score is the sum over its statements.
Labels are throughputs normalised per task to (0, 1] (failed programs 0), so one model
learns from the programs of all tasks. The model is retrained from scratch on everything
it has seen at every ``update``; below ``num_warmup_sample`` programs it predicts at random
(or with its base model, when it has one).

XGBoost's Python API for custom objectives and callbacks has changed across releases; this
module uses only ``xgboost.train(params, dtrain, num_boost_round, evals=, obj=,
custom_metric=, early_stopping_rounds=)``, ``DMatrix(base_margin=)`` and
``Booster.predict(output_margin=True)``, which tests/evolution exercises on the installed
version (pyproject pins xgboost-cpu>=2.1,<4).
"""
from __future__ import annotations

import copy

import json
import math
from typing import Iterable

import numpy as np

from ..features import N_FEATURES, FeatureExtractor
from . import objectives as O
from .base import CostModel, TrainingSet, pack, split_records, task_key

#: Ansor's XGBoost parameters
DEFAULT_PARAMS = {
    "max_depth": 10,
    "gamma": 0.001,
    "min_child_weight": 0,
    "eta": 0.2,
    "tree_method": "hist",
    "base_score": 0.0,
    "disable_default_eval_metric": 1,
    "verbosity": 0,
    # one thread: the data sets are small, and OpenMP threads that busy-wait for each other
    # slow training down 10x on a machine whose cores are busy with other work
    "nthread": 1,
}
OBJECTIVES = ("pack-sum", "rank")


def _rng(seed) -> np.random.Generator:
    return seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)


class XGBoostModel(CostModel):
    """Gradient-boosted trees over statement features.

    ``objective``: "pack-sum" (Ansor: throughput-weighted squared error of the program sums)
    or "rank" (AutoTVM: pairwise logistic loss of the program sums within each task).
    ``base_model``: a trained model of other workloads (AutoTVM's transfer): its scores are
    the starting point (XGBoost's base margin) and this model learns the difference.
    ``seed``: an int or a ``numpy.random.Generator`` (warm-up predictions, XGBoost's seed,
    rank pair sampling). ``weight_floor``: pack-sum weights are max(throughput, floor)
    (Ansor: 0, so failed programs are not learned at all). ``top_weight``: the rank
    objective's weight on the pairs among fast programs (``objectives.ranking_pairs``).
    ``start``: a trained booster whose trees this model's continue (``continued``), unlike
    ``base_model`` one model that can be saved: a shipped base model adapted to another CPU
    by trees learnt from that CPU's records.
    """

    def __init__(self, objective: str = "pack-sum", *, num_warmup_sample: int = 100, seed=None,
                 params: dict | None = None, max_rounds: int = 10000, early_stopping_rounds: int = 50,
                 weight_floor: float = 0.0, top_weight: float = 0.0, base_model: "XGBoostModel | None" = None,
                 start=None, extractor: FeatureExtractor | None = None, verbose: bool = False):
        super().__init__(extractor)
        if objective not in OBJECTIVES:
            raise ValueError(f"objective must be one of {OBJECTIVES}, got {objective!r}")
        self.objective = objective
        self.num_warmup_sample = num_warmup_sample
        self.rng = _rng(seed)
        self.params = dict(DEFAULT_PARAMS, **(params or {}))
        self.max_rounds = max_rounds
        self.early_stopping_rounds = early_stopping_rounds
        self.weight_floor = weight_floor
        self.top_weight = top_weight
        self.base_model = base_model
        self.start = start
        self.verbose = verbose
        self.data = TrainingSet()
        self.booster = start   # (until its first training it ranks as the trees it continues)
        self.rounds = start.num_boosted_rounds() if start is not None else 0

    # learning ------------------------------------------------------------------------------
    def update(self, records: Iterable) -> None:
        """Add measured programs ((task, state, cost seconds or None) each) and retrain."""
        by_task, order = split_records(records)
        for tid in order:
            task, states, costs = by_task[tid]
            self.data.add(self.features(task, states), costs, [task_key(task)] * len(states))
        if len(self.data) >= self.num_warmup_sample:
            self.fit(self.data)

    def fit(self, data: TrainingSet, sample: np.ndarray | None = None) -> None:
        """Train from scratch on ``data`` (or on the programs ``sample`` indexes, repeats allowed)."""
        features, labels, groups = data.features, data.labels(), data.group_ids()
        if sample is not None:
            features = [features[i] for i in sample]
            labels, groups = labels[sample], groups[sample]
        keep = [i for i, f in enumerate(features) if f.shape[0]]   # programs that lowered
        features = [features[i] for i in keep]
        labels, groups = labels[keep], groups[keep]
        if not features:
            self.booster = None
            return
        self.booster, self.rounds = self._train(features, labels, groups)

    def _train(self, features, labels, groups):
        import xgboost as xgb
        rows, pack_ids = pack(features)
        n = len(features)
        dtrain = xgb.DMatrix(rows)
        margin = self._base_rows(rows)
        if margin is not None:
            dtrain.set_base_margin(margin)
        params = dict(self.params, seed=int(self.rng.integers(2 ** 31)))
        if self.objective == "pack-sum":
            weights = np.maximum(labels, self.weight_floor)

            def obj(preds, _):
                return O.pack_sum_gradient(preds, pack_ids, labels, weights)

            def metric(preds, _):
                return "p-rmse", O.pack_sum_rmse(preds, pack_ids, labels)
        else:
            better, worse, pair_w = O.ranking_pairs(labels, groups, self.rng, top_weight=self.top_weight)
            total_w = max(float(pair_w.sum()), 1e-12)

            def obj(preds, _):
                return O.rank_gradient(preds, pack_ids, n, better, worse, pair_w)

            def metric(preds, _):
                return "rank-loss", O.rank_loss(preds, pack_ids, n, better, worse, pair_w) / total_w
        booster = xgb.train(params, dtrain, num_boost_round=self.max_rounds, evals=[(dtrain, "tr")], obj=obj,
                            custom_metric=metric, maximize=False, early_stopping_rounds=self.early_stopping_rounds,
                            verbose_eval=self.verbose, xgb_model=self.start)
        best = getattr(booster, "best_iteration", None)
        if best is not None and best + 1 < booster.num_boosted_rounds():
            booster = booster[: best + 1]
        return booster, booster.num_boosted_rounds()

    # predicting ----------------------------------------------------------------------------
    @property
    def can_rank(self) -> bool:
        return self.booster is not None or self.base_model is not None

    def continued(self, **settings) -> "XGBoostModel":
        """A model whose training continues this one's trained trees (at most
        ``settings["max_rounds"]`` more), with ``settings`` (``XGBoostModel``'s arguments)."""
        if self.booster is None:
            raise ValueError("continued: the model is not trained yet")
        return XGBoostModel(self.objective, start=self.booster.copy(), **settings)

    def predictor(self) -> "XGBoostModel":
        clone = copy.copy(self)
        clone.data, clone.extractor = TrainingSet(), None
        clone.base_model = self.base_model.predictor() if self.base_model is not None else None
        return clone

    def _base_rows(self, rows: np.ndarray):
        if self.base_model is None or len(rows) == 0:
            return None
        return self.base_model.predict_rows(rows)

    def predict_rows(self, rows: np.ndarray) -> np.ndarray:
        """Per-statement scores of feature rows (before summing per program)."""
        import xgboost as xgb
        if len(rows) == 0:
            return np.zeros(0)
        margin = self._base_rows(rows)
        if self.booster is None:
            return margin if margin is not None else self.rng.uniform(size=len(rows))
        d = xgb.DMatrix(rows)
        if margin is not None:
            d.set_base_margin(margin)
        return self.booster.predict(d, output_margin=True).astype(np.float64)

    def predict_features(self, features: list[np.ndarray]) -> np.ndarray:
        rows, pack_ids = pack(features)
        scores = O.pack_sums(self.predict_rows(rows), pack_ids, len(features))
        empty = np.array([f.shape[0] == 0 for f in features], dtype=bool)
        scores[empty] = -np.inf
        return scores

    # persistence ---------------------------------------------------------------------------
    def save(self, path: str) -> None:
        """Write the trained booster (XGBoost's JSON or UBJ by the file's extension) with this
        model's settings as attributes. The training set is not saved: keep the records."""
        self._stamped().save_model(path)

    def _stamped(self):
        """The trained booster, this model's settings set as its attributes."""
        if self.booster is None:
            raise ValueError("save: the model is not trained yet (it has seen "
                             f"{len(self.data)} programs, warm-up is {self.num_warmup_sample})")
        if self.base_model is not None:
            raise ValueError("save: a model with a base model cannot be saved on its own; "
                             "train one model on all records instead")
        self.booster.set_attr(autosched=json.dumps({"objective": self.objective, "n_features": N_FEATURES,
                                                    "rounds": self.rounds}))
        return self.booster

    def load(self, path) -> "XGBoostModel":
        """Read a booster written by ``save`` (the objective comes from the file): from a file,
        or from the file's bytes (one member of an ensemble's file)."""
        import xgboost as xgb
        booster = xgb.Booster()
        raw = isinstance(path, (bytes, bytearray))
        booster.load_model(bytearray(path) if raw else path)
        meta = json.loads(booster.attr("autosched") or "{}")
        if meta.get("n_features", N_FEATURES) != N_FEATURES:
            raise ValueError(f"{'the model' if raw else path}: a model of {meta['n_features']} features; "
                             f"this autosched has {N_FEATURES}")
        self.objective = meta.get("objective", self.objective)
        self.rounds = meta.get("rounds", booster.num_boosted_rounds())
        self.booster = booster
        return self

    @classmethod
    def from_file(cls, path, **kwargs) -> "XGBoostModel":
        return cls(**kwargs).load(path)

    def boosters(self) -> list:
        """Its trained boosters, its base model's first (what a digest of the model covers)."""
        own = [self.booster] if self.booster is not None else []
        return (self.base_model.boosters() if self.base_model is not None else []) + own


#: the key that marks an ensemble's file (``XGBoostEnsemble.save``): a JSON object of this
#: key (the members' objective and count) and "members", each an XGBoost JSON model as
#: ``XGBoostModel.save`` writes it
ENSEMBLE_KEY = "autosched_ensemble"


class XGBoostEnsemble(CostModel):
    """AdaTune's surrogate with uncertainty: ``n_members`` XGBoost models, each trained on a
    bootstrap resample of the measured programs; the score is their mean and the
    uncertainty their standard deviation (see ``expected_improvement``). Also a base model:
    the mean of models trained on resamples of the same records ranks more steadily than
    any one of them (``autosched pretrain --members``)."""

    def __init__(self, n_members: int = 5, objective: str = "pack-sum", *, num_warmup_sample: int = 100,
                 seed=None, extractor: FeatureExtractor | None = None, **kwargs):
        super().__init__(extractor)
        if n_members < 2:
            raise ValueError(f"an ensemble needs at least 2 members, got {n_members}")
        self.rng = _rng(seed)
        self.num_warmup_sample = num_warmup_sample
        self.members = [XGBoostModel(objective, num_warmup_sample=num_warmup_sample, seed=self.rng.spawn(1)[0],
                                     extractor=extractor, **kwargs) for _ in range(n_members)]
        self.data = TrainingSet()

    # the same accumulate-then-retrain as one model; ``fit`` trains every member
    update = XGBoostModel.update

    def fit(self, data: TrainingSet) -> None:
        n = len(data)
        for m in self.members:
            m.fit(data, sample=self.rng.integers(0, n, size=n))

    @property
    def can_rank(self) -> bool:
        return any(m.can_rank for m in self.members)

    def predictor(self) -> "XGBoostEnsemble":
        clone = copy.copy(self)
        clone.data, clone.extractor = TrainingSet(), None
        clone.members = [m.predictor() for m in self.members]
        return clone

    def continued(self, seed=None, **settings) -> "XGBoostEnsemble":
        """An ensemble whose every member continues the trees of the same member of this one
        (``XGBoostModel.continued``), each on its own bootstrap resample, as ``fit`` trains."""
        rng = _rng(seed)
        return XGBoostEnsemble.from_members([m.continued(seed=rng.spawn(1)[0], **settings) for m in self.members],
                                            seed=rng, num_warmup_sample=settings.get("num_warmup_sample", 100))

    @classmethod
    def from_members(cls, members: list, seed=None, num_warmup_sample: int = 0) -> "XGBoostEnsemble":
        """An ensemble of trained ``XGBoostModel``s (those of an ensemble's file)."""
        ensemble = cls(max(len(members), 2), members[0].objective, num_warmup_sample=num_warmup_sample, seed=seed)
        ensemble.members = list(members)
        return ensemble

    @property
    def objective(self) -> str:
        return self.members[0].objective

    def boosters(self) -> list:
        return [b for m in self.members for b in m.boosters()]

    def save(self, path: str) -> None:
        """Write every member (XGBoost's JSON, as ``XGBoostModel.save``) into one JSON file
        (``ENSEMBLE_KEY``)."""
        raw = [bytes(m._stamped().save_raw("json")) for m in self.members]
        head = json.dumps({ENSEMBLE_KEY: {"objective": self.objective, "members": len(raw)}})[:-1].encode()
        with open(path, "wb") as f:
            f.write(head + b',"members":[' + b",".join(raw) + b"]}")

    def predict_rows(self, rows: np.ndarray) -> np.ndarray:
        """The members' mean per-statement scores (as the base model of a tuning's model)."""
        return np.mean([m.predict_rows(rows) for m in self.members], axis=0)

    def _member_scores(self, features) -> np.ndarray:
        return np.stack([m.predict_features(features) for m in self.members])

    def predict_features(self, features) -> np.ndarray:
        return self._member_scores(features).mean(axis=0)

    def predict_with_uncertainty(self, task, states) -> tuple[np.ndarray, np.ndarray]:
        scores = self._member_scores(self.features(task, states))
        mean = scores.mean(axis=0)
        with np.errstate(invalid="ignore"):
            std = np.where(np.isfinite(mean), scores.std(axis=0), 0.0)
        return mean, std


def expected_improvement(mean, std, best: float) -> np.ndarray:
    """E[max(f - best, 0)] for f ~ Normal(mean, std) (AdaTune's acquisition; higher is
    more promising): ``(mean - best) Φ(z) + std φ(z)``, ``z = (mean - best) / std``."""
    mean = np.asarray(mean, dtype=np.float64)
    std = np.asarray(std, dtype=np.float64)
    finite = np.isfinite(mean)
    gain = np.where(finite, mean - best, 0.0)
    safe_std = np.where(std > 0, std, 1.0)
    z = np.where(std > 0, gain / safe_std, 0.0)
    cdf = 0.5 * (1.0 + np.vectorize(math.erf, otypes=[float])(z / math.sqrt(2.0))) if z.size else z
    pdf = np.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi)
    ei = np.where(std > 0, gain * cdf + std * pdf, np.maximum(gain, 0.0))
    return np.where(finite, ei, 0.0)


class RandomModel(CostModel):
    """Scores uniformly at random (the ablation baseline); learns nothing."""

    def __init__(self, seed=None):
        super().__init__(None)
        self.rng = _rng(seed)

    can_rank = False

    def update(self, records: Iterable) -> None:
        for _ in records:
            pass

    def predict(self, task, states) -> np.ndarray:
        return self.rng.uniform(size=len(states))

    def predict_features(self, features) -> np.ndarray:
        return self.rng.uniform(size=len(features))
