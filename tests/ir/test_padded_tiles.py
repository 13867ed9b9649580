"""Local tiles that run past their region (``ir.lower``'s ``pad_local_tiles``): a register
tile of 16 lanes over 40 columns computes its last 8 lanes unmasked into its own rows and
only the copy out is guarded, where no read can leave its tensor and no padded lane can be
summed into or land on a real one; elsewhere the guard stays. Every case computes what
numpy does."""
import numpy as np
import pytest

import ir
from ir.loop_ir import For, IfThenElse, Store, children


def matmul(constant_b: bool, n=8, m=40, k=24):
    A = ir.placeholder((n, k), name="A")
    B = ir.placeholder((k, m), name="B", constant=constant_b)
    r = ir.reduce_axis(k, name="k")
    C = ir.compute((n, m), lambda i, j: ir.sum(A[i, r] * B[r, j], axis=r), name="C")
    return ir.ComputeDAG([A, B, C])


def tiled(dag, j_lanes=16, k_tile=None):
    """C.local (4 rows x ``j_lanes`` columns) computed per tile of C; ``k_tile``: the
    reduction split by a length that need not divide it."""
    s = dag.init_state().cache_write("C")
    s = s.split("C", "i", [4]).split("C", "j", [j_lanes]).reorder("C", ["i.0", "j.0", "i.1", "j.1"])
    s = s.compute_at("C.local", "C", "j.0")
    if k_tile:
        s = s.split("C.local", "k", [k_tile]).reorder("C.local", ["k.0", "k.1", "i", "j"])
    else:
        s = s.reorder("C.local", ["k", "i", "j"])
    return s.unroll("C.local", "i").vectorize("C.local", "j")


def local_updates_guarded(kernel_body) -> bool:
    todo = [kernel_body]
    while todo:
        s = todo.pop()
        if isinstance(s, IfThenElse) and any(isinstance(x, Store) and x.buffer.scope == "local"
                                             for x in _stores(s.then)):
            return True
        todo.extend(children(s))
    return False


def _stores(s):
    todo = [s]
    while todo:
        x = todo.pop()
        if isinstance(x, Store):
            yield x
        todo.extend(children(x))


def run(dag, state, layout_rewrite: bool):
    kernel = ir.build(dag, state, layout_rewrite=layout_rewrite)
    rng = np.random.default_rng(0)
    a = rng.standard_normal(dag.inputs[0].shape).astype(np.float32)
    b = rng.standard_normal(dag.inputs[1].shape).astype(np.float32)
    c = np.zeros(dag.outputs[0].shape, np.float32)
    kernel(a, kernel.pack("B", b) if "B" in kernel.layouts else b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


def test_a_padded_tile_over_packed_weights_drops_its_guard():
    dag = matmul(constant_b=True)
    s = tiled(dag)
    assert not local_updates_guarded(ir.lower(s, layout_rewrite=True).body)
    run(dag, s, layout_rewrite=True)


@pytest.mark.parametrize("constant_b, layout_rewrite", [(False, False), (True, False)])
def test_the_guard_stays_where_the_last_tile_would_read_past_the_weights(constant_b, layout_rewrite):
    """Unpacked, column 40..47 of row 23 is past the end of B."""
    dag = matmul(constant_b)
    s = tiled(dag)
    assert local_updates_guarded(ir.lower(s, layout_rewrite=layout_rewrite).body)
    run(dag, s, layout_rewrite)


def test_the_guard_of_a_split_reduction_stays():
    """24 = 16 + 8: a padded step of the reduction would add garbage to real sums."""
    dag = matmul(constant_b=True, m=32)
    s = tiled(dag, j_lanes=16, k_tile=16)
    assert local_updates_guarded(ir.lower(s, layout_rewrite=True).body)
    run(dag, s, layout_rewrite=True)


def test_a_tile_attached_above_its_padded_loops_gets_wider_rows():
    """C.local over a whole row block of 40 columns, looping over 48: its rows are 48 wide,
    so that column 40..47 of one row is not column 0..7 of the next."""
    dag = matmul(constant_b=True)
    s = dag.init_state().cache_write("C")
    s = s.split("C", "i", [4]).reorder("C", ["i.0", "i.1", "j"]).compute_at("C.local", "C", "i.0")
    s = s.split("C.local", "j", [16]).reorder("C.local", ["j.0", "k", "i", "j.1"]).vectorize("C.local", "j.1")
    f = ir.lower(s, layout_rewrite=True)
    local = next(x.buffer for x in _stores(f.body) if x.buffer.scope == "local")
    assert local.shape == (4, 48)
    assert not local_updates_guarded(f.body)
    run(dag, s, layout_rewrite=True)
