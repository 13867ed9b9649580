"""The search space: derivation rules that build sketches from a ComputeDAG (Ansor's
Table 1), user-registered rules, and random annotation into complete programs."""
from .rule import Condition, SketchContext, SketchRule
from .cpu_rules import (AddCacheReadPack, AddCacheWrite, AddRfactor, AlwaysInline, MultiLevelTiling,
                        MultiLevelTilingWithFusion, SimplifyComputeWithConstTensor, SkipStage, cpu_rules)
from .gpu_rules import AddCacheReadShared, CrossThreadReduction, gpu_rules
from .generate import generate_sketches, register_sketch_rule, rules_for, unregister_sketch_rule
from .annotation import (ChangeComputeLocation, FillTileSize, InitRule, Parallel, Unroll, Vectorize,
                         compute_location_candidates, compute_location_choices, cpu_init_rules, factorizations)
from .gpu_annotation import CheckGPULimits, FillTileSizeGPU, InitThreadBind, gpu_init_rules
from .sampling import init_rules_for, sample_programs
from .tiling import follow_tiling, multi_level_tiling
