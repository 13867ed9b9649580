"""Lowering: a State becomes a loop-IR function over flat buffers."""
from __future__ import annotations

from dataclasses import dataclass

from . import expr as E
from .loop_ir import Allocate, Buffer, For, IfThenElse, Load, Pragma, Stmt, Store, seq
from .simplify import Simplifier
from .tensor import ComputeOp

_LOOP_KIND = {"none": "serial", "parallel": "parallel", "vectorize": "vectorize", "unroll": "unroll"}


@dataclass
class LoweredFunc:
    """A kernel in loop IR: ``args`` are the buffers of the DAG's tensors in argument order."""
    name: str
    args: list[Buffer]
    body: Stmt

    def __str__(self) -> str:
        from .loop_ir import stmt_str
        head = ", ".join(f"{b.name}: {b.dtype}{list(b.shape)}" for b in self.args)
        return f"def {self.name}({head}):\n{stmt_str(self.body, 1)}"


class Lowering:
    def __init__(self, state):
        self.state = state
        self.dag = state.dag
        self.stage_of = {id(st.op): st for st in state.stages}
        self.buffers: dict[int, Buffer] = {}
        self.args: list[Buffer] = []
        for pos, t in enumerate(self.dag.tensors):
            buf = Buffer(t.name, t.dtype, t.shape, "arg")
            self.buffers[id(t.op)] = buf
            self.args.append(buf)
        self.allocations: list[Buffer] = []
        for st in state.stages:
            if st.is_placeholder or st.compute_at == "inline" or id(st.op) in self.buffers:
                continue
            buf = Buffer(st.op.name, st.op.dtype, st.op.shape, "global")
            self.buffers[id(st.op)] = buf
            self.allocations.append(buf)

    def run(self, name: str) -> LoweredFunc:
        body = seq(self.stage_nest(st) for st in self.state.stages
                   if not st.is_placeholder and st.compute_at == "root")
        for buf in reversed(self.allocations):
            body = Allocate(buf, body)
        return LoweredFunc(name, self.args, body)

    # expressions -----------------------------------------------------------------------
    def read(self, e: E.TensorRead) -> E.Expr:
        op = e.tensor.op
        st = self.stage_of.get(id(op))
        if st is not None and st.compute_at == "inline":
            body = E.substitute(op.body, dict(zip(op.axis, e.indices)))
            return self.expr(body)
        return Load(self.buffers[id(op)], self.buffers[id(op)].flat_index(e.indices))

    def expr(self, e: E.Expr) -> E.Expr:
        return E.transform(e, lambda n: self.read(n) if isinstance(n, E.TensorRead) else None)

    # statements ------------------------------------------------------------------------
    def stage_nest(self, st) -> Stmt:
        op: ComputeOp = st.op
        simplify = Simplifier(st.iter_bounds())
        axis_map = dict(zip(tuple(op.axis) + tuple(op.reduce_axis), st.axis_values))
        buf = self.buffers[id(op)]
        index = simplify(buf.flat_index([axis_map[ax] for ax in op.axis]))
        body = op.body
        guards = [simplify(g) for g in st.guards]
        guards = [g for g in guards if not (isinstance(g, E.Const) and g.value)]
        if isinstance(body, E.Reduce):
            acc = Load(buf, index)
            source = simplify(self.expr(E.substitute(body.source, axis_map)))
            combined = E.Binary(body.combiner if body.combiner != "sum" else "+", acc, source)
            if body.condition is not None:
                cond = simplify(self.expr(E.substitute(body.condition, axis_map)))
                combined = E.Select(cond, combined, acc)
            update = _guarded(Store(buf, index, combined), guards)
            init = Store(buf, index, body.identity())
            return self._reduction_nest(st, update, init, guards)
        value = simplify(self.expr(E.substitute(body, axis_map)))
        return self._wrap_pragma(st, self._loops(st.iters, _guarded(Store(buf, index, value), guards)))

    def _reduction_nest(self, st, update: Stmt, init: Store, guards) -> Stmt:
        """Put the init before the outermost reduce loop, inside loops over the space
        iterators that come after it (as TVM does when reduce loops are reordered out)."""
        first = next((p for p, it in enumerate(st.iters) if it.kind == "reduce"), len(st.iters))
        inner_space = [it for it in st.iters[first:] if it.kind == "space"]
        space_vars = {id(it.var) for it in st.iters if it.kind == "space"}
        init_guards = [g for g in guards if all(id(v) in space_vars for v in E.free_vars(g))]
        init_nest = self._loops(inner_space, _guarded(init, init_guards), annotate=False)
        main = self._loops(st.iters[first:], update)
        return self._wrap_pragma(st, self._loops(st.iters[:first], seq([init_nest, main])))

    def _loops(self, iters, body: Stmt, annotate: bool = True) -> Stmt:
        for it in reversed(iters):
            kind = _LOOP_KIND[it.annotation] if annotate else "serial"
            body = For(it.var, it.extent, kind, body, it.name)
        return body

    @staticmethod
    def _wrap_pragma(st, body: Stmt) -> Stmt:
        if st.auto_unroll_max_step:
            return Pragma("auto_unroll_max_step", st.auto_unroll_max_step, body)
        return body


def _guarded(stmt: Stmt, guards) -> Stmt:
    return IfThenElse(E.all_of(guards), stmt) if guards else stmt


def lower(state, name: str = "main") -> LoweredFunc:
    """Lower ``state`` (a State, or a ComputeDAG for its naive program) to the loop IR."""
    if not hasattr(state, "stages"):
        state = state.init_state()
    return Lowering(state).run(name)
