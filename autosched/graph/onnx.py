"""Models from ONNX files: ``from_onnx(model_or_path, input_shapes=None) -> Graph`` (or a
``DynamicModel`` where the model leaves input axes open and no shapes are given).

The model is parsed with the ``onnx`` package (an optional dependency, imported here only),
its shapes inferred by ONNX's shape inference, and its nodes walked in order:

- a node whose inputs are all known at import (initializers, ``Constant``, the outputs of
  earlier folded nodes) is evaluated there by ONNX's reference implementation
  (``onnx.reference``), so ``ConstantOfShape`` weights and the ``Shape -> Gather ->
  Unsqueeze -> Concat -> Reshape`` chains of exporters become constants; ``Shape`` and
  ``Size`` of a run-time tensor fold from its static shape;
- every other node becomes graph nodes through its converter (``onnx_ops``), channel-last
  (``onnx_layout``): weights are rearranged here, once, and transposes appear only where
  the model's data enters or leaves a convolutional part.

A model with operators that cannot be imported fails with one ``UnsupportedModelError``
listing each unsupported operator, the reason, its node names and the model's opset; no
graph is returned half-converted. Every converted tensor's shape is checked against ONNX's
shape inference, so a converter that mistook a shape fails at import, not at run time.
"""
from __future__ import annotations

import functools
import math
import os
from collections import defaultdict

import numpy as np

from .dynamic import DynamicModel, declared_dims
from .graph import Graph, topological_order
from .onnx_half import as_float32
from .onnx_layout import Builder, Value, identity
from . import onnx_index, onnx_nn, onnx_pointwise  # noqa: F401 - they register their converters
from .onnx_ops import CONVERTERS, ONNX_DTYPES, OnnxNode, Unsupported

#: the opsets of the default ONNX domain that the importer knows
OPSETS = range(9, 22)
_DEFAULT_DOMAINS = ("", "ai.onnx")


class UnsupportedModelError(ValueError):
    """The model holds operators the importer cannot convert: ``unsupported`` maps
    (operator type, reason) to the names of the nodes."""

    def __init__(self, message: str, unsupported: dict, opset: int):
        super().__init__(message)
        self.unsupported = unsupported
        self.opset = opset


def _onnx():
    try:
        import onnx
    except ImportError:
        raise ImportError("importing ONNX models needs the onnx package: pip install 'autosched[onnx]'") from None
    return onnx


def load_model(model_or_path):
    """An ``onnx.ModelProto`` from a path, bytes or a ModelProto."""
    onnx = _onnx()
    if isinstance(model_or_path, onnx.ModelProto):
        return model_or_path
    if isinstance(model_or_path, (bytes, bytearray)):
        return onnx.load_from_string(bytes(model_or_path))
    if isinstance(model_or_path, (str, os.PathLike)):
        if not os.path.exists(model_or_path):
            raise FileNotFoundError(f"no ONNX model at {os.fspath(model_or_path)!r}")
        return onnx.load(os.fspath(model_or_path))
    raise TypeError(f"from_onnx expects a path, bytes or an onnx.ModelProto, got {type(model_or_path).__name__}")


def model_opset(model) -> int:
    """The version of the default ONNX domain the model imports."""
    versions = [o.version for o in model.opset_import if o.domain in _DEFAULT_DOMAINS]
    if not versions:
        raise ValueError("the model imports no opset of the default ONNX domain")
    return max(versions)


def _runtime_inputs(model) -> list:
    initialized = {t.name for t in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in initialized]


def _static_shape(value_info):
    dims = value_info.type.tensor_type.shape.dim
    shape = tuple(d.dim_value if d.HasField("dim_value") else None for d in dims)
    return shape if all(s is not None and s > 0 for s in shape) else None


def fix_input_shapes(model, input_shapes):
    """A copy of ``model`` whose run-time inputs have the static shapes given (by name);
    every input must end up with a fully known shape."""
    onnx = _onnx()
    inputs = _runtime_inputs(model)
    names = [i.name for i in inputs]
    given = dict(input_shapes or {})
    unknown = [k for k in given if k not in names]
    if unknown:
        raise ValueError(f"input_shapes names {unknown}, which are not inputs of the model; its inputs: {names}")
    if given:
        model = onnx.ModelProto.FromString(model.SerializeToString())
        inputs = _runtime_inputs(model)
    missing = []
    for i in inputs:
        if i.name in given:
            shape = tuple(int(s) for s in given[i.name])
            if any(s < 1 for s in shape):
                raise ValueError(f"input_shapes['{i.name}'] = {shape}: every extent must be positive")
            dims = i.type.tensor_type.shape.dim
            del dims[:]
            for s in shape:
                dims.add().dim_value = s
        if _static_shape(i) is None:
            dims = [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?")
                    for d in i.type.tensor_type.shape.dim]
            missing.append(f"'{i.name}' {dims}")
    if missing:
        raise ValueError(f"the model's inputs {', '.join(missing)} have no static shape; give them with "
                         f"input_shapes={{name: shape}}")
    return model


def inferred_shapes(model) -> dict:
    """ONNX's shape inference's static shapes by tensor name. Its data propagation (the values
    of shape chains) materialises a Range's output whatever its length (10**12 elements of a
    hostile model never end), so a model with a Range is inferred without it."""
    onnx = _onnx()
    data_prop = not any(node.op_type == "Range" for node in model.graph.node)
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False, data_prop=data_prop)
    except Exception:  # noqa: BLE001 - inference is a check; the conversion computes every shape itself
        return {}
    shapes = {}
    for vi in list(inferred.graph.value_info) + list(inferred.graph.output):
        dims = vi.type.tensor_type.shape.dim
        if dims and all(d.HasField("dim_value") for d in dims):
            shapes[vi.name] = tuple(d.dim_value for d in dims)
    return shapes


def node_attributes(node) -> dict:
    """A node's attributes as Python values (strings decoded)."""
    from onnx import helper
    attrs = {}
    for a in node.attribute:
        v = helper.get_attribute_value(a)
        attrs[a.name] = v.decode() if isinstance(v, bytes) else v
    return attrs


#: the most elements a constant made at import may have (1 GiB of float32): a hostile model's
#: ConstantOfShape of 10**12 elements is refused, not allocated
MAX_FOLDED_ELEMENTS = 1 << 28

#: why operators that have no converter have none (the rest: "no converter")
_NOT_CONVERTED = {op: "its output's shape depends on run-time values"
                  for op in ("Range", "NonZero", "Unique", "NonMaxSuppression", "Compress")}

def _why_not_converted(op_type: str) -> str:
    return _NOT_CONVERTED.get(op_type, "no converter")


#: operators never evaluated at import: their subgraphs may read names from the enclosing
#: graph, and a Loop's trip count may be any int64 (10**12 iterations would never end)
_NOT_FOLDED = ("Loop", "Scan", "If", "SequenceMap")


def _take_along_axis(node, inputs) -> list:
    data, indices = np.asarray(inputs[0]), np.asarray(inputs[1], np.int64)
    axis = int(node_attributes(node).get("axis", 0)) % data.ndim
    return [np.take_along_axis(data, np.where(indices < 0, indices + data.shape[axis], indices), axis)]


#: operators folded by numpy where the reference implementation fails (its GatherElements
#: cannot take the indices of Hugging Face BERT's token types)
_NUMPY_FOLDS = {"GatherElements": _take_along_axis}


def fold_node(node, inputs, opset: int) -> list:
    """The outputs of a node whose ``inputs`` are all known (arrays, None where omitted),
    computed by ONNX's reference implementation of the node's operator at ``opset`` (the
    node is wrapped in a function: a bare NodeProto is evaluated at the newest opset, whose
    Unsqueeze takes its axes as an input, not as the attribute of opset 9)."""
    from onnx import helper
    from onnx.reference import ReferenceEvaluator
    if node.op_type in _NOT_FOLDED:
        raise Unsupported("control flow is not supported")
    if node.op_type in _NUMPY_FOLDS:
        return _NUMPY_FOLDS[node.op_type](node, inputs)
    function = helper.make_function("autosched.fold", "fold", list(node.input), list(node.output), [node],
                                    [helper.make_opsetid("", opset)])
    try:
        evaluator = ReferenceEvaluator(function)
        feeds = {i: v for i, v in zip(node.input, inputs) if i}
        return list(evaluator.run(None, feeds, attributes={}))
    except Exception as err:  # noqa: BLE001 - any failure means we cannot fold it
        raise Unsupported(f"constant folding failed ({type(err).__name__}: {str(err)[:120]})") from None


def check_model(model) -> None:
    """Refuse an invalid model before converting anything, as onnxruntime does: a name that
    two writers write (the last would silently win), a node that reads a name nothing
    writes, and a node that reads a later node's output (a cycle, or nodes out of order).
    (ONNX's checker also demands shapes on every output, which real exports omit.)"""
    graph = model.graph
    writers = defaultdict(list)
    for name in [t.name for t in graph.initializer] + [i.name for i in _runtime_inputs(model)]:
        writers[name].append("an initializer or input")
    names = [node.name or f"{node.op_type}_{k}" for k, node in enumerate(graph.node)]
    for name, node in zip(names, graph.node):
        for o in node.output:
            if o:
                writers[o].append(f"node '{name}'")
    twice = {name: who for name, who in writers.items() if len(who) > 1}
    if twice:
        name, who = next(iter(twice.items()))
        raise ValueError(f"invalid ONNX model: '{name}' is written by {' and '.join(who)} "
                         f"({len(twice)} name{'s' if len(twice) > 1 else ''} written more than once)")
    written = {t.name for t in graph.initializer} | {i.name for i in graph.input}
    for name, node in zip(names, graph.node):
        for i in node.input:
            if i and i not in written:
                why = "a later node writes it (a cycle, or nodes out of order)" if i in writers else \
                    "no node, initializer or input writes it"
                raise ValueError(f"invalid ONNX model: node '{name}' ({node.op_type}) reads '{i}', but {why}")
        written.update(node.output)
    for o in graph.output:
        if o.name not in written:
            raise ValueError(f"invalid ONNX model: the graph output '{o.name}' is written by no node")


class _Importer:
    """One model's conversion: values by ONNX name, unsupported nodes collected."""

    def __init__(self, model, opset: int, name: str, interface_dtypes: dict):
        self.model = model
        self.interface_dtypes = interface_dtypes
        self.opset = opset
        self.builder = Builder(name)
        self.values: dict = {}
        self.unsupported: dict = defaultdict(list)
        self.poisoned: set = set()
        self.inferred = inferred_shapes(model)
        #: the shapes the model itself declares (value_info, outputs): a contradiction there
        #: is the model's, not the importer's
        self.declared = {vi.name: shape for vi in list(model.graph.value_info) + list(model.graph.output)
                         if (shape := _static_shape(vi)) is not None}
        self._used = defaultdict(int)
        for node in model.graph.node:
            for i in node.input:
                self._used[i] += 1
        for o in model.graph.output:
            self._used[o.name] += 1

    def run(self) -> Graph:
        onnx = _onnx()
        from onnx import numpy_helper
        graph = self.model.graph
        for t in graph.initializer:
            self.values[t.name] = numpy_helper.to_array(t)
        inputs = []
        for i in _runtime_inputs(self.model):
            dtype = ONNX_DTYPES.get(i.type.tensor_type.elem_type)
            if dtype is None:
                name = onnx.TensorProto.DataType.Name(i.type.tensor_type.elem_type)
                raise ValueError(f"input '{i.name}' has element type {name}; supported: "
                                 f"{', '.join(sorted(set(ONNX_DTYPES.values())))}")
            node = self.builder.input(_static_shape(i), dtype, i.name)
            inputs.append(node)
            self.values[i.name] = Value(node, identity(len(node.shape)))
        for k, node in enumerate(graph.node):
            self._import_node(node, node.name or f"{node.op_type}_{k}")
        outputs = [self._output(o.name) for o in graph.output]
        if self.unsupported:
            raise self._error()
        reached = {id(n) for n in topological_order(outputs)}   # inputs no output depends on are left out
        inputs = [i for i in inputs if id(i) in reached]
        return Graph(inputs, outputs, self.builder.graph_builder.name,
                     [self.interface_dtypes["inputs"].get(i.name, i.dtype) for i in inputs],
                     [self.interface_dtypes["outputs"].get(o.name, n.dtype) for o, n in zip(graph.output, outputs)])

    def _error(self) -> UnsupportedModelError:
        lines = []
        for (op_type, reason), names in sorted(self.unsupported.items()):
            shown = ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
            lines.append(f"  {op_type}: {reason} ({len(names)} node{'s' if len(names) > 1 else ''}: {shown})")
        return UnsupportedModelError(
            f"the ONNX model (opset {self.opset}) holds operators autosched cannot import:\n" + "\n".join(lines)
            + f"\nsupported: {', '.join(sorted(CONVERTERS))}, and any operator whose inputs are all constants",
            dict(self.unsupported), self.opset)

    def _import_node(self, node, name: str) -> None:
        ins = [i for i in node.input if i]
        if any(i in self.poisoned for i in ins):
            if node.op_type not in CONVERTERS:
                self.unsupported[(node.op_type, _why_not_converted(node.op_type))].append(name)
            self.poisoned.update(node.output)
            return
        if node.domain not in _DEFAULT_DOMAINS:
            self._refuse(node, name, f"operator of the domain '{node.domain}'")
            return
        inputs = [self.values[i] if i else None for i in node.input]
        try:
            if all(not isinstance(v, Value) for v in inputs):
                outputs = self._fold(node, inputs)
            elif node.op_type in ("Shape", "Size"):
                outputs = [self._shape_of(node, inputs[0])]
            elif node.op_type in CONVERTERS:
                outputs = CONVERTERS[node.op_type](self.builder, self._onnx_node(node, name, inputs))
            else:
                self._refuse(node, name, _why_not_converted(node.op_type))
                return
        except Unsupported as err:
            self._refuse(node, name, str(err))
            return
        for out_name, value in zip(node.output, outputs):
            if out_name:
                self._check_shape(node, name, out_name, value)
                self.values[out_name] = value

    def _refuse(self, node, name: str, reason: str) -> None:
        self.unsupported[(node.op_type, reason)].append(name)
        self.poisoned.update(node.output)

    def _onnx_node(self, node, name: str, inputs) -> OnnxNode:
        return OnnxNode(node.op_type, name, self.opset, node_attributes(node), inputs,
                        [self._used[o] > 0 for o in node.output])

    def _fold(self, node, inputs) -> list:
        size = self._folded_size(node, inputs)
        if size > MAX_FOLDED_ELEMENTS:
            raise Unsupported(f"folding it would make a constant of {size} elements (at most {MAX_FOLDED_ELEMENTS})")
        return fold_node(node, inputs, self.opset)

    def _folded_size(self, node, inputs) -> int:
        """The elements of the largest output folding ``node`` makes, known before it is
        evaluated: from shape inference, or from the inputs of the operators whose output's
        size is their input's value (ConstantOfShape, Range)."""
        sizes = [math.prod(self.inferred[o]) for o in node.output if o in self.inferred]
        if node.op_type == "ConstantOfShape":
            sizes.append(math.prod(int(d) for d in np.ravel(inputs[0])))
        elif node.op_type == "Range":
            start, limit, delta = (float(np.ravel(v)[0]) for v in inputs[:3])
            count = (limit - start) / delta if delta else 0.0
            if not math.isfinite(count):
                raise Unsupported(f"a Range of {start} to {limit} by {delta} has no finite size")
            sizes.append(max(0, math.ceil(count)))
        return max(sizes, default=0)

    @staticmethod
    def _shape_of(node, value: Value) -> np.ndarray:
        shape = np.array(value.onnx_shape, np.int64)
        if node.op_type == "Size":
            return np.array(int(np.prod(shape)), np.int64)
        attrs = {a.name: a.i for a in node.attribute}
        start, end = attrs.get("start", 0), attrs.get("end", len(shape))
        return shape[start:end]

    def _check_shape(self, node, name: str, out_name: str, value) -> None:
        got = value.onnx_shape if isinstance(value, Value) else tuple(np.shape(value))
        want = self.inferred.get(out_name)
        if want is not None and tuple(want) != tuple(got):
            if self.declared.get(out_name) == tuple(want):
                raise ValueError(f"the model declares '{out_name}' with shape {tuple(want)}, but node '{name}' "
                                 f"({node.op_type}) computes {tuple(got)}: its declared shapes contradict its nodes")
            raise RuntimeError(f"importing node '{name}' ({node.op_type}): output '{out_name}' has shape {got}, "
                               f"ONNX shape inference says {want}; this is a bug of the importer")

    def _output(self, name: str):
        value = self.values.get(name)
        if name in self.poisoned or value is None:
            return None
        if not isinstance(value, Value):
            self.unsupported[("output", "a graph output that is a constant")].append(name)
            return None
        node = self.builder.plain(value)
        if node.is_input:    # the model passes an input through: the graph copies it
            node = self.builder.op("transpose", [node], f"{name}_copy", axes=identity(len(node.shape)))
        return node


def _import_graph(model, input_shapes: dict, name: str, opset: int, interface_dtypes: dict) -> Graph:
    return _Importer(fix_input_shapes(model, input_shapes), opset, name, interface_dtypes).run()


def from_onnx(model_or_path, input_shapes: dict | None = None, name: str | None = None) -> Graph | DynamicModel:
    """The ``Graph`` of an ONNX model (a path, bytes or an ``onnx.ModelProto``), channel-last,
    constants folded. Its inputs and outputs keep the model's names, order and (channel-first)
    shapes. ``input_shapes``: static shapes for inputs whose shape the model leaves open
    (e.g. ``{"input_ids": (1, 128)}``; open axes of the same name take the same extent).
    Without them, a model with open axes (a batch, a sequence) is returned as a
    ``DynamicModel``, imported per set of shapes when run (``dynamic``). A float16 (bfloat16) model is
    computed in float32, takes float16 (bfloat16) or float32 inputs and returns its own dtype
    (``onnx_half``). Raises ``UnsupportedModelError`` listing every operator it cannot import."""
    model = load_model(model_or_path)
    opset = model_opset(model)
    if opset not in OPSETS:
        raise ValueError(f"the model uses opset {opset} of the default ONNX domain; autosched imports opsets "
                         f"{OPSETS.start} to {OPSETS.stop - 1} (convert it with onnx.version_converter)")
    check_model(model)
    model, half_io = as_float32(model)
    if name is None:
        name = model.graph.name or (os.path.splitext(os.path.basename(model_or_path))[0]
                                    if isinstance(model_or_path, (str, os.PathLike)) else "onnx_model")
    import_graph = functools.partial(_import_graph, opset=opset, interface_dtypes=half_io)
    dynamic = DynamicModel(model, name, {i.name: declared_dims(i) for i in _runtime_inputs(model)}, import_graph)
    if not dynamic.open_axes:
        return import_graph(model, input_shapes, name)
    if not input_shapes:
        return dynamic
    return import_graph(model, dynamic.input_shapes(input_shapes), name)


__all__ = ["from_onnx", "load_model", "model_opset", "check_model", "UnsupportedModelError", "OPSETS"]
