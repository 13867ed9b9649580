"""Float16 ONNX models: imported and computed in float32 (weights converted once, the
exporter's Cast pairs gone), outputs returned as float16 and matched against onnxruntime
running the float16 model, within float16 tolerance."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="ONNX import needs the onnx package (pip install 'autosched[onnx]')")
ort = pytest.importorskip("onnxruntime", reason="checking imported models needs onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from autosched import graph as G  # noqa: E402
from autosched.graph.onnx_fp16 import as_float32, is_float16  # noqa: E402

H = TensorProto.FLOAT16


def onnxruntime_outputs(model_bytes: bytes, feeds: dict) -> list:
    sess = ort.InferenceSession(model_bytes, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def check_float16(model_bytes: bytes, x: np.ndarray, rtol: float = 1e-2):
    """Our outputs (float16) against onnxruntime's on the float16 input ``x``; the graph."""
    graph = G.from_onnx(model_bytes)
    ours = G.GraphExecutor(G.partition(graph), warn_untuned=False).run(x)
    theirs = onnxruntime_outputs(model_bytes, {graph.inputs[0].name: x})
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        assert a.dtype == np.float16 and a.shape == b.shape
        scale = float(np.max(np.abs(b.astype(np.float32))))
        np.testing.assert_allclose(a.astype(np.float32), b.astype(np.float32), rtol=rtol, atol=rtol * scale)
    return graph


def mlp_with_cast_pairs() -> bytes:
    """A float16 MLP written as converters write one: float16 weights, a float32 island
    (softmax between Casts), a float16 Constant and a Cast back to float16."""
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array((0.3 * rng.standard_normal((16, 24))).astype(np.float16), "w1")
    b1 = numpy_helper.from_array((0.1 * rng.standard_normal(24)).astype(np.float16), "b1")
    w2 = numpy_helper.from_array((0.3 * rng.standard_normal((24, 8))).astype(np.float16), "w2")
    two = helper.make_tensor("two", H, [], np.array([2.0], np.float16).view(np.uint16).tolist())
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"]),
        helper.make_node("Add", ["h", "b1"], ["hb"]),
        helper.make_node("Cast", ["hb"], ["h32"], to=TensorProto.FLOAT),
        helper.make_node("Softmax", ["h32"], ["s32"], axis=-1),
        helper.make_node("Cast", ["s32"], ["s"], to=H),
        helper.make_node("Constant", [], ["c2"], value=two),
        helper.make_node("Mul", ["s", "c2"], ["s2"]),
        helper.make_node("MatMul", ["s2", "w2"], ["o"]),
        helper.make_node("Relu", ["o"], ["y"]),
    ]
    graph = helper.make_graph(nodes, "mlp16", [helper.make_tensor_value_info("x", H, [3, 16])],
                              [helper.make_tensor_value_info("y", H, [3, 8])], [w1, b1, w2])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


def test_float16_mlp_with_cast_pairs_matches_onnxruntime():
    data = mlp_with_cast_pairs()
    x = np.random.default_rng(1).standard_normal((3, 16)).astype(np.float16)
    graph = check_float16(data, x)
    assert graph.input_dtypes == graph.output_dtypes == ["float16"]
    assert graph.random_inputs(0)[0].dtype == np.float16             # what onnxruntime takes for the model
    assert all(n.dtype == "float32" for n in graph.nodes)          # computed in float32
    assert not [n for n in graph.op_nodes if n.kind == "cast"]     # the Cast pair folded away
    ok, err = G.GraphExecutor(G.partition(graph), warn_untuned=False).verify(rtol=1e-5)
    assert ok, err                                                  # float32 kernels against numpy, not float16


def test_as_float32_leaves_the_model_given_and_float32_models_alone():
    model = onnx.load_from_string(mlp_with_cast_pairs())
    before = model.SerializeToString()
    converted, io = as_float32(model)
    assert model.SerializeToString() == before and is_float16(model) and not is_float16(converted)
    assert io == {"inputs": {"x": "float16"}, "outputs": {"y": "float16"}}
    assert as_float32(converted)[0] is converted


def test_float32_outputs_stay_float32():
    nodes = [helper.make_node("Relu", ["x"], ["y"])]
    graph = helper.make_graph(nodes, "relu", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5])])
    g = G.from_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    out = G.GraphExecutor(G.partition(g), warn_untuned=False).run(np.ones((2, 5), np.float32))[0]
    assert g.output_dtypes == ["float32"] and out.dtype == np.float32


@pytest.mark.parametrize("which", ["cnn", "transformer"])
def test_torch_half_export_matches_onnxruntime(which):
    pytest.importorskip("torch", reason="the float16 models are exported from PyTorch")
    from . import small_torch
    model, x = getattr(small_torch, which)()
    data = small_torch.onnx_bytes(model.half(), x.half())
    check_float16(data, x.numpy().astype(np.float16))


def test_float16_model_with_an_open_batch_axis():
    pytest.importorskip("torch", reason="the float16 model is exported from PyTorch")
    from . import small_torch
    model, x = small_torch.cnn()
    data = small_torch.onnx_bytes(model.half(), x.half(), dynamic_batch=True)
    run = G.from_onnx(data).executor(warn_untuned=False, base_model=None)
    for batch in (1, 3):
        xb = np.random.default_rng(batch).standard_normal((batch, 3, 8, 8)).astype(np.float16)
        ours, theirs = run(xb)[0], onnxruntime_outputs(data, {"x": xb})[0]
        assert ours.dtype == np.float16 and ours.shape == theirs.shape == (batch, 5)
        np.testing.assert_allclose(ours.astype(np.float32), theirs.astype(np.float32), rtol=1e-2,
                                   atol=1e-2 * float(np.max(np.abs(theirs.astype(np.float32)))))
