"""Shapes and extents computed with numpy (np.int64, np.int32, np.uint8...) work like ints
in ir.placeholder, ir.compute and ir.reduce_axis; other values are still refused."""
import numpy as np
import pytest

import ir


def test_numpy_integer_shapes_build_and_run():
    n, m = np.int64(6), np.int32(5)
    A = ir.placeholder((n, m), name="A")
    k = ir.reduce_axis(np.uint8(5), "k")
    window = ir.reduce_axis((np.int64(1), np.int16(4)), "w")
    S = ir.compute(np.array([6])[0], lambda i: ir.sum(A[i, k], axis=k), name="S")
    W = ir.compute((n,), lambda i: ir.sum(A[i, window], axis=window), name="W")
    dag = ir.ComputeDAG([A, S, W])
    assert A.shape == (6, 5) and all(type(d) is int for d in A.shape + S.shape)
    assert (type(k.extent), window.lo, window.extent) == (int, 1, 3)
    a = np.random.default_rng(0).random((6, 5)).astype("float32")
    s, w = np.zeros(6, "float32"), np.zeros(6, "float32")
    ir.build(dag)(a, s, w)
    np.testing.assert_allclose(s, a.sum(1), rtol=1e-5)
    np.testing.assert_allclose(w, a[:, 1:4].sum(1), rtol=1e-5)


@pytest.mark.parametrize("shape", [(np.float64(3.0),), (True,), (np.bool_(True),), (np.int64(0),), (np.array([2, 3]),)])
def test_other_shapes_are_still_refused(shape):
    with pytest.raises(ValueError, match="shape must be a tuple of positive ints"):
        ir.placeholder(shape, name="X")


def test_numpy_extents_of_reduce_axes_are_checked():
    with pytest.raises(ValueError, match="reduce_axis 'k'"):
        ir.reduce_axis(np.int64(0), "k")
    with pytest.raises(ValueError, match="reduce_axis 'k'"):
        ir.reduce_axis(np.float32(3), "k")
