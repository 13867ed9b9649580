"""The CPU space's vector lengths: a vectorised tile of a channel axis is a multiple of the
lane group (8 float32 lanes) where the channel count allows one, else a part of a register;
sampling draws only those, the tile-size mutation makes no program with more vector loops
off that grid than its parent, and the programs still compute what numpy does."""
import numpy as np
import pytest

import ir
import sketch_rules as SR
from autosched import ops
from evolution import mutate_tile_size, mutate_tile_size_random_walk
from sketch_rules.annotation import vector_axis_extent
from tests.evolution.programs import check_computes

HW = ir.HardwareParams(num_cores=2, vector_lanes=16)


@pytest.mark.parametrize("extent, lengths", [(408, (1, 8, 24)), (116, (1, 2, 4)), (256, (1, 8, 16, 32, 64)),
                                             (29, (1,)), (58, (1, 2)), (80, (1, 8, 16, 40))])
def test_vector_lengths_of_a_channel_count(extent, lengths):
    assert SR.vector_lengths(extent, 64) == lengths
    assert all(SR.good_vector_length(n, extent) == (n in lengths) for n in range(1, 65) if extent % n == 0)


def test_vector_lengths_without_a_lane_group_are_every_divisor():
    assert SR.vector_lengths(408, 64, 1) == (1, 2, 3, 4, 6, 8, 12, 17, 24, 34, 51)


def test_factorizations_restrict_only_the_innermost_length():
    schemes = SR.factorizations(408, 3, 64, (8, 24))
    assert schemes and {s[-1] for s in schemes} == {8, 24}
    assert set(schemes) == {s for s in SR.factorizations(408, 3, 64) if s[-1] in (8, 24)}
    assert any(s[1] == 17 for s in schemes)      # the other levels keep every divisor


def conv_task(channels: int, groups: int = 1, kernel: int = 1):
    w = ops.workload("conv2d_chain", 1, 4, 4, channels, channels, kernel, 1, kernel // 2, groups,
                     epilogue="bias-relu")
    return w, ir.SearchTask(ir.ComputeDAG(w.tensors), hardware=HW, layout_rewrite=True)


def vector_loops(state) -> list[tuple[int, int]]:
    """(length, axis extent) of every vectorised loop that tiles one axis."""
    return [(st.iters[-1].extent, vector_axis_extent(st)) for st in state.stages
            if vector_axis_extent(st) is not None and st.iters[-1].annotation == "vectorize"]


@pytest.mark.parametrize("channels, groups, drawn", [(408, 1, {1, 8, 24}), (408, 17, {1, 8, 24}),
                                                     (116, 1, {1, 2, 4}), (256, 1, {1, 8, 16, 32, 64})])
def test_sampling_draws_vector_lengths_on_the_lane_grid(channels, groups, drawn):
    w, task = conv_task(channels, groups, 3 if groups > 1 else 1)
    programs = SR.sample_programs(task, SR.generate_sketches(task), 60, np.random.default_rng(0))
    lengths = {n for p in programs for n, extent in vector_loops(p) if extent == channels}
    assert lengths == drawn
    assert sum(SR.off_grid_vector_loops(p) for p in programs) == 0
    for p in programs[:2]:
        check_computes(w, task, p)


def test_without_the_rule_sampling_draws_odd_widths():
    """The test above can fail: the same space without a lane group vectorises 17 or 51 lanes."""
    _, task = conv_task(408)
    rules = [SR.FillTileSize(), SR.ChangeComputeLocation(), SR.Parallel(), SR.Unroll(), SR.Vectorize()]
    programs = SR.sample_programs(task, SR.generate_sketches(task), 60, np.random.default_rng(0), init_rules=rules)
    assert {n for p in programs for n, _ in vector_loops(p)} & {17, 34, 51}
    assert sum(SR.off_grid_vector_loops(p) for p in programs) > 0


@pytest.mark.parametrize("mutate", [lambda s, rng, g: mutate_tile_size(s, rng, 64, g),
                                    lambda s, rng, g: mutate_tile_size_random_walk(s, rng, 0.5, 64, g)])
def test_tile_size_mutation_keeps_vector_lengths_on_the_grid(mutate):
    w, task = conv_task(408)
    programs = SR.sample_programs(task, SR.generate_sketches(task), 16, np.random.default_rng(1))
    rng = np.random.default_rng(2)
    children = [c for _ in range(6) for p in programs if (c := mutate(p, rng, SR.VECTOR_LANE_GROUP)) is not None]
    assert len(children) > 30
    assert sum(SR.off_grid_vector_loops(c) for c in children) == 0
    check_computes(w, task, children[0])
    free = [c for _ in range(6) for p in programs if (c := mutate(p, rng, None)) is not None]
    assert sum(SR.off_grid_vector_loops(c) for c in free) > 0
