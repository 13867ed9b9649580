"""PyTorch modules as graphs: ``from_torch(module, example_inputs)``.

A module enters through one of PyTorch's own ONNX exporters, in memory, and then the ONNX
importer (``from_onnx``): everything after import is shared with ONNX files. Two exporters:

- ``"torchscript"`` (default): ``torch.onnx.export(dynamo=False)``, tracing the module on the
  example inputs; needs nothing beyond torch and onnx;
- ``"dynamo"``: ``torch.onnx.export(dynamo=True)``, which captures the module with
  ``torch.export`` and translates its ATen graph (needs the ``onnxscript`` package).

torch is imported only when a function here is called.
"""
from __future__ import annotations

import inspect
import io
import logging
import warnings

EXPORTERS = ("torchscript", "dynamo")
#: the opset the exporters are asked for (one the importer knows and both exporters write)
OPSET = 18


def _torch():
    try:
        import torch
    except ImportError:
        raise ImportError("from_torch and the torch.compile backend need PyTorch: pip install 'autosched[torch]'") \
            from None
    return torch


def input_names(module, count: int) -> list:
    """Names for the ONNX inputs: the module's ``forward`` parameters where they can be read
    (``x``, ``input_ids``), else ``input0``, ``input1``..."""
    try:
        params = [p.name for p in inspect.signature(module.forward).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    return params[:count] if len(params) >= count else [f"input{k}" for k in range(count)]


def export_onnx(module, example_inputs: tuple, exporter: str = "torchscript", names=None,
                dynamic_axes: dict | None = None) -> bytes:
    """The ONNX model of ``module`` run on ``example_inputs``, as bytes (nothing is written
    to disk). ``dynamic_axes`` ({input: {axis: name}}) leaves those axes open."""
    torch = _torch()
    if exporter not in EXPORTERS:
        raise ValueError(f"exporter={exporter!r}; expected one of {EXPORTERS}")
    names = list(names) if names is not None else input_names(module, len(example_inputs))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")      # the exporters' deprecation and tracer warnings
        if exporter == "torchscript":
            f = io.BytesIO()
            with torch.enable_grad():   # else nn.MultiheadAttention takes a fast path this exporter cannot write
                torch.onnx.export(module, tuple(example_inputs), f, opset_version=OPSET, dynamo=False,
                                  input_names=names, dynamic_axes=dynamic_axes)
            return f.getvalue()
        try:
            import onnxscript  # noqa: F401 - the dynamo exporter needs it
        except ImportError:
            raise ImportError("exporter='dynamo' needs the onnxscript package: pip install onnxscript") from None
        shapes = None
        if dynamic_axes:
            dim = torch.export.Dim
            shapes = [{axis: dim(label) for axis, label in dynamic_axes.get(n, {}).items()} or None for n in names]
        level = logging.getLogger("torch.onnx").level
        logging.getLogger("torch.onnx").setLevel(logging.ERROR)   # its progress lines
        try:
            program = torch.onnx.export(module, tuple(example_inputs), dynamo=True, opset_version=OPSET,
                                        input_names=names, dynamic_shapes=shapes, verbose=False)
        finally:
            logging.getLogger("torch.onnx").setLevel(level)
        return program.model_proto.SerializeToString()


def from_torch(module, example_inputs, exporter: str = "torchscript", dynamic_axes: dict | None = None,
               name: str | None = None):
    """The ``Graph`` of a PyTorch module (in eval mode, as it is) on ``example_inputs`` (a
    tensor or a tuple of them): exported to ONNX in memory by ``exporter`` ("torchscript" or
    "dynamo") and imported by ``from_onnx``. Its inputs are named after ``forward``'s
    parameters. ``dynamic_axes`` ({input name: {axis: name}}) keeps those axes open: the
    result is then a ``DynamicModel`` (run it through its ``executor()``)."""
    from .onnx import from_onnx
    torch = _torch()
    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"from_torch expects a torch.nn.Module, got {type(module).__name__}")
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    example_inputs = tuple(example_inputs)
    bad = [type(x).__name__ for x in example_inputs if not isinstance(x, torch.Tensor)]
    if bad:
        raise TypeError(f"from_torch: example_inputs must be tensors, got {bad}")
    data = export_onnx(module, example_inputs, exporter, dynamic_axes=dynamic_axes)
    return from_onnx(data, name=name or type(module).__name__)


__all__ = ["from_torch", "export_onnx", "EXPORTERS"]
