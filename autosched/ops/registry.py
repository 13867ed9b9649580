"""The operator registry: one definition per operator, workloads built from it by name.

An *operator* is a function of shapes and parameters that returns the tensors of one
ComputeDAG, inputs first, then outputs (TVM's convention). Registering it with
``@operator(name, reference=..., flops=..., inputs=...)`` keeps in one place what the rest
of autosched needs to tune and check it: the tensor expression, an independent numpy
reference, the flop count and how to draw valid random inputs. ``workload(name, *args)``
binds the parameters and hands back a :class:`Workload`, the object that benchmarks, the
command line and the measurement code pass around.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Callable, Mapping

import numpy as np

import ir
from ir.tensor import as_int

#: draws one input array: ``sampler(rng, shape, dtype) -> ndarray``
Sampler = Callable[[np.random.Generator, tuple, str], np.ndarray]


def normal(rng: np.random.Generator, shape: tuple, dtype: str) -> np.ndarray:
    """The default sampler: standard normal floats, small integers for integer dtypes."""
    if np.issubdtype(np.dtype(dtype), np.integer):
        return rng.integers(-4, 5, size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def uniform(lo: float, hi: float) -> Sampler:
    """A sampler of floats in ``[lo, hi)``, e.g. ``uniform(0.5, 2.0)`` for a variance."""
    def sample(rng, shape, dtype):
        return rng.uniform(lo, hi, size=shape).astype(dtype)
    return sample


@dataclass(frozen=True)
class OperatorDef:
    """What the registry knows about one operator."""
    name: str
    build: Callable[..., list]
    reference: Callable[[list, SimpleNamespace], list]
    flops: Callable[[list, SimpleNamespace], int]
    inputs: Mapping[str, Sampler]
    signature: inspect.Signature

    def bind(self, args: tuple, kwargs: dict) -> dict:
        """All parameters by name, defaults filled in; a clear TypeError for a bad call."""
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError as e:
            raise TypeError(f"operator {self.name!r}: {e}; its parameters are "
                            f"{self.name}{self.signature}") from None
        bound.apply_defaults()
        return dict(bound.arguments)


#: operator name -> operator function (shapes and parameters -> [inputs..., outputs...])
OPERATORS: dict[str, Callable[..., list]] = {}
_DEFS: dict[str, OperatorDef] = {}


def operator(name: str, *, reference: Callable, flops: Callable,
             inputs: Mapping[str, Sampler] | None = None):
    """Register an operator function under ``name``.

    ``reference(arrays, p)`` and ``flops(tensors, p)`` get the parameters bound by name as
    ``p`` (a namespace, defaults filled in); ``reference`` must be numpy code written
    independently of the tensor expression. ``inputs`` maps a placeholder's name to the
    sampler of its valid values (default: standard normal).
    """
    def register(fn):
        if name in _DEFS:
            raise ValueError(f"operator {name!r} is registered twice")
        _DEFS[name] = OperatorDef(name, fn, reference, flops, dict(inputs or {}), inspect.signature(fn))
        OPERATORS[name] = fn
        return fn
    return register


def operator_def(name: str) -> OperatorDef:
    try:
        return _DEFS[name]
    except KeyError:
        raise ValueError(f"unknown operator {name!r}; expected one of {', '.join(sorted(_DEFS))}") from None


def _hashable(value):
    """Lists (e.g. an axes permutation given as a list) become tuples so workloads hash;
    numpy integers become ints, so that shapes computed with numpy work like literal ones."""
    if isinstance(value, (list, tuple)):
        return tuple(_hashable(v) for v in value)
    number = None if isinstance(value, (int, str)) else as_int(value)
    return value if number is None else number


@dataclass(frozen=True, eq=False)
class Workload:
    """One operator applied to concrete shapes: its tensors, flops, reference and inputs.

    Two workloads are equal when they name the same operator with the same parameters
    (given positionally or by keyword, defaults included).
    """
    name: str
    args: tuple
    kwargs: dict
    tensors: list = field(repr=False)
    flops: int
    definition: OperatorDef = field(repr=False)
    params: dict = field(repr=False)
    label: str = ""

    @property
    def inputs(self) -> list:
        return [t for t in self.tensors if isinstance(t.op, ir.PlaceholderOp)]

    @property
    def outputs(self) -> list:
        return [t for t in self.tensors if not isinstance(t.op, ir.PlaceholderOp)]

    @property
    def key(self) -> tuple:
        return (self.name, tuple(self.params.items()))

    def __eq__(self, other):
        return isinstance(other, Workload) and self.key == other.key

    def __hash__(self):
        return hash(self.key)

    def __str__(self) -> str:
        if self.label:
            return self.label
        parts = [repr(a) for a in self.args] + [f"{k}={v!r}" for k, v in self.kwargs.items()]
        return f"{self.name}({', '.join(parts)})"

    def random_inputs(self, rng: np.random.Generator) -> list[np.ndarray]:
        """Valid random values for every input, in order (e.g. positive variances)."""
        arrays = []
        for t in self.inputs:
            sampler = self.definition.inputs.get(t.name, normal)
            arrays.append(np.ascontiguousarray(sampler(rng, t.shape, t.dtype), dtype=t.dtype))
        return arrays

    def output_buffers(self) -> list[np.ndarray]:
        """Zeroed arrays for the outputs, in order."""
        return [np.zeros(t.shape, dtype=t.dtype) for t in self.outputs]

    def reference(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        """The outputs computed by numpy (in float64 where it matters), in the output dtypes."""
        expected = self.inputs
        if len(inputs) != len(expected):
            raise ValueError(f"{self}: reference got {len(inputs)} input array(s), expected "
                             f"{len(expected)} ({', '.join(t.name for t in expected)})")
        for a, t in zip(inputs, expected):
            if tuple(np.shape(a)) != t.shape:
                raise ValueError(f"{self}: input '{t.name}' has shape {tuple(np.shape(a))}, "
                                 f"expected {t.shape}")
        results = self.definition.reference([np.asarray(a) for a in inputs], SimpleNamespace(**self.params))
        outs = []
        for r, t in zip(results, self.outputs, strict=True):
            r = np.asarray(r)
            assert r.shape == t.shape, f"{self}: reference output {r.shape} != {t.shape}"
            outs.append(r.astype(t.dtype))
        return outs


def workload(name: str, *args, label: str = "", **kwargs) -> Workload:
    """Build the workload of operator ``name`` with these shapes and parameters."""
    op = operator_def(name)
    args = _hashable(args)
    kwargs = {k: _hashable(v) for k, v in kwargs.items()}
    params = op.bind(args, kwargs)
    tensors = list(op.build(*args, **kwargs))
    n_inputs = sum(isinstance(t.op, ir.PlaceholderOp) for t in tensors)
    if n_inputs == len(tensors) or any(not isinstance(t.op, ir.PlaceholderOp) for t in tensors[:n_inputs]):
        raise AssertionError(f"operator {name!r} must return its inputs first, then at least one output")
    flops = int(op.flops(tensors, SimpleNamespace(**params)))
    return Workload(name, args, kwargs, tensors, flops, op, params, label)
