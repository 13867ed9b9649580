"""Models nobody here wrote: tiny Hugging Face BERT, RoBERTa, DistilBERT, GPT-2 and ViT (2
layers, hidden 32, built from their config classes, no download) and a small torchvision
Swin transformer, exported by PyTorch's exporters, imported, run with default schedules and
matched against onnxruntime. Skipped without torch, transformers, onnx or onnxruntime."""
from __future__ import annotations

import importlib.util
import os
import sys

import numpy as np
import pytest

pytest.importorskip("onnx", reason="ONNX import needs the onnx package")
ort = pytest.importorskip("onnxruntime", reason="checking imported models needs onnxruntime")
pytest.importorskip("torch", reason="exporting models needs torch")

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
import torch_models  # noqa: E402

from autosched import graph as G  # noqa: E402
from autosched.graph.onnx import from_onnx  # noqa: E402


def _matches_onnxruntime(model_bytes: bytes, rtol: float = 1e-4) -> None:
    graph = from_onnx(model_bytes)
    inputs = graph.random_inputs(0)
    ours = G.GraphExecutor(G.partition(graph), warn_untuned=False).run(*inputs)
    sess = ort.InferenceSession(model_bytes, providers=["CPUExecutionProvider"])
    theirs = sess.run(None, {i.name: x for i, x in zip(graph.inputs, inputs)})
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol * float(np.max(np.abs(b))))


@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
@pytest.mark.parametrize("name", sorted(torch_models.TRANSFORMERS))
def test_transformers_models_match_onnxruntime(name, exporter):
    pytest.importorskip("transformers", reason="the Hugging Face models need transformers")
    if exporter == "dynamo":
        pytest.importorskip("onnxscript", reason="the dynamo exporter needs onnxscript")
    module, example = torch_models.transformers_model(name, tiny=True, sequence=8)
    _matches_onnxruntime(torch_models.export_onnx(module, example, exporter))


def _torchvision():
    if importlib.util.find_spec("torchvision") is None:     # importing it needs torch_models' shim first
        pytest.skip("torchvision is not installed")
    return torch_models.import_torchvision()


class _Ops:
    """``torch.ops`` of a torch that gets torchvision's operators once a library loads."""
    def __init__(self, loads: bool):
        self.torchvision, self.loaded, self.loads = type("Namespace", (), {})(), [], loads

    def load_library(self, path):
        self.loaded.append(path)
        if not self.loads:
            raise OSError(f"{path}: undefined symbol")     # a torchvision built for another torch
        self.torchvision.nms = object()


@pytest.mark.parametrize("loads", [True, False])
def test_torchvision_operators_are_loaded_before_any_shim_is_defined(loads, monkeypatch, tmp_path):
    """Where torchvision's compiled operators load (a CUDA torch), they must be loaded, not
    shimmed: defining the schemas first would make the library abort the process."""
    (tmp_path / "torchvision").mkdir()
    (tmp_path / "torchvision" / "__init__.py").write_text("")
    (tmp_path / "torchvision" / "_C.so").write_bytes(b"")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "torchvision", raising=False)
    fake = type("Torch", (), {"ops": _Ops(loads)})()
    torch_models._load_torchvision_ops(fake)
    assert fake.ops.loaded == [str(tmp_path / "torchvision" / "_C.so")]
    assert hasattr(fake.ops.torchvision, "nms") == loads


def test_torchvision_vision_transformer_matches_onnxruntime():
    """torchvision's ViT in eval mode takes nn.MultiheadAttention's fused fast path, which the
    TorchScript exporter cannot write; export_onnx turns the fast path off."""
    import torch
    torchvision = _torchvision()
    torch.manual_seed(0)
    module = torchvision.models.vision_transformer.VisionTransformer(
        image_size=32, patch_size=8, num_layers=1, num_heads=2, hidden_dim=16, mlp_dim=32, num_classes=10).eval()
    _matches_onnxruntime(torch_models.export_onnx(module, (torch.randn(1, 3, 32, 32),)))


def test_swin_transformer_matches_onnxruntime():
    """Swin's exporter output holds Pads of zero width and rolled windows (the model of the
    torchvision family that failed in partitioning), at a small size."""
    import torch
    torchvision = _torchvision()
    torch.manual_seed(0)
    module = torchvision.models.swin_transformer.SwinTransformer(
        patch_size=[4, 4], embed_dim=16, depths=[1, 1], num_heads=[1, 2], window_size=[4, 4],
        num_classes=10).eval()
    _matches_onnxruntime(torch_models.export_onnx(module, (torch.randn(1, 3, 32, 32),)))
