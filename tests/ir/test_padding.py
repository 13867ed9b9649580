"""Padding taps skipped (``ir.padding``): the branches it places, the taps the code
generator drops under unrolled loops, and the results, against numpy."""
import numpy as np

import ir
from ir import expr as E
from ir.cpu.codegen import generate
from ir.loop_ir import Buffer, For, IfThenElse, Load, Store
from ir.padding import identity_select
from ir.lower import Lowering
from ir.simplify import simplify

RNG = np.random.default_rng(0)


def conv2d(h=7, w=7, c=32, k=16):
    """NHWC 3x3 convolution, pad 1, over a padding stage P."""
    A = ir.placeholder((1, h, w, c), name="A")
    W = ir.placeholder((3, 3, c, k), name="W", constant=True)
    P = ir.compute((1, h + 2, w + 2, c), lambda n, y, x, ci: ir.select(
        (y >= 1) & (y <= h) & (x >= 1) & (x <= w), A[n, y - 1, x - 1, ci], 0.0), name="P")
    ry, rx, rc = ir.reduce_axis(3, "ry"), ir.reduce_axis(3, "rx"), ir.reduce_axis(c, "rc")
    C = ir.compute((1, h, w, k), lambda n, y, x, co: ir.sum(P[n, y + ry, x + rx, rc] * W[ry, rx, rc, co],
                                                          axis=[ry, rx, rc]), name="C")
    return ir.ComputeDAG([A, W, C])


def conv2d_reference(a, wt):
    p = np.pad(a, ((0, 0), (1, 1), (1, 1), (0, 0)))
    h, w = a.shape[1:3]
    out = np.zeros((1, h, w, wt.shape[3]), np.float64)
    for dy in range(3):
        for dx in range(3):
            out += np.einsum("nyxc,ck->nyxk", p[:, dy:dy + h, dx:dx + w], wt[dy, dx])
    return out


def run(dag, state, *inputs):
    kernel = ir.build(dag, state)
    out = np.zeros(dag.outputs[0].shape, np.float32)
    kernel(*inputs, out)
    return out


def update_path(stmt, path=(), buffer="C"):
    """The (loop names and guards) on the way to the reduction update of ``buffer``."""
    if isinstance(stmt, Store):
        return path + (stmt,) if stmt.buffer.name == buffer and isinstance(stmt.value, E.Binary) else None
    if isinstance(stmt, For):
        return update_path(stmt.body, path + (stmt.name,), buffer)
    if isinstance(stmt, IfThenElse):
        return update_path(stmt.then, path + (stmt,), buffer)
    for child in getattr(stmt, "stmts", ()) or ((stmt.body,) if hasattr(stmt, "body") else ()):
        found = update_path(child, path, buffer)
        if found:
            return found
    return None


def test_padding_conditions_become_branches_around_the_blocks_they_decide():
    dag = conv2d()
    s = dag.init_state().compute_inline("P").reorder("C", ["n", "y", "x", "ry", "rx", "co", "rc"])
    path = update_path(ir.lower(s).body)
    names = [p if isinstance(p, str) else type(p).__name__ for p in path]
    # the row condition is decided once ry is known, the column one once rx is: each is a
    # branch around everything inside (16 x 32 multiply-adds and more), not a select
    assert names == ["n", "y", "x", "ry", "IfThenElse", "rx", "IfThenElse", "co", "rc", "Store"]
    row, col, store = path[4], path[6], path[-1]
    assert {v.name for v in E.free_vars(row.cond)} == {"y", "ry"}
    assert {v.name for v in E.free_vars(col.cond)} == {"x", "rx"}
    assert not any(isinstance(n, E.Select) for n in E.walk(store.value))
    a = RNG.standard_normal((1, 7, 7, 32)).astype("float32")
    wt = RNG.standard_normal((3, 3, 32, 16)).astype("float32")
    np.testing.assert_allclose(run(dag, s, a, wt), conv2d_reference(a, wt), rtol=1e-4, atol=1e-4)


def test_conditions_of_small_blocks_stay_selects_and_results_hold():
    """In the naive order the reduction's inner blocks are 96 multiply-adds: a branch there
    would cost more than the select, so the select stays."""
    dag = conv2d()
    s = dag.init_state().compute_inline("P")
    path = update_path(ir.lower(s).body)
    assert not any(isinstance(p, IfThenElse) for p in path)
    assert any(isinstance(n, E.Select) for n in E.walk(path[-1].value))
    a = RNG.standard_normal((1, 7, 7, 32)).astype("float32")
    wt = RNG.standard_normal((3, 3, 32, 16)).astype("float32")
    np.testing.assert_allclose(run(dag, s, a, wt), conv2d_reference(a, wt), rtol=1e-4, atol=1e-4)


def conv1d(n=8):
    A = ir.placeholder((n,), name="A")
    W = ir.placeholder((3,), name="W")
    P = ir.compute((n + 2,), lambda i: ir.select((i >= 1) & (i <= n), A[i - 1], 0.0), name="P")
    r = ir.reduce_axis(3, "r")
    C = ir.compute((n,), lambda i: ir.sum(P[i + r] * W[r], axis=r), name="C")
    return ir.ComputeDAG([A, W, C])


def test_unrolled_padding_taps_are_not_generated():
    """8 outputs of 3 taps, fully unrolled: the 2 taps on padding are not multiplied."""
    dag = conv1d()
    s = dag.init_state().compute_inline("P").unroll("C", "i").unroll("C", "r")
    text = generate(ir.lower(s), "k")
    assert text.count(" fmul ") + text.count("@llvm.fma") + text.count("@llvm.fmuladd") == 8 * 3 - 2
    a, w = RNG.standard_normal(8).astype("float32"), RNG.standard_normal(3).astype("float32")
    np.testing.assert_allclose(run(dag, s, a, w), np.convolve(np.pad(a, 1), w[::-1], "valid"), rtol=1e-5)


def test_max_pooling_over_minus_infinity_padding():
    """A max reduction's identity is -inf: its padding taps are skipped the same way."""
    n = 10
    A = ir.placeholder((n,), name="A")
    P = ir.compute((n + 2,), lambda i: ir.select((i >= 1) & (i <= n), A[i - 1], -np.inf), name="P")
    r = ir.reduce_axis(3, "r")
    C = ir.compute((n,), lambda i: ir.max(P[i + r], axis=r), name="C")
    dag = ir.ComputeDAG([A, C])
    s = dag.init_state().compute_inline("P").unroll("C", "r")
    a = RNG.standard_normal(n).astype("float32")
    want = np.max(np.stack([np.pad(a, 1, constant_values=-np.inf)[j:j + n] for j in range(3)]), axis=0)
    np.testing.assert_array_equal(run(dag, s, a), want)


def test_a_loop_whose_rows_all_see_the_image_is_cut_from_its_edge_rows():
    """Rows are an outer loop, kernel rows the innermost: the row condition is decided
    only per multiply-add, but for rows 1..5 it holds for every kernel row. The row loop
    is cut into rows 0, 1..5 and 6: the middle piece has no select, the edge pieces
    (one row each, a known row) keep it."""
    dag = conv2d(c=16, k=32)
    s = dag.init_state().compute_inline("P").reorder("C", ["n", "x", "rx", "rc", "y", "co", "ry"])
    path = update_path(ir.lower(s).body)
    names = [p if isinstance(p, str) else type(p).__name__ for p in path]
    assert names[:5] == ["n", "x", "rx", "IfThenElse", "rc"]
    rc_loop = path[3].then
    pieces = rc_loop.body.stmts
    assert [(p.name, p.extent) for p in pieces] == [("y", 1), ("y", 5), ("y", 1)]
    selects = [any(isinstance(n, E.Select) for n in E.walk(update_path(p)[-1].value)) for p in pieces]
    assert selects == [True, False, True]
    a = RNG.standard_normal((1, 7, 7, 16)).astype("float32")
    wt = RNG.standard_normal((3, 3, 16, 32)).astype("float32")
    np.testing.assert_allclose(run(dag, s, a, wt), conv2d_reference(a, wt), rtol=1e-4, atol=1e-4)


def test_a_condition_of_inner_loops_and_an_outer_tile_is_unswitched_per_row():
    """The same rows inside a tile of 4 (y.0 outside the reduction nest): which rows see
    the whole kernel depends on the tile, so a branch per row runs the block without the
    select where they do."""
    dag = conv2d(h=8, c=16, k=32)
    s = dag.init_state().compute_inline("P").cache_write("C", "local").split("C", "y", [4])
    s = s.compute_at("C.local", "C", "y.0").reorder("C.local", ["n", "x", "rx", "rc", "y", "co", "ry"])
    path = update_path(ir.lower(s).body, buffer="C.local")
    names = [p if isinstance(p, str) else type(p).__name__ for p in path]
    assert names[-6:] == ["rc", "y", "IfThenElse", "co", "ry", "Store"]
    unswitch = path[-4]
    assert {v.name for v in E.free_vars(unswitch.cond)} == {"y.0", "y"}
    tile, row = sorted(E.free_vars(unswitch.cond), key=lambda v: v.name != "y.0")
    holds = [[simplify(E.substitute(unswitch.cond, {tile: E.Const(t, tile.dtype), row: E.Const(r, row.dtype)})).value
              for r in range(4)] for t in range(2)]
    assert holds == [[False, True, True, True], [True, True, True, False]]
    assert not any(isinstance(n, E.Select) for n in E.walk(path[-1].value))
    assert any(isinstance(n, E.Select) for n in E.walk(update_path(unswitch.otherwise, buffer="C.local")[-1].value))
    a = RNG.standard_normal((1, 8, 7, 16)).astype("float32")
    wt = RNG.standard_normal((3, 3, 16, 32)).astype("float32")
    np.testing.assert_allclose(run(dag, s, a, wt), conv2d_reference(a, wt), rtol=1e-4, atol=1e-4)


def test_the_cost_model_reads_a_cut_loop_as_one_branch():
    """Features describe the schedule: the pieces of a cut loop would read as three small
    statements, so the features' lowering keeps the branch (init, then, else: 3 rows)."""
    from evolution.features import program_features
    dag = conv2d(c=16, k=32)
    s = dag.init_state().compute_inline("P").reorder("C", ["n", "x", "rx", "rc", "y", "co", "ry"])
    uncut = Lowering(s)
    uncut.cut_padding_loops = False
    path = update_path(uncut.run("k").body)
    assert [p if isinstance(p, str) else type(p).__name__ for p in path][4:8] == ["rc", "y", "IfThenElse", "co"]
    assert program_features(ir.SearchTask(dag), s).shape[0] == 3


def test_a_condition_that_reads_memory_stays_in_the_select():
    """``select(A[i] > 0, B[i, r], 0)`` summed over 512 r: the condition is decided per
    row, but it reads A, and a branch outside the update's guards could read A where no
    row is; it stays in the select, and the sum is numpy's."""
    A = ir.placeholder((6,), name="A")
    B = ir.placeholder((6, 512), name="B")
    r = ir.reduce_axis(512, "r")
    C = ir.compute((6,), lambda i: ir.sum(ir.select(A[i] > 0.0, B[i, r], 0.0), axis=r), name="C")
    dag = ir.ComputeDAG([A, B, C])
    s = dag.init_state()
    path = update_path(ir.lower(s).body)
    assert not any(isinstance(p, IfThenElse) for p in path)
    assert any(isinstance(n, E.Select) for n in E.walk(path[-1].value))
    a, b = RNG.standard_normal(6).astype("float32"), RNG.standard_normal((6, 512)).astype("float32")
    np.testing.assert_allclose(run(dag, s, a, b), np.where(a[:, None] > 0, b, 0).sum(axis=1), rtol=1e-4, atol=1e-4)


def test_only_an_accumulation_into_the_stored_element_is_an_update_to_skip():
    """``acc[i] = acc[i] + select(c, x, 0)`` may skip its term where c fails; a store
    ``b[i] = b[i - 1] + select(...)`` may not (it would leave b[i] unwritten)."""
    i = E.Var("i")
    buf, x = Buffer("b", "float32", (8,), "local"), Buffer("x", "float32", (8,), "arg")
    term = E.Select(E.Compare(">=", i, E.Const(1, i.dtype)), Load(x, i), E.Const(0.0, "float32"))
    same = Store(buf, i, E.Binary("+", Load(buf, i), term))
    shifted = Store(buf, i, E.Binary("+", Load(buf, E.Binary("-", i, E.Const(1, i.dtype))), term))
    assert identity_select(same.value, same)[0] is term
    assert identity_select(shifted.value, shifted) is None
