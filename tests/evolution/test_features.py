"""Per-statement features on tiny hand-built programs, against values worked out by hand.

Raw values (before slog) come from ``FeatureExtractor()._raw``; ``extract_features`` is
checked to be their slog in float32.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import ir
from evolution import FEATURE_NAMES, N_FEATURES, FeatureExtractor, extract_features, feature_dict, slog
from evolution import features as F


def raw_rows(task, state):
    return [feature_dict(r) for r in FeatureExtractor()._raw(task, state)]


def matmul_dag(n=64, m=64, k=64, b_constant=False):
    A = ir.placeholder((n, k), name="A")
    B = ir.placeholder((k, m), name="B", constant=b_constant)
    r = ir.reduce_axis(k, name="k")
    C = ir.compute((n, m), lambda i, j: ir.sum(A[i, r] * B[r, j], axis=r), name="C")
    return ir.ComputeDAG([A, B, C])


def tiled_matmul():
    """C.local (8x16 register tile) computed per (i.0, j.0) tile of C:

    for i.0 in 8 (parallel):
      for j.0 in 4:
        allocate C.local[128]
        for i in 8 (unroll): for j in 16 (vectorize): C.local[i*16 + j] = 0
        for k in 64: for i in 8 (unroll): for j in 16 (vectorize):
          C.local[i*16 + j] += A[i.0*512 + i*64 + k] * B[k*64 + j.0*16 + j]
        for i.1 in 8: for j.1 in 16 (vectorize): C[i.0*512 + i.1*64 + j.0*16 + j.1] = C.local[i.1*16 + j.1]
    """
    dag = matmul_dag()
    s = dag.init_state().cache_write("C")
    s = s.split("C", "i", [8]).split("C", "j", [16]).reorder("C", ["i.0", "j.0", "i.1", "j.1"])
    s = s.compute_at("C.local", "C", "j.0")
    s = s.reorder("C.local", ["k", "i", "j"]).unroll("C.local", "i").vectorize("C.local", "j")
    s = s.parallel("C", "i.0").vectorize("C", "j.1")
    return ir.SearchTask(dag, layout_rewrite=False), s


def buffer(row, i):
    """Buffer slot ``i`` of a row as {short name: value}."""
    p = f"B{i}."
    return {k[len(p):]: v for k, v in row.items() if k.startswith(p)}


# layout ------------------------------------------------------------------------------------

def test_layout_is_ansors_164_then_the_targets_registers():
    assert N_FEATURES == 167 and len(set(FEATURE_NAMES)) == 167
    assert FEATURE_NAMES.index("vec_num") == 16 and FEATURE_NAMES.index("is_gpu") == 49
    assert FEATURE_NAMES.index("B0.acc_type.read") == 57 and FEATURE_NAMES.index("ai_curve_0") == 147
    assert FEATURE_NAMES[-10:] == ("alloc_size", "alloc_prod", "alloc_outer_prod", "alloc_inner_prod",
                                   "outer_prod", "num_loops", "auto_unroll_max_step",
                                   "vector_bytes", "vec_registers", "alloc_register_share")
    assert all(len(d) > 10 for _, d in F.FEATURES)  # every feature documented


# the tiled matmul, statement by statement -----------------------------------------------------

def test_tiled_matmul_update_statement():
    task, s = tiled_matmul()
    rows = raw_rows(task, s)
    assert len(rows) == 3                      # init, update, copy
    u = rows[1]
    P = 8 * 4 * 64 * 8 * 16
    assert u["outer_prod"] == P and u["num_loops"] == 5 and u["auto_unroll_max_step"] == 0
    assert u["float_mad"] == P and u["float_addsub"] == 0 and u["float_mul"] == 0
    # index arithmetic: C.local i*16+j (store and load): 1 mad each; A i.0*512+i*64+k: 2 mads;
    # B k*64+j.0*16+j: 2 mads
    assert u["int_mad"] == 6 * P and u["int_addsub"] == 0 and u["int_divmod"] == 0
    # annotations: j vectorised (C.local's inner space axis), i unrolled (outer space axis),
    # i.0 parallel (C.local's region start in the outer space axis)
    assert (u["vec_num"], u["vec_prod"], u["vec_len"], u["vec_type.InnerSpatial"]) == (1, 16, 16, 1)
    assert (u["unroll_num"], u["unroll_prod"], u["unroll_len"], u["unroll_type.OuterSpatial"]) == (1, 8, 8, 1)
    assert (u["parallel_num"], u["parallel_prod"], u["parallel_len"], u["parallel_type.OuterSpatial"]) == (1, 8, 8, 1)
    assert u["is_gpu"] == 0 and u["threadIdx_x_len"] == 0
    # allocation of C.local (8x16 floats) inside i.0, j.0
    assert (u["alloc_size"], u["alloc_prod"], u["alloc_outer_prod"], u["alloc_inner_prod"]) == (512, 128 * 32, 32, P / 32)
    acc, a, b = buffer(u, 0), buffer(u, 1), buffer(u, 2)     # ties on (lines, bytes) broken by name
    assert acc["acc_type.readwrite"] == 1 and a["acc_type.read"] == 1 and b["acc_type.read"] == 1
    # C.local: read and written every iteration; 128 distinct floats; moved by j (stride 1):
    # one 64-byte line per 16 consecutive j; reused across k (64 times) after i, j (128
    # iterations) in which C.local (512 B), A (8 floats) and B (16 floats) are touched
    assert (acc["bytes"], acc["unique_bytes"], acc["lines"], acc["unique_lines"]) == (2 * P * 4, 512, P / 16, 8)
    assert (acc["reuse_type.loop_multiple_read"], acc["reuse_ct"], acc["reuse_dis_iter"], acc["reuse_dis_bytes"]) \
        == (1, 64, 128, 512 + 32 + 64)
    assert acc["stride"] == 1 and acc["bytes_d_reuse_ct"] == 2 * P * 4 / 64 and acc["unique_lines_d_reuse_ct"] == 8 / 64
    # A: all of it (64x64 floats); innermost loop moving it is i (stride 64): a line per access
    assert (a["bytes"], a["unique_bytes"], a["lines"], a["unique_lines"], a["stride"]) == (P * 4, 16384, P / 16, 256, 64)
    assert (a["reuse_type.loop_multiple_read"], a["reuse_ct"], a["reuse_dis_iter"], a["reuse_dis_bytes"]) == (1, 16, 1, 0)
    # B: all of it; moved by j (stride 1); reused across i (8 times) after the 16 j's, which touch
    # C.local (16 floats), A (1) and B (16)
    assert (b["bytes"], b["unique_bytes"], b["lines"], b["unique_lines"], b["stride"]) == (P * 4, 16384, P / 16, 256, 1)
    assert (b["reuse_type.loop_multiple_read"], b["reuse_ct"], b["reuse_dis_iter"], b["reuse_dis_bytes"]) \
        == (1, 8, 16, (16 + 1 + 16) * 4)
    assert buffer(u, 3)["bytes"] == 0 and buffer(u, 3)["acc_type.read"] == 0   # padding slots


@pytest.mark.parametrize("lanes, registers, share", [(16, 1, 0.25), (8, 2, 1.0), (4, 4, 2.0)])
def test_register_features_follow_the_targets_vector_width(lanes, registers, share):
    """The same 8 x 16 accumulator tile: a quarter of AVX-512's register file, all of
    AVX2's (16 ymm), twice SSE's; the rest of the row does not depend on the target."""
    _, s = tiled_matmul()
    task = ir.SearchTask(s.dag, layout_rewrite=False, hardware=ir.HardwareParams(num_cores=2, vector_lanes=lanes))
    rows = raw_rows(task, s)
    u = rows[1]
    assert (u["vector_bytes"], u["vec_registers"], u["alloc_register_share"]) == (4 * lanes, registers, share)
    assert rows[2]["alloc_register_share"] == 0     # the copy to C writes an argument, not a local tile
    wide = raw_rows(ir.SearchTask(s.dag, layout_rewrite=False,
                                  hardware=ir.HardwareParams(num_cores=2, vector_lanes=16)), s)
    for name in FEATURE_NAMES[:F.TARGET_BASE]:
        assert u[name] == wide[1][name], name


def test_one_extractor_keeps_the_rows_of_each_vector_width_apart():
    """The nest cache is shared by every task; a program featurised for AVX-512 and then for
    AVX2 gets each CPU's register columns, not the first one's from the cache."""
    _, s = tiled_matmul()
    ex = FeatureExtractor()
    rows = {lanes: ex._raw(ir.SearchTask(s.dag, layout_rewrite=False,
                                         hardware=ir.HardwareParams(num_cores=2, vector_lanes=lanes)), s)
            for lanes in (16, 8, 16)}
    assert ex.stats["misses"] == 2 and ex.stats["hits"] == 1
    assert feature_dict(rows[16][1])["alloc_register_share"] == 0.25
    assert feature_dict(rows[8][1])["alloc_register_share"] == 1.0


def test_tiled_matmul_arithmetic_intensity_curve():
    task, s = tiled_matmul()
    u = raw_rows(task, s)[1]
    # (log2 flops, flops / bytes) from the innermost level outwards: one execution touches
    # 3 floats; j: 32 flops over C.local 16 + A 1 + B 16 floats; i: 256 / (128+8+16)*4; k:
    # 16384 / (128+512+1024)*4; j.0: 65536 / (128+512+4096)*4; i.0: 524288 / (128+4096+4096)*4
    xs = [1, 5, 8, 14, 16, 19]
    ys = [2 / 12, 32 / 132, 256 / 608, 16384 / 6656, 65536 / 18944, 524288 / 33280]
    assert u["ai_curve_9"] == pytest.approx(ys[-1])
    assert u["ai_curve_0"] == pytest.approx(ys[0] + (ys[1] - ys[0]) * (1.9 - 1) / 4)
    assert u["ai_curve_4"] == pytest.approx(ys[2] + (ys[3] - ys[2]) * (9.5 - xs[2]) / (xs[3] - xs[2]))
    assert xs[-1] == math.log2(524288)


def test_tiled_matmul_init_and_copy_statements():
    task, s = tiled_matmul()
    init, _, copy = raw_rows(task, s)
    P = 8 * 4 * 8 * 16
    assert init["outer_prod"] == P and init["num_loops"] == 4 and init["int_mad"] == P
    assert init["float_mad"] == 0 and all(init[f"ai_curve_{i}"] == 0 for i in range(10))  # no flops
    c = buffer(init, 0)
    assert c["acc_type.write"] == 1 and (c["bytes"], c["unique_bytes"], c["lines"], c["unique_lines"]) == (P * 4, 512, P / 16, 8)
    # re-initialised for every j.0 after 128 iterations of i, j touching C.local once
    assert (c["reuse_type.loop_multiple_read"], c["reuse_ct"], c["reuse_dis_iter"], c["reuse_dis_bytes"]) == (1, 4, 128, 512)
    assert buffer(init, 1)["bytes"] == 0

    assert copy["outer_prod"] == P and copy["int_mad"] == 4 * P      # C index: 3 mads, C.local: 1
    assert copy["unroll_type.None"] == 1 and copy["vec_type.InnerSpatial"] == 1 and copy["parallel_type.OuterSpatial"] == 1
    assert copy["alloc_size"] == 0                                   # C is a kernel argument
    out, local = buffer(copy, 0), buffer(copy, 1)                    # C first: more unique bytes
    assert out["acc_type.write"] == 1 and local["acc_type.read"] == 1
    assert (out["bytes"], out["unique_bytes"], out["lines"], out["unique_lines"]) == (P * 4, 16384, P / 16, 256)
    assert out["reuse_type.no_reuse"] == 1 and out["reuse_ct"] == 0 and out["bytes_d_reuse_ct"] == P * 4 / 0.5
    assert (local["unique_bytes"], local["reuse_ct"], local["reuse_dis_iter"], local["reuse_dis_bytes"]) == (512, 4, 128, 1024)


def test_extract_features_is_slog_float32_and_cached():
    task, s = tiled_matmul()
    ex = FeatureExtractor()
    (m,) = extract_features(task, [s], ex)
    assert m.dtype == np.float32 and m.shape == (3, N_FEATURES)
    np.testing.assert_allclose(m, slog(FeatureExtractor()._raw(task, s)).astype(np.float32))
    assert slog(np.array([-3.0, 0.0, 1.0]))[0] == -2.0
    assert ex.stats["misses"] == 1
    (again,) = extract_features(task, [s], ex)
    assert ex.stats["hits"] == 1 and np.array_equal(m, again)


# memory access patterns ------------------------------------------------------------------------

def test_transposed_read_has_a_line_per_access():
    A = ir.placeholder((32, 32), name="A")
    B = ir.compute((32, 32), lambda i, j: A[j, i] + 1.0, name="B")
    dag = ir.ComputeDAG([A, B])
    (row,) = raw_rows(ir.SearchTask(dag, layout_rewrite=False), dag.init_state())
    assert row["float_addsub"] == 1024
    a = buffer(row, 0)   # A: 1024 lines (stride 32 floats = 128 B), B: 1024 / 16
    assert a["acc_type.read"] == 1 and a["stride"] == 32 and a["lines"] == 1024 and a["unique_lines"] == 64
    b = buffer(row, 1)
    assert b["acc_type.write"] == 1 and b["stride"] == 1 and b["lines"] == 64 and b["reuse_type.no_reuse"] == 1


def test_naive_matmul_reuse_and_layout_rewrite_stride():
    dag = matmul_dag(16, 16, 16, b_constant=True)
    s = dag.init_state()
    row = raw_rows(ir.SearchTask(dag, layout_rewrite=False), s)[1]
    bufs = {buffer(row, i)["stride"]: buffer(row, i) for i in range(3)}
    # loops i, j, k: A[i, k] (stride 1 along k) is reused across j (16 times) after k's 16
    # iterations; B[k, j] has stride 16 along k and is reused across i
    a = next(b for b in (buffer(row, i) for i in range(3)) if b["acc_type.read"] and b["stride"] == 1)
    assert (a["reuse_type.loop_multiple_read"], a["reuse_ct"], a["reuse_dis_iter"]) == (1, 16, 16)
    assert bufs[16]["reuse_ct"] == 16 and bufs[16]["reuse_dis_iter"] == 16 * 16
    # C[i, j] (stride 1 along j, the innermost loop that moves it); with layout rewrite, B is
    # packed in the order the loops read it: stride 1 along k
    assert sorted(buffer(row, i)["stride"] for i in range(3)) == [1, 1, 16]
    row2 = raw_rows(ir.SearchTask(dag, layout_rewrite=True), s)[1]
    assert sorted(buffer(row2, i)["stride"] for i in range(3)) == [1, 1, 1]


def test_conv_window_footprint_and_padding_select():
    # 3x3 conv over a 6x6x2 input padded by 1 (pad inlined), 2 output channels, loops n h w co rh rw rc
    data = ir.placeholder((1, 6, 6, 2), name="data")
    weight = ir.placeholder((3, 3, 2, 2), name="weight")
    pad = ir.compute((1, 8, 8, 2), lambda n, h, w, c: ir.select(
        (h >= 1) & (h < 7) & (w >= 1) & (w < 7), data[n, h - 1, w - 1, c], 0.0), name="pad")
    rh, rw, rc = ir.reduce_axis(3, "rh"), ir.reduce_axis(3, "rw"), ir.reduce_axis(2, "rc")
    out = ir.compute((1, 6, 6, 2), lambda n, h, w, co: ir.sum(pad[n, h + rh, w + rw, rc] * weight[rh, rw, rc, co],
                                                              axis=[rh, rw, rc]), name="conv")
    dag = ir.ComputeDAG([data, weight, out])
    s = dag.init_state().compute_inline("pad")
    init, update = raw_rows(ir.SearchTask(dag, layout_rewrite=False), s)
    P = 6 * 6 * 2 * 18
    assert update["outer_prod"] == P and update["float_mad"] == P and update["select_op"] == P
    assert update["bool_op"] == 3 * P and update["int_cmp"] == 4 * P
    bufs = [buffer(update, i) for i in range(3)]
    out = next(b for b in bufs if b["acc_type.readwrite"])
    d, w = sorted((b for b in bufs if b["acc_type.read"]), key=lambda b: b["unique_bytes"], reverse=True)
    # the output is reused across rc, the innermost loop (2), right away (distance 1 iteration)
    assert (out["unique_bytes"], out["reuse_ct"], out["reuse_dis_iter"], out["reuse_dis_bytes"]) == (288, 2, 1, 0)
    assert d["unique_bytes"] == 6 * 6 * 2 * 4    # all of data, though the window index runs over 8 rows
    assert d["stride"] == 1
    # data is reused across co (2 output channels) after rh, rw, rc (18 iterations) touch a
    # 3x3x2 window of data, the 3x3x2 weights of one co and one output element
    assert (d["reuse_type.loop_multiple_read"], d["reuse_ct"], d["reuse_dis_iter"]) == (1, 2, 18)
    assert d["reuse_dis_bytes"] == (18 + 18 + 1) * 4
    assert w["unique_bytes"] == 3 * 3 * 2 * 2 * 4
    assert w["reuse_ct"] == 6 and w["reuse_dis_iter"] == 36   # reused across w after co, rh, rw, rc


def test_fused_parallel_loop_digits():
    A = ir.placeholder((64, 32), name="A")
    B = ir.compute((64, 32), lambda i, j: A[i, j] * 2.0, name="B")
    dag = ir.ComputeDAG([A, B])
    s = dag.init_state().split("B", "j", [8]).fuse("B", ["i", "j.0"]).parallel("B", "i@j.0@").vectorize("B", "j.1")
    (row,) = raw_rows(ir.SearchTask(dag, layout_rewrite=False), s)
    # i@j.0@ (256) walks A as (f // 4) * 32 + (f % 4) * 8 + j.1: all of A in 128 lines; lines
    # fetched: one per run of the 8 floats of j.1 (half a line), 256 runs
    assert row["int_divmod"] == 2 * 2 * 256 * 8 and row["parallel_type.Mixed"] == 1 and row["float_mul"] == 2048
    for i in range(2):
        b = buffer(row, i)
        assert (b["unique_bytes"], b["unique_lines"], b["lines"], b["stride"]) == (8192, 128, 256, 1)


def test_auto_unroll_pragma_and_reduce_positions():
    dag = matmul_dag(16, 16, 16)
    s = dag.init_state().split("C", "k", [4]).unroll("C", "k.1").pragma_auto_unroll("C", 64)
    init, update = raw_rows(ir.SearchTask(dag, layout_rewrite=False), s)
    assert update["auto_unroll_max_step"] == 64 and init["auto_unroll_max_step"] == 64
    assert update["unroll_type.InnerReduce"] == 1 and update["unroll_len"] == 4
    # the code generator also unrolls k.0, whose nest has 4 x 4 <= 64 iterations, not j (16 x 16)
    assert update["unroll_num"] == 2 and update["unroll_prod"] == 16
    s2 = dag.init_state().vectorize("C", "k")
    (_, u2) = raw_rows(ir.SearchTask(dag, layout_rewrite=False), s2)
    assert u2["vec_type.InnerReduce"] == 1


def test_program_that_cannot_lower_gives_an_empty_matrix():
    dag = matmul_dag(2048, 2048, 8)
    s = dag.init_state().cache_write("C").split("C", "i", [2048]).compute_at("C.local", "C", "i.0")
    ex = FeatureExtractor()
    (m,) = extract_features(ir.SearchTask(dag), [s], ex)
    assert m.shape == (0, N_FEATURES) and ex.stats["errors"] == 1


def test_fast_path_matches_full_lowering_on_sampled_programs():
    """Skipping the lowering's final simplification changes no feature."""
    sketch_rules = pytest.importorskip("sketch_rules")
    from autosched import ops
    for name in ("GMM-1x64x64x64", "C2D-1x8x8x16x16-k3s1p1"):
        w = ops.suite_workload(name)
        task = ir.SearchTask(ir.ComputeDAG(w.tensors))
        states = sketch_rules.sample_programs(task, sketch_rules.generate_sketches(task), 12,
                                              np.random.default_rng(0))
        fast = extract_features(task, states, FeatureExtractor())
        full = extract_features(task, states, FeatureExtractor(simplify=True))
        assert len(states) >= 8
        for a, b in zip(fast, full):
            assert a.shape == b.shape and a.shape[0] > 0
            np.testing.assert_array_equal(a, b)


def test_states_sharing_stages_reuse_cached_nests():
    # two root nests (B then C); changing C's loops re-extracts only C's nest
    A = ir.placeholder((64,), name="A")
    B = ir.compute((64,), lambda i: A[i] + 1.0, name="B")
    C = ir.compute((64,), lambda i: B[i] * 2.0, name="C")
    dag = ir.ComputeDAG([A, C])
    task = ir.SearchTask(dag, layout_rewrite=False)
    s1 = dag.init_state().split("C", "i", [8])
    s2 = s1.vectorize("C", "i.1")
    ex = FeatureExtractor()
    m1, m2 = extract_features(task, [s1, s2], ex)
    assert ex.stats == {"hits": 1, "misses": 3, "errors": 0}
    np.testing.assert_array_equal(m1[0], m2[0])
    assert m2[1][FEATURE_NAMES.index("vec_len")] == pytest.approx(slog(8))


def test_guards_bound_the_work_of_oversized_tiles():
    """C.local is computed per 4-row tile of C and split into 3 parts (lengths that do not
    divide the region): its loops i.0 (3) x i.1 (2) run 6 rows, guarded by
    i.0*2 + i.1 < 4. The work and the memory features count the 4 rows that execute."""
    dag = matmul_dag(16, 16, 16)
    s = dag.init_state().cache_write("C").split("C", "i", [4]).compute_at("C.local", "C", "i.0")
    s = s.split("C.local", "i", [3], inner_to_outer=False).reorder("C.local", ["k", "i.0", "i.1", "j"])
    init, update, copy = raw_rows(ir.SearchTask(dag, layout_rewrite=False), s)
    # loops i.0 (C, 4) k (16) i.0 (3) i.1 (2) j (16): 6144 iterations, 4096 of them do work
    assert update["outer_prod"] == 4 * 16 * 3 * 2 * 16 and update["float_mad"] == 4 * 16 * 4 * 16
    # the guard itself is evaluated every iteration: one compare, one multiply-add
    assert update["int_cmp"] == update["outer_prod"]
    acc = next(buffer(update, i) for i in range(3) if buffer(update, i)["acc_type.readwrite"])
    assert acc["unique_bytes"] == 4 * 16 * 4 and acc["bytes"] == 2 * 4096 * 4
    a = next(buffer(update, i) for i in range(3) if buffer(update, i)["stride"] == 16)
    assert a["unique_bytes"] == 16 * 16 * 4        # all of A: 4 tiles of 4 rows
    # A is reused across j (16) right away; then i.2 moves it
    assert (a["reuse_ct"], a["reuse_dis_iter"]) == (16, 1)
