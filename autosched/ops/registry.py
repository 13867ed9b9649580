"""The operator registry: each operator declared once, in the module of its family, for
both of its uses.

- As a *workload*: a function of shapes and parameters that returns the tensors of one
  ComputeDAG, inputs first, then outputs (TVM's convention), with an independent numpy
  reference, the flop count and how to draw valid random inputs.
  ``workload(name, *args)`` binds the parameters and hands back a :class:`Workload`, the
  object that tuning, benchmarks and the command line pass around.
- As a *node kind* of the network graph IR: its fusion pattern, how a node becomes tensors
  from its inputs and attributes, and its numpy reference (``OpDef``; ``opdef(kind)``),
  which the graph builder, the partitioner and the executor read.

``@operator(name, reference=, flops=, inputs=)`` declares a workload, ``node_kind(name,
pattern, build, reference, arity)`` a node kind (beside its workload where the operator has
one), and ``@elementwise_operator(name, reference=...)`` both at once from one tensor function: an
elementwise operator is one declaration.

Fusion patterns, from the most to the least fusible (after Relay's ``OpPatternKind``):
ELEMWISE (same-shape map), BROADCAST (an operand smaller, e.g. a per-channel vector),
INJECTIVE (data movement: reshape, transpose), REDUCE (softmax, layer norm, pooling) and
ANCHOR (the compute-heavy ops: conv, dense, matmul, batch_matmul).
"""
from __future__ import annotations

import inspect
import math
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Callable, Mapping

import numpy as np

import ir
from ir.tensor import as_int

from .common import check_shape

ELEMWISE, BROADCAST, INJECTIVE, REDUCE, ANCHOR = 0, 1, 2, 3, 4
PATTERN_NAMES = {ELEMWISE: "elemwise", BROADCAST: "broadcast", INJECTIVE: "injective", REDUCE: "reduce",
                 ANCHOR: "anchor"}

#: draws one input array: ``sampler(rng, shape, dtype) -> ndarray``
Sampler = Callable[[np.random.Generator, tuple, str], np.ndarray]


def normal(rng: np.random.Generator, shape: tuple, dtype: str) -> np.ndarray:
    """The default sampler: standard normal floats, small integers for integer dtypes,
    fair coins for bool."""
    if np.dtype(dtype) == np.bool_:
        return rng.random(shape) < 0.5
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
    """An operator as a workload: its function of shapes and parameters, numpy reference,
    flop count and input samplers (see ``operator``)."""
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


@dataclass(frozen=True)
class OpDef:
    """An operator as a node kind of the network graph: ``build(tensors, attrs, name) ->
    ir.Tensor``; ``reference(arrays, attrs) -> ndarray`` (float64 arrays in, numpy code
    written independently); ``arity``: the number of inputs, None for "any". Every node's
    inputs are listed first, constants (weights) among them; ``attrs`` are plain values.
    ``maps_elements``: each output element is a function of the inputs' elements at the
    same position, numpy broadcasting and nothing else (no axis attribute), so that the
    operator commutes with a reshape of all its operands (``graph.passes.sink_reshapes``)."""
    kind: str
    pattern: int
    build: Callable
    reference: Callable
    arity: int | None = None
    maps_elements: bool = False


#: operator name -> workload function (shapes and parameters -> [inputs..., outputs...])
OPERATORS: dict[str, Callable[..., list]] = {}
#: node kind -> how the network graph builds and checks a node of it
OPDEFS: dict[str, OpDef] = {}
_DEFS: dict[str, OperatorDef] = {}


def operator(name: str, *, reference: Callable, flops: Callable,
             inputs: Mapping[str, Sampler] | None = None):
    """Declare the workload of operator ``name``: the decorated function of shapes and
    parameters returns the tensors of one ComputeDAG, inputs first, then outputs.

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


def node_kind(kind: str, pattern: int, build: Callable, reference: Callable, arity: int | None = None,
              maps_elements: bool = False) -> OpDef:
    """Register ``kind`` as a node kind of the network graph (see ``OpDef``); an operator
    with a workload declares it beside the workload, under the same name where the two
    take the same inputs."""
    if kind in OPDEFS:
        raise ValueError(f"node kind {kind!r} is registered twice")
    if pattern not in PATTERN_NAMES:
        raise ValueError(f"node kind {kind!r}: pattern {pattern!r} is not one of {sorted(PATTERN_NAMES)}")
    OPDEFS[kind] = OpDef(kind, pattern, build, reference, arity, maps_elements)
    return OPDEFS[kind]


def unregister_operator(name: str) -> None:
    """Remove operator ``name``'s workload and node kind (declaring it again then works)."""
    if name not in _DEFS and name not in OPDEFS:
        raise ValueError(f"no operator or node kind {name!r} is registered")
    for table in (_DEFS, OPERATORS, OPDEFS):
        table.pop(name, None)


def operator_def(name: str) -> OperatorDef:
    try:
        return _DEFS[name]
    except KeyError:
        also = " (a node kind of the network graph only)" if name in OPDEFS else ""
        raise ValueError(f"unknown operator {name!r}{also}; expected one of {', '.join(sorted(_DEFS))}") from None


def opdef(kind: str) -> OpDef:
    """The node kind ``kind`` of the network graph."""
    try:
        return OPDEFS[kind]
    except KeyError:
        raise ValueError(f"unknown operator kind {kind!r}; known: {', '.join(sorted(OPDEFS))}") from None


#: parameter names an elementwise operator's workload takes besides its attributes
_WORKLOAD_PARAMETERS = {1: ("shape",), 2: ("shape_a", "shape_b")}
_INPUT_NAMES = {1: ("x",), 2: ("a", "b")}


def elementwise_operator(name: str, *, reference: Callable, flops: int = 1, arity: int = 1,
                         pattern: int | None = None, dtype: str = "float32",
                         inputs: Mapping[str, Sampler] | None = None):
    """Declare an elementwise operator from its tensor function, for both uses at once.

    The decorated ``fn(*tensors, *attributes, name=...)`` takes ``arity`` (1 or 2) tensors,
    then the operator's attributes, then ``name``. ``reference(*arrays, **attributes)`` is
    its numpy reference. Declared are

    - the node kind ``name`` (pattern ELEMWISE for one tensor, BROADCAST for two, unless
      ``pattern``), whose node attributes are ``fn``'s attributes, defaults filled in;
    - the workload ``name(shape, dtype=dtype, *, attributes)`` (two tensors: ``shape_a,
      shape_b=None``, the second broadcasting, numpy rules) on inputs ``x`` (``a``, ``b``)
      drawn by ``inputs`` (default standard normal), with ``flops`` per output element.
    """
    if arity not in _WORKLOAD_PARAMETERS:
        raise ValueError(f"elementwise operator {name!r}: arity {arity}; expected 1 or 2 "
                         "(declare others with @operator and node_kind)")
    if name in _DEFS or name in OPDEFS:
        raise ValueError(f"operator {name!r} is registered twice")

    def register(fn):
        params = list(inspect.signature(fn).parameters.values())
        attrs = inspect.Signature([p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in params[arity:]
                                   if p.name != "name"])
        reserved = {*_WORKLOAD_PARAMETERS[arity], "dtype"}
        if len(params) <= arity or params[-1].name != "name" or reserved & set(attrs.parameters):
            raise ValueError(f"elementwise operator {name!r}: its tensor function must take {arity} tensor(s), "
                             f"its attributes (none named {', '.join(sorted(reserved))}), then name; got "
                             f"{fn.__name__}{inspect.signature(fn)}")

        def node_attrs(given: dict) -> dict:
            try:
                bound = attrs.bind(**given)
            except TypeError as e:
                raise ValueError(f"{name}: attributes {sorted(given)} do not fit {name}{attrs} ({e})") from None
            bound.apply_defaults()
            return dict(bound.arguments)

        node_kind(name, (ELEMWISE if arity == 1 else BROADCAST) if pattern is None else pattern,
                  lambda t, a, node_name: fn(*t, **node_attrs(a), name=node_name),
                  lambda x, a: reference(*x, **node_attrs(a)), arity, maps_elements=True)
        _elementwise_workload(name, fn, reference, flops, arity, attrs, dtype, inputs)
        return fn
    return register


def _elementwise_workload(name, fn, reference, flops, arity, attrs, dtype, inputs) -> None:
    """The workload of an ``elementwise_operator`` declaration (see there)."""
    P = inspect.Parameter
    shapes = [P(_WORKLOAD_PARAMETERS[arity][0], P.POSITIONAL_OR_KEYWORD)]
    shapes += [P(n, P.POSITIONAL_OR_KEYWORD, default=None) for n in _WORKLOAD_PARAMETERS[arity][1:]]
    signature = inspect.Signature([*shapes, P("dtype", P.POSITIONAL_OR_KEYWORD, default=dtype),
                                   *attrs.parameters.values()])

    def build(*args, **kwargs):
        p = signature.bind(*args, **kwargs)
        p.apply_defaults()
        given = [p.arguments[n] for n in _WORKLOAD_PARAMETERS[arity]]
        given = [given[0] if s is None else s for s in given]             # shape_b: shape_a's by default
        tensors = [ir.placeholder(check_shape(s, f"{name}: {what}"), p.arguments["dtype"], name=x)
                   for s, what, x in zip(given, _WORKLOAD_PARAMETERS[arity], _INPUT_NAMES[arity])]
        return [*tensors, fn(*tensors, **{a: p.arguments[a] for a in attrs.parameters})]

    build.__signature__ = signature
    build.__name__ = build.__qualname__ = f"{name}_workload"
    shapes_doc = "a tensor of ``shape``" if arity == 1 else "two tensors (``shape_b`` broadcasts; default ``shape_a``)"
    build.__doc__ = f"{name} of {shapes_doc}."
    operator(name, inputs=inputs, flops=lambda ts, p: flops * math.prod(ts[-1].shape),
             reference=lambda ins, p: [reference(*ins, **{a: getattr(p, a) for a in attrs.parameters})])(build)


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
