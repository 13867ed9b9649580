"""Float16 ONNX models, computed in float32.

Exporters write float16 models (``model.half()`` before ``torch.onnx.export``, or a float16
conversion of a float32 model), but our kernels compute in float32. ``as_float32`` rewrites
such a model once, before import: float16 weights (initializers, ``Constant`` and
``ConstantOfShape`` values) become float32 arrays, casts to float16 become casts to float32
(so the exporter's ``Cast`` pairs around float32 islands — layer norm, softmax — become casts
of a tensor to its own type, which the importer drops), and the declared types of inputs,
outputs and intermediate values follow. The dtypes the model's inputs and outputs had are
returned beside it: the graph returns its outputs in them, so a caller gets float16 back
from a float16 model, computed more accurately than float16 arithmetic would.
"""
from __future__ import annotations

import numpy as np

#: ONNX element type of float16 and float32 (TensorProto.FLOAT16, TensorProto.FLOAT)
FLOAT16, FLOAT = 10, 1
#: attributes that name an element type a node produces (Cast's ``to``; ``dtype`` of
#: EyeLike, RandomNormal, RandomUniform and their -Like forms)
_TYPE_ATTRIBUTES = ("to", "dtype")


def _float32_tensor(tensor):
    """A float32 TensorProto of a float16 one (same name)."""
    from onnx import numpy_helper
    return numpy_helper.from_array(numpy_helper.to_array(tensor).astype(np.float32), tensor.name)


def _value_infos(graph):
    return list(graph.input) + list(graph.output) + list(graph.value_info)


def is_float16(model) -> bool:
    """Whether any input, output, value, weight or cast of the model's graph is float16."""
    graph = model.graph
    if any(v.type.tensor_type.elem_type == FLOAT16 for v in _value_infos(graph)):
        return True
    if any(t.data_type == FLOAT16 for t in graph.initializer):
        return True
    for node in graph.node:
        for a in node.attribute:
            if (a.name in _TYPE_ATTRIBUTES and a.i == FLOAT16) or (a.HasField("t") and a.t.data_type == FLOAT16):
                return True
    return False


def _io_dtypes(values) -> dict:
    return {v.name: "float16" for v in values if v.type.tensor_type.elem_type == FLOAT16}


def as_float32(model):
    """``(model, float16_io)``: a float32 copy of a float16 ``model`` (the model itself if it
    has no float16 part; the one given is never modified) and the names of its inputs and
    outputs that were float16 (``{"inputs": {name: "float16"}, "outputs": {...}}``)."""
    if not is_float16(model):
        return model, {"inputs": {}, "outputs": {}}
    from onnx import ModelProto
    model = ModelProto.FromString(model.SerializeToString())
    graph = model.graph
    io = {"inputs": _io_dtypes(graph.input), "outputs": _io_dtypes(graph.output)}
    for k, t in enumerate(graph.initializer):
        if t.data_type == FLOAT16:
            graph.initializer[k].CopyFrom(_float32_tensor(t))
    for v in _value_infos(graph):
        if v.type.tensor_type.elem_type == FLOAT16:
            v.type.tensor_type.elem_type = FLOAT
    for node in graph.node:
        for a in node.attribute:
            if a.name in _TYPE_ATTRIBUTES and a.i == FLOAT16:
                a.i = FLOAT
            if a.HasField("t") and a.t.data_type == FLOAT16:
                a.t.CopyFrom(_float32_tensor(a.t))
    return model, io


__all__ = ["as_float32", "is_float16"]
