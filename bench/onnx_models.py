"""The ONNX models of bench/tune_onnx.py, as files cached in bench/.cache (gitignored).

- resnet50, squeezenet: the ONNX model zoo's architectures shipped in the onnx wheel
  (``light_*.onnx``), their constant weights replaced by seeded random ones
  (``autosched.graph.onnx_zoo``);
- mobilenet_v2, bert: PyTorch modules written here as a PyTorch user writes them
  (torchvision's MobileNet-V2, NCHW; a Hugging Face style BERT encoder whose views read
  ``x.size()``), exported with ``torch.onnx.export(..., dynamo=False)`` with the batch and
  sequence axes dynamic: a real exporter's output, with its Shape/Gather/Unsqueeze/Concat
  chains, folded Conv-BatchNorm, Clip for ReLU6, Erf for GELU (``input_shapes`` fixes the
  axes at import). The module itself is PyTorch's baseline for these two.

``--smoke`` sizes are small versions of the same architectures.
"""
import math
import os
from dataclasses import dataclass

CACHE = os.path.join(os.path.dirname(os.path.abspath(__file__)), ".cache")
MODELS = ("resnet50", "squeezenet", "mobilenet_v2", "bert")


@dataclass
class ModelSource:
    """A model file, the static shapes of its inputs (for ``from_onnx(input_shapes=)``), the
    PyTorch module it came from (None for the zoo's light models) and example inputs for it."""
    name: str
    path: str
    input_shapes: dict = None
    torch_module: object = None
    example: tuple = ()


def _mobilenet_v2(torch, num_classes: int, config, last_channels: int, seed: int):
    nn = torch.nn

    def conv_bn(cin, cout, kernel, stride=1, groups=1, act=True):
        layers = [nn.Conv2d(cin, cout, kernel, stride, kernel // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
        return layers + ([nn.ReLU6(inplace=True)] if act else [])

    class InvertedResidual(nn.Module):
        def __init__(self, cin, cout, stride, t):
            super().__init__()
            hidden = cin * t
            layers = (conv_bn(cin, hidden, 1) if t != 1 else []) + conv_bn(hidden, hidden, 3, stride, hidden)
            self.body = nn.Sequential(*layers, *conv_bn(hidden, cout, 1, act=False))
            self.residual = stride == 1 and cin == cout

        def forward(self, x):
            return x + self.body(x) if self.residual else self.body(x)

    class MobileNetV2(nn.Module):
        def __init__(self):
            super().__init__()
            layers, cin = conv_bn(3, 32, 3, 2), 32
            for t, c, n, s in config:
                for i in range(n):
                    layers.append(InvertedResidual(cin, c, s if i == 0 else 1, t))
                    cin = c
            self.features = nn.Sequential(*layers, *conv_bn(cin, last_channels, 1))
            self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(last_channels, num_classes))

        def forward(self, x):
            x = nn.functional.adaptive_avg_pool2d(self.features(x), 1)
            return self.classifier(torch.flatten(x, 1))

    torch.manual_seed(seed)
    model = MobileNetV2()
    with torch.no_grad():            # batch-norm statistics that do something at inference
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.normal_(0, 0.1)
                m.running_var.uniform_(0.5, 1.5)
                m.weight.uniform_(0.5, 1.0)
                m.bias.normal_(0, 0.1)
    return model.eval()


def _bert(torch, vocab: int, hidden: int, layers: int, heads: int, ffn: int, max_positions: int, seed: int):
    nn = torch.nn

    class Embeddings(nn.Module):
        def __init__(self):
            super().__init__()
            self.word = nn.Embedding(vocab, hidden)
            self.position = nn.Embedding(max_positions, hidden)
            self.token_type = nn.Embedding(2, hidden)
            self.norm = nn.LayerNorm(hidden, eps=1e-12)

        def forward(self, ids):
            positions = torch.arange(ids.size(1), dtype=torch.long).unsqueeze(0)
            types = torch.zeros_like(ids)
            return self.norm(self.word(ids) + self.position(positions) + self.token_type(types))

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.q, self.k, self.v = (nn.Linear(hidden, hidden) for _ in range(3))
            self.out = nn.Linear(hidden, hidden)
            self.norm1 = nn.LayerNorm(hidden, eps=1e-12)
            self.up, self.down = nn.Linear(hidden, ffn), nn.Linear(ffn, hidden)
            self.norm2 = nn.LayerNorm(hidden, eps=1e-12)

        def heads(self, x):
            return x.view(x.size()[:-1] + (heads, hidden // heads)).permute(0, 2, 1, 3)

        def forward(self, x, mask):
            q, k, v = self.heads(self.q(x)), self.heads(self.k(x)), self.heads(self.v(x))
            scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(hidden // heads) + mask
            ctx = torch.matmul(torch.softmax(scores, dim=-1), v).permute(0, 2, 1, 3).contiguous()
            ctx = ctx.view(ctx.size()[:-2] + (hidden,))
            x = self.norm1(x + self.out(ctx))
            return self.norm2(x + self.down(nn.functional.gelu(self.up(x))))

    class Bert(nn.Module):
        def __init__(self):
            super().__init__()
            self.embeddings = Embeddings()
            self.layers = nn.ModuleList(Layer() for _ in range(layers))

        def forward(self, ids):
            mask = torch.ones(ids.size(), dtype=torch.float32)           # no padding: the exporter's mask chain
            mask = (1.0 - mask[:, None, None, :]) * -10000.0
            x = self.embeddings(ids)
            for layer in self.layers:
                x = layer(x, mask)
            return x

    torch.manual_seed(seed)
    model = Bert()
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim >= 2:
                p.normal_(0, 0.02)
    return model.eval()


def _export(torch, module, example, path: str, dynamic_axes: dict) -> None:
    """Export with the batch (and sequence) axes left open, as models are shipped: the
    exporter then writes the shape computations out as nodes instead of folding them."""
    import warnings
    tmp = path + ".part"
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, example, tmp, dynamo=False, opset_version=17, input_names=list(dynamic_axes),
                          output_names=["output"], dynamic_axes=dynamic_axes)
    os.replace(tmp, path)


def load(name: str, smoke: bool = False, seed: int = 0) -> ModelSource:
    """The model file of ``name`` (one of ``MODELS``), made and cached on first use."""
    os.makedirs(CACHE, exist_ok=True)
    suffix = "_smoke" if smoke else ""
    path = os.path.join(CACHE, f"{name}{suffix}_seed{seed}.onnx")
    if name in ("resnet50", "squeezenet"):
        if not os.path.exists(path):
            import onnx
            from autosched.graph.onnx_zoo import light_model, with_random_weights
            onnx.save(with_random_weights(light_model(name), seed), path)
        return ModelSource(name, path)
    import torch
    if name == "mobilenet_v2":
        config = ((1, 16, 1, 1), (6, 24, 1, 2)) if smoke else (
            (1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1))
        module = _mobilenet_v2(torch, 10 if smoke else 1000, config, 64 if smoke else 1280, seed)
        example = (torch.randn(1, 3, 32 if smoke else 224, 32 if smoke else 224),)
        axes = {"input": {0: "batch"}}
    elif name == "bert":
        sizes = dict(vocab=1000, hidden=64, layers=1, heads=4, ffn=128) if smoke else \
            dict(vocab=30522, hidden=768, layers=12, heads=12, ffn=3072)
        module = _bert(torch, max_positions=512, seed=seed, **sizes)
        example = (torch.randint(0, sizes["vocab"], (1, 16 if smoke else 128)),)
        axes = {"input_ids": {0: "batch", 1: "sequence"}}
    else:
        raise SystemExit(f"unknown model {name!r}; expected one of {', '.join(MODELS)}")
    if not os.path.exists(path):
        _export(torch, module, example, path, axes)
    shapes = {k: tuple(x.shape) for k, x in zip(axes, example)}
    return ModelSource(name, path, shapes, module, example)
