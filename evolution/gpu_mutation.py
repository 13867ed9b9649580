"""The mutations of the evolutionary search on a GPU task (Ansor's GPU mutation rules):
tile sizes (90%: the block, virtual-thread, thread and register tiles, a cooperative
fetch's vector length, a simple stage's threads per block) and the unroll step (10%,
among the GPU's choices). Thread bindings follow the tile sizes on replay, so a mutated
program can break a block's limits: such a child is dropped here (None), not measured."""
from __future__ import annotations

import numpy as np

import ir
from ir.cuda.lower import block_limits_violation
from sketch_rules.annotation import AUTO_UNROLL_CHOICES_GPU

from .mutation import mutate_auto_unroll, mutate_tile_size, mutate_tile_size_random_walk

#: Ansor's GPU mutation weights
GPU_MUTATION_WEIGHTS = {"tile_size": 0.90, "auto_unroll": 0.10}


def mutate_gpu(state: ir.State, rng: np.random.Generator, hardware, weights=None,
               random_walk_q: float | None = None, max_innermost: int = 64) -> ir.State | None:
    """One mutation of a GPU program, its kind drawn by ``weights`` (default
    ``GPU_MUTATION_WEIGHTS``); None when it does not apply or the child breaks the
    limits of ``hardware``."""
    weights = {k: w for k, w in (weights or GPU_MUTATION_WEIGHTS).items() if k in GPU_MUTATION_WEIGHTS}
    if not weights:
        raise ValueError(f"GPU mutation weights must name some of {sorted(GPU_MUTATION_WEIGHTS)}")
    kinds = list(weights)
    p = np.array([weights[k] for k in kinds], dtype=float)
    kind = kinds[int(rng.choice(len(kinds), p=p / p.sum()))]
    if kind == "auto_unroll":
        child = mutate_auto_unroll(state, rng, AUTO_UNROLL_CHOICES_GPU)
    elif random_walk_q is not None:
        child = mutate_tile_size_random_walk(state, rng, random_walk_q, max_innermost)
    else:
        child = mutate_tile_size(state, rng, max_innermost)
    if child is None or block_limits_violation(child, hardware) is not None:
        return None
    return child
