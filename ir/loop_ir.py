"""The loop IR that lowering produces and code generation (and features) read.

Statements are small immutable records. Memory is flat: a ``Buffer`` is a named block of
elements and ``Load``/``Store`` take one flat index expression, so that code generation
and access analysis see affine index forms directly.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from . import expr as E
from .expr import expr_str


class Buffer:
    """A block of ``prod(shape)`` elements. ``scope``: "arg" (a kernel argument), "global"
    (a heap buffer of the whole kernel), "local" (a small stack buffer; on a GPU, private
    to a thread) or "shared" (GPU shared memory, one per thread block)."""

    __hash__ = object.__hash__

    def __init__(self, name: str, dtype: str, shape: tuple[int, ...], scope: str):
        self.name, self.dtype, self.shape, self.scope = name, dtype, tuple(shape), scope
        strides, acc = [], 1
        for s in reversed(self.shape):
            strides.append(acc)
            acc *= s
        self.strides = tuple(reversed(strides))
        self.size = acc
        #: elements to allocate: at least ``size``; more when guarded-out iterations of
        #: a tile larger than its region compute addresses past the region (see lowering)
        self.capacity = acc

    def flat_index(self, indices) -> E.Expr:
        out: E.Expr | None = None
        for i, s in zip(indices, self.strides):
            term = i if s == 1 else E.Binary("*", i, E.Const(s, i.dtype))
            out = term if out is None else E.Binary("+", out, term)
        return out if out is not None else E.Const(0, "int64")

    def __repr__(self) -> str:
        return f"Buffer({self.name}, {self.dtype}, {self.shape}, {self.scope})"


class Load(E.Expr):
    """``buffer[index]`` on the flat buffer. ``in_range``: for a read whose index could
    not be proven inside its tensor at build time (``ir.index_check``), the condition
    that it is; where it fails, the kernel reads element 0 and reports an error."""

    __slots__ = ("buffer", "index", "in_range")

    def __init__(self, buffer: Buffer, index: E.Expr, in_range: E.Expr | None = None):
        self.buffer, self.index, self.in_range = buffer, index, in_range
        self.dtype = buffer.dtype

    def children(self):
        return (self.index,) if self.in_range is None else (self.index, self.in_range)

    def rebuild(self, kids):
        return Load(self.buffer, *kids)

    def to_str(self) -> str:
        check = "" if self.in_range is None else f" if {expr_str(self.in_range)} else error"
        return f"{self.buffer.name}[{expr_str(self.index)}{check}]"


class Stmt:
    pass


@dataclass(frozen=True, eq=False)
class Store(Stmt):
    buffer: Buffer
    index: E.Expr
    value: E.Expr


@dataclass(frozen=True, eq=False, init=False)
class For(Stmt):
    var: E.Var
    extent: int
    kind: str
    body: Stmt
    #: name of the iterator this loop came from, for printing and features
    name: str = ""

    def __init__(self, var: E.Var, extent: int, kind: str, body: Stmt, name: str = ""):
        # written out: a frozen dataclass's own __init__ sets each field through
        # object.__setattr__, and lowering for features makes ~10^5 loops a search round
        d = self.__dict__
        d["var"], d["extent"], d["kind"], d["body"], d["name"] = var, extent, kind, body, name


@dataclass(frozen=True, eq=False)
class Seq(Stmt):
    stmts: tuple


@dataclass(frozen=True, eq=False)
class IfThenElse(Stmt):
    cond: E.Expr
    then: Stmt
    otherwise: Stmt | None = None


@dataclass(frozen=True, eq=False)
class Allocate(Stmt):
    buffer: Buffer
    body: Stmt


@dataclass(frozen=True, eq=False)
class Pragma(Stmt):
    """``auto_unroll_max_step``: unroll the loop nests inside whose trip count is at most this."""
    key: str
    value: int
    body: Stmt = field(default=None)


@dataclass(frozen=True, eq=False)
class Prefetch(Stmt):
    """CPU: a hint to fetch the cache line of ``buffer[index]`` ahead of its use (it reads
    nothing and never faults; ``ir.cpu.prefetch`` adds them after lowering)."""
    buffer: Buffer
    index: E.Expr


@dataclass(frozen=True, eq=False)
class Barrier(Stmt):
    """GPU: every thread of the block waits here until all have arrived, and sees the
    shared memory they wrote before (``__syncthreads``)."""


@dataclass(frozen=True, eq=False)
class AllReduce(Stmt):
    """GPU cross-thread reduction: ``buffer[index]`` (local to each thread) becomes
    ``combiner`` ("sum", "max" or "min") of its values in all threads of the block. Every
    thread of the block must execute it."""
    buffer: Buffer
    index: E.Expr
    combiner: str


def seq(stmts) -> Stmt:
    flat = []
    for s in stmts:
        if s is None:
            continue
        if isinstance(s, Seq):
            flat.extend(s.stmts)
        else:
            flat.append(s)
    return flat[0] if len(flat) == 1 else Seq(tuple(flat))


def children(s: Stmt) -> tuple:
    """The statements directly inside ``s`` (the walk every pass and code generator shares)."""
    if isinstance(s, Seq):
        return s.stmts
    if isinstance(s, (For, Allocate, Pragma)):
        return (s.body,)
    if isinstance(s, IfThenElse):
        return (s.then,) if s.otherwise is None else (s.then, s.otherwise)
    return ()


def nest_trips(s: Stmt) -> int:
    """Iterations of the deepest path through a loop nest: what ``auto_unroll_max_step``
    compares with (code generation unrolls by it, features count what it unrolls)."""
    t = type(s)
    if t is For:
        return s.extent * nest_trips(s.body)
    if t is Seq:
        return max((nest_trips(x) for x in s.stmts), default=1)
    if t is IfThenElse:
        return max(nest_trips(s.then), nest_trips(s.otherwise) if s.otherwise is not None else 1)
    if t is Allocate or t is Pragma:
        return nest_trips(s.body)
    return 1


def stmt_str(s: Stmt, indent: int = 0) -> str:
    """Pseudo-code of a statement, one line per node."""
    pad = "  " * indent
    if isinstance(s, For):
        tag = "" if s.kind == "serial" else f" ({s.kind})"
        return f"{pad}for {s.var.name} in range({s.extent}){tag}:\n{stmt_str(s.body, indent + 1)}"
    if isinstance(s, Seq):
        return "\n".join(stmt_str(x, indent) for x in s.stmts)
    if isinstance(s, Store):
        return f"{pad}{s.buffer.name}[{expr_str(s.index)}] = {expr_str(s.value)}"
    if isinstance(s, IfThenElse):
        text = f"{pad}if {expr_str(s.cond)}:\n{stmt_str(s.then, indent + 1)}"
        if s.otherwise is not None:
            text += f"\n{pad}else:\n{stmt_str(s.otherwise, indent + 1)}"
        return text
    if isinstance(s, Allocate):
        return f"{pad}allocate {s.buffer.name}[{s.buffer.capacity}] {s.buffer.dtype} ({s.buffer.scope})\n" \
               f"{stmt_str(s.body, indent)}"
    if isinstance(s, Pragma):
        return f"{pad}pragma {s.key}={s.value}:\n{stmt_str(s.body, indent + 1)}"
    if isinstance(s, Barrier):
        return f"{pad}barrier"
    if isinstance(s, Prefetch):
        return f"{pad}prefetch {s.buffer.name}[{expr_str(s.index)}]"
    if isinstance(s, AllReduce):
        at = f"{s.buffer.name}[{expr_str(s.index)}]"
        return f"{pad}{at} = allreduce_{s.combiner}({at}) over the block's threads"
    return f"{pad}<{type(s).__name__}>"
