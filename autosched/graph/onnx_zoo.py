"""Real models without the internet: the ONNX model zoo's architectures that the ``onnx``
wheel ships as test data (``onnx/backend/test/data/light/light_*.onnx``: ResNet-50,
SqueezeNet, Inception, DenseNet...). Their weights are made by ``ConstantOfShape`` nodes,
all 0.02; ``with_random_weights`` replaces them with seeded random values of a sensible
scale, so that a wrong layout or a mixed-up axis shows in the outputs."""
from __future__ import annotations

import math
import os

import numpy as np


def light_models_dir() -> str:
    import onnx
    return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")


def light_model_names() -> list[str]:
    return sorted(f[len("light_"):-len(".onnx")] for f in os.listdir(light_models_dir()) if f.endswith(".onnx"))


def light_model_path(name: str) -> str:
    path = os.path.join(light_models_dir(), f"light_{name}.onnx")
    if not os.path.exists(path):
        raise ValueError(f"no light model {name!r} in the onnx package; expected one of {light_model_names()}")
    return path


def light_model(name: str):
    """The ``onnx.ModelProto`` of a light model (``light_model_names()``: resnet50, squeezenet...)."""
    import onnx
    return onnx.load(light_model_path(name))


def with_random_weights(model, seed: int = 0):
    """A copy of ``model`` whose float ``ConstantOfShape`` outputs of a constant shape are
    initializers drawn from ``seed``: He-normal (std √(2 / fan-in)) for weights of rank ≥ 2,
    uniform in [0.5, 1.5) for vectors (biases, batch-norm scales and variances stay positive)."""
    import onnx
    from onnx import numpy_helper
    model = onnx.ModelProto.FromString(model.SerializeToString())
    rng = np.random.default_rng(seed)
    shapes = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    keep, made = [], []
    for node in model.graph.node:
        value = next((a.t for a in node.attribute if a.name == "value"), None)
        is_float = value is None or value.data_type == onnx.TensorProto.FLOAT
        if node.op_type == "ConstantOfShape" and node.input[0] in shapes and is_float:
            shape = tuple(int(s) for s in shapes[node.input[0]])
            if len(shape) >= 2:
                array = rng.standard_normal(shape) * math.sqrt(2.0 / max(1, math.prod(shape[1:])))
            else:
                array = rng.uniform(0.5, 1.5, shape)
            made.append(numpy_helper.from_array(array.astype(np.float32), node.output[0]))
        else:
            keep.append(node)
    del model.graph.node[:]
    model.graph.node.extend(keep)
    model.graph.initializer.extend(made)
    return model
