"""Tiny PyTorch models for the front-door tests (float16 export, from_torch, torch.compile):
a CNN (conv, batch norm, ReLU, pooling, linear) and a transformer block (layer norm,
multi-head attention, GELU MLP). Seeded; import only after ``pytest.importorskip("torch")``."""
from __future__ import annotations

import io
import warnings

import torch


class SmallCNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.conv2 = torch.nn.Conv2d(8, 8, 3, stride=2, padding=1)
        self.fc = torch.nn.Linear(8, 5)

    def forward(self, x):
        y = torch.relu(self.bn(self.conv(x)))
        y = torch.relu(self.conv2(y))
        return self.fc(y.mean((2, 3)))


class SmallTransformer(torch.nn.Module):
    """One pre-norm encoder block over (batch, sequence, 16)."""

    def __init__(self, width: int = 16, heads: int = 2):
        super().__init__()
        self.ln1 = torch.nn.LayerNorm(width)
        self.attn = torch.nn.MultiheadAttention(width, heads, batch_first=True)
        self.ln2 = torch.nn.LayerNorm(width)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(width, 2 * width), torch.nn.GELU(),
                                       torch.nn.Linear(2 * width, width))

    def forward(self, x):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


def cnn(seed: int = 0):
    """(model in eval mode, example input (1, 3, 8, 8))."""
    torch.manual_seed(seed)
    model = SmallCNN().eval()
    with torch.no_grad():               # batch-norm statistics that are not the identity
        model.bn.running_mean.uniform_(-0.5, 0.5)
        model.bn.running_var.uniform_(0.5, 1.5)
    return model, torch.randn(1, 3, 8, 8)


def transformer(seed: int = 0):
    """(model in eval mode, example input (1, 6, 16))."""
    torch.manual_seed(seed)
    return SmallTransformer().eval(), torch.randn(1, 6, 16)


def onnx_bytes(model, example, dynamic_batch: bool = False) -> bytes:
    """The model exported by PyTorch's TorchScript-based ONNX exporter (opset 17), input "x";
    with ``dynamic_batch`` its axis 0 is open ("batch")."""
    f = io.BytesIO()
    axes = {"x": {0: "batch"}, "y": {0: "batch"}} if dynamic_batch else None
    with warnings.catch_warnings():     # the exporter's deprecation and tracer warnings
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (example,), f, opset_version=17, dynamo=False, input_names=["x"],
                          output_names=["y"], dynamic_axes=axes)
    return f.getvalue()
