"""Loop-IR passes that turn one root stage's nest into a CUDA kernel body.

- ``inject_virtual_threads``: a ``vthread`` loop disappears into the statements that
  depend on it (TVM's InjectVirtualThread). What does not depend on the virtual thread
  (a shared-memory tile load, a barrier) runs once; what does is replicated once per
  virtual thread, with each thread-private buffer allocated inside the loop given one
  copy per virtual thread. One thread then computes several tiles that are far apart
  (a strided register tile) from one shared-memory tile.
- ``bind_threads``: ``blockIdx.x`` loops become digits of the block index, ``threadIdx.x``
  loops the thread index. A thread loop shorter than the block is guarded at every store
  under it (never around a barrier, which every thread must reach); a store to memory
  other threads see that no thread loop covers is made by thread 0 alone.
"""
from __future__ import annotations

from dataclasses import replace

from .. import expr as E
from ..lower import LoweringError
from ..loop_ir import Allocate, AllReduce, Barrier, Buffer, For, IfThenElse, Load, Pragma, Seq, Stmt, Store, children, seq
from ..simplify import Simplifier

#: the index of the thread in its block and of the block in the grid, as code sees them
THREAD_IDX = E.Var("threadIdx.x")
BLOCK_IDX = E.Var("blockIdx.x")


# statement helpers -----------------------------------------------------------------------

def with_children(s: Stmt, kids) -> Stmt:
    if isinstance(s, Seq):
        return seq(kids)
    if isinstance(s, (For, Allocate, Pragma)):
        return replace(s, body=kids[0])
    if isinstance(s, IfThenElse):
        return replace(s, then=kids[0], otherwise=kids[1] if len(kids) > 1 else None)
    return s


def own_exprs(s: Stmt) -> tuple:
    """The expressions a statement holds itself (not those of its children)."""
    if isinstance(s, Store):
        return (s.index, s.value)
    if isinstance(s, AllReduce):
        return (s.index,)
    if isinstance(s, IfThenElse):
        return (s.cond,)
    return ()


def walk(s: Stmt):
    """Every statement under ``s`` (pre-order)."""
    yield s
    for k in children(s):
        yield from walk(k)


def map_exprs(s: Stmt, fn) -> Stmt:
    """``s`` with ``fn`` applied to every expression in it."""
    kids = tuple(map_exprs(k, fn) for k in children(s))
    if isinstance(s, Store):
        return Store(s.buffer, fn(s.index), fn(s.value))
    if isinstance(s, AllReduce):
        return AllReduce(s.buffer, fn(s.index), s.combiner)
    if isinstance(s, IfThenElse):
        return IfThenElse(fn(s.cond), *kids) if len(kids) == 2 else IfThenElse(fn(s.cond), kids[0])
    return with_children(s, kids) if kids else s


def substitute(s: Stmt, mapping: dict) -> Stmt:
    return map_exprs(s, lambda e: E.substitute(e, mapping))


def uses(s: Stmt, var: E.Var) -> bool:
    return any(n is var for x in walk(s) for e in own_exprs(x) for n in E.walk(e))


def buffers_accessed(s: Stmt) -> list[Buffer]:
    """Buffers loaded from or stored to under ``s``, in order of first access."""
    seen: dict[int, Buffer] = {}
    for x in walk(s):
        if isinstance(x, (Store, AllReduce)):
            seen.setdefault(id(x.buffer), x.buffer)
        for e in own_exprs(x):
            for n in E.walk(e):
                if isinstance(n, Load):
                    seen.setdefault(id(n.buffer), n.buffer)
    return list(seen.values())


# virtual threads ---------------------------------------------------------------------------

def inject_virtual_threads(s: Stmt) -> Stmt:
    """Remove every ``vthread`` loop (innermost first; see the module docstring)."""
    kids = tuple(inject_virtual_threads(k) for k in children(s))
    s = with_children(s, kids) if kids else s
    if isinstance(s, For) and s.kind == "vthread":
        return _VirtualThread(s.var, s.extent, s.body).run()
    return s


class _VirtualThread:
    def __init__(self, var: E.Var, extent: int, body: Stmt):
        self.var, self.extent, self.body = var, extent, body
        # thread-private buffers allocated inside the loop: one copy per virtual thread
        self.copies: dict[int, tuple[Buffer, int]] = {}
        for x in walk(body):
            if isinstance(x, Allocate) and x.buffer.scope == "local":
                old = x.buffer
                new = Buffer(old.name, old.dtype, (old.capacity * extent,), "local")
                self.copies[id(old)] = (new, old.capacity)

    def touched(self, s: Stmt) -> bool:
        for x in walk(s):
            if isinstance(x, (Store, AllReduce)) and id(x.buffer) in self.copies:
                return True
            for e in own_exprs(x):
                for n in E.walk(e):
                    if n is self.var or (isinstance(n, Load) and id(n.buffer) in self.copies):
                        return True
        return False

    def run(self) -> Stmt:
        return self.inject(self.body)

    def inject(self, s: Stmt) -> Stmt:
        if not self.touched(s):
            return s
        if isinstance(s, (Seq, For, Pragma)) or (isinstance(s, IfThenElse) and not uses_expr(s.cond, self.var)):
            return with_children(s, tuple(self.inject(k) for k in children(s)))
        if isinstance(s, Allocate):
            buf = self.copies.get(id(s.buffer), (s.buffer,))[0]
            return Allocate(buf, self.inject(s.body))
        for x in walk(s):
            if isinstance(x, Store) and x.buffer.scope == "shared":
                raise LoweringError(f"the shared-memory stage '{x.buffer.name}' depends on a virtual thread; "
                                       "a shared tile must serve all virtual threads of a block")
        return seq(self.copy_for(s, c) for c in range(self.extent))

    def copy_for(self, s: Stmt, c: int) -> Stmt:
        """``s`` as virtual thread ``c`` runs it: its variable is ``c`` and every
        thread-private buffer is that thread's copy."""
        value = E.Const(c, self.var.dtype)

        def redirect(n):
            if isinstance(n, Load) and id(n.buffer) in self.copies:
                new, size = self.copies[id(n.buffer)]
                return Load(new, _offset(n.index, c * size))
            return value if n is self.var else None

        def rewrite(x: Stmt) -> Stmt:
            kids = tuple(rewrite(k) for k in children(x))
            if isinstance(x, (Store, AllReduce)):
                index = E.transform(x.index, redirect)
                buf = x.buffer
                if id(buf) in self.copies:
                    buf, size = self.copies[id(buf)]
                    index = _offset(index, c * size)
                if isinstance(x, AllReduce):
                    return AllReduce(buf, index, x.combiner)
                return Store(buf, index, E.transform(x.value, redirect))
            if isinstance(x, IfThenElse):
                return IfThenElse(E.transform(x.cond, redirect), *kids)
            if isinstance(x, Allocate) and id(x.buffer) in self.copies:
                return Allocate(self.copies[id(x.buffer)][0], kids[0])
            return with_children(x, kids) if kids else x

        return rewrite(s)


def uses_expr(e: E.Expr, var: E.Var) -> bool:
    return any(n is var for n in E.walk(e))


def _offset(index: E.Expr, delta: int) -> E.Expr:
    return index if delta == 0 else E.Binary("+", index, E.Const(delta, index.dtype))


# thread bindings -----------------------------------------------------------------------------

def bind_threads(body: Stmt) -> tuple[Stmt, int, int]:
    """(kernel body over ``THREAD_IDX``/``BLOCK_IDX``, grid size, block size)."""
    block_loops = [x for x in walk(body) if isinstance(x, For) and x.kind == "blockIdx.x"]
    for outer, inner in zip(block_loops, block_loops[1:]):
        if not any(x is inner for x in walk(outer.body)):
            raise LoweringError(f"loops '{outer.name}' and '{inner.name}' are both bound to blockIdx.x "
                                   "but neither is inside the other")
    grid = 1
    for lp in block_loops:
        grid *= lp.extent
    block = max((x.extent for x in walk(body) if isinstance(x, For) and x.kind == "threadIdx.x"), default=1)
    digits, stride = {}, grid
    for lp in block_loops:
        stride //= lp.extent
        digit = BLOCK_IDX if stride == 1 else E.Binary("//", BLOCK_IDX, E.Const(stride, "int64"))
        if lp is not block_loops[0]:
            digit = E.Binary("%", digit, E.Const(lp.extent, "int64"))
        digits[id(lp.var)] = digit
    out = _Binder(block, digits).walk(body, [], False)
    bounds = {THREAD_IDX: (0, block - 1), BLOCK_IDX: (0, grid - 1)}
    bounds.update({x.var: (0, x.extent - 1) for x in walk(out) if isinstance(x, For)})
    simplify = Simplifier(bounds)
    return map_exprs(out, simplify), grid, block


class _Binder:
    def __init__(self, block: int, digits: dict):
        self.block, self.digits = block, digits

    def walk(self, s: Stmt, guards: list, in_thread: bool) -> Stmt:
        if isinstance(s, For) and s.kind == "blockIdx.x":
            return self.walk(substitute(s.body, {s.var: self.digits[id(s.var)]}), guards, in_thread)
        if isinstance(s, For) and s.kind == "threadIdx.x":
            body = substitute(s.body, {s.var: THREAD_IDX})
            more = [E.Compare("<", THREAD_IDX, E.Const(s.extent, "int64"))] if s.extent < self.block else []
            return self.walk(body, guards + more, True)
        if isinstance(s, Store):
            conds = list(guards)
            if not in_thread and self.block > 1 and s.buffer.scope != "local":
                conds.append(E.Compare("==", THREAD_IDX, E.Const(0, "int64")))
            return IfThenElse(E.all_of(conds), s) if conds else s
        kids = tuple(self.walk(k, guards, in_thread) for k in children(s))
        return with_children(s, kids) if kids else s


def check_barriers_uniform(body: Stmt) -> None:
    """Every thread of a block must reach each barrier and cross-thread reduction: none
    may sit under a condition on the thread index."""
    def visit(s: Stmt, divergent: bool):
        if isinstance(s, (Barrier, AllReduce)) and divergent:
            raise LoweringError("a barrier or cross-thread reduction sits under a condition on the thread "
                                   "index: not every thread of the block would reach it")
        if isinstance(s, IfThenElse):
            divergent = divergent or uses_expr(s.cond, THREAD_IDX)
        for k in children(s):
            visit(k, divergent)
    visit(body, False)
