"""Tensors and the operations that produce them: placeholders (inputs) and computes."""
from __future__ import annotations

import inspect
import operator
from typing import Callable

from . import dtype as dt
from . import expr as E


def as_int(value) -> int | None:
    """``value`` as a Python int when it is an integer (an int or any numpy integer, not a
    bool), else None: shapes and extents may come from numpy arithmetic."""
    if isinstance(value, bool) or getattr(value, "dtype", None) == bool:
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


def _check_shape(shape, what: str) -> tuple[int, ...]:
    if as_int(shape) is not None:
        shape = (shape,)
    try:
        shape = tuple(shape)
    except TypeError:
        raise TypeError(f"{what}: shape must be a tuple of positive ints, got {shape!r}") from None
    ints = tuple(as_int(s) for s in shape)
    if any(s is None or s <= 0 for s in ints):
        raise ValueError(f"{what}: shape must be a tuple of positive ints, got {shape!r}")
    return ints


class Operation:
    """Common part of placeholders and computes: a name, a tag, attributes and one output."""

    def __init__(self, name: str, shape: tuple[int, ...], dtype: str, tag: str = "", attrs: dict | None = None):
        self.name = name
        self.shape = shape
        self.dtype = dtype
        self.tag = tag
        self.attrs = dict(attrs or {})
        self.output = Tensor(self)

    @property
    def input_tensors(self) -> list["Tensor"]:
        return []

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name}, shape={self.shape}, dtype={self.dtype})"


class PlaceholderOp(Operation):
    """An input tensor. ``constant=True`` marks a weight: its values are fixed for a kernel's
    lifetime, so layout rewrite may repack it once at build time."""

    def __init__(self, name, shape, dtype, constant: bool = False):
        super().__init__(name, shape, dtype, tag="placeholder")
        self.constant = constant


class ComputeOp(Operation):
    """``out[axis] = body`` over the space axes; ``body`` may be a top-level reduction."""

    def __init__(self, name, shape, dtype, axis, body, tag, attrs):
        super().__init__(name, shape, dtype, tag, attrs)
        self.axis: tuple[E.IterVar, ...] = axis
        self.body: E.Expr = body
        self.reduce_axis: tuple[E.IterVar, ...] = body.axes if isinstance(body, E.Reduce) else ()

    @property
    def input_tensors(self) -> list["Tensor"]:
        seen: dict[int, Tensor] = {}
        for e in E.walk(self.body):
            if isinstance(e, E.TensorRead):
                seen.setdefault(id(e.tensor), e.tensor)
        return list(seen.values())


class Tensor:
    """The output of an operation; indexing it builds a read expression."""

    __hash__ = object.__hash__

    def __init__(self, op: Operation):
        self.op = op

    name = property(lambda self: self.op.name)
    shape = property(lambda self: self.op.shape)
    dtype = property(lambda self: self.op.dtype)
    ndim = property(lambda self: len(self.op.shape))

    def __getitem__(self, indices) -> E.TensorRead:
        if not isinstance(indices, tuple):
            indices = (indices,)
        if len(indices) != len(self.shape):
            raise IndexError(f"tensor '{self.name}' has {len(self.shape)} dimension(s) {self.shape}, "
                             f"but was indexed with {len(indices)} index(es)")
        idx = []
        for pos, i in enumerate(indices):
            i = E.as_expr(i, dt.INDEX)
            if not dt.is_int(i.dtype):
                raise TypeError(f"index {pos} of tensor '{self.name}' must be an integer expression, "
                                f"got {i.dtype}: {i}")
            if i.dtype != dt.INDEX:
                i = E.Cast(dt.INDEX, i)
            idx.append(i)
        return E.TensorRead(self, tuple(idx))

    def __eq__(self, other):
        return self is other

    def __repr__(self) -> str:
        return f"Tensor({self.name}, shape={self.shape}, dtype={self.dtype})"


_name_counter: dict[str, int] = {}


def _default_name(base: str) -> str:
    n = _name_counter.get(base, 0)
    _name_counter[base] = n + 1
    return base if n == 0 else f"{base}_{n}"


def placeholder(shape, dtype="float32", name: str | None = None, constant: bool = False) -> Tensor:
    """An input tensor of ``shape`` and ``dtype``; ``constant=True`` marks a weight."""
    name = name or _default_name("placeholder")
    shape = _check_shape(shape, f"placeholder '{name}'")
    return PlaceholderOp(name, shape, dt.canonical(dtype), constant).output


def reduce_axis(extent, name: str = "k") -> E.IterVar:
    """A reduction axis over ``range(extent)`` or, given ``(lo, hi)``, over ``range(lo, hi)``."""
    if isinstance(extent, (tuple, list)):
        if len(extent) != 2:
            raise ValueError(f"reduce_axis '{name}': expected an extent or (lo, hi), got {extent!r}")
        lo, hi = (as_int(v) for v in extent)
    else:
        lo, hi = 0, as_int(extent)
    if lo is None or hi is None or hi <= lo:
        raise ValueError(f"reduce_axis '{name}': expected a positive int extent or ints lo < hi, got {extent!r}")
    return E.IterVar(name, lo, hi - lo, "reduce")


def _axis_names(fcompute: Callable, ndim: int, name: str) -> list[str]:
    try:
        params = list(inspect.signature(fcompute).parameters.values())
    except (TypeError, ValueError):
        params = []
    if params and params[0].kind == inspect.Parameter.VAR_POSITIONAL:
        return [f"ax{i}" for i in range(ndim)]
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
                  and p.default is inspect.Parameter.empty]
    if len(positional) != ndim:
        raise TypeError(f"compute '{name}': the shape has {ndim} dimension(s) but fcompute takes "
                        f"{len(positional)} argument(s) ({', '.join(p.name for p in positional)})")
    return [p.name for p in positional]


def _check_body(body: E.Expr, name: str) -> None:
    """Reductions only at the top; reduce axes only inside their reduction."""
    if isinstance(body, E.Reduce):
        top_axes = body.axes
        for part in body.children():
            _check_no_reduce(part, name)
        allowed = {id(a) for a in top_axes}
        for part in body.children():
            for e in E.walk(part):
                if isinstance(e, E.IterVar) and e.kind == "reduce" and id(e) not in allowed:
                    raise ValueError(f"compute '{name}': reduce axis '{e.name}' is used in a reduction "
                                     f"over [{', '.join(a.name for a in top_axes)}] that does not list it")
        return
    _check_no_reduce(body, name)
    for e in E.walk(body):
        if isinstance(e, E.IterVar) and e.kind == "reduce":
            raise ValueError(f"compute '{name}': reduce axis '{e.name}' is used outside a reducer "
                             "(ir.sum / ir.max / ir.min with axis=...)")


def _check_no_reduce(e: E.Expr, name: str) -> None:
    for node in E.walk(e):
        if isinstance(node, E.Reduce):
            raise ValueError(f"compute '{name}': a reduction ({node.combiner}) may only be the whole body "
                             "of a compute, not part of a larger expression; split it into two computes")


def compute(shape, fcompute: Callable, name: str | None = None, tag: str = "",
            attrs: dict | None = None) -> Tensor:
    """``out[i, j, ...] = fcompute(i, j, ...)`` over ``shape`` (TVM's te.compute)."""
    name = name or _default_name("compute")
    shape = _check_shape(shape, f"compute '{name}'")
    names = _axis_names(fcompute, len(shape), name)
    axis = tuple(E.IterVar(n, 0, s, "space") for n, s in zip(names, shape))
    body = fcompute(*axis)
    if isinstance(body, (list, tuple)):
        raise TypeError(f"compute '{name}': fcompute returned {len(body)} values; one expression is expected")
    body = E.as_expr(body)
    _check_body(body, name)
    if isinstance(body, E.Reduce):
        seen = {id(a) for a in axis}
        for ax in body.axes:
            if id(ax) in seen:
                raise ValueError(f"compute '{name}': axis '{ax.name}' is both a space and a reduce axis")
    return ComputeOp(name, shape, body.dtype, axis, body, tag, attrs).output
