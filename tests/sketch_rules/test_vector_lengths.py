"""The CPU space's vector lengths: a vectorised tile of a channel axis is a multiple of the
lane group (8 float32 lanes) where the channel count allows one, else a part of a register,
or a padded tile (16 or 32 lanes of 408) where the stage reads only weights along it;
sampling draws only those, the tile-size mutation makes no program with more vector loops
off that grid than its parent, and the programs still compute what numpy does."""
from dataclasses import replace

import numpy as np
import pytest

import ir
import sketch_rules as SR
from autosched import ops
from evolution import mutate_tile_size, mutate_tile_size_random_walk
from sketch_rules.annotation import vector_axis_extent
from tests.evolution.programs import check_computes
from tests.ir.test_padded_tiles import local_updates_guarded

HW = ir.HardwareParams(num_cores=2, vector_lanes=16)


@pytest.mark.parametrize("extent, lengths", [(408, (1, 8, 24)), (116, (1, 2, 4)), (256, (1, 8, 16, 32, 64)),
                                             (29, (1,)), (58, (1, 2)), (80, (1, 8, 16, 40))])
def test_vector_lengths_of_a_channel_count(extent, lengths):
    assert SR.vector_lengths(extent, 64) == lengths
    assert all(SR.good_vector_length(n, extent) == (n in lengths) for n in range(1, 65) if extent % n == 0)


@pytest.mark.parametrize("extent, lengths", [(408, (1, 8, 16, 24, 32)), (116, (1, 2, 4, 8, 16, 24, 32)),
                                             (256, (1, 8, 16, 32, 64)), (29, (1, 8, 16, 32)), (1000, (1, 8, 16, 24, 32, 40))])
def test_padded_vector_lengths_of_a_channel_count(extent, lengths):
    """Where the stage reads only weights along the axis, multiples of 8 lanes up to 32 that
    pad it by at most an eighth; none on an axis of a multiple of 16 (every width is exact)."""
    assert SR.vector_lengths(extent, 64, padded=True) == lengths
    assert SR.good_vector_length(16, 408, padded=True) and not SR.good_vector_length(16, 408)
    assert not SR.good_vector_length(48, 408, padded=True)     # past MAX_PADDED_LANES
    assert not SR.good_vector_length(16, 20, padded=True)      # 32 for 20: 60 % more work


def test_factorizations_of_a_padded_vector_tile_tile_its_tiles():
    """16 lanes of 408 channels are 26 tiles: the other levels divide 26."""
    assert set(SR.factorizations(408, 2, 64, (16,))) == {(1, 16), (2, 16), (13, 16), (26, 16)}
    assert set(SR.factorizations(408, 1, 64, (16, 24))) == {(16,), (24,)}


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


@pytest.mark.parametrize("channels, groups, allowed", [(408, 1, {1, 8, 16, 24, 32}), (408, 17, {1, 8, 24}),
                                                       (116, 1, {1, 2, 4, 8, 16, 24, 32}),
                                                       (256, 1, {1, 8, 16, 32, 64})])
def test_sampling_draws_vector_lengths_on_the_lane_grid(channels, groups, allowed):
    """A 1x1 convolution's channels read only its weights: padded tiles too (16 and 32 lanes
    of 408); a grouped one's read the image: its exact lengths only."""
    w, task = conv_task(channels, groups, 3 if groups > 1 else 1)
    programs = SR.sample_programs(task, SR.generate_sketches(task), 60, np.random.default_rng(0))
    lengths = {n for p in programs for n, extent in vector_loops(p) if extent == channels}
    exact = set(SR.vector_lengths(channels, 64))
    assert lengths <= allowed and len(lengths & exact) >= 2
    assert (lengths - exact != set()) == (allowed != exact)
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


@pytest.mark.parametrize("rc_unrolled", [False, True])
def test_a_vector_over_groups_narrower_than_it_loads_one_window_not_a_gather(rc_unrolled):
    """4 channels a group (ResNeXt-50's first stage), 16 lanes: lane l reads input channel
    (l // 4) * 4 + rc, all within 13 floats of lane 0's, so one load and a shuffle
    (``ir.llvm_codegen.window_offsets``), with the reduction over rc in a loop or unrolled."""
    w, task = conv_task(32, 8, 3)
    s = task.dag.init_state()
    for name in ("bias_add_0", "pad"):
        s = s.compute_inline(s.stage_index(name))
    conv = s.stage_index("group_conv2d_nhwc")
    p = s.split(conv, "ax3", [16]).reorder(conv, ["ax0", "ax1", "ax2", "ax3.0", "rh", "rw", "rc", "ax3.1"])
    p = p.vectorize(conv, "ax3.1")
    if rc_unrolled:
        p = p.unroll(conv, "rc")
    code = ir.build(task.dag, p, layout_rewrite=True).llvm_ir
    assert "masked.gather" not in code and "shufflevector <13 x float>" in code
    check_computes(w, task, p)


def padded_programs(channels: int, n: int = 60):
    w, task = conv_task(channels)
    programs = SR.sample_programs(task, SR.generate_sketches(task), n, np.random.default_rng(0))
    return w, task, [p for p in programs if any(channels % length for length, extent in vector_loops(p)
                                                if extent == channels)]


@pytest.mark.parametrize("channels", [408, 116])
def test_padded_tiles_compute_their_lanes_unmasked_and_store_only_the_real_ones(channels):
    w, task, padded = padded_programs(channels)
    assert len(padded) >= 3
    for p in padded[:3]:
        assert not local_updates_guarded(ir.lower(p, layout_rewrite=True).body)
        check_computes(w, task, p)


def _vector_anchors(program, channels: int) -> list:
    """The stages of ``program`` with a reduction whose last loop is a vector over an axis of
    ``channels`` (the anchor's tiles, not an epilogue's copy out)."""
    return [st for st in program.stages if vector_axis_extent(st) == channels
            and st.iters[-1].annotation == "vectorize" and any(it.kind == "reduce" for it in st.iters)]


def test_a_padded_tile_is_drawn_only_where_its_stage_computes_into_a_local_tile():
    """At root a stage writes a global buffer of the axis's true extent, where a padded lane
    would land on the next row: there every multiply-add is guarded (ShuffleNet-V2's 1x1
    convolution over 232 channels ran 15x slower with 24-lane tiles than with 8). Sampling
    draws padded tiles only for stages attached inside another's loops, and a program that
    has one at root is off the grid, so no mutation makes one."""
    w, task = conv_task(232)
    programs = SR.sample_programs(task, SR.generate_sketches(task), 300, np.random.default_rng(0))
    padded = [st for p in programs for st in _vector_anchors(p, 232) if 232 % st.iters[-1].extent]
    assert padded and all(st.compute_at == "iter" for st in padded)
    at_root = next(p for p in programs if any(st.compute_at == "root" for st in _vector_anchors(p, 232)))
    assert SR.off_grid_vector_loops(at_root) == 0
    steps = [replace(s, lengths=(10, 1, 24)) if isinstance(s, ir.steps.SplitStep) and s.extent == 232
             and len(s.lengths) == 3 else s for s in at_root.steps]
    wide = ir.State.from_steps(task.dag, steps)                  # 24 lanes over 240 of 232, at root
    (stage,) = _vector_anchors(wide, 232)
    assert stage.compute_at == "root" and stage.iters[-1].extent == 24 and SR.off_grid_vector_loops(wide) == 1
    check_computes(w, task, wide)   # guarded, not wrong


def test_a_padded_tile_keeps_its_guard_where_a_read_would_leave_its_tensor():
    """Without the weights packed (no layout rewrite) the last tile's padded lanes would read
    past the end of the weight matrix: the guard stays, and the program still computes."""
    w, task, padded = padded_programs(408)
    p = padded[0]
    kernel = ir.build(task.dag, p, layout_rewrite=False)
    assert "masked" in kernel.llvm_ir
    inputs = w.random_inputs(np.random.default_rng(0))
    outputs = w.output_buffers()
    kernel(*inputs, *outputs)
    for got, want in zip(outputs, w.reference(inputs)):
        np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-4)


def test_the_tile_size_mutation_keeps_padded_splits_tiling_cleanly():
    """A padded split's factors move among its levels (16 lanes of 408 as 2 x 13 tiles, or
    32 lanes as 13); a move that leaves neither an exact nor a padded split is no child."""
    from evolution.genes import split_parts
    w, task, padded = padded_programs(408)
    rng = np.random.default_rng(3)
    children = [c for _ in range(8) for p in padded if (c := mutate_tile_size(p, rng, 64, SR.VECTOR_LANE_GROUP))]
    assert len(children) > 30
    splits = [s for c in children for s in c.steps if isinstance(s, ir.steps.SplitStep)]
    assert all(split_parts(s) is not None for s in splits)
    assert any(s.extent == 408 and 408 % s.lengths[-1] for s in splits)
    assert sum(SR.off_grid_vector_loops(c) for c in children) == 0
    for c in children[:2]:
        check_computes(w, task, c)


@pytest.mark.parametrize("make, axis, paddable", [
    (lambda: ops.workload("dense_chain", 4, 64, 1000), "ax1", True),                    # its weights only
    (lambda: ops.workload("dense_chain", 4, 64, 1000, weight_constant=False), "ax1", False),
    (lambda: ops.workload("depthwise_chain", 1, 8, 8, 408, 3, 1, 1), "ax3", False),     # the image too
    (lambda: ops.workload("conv2d_chain", 1, 4, 4, 408, 408, 1), "ax1", False),          # rows of the image
])
def test_an_axis_is_paddable_where_the_stage_reads_only_weights_along_it(make, axis, paddable):
    dag = ir.ComputeDAG(make().tensors)
    anchor = max((st for st in dag.init_state().stages if not st.is_placeholder and st.body is not None
                  and isinstance(st.body, ir.expr.Reduce)), key=lambda st: len(st.iters))
    assert SR.annotation.paddable(anchor, axis) == paddable
