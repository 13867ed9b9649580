"""The search: program features, cost models, mutations, crossover, the evolution of a
population (``evolve``, in this process or in islands) and the search policy of one task."""
from .features import (FEATURES, FEATURE_NAMES, N_FEATURES, FeatureExtractor, extract_features, feature_dict,
                       program_features, slog)
from .cost_model import (CostModel, MeasuredProgram, RandomModel, XGBoostEnsemble, XGBoostModel,
                         expected_improvement, pairwise_accuracy, recall_at_k)

__all__ = ["FEATURES", "FEATURE_NAMES", "N_FEATURES", "FeatureExtractor", "extract_features", "feature_dict",
           "program_features", "slog",
           "CostModel", "MeasuredProgram", "RandomModel", "XGBoostEnsemble", "XGBoostModel", "expected_improvement",
           "pairwise_accuracy", "recall_at_k"]
from .mutation import (AutoUnrollMutation, ComputeLocationMutation, Mutation, MutationContext, ParallelMutation,
                       TileSizeMutation, cpu_mutations, gpu_mutations, mutate_auto_unroll, mutate_compute_location,
                       mutate_parallel, mutate_tile_size, mutate_tile_size_random_walk, mutations_for,
                       register_mutations)
from .crossover import Crossover
from .evolve import Evolution, Rejections
from .search_policy import SearchParams, SketchPolicy

__all__ += ["AutoUnrollMutation", "ComputeLocationMutation", "Mutation", "MutationContext", "ParallelMutation",
            "TileSizeMutation", "cpu_mutations", "gpu_mutations", "mutate_auto_unroll", "mutate_compute_location",
            "mutate_parallel", "mutate_tile_size", "mutate_tile_size_random_walk", "mutations_for", "register_mutations", "Crossover", "Evolution", "Rejections",
            "SearchParams", "SketchPolicy"]
