"""Winograd convolution: the operator against the direct convolution's numpy reference,
programs sampled from its search space, and the graph pass that uses it in networks."""
import numpy as np
import pytest

import ir
import sketch_rules as SR
from autosched import UntunedWorkloadWarning
from autosched import graph as G
from autosched import ops
from autosched.graph import passes
from autosched.ops import reference as R
from autosched.ops import winograd as W


def _direct(x, w, before, after):
    return R.conv(x, w, (1, 1), before, (1, 1), 1, True, pad_after=after)


@pytest.mark.parametrize("tile", W.TILE_SIZES)
@pytest.mark.parametrize("n, h, w, ci, co, before, after", [
    (1, 6, 6, 3, 4, (1, 1), None),        # tiles cover the output exactly
    (1, 7, 5, 4, 3, (1, 1), None),        # odd sizes: the last tile reaches past the output
    (2, 8, 8, 5, 6, (0, 0), None),        # no padding, batch of two
    (1, 9, 6, 2, 5, (1, 0), (0, 2)),      # asymmetric padding (ONNX pads)
])
def test_winograd_matches_the_direct_convolution(n, h, w, ci, co, before, after, tile):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, h, w, ci)).astype(np.float32)
    g = rng.standard_normal((3, 3, ci, co)).astype(np.float32)
    want = _direct(x, g, before, after if after is not None else before)
    u = W.winograd_weight(g, tile)
    assert u.shape == ((tile + 2) ** 2, ci, co) and u.dtype == np.float32
    np.testing.assert_allclose(W.reference(x, u, before, after, tile), want, rtol=1e-5, atol=1e-5)
    data = ir.placeholder(x.shape, name="data")
    weight = ir.placeholder(u.shape, name="weight", constant=True)
    out = W.conv2d_winograd(data, weight, before, after, tile)
    assert out.shape == want.shape
    got = np.zeros(out.shape, np.float32)
    ir.build(ir.ComputeDAG([data, weight, out]))(x, u, got)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def test_winograd_flops_are_the_direct_convolutions():
    w = ops.workload("conv2d_winograd", 1, 14, 14, 16, 8)
    direct = ops.workload("conv2d", 1, 14, 14, 16, 8, 3, padding=1)
    assert w.flops == direct.flops
    # the DAG counts the same (plus the padding's comparisons), not its select chains
    assert w.flops <= ir.ComputeDAG(w.tensors).flop_count() <= 1.02 * w.flops


def test_programs_sampled_from_the_winograd_space_match_numpy():
    w = ops.workload("conv2d_winograd", 1, 10, 10, 8, 16)
    task = ir.SearchTask(ir.ComputeDAG(w.tensors), hardware=ir.HardwareParams(num_cores=2, vector_lanes=8))
    rng = np.random.default_rng(3)
    inputs = w.random_inputs(rng)
    want = w.reference(inputs)[0]
    sketches = SR.generate_sketches(task)
    states = SR.sample_programs(task, sketches, 12, rng)
    assert len(states) >= 8
    for state in states:
        kernel = ir.build(task.dag, state, layout_rewrite=True)
        args = [kernel.pack(t.name, a) if t.name in kernel.layouts else a for t, a in zip(task.dag.inputs, inputs)]
        got = w.output_buffers()
        kernel(*args, *got)
        np.testing.assert_allclose(got[0], want, rtol=1e-4, atol=1e-4 * np.abs(want).max(), err_msg=str(state))


def _net(channels=64):
    b = G.GraphBuilder("wino", seed=0)
    x = b.input((1, 14, 14, channels))
    a = b.relu(b.batch_norm(b.conv2d(x, channels, 3, padding=1)))     # converted
    s = b.conv2d(a, channels, 3, stride=2, padding=1)                 # stride 2: kept
    p = b.conv2d(a, 8, 1)                                             # 1x1: kept
    t = b.conv2d(s, channels, 3, padding=1)                           # 7x7 output, 16 tiles: converted
    u = b.conv2d(b.max_pool(t, 2, 2), channels, 3, padding=1)         # 3x3 output, 4 tiles: kept
    n = b.conv2d(u, 8, 3, padding=1)                                  # 8 output channels: kept
    return b.graph([p, n])


def _convs(g):
    return [n.kind for n in g.op_nodes if n.kind in ("conv", "conv2d_winograd")]


def test_the_pass_converts_only_what_qualifies_and_keeps_the_results():
    g = G.fold_batch_norm(_net())
    converted = passes.use_winograd(g)
    assert _convs(converted) == ["conv2d_winograd", "conv", "conv", "conv2d_winograd", "conv", "conv"]
    every = passes.use_winograd(g, min_channels=1, min_tiles=1)
    assert _convs(every) == ["conv2d_winograd", "conv", "conv", "conv2d_winograd", "conv2d_winograd",
                             "conv2d_winograd"]
    assert passes.use_winograd(g, min_tiles=10_000) is g
    assert "conv2d_winograd" not in _convs(passes.use_winograd(G.fold_batch_norm(_net(channels=32))))
    inputs = g.random_inputs(0)
    want = G.run_reference(g, inputs)
    for variant in (converted, every):
        for got, ref in zip(G.run_reference(variant, inputs), want):
            np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6 * np.abs(ref).max())


def test_partitioned_networks_use_winograd_by_default_and_run_correctly():
    g = _net(channels=64)
    part = G.partition(g)
    assert any(t.name.startswith("fused_conv2d_winograd") for t in part.tasks)
    assert not any("winograd" in t.name for t in G.partition(g, winograd=False).tasks)
    with pytest.warns(UntunedWorkloadWarning, match="default schedule"):
        ex = G.GraphExecutor(part)
    inputs = g.random_inputs(1)
    for got, want in zip(ex.run(*inputs), G.run_reference(g, inputs)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def test_bad_winograd_arguments_are_refused_with_what_was_expected():
    data = ir.placeholder((1, 8, 8, 4), name="data")
    with pytest.raises(ValueError, match=r"expected \(16, 4, CO\)"):
        W.conv2d_winograd(data, ir.placeholder((3, 3, 4, 8), name="w"))
    with pytest.raises(ValueError, match="tile size 3 is not offered"):
        W.transform_matrices(3)
    with pytest.raises(ValueError, match=r"expected a \(3, 3, CI, CO\) weight"):
        W.winograd_weight(np.zeros((5, 5, 2, 2), np.float32))


@pytest.mark.parametrize("tile, pack_terms, output_terms", [(2, 2, 3), (4, 4, 5)])
def test_the_transforms_spend_no_multiply_add_on_a_zero_entry(tile, pack_terms, output_terms):
    # each row of F(2x2, 3x3)'s B^T has two nonzero entries, so a tile position's pack sums
    # 2 x 2 terms, not the whole 4 x 4 tile; each row of its A^T has three, so an output
    # sums 3 x 3. F(4x4, 3x3): at most 4 of B^T's 6 and 5 of A^T's 6 per row
    data = ir.placeholder((1, 8, 8, 4), name="data")
    weight = ir.placeholder(((tile + 2) ** 2, 4, 4), name="w", constant=True)
    out = W.conv2d_winograd(data, weight, tile=tile)
    dag = ir.ComputeDAG([data, weight, out])
    pack = next(op for op in dag.ops if op.name.endswith("_data_pack"))
    assert [ax.extent for ax in pack.body.axes] == [pack_terms, pack_terms]
    reads = [e for e in ir.expr.walk(out.op.body) if isinstance(e, ir.TensorRead)]
    assert len(reads) == output_terms ** 2
