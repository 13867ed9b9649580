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
from autosched.graph.onnx_half import as_float32, is_half  # noqa: E402

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


ELEM_TYPES = {"float16": TensorProto.FLOAT16, "bfloat16": TensorProto.BFLOAT16, "float32": TensorProto.FLOAT}


def mlp_with_cast_pairs(dtype: str = "float16", values_of: str | None = None) -> bytes:
    """A half-precision MLP (``dtype``) written as converters write one: half weights, a
    float32 island (softmax between Casts), a half Constant and a Cast back to half.
    ``values_of``: round the weights through that dtype (a float32 twin of a bfloat16 model)."""
    H = ELEM_TYPES[dtype]
    rng = np.random.default_rng(0)

    def weight(values, name):
        return numpy_helper.from_array(values.astype(values_of or dtype).astype(dtype), name)
    w1 = weight(0.3 * rng.standard_normal((16, 24)), "w1")
    b1 = weight(0.1 * rng.standard_normal(24), "b1")
    w2 = weight(0.3 * rng.standard_normal((24, 8)), "w2")
    two = weight(np.array([2.0]), "two")
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
    assert model.SerializeToString() == before and is_half(model) and not is_half(converted)
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


def test_bfloat16_model_matches_its_float32_twin_on_onnxruntime():
    """onnxruntime's CPU kernels do not run bfloat16 (Relu, MatMul...), so the reference is the
    float32 model with the same (bfloat16) weights, on the same inputs; ours answers in
    bfloat16, as the model declares."""
    ml_dtypes = pytest.importorskip("ml_dtypes", reason="bfloat16 arrays need ml_dtypes (onnx depends on it)")
    graph = G.from_onnx(mlp_with_cast_pairs("bfloat16"))
    assert graph.input_dtypes == graph.output_dtypes == ["bfloat16"]
    assert all(n.dtype == "float32" for n in graph.nodes)
    x = np.random.default_rng(1).standard_normal((3, 16)).astype(ml_dtypes.bfloat16)
    ours, = G.GraphExecutor(G.partition(graph), warn_untuned=False).run(x)
    want, = onnxruntime_outputs(mlp_with_cast_pairs("float32", values_of="bfloat16"), {"x": x.astype(np.float32)})
    assert ours.dtype == ml_dtypes.bfloat16 and ours.shape == want.shape
    np.testing.assert_allclose(ours.astype(np.float32), want, rtol=1e-2, atol=1e-2 * float(np.abs(want).max()))
    assert graph.random_inputs(0)[0].dtype == ml_dtypes.bfloat16


def test_command_line_checks_a_bfloat16_model_against_numpy_when_onnxruntime_cannot_run_it(tmp_path, capsys):
    pytest.importorskip("ml_dtypes", reason="bfloat16 arrays need ml_dtypes (onnx depends on it)")
    from autosched.cli import main
    path = tmp_path / "mlp_bf16.onnx"
    path.write_bytes(mlp_with_cast_pairs("bfloat16"))
    assert main(["tune", str(path), "--trials", "0", "--no-records-db", "--no-base-model"]) == 0
    out = capsys.readouterr().out
    assert "onnxruntime cannot run this model" in out and "checked against the numpy reference: OK" in out
