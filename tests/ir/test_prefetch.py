"""Software prefetch (``ir.cpu.prefetch``): which loops get hints, what they point at, and
that a kernel with them computes what the DAG says."""
import numpy as np

import ir
from autosched import ops
from ir.cpu.prefetch import LINE_BYTES, add_prefetches
from ir.loop_ir import For, Prefetch, children
from ir.lower import lower


def dense_program(rows: int, depth: int = 768, cols: int = 768, col_tile: int = 64, k_tile: int = 4):
    """x (rows, depth) · Wᵀ as ViT's QKV layer's pick runs it: parallel over column tiles,
    the reduction's outer loop outside the rows, each packed weight block of
    ``k_tile`` x ``col_tile`` reused by every row (the weights: 2.25 MiB by default)."""
    w = ops.workload("dense", rows, depth, cols)
    dag = ir.ComputeDAG(w.tensors)
    state = dag.init_state()
    s = len(state.stages) - 1
    state = state.split(s, 1, [col_tile])           # i, j.0, j.1, k
    state = state.split(s, 3, [k_tile])             # i, j.0, j.1, k.0, k.1
    names = [it.name for it in state.stages[s].iters]
    i, j0, j1, k0, k1 = names
    state = state.reorder(s, [j0, k0, i, k1, j1])
    state = state.parallel(s, j0)
    state = state.vectorize(s, j1)
    return w, dag, state


def prefetches_by_loop(stmt, loop=None, out=None) -> dict:
    """{loop variable's name: [Prefetch]} of the hints at the top of each loop's body."""
    out = {} if out is None else out
    if isinstance(stmt, Prefetch):
        out.setdefault(loop, []).append(stmt)
    for child in children(stmt):
        prefetches_by_loop(child, stmt.var.name if isinstance(stmt, For) else loop, out)
    return out


def test_a_block_reused_by_every_row_is_prefetched_one_iteration_ahead():
    w, dag, state = dense_program(rows=197)
    func = lower(state, "k", True)
    hinted = add_prefetches(func)
    found = prefetches_by_loop(hinted.body)
    assert list(found) == ["k.0"], found               # the reduction's outer loop only
    weight = next(b for b in func.args if b.name == "weight")
    assert {p.buffer for p in found["k.0"]} == {weight}  # the rows' input walks at a stride: not hinted
    block_lines = 4 * 64 * 4 // LINE_BYTES
    assert len(found["k.0"]) == block_lines + 1         # the block, one more line for its alignment
    # the first hint points at the next iteration's block: k.0 = 0 reads 0..255 of tile j.0 = 0
    k0 = next(v for v in ir.expr.free_vars(found["k.0"][0].index) if v.name == "k.0")
    j0 = next(v for v in ir.expr.free_vars(found["k.0"][0].index) if v.name != "k.0")
    first = ir.index_check.evaluate_at(found["k.0"][0].index, {j0: np.array([0]), k0: np.array([0])})
    assert int(np.asarray(first).ravel()[0]) == 256


def test_no_hint_for_a_dense_stream_a_block_nothing_reuses_or_weights_the_caches_hold():
    _, _, few_rows = dense_program(rows=2)           # 2 rows: a new line every few operations
    assert prefetches_by_loop(add_prefetches(lower(few_rows, "k", True)).body) == {}
    _, _, one_row = dense_program(rows=1)            # no loop reuses the block
    assert prefetches_by_loop(add_prefetches(lower(one_row, "k", True)).body) == {}
    _, _, small = dense_program(rows=197, depth=256, cols=128)   # 128 KiB of weights
    assert prefetches_by_loop(add_prefetches(lower(small, "k", True)).body) == {}


def test_a_kernel_with_prefetches_computes_the_dense_layer():
    w, dag, state = dense_program(rows=197)
    kernel = ir.build(dag, state, layout_rewrite=True)
    assert "@llvm.prefetch" in kernel.llvm_ir      # the hints reach the code, past the last block too
    rng = np.random.default_rng(0)
    x = rng.standard_normal((197, 768)).astype(np.float32)
    weight = rng.standard_normal((768, 768)).astype(np.float32)
    out = np.empty((197, 768), np.float32)
    kernel(x, kernel.pack("weight", weight), out)
    np.testing.assert_allclose(out, x @ weight.T, rtol=1e-4, atol=1e-3)
