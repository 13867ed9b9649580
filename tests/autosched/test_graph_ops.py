"""Every operator kind of the graph IR that the ONNX importer added, as a one-node graph:
compiled with its default schedule by the executor and checked against its numpy reference
(its node kind in ``ops.registry``), including the padding, ceil-mode and count-include-pad
variants of the window ops."""
import numpy as np
import pytest

from autosched import graph as G
from autosched.ops import reference as R


def _run_one(kind, shapes, attrs, consts=(), int_input=None, seed=0):
    """A graph of one ``kind`` node over inputs of ``shapes`` (indices in ``consts`` are constants)."""
    b = G.GraphBuilder("one", seed=seed)
    nodes = []
    for k, shape in enumerate(shapes):
        if k in consts:
            nodes.append(b.const(shape, G.normal(1.0), f"c{k}"))
        elif int_input is not None and k == int_input[0]:
            nodes.append(b.input(shape, f"x{k}", dtype="int64", high=int_input[1]))
        else:
            nodes.append(b.input(shape, f"x{k}"))
    graph = b.graph([b.op(kind, nodes, **attrs)])
    ex = G.GraphExecutor(G.partition(graph), warn_untuned=False)
    inputs = graph.random_inputs(seed)
    if kind in ("sqrt", "power", "power_scalar", "lrn", "scalar"):      # positive bases for fractional powers
        inputs = [np.abs(x) + 0.1 if x.dtype == np.float32 else x for x in inputs]
    ok, err = ex.verify(*inputs, rtol=2e-5)
    assert ok, f"{kind} {attrs}: max relative error {err:.2e}"
    return ex.run(*inputs)[0]


CASES = [
    ("leaky_relu", [(2, 5, 7)], {"alpha": 0.1}),
    ("clip", [(3, 33)], {"min": -0.5, "max": 0.7}),
    ("clip", [(3, 33)], {"min": 0.0}),
    ("hard_sigmoid", [(4, 17)], {"alpha": 0.3, "beta": 0.4}),
    ("hard_swish", [(4, 17)], {}),
    ("gelu_tanh", [(4, 48)], {}),
    ("erf", [(4, 48)], {}),
    ("sqrt", [(5, 16)], {}),
    ("reciprocal", [(5, 16)], {}),
    ("power_scalar", [(5, 16)], {"exponent": 2.0}),
    ("power_scalar", [(5, 16)], {"exponent": 0.75}),
    ("subtract", [(2, 3, 8), (3, 1)], {}),
    ("divide", [(2, 3, 8), (8,)], {}),
    ("power", [(2, 8), (2, 8)], {}),
    ("scalar", [(2, 8)], {"op": "-", "value": 1.5, "reverse": True}),
    ("scalar", [(2, 8)], {"op": "/", "value": 4.0}),
    ("scalar", [(2, 8)], {"op": "pow", "value": 0.5}),
    ("maximum", [(1, 3, 8), (4, 1, 8)], {}),
    ("minimum", [(4, 8), (1,)], {}),
    ("broadcast_to", [(3, 1)], {"shape": (2, 3, 5)}),
    ("concat", [(2, 3, 4), (2, 5, 4), (2, 1, 4)], {"axis": 1}),
    ("concat", [(2, 3), (2, 16)], {"axis": -1}),
    ("strided_slice", [(6, 10, 4)], {"begin": (1, 9, 0), "step": (2, -3, 1), "shape": (3, 4, 4)}),
    ("pad", [(2, 5, 6)], {"pad_before": (0, 1, 2), "pad_after": (1, 0, 3), "mode": "constant", "value": 0.5}),
    ("pad", [(2, 5, 6)], {"pad_before": (0, 2, 1), "pad_after": (0, 3, 4), "mode": "reflect"}),
    ("pad", [(2, 5, 6)], {"pad_before": (1, 2, 0), "pad_after": (0, 3, 2), "mode": "edge"}),
    ("pad", [(2, 5, 6)], {"pad_before": (0, 2, 6), "pad_after": (0, 5, 1), "mode": "wrap"}),
    ("softmax", [(2, 7, 5)], {"axis": 1}),
    ("log_softmax", [(3, 20)], {"axis": -1}),
    ("log_softmax", [(2, 7, 5)], {"axis": 0}),
    ("reduce", [(2, 6, 5, 4)], {"axes": (1, 2), "reducer": "mean", "keepdims": True}),
    ("reduce", [(2, 6, 5, 4)], {"axes": (3,), "reducer": "sum", "keepdims": False}),
    ("reduce", [(2, 6, 5, 4)], {"axes": (0, 3), "reducer": "max", "keepdims": False}),
    ("reduce", [(6, 5)], {"axes": (0,), "reducer": "min", "keepdims": True}),
    ("lrn", [(1, 4, 5, 7)], {"size": 3, "alpha": 1e-2, "beta": 0.75, "bias": 1.0}),
    ("lrn", [(1, 4, 5, 8)], {"size": 4, "alpha": 2e-2, "beta": 0.5, "bias": 2.0, "axis": -1}),
    ("resize", [(1, 4, 5, 3)], {"shape": (1, 8, 10, 3), "scales": (1, 2, 2, 1), "mode": "nearest",
                                "coordinate_mode": "asymmetric", "nearest_mode": "floor"}),
    ("resize", [(1, 4, 5, 3)], {"shape": (1, 7, 9, 3), "scales": (1, 1.75, 1.8, 1), "mode": "nearest",
                                "coordinate_mode": "half_pixel", "nearest_mode": "round_prefer_floor"}),
    ("resize", [(1, 4, 5, 3)], {"shape": (1, 8, 3, 3), "scales": (1, 2, 0.6, 1), "mode": "linear",
                                "coordinate_mode": "half_pixel", "nearest_mode": "round_prefer_floor"}),
    ("resize", [(1, 4, 5, 3)], {"shape": (1, 8, 9, 3), "scales": (1, 2, 1.8, 1), "mode": "linear",
                                "coordinate_mode": "align_corners", "nearest_mode": "round_prefer_floor"}),
    ("resize", [(2, 6, 3)], {"shape": (2, 12, 3), "scales": (1, 2, 1), "mode": "linear",
                             "coordinate_mode": "pytorch_half_pixel", "nearest_mode": "round_prefer_floor"}),
    *[(kind, [(3, 17)], {}) for kind in ("negative", "abs", "exp", "floor", "ceil", "round", "softplus", "sign")],
    ("mod", [(3, 8), (8,)], {}),
    ("fmod", [(3, 8), (3, 1)], {}),
    ("prelu", [(2, 5, 4), (4,)], {}),
    ("tile", [(2, 3)], {"repeats": (3, 2)}),
    ("cumsum", [(2, 7, 3)], {"axis": 1, "exclusive": True, "reverse": True}),
    ("arg_reduce", [(4, 9)], {"axis": 1, "largest": True, "keepdims": False, "select_last": False}),
    ("topk_rank", [(3, 6)], {"axis": -1, "largest": False}),
    ("reduce_prod", [(2, 5, 3)], {"axis": 1, "keepdims": False}),
]


@pytest.mark.parametrize("kind, shapes, attrs", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_operator_matches_numpy(kind, shapes, attrs):
    _run_one(kind, shapes, attrs)


def test_cast_and_gather():
    out = _run_one("gather", [(11, 6), (2, 3)], {"axis": 0}, consts=(0,), int_input=(1, 11))
    assert out.shape == (2, 3, 6)
    out = _run_one("gather", [(4, 9, 3), (5,)], {"axis": 1}, int_input=(1, 9))
    assert out.shape == (4, 5, 3)
    b = G.GraphBuilder("cast")
    x = b.input((3, 9))
    y = b.op("cast", [b.op("cast", [x], dtype="int32")], dtype="float32")
    ex = G.GraphExecutor(G.partition(b.graph([y])), warn_untuned=False)
    v = np.linspace(-3.7, 3.7, 27, dtype=np.float32).reshape(3, 9)
    np.testing.assert_array_equal(ex.run(v)[0], np.trunc(v))


def test_gather_counts_negative_indices_from_the_end_and_refuses_out_of_range_ones():
    b = G.GraphBuilder("g")
    table = b.const((5, 2), G.normal(1.0), "table")
    idx = b.input((4,), "idx", dtype="int64")
    ex = G.GraphExecutor(G.partition(b.graph([b.op("gather", [table, idx], axis=0)])), warn_untuned=False)
    out = ex.run(np.array([-1, 4, -5, 2]))[0]
    np.testing.assert_allclose(out, table.value[[4, 4, 0, 2]])
    for bad in (7, -9):
        with pytest.raises(IndexError, match="outside it"):
            ex.run(np.array([0, bad, 1, 2]))
        with pytest.raises(IndexError):
            G.run_reference(ex.graph, [np.array([0, bad, 1, 2])])


WINDOWS = [
    ("pool", [(1, 9, 10, 3)], {"kernel": 3, "stride": 2, "padding": 1, "pool_type": "max", "ceil_mode": True}),
    ("pool", [(1, 9, 10, 3)], {"kernel": 3, "stride": 2, "padding": 0, "pool_type": "avg", "ceil_mode": True}),
    ("pool", [(1, 9, 10, 3)], {"kernel": (3, 2), "stride": 2, "padding": (1, 0), "pad_after": (0, 1),
                               "pool_type": "avg", "count_include_pad": True}),
    ("pool", [(1, 9, 10, 3)], {"kernel": 3, "stride": 2, "padding": 1, "pool_type": "avg",
                               "count_include_pad": True, "ceil_mode": True}),
    ("pool", [(1, 11, 12, 2)], {"kernel": 2, "stride": 1, "padding": 1, "pool_type": "avg", "dilation": 2}),
    ("pool", [(1, 11, 12, 2)], {"kernel": 2, "stride": 1, "padding": 0, "pool_type": "max", "dilation": 3}),
    ("pool", [(2, 13, 3)], {"kernel": 4, "stride": 3, "padding": 2, "pad_after": 0, "pool_type": "max",
                            "ceil_mode": True}),
    ("conv", [(1, 8, 9, 4), (3, 3, 4, 6)], {"stride": 2, "padding": (1, 0), "pad_after": (0, 2)}),
    ("depthwise_conv2d", [(1, 8, 9, 4), (3, 3, 4, 2)], {"stride": 2, "padding": 0, "pad_after": 1}),
    ("conv2d_transpose", [(1, 4, 5, 3), (3, 3, 3, 2)], {"stride": 2, "padding": (1, 0), "pad_after": (0, 1),
                                                         "output_padding": (1, 1)}),
    ("conv2d_transpose", [(1, 4, 5, 3), (4, 4, 3, 2)], {"stride": 2, "padding": 1}),
]


@pytest.mark.parametrize("kind, shapes, attrs", WINDOWS, ids=[f"{c[0]}-{i}" for i, c in enumerate(WINDOWS)])
def test_window_operator_matches_numpy(kind, shapes, attrs):
    _run_one(kind, shapes, attrs, consts=(1,) if len(shapes) > 1 else ())


def test_pool_reference_counts_like_pytorch():
    """The reference's ceil mode and count_include_pad rules, checked on a hand-computed case:
    1-d average, kernel 3, stride 2, padding 1, input [1..5]: windows [pad,1,2], [2,3,4], [4,5,pad]."""
    x = np.arange(1.0, 6.0).reshape(1, 5, 1)
    got = R.pool(x, (3,), (2,), (1,), "avg", True, count_include_pad=True)
    np.testing.assert_allclose(got.ravel(), [3 / 3, 9 / 3, 9 / 3])
    got = R.pool(x, (3,), (2,), (1,), "avg", True)
    np.testing.assert_allclose(got.ravel(), [3 / 2, 9 / 3, 9 / 2])
    got = R.pool(x, (2,), (2,), (0,), "max", True, ceil_mode=True)   # the last window holds 5 alone
    np.testing.assert_allclose(got.ravel(), [2, 4, 5])
