"""Lowering: a State becomes a loop-IR function over flat buffers.

Root stages become loop nests one after the other; an inlined stage is expanded where it
is read; an attached stage is emitted inside its target's loop with a buffer that holds
only its region (indexed relative to the region's start), which is what lets a
cache_write stage live in registers.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

from . import dtype as dt
from . import expr as E
from .loop_ir import Allocate, Buffer, For, IfThenElse, Load, Pragma, Stmt, Store, seq, stmt_str
from .simplify import Simplifier, interval
from .bounds import all_iter_bounds
from .index_check import in_range, runtime_checked
from .layout import plan_all
from .padding import skip_padding

LOOP_KIND = {"none": "serial", "parallel": "parallel", "vectorize": "vectorize", "unroll": "unroll"}
#: attached buffers live on the stack (thread-private inside parallel loops); larger is an error
MAX_LOCAL_BYTES = 8 << 20


#: a padded row tile (a register tile's rows, no vector): at most this many rows ...
MAX_PADDED_ROWS = 8
#: ... past the end of its axis by at most this share of it
MAX_PADDED_ROW_SHARE = 1 / 8


@functools.lru_cache(maxsize=1024)
def padded_row_lengths(extent: int) -> tuple[int, ...]:
    """The register-tile rows (2 to ``MAX_PADDED_ROWS``) that may run past an axis of
    ``extent`` that no such tile divides (197 tokens: an exact row tile is 1 row, each
    multiply-add loading its own vector), each padding it by at most
    ``MAX_PADDED_ROW_SHARE``: 197 -> 2..8; 7 or 196 -> none. The CPU space draws them
    (``sketch_rules.annotation.FillTileSize``); lowering clamps the reads of the rows past
    the end to the last row (``Lowering._clamped_rows``) along such axes only."""
    if any(extent % r == 0 for r in range(2, MAX_PADDED_ROWS + 1)):
        return ()
    return tuple(r for r in range(2, MAX_PADDED_ROWS + 1)
                 if -(-extent // r) * r - extent <= MAX_PADDED_ROW_SHARE * extent)


class LoweringError(ValueError):
    """The State cannot be lowered (e.g. an attached region too large for the stack)."""


@dataclass
class LoweredFunc:
    """A kernel in loop IR: ``args`` are the buffers of the DAG's tensors in argument order."""
    name: str
    args: list[Buffer]
    body: Stmt
    #: constant inputs stored in a rewritten layout, by tensor name
    layouts: dict = None

    def __str__(self) -> str:
        head = ", ".join(f"{b.name}: {b.dtype}{list(b.shape)}" for b in self.args)
        return f"def {self.name}({head}):\n{stmt_str(self.body, 1)}"


class Lowering:
    """Lowering for the CPU; ``ir.cuda.lower.GPULowering`` extends it for the cuda target
    (thread bindings, shared memory and barriers, cross-thread reductions)."""
    #: iterator annotation -> loop kind; GPU bindings are not among them
    loop_kinds = LOOP_KIND
    #: padding taps skipped by branches around whole blocks (``ir.padding``)
    partition_padding = True
    #: ... and loops cut into their edge and middle pieces where one loop decides them
    #: (``evolution.features`` turns it off)
    cut_padding_loops = True
    #: local tiles run past their region where that is safe (``_needed_guards``)
    pad_local_tiles = True

    def __init__(self, state, layout_rewrite: bool = False):
        self.state = state
        self.dag = state.dag
        self.layouts = plan_all(state) if layout_rewrite else {}
        self.stage_of = {id(st.op): st for st in state.stages}
        self.buffers: dict[int, Buffer] = {}
        self.offsets: dict[int, tuple] = {}  # attached stages: region start of each dimension
        self.args: list[Buffer] = []
        for t in self.dag.tensors:
            layout = self.layouts.get(id(t.op))
            buf = Buffer(t.name, t.dtype, t.shape if layout is None else layout.shape, "arg")
            self.buffers[id(t.op)] = buf
            self.args.append(buf)
        self.allocations: list[Buffer] = []
        self.attached: dict[tuple[int, int], list[int]] = {}
        self.bounds = all_iter_bounds(state)
        self.simplify = Simplifier(self.bounds)
        for idx, st in enumerate(state.stages):
            if st.is_placeholder or st.compute_at == "inline" or id(st.op) in self.buffers:
                continue
            if st.compute_at == "iter":
                self.attached.setdefault(st.attach, []).append(idx)
                offsets = tuple(st.root_starts[:len(st.axes)])
                shape = self._tile_shape(st, offsets)
                nbytes = dt.itemsize(st.op.dtype)
                for n in shape:
                    nbytes *= n
                if nbytes > MAX_LOCAL_BYTES:
                    raise LoweringError(f"stage '{st.name}' computed inside '{state.stages[st.attach[0]].name}' "
                                        f"needs a {nbytes}-byte buffer per iteration (limit {MAX_LOCAL_BYTES})")
                self.buffers[id(st.op)] = Buffer(st.op.name, st.op.dtype, shape, "local")
                self.offsets[id(st.op)] = offsets
            else:
                buf = Buffer(st.op.name, st.op.dtype, st.op.shape, "global")
                self.buffers[id(st.op)] = buf
                self.allocations.append(buf)
        #: the simplifier even where ``simplify`` is replaced (the features skip it): what a
        #: guard may be dropped on must not depend on that
        self.exact = self.simplify
        self.reader = None  # the stage whose body is being lowered (for run-time index checks)

    def _tile_shape(self, st, offsets) -> tuple:
        """The local buffer of an attached stage: its region, widened where its guarded loops
        run past it (``pad_local_tiles``: a padded vector tile of 416 lanes over a region of
        408 channels gets rows of 416, so that a padded lane never lands on the next row's
        first ones and ``_needed_guards`` can drop the guard)."""
        shape = st.root_extents[:len(st.axes)]
        if not (self.pad_local_tiles and st.guards):
            return shape
        wide = []
        for value, offset, extent in zip(st.axis_values, offsets, shape):
            index = value if offset is None else E.Binary("-", value, offset)
            hi = interval(self.simplify(index), self.bounds)[1]
            wide.append(max(extent, int(hi) + 1) if hi != float("inf") else extent)
        return tuple(wide)

    def run(self, name: str) -> LoweredFunc:
        body = seq(self.stage_nest(idx) for idx, st in enumerate(self.state.stages)
                   if not st.is_placeholder and st.compute_at == "root")
        for buf in reversed(self.allocations):
            body = Allocate(buf, body)
        return LoweredFunc(name, self.args, body, {p.tensor_name: p for p in self.layouts.values()})

    # expressions -----------------------------------------------------------------------
    def index(self, op, indices) -> E.Expr:
        """Flat index of ``op``'s element ``indices`` in its buffer (region-relative if attached)."""
        offsets = self.offsets.get(id(op))
        if offsets is not None:
            indices = [i if o is None else E.Binary("-", i, o) for i, o in zip(indices, offsets)]
        return self.simplify(self.buffers[id(op)].flat_index(indices))

    def read(self, e: E.TensorRead) -> E.Expr:
        op = e.tensor.op
        st = self.stage_of.get(id(op))
        if st is not None and st.compute_at == "inline":
            reader, self.reader = self.reader, st
            try:
                return self.expr(st.body, dict(zip(st.axes, e.indices)))
            finally:
                self.reader = reader
        layout = self.layouts.get(id(op))
        if layout is not None:
            return Load(self.buffers[id(op)], self.simplify(self.buffers[id(op)].flat_index(layout.new_index())))
        return Load(self.buffers[id(op)], self.index(op, e.indices), self.runtime_check(e))

    def runtime_check(self, e: E.TensorRead) -> E.Expr | None:
        """The in-range condition of a read that ``ir.index_check`` could not prove safe
        (None for the proven reads: no cost in the kernel)."""
        if id(e.tensor) not in runtime_checked(self.reader.body, self.reader.all_axes):
            return None
        return self.simplify(in_range(e.tensor, e.indices))

    def expr(self, e: E.Expr, mapping: dict | None = None) -> E.Expr:
        """``e`` with its tensor reads lowered; with ``mapping``, the lowering of
        ``E.substitute(e, mapping)`` in one walk of ``e`` (the values are not walked: they
        hold no tensor reads, or lowered ones)."""
        if not mapping:
            return E.transform(e, lambda n: self.read(n) if isinstance(n, E.TensorRead) else None)
        by_id = {id(k): v for k, v in mapping.items()}
        read = self.read

        def lowered(n):
            if isinstance(n, E.TensorRead):
                return read(n)
            return by_id.get(id(n)) if isinstance(n, E.Var) else None
        return E.transform(e, lowered)

    # statements ------------------------------------------------------------------------
    def stage_nest(self, idx: int) -> Stmt:
        st = self.state.stages[idx]
        self.reader = st
        op = st.op
        axis_map = dict(zip(st.all_axes, st.axis_values))
        unit = {it.var: E.Const(0, it.var.dtype) for it in st.iters if it.extent == 1}
        if unit:  # a loop of one iteration contributes nothing to an index, simplified or not
            axis_map = {ax: E.substitute(v, unit) for ax, v in axis_map.items()}
        buf = self.buffers[id(op)]
        index = self.index(op, [axis_map[ax] for ax in st.axes])
        if buf.scope == "local":
            # a tile sampled for the whole axis may loop past the region (guarded): keep even
            # those addresses inside the allocation, so no access can leave it
            hi = interval(index, self.bounds)[1]
            if hi != float("inf"):
                buf.capacity = max(buf.capacity, int(hi) + 1)
        body = st.body
        guards = [self.simplify(g) for g in st.guards]
        guards = [g for g in guards if not (isinstance(g, E.Const) and g.value)]
        if isinstance(body, E.Reduce):
            acc = Load(buf, index)

            def value_of(reads: dict) -> E.Expr:
                combined = E.Binary(body.combiner if body.combiner != "sum" else "+", acc,
                                    self.simplify(self.expr(body.source, reads)))
                if body.condition is not None:
                    combined = E.Select(self.simplify(self.expr(body.condition, reads)), combined, acc)
                return combined
            combined, guards = self._unguarded_value(st, buf, axis_map, value_of, guards)
            update = guarded(Store(buf, index, combined), guards)
            init = Store(buf, index, body.identity())
            nest = self._reduction_nest(idx, st, update, init, guards)
        else:
            value, guards = self._unguarded_value(st, buf, axis_map, lambda reads: self.simplify(self.expr(body, reads)),
                                                  guards)
            nest = self._loops(idx, st.iters, 0, guarded(Store(buf, index, value), guards))
        if st.auto_unroll_max_step:
            nest = Pragma("auto_unroll_max_step", st.auto_unroll_max_step, nest)
        return nest

    def _unguarded_value(self, st, buf: Buffer, axis_map: dict, value_of, guards: list) -> tuple[E.Expr, list]:
        """The stored value (``value_of(axis map of its reads)``) and the guards it needs
        (``_needed_guards``). Where a guard stays only because a read would leave its tensor,
        the reads along padded row tiles are clamped to the last row (``_clamped_rows``) and
        the guard goes if that keeps them in: a register tile of 4 rows over 197 tokens
        computes its 3 rows past the end from the last one, and its consumer's guard drops them."""
        value = value_of(axis_map)
        needed = self._needed_guards(st, buf, axis_map, value, guards)
        if len(needed) < len(guards) or not guards or not self.pad_local_tiles or buf.scope != "local":
            return value, needed
        clamped = self._clamped_rows(st, axis_map)
        if clamped is None:
            return value, needed
        clamped_value = value_of(clamped)
        fewer = self._needed_guards(st, buf, axis_map, clamped_value, guards)
        return (clamped_value, fewer) if len(fewer) < len(guards) else (value, needed)

    def _clamped_rows(self, st, axis_map: dict) -> dict | None:
        """``axis_map`` with each space axis that its loops run past, that no small tile
        divides (``padded_row_lengths``: a padded row tile) and that is not the vector
        loop's, read at ``min(value, extent - 1)``; None if there is none. A tile past the
        region of an axis that small tiles divide keeps its guard."""
        last = st.iters[-1] if st.iters else None
        vector = last.var if last is not None and last.annotation == "vectorize" else None
        clamped = dict(axis_map)
        for d, ax in enumerate(st.axes):
            value = axis_map[ax]
            extent = int(st.op.shape[d])
            if not padded_row_lengths(extent) or (vector is not None and any(v is vector for v in E.free_vars(value))):
                continue
            if interval(self.exact(value), self.bounds)[1] >= extent:
                clamped[ax] = E.Binary("min", value, E.Const(extent - 1, value.dtype))
        return None if all(clamped[a] is axis_map[a] for a in st.axes) else clamped

    def _needed_guards(self, st, buf: Buffer, axis_map: dict, value: E.Expr, guards: list) -> list:
        """``guards`` less those a local tile can run past (``pad_local_tiles``): a vector
        tile of 16 lanes over 408 channels computes its last 8 lanes into its own register
        tile instead of masking every multiply-add, and its consumer's guard keeps them out
        of the output. A guard goes only where that cannot change a result or leave a
        buffer: it names no reduce loop of the stage (a padded lane is never summed into a
        real one), each dimension of the tile but the first stays inside its extent (a
        padded element never lands on a real one), and every read of ``value`` is proven in
        range without it (a packed weight padded with zeros, not a row of the next one)."""
        if not guards or not self.pad_local_tiles or buf.scope != "local":
            return guards
        reduce_vars = {id(it.var) for it in st.iters if it.kind == "reduce"}
        kept = [g for g in guards if any(id(v) in reduce_vars for v in E.free_vars(g))]
        if len(kept) == len(guards):
            return guards
        offsets = self.offsets.get(id(st.op), ())
        for d, (ax, extent) in enumerate(zip(st.axes, buf.shape)):
            offset = offsets[d] if d < len(offsets) else None
            i = axis_map[ax] if offset is None else E.Binary("-", axis_map[ax], offset)
            lo, hi = interval(self.exact(i), self.bounds)
            if lo < 0 or (d > 0 and hi >= extent):
                return guards
        for node in E.walk(value):
            if isinstance(node, Load):
                lo, hi = interval(self.exact(node.index), self.bounds)
                if node.in_range is not None or lo < 0 or hi >= node.buffer.capacity:
                    return guards
        return kept

    def _reduction_nest(self, idx: int, st, update: Stmt, init: Store, guards) -> Stmt:
        """Put the init before the outermost reduce loop, inside loops over the space
        iterators that come after it (as TVM does when reduce loops are reordered out)."""
        first = next((p for p, it in enumerate(st.iters) if it.kind == "reduce"), len(st.iters))
        inner_space = [it for it in st.iters[first:] if it.kind == "space"]
        space_vars = {id(it.var) for it in st.iters if it.kind == "space"} | \
            {id(v) for g in guards for v in E.free_vars(g)} - {id(it.var) for it in st.iters}
        init_guards = [g for g in guards if all(id(v) in space_vars for v in E.free_vars(g))]
        init_nest = _plain_loops(inner_space, guarded(init, init_guards))
        main = self._loops(idx, st.iters[first:], first, update)
        if self.partition_padding:
            main = skip_padding(main, self.cut_padding_loops)
        return self._loops(idx, st.iters[:first], 0, seq([init_nest, main]))

    def _loops(self, idx: int, iters, offset: int, body: Stmt) -> Stmt:
        """Loops over ``iters`` (positions ``offset..``), with the stages attached to each
        loop emitted at its top."""
        for pos in range(len(iters) - 1, -1, -1):
            it = iters[pos]
            children = self.attached.get((idx, offset + pos), ())
            if children:
                body = seq(self.attached_nests(children) + [body])
                for c in reversed(children):
                    body = Allocate(self.buffers[id(self.state.stages[c].op)], body)
            kind = self.loop_kinds.get(it.annotation)
            if kind is None:
                raise LoweringError(f"iterator '{it.name}' of '{self.state.stages[idx].name}' is bound to "
                                    f"{it.annotation}, a GPU thread binding: build it for target='cuda' "
                                    "(ir.cuda.lower), not for the CPU")
            body = For(it.var, it.extent, kind, body, it.name)
        return body

    def attached_nests(self, children) -> list[Stmt]:
        """The nests of the stages computed at the top of one loop, in stage order."""
        return [self.stage_nest(c) for c in children]


def _plain_loops(iters, body: Stmt) -> Stmt:
    """Loops of a reduction's init: unrolled/vectorised like the main nest (so a register
    tile is initialised with constant indices) but never parallel."""
    for it in reversed(iters):
        kind = LOOP_KIND[it.annotation] if it.annotation in ("unroll", "vectorize") else "serial"
        body = For(it.var, it.extent, kind, body, it.name)
    return body


def guarded(stmt: Stmt, guards) -> Stmt:
    return IfThenElse(E.all_of(guards), stmt) if guards else stmt


def lower(state, name: str = "main", layout_rewrite: bool = False) -> LoweredFunc:
    """Lower ``state`` (a State, or a ComputeDAG for its naive program) to the loop IR;
    ``layout_rewrite`` stores constant inputs in the order their reading loops walk them."""
    if not hasattr(state, "stages"):
        state = state.init_state()
    return Lowering(state, layout_rewrite).run(name)
