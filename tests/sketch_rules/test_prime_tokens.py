"""Attention over a prime token count (ViT-B/16's 197): Q·Kᵀ reads a transposed copy of the
keys whose rows run on in zeros to ``padded_extent``, so its vector tiles may run past the
last token (``paddable``) where no exact vector tile exists. The space draws such tiles,
lowering drops their guards inside the register tile, and the programs compute what numpy
does."""
import numpy as np
import pytest

import ir
import sketch_rules as SR
from autosched.ops.linalg import batch_matmul
from ir.lower import padded_row_lengths
from sketch_rules.annotation import padded_extent, paddable
from tests.ir.test_padded_tiles import local_updates_guarded
from tests.sketch_rules.test_vector_lengths import HW, vector_loops

TOKENS, HEADS, FEATURES = 61, 2, 16


@pytest.mark.parametrize("extent, wide", [(197, 216), (61, 64), (408, 416), (13, 13), (256, 256), (7, 7)])
def test_padded_extent_is_where_the_widest_padded_tile_ends(extent, wide):
    """197 tokens: 24 lanes make 9 tiles (216); 32 would pad past an eighth. An axis without
    padded tiles (13: 16 lanes pad 23 %; 256: every width exact) keeps its extent."""
    assert padded_extent(extent) == wide
    lengths = [n for n in SR.vector_lengths(extent, 64, padded=True) if extent % n]
    assert all(-(-extent // n) * n <= wide for n in lengths)


def scores(width: int, columns: int | None = TOKENS):
    """Q (heads, tokens, features) times the keys' transposed copy (heads, features, width)."""
    q = ir.placeholder((HEADS, TOKENS, FEATURES), "float32", name="Q")
    kt = ir.placeholder((HEADS, FEATURES, width), "float32", name="Kt")
    return q, kt, batch_matmul(q, kt, columns=columns)


@pytest.mark.parametrize("width, expected", [(64, True), (63, False), (TOKENS, False)])
def test_a_run_time_operand_wide_enough_along_the_axis_makes_it_paddable(width, expected):
    """The keys' copy padded to ``padded_extent`` (64 for 61): the padded lanes read its
    zeros; one column short, or unpadded, they would read the next row."""
    stage = ir.ComputeDAG(list(scores(width))).init_state().stages[-1]
    assert paddable(stage, "ax2") is expected
    assert not paddable(stage, "ax1")            # the rows of Q: it is not padded


def test_an_axis_read_through_an_expression_is_not_paddable():
    """``columns`` of a product read at ``j + 1``: a padded lane's index is not the axis alone."""
    q = ir.placeholder((HEADS, TOKENS, FEATURES), "float32", name="Q")
    kt = ir.placeholder((HEADS, FEATURES, 80), "float32", name="Kt")
    k = ir.reduce_axis(FEATURES, "k")
    s = ir.compute((HEADS, TOKENS, TOKENS), lambda b, i, j: ir.sum(q[b, i, k] * kt[b, k, j + 1], axis=k), name="s")
    assert not paddable(ir.ComputeDAG([q, kt, s]).init_state().stages[-1], "ax2")


def test_columns_must_fit_the_operand():
    q, kt, _ = scores(64)
    with pytest.raises(ValueError, match="columns=65; expected 1 to the 64 columns of B"):
        batch_matmul(q, kt, columns=65)


def test_sampling_draws_padded_tiles_over_prime_tokens_and_they_compute():
    """Every exact tile of 61 columns is scalar; the space draws 8 to 32 lanes past the last
    token, computed unguarded in the register tile, and the product matches numpy on the
    real columns whatever the padding holds."""
    q, kt, s = scores(padded_extent(TOKENS))
    task = ir.SearchTask(ir.ComputeDAG([q, kt, s]), hardware=HW)
    programs = SR.sample_programs(task, SR.generate_sketches(task), 40, np.random.default_rng(0))
    padded = [p for p in programs if any(TOKENS % n for n, extent in vector_loops(p) if extent == TOKENS)]
    assert len(padded) >= len(programs) // 2
    rng = np.random.default_rng(1)
    qa = rng.standard_normal((HEADS, TOKENS, FEATURES)).astype(np.float32)
    ka = rng.standard_normal((HEADS, TOKENS, FEATURES)).astype(np.float32)
    copy = np.full((HEADS, FEATURES, padded_extent(TOKENS)), np.nan, np.float32)   # not even zeros
    copy[..., :TOKENS] = ka.transpose(0, 2, 1)
    for p in padded[:3]:
        assert not local_updates_guarded(ir.lower(p).body)
        out = np.zeros((HEADS, TOKENS, TOKENS), np.float32)
        ir.build(task.dag, p)(qa, copy, out)
        np.testing.assert_allclose(out, qa @ ka.transpose(0, 2, 1), rtol=1e-4, atol=1e-4, err_msg=str(p))


@pytest.mark.parametrize("extent, rows", [(197, (2, 3, 4, 5, 6, 7, 8)), (61, (2, 3, 4, 5, 6, 7, 8)),
                                          (11, (2, 3, 4, 6)), (7, ()), (196, ()), (64, ())])
def test_padded_row_lengths_only_where_no_small_tile_divides(extent, rows):
    """11 rows: 5 would pad to 15 (36 %), 6 to 12; 7 rows: 2 pad 14 %; 196 = 4 x 49 has exact tiles."""
    assert padded_row_lengths(extent) == rows


def test_rows_read_along_the_axis_alone_are_paddable_a_convolutions_are_not():
    stage = ir.ComputeDAG(list(scores(TOKENS))).init_state().stages[-1]
    assert SR.annotation.rows_paddable(stage, "ax1")                 # Q[b, i, k]
    conv = ops_conv_stage()
    assert not SR.annotation.rows_paddable(conv, "ax1")              # image[h + rh]


def ops_conv_stage():
    from autosched import ops
    dag = ir.ComputeDAG(ops.workload("conv2d_chain", 1, 7, 7, 8, 8, 3, 1, 1).tensors)
    return max((st for st in dag.init_state().stages if isinstance(st.body, ir.expr.Reduce)),
               key=lambda st: len(st.iters))


def test_padded_row_tiles_clamp_their_reads_and_compute_over_prime_rows():
    """softmax·V over 61 tokens: Q's 61 rows have no tile of 2 to 8, so the register tile
    draws 2 to 8 rows running past the end; those rows read the last row again (a ``min``
    in the index), the tile's updates go unguarded, and only real rows are stored."""
    p_ = ir.placeholder((HEADS, TOKENS, TOKENS), "float32", name="P")
    v = ir.placeholder((HEADS, TOKENS, FEATURES), "float32", name="V")
    task = ir.SearchTask(ir.ComputeDAG([p_, v, batch_matmul(p_, v)]), hardware=HW)
    programs = SR.sample_programs(task, SR.generate_sketches(task), 40, np.random.default_rng(0))

    def row_tile(state):
        local = [st for st in state.stages if st.origin == "cache_write"]
        return next((it.extent for st in local for it in st.iters if it.name == "ax1.3"), 1)
    padded = [p for p in programs if TOKENS % row_tile(p)]
    assert len(padded) >= len(programs) // 4
    rng = np.random.default_rng(2)
    pa = rng.standard_normal((HEADS, TOKENS, TOKENS)).astype(np.float32)
    va = rng.standard_normal((HEADS, TOKENS, FEATURES)).astype(np.float32)
    for p in padded[:3]:
        lowered = ir.lower(p)
        assert not local_updates_guarded(lowered.body)
        assert "min(" in str(lowered.body)
        out = np.zeros((HEADS, TOKENS, FEATURES), np.float32)
        ir.build(task.dag, p)(pa, va, out)
        np.testing.assert_allclose(out, pa @ va, rtol=1e-4, atol=1e-4, err_msg=str(p))
