"""Vector reads whose lanes fall within one or two windows of a vector's width, at offsets
known when the kernel is built, are loads and a shuffle, not gathers
(``ir.llvm_codegen.window_offsets``); more windows still gather. Every case computes what
numpy does."""
import numpy as np
import pytest

import ir

CHANNELS = 128


def channel_permutation(source):
    """out[..., c] = x[..., source(c)], vectorised over 16 channels."""
    x = ir.placeholder((1, 4, 4, CHANNELS), "float32", name="x")
    y = ir.compute((1, 4, 4, CHANNELS), lambda n, h, w, c: x[n, h, w, source(c)], name="permuted")
    dag = ir.ComputeDAG([x, y])
    state = dag.init_state().split(1, "c", [16]).vectorize(1, "c.1")
    return ir.build(dag, state)


@pytest.mark.parametrize("source, picked, gathers", [
    (lambda c: (c % 2) * 64 + c // 2, lambda c: (c % 2) * 64 + c // 2, False),      # a channel shuffle: two windows
    (lambda c: (c // 4) * 4, lambda c: (c // 4) * 4, False),                         # one window, lanes repeated
    (lambda c: (c % 2) * 100 + (c // 16), lambda c: (c % 2) * 100 + (c // 16), False),  # two windows of one element
    (lambda c: (c % 4) * 32 + c // 4, lambda c: (c % 4) * 32 + c // 4, True),        # four windows: a gather
])
def test_lanes_in_at_most_two_windows_load_them_whole(source, picked, gathers):
    kernel = channel_permutation(source)
    assert ("masked.gather" in kernel.llvm_ir) is gathers
    assert gathers or "shufflevector" in kernel.llvm_ir
    x = np.random.default_rng(0).standard_normal((1, 4, 4, CHANNELS)).astype(np.float32)
    out = np.zeros_like(x)
    kernel(x, out)
    np.testing.assert_array_equal(out, x[..., [picked(c) for c in range(CHANNELS)]])
