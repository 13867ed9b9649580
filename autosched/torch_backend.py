"""``torch.compile(model, backend="autosched")``: PyTorch graphs run on autosched kernels.

TorchDynamo hands the backend each FX graph it captures with real example inputs. The
backend binds the graph's weights (the parameters and buffers Dynamo passes as inputs) as
constants, exports the graph to ONNX in memory (``graph.torch_import``), imports it and
builds a ``GraphExecutor``: zero-trial programs, or the tuned ones of
``options={"log_file": ...}``. Each new set of input shapes (Dynamo marks an axis dynamic
after it changes) gets its own executor, the most recent ``cache_size`` kept. Inference
only: a graph that needs gradients, or that the exporter or importer cannot take, runs
eagerly in PyTorch (its fallback), and the backend says why, once per reason.

The string "autosched" reaches this module through the ``torch_dynamo_backends`` entry point
of the installed package; ``register()`` does the same by hand.
"""
from __future__ import annotations

import warnings

import numpy as np
import torch
from torch.utils import _pytree as pytree

from .graph import GraphExecutor, partition
from .graph.dynamic import ShapeCache
from .graph.onnx import from_onnx
from .graph.torch_import import export_onnx

#: options={...} the backend takes, with their defaults: a tuning log whose best programs
#: are used, how many input shapes keep an executor, whose zero-trial programs untuned tasks
#: run (as GraphExecutor's), and whether untuned tasks are warned about
DEFAULT_OPTIONS = {"log_file": None, "cache_size": 8, "base_model": "default", "warn_untuned": True}


class EagerFallbackWarning(RuntimeWarning):
    """A graph runs eagerly in PyTorch, not on autosched kernels."""


_said: set = set()


def _fall_back(gm, reason: str):
    """``gm``'s own forward (PyTorch runs it), saying why the first time for this reason."""
    if reason not in _said:
        _said.add(reason)
        warnings.warn(f"autosched: a graph runs eagerly in PyTorch: {reason}", EagerFallbackWarning, stacklevel=3)
    return gm.forward


def _concrete(value):
    """A symbolic integer input (the extent of an axis Dynamo made dynamic) as the int it has
    in this call, without adding a guard; anything else as it is."""
    if isinstance(value, torch.SymInt):
        from torch.fx.experimental.symbolic_shapes import optimization_hint
        return int(optimization_hint(value))
    return value


class _NotCompiled(Exception):
    """Why a graph cannot run on autosched kernels."""


def _options(options) -> dict:
    options = dict(options or {})
    unknown = sorted(set(options) - set(DEFAULT_OPTIONS))
    if unknown:
        raise ValueError(f"torch.compile(backend='autosched'): unknown options {unknown}; "
                         f"known: {sorted(DEFAULT_OPTIONS)}")
    return {**DEFAULT_OPTIONS, **options}


def _is_weight(node, value) -> bool:
    """A graph input that is a module's parameter or buffer (Dynamo lifts them to inputs)."""
    if isinstance(value, torch.nn.Parameter):
        return True
    source = getattr(node.meta.get("grapharg"), "source", None)
    name = getattr(source, "name", "")
    name = name() if callable(name) else name
    return "._buffers[" in str(name) or "._parameters[" in str(name)


def _version(tensor) -> int | None:
    """How often ``tensor`` was changed in place (None for an inference tensor, which cannot be)."""
    try:
        return tensor._version
    except RuntimeError:
        return None


class _Bound(torch.nn.Module):
    """The graph with its weights and integer inputs bound: a module of its tensor inputs
    only, what the exporter traces."""

    def __init__(self, gm, slots: list, weights: list, ints: list):
        super().__init__()
        self.gm = gm
        self.slots = slots
        for k, w in enumerate(weights):
            self.register_buffer(f"w{k}", w.detach(), persistent=False)
        self.ints = ints

    def forward(self, *tensors):
        args = [tensors[k] if kind == "tensor" else getattr(self, f"w{k}") if kind == "weight" else self.ints[k]
                for kind, k in self.slots]
        return self.gm(*args)


class CompiledGraph:
    """One FX graph on autosched kernels: ``__call__(*args)`` as the graph's forward.
    ``executors``: a ``ShapeCache`` of (GraphExecutor or None) by input shapes."""

    def __init__(self, gm, example_inputs, options: dict):
        self.gm = gm
        self.options = options
        example_inputs = [_concrete(v) for v in example_inputs]
        self.slots, self.names = [], []
        self.failure = ""
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        if len(placeholders) != len(example_inputs):
            raise _NotCompiled(f"{len(placeholders)} graph inputs, {len(example_inputs)} example inputs")
        counts = {"tensor": 0, "int": 0, "weight": 0}
        for node, value in zip(placeholders, example_inputs):
            if isinstance(value, torch.Tensor) and _is_weight(node, value):
                self.slots.append(("weight", counts["weight"]))
                counts["weight"] += 1
            elif isinstance(value, torch.Tensor):
                self.slots.append(("tensor", counts["tensor"]))
                self.names.append(node.name)
                counts["tensor"] += 1
            elif isinstance(value, int):
                self.slots.append(("int", counts["int"]))
                counts["int"] += 1
            else:
                raise _NotCompiled(f"a graph input of type {type(value).__name__}")
        if torch.is_grad_enabled() and any(isinstance(v, torch.Tensor) and v.requires_grad for v in example_inputs):
            raise _NotCompiled("it needs gradients, and autosched compiles inference only (run the model under "
                               "torch.no_grad() or torch.inference_mode())")
        devices = {str(v.device) for v in example_inputs if isinstance(v, torch.Tensor)} - {"cpu"}
        if devices:
            raise _NotCompiled(f"its tensors are on {sorted(devices)}; autosched's torch backend runs on the CPU")
        with torch.no_grad():
            flat, self.out_spec = pytree.tree_flatten(gm(*example_inputs))
        if not flat or not all(isinstance(t, torch.Tensor) for t in flat):
            raise _NotCompiled("its outputs are not all tensors")
        self.executors = ShapeCache(options["cache_size"])
        if self._executor(list(example_inputs)) is None:     # at compile time: what cannot import runs eagerly
            raise _NotCompiled(self.failure)
        self._check(example_inputs, flat)

    def _check(self, example_inputs, expected) -> None:
        """Our outputs on the example inputs against PyTorch's: a graph the importer got wrong
        runs eagerly rather than give wrong results."""
        got = pytree.tree_leaves(self(*example_inputs))
        for g, e in zip(got, expected):
            if g.shape != e.shape:
                raise _NotCompiled(f"an output has shape {tuple(g.shape)} where PyTorch's has {tuple(e.shape)}")
            g, e = g.double(), e.double()
            scale = float(e.abs().max()) if e.numel() else 0.0
            err = float((g - e).abs().max()) / (scale or 1.0) if e.numel() else 0.0
            limit = 1e-2 if e.dtype in (torch.float16, torch.bfloat16) or g.dtype == torch.float16 else 1e-3
            if not err <= limit:
                raise _NotCompiled(f"its outputs on the example inputs differ from PyTorch's (max relative "
                                   f"error {err:.2e}); this is a bug of autosched's importer")

    def _key(self, args) -> tuple:
        """The input shapes and integers, and each weight's storage and version: a weight
        changed in place (``load_state_dict``, ``w.mul_``) is a new executor, not stale constants."""
        return tuple((tuple(a.shape), str(a.dtype)) if kind == "tensor" else int(a) if kind == "int"
                     else (a.data_ptr(), _version(a)) for (kind, _), a in zip(self.slots, args))

    def _split(self, args) -> tuple:
        tensors = [a for (kind, _), a in zip(self.slots, args) if kind == "tensor"]
        ints = [int(a) for (kind, _), a in zip(self.slots, args) if kind == "int"]
        return tensors, ints

    def _executor(self, args) -> GraphExecutor | None:
        """The executor for the shapes of ``args`` (built on first use), None where the graph
        cannot be exported or imported at them (``failure`` says why)."""
        return self.executors.get(self._key(args), lambda: self._build(args))

    def _build(self, args) -> GraphExecutor | None:
        tensors, ints = self._split(args)
        try:
            weights = [a for (kind, _), a in zip(self.slots, args) if kind == "weight"]   # (as they are now)
            data = export_onnx(_Bound(self.gm, self.slots, weights, ints), tuple(tensors), names=self.names)
            graph = from_onnx(data, name="torch_graph")
            if len(graph.outputs) != self.out_spec.num_leaves:
                raise ValueError(f"the exported graph has {len(graph.outputs)} outputs, the FX graph "
                                 f"{self.out_spec.num_leaves}")
            return GraphExecutor(partition(graph), log_file=self.options["log_file"],
                                 base_model=self.options["base_model"], warn_untuned=self.options["warn_untuned"])
        except Exception as err:  # noqa: BLE001 - whatever the exporter or importer cannot take runs eagerly
            lines = "; ".join(line.strip() for line in str(err).strip().splitlines())
            self.failure = f"{type(err).__name__}: {lines[:400]}"
            return None

    @property
    def executor(self) -> GraphExecutor | None:
        """The executor of the most recently used input shapes."""
        key = self.executors.keys()[-1]
        return self.executors.get(key, None)

    def __call__(self, *args):
        executor = self._executor(list(args))
        if executor is None:                # a later shape the importer refuses runs eagerly too
            return _fall_back(self.gm, self.failure)(*args)
        tensors, _ = self._split(args)
        outputs = executor.run(*[t.detach().cpu().numpy() for t in tensors])
        return pytree.tree_unflatten([torch.from_numpy(np.ascontiguousarray(o)) for o in outputs], self.out_spec)


def autosched_backend(gm, example_inputs, options=None, **unused):
    """The torch.compile backend: ``gm`` as a ``CompiledGraph``, or its eager forward (with
    an ``EagerFallbackWarning``) where autosched cannot run it. ``options``: see
    ``DEFAULT_OPTIONS``; torch.compile's ``mode`` is accepted and has no effect."""
    options = _options(options)
    try:
        return CompiledGraph(gm, example_inputs, options)
    except _NotCompiled as err:
        return _fall_back(gm, str(err))


def register(name: str = "autosched") -> None:
    """Make ``backend=name`` work without the installed entry point (e.g. from a source
    checkout); nothing happens if the name is already known."""
    from torch._dynamo.backends.registry import list_backends, register_backend
    if name not in list_backends(exclude_tags=()):
        register_backend(autosched_backend, name=name)


__all__ = ["autosched_backend", "register", "CompiledGraph", "EagerFallbackWarning", "DEFAULT_OPTIONS"]
