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


#: (operator, input index) -> the values a vector there takes: batch-norm scales, means and
#: variances, biases. Scales below 1 keep the activations of deep residual networks (whose
#: random statistics do not normalise anything) from growing block after block.
_VECTORS = {("BatchNormalization", 1): ("uniform", 0.2, 0.5), ("BatchNormalization", 3): ("normal", 0.0, 0.1),
            ("BatchNormalization", 4): ("uniform", 0.5, 1.5)}


def with_random_weights(model, seed: int = 0):
    """A copy of ``model`` whose float ``ConstantOfShape`` outputs of a constant shape are
    initializers drawn from ``seed``: He-normal (std √(2 / fan-in)) for weights of rank ≥ 2;
    vectors by what reads them (batch-norm scales U(0.2, 0.5), means N(0, 0.1), variances
    U(0.5, 1.5), biases N(0, 0.1)). The shape initializers they were made from are dropped."""
    import onnx
    from onnx import numpy_helper
    model = onnx.ModelProto.FromString(model.SerializeToString())
    rng = np.random.default_rng(seed)
    shapes = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    readers = {i: (node.op_type, k) for node in model.graph.node for k, i in enumerate(node.input)}
    keep, made, dropped = [], [], set()
    for node in model.graph.node:
        value = next((a.t for a in node.attribute if a.name == "value"), None)
        is_float = value is None or value.data_type == onnx.TensorProto.FLOAT
        if node.op_type == "ConstantOfShape" and node.input[0] in shapes and is_float:
            shape = tuple(int(s) for s in shapes[node.input[0]])
            if len(shape) >= 2:
                array = rng.standard_normal(shape) * math.sqrt(2.0 / max(1, math.prod(shape[1:])))
            else:
                kind, a, b = _VECTORS.get(readers.get(node.output[0]), ("normal", 0.0, 0.1))
                array = rng.uniform(a, b, shape) if kind == "uniform" else rng.normal(a, b, shape)
            made.append(numpy_helper.from_array(array.astype(np.float32), node.output[0]))
            dropped.add(node.input[0])
        else:
            keep.append(node)
    still_read = {i for node in keep for i in node.input}
    inits = [t for t in model.graph.initializer if t.name not in dropped or t.name in still_read] + made
    inputs = [i for i in model.graph.input if i.name not in dropped or i.name in still_read]
    del model.graph.node[:], model.graph.initializer[:], model.graph.input[:]
    model.graph.node.extend(keep)
    model.graph.initializer.extend(inits)
    model.graph.input.extend(inputs)
    return model
