"""Half-precision ONNX models (float16 and bfloat16), computed in float32.

Exporters write half-precision models (``model.half()`` or ``model.bfloat16()`` before
``torch.onnx.export``, or a conversion of a float32 model), but our kernels compute in
float32. ``as_float32`` rewrites such a model once, before import: half weights
(initializers, ``Constant`` and ``ConstantOfShape`` values) become float32 arrays, casts to
a half type become casts to float32 (so the exporter's ``Cast`` pairs around float32 islands
— layer norm, softmax — become casts of a tensor to its own type, which the importer drops),
and the declared types of inputs, outputs and intermediate values follow. The dtypes the
model's inputs and outputs had are returned beside it: the graph returns its outputs in
them, so a caller gets float16 (bfloat16: ``ml_dtypes.bfloat16``, which onnx depends on)
back, computed more accurately than half arithmetic would.
"""
from __future__ import annotations

import numpy as np

#: ONNX element types of the half types (TensorProto.FLOAT16, BFLOAT16) and their numpy names
HALF_TYPES = {10: "float16", 16: "bfloat16"}
#: ONNX element type of float32 (TensorProto.FLOAT)
FLOAT = 1
#: attributes that name an element type a node produces (Cast's ``to``; ``dtype`` of
#: EyeLike, RandomNormal, RandomUniform and their -Like forms)
_TYPE_ATTRIBUTES = ("to", "dtype")


def _float32_tensor(tensor):
    """A float32 TensorProto of a half one (same name)."""
    from onnx import numpy_helper
    return numpy_helper.from_array(numpy_helper.to_array(tensor).astype(np.float32), tensor.name)


def _value_infos(graph):
    return list(graph.input) + list(graph.output) + list(graph.value_info)


def is_half(model) -> bool:
    """Whether any input, output, value, weight or cast of the model's graph is float16 or
    bfloat16."""
    graph = model.graph
    if any(v.type.tensor_type.elem_type in HALF_TYPES for v in _value_infos(graph)):
        return True
    if any(t.data_type in HALF_TYPES for t in graph.initializer):
        return True
    for node in graph.node:
        for a in node.attribute:
            if (a.name in _TYPE_ATTRIBUTES and a.i in HALF_TYPES) or (a.HasField("t") and a.t.data_type in HALF_TYPES):
                return True
    return False


def _io_dtypes(values) -> dict:
    return {v.name: HALF_TYPES[t] for v in values if (t := v.type.tensor_type.elem_type) in HALF_TYPES}


def as_float32(model):
    """``(model, half_io)``: a float32 copy of a half-precision ``model`` (the model itself
    if it has no half part; the one given is never modified) and the names of its inputs
    and outputs that were half, with their dtype (``{"inputs": {name: "float16"},
    "outputs": {...}}``)."""
    if not is_half(model):
        return model, {"inputs": {}, "outputs": {}}
    from onnx import ModelProto
    model = ModelProto.FromString(model.SerializeToString())
    graph = model.graph
    io = {"inputs": _io_dtypes(graph.input), "outputs": _io_dtypes(graph.output)}
    for k, t in enumerate(graph.initializer):
        if t.data_type in HALF_TYPES:
            graph.initializer[k].CopyFrom(_float32_tensor(t))
    for v in _value_infos(graph):
        if v.type.tensor_type.elem_type in HALF_TYPES:
            v.type.tensor_type.elem_type = FLOAT
    for node in graph.node:
        for a in node.attribute:
            if a.name in _TYPE_ATTRIBUTES and a.i in HALF_TYPES:
                a.i = FLOAT
            if a.HasField("t") and a.t.data_type in HALF_TYPES:
                a.t.CopyFrom(_float32_tensor(a.t))
    return model, io


__all__ = ["HALF_TYPES", "as_float32", "is_half"]
