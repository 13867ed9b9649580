"""Models with open axes: one ONNX model, a graph and programs per set of input shapes.

Exported models leave the batch or sequence axis of their inputs open (``dim_param``
"batch", "sequence"). Our kernels are compiled for static shapes, so such a model is kept
as a ``DynamicModel`` (what ``from_onnx`` returns when an axis stays open): ``graph(shapes)``
imports it for one set of input shapes, and a ``DynamicExecutor`` runs it on whatever
arrays it is given, building an executor for each new set of shapes on its first call (the
tuned programs of a log where it holds records of those shapes' workloads, else zero-trial
programs) and keeping the most recently used ones in a bounded cache. ``tune_networks``
tunes the shapes one names (``expand_open_models``).

Axes that share a ``dim_param`` share an extent: ``{"input_ids": (1, 128)}`` also fixes an
``attention_mask`` declared ``["batch", "sequence"]``.
"""
from __future__ import annotations

from collections import OrderedDict

import numpy as np

from .executor import GraphExecutor
from .graph import Graph
from .partition import partition


def declared_dims(value_info) -> list:
    """Per axis: its extent, or the name of the open axis (``"?"`` when unnamed)."""
    return [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else (d.dim_param or "?")
            for d in value_info.type.tensor_type.shape.dim]


def shape_text(shapes: dict) -> str:
    """``x=4x3x8x8,mask=4x8``: a set of input shapes, as a name and as the CLI writes them."""
    return ",".join(f"{name}={'x'.join(str(s) for s in shape)}" for name, shape in shapes.items())


class DynamicModel:
    """An ONNX model (float32, see ``onnx_half``) whose inputs leave axes open.
    ``inputs``: the run-time inputs' names in call order; ``declared``: each one's dims
    (an int, or the name of an open axis). Made by ``from_onnx``, which passes
    ``import_graph(model, shapes, name)``."""

    def __init__(self, model, name: str, declared: dict, import_graph):
        self.model = model
        self.name = name
        self.declared = declared
        self.inputs = list(declared)
        self._import_graph = import_graph

    @property
    def open_axes(self) -> dict:
        """``{input: {axis: name}}`` of the axes left open."""
        return {i: {a: d for a, d in enumerate(dims) if isinstance(d, str)}
                for i, dims in self.declared.items() if any(isinstance(d, str) for d in dims)}

    def describe_open_axes(self) -> str:
        return ", ".join(f"'{i}' {self.declared[i]}" for i in self.open_axes)

    def input_shapes(self, given: dict) -> dict:
        """Every input's static shape from ``given`` ({name: shape}, some inputs at least):
        inputs not given take the extents their open axes share by name with given ones."""
        unknown = [k for k in given if k not in self.declared]
        if unknown:
            raise ValueError(f"input_shapes names {unknown}, which are not inputs of the model '{self.name}'; "
                             f"its inputs: {self.inputs}")
        bound: dict = {}
        shapes = {}
        for name, shape in given.items():
            shapes[name] = self._checked(name, shape, bound)
        missing = []
        for name, dims in self.declared.items():
            if name in shapes:
                continue
            if all(not isinstance(d, str) or d in bound for d in dims):
                shapes[name] = tuple(bound[d] if isinstance(d, str) else d for d in dims)
            else:
                missing.append(f"'{name}' {dims}")
        if missing:
            raise ValueError(f"{self.name}: the inputs {', '.join(missing)} have no static shape; give them "
                             f"(e.g. {{'{self.inputs[0]}': shape}})")
        return {name: shapes[name] for name in self.inputs}

    def _checked(self, name: str, shape, bound: dict) -> tuple:
        """``shape`` as a tuple of ints, checked against the declared dims (binding the open ones)."""
        dims = self.declared[name]
        shape = tuple(int(s) for s in shape)
        if len(shape) != len(dims) or any(s < 1 for s in shape):
            raise ValueError(f"input '{name}' given shape {shape}; {self.name} declares {dims} (positive extents)")
        for axis, (s, d) in enumerate(zip(shape, dims)):
            if isinstance(d, str):
                if d != "?" and bound.setdefault(d, s) != s:
                    raise ValueError(f"input '{name}' axis {axis} ('{d}') given {s}, another input gave "
                                     f"'{d}' = {bound[d]}")
            elif s != d:
                raise ValueError(f"input '{name}' given shape {shape}; its axis {axis} is fixed at {d}")
        return shape

    def graph(self, input_shapes: dict) -> Graph:
        """The model imported for ``input_shapes`` (named ``model[x=1x3x8x8]``)."""
        shapes = self.input_shapes(input_shapes)
        return self._import_graph(self.model, shapes, f"{self.name}[{shape_text(shapes)}]")

    def executor(self, cache_size: int = 8, **executor_kwargs) -> "DynamicExecutor":
        """A ``DynamicExecutor`` of this model (``executor_kwargs``: as ``GraphExecutor``'s)."""
        return DynamicExecutor(self, cache_size, **executor_kwargs)

    def __repr__(self) -> str:
        return f"DynamicModel({self.name}, open axes: {self.describe_open_axes()})"


class ShapeCache:
    """Values by key (the input shapes a model is run at), kept for the ``size`` most
    recently used keys, the least recently used dropped first."""

    def __init__(self, size: int):
        if int(size) < 1:
            raise ValueError(f"cache_size must be at least 1, got {size}")
        self.size = int(size)
        self._items: OrderedDict = OrderedDict()
        #: values made so far (cache misses)
        self.builds = 0

    def get(self, key, make):
        """The value of ``key``; on a miss ``make()``'s, kept."""
        if key in self._items:
            self._items.move_to_end(key)
            return self._items[key]
        value = make()
        self.builds += 1
        self._items[key] = value
        if len(self._items) > self.size:
            self._items.popitem(last=False)
        return value

    def keys(self) -> list:
        """The cached keys, least recently used first."""
        return list(self._items)


class DynamicExecutor:
    """Runs a ``DynamicModel`` on arrays of any shape it accepts: ``run(*inputs)``. Each new
    set of input shapes gets its own ``GraphExecutor`` (``executor_kwargs``: its
    ``log_file``, ``states``, ``base_model``, ...; tuned programs of a log are found by
    workload, so a record of one shape serves that shape); the ``cache_size`` most recently
    used are kept, the least recently used one dropped first."""

    def __init__(self, model: DynamicModel, cache_size: int = 8, **executor_kwargs):
        self.model = model
        self.executor_kwargs = executor_kwargs
        self._cache = ShapeCache(cache_size)

    @property
    def builds(self) -> int:
        """Executors built so far (one per cache miss)."""
        return self._cache.builds

    @property
    def cached_shapes(self) -> list:
        """The input shapes with an executor in the cache, least recently used first."""
        return [dict(zip(self.model.inputs, key)) for key in self._cache.keys()]

    def executor_for(self, input_shapes: dict) -> GraphExecutor:
        """The ``GraphExecutor`` for ``input_shapes`` (built on first use, then cached)."""
        shapes = self.model.input_shapes(input_shapes)
        return self._cache.get(tuple(shapes.values()),
                               lambda: GraphExecutor(partition(self.model.graph(shapes)), **self.executor_kwargs))

    def run(self, *inputs) -> list:
        """The model's outputs on ``inputs`` (in the order of ``model.inputs``)."""
        if len(inputs) != len(self.model.inputs):
            raise ValueError(f"{self.model.name} takes {len(self.model.inputs)} inputs {self.model.inputs}, "
                             f"got {len(inputs)}")
        arrays = [np.asarray(x) for x in inputs]
        executor = self.executor_for({name: a.shape for name, a in zip(self.model.inputs, arrays)})
        return executor.run(*arrays)

    __call__ = run


def expand_open_models(networks: list, input_shapes) -> list:
    """``networks`` with each ``DynamicModel`` replaced by its graphs for every set of
    ``input_shapes`` (a dict or a list of dicts); what ``tune_networks`` tunes."""
    shape_sets = [input_shapes] if isinstance(input_shapes, dict) else list(input_shapes or [])
    has_open = any(isinstance(n, DynamicModel) for n in networks)
    if shape_sets and not has_open:
        raise ValueError("input_shapes applies to a model with open axes (a DynamicModel from from_onnx); "
                         "none of the networks has any")
    expanded = []
    for n in networks:
        if not isinstance(n, DynamicModel):
            expanded.append(n)
        elif not shape_sets:
            raise ValueError(f"{n.name} leaves the axes {n.describe_open_axes()} open: give the shapes to tune "
                             "for, input_shapes=[{name: shape}, ...]")
        else:
            expanded.extend(n.graph(shapes) for shapes in shape_sets)
    return expanded


__all__ = ["DynamicModel", "DynamicExecutor", "ShapeCache", "declared_dims", "expand_open_models", "shape_text"]
