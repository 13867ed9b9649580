"""ONNX operators that real exports hold beyond the CNN set: math, comparisons and logic,
Where, Mod, PRelu, Expand, Tile, GatherElements, CumSum, ArgMax, TopK, DepthToSpace,
SpaceToDepth, Einsum, the normalisations and reductions, Upsample, Shape and Size; one
model per operator (and per opset form), run by the executor and matched against
onnxruntime. Skipped without onnx or onnxruntime."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="ONNX import needs the onnx package (pip install 'autosched[onnx]')")
pytest.importorskip("onnxruntime", reason="checking imported models needs onnxruntime")
from onnx import TensorProto, helper  # noqa: E402

from autosched import graph as G  # noqa: E402
from autosched.graph.onnx import UnsupportedModelError, from_onnx  # noqa: E402

from .test_onnx import check, i64, make_model, one, w  # noqa: E402

B, I64 = TensorProto.BOOL, TensorProto.INT64


@pytest.mark.parametrize("op", ["Neg", "Abs", "Exp", "Floor", "Ceil", "Softplus", "Sign"])
def test_math(op):
    one(op, [(2, 3, 5)])


def test_log_and_round():
    one("Log", [(3, 7)], positive=True)
    halves = np.array([[-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.49, -0.51, 8388609, -16777215]], np.float32)
    model = make_model([helper.make_node("Round", ["x"], ["y"])], {"x": (1, 10)}, ["y"])
    check(model, feeds=[halves])
    (ours,) = G.GraphExecutor(G.partition(from_onnx(model)), warn_untuned=False).run(halves)
    np.testing.assert_array_equal(ours, np.round(halves))   # exactly: halves to even, big odd integers kept


def _bool_to_float(nodes, out="b"):
    return nodes + [helper.make_node("Cast", [out], ["y"], to=TensorProto.FLOAT)]


@pytest.mark.parametrize("op", ["Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"])
def test_comparisons(op):
    x = np.array([[0, 1, 2, 3]], np.float32)
    nodes = _bool_to_float([helper.make_node(op, ["x", "c"], ["b"])])
    check(make_model(nodes, {"x": (1, 4)}, ["y"], {"c": np.array([2.0], np.float32)}, 16), feeds=[x])


@pytest.mark.parametrize("op", ["And", "Or", "Xor"])
def test_logic(op):
    nodes = [helper.make_node("Greater", ["x", "zero"], ["p"]), helper.make_node("Less", ["x", "one"], ["q"]),
             helper.make_node(op, ["p", "q"], ["r"]), helper.make_node("Not", ["r"], ["b"])]
    consts = {"zero": np.array(0.0, np.float32), "one": np.array(1.0, np.float32)}
    check(make_model(_bool_to_float(nodes), {"x": (3, 4)}, ["y"], consts, 13))


def test_integer_comparison_and_cumsum_of_token_ids():
    """RoBERTa's position ids: ``cumsum(ids != pad) * (ids != pad) + pad`` on int64 ids."""
    nodes = [helper.make_node("Equal", ["ids", "pad"], ["is_pad"]), helper.make_node("Not", ["is_pad"], ["mask"]),
             helper.make_node("Cast", ["mask"], ["m"], to=TensorProto.INT32),
             helper.make_node("CumSum", ["m", "axis"], ["c"]), helper.make_node("Mul", ["c", "m"], ["cm"]),
             helper.make_node("Cast", ["cm"], ["y"], to=TensorProto.FLOAT)]
    model = make_model(nodes, {"ids": ((2, 9), I64)}, ["y"], {"pad": np.array(1, np.int64),
                                                               "axis": np.array(1, np.int64)}, 14)
    ids = np.array([[0, 1, 5, 1, 1, 7, 2, 2, 1], [3, 3, 1, 0, 0, 0, 1, 1, 9]], np.int64)
    check(model, feeds=[ids])


def test_isnan_and_where():
    """The dynamo exporter's attention: ``where(isnan(p), 0, p)``."""
    nodes = [helper.make_node("Log", ["x"], ["l"]), helper.make_node("IsNaN", ["l"], ["nan"]),
             helper.make_node("Where", ["nan", "zero", "l"], ["y"])]
    x = np.array([[-1.0, 0.5, 2.0, -3.0]], np.float32)
    check(make_model(nodes, {"x": (1, 4)}, ["y"], {"zero": np.array(0.0, np.float32)}), feeds=[x])


def test_where_broadcasts_three_operands():
    nodes = [helper.make_node("Greater", ["x", "t"], ["c"]), helper.make_node("Where", ["c", "x", "v"], ["y"])]
    check(make_model(nodes, {"x": (2, 3, 4)}, ["y"], {"t": w(4), "v": w(3, 1)}))


def test_mod():
    """Float Mod: C's fmod (fmod=1, what onnxruntime runs) against onnxruntime; Python's
    modulo (fmod=0, refused by onnxruntime for floats before opset 28) against numpy."""
    x = np.array([[-7.5, -2.0, 3.25, 7.0]], np.float32)
    d = np.array([2.0, -3.0, 1.5, -2.5], np.float32)
    check(make_model([helper.make_node("Mod", ["x", "d"], ["y"], fmod=1)], {"x": (1, 4)}, ["y"], {"d": d}, 13),
          feeds=[x])
    graph = from_onnx(make_model([helper.make_node("Mod", ["x", "d"], ["y"])], {"x": (1, 4)}, ["y"], {"d": d}, 13))
    ours = G.GraphExecutor(G.partition(graph), warn_untuned=False).run(x)[0]
    np.testing.assert_allclose(ours, np.mod(x, d), rtol=1e-6)


def test_prelu_per_channel():
    one("PRelu", [(1, 4, 5, 5), w(4, 1, 1)])


def test_expand():
    one("Expand", [(3, 1), i64(2, 3, 4)])


def test_tile():
    one("Tile", [(2, 3), i64(2, 3)])


@pytest.mark.parametrize("axis", [0, 1])
def test_gather_elements(axis):
    idx = np.array([[0, 2, -1], [1, 0, 2]], np.int64)
    one("GatherElements", [(3, 3), idx], {"axis": axis})


@pytest.mark.parametrize("exclusive, reverse", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_cumsum(exclusive, reverse):
    one("CumSum", [(2, 5, 3), np.array(1, np.int64)], {"exclusive": exclusive, "reverse": reverse})


def _index_as_float(op, shape, attrs, opset=13, consts=None):
    nodes = [helper.make_node(op, ["x"] + list(consts or {}), ["i"], **attrs),
             helper.make_node("Cast", ["i"], ["y"], to=TensorProto.FLOAT)]
    return make_model(nodes, {"x": shape}, ["y"], consts or {}, opset)


@pytest.mark.parametrize("op, attrs", [("ArgMax", {"axis": 1}), ("ArgMin", {"axis": 0, "keepdims": 0}),
                                       ("ArgMax", {"axis": 1, "select_last_index": 1})])
def test_arg_reduce(op, attrs):
    x = np.array([[1, 3, 3, 0], [2, 2, -1, 5], [0, 9, 9, 9]], np.float32)   # ties
    check(_index_as_float(op, (3, 4), attrs), feeds=[x])


@pytest.mark.parametrize("largest", [1, 0])
def test_topk(largest):
    x = np.array([[4, 1, 7, 1, 3, 7], [0, -2, 5, 5, 8, 1]], np.float32)
    nodes = [helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=1, largest=largest),
             helper.make_node("Cast", ["i"], ["fi"], to=TensorProto.FLOAT)]
    check(make_model(nodes, {"x": (2, 6)}, ["v", "fi"], {"k": i64(3)}), feeds=[x])


def test_topk_opset9_k_attribute():
    x = np.array([[4, 1, 7, 1, 3, 7]], np.float32)
    nodes = [helper.make_node("TopK", ["x"], ["v", "i"], axis=1, k=2),
             helper.make_node("Cast", ["i"], ["fi"], to=TensorProto.FLOAT)]
    check(make_model(nodes, {"x": (1, 6)}, ["v", "fi"], opset=9), feeds=[x])


@pytest.mark.parametrize("op, attrs", [("DepthToSpace", {"blocksize": 2}),
                                       ("DepthToSpace", {"blocksize": 2, "mode": "CRD"}),
                                       ("SpaceToDepth", {"blocksize": 2})])
def test_depth_and_space(op, attrs):
    one(op, [(1, 8, 4, 6)], attrs)


@pytest.mark.parametrize("equation, shapes", [
    ("bhqd,bhkd->bhqk", [(1, 2, 3, 4), (1, 2, 5, 4)]),     # attention scores
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("ij,jk", [(3, 4), (4, 5)]),                            # implicit output
    ("bid,nd->bin", [(2, 3, 4), (5, 4)]),                   # no batch on one side
    ("ijk->kj", [(2, 3, 4)]),                               # one operand: sum and transpose
])
def test_einsum(equation, shapes):
    one("Einsum", shapes, {"equation": equation}, opset=12)


def test_instance_norm():
    one("InstanceNormalization", [(2, 3, 5, 4), w(3), w(3)], {"epsilon": 1e-3})


@pytest.mark.parametrize("opset, per", [(18, "group"), (21, "channel")])
def test_group_norm(opset, per):
    n = 2 if per == "group" else 6
    one("GroupNormalization", [(1, 6, 4, 4), w(n) + 1, w(n)], {"num_groups": 2}, opset=opset, rtol=2e-4)


@pytest.mark.parametrize("op", ["ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSumExp", "ReduceMin"])
def test_reductions(op):
    one(op, [(2, 3, 4)], {"axes": [1], "keepdims": 0}, opset=13)


def test_reductions_opset18_axes_input():
    one("ReduceL2", [(2, 3, 4), i64(0, 2)], {"keepdims": 1}, opset=18)
    one("ReduceMin", [(2, 3, 4), i64(-1)], {"keepdims": 0}, opset=18)


def test_reduce_log_sum_and_prod():
    one("ReduceLogSum", [(2, 3, 4)], {"axes": [2]}, opset=13, positive=True)
    one("ReduceProd", [(2, 3, 4)], {"axes": [0, 2], "keepdims": 1}, opset=13)
    one("ReduceProd", [(2, 3, 4), i64(1)], {"keepdims": 0}, opset=18)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_upsample(mode):
    one("Upsample", [(1, 2, 3, 4), np.array([1.0, 1.0, 2.0, 3.0], np.float32)], {"mode": mode}, opset=9)


def test_shape_and_size_of_a_runtime_tensor():
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Size", ["x"], ["n"]),
             helper.make_node("Cast", ["s"], ["sf"], to=TensorProto.FLOAT),
             helper.make_node("Cast", ["n"], ["nf"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["sf", "nf"], ["k"]), helper.make_node("Add", ["x", "k"], ["y"])]
    check(make_model(nodes, {"x": (2, 4, 3)}, ["y"]))


def test_data_dependent_shapes_are_refused_at_import():
    nodes = [helper.make_node("NonZero", ["x"], ["nz"]), helper.make_node("Cast", ["nz"], ["y"], to=1)]
    with pytest.raises(UnsupportedModelError, match="NonZero: its output's shape depends on run-time values"):
        from_onnx(make_model(nodes, {"x": (3, 4)}, ["y"]))
