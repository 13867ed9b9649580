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


def conv_stage(state):
    return next(st for st in state.stages if st.op.name.startswith("group_conv"))


@pytest.mark.parametrize("channels, groups, span", [(48, 2, 24), (64, 4, 16), (48, 12, 48), (48, 1, 48)])
def test_a_grouped_convolutions_lane_span_is_its_group_when_the_lane_group_divides_it(channels, groups, span):
    """The input channel of output channel c is (c // (C/g)) * (C/g) + rc: one value for a
    group's outputs. 4 channels a group (48/12) is no multiple of 8 lanes: the axis's extent."""
    _, task = conv_task(channels, groups, 3)
    stage = next(st for st in task.dag.init_state().stages if st.op.name.endswith("conv2d_nhwc"))
    assert SR.annotation.lane_span(stage, "ax3") == span
    assert SR.annotation.lane_span(stage, "ax1") == 4


def test_a_vector_longer_than_its_span_or_not_dividing_it_is_off_the_grid():
    assert SR.good_vector_length(24, 24) and SR.good_vector_length(8, 24)
    assert not SR.good_vector_length(48, 24) and not SR.good_vector_length(16, 24)
    assert not SR.good_vector_length(56, 24)


def _gathers(task, state) -> int:
    return ir.build(task.dag, state, layout_rewrite=True).llvm_ir.count("masked.gather")


def test_sampling_vectorises_a_grouped_convolution_within_its_groups_without_gathers():
    w, task = conv_task(48, 2, 3)                    # 24 channels a group
    programs = SR.sample_programs(task, SR.generate_sketches(task), 60, np.random.default_rng(0))
    lengths = {conv_stage(p).iters[-1].extent for p in programs if conv_stage(p).iters[-1].annotation == "vectorize"}
    assert lengths and lengths <= {1, 8, 24} and lengths & {8, 24}
    assert sum(SR.off_grid_vector_loops(p) for p in programs) == 0
    wide = [p for p in programs if conv_stage(p).iters[-1].annotation == "vectorize"
            and conv_stage(p).iters[-1].extent > 1]
    assert _gathers(task, wide[0]) == 0
    check_computes(w, task, wide[0])


def test_a_vector_across_groups_gathers_its_input():
    """Why the span: 16 lanes of 24-channel groups read the input by gather (8 do not)."""
    w, task = conv_task(48, 2, 3)
    s = task.dag.init_state()
    for name in ("bias_add_0", "pad"):
        s = s.compute_inline(s.stage_index(name))
    conv = s.stage_index("group_conv2d_nhwc")
    for lanes, gathers in ((16, True), (8, False)):
        p = s.split(conv, "ax3", [lanes]).reorder(conv, ["ax0", "ax1", "ax2", "ax3.0", "rh", "rw", "rc", "ax3.1"])
        p = p.vectorize(conv, "ax3.1")
        assert (_gathers(task, p) > 0) == gathers
        assert (SR.off_grid_vector_loops(p) > 0) == gathers
        check_computes(w, task, p)
