"""Models nobody here wrote, as ONNX: torchvision's classification models and five Hugging
Face ``transformers`` architectures (random weights, batch 1), exported by PyTorch's own
exporter, and the ONNX model zoo's ``light_*.onnx`` files of the onnx wheel.

``import_torchvision()`` imports torchvision against a CPU-only torch whose build lacks the
``torchvision::nms`` operators that torchvision's fake registrations expect (the import
otherwise fails with ``operator torchvision::nms does not exist``): it loads torchvision's
compiled operators first, as torchvision would, and defines the two schemas only when they
do not load. (Defining them before a library that does load, as on a CUDA machine, would
abort the process: the library defines them again.)
"""
from __future__ import annotations

import glob
import importlib.util
import os
import tempfile

#: the library that defines torchvision's missing operator schemas (kept alive: dropping it
#: would remove the definitions)
_TORCHVISION_SHIM = []

#: Hugging Face model name -> (config class, model class) in ``transformers``
TRANSFORMERS = {"bert": ("BertConfig", "BertModel"), "roberta": ("RobertaConfig", "RobertaModel"),
                "distilbert": ("DistilBertConfig", "DistilBertModel"), "gpt2": ("GPT2Config", "GPT2Model"),
                "vit": ("ViTConfig", "ViTModel")}

#: a tiny configuration per architecture (2 layers, hidden 32): what the tests export
TINY_CONFIGS = {
    "bert": dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                 vocab_size=100, max_position_embeddings=64),
    "roberta": dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                    vocab_size=100, max_position_embeddings=64),
    "distilbert": dict(dim=32, n_layers=2, n_heads=2, hidden_dim=64, vocab_size=100, max_position_embeddings=64),
    "gpt2": dict(n_embd=32, n_layer=2, n_head=2, vocab_size=100, n_positions=64),
    "vit": dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, image_size=32,
                patch_size=8),
}


def _load_torchvision_ops(torch) -> None:
    """torchvision's compiled operators (its ``_C`` library), where they load against this
    torch; nothing where they do not (torchvision then imports without them)."""
    spec = importlib.util.find_spec("torchvision")
    for folder in (spec and spec.submodule_search_locations) or ():
        for library in glob.glob(os.path.join(folder, "_C.*")):
            try:
                torch.ops.load_library(library)
            except (ImportError, OSError):
                pass


def import_torchvision():
    """``torchvision``, importable against a CPU torch that lacks its nms operators."""
    import torch
    if not hasattr(torch.ops.torchvision, "nms"):
        _load_torchvision_ops(torch)
    if not hasattr(torch.ops.torchvision, "nms") and not _TORCHVISION_SHIM:
        lib = torch.library.Library("torchvision", "DEF")
        lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        lib.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        _TORCHVISION_SHIM.append(lib)
    import torchvision
    return torchvision


def torchvision_names() -> list[str]:
    """Every classification model of torchvision (``list_models(module=torchvision.models)``)."""
    torchvision = import_torchvision()
    return sorted(torchvision.models.list_models(module=torchvision.models))


def _image_size(name: str) -> int:
    """The input extent a torchvision model needs: 299 for Inception-V3, 224 otherwise."""
    return 299 if name == "inception_v3" else 224


def torchvision_model(name: str, seed: int = 0):
    """(module in eval mode with random weights, example inputs) of a torchvision model;
    weight matrices that torchvision initialises to zero are drawn from N(0, 0.02)."""
    import torch
    torchvision = import_torchvision()
    torch.manual_seed(seed)
    kwargs = {"aux_logits": False, "init_weights": True} if name in ("inception_v3", "googlenet") else {}
    module = torchvision.models.get_model(name, weights=None, **kwargs).eval()
    with torch.no_grad():    # zero-initialised matrices (ViT's head) would make every output 0
        for p in module.parameters():
            if p.ndim >= 2 and not p.any():
                p.normal_(0.0, 0.02)
    size = _image_size(name)
    return module, (torch.randn(1, 3, size, size),)


def _last_hidden_state(model):
    """``model`` called with one positional input, returning its last hidden state as one
    tensor (the exporters trip over the Hugging Face models' keyword arguments and outputs)."""
    import torch

    class LastHiddenState(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, x):
            return self.model(x).last_hidden_state

    return LastHiddenState()


def transformers_model(name: str, tiny: bool = False, sequence: int = 128, seed: int = 0):
    """(module in eval mode with random weights, example inputs) of a Hugging Face model:
    default configuration (or ``TINY_CONFIGS``), batch 1, ``sequence`` tokens (ViT: an image)."""
    import torch
    import_torchvision()          # transformers imports torchvision where it is installed
    import transformers
    if name not in TRANSFORMERS:
        raise ValueError(f"unknown transformers model {name!r}; expected one of {', '.join(TRANSFORMERS)}")
    config_class, model_class = (getattr(transformers, c) for c in TRANSFORMERS[name])
    config = config_class(**(TINY_CONFIGS[name] if tiny else {}))
    torch.manual_seed(seed)
    module = _last_hidden_state(model_class(config)).eval()
    if name == "vit":
        return module, (torch.randn(1, 3, config.image_size, config.image_size),)
    generator = torch.Generator().manual_seed(seed)
    return module, (torch.randint(0, config.vocab_size, (1, sequence), generator=generator),)


def export_onnx_file(module, example: tuple, path: str, exporter: str = "torchscript",
                     opset: int | None = None) -> str:
    """Export ``module`` on ``example`` to ``path`` with PyTorch's TorchScript exporter
    (``dynamo=False``, opset 17 by default) or its dynamo exporter (``dynamo=True``, opset 18:
    asked for 17 it writes Splits with opset 18's ``num_outputs``), static shapes; a model
    over protobuf's 2 GiB keeps its weights in external data beside ``path``."""
    import torch
    if exporter not in ("torchscript", "dynamo"):
        raise ValueError(f"exporter {exporter!r}: expected 'torchscript' or 'dynamo'")
    # nn.MultiheadAttention's fast path (eval mode, no grad: torchvision's ViTs) is one fused
    # operator the TorchScript exporter cannot write; the exporters want the plain operators
    fastpath = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        with torch.no_grad():
            if exporter == "dynamo":
                program = torch.onnx.export(module, example, dynamo=True, opset_version=opset or 18, verbose=False)
                program.save(path)
            else:
                torch.onnx.export(module, example, path, opset_version=opset or 17, dynamo=False)
    finally:
        torch.backends.mha.set_fastpath_enabled(fastpath)
    return path


def export_onnx(module, example: tuple, exporter: str = "torchscript", opset: int | None = None) -> bytes:
    """The ONNX bytes of a model under 2 GiB (``export_onnx_file``)."""
    with tempfile.TemporaryDirectory(prefix="export_onnx_") as tmp:
        path = export_onnx_file(module, example, os.path.join(tmp, "model.onnx"), exporter, opset)
        with open(path, "rb") as f:
            return f.read()
