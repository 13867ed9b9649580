"""ONNX import: every supported operator from a one- or few-node model (onnx.helper), run
through the executor with default schedules and matched against onnxruntime; the light
model-zoo networks in the onnx wheel; exporter-style shape chains; the unsupported-operator
error. Skipped when onnx or onnxruntime is missing."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="ONNX import needs the onnx package (pip install 'autosched[onnx]')")
ort = pytest.importorskip("onnxruntime", reason="checking imported models needs onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from autosched import graph as G  # noqa: E402
from autosched.graph.onnx import UnsupportedModelError, from_onnx  # noqa: E402
from autosched.graph.onnx_zoo import light_model, with_random_weights  # noqa: E402

from .test_networks import SMALL_SEARCH, measuring, pools  # noqa: E402,F401 - pools is a fixture

F = TensorProto.FLOAT


def make_model(nodes, inputs, outputs, initializers=(), opset=17):
    """A model of ``nodes``; ``inputs``: {name: shape} (float32, or (shape, TensorProto type)),
    ``outputs``: names (shapes left to inference), ``initializers``: {name: array}."""
    ins = []
    for name, spec in inputs.items():
        shape, elem = spec if len(spec) == 2 and isinstance(spec[0], tuple) else (spec, F)
        ins.append(helper.make_tensor_value_info(name, elem, list(shape)))
    outs = [helper.make_tensor_value_info(o, F, None) for o in outputs]
    inits = [numpy_helper.from_array(np.asarray(v), k) for k, v in dict(initializers).items()]
    graph = helper.make_graph(nodes, "test", ins, outs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = min(model.ir_version, 10)
    return model


def run_both(model, feeds=None, seed=0, positive=False):
    """(ours, onnxruntime's) outputs of ``model`` on random inputs."""
    graph = from_onnx(model)
    inputs = graph.random_inputs(seed) if feeds is None else feeds
    if positive:
        inputs = [np.abs(x) + 0.1 for x in inputs]
    ex = G.GraphExecutor(G.partition(graph), warn_untuned=False)
    ours = ex.run(*inputs)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    theirs = sess.run(None, {i.name: x for i, x in zip(graph.inputs, inputs)})
    return ours, theirs


def check(model, rtol=1e-4, **kwargs):
    ours, theirs = run_both(model, **kwargs)
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        assert a.shape == b.shape, (a.shape, b.shape)
        scale = float(np.max(np.abs(b))) or 1.0
        np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol * scale)


def one(op, shapes, attrs=None, consts=None, opset=17, n_out=1, **kwargs):
    """A one-node model: inputs x0, x1... of ``shapes`` (a shape, or an array: a constant)."""
    inputs, inits, names = {}, {}, []
    for k, s in enumerate(shapes):
        name = f"x{k}"
        if s is None:
            names.append("")
            continue
        names.append(name)
        if isinstance(s, np.ndarray):
            inits[name] = s
        else:
            inputs[name] = s
    outs = [f"y{k}" for k in range(n_out)]
    node = helper.make_node(op, names, outs, **(attrs or {}))
    check(make_model([node], inputs, outs, inits, opset), **kwargs)


rng = np.random.default_rng(0)


def w(*shape, scale=0.3):
    return (scale * rng.standard_normal(shape)).astype(np.float32)


def i64(*values):
    return np.array(values, np.int64)


# elementwise ----------------------------------------------------------------------------------

@pytest.mark.parametrize("op, attrs, opset", [
    ("Relu", {}, 9), ("Sigmoid", {}, 13), ("Tanh", {}, 13), ("Erf", {}, 13), ("LeakyRelu", {"alpha": 0.2}, 16),
    ("HardSigmoid", {"alpha": 0.3, "beta": 0.6}, 9), ("HardSwish", {}, 14), ("Gelu", {}, 20),
    ("Gelu", {"approximate": "tanh"}, 20), ("Identity", {}, 21), ("Dropout", {}, 9), ("Dropout", {}, 13),
])
def test_unary(op, attrs, opset):
    one(op, [(2, 3, 17)], attrs, opset=opset)


@pytest.mark.parametrize("op", ["Sqrt", "Reciprocal"])
def test_unary_positive(op):
    one(op, [(4, 33)], positive=True)


def test_clip_attributes_and_inputs():
    one("Clip", [(3, 20)], {"min": -0.4, "max": 0.5}, opset=9)
    one("Clip", [(3, 20), np.array(-0.3, np.float32), np.array(0.2, np.float32)], opset=13)
    one("Clip", [(3, 20), None, np.array(0.2, np.float32)], opset=13)
    one("Clip", [(3, 20), np.array(0.0, np.float32)], opset=11)


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div", "Max", "Min"])
def test_binary_broadcasting(op):
    one(op, [(2, 3, 4, 5), (4, 1)])
    one(op, [(3, 1, 5), (2, 1, 4, 1)])
    one(op, [w(5) + 2.0, (2, 3, 5)] if op == "Div" else [w(5), (2, 3, 5)])


def test_nary_and_pow():
    one("Sum", [(2, 5), (2, 5), (1, 5)])
    one("Max", [(2, 5), (5,), (2, 1)], opset=13)
    one("Min", [(3, 4)], opset=13)
    one("Pow", [(3, 8), np.array(2.0, np.float32)], positive=True)
    one("Pow", [(3, 8), np.array(0.7, np.float32)], positive=True)
    one("Pow", [(3, 8), (3, 8)], positive=True)


def test_cast_round_trip():
    x = helper.make_node("Cast", ["x"], ["i"], to=TensorProto.INT32)
    y = helper.make_node("Cast", ["i"], ["y"], to=TensorProto.FLOAT)
    check(make_model([x, y], {"x": (4, 9)}, ["y"]), feeds=[np.linspace(-4.6, 4.6, 36, dtype=np.float32).reshape(4, 9)])


# linear algebra -------------------------------------------------------------------------------

def test_matmul_forms():
    one("MatMul", [(2, 7, 12), w(12, 9)])                  # a weight: dense over rows
    one("MatMul", [(5, 12), w(12, 9)])
    one("MatMul", [(2, 3, 6, 8), (2, 3, 8, 5)])            # batched, both at run time
    one("MatMul", [(2, 3, 6, 8), (8, 5)])                  # broadcast batch
    one("MatMul", [(6, 8), (8, 5)])


@pytest.mark.parametrize("tokens", [6, 61])
def test_attention_style_transposes(tokens):
    """Q·Kᵀ with the exporter's transposes: K's Transpose is absorbed as transpose_b, then
    read through a transposed copy (padded to 64 columns for 61 tokens, a prime)."""
    nodes = [helper.make_node("Transpose", ["q"], ["qt"], perm=[0, 2, 1, 3]),
             helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 3, 1]),
             helper.make_node("MatMul", ["qt", "kt"], ["s"]),
             helper.make_node("Softmax", ["s"], ["p"], axis=-1),
             helper.make_node("Transpose", ["v"], ["vt"], perm=[0, 2, 1, 3]),
             helper.make_node("MatMul", ["p", "vt"], ["c"]),
             helper.make_node("Transpose", ["c"], ["y"], perm=[0, 2, 1, 3])]
    check(make_model(nodes, {"q": (1, tokens, 2, 4), "k": (1, tokens, 2, 4), "v": (1, tokens, 2, 4)}, ["y"]))


@pytest.mark.parametrize("attrs, c", [
    ({}, None), ({"transB": 1}, "vec"), ({"transA": 1, "alpha": 0.5, "beta": 2.0}, "row"), ({"beta": 0.5}, "full")])
def test_gemm(attrs, c):
    a = (4, 6) if not attrs.get("transA") else (6, 4)
    b = w(5, 6) if attrs.get("transB") else w(6, 5)
    cs = {None: None, "vec": w(5), "row": w(1, 5), "full": w(4, 5)}[c]
    one("Gemm", [a, b] + ([cs] if cs is not None else []), attrs, opset=13)


# convolutions and pooling ---------------------------------------------------------------------

@pytest.mark.parametrize("attrs, x, wshape", [
    ({"pads": [1, 1, 1, 1]}, (1, 3, 9, 10), (4, 3, 3, 3)),
    ({"strides": [2, 2], "pads": [0, 1, 2, 0]}, (1, 3, 9, 10), (4, 3, 3, 3)),
    ({"auto_pad": "SAME_UPPER", "strides": [2, 2]}, (1, 3, 9, 10), (4, 3, 3, 3)),
    ({"auto_pad": "SAME_LOWER", "strides": [2, 2]}, (1, 3, 9, 10), (4, 3, 3, 3)),
    ({"auto_pad": "VALID", "dilations": [2, 1]}, (1, 3, 9, 10), (4, 3, 3, 3)),
    ({"group": 2, "pads": [1, 1, 1, 1]}, (1, 4, 7, 7), (6, 2, 3, 3)),
    ({"group": 4, "pads": [1, 1, 1, 1], "strides": [2, 2]}, (1, 4, 8, 8), (8, 1, 3, 3)),   # depthwise
    ({"pads": [1, 2]}, (2, 3, 11), (5, 3, 3)),                                               # 1-d
    ({"pads": [1, 1, 1, 1, 1, 1]}, (1, 2, 4, 5, 5), (3, 2, 3, 3, 3)),                        # 3-d
])
def test_conv(attrs, x, wshape):
    one("Conv", [x, w(*wshape), w(wshape[0])], attrs, opset=11)


def test_conv_without_bias_opset9():
    one("Conv", [(1, 3, 6, 6), w(2, 3, 1, 1)], {}, opset=9)


@pytest.mark.parametrize("attrs", [
    {"strides": [2, 2], "pads": [1, 1, 1, 1]},
    {"strides": [2, 2], "pads": [1, 0, 0, 1], "output_padding": [1, 1]},
    {"strides": [2, 2], "output_shape": [10, 12]},
    {"strides": [2, 2], "auto_pad": "SAME_UPPER"},
])
def test_conv_transpose(attrs):
    one("ConvTranspose", [(1, 3, 5, 6), w(3, 4, 3, 3), w(4)], attrs, opset=11)


@pytest.mark.parametrize("op, attrs, opset", [
    ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}, 9),
    ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}, 10),
    ("MaxPool", {"kernel_shape": [2, 2], "dilations": [2, 2]}, 12),
    ("MaxPool", {"kernel_shape": [3, 3], "auto_pad": "SAME_UPPER", "strides": [2, 2]}, 12),
    ("AveragePool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}, 9),
    ("AveragePool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "count_include_pad": 1}, 9),
    ("AveragePool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 0, 0, 1], "ceil_mode": 1}, 11),
    ("AveragePool", {"kernel_shape": [3, 2], "strides": [2, 2], "pads": [1, 0, 1, 1], "ceil_mode": 1,
                     "count_include_pad": 1}, 19),
    ("AveragePool", {"kernel_shape": [2, 2], "dilations": [2, 2], "pads": [1, 1, 1, 1]}, 19),
])
def test_pool(op, attrs, opset):
    one(op, [(1, 3, 10, 11)], attrs, opset=opset)


def test_global_pools_and_lrn():
    one("GlobalAveragePool", [(2, 5, 6, 7)])
    one("GlobalMaxPool", [(2, 5, 6, 7)])
    one("GlobalAveragePool", [(2, 5, 9)])
    one("LRN", [(1, 6, 5, 5)], {"size": 3, "alpha": 1e-2, "beta": 0.75, "bias": 1.5}, positive=True)
    one("LRN", [(1, 5, 4, 4)], {"size": 5}, positive=True)


def test_batch_norm():
    c = 5
    stats = [w(c) + 1.0, w(c), w(c), np.abs(w(c)) + 0.5]
    one("BatchNormalization", [(2, c, 4, 6)] + stats, {"epsilon": 1e-3}, opset=9)
    one("BatchNormalization", [(3, c)] + stats, opset=15)


def test_conv_batch_norm_relu_is_folded():
    """Conv -> BatchNormalization -> Relu: the batch norm is folded into the conv's weights."""
    c = 4
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "g", "beta", "m", "v"], ["n"]),
             helper.make_node("Relu", ["n"], ["y"])]
    inits = {"w": w(c, 3, 3, 3), "b": w(c), "g": w(c) + 1, "beta": w(c), "m": w(c), "v": np.abs(w(c)) + 0.5}
    model = make_model(nodes, {"x": (1, 3, 6, 6)}, ["y"], inits, 15)
    check(model)
    part = G.partition(from_onnx(model))
    assert "batch_norm" not in {n.kind for n in part.graph.op_nodes}
    assert [sg.name for sg in part.subgraphs] == ["fused_transpose", "fused_conv_bias_add_relu", "fused_transpose"]


# normalisation and reductions -----------------------------------------------------------------

@pytest.mark.parametrize("op, opset, attrs, shape", [
    ("Softmax", 9, {}, (3, 4, 5)), ("Softmax", 11, {"axis": 2}, (3, 4, 5)), ("Softmax", 13, {"axis": 1}, (3, 4, 5)),
    ("LogSoftmax", 9, {"axis": 1}, (3, 4, 1)), ("LogSoftmax", 13, {}, (3, 4, 5)), ("Softmax", 13, {}, (2, 9)),
])
def test_softmax(op, opset, attrs, shape):
    one(op, [shape], attrs, opset=opset)


def test_layer_norm():
    one("LayerNormalization", [(2, 7, 16), w(16) + 1, w(16)], {"epsilon": 1e-5}, opset=17)
    one("LayerNormalization", [(2, 3, 4, 5), w(4, 5) + 1], {"axis": 2}, opset=17)


@pytest.mark.parametrize("op, opset, axes, keepdims", [
    ("ReduceMean", 13, [1, 2], 1), ("ReduceMean", 18, [-1], 0), ("ReduceSum", 9, [0], 0), ("ReduceSum", 13, [2], 1),
    ("ReduceMax", 13, [1], 0), ("ReduceMax", 18, [0, 2], 1), ("ReduceMean", 13, None, 1),
])
def test_reduce(op, opset, axes, keepdims):
    as_input = opset >= 18 or (op == "ReduceSum" and opset >= 13)
    shapes = [(2, 3, 4)] + ([i64(*axes)] if as_input and axes is not None else [])
    attrs = {"keepdims": keepdims}
    if axes is not None and not as_input:
        attrs["axes"] = axes
    one(op, shapes, attrs, opset=opset)


# data movement --------------------------------------------------------------------------------

def test_concat_split_slice():
    one("Concat", [(2, 3, 4), (2, 1, 4), w(2, 2, 4)], {"axis": 1})
    one("Concat", [(2, 3), (2, 5)], {"axis": -1}, opset=9)
    one("Split", [(4, 6)], {"axis": 1, "split": [2, 4]}, opset=9, n_out=2)
    one("Split", [(4, 6), i64(1, 2, 1)], {"axis": 0}, opset=13, n_out=3)
    one("Split", [(4, 7)], {"axis": 1, "num_outputs": 3}, opset=18, n_out=3)
    one("Slice", [(5, 8)], {"starts": [1, 2], "ends": [4, 100], "axes": [0, 1]}, opset=9)
    one("Slice", [(5, 8, 3), i64(-1, 1), i64(-100, 7), i64(0, 1), i64(-2, 3)], opset=13)


def test_shape_ops():
    one("Reshape", [(2, 3, 4), i64(0, -1)], opset=13)
    one("Reshape", [(2, 3, 4), i64(4, 0, 2)], {"allowzero": 0}, opset=14)
    one("Flatten", [(2, 3, 4, 5)], {"axis": 2}, opset=13)
    one("Squeeze", [(2, 1, 4, 1)], {"axes": [1]}, opset=9)
    one("Squeeze", [(2, 1, 4, 1), i64(-1, 1)], opset=13)
    one("Unsqueeze", [(2, 4)], {"axes": [0, 3]}, opset=9)
    one("Unsqueeze", [(2, 4), i64(1, -1)], opset=13)
    one("Transpose", [(2, 3, 4)], {"perm": [2, 0, 1]})
    one("Transpose", [(2, 3, 4)], {})


def test_gather():
    one("Gather", [w(10, 6), ((2, 3), TensorProto.INT64)], {"axis": 0})            # an embedding table
    one("Gather", [(4, 9, 3), i64(0, -1, 4)], {"axis": 1})                            # columns of a tensor
    one("Gather", [(4, 9, 3), np.array(2, np.int64)], {"axis": 1}, opset=13)          # a scalar index


@pytest.mark.parametrize("opset, mode", [(9, "constant"), (11, "reflect"), (13, "edge"), (19, "wrap"), (18, "axes")])
def test_pad(opset, mode):
    if opset == 9:
        one("Pad", [(2, 3, 5)], {"pads": [0, 1, 2, 1, 0, 3], "value": 0.5}, opset=9)
    elif mode == "axes":
        one("Pad", [(2, 3, 5), i64(1, 2, 0, 1), np.array(0.25, np.float32), i64(1, 2)], opset=18)
    else:
        one("Pad", [(2, 3, 5), i64(0, 1, 2, 0, 2, 3)], {"mode": mode}, opset=opset)


@pytest.mark.parametrize("opset, attrs, scales, sizes", [
    (10, {"mode": "nearest"}, [1, 1, 2, 2], None),
    (10, {"mode": "linear"}, [1, 1, 2, 1.5], None),
    (11, {"mode": "nearest"}, [1, 1, 2, 3], None),
    (13, {"mode": "linear"}, [1, 1, 1.7, 0.6], None),
    (13, {"mode": "linear", "coordinate_transformation_mode": "align_corners"}, None, [1, 3, 9, 7]),
    (13, {"mode": "linear", "coordinate_transformation_mode": "pytorch_half_pixel"}, [1, 1, 2, 2], None),
    (13, {"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"},
     [1, 1, 2, 2], None),
    (13, {"mode": "nearest", "nearest_mode": "round_prefer_ceil"}, [1, 1, 1.5, 2.5], None),
    (18, {"mode": "linear", "axes": [2, 3]}, [2, 2], None),
    (19, {"mode": "linear", "coordinate_transformation_mode": "half_pixel_symmetric"}, [1, 1, 1.5, 2], None),
])
def test_resize(opset, attrs, scales, sizes):
    x = (1, 3, 4, 5)
    f32 = lambda v: np.array(v, np.float32)  # noqa: E731
    if opset == 10:
        shapes = [x, f32(scales)]
    else:
        roi = np.array([], np.float32)
        shapes = [x, roi, f32(scales) if scales is not None else np.array([], np.float32)]
        if sizes is not None:
            shapes.append(i64(*sizes))
    one("Resize", shapes, attrs, opset=opset)


# exporter patterns and layouts ------------------------------------------------------------------

def test_shape_chain_is_folded():
    """Shape -> Gather -> Unsqueeze -> Concat -> Reshape, as exporters write x.view(x.size(0), -1)."""
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Shape", ["r"], ["s"]),
             helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
             helper.make_node("Unsqueeze", ["n", "ax"], ["n1"]),
             helper.make_node("Concat", ["n1", "minus_one"], ["shape"], axis=0),
             helper.make_node("Reshape", ["r", "shape"], ["y"])]
    inits = {"zero": np.array(0, np.int64), "ax": i64(0), "minus_one": i64(-1)}
    model = make_model(nodes, {"x": (2, 3, 4, 5)}, ["y"], inits, 13)
    check(model)
    kinds = {n.kind for n in from_onnx(model).op_nodes}
    assert kinds == {"relu", "reshape"}, kinds


def test_cnn_has_transposes_only_at_the_input():
    """Conv, Relu, MaxPool, Conv, Add (residual), GlobalAveragePool, Flatten, Gemm: NHWC inside,
    one transpose of the input, none between operators; the classifier head reshapes for free."""
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Conv", ["p1", "w2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c2", "p1"], ["a"]),
             helper.make_node("Mul", ["a", "scale"], ["m"]),
             helper.make_node("GlobalAveragePool", ["m"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("Gemm", ["f", "wf", "bf"], ["y"], transB=1)]
    inits = {"w1": w(8, 3, 3, 3), "b1": w(8), "w2": w(8, 8, 3, 3), "scale": w(8, 1, 1),
             "wf": w(10, 8), "bf": w(10)}
    model = make_model(nodes, {"x": (1, 3, 8, 8)}, ["y"], inits, 13)
    check(model)
    graph = from_onnx(model)
    transposes = [n for n in graph.op_nodes if n.kind == "transpose"]
    assert len(transposes) == 1 and transposes[0].inputs[0].is_input


def test_input_shapes_fix_dynamic_dimensions():
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], {"x": ("batch", 5)}, ["y"])
    dynamic = from_onnx(model)                   # kept open: tests/autosched/test_dynamic_shapes.py
    assert isinstance(dynamic, G.DynamicModel) and dynamic.open_axes == {"x": {0: "batch"}}
    graph = from_onnx(model, input_shapes={"x": (3, 5)})
    assert graph.inputs[0].shape == (3, 5)
    with pytest.raises(ValueError, match="not inputs of the model"):
        from_onnx(model, input_shapes={"y": (3, 5)})


def test_unsupported_operators_are_listed_together():
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="first"),
             helper.make_node("NonZero", ["a"], ["b"], name="nz"),
             helper.make_node("Cos", ["x"], ["c"], name="cos1"),
             helper.make_node("Cos", ["c"], ["d"], name="cos2"),
             helper.make_node("Resize", ["x", "", "scales"], ["e"], mode="cubic", name="rs")]
    model = make_model(nodes, {"x": (1, 2, 4, 4)}, ["b", "d", "e"],
                       {"scales": np.array([1, 1, 2, 2], np.float32)}, 13)
    with pytest.raises(UnsupportedModelError) as info:
        from_onnx(model)
    msg = str(info.value)
    assert "opset 13" in msg and "NonZero" in msg and "nz" in msg and "cos1, cos2" in msg
    assert "mode='cubic'" in msg and "rs" in msg
    assert info.value.unsupported[("Cos", "no converter")] == ["cos1", "cos2"]


def test_opset_outside_the_supported_range():
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], {"x": (2, 2)}, ["y"], opset=8)
    with pytest.raises(ValueError, match="opset 8"):
        from_onnx(model)


# the model zoo's light models -------------------------------------------------------------------

@pytest.mark.parametrize("name", ["squeezenet", "resnet50", "densenet121", "inception_v2"])
def test_light_models_match_onnxruntime(name):
    """The real architectures in the onnx wheel, weights made random (their ConstantOfShape
    weights are all 0.02, which would hide layout mistakes), default schedules, vs onnxruntime."""
    model = with_random_weights(light_model(name), seed=0)
    check(model, rtol=2e-4)


def test_torch_runner_matches_onnxruntime():
    """The PyTorch baseline that the CLI and the benchmark time runs the same models."""
    pytest.importorskip("torch", reason="the PyTorch baseline needs torch")
    from autosched.graph.onnx_baselines import torch_runner
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Clip", ["c1", "lo", "hi"], ["r1"]),
             helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
                              ceil_mode=1),
             helper.make_node("Shape", ["p1"], ["s"]),
             helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
             helper.make_node("Unsqueeze", ["n", "ax"], ["n1"]),
             helper.make_node("Concat", ["n1", "minus_one"], ["shape"], axis=0),
             helper.make_node("Reshape", ["p1", "shape"], ["f"]),
             helper.make_node("Gemm", ["f", "wf", "bf"], ["g"], transB=1),
             helper.make_node("Softmax", ["g"], ["y"], axis=1)]
    inits = {"w1": w(8, 3, 3, 3), "b1": w(8), "lo": np.array(0.0, np.float32), "hi": np.array(6.0, np.float32),
             "zero": np.array(0, np.int64), "ax": i64(0), "minus_one": i64(-1), "wf": w(10, 8 * 4 * 4), "bf": w(10)}
    model = make_model(nodes, {"x": (2, 3, 11, 11)}, ["y"], inits, 13)
    x = rng.standard_normal((2, 3, 11, 11)).astype(np.float32)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(torch_runner(model, threads=1)(x)[0], sess.run(None, {"x": x})[0], rtol=1e-5,
                               atol=1e-6)


def test_command_line_tunes_and_runs_a_model(tmp_path, monkeypatch, capsys, pools):
    """``autosched tune model.onnx`` tunes, checks against onnxruntime and times the baselines;
    ``autosched run`` runs the model from the log on an input file."""
    from autosched import networks
    from autosched.cli import main
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("GlobalAveragePool", ["r1"], ["g"]),
             helper.make_node("Flatten", ["g"], ["y"])]
    model = make_model(nodes, {"x": ("n", 3, 6, 6)}, ["y"], {"w1": w(8, 3, 3, 3), "b1": w(8)}, 13)
    path, log = tmp_path / "m.onnx", tmp_path / "m.json"
    onnx.save(model, str(path))
    real = networks.tune_networks
    monkeypatch.setattr(networks, "tune_networks", lambda *a, **k: real(*a, search_params=SMALL_SEARCH,
                                                                        cost_model="random", **measuring(pools), **k))
    assert main(["tune", str(path), "--trials", "2", "--log-file", str(log)]) == 2  # one line, exit code 2
    assert "no static shape" in capsys.readouterr().err
    rc = main(["tune", str(path), "--input-shape", "x=1x3x6x6", "--trials", "4", "--batch", "2",
               "--log-file", str(log)])
    out = capsys.readouterr().out
    assert rc == 0 and "outputs match onnxruntime's: OK" in out and "autosched:" in out
    x = rng.standard_normal((1, 3, 6, 6)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    rc = main(["run", str(path), "--input-shape", "x=1x3x6x6", "--log-file", str(log), "--input",
               str(tmp_path / "x.npy"), "--output", str(tmp_path / "y.npy")])
    assert rc == 0
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), sess.run(None, {"x": x})[0], rtol=1e-4, atol=1e-5)
    assert main(["run", str(path), "--log-file", str(tmp_path / "missing.json")]) == 2
    assert "no tuning log" in capsys.readouterr().err
    # two sets of shapes in one run, one log: each set's model checked, and `run` finds its programs in the log
    log2 = tmp_path / "sets.json"
    rc = main(["tune", str(path), "--input-shape", "x=1x3x6x6", "--input-shape", "x=3x3x6x6", "--trials", "6",
               "--batch", "2", "--log-file", str(log2)])
    out = capsys.readouterr().out
    assert rc == 0 and out.count("outputs match onnxruntime's: OK") == 2 and "(x=3x3x6x6)" in out
    x3 = rng.standard_normal((3, 3, 6, 6)).astype(np.float32)
    np.save(tmp_path / "x3.npy", x3)
    assert main(["run", str(path), "--input-shape", "x=3x3x6x6", "--log-file", str(log2), "--input",
                 str(tmp_path / "x3.npy"), "--output", str(tmp_path / "y3.npy")]) == 0
    np.testing.assert_allclose(np.load(tmp_path / "y3.npy"), sess.run(None, {"x": x3})[0], rtol=1e-4, atol=1e-5)
    capsys.readouterr()
    for shapes, message in ((["x=1x3x6x6", "x=2x3x6x6", "x=4x3x6x6", "z=1x8", "z=2x8"], "give each input once"),
                            (["x=1x3x6x6", "x=2x3x6x6", "z=1x8"], "which are not inputs of the model"),
                            (["x=1x3x6x6", "x=2x3x7x7"], "its axis 2 is fixed at 6")):
        argv = ["tune", str(path), "--trials", "2"] + [a for v in shapes for a in ("--input-shape", v)]
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err, err


def test_constant_folding_honours_the_opset():
    """Opset 9's attribute forms (Unsqueeze axes, Slice starts/ends, Split split) on constants
    fold with the opset-9 implementations (the newest opset's would reject the attributes)."""
    nodes = [helper.make_node("Unsqueeze", ["c"], ["cu"], axes=[0, 2]),                 # (1, 6, 1)
             helper.make_node("Slice", ["cu"], ["cs"], starts=[1], ends=[5], axes=[1]),   # (1, 4, 1)
             helper.make_node("Split", ["cs"], ["c1", "c2"], axis=1, split=[1, 3]),
             helper.make_node("Mul", ["x", "c2"], ["y"])]
    model = make_model(nodes, {"x": (2, 3, 5)}, ["y"], {"c": w(6)}, opset=9)
    check(model)


def test_pad_of_nothing_between_operators_partitions():
    """swin_t's exporter writes Pads of zero widths after a layer norm; the pad is no
    operator, so its fused group does not end in its own input (ComputeDAG refused that)."""
    nodes = [helper.make_node("Softmax", ["x"], ["r"]),
             helper.make_node("Pad", ["r", "pads"], ["y"])]
    check(make_model(nodes, {"x": (1, 4, 4, 3)}, ["y"], {"pads": i64(*[0] * 8)}, opset=17))


@pytest.mark.parametrize("bad", [5, -6])
def test_gather_out_of_range_raises_at_run_time(bad):
    """onnxruntime refuses an id outside the table (INVALID_ARGUMENT); the kernel raised
    nothing and read the last row."""
    model = make_model([helper.make_node("Gather", ["table", "ids"], ["y"])], {"ids": ((1, 3), TensorProto.INT64)},
                       ["y"], {"table": w(5, 4)})
    graph = from_onnx(model)
    ex = G.GraphExecutor(G.partition(graph), warn_untuned=False)
    ok = np.array([[0, 4, -5]], np.int64)
    np.testing.assert_allclose(ex.run(ok)[0], np.take(numpy_helper.to_array(model.graph.initializer[0]), ok, 0))
    with pytest.raises(IndexError):
        ex.run(np.array([[0, bad, 1]], np.int64))


def test_ten_thousand_node_chain_imports_and_runs():
    """No recursion proportional to the depth in import, partitioning or lowering: a chain of
    150 elementwise nodes died with RecursionError; fused groups are cut at MAX_FUSE_DEPTH."""
    n = 10_000
    nodes = [helper.make_node("Neg" if k % 2 else "Sigmoid", [f"t{k}"], [f"t{k + 1}"]) for k in range(n)]
    check(make_model(nodes, {"t0": (2, 3)}, [f"t{n}"]))


def test_two_nodes_writing_one_name_are_refused():
    """onnxruntime refuses such a model as invalid; the importer let the last writer win."""
    nodes = [helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Sigmoid", ["x"], ["y"])]
    with pytest.raises(ValueError, match="invalid ONNX model: 'y' is written by node 'Relu_0' and node 'Sigmoid_1'"):
        from_onnx(make_model(nodes, {"x": (2, 2)}, ["y"]))


def test_inputs_of_disagreeing_element_types_are_refused():
    """A float64 input of a MatMul with a float32 weight (a fuzzed input's type changed):
    onnxruntime refuses the model; the importer ended in ir's TypeError."""
    model = make_model([helper.make_node("MatMul", ["x", "w"], ["y"])], {"x": ((2, 3), TensorProto.DOUBLE)}, ["y"],
                       {"w": np.ones((3, 2), np.float32)})
    with pytest.raises(Exception):
        ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    with pytest.raises(ValueError, match=r"their element types \['float64', 'float32'\] disagree"):
        from_onnx(model)


@pytest.mark.parametrize("case", ["dangling", "cycle"])
def test_dangling_names_and_cycles_are_refused(case):
    if case == "dangling":
        nodes = [helper.make_node("Add", ["x", "nowhere"], ["y"])]
    else:
        nodes = [helper.make_node("Add", ["x", "b"], ["a"]), helper.make_node("Relu", ["a"], ["b"]),
                 helper.make_node("Sigmoid", ["b"], ["y"])]
    why = "no node, initializer or input writes it" if case == "dangling" else "a later node writes it"
    with pytest.raises(ValueError, match=f"invalid ONNX model: node 'Add_0' \\(Add\\) reads '(nowhere|b)', but {why}"):
        from_onnx(make_model(nodes, {"x": (2, 2)}, ["y"]))


def test_loop_with_a_huge_trip_count_is_not_evaluated_at_import():
    """A Loop of constant inputs and 10**12 iterations was folded at import and never ended."""
    body = helper.make_graph([helper.make_node("Add", ["v", "one"], ["v_out"]),
                              helper.make_node("Identity", ["cond"], ["cond_out"])], "body",
                             [helper.make_tensor_value_info("i", TensorProto.INT64, []),
                              helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
                              helper.make_tensor_value_info("v", F, [1])],
                             [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
                              helper.make_tensor_value_info("v_out", F, [1])])
    nodes = [helper.make_node("Loop", ["n", "true", "v0"], ["v"], body=body),
             helper.make_node("Add", ["x", "v"], ["y"])]
    consts = {"n": np.array(10**12, np.int64), "true": np.array(True), "v0": np.zeros(1, np.float32),
              "one": np.ones(1, np.float32)}
    with pytest.raises(UnsupportedModelError, match="Loop: control flow is not supported"):
        from_onnx(make_model(nodes, {"x": (1,)}, ["y"], consts))


def test_a_graph_output_no_node_writes_is_refused():
    """It ended in an AttributeError deep in the importer."""
    model = make_model([helper.make_node("Relu", ["x"], ["r"])], {"x": (2, 2)}, ["y"])
    with pytest.raises(ValueError, match="invalid ONNX model: the graph output 'y' is written by no node"):
        from_onnx(model)


def test_declared_shapes_that_contradict_the_nodes_are_the_models_error():
    """It said "this is a bug of the importer"."""
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "test",
                              [helper.make_tensor_value_info("x", F, [2, 2])],
                              [helper.make_tensor_value_info("y", F, [3, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(ValueError, match=r"declares 'y' with shape \(3, 3\), but node 'Relu_0' \(Relu\) computes"):
        from_onnx(model)


@pytest.mark.parametrize("op, shape_or_bounds", [("ConstantOfShape", [i64(10**6, 10**6)]),
                                                 ("Range", [np.array(0, np.int64), np.array(10**12, np.int64),
                                                            np.array(1, np.int64)])])
def test_huge_constants_are_not_made_at_import(op, shape_or_bounds):
    """A model's own arithmetic on constants is evaluated at import; 10**12 elements of it
    would exhaust memory before any error."""
    names = [f"c{k}" for k in range(len(shape_or_bounds))]
    nodes = [helper.make_node(op, names, ["big"]), helper.make_node("Cast", ["big"], ["bigf"], to=F),
             helper.make_node("Add", ["x", "bigf"], ["y"])]
    model = make_model(nodes, {"x": (1,)}, ["y"], dict(zip(names, shape_or_bounds)))
    with pytest.raises(UnsupportedModelError, match=f"{op}: folding it would make a constant of 10+ elements"):
        from_onnx(model)


def test_a_range_of_no_finite_size_is_unsupported():
    """Range(0, inf, 1) of constants ended in OverflowError ("cannot convert float infinity")."""
    bounds = [np.array(0, np.float32), np.array(np.inf, np.float32), np.array(1, np.float32)]
    nodes = [helper.make_node("Range", ["c0", "c1", "c2"], ["big"]), helper.make_node("Add", ["x", "big"], ["y"])]
    model = make_model(nodes, {"x": (1,)}, ["y"], {"c0": bounds[0], "c1": bounds[1], "c2": bounds[2]})
    with pytest.raises(UnsupportedModelError, match="Range: a Range of 0.0 to inf by 1.0 has no finite size"):
        from_onnx(model)
