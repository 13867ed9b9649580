"""The search space: derivation rules that build sketches from a ComputeDAG (Ansor's
Table 1), user-registered rules, and random annotation into complete programs."""
from .rule import Condition, SketchContext, SketchRule
from .cpu_rules import (AddCacheReadPack, AddCacheWrite, AddRfactor, AlwaysInline, MultiLevelTiling,
                        MultiLevelTilingWithFusion, SimplifyComputeWithConstTensor, SkipStage, cpu_rules)
from .gpu_rules import AddCacheReadShared, CrossThreadReduction, gpu_rules
from .generate import generate_sketches, register_sketch_rule, rules_for, unregister_sketch_rule
from .annotation import (AUTO_UNROLL_CHOICES_CPU, AUTO_UNROLL_CHOICES_GPU, VECTOR_LANE_GROUP, ChangeComputeLocation,
                         FillTileSize, InitRule, Parallel, Unroll, Vectorize, compute_location_candidates,
                         compute_location_choices, cpu_init_rules, factorizations, good_vector_length,
                         off_grid_vector_loops, vector_lengths)
from .gpu_annotation import CheckGPULimits, FillTileSizeGPU, InitThreadBind, gpu_init_rules
from .sampling import sample_programs
from .spaces import SearchSpace, register_search_space, search_space
from .tiling import follow_tiling, multi_level_tiling
from .default_schedules import cpu_default_schedule, gpu_default_schedule

#: the search spaces of the built-in back ends (``ir.Backend.search_space``)
CPU_SPACE = register_search_space(SearchSpace("cpu", cpu_rules, cpu_init_rules, AUTO_UNROLL_CHOICES_CPU,
                                              cpu_default_schedule))
GPU_SPACE = register_search_space(SearchSpace("gpu", gpu_rules, gpu_init_rules, AUTO_UNROLL_CHOICES_GPU,
                                              gpu_default_schedule))
