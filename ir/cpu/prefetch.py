"""Software prefetch of a kernel argument that a loop streams while it reuses each block.

In a network the weights of a kernel come from memory (the other kernels' weights evicted
them). A dense layer's program that walks its packed weights one block per iteration of
its reduction loop, and reuses that block across all its rows before it moves on, asks
for a few new lines every few thousand cycles: too sparse a stream, broken at every page,
for the hardware prefetchers to run ahead of, so every block waits for memory (ViT's QKV
dense layer: 1.5 ms with its weights in the caches, 2.1 ms in a run). Such a loop gets,
at the top of its body, a prefetch of the block its iteration ``distance`` ahead reads.

A loop qualifies for an argument of at least ``MIN_BUFFER_BYTES`` when every read of it
inside the loop is affine in the loop nest's variables, the loop's variable moves it by at
least a cache line onto the next block (at most twice the block's span: a stream, not a
strided walk, which the stride prefetchers follow), the block one iteration reads is dense
(it reads at least half the elements it spans) and spans at most ``MAX_LINES`` lines, a loop
inside leaves its index unchanged (the reuse that starves the prefetchers), and the
iteration's work is at least ``SPARSE_OPERATIONS_PER_LINE`` operations per line of the block
(a sparse stream). Only the innermost qualifying loop of an argument prefetches it; loops
inside a vector loop get none.
"""
from __future__ import annotations

import dataclasses
import math

from .. import dtype as dt
from .. import expr as E
from ..loop_ir import Allocate, For, IfThenElse, Load, Pragma, Prefetch, Seq, Stmt, Store, children, seq
from ..simplify import Simplifier, linear_expr, structural_key

LINE_BYTES = 64
#: the most lines one iteration prefetches (a larger block is streamed by an inner loop)
MAX_LINES = 64
#: scalar operations of work to run ahead of a block's first use: about the latency of
#: memory (~100 ns) at two vector multiply-adds a cycle
LEAD_OPERATIONS = 16384
#: the most iterations ahead a prefetch reaches
MAX_DISTANCE = 8
#: a buffer smaller than this stays in the last-level cache between a network's runs or
#: comes from it (MobileNet-V3's squeeze-excitation layers read weights of 0.1-1 MB, and
#: hints made them 5-12 % slower in a run): only larger ones come from memory
MIN_BUFFER_BYTES = 2 << 20
#: a stream denser than a new line per this many scalar operations is one the hardware's
#: stream prefetcher keeps up with (BERT's dense layer over 8 rows: 128), and hints there
#: only cost instructions in a tight loop
SPARSE_OPERATIONS_PER_LINE = 1024


def add_prefetches(func):
    """``func`` (a ``LoweredFunc``) with prefetches of the arguments its loops stream under
    reuse (see the module docstring); the same function when none qualifies."""
    args = {id(b) for b in func.args}
    body, _ = _visit(func.body, args)
    return func if body is func.body else dataclasses.replace(func, body=body)


def _visit(s: Stmt, args: set) -> tuple[Stmt, set]:
    """``s`` with prefetches added inside, and the ids of the buffers prefetched in it."""
    if isinstance(s, Seq):
        parts = [_visit(x, args) for x in s.stmts]
        done = set().union(*(d for _, d in parts))
        return (s if all(a is b for a, (b, _) in zip(s.stmts, parts)) else Seq(tuple(p for p, _ in parts))), done
    if isinstance(s, (Allocate, Pragma)):
        body, done = _visit(s.body, args)
        return (s if body is s.body else dataclasses.replace(s, body=body)), done
    if isinstance(s, IfThenElse):
        then, d1 = _visit(s.then, args)
        other, d2 = _visit(s.otherwise, args) if s.otherwise is not None else (None, set())
        same = then is s.then and other is s.otherwise
        return (s if same else IfThenElse(s.cond, then, other)), d1 | d2
    if not isinstance(s, For) or s.kind == "vectorize":
        return s, set()       # inside a vector loop an index has lanes: no hints there
    body, done = _visit(s.body, args)
    if s.kind == "serial" and s.extent > 1:
        hints = []
        for buffer, loads in _reads(s.body, args).items():
            if id(buffer) not in done:
                found = _prefetches(s, buffer, loads)
                if found:
                    hints += found
                    done.add(id(buffer))
        if hints:
            body = seq(hints + [body])
    return (s if body is s.body else For(s.var, s.extent, s.kind, body, s.name)), done


def _reads(s: Stmt, args: set) -> dict:
    """{argument buffer: [index of each read]} of the reads inside ``s``."""
    out: dict = {}

    def expr(e):
        for x in E.walk(e):
            if isinstance(x, Load) and id(x.buffer) in args:
                out.setdefault(x.buffer, []).append(x.index)

    def stmt(x):
        if isinstance(x, Store):
            expr(x.index)
            expr(x.value)
        elif isinstance(x, IfThenElse):
            expr(x.cond)
        for child in children(x):
            stmt(child)
    stmt(s)
    return out


def _loops(s: Stmt) -> dict:
    """{id of var: (var, extent)} of the loops inside ``s``."""
    out = {}
    stack = [s]
    while stack:
        x = stack.pop()
        if isinstance(x, For):
            out[id(x.var)] = (x.var, x.extent)
        stack.extend(children(x))
    return out


def _operations(s: Stmt) -> int:
    """Statements executed by one run of ``s`` (its work, counted in stores)."""
    if isinstance(s, For):
        return s.extent * _operations(s.body)
    if isinstance(s, Store):
        return 1
    return sum(_operations(x) for x in children(s))


def _prefetches(loop: For, buffer, loads: list) -> list[Prefetch]:
    """The prefetches at the top of ``loop``'s body for its reads of ``buffer`` (their
    indices ``loads``), or [] when the loop does not stream it under reuse."""
    inner = _loops(loop.body)
    key = structural_key(loop.var)
    simplify = Simplifier()
    stride, outer, lows, highs, used, touched = None, None, [], [], set(), 0
    for index in loads:
        form = simplify.affine(index)
        rest, lo, hi = {}, form.const, form.const
        coef, elements = 0, 1
        for k, (atom, c) in form.terms.items():
            if k == key:
                coef = c
                continue
            if isinstance(atom, E.Var) and id(atom) in inner:
                extent = inner[id(atom)][1]
                lo, hi = lo + min(0, c * (extent - 1)), hi + max(0, c * (extent - 1))
                if extent > 1:
                    used.add(id(atom))
                    elements *= extent
                continue
            free = {id(v) for v in E.free_vars(atom)}
            if id(loop.var) in free or free & inner.keys():
                return []     # not affine in the nest's variables
            rest[k] = (atom, c)
        if stride is None:
            stride, outer = coef, rest
        elif coef != stride or rest.keys() != outer.keys() or any(rest[k][1] != outer[k][1] for k in rest):
            return []
        lows.append(lo)
        highs.append(hi)
        touched = max(touched, elements)
    size = dt.itemsize(buffer.dtype)
    if buffer.size * size < MIN_BUFFER_BYTES:
        return []
    if not stride or stride * size < LINE_BYTES:
        return []
    if all(extent == 1 or id(v) in used for v, extent in inner.values()):
        return []     # nothing reuses the block: a plain stream the hardware follows
    low = min(lows)
    span = max(highs) - low + 1
    lines = math.ceil(span * size / LINE_BYTES) + 1
    if lines > MAX_LINES or stride > 2 * span or 2 * touched < span:
        return []     # too large a block, a walk of gaps (a stride prefetcher's), a block of gaps
    work = _operations(loop.body)
    if work < SPARSE_OPERATIONS_PER_LINE * (lines - 1):
        return []     # a dense stream
    distance = min(MAX_DISTANCE, max(1, math.ceil(LEAD_OPERATIONS / work)))
    itype = loads[0].dtype
    per_line = LINE_BYTES // size
    terms = list(outer.values()) + [(loop.var, stride)]
    return [Prefetch(buffer, linear_expr(terms, low + stride * distance + j * per_line, itype))
            for j in range(lines)]
