"""Cost models: a base interface (update with measured programs, predict scores), XGBoost
with the pack-sum or rank objective, an XGBoost ensemble with uncertainty, and a random
model for ablation."""
from .base import CostModel, MeasuredProgram, TrainingSet, normalized_throughputs, pack, task_key
from .metrics import pairwise_accuracy, r2, recall_at_k, rmse
from .xgb_model import ENSEMBLE_KEY, OBJECTIVES, RandomModel, XGBoostEnsemble, XGBoostModel, expected_improvement

__all__ = ["CostModel", "MeasuredProgram", "TrainingSet", "normalized_throughputs", "pack", "task_key",
           "pairwise_accuracy", "r2", "recall_at_k", "rmse",
           "ENSEMBLE_KEY", "OBJECTIVES", "RandomModel", "XGBoostEnsemble", "XGBoostModel", "expected_improvement"]
