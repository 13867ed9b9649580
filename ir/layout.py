"""Layout rewrite of constant inputs (weights), as Ansor does for conv2d and dense weights.

A constant tensor read by one stage is stored in the order in which that stage's loops
walk it: each index of the read is an affine form over loop-variable atoms (a loop
variable, or a fused variable's ``// n`` or ``% n`` part); the new layout has one
dimension per atom, ordered by loop position, so the innermost loops read it
contiguously (for a tiled GEMM, B becomes column panels). The packing happens once,
outside the kernel (``Kernel.pack``): the kernel's argument is the packed array.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from . import expr as E
from .bounds import all_iter_bounds, expand_reads
from .memo import IdentityMemo
from .simplify import Simplifier, interval, structural_key

#: give up when the packed layout would be this much larger than the original
MAX_GROWTH = 2.0


@dataclass
class LayoutPlan:
    """How one constant is repacked: ``atoms`` (loop-variable parts, outer to inner) with
    their ranges give the new shape; ``forms`` give each original index from the atoms."""
    tensor_name: str
    original_shape: tuple[int, ...]
    atoms: list[E.Expr]
    lows: list[int]
    shape: tuple[int, ...]
    #: per original dimension: (constant, [(atom position, coefficient), ...])
    forms: list[tuple[int, list[tuple[int, int]]]]
    stage_name: str

    def new_index(self) -> list[E.Expr]:
        """Indices into the packed buffer, as expressions of the reading stage's loops."""
        return [a if lo == 0 else E.Binary("-", a, E.Const(lo, a.dtype)) for a, lo in zip(self.atoms, self.lows)]

    def pack(self, array: np.ndarray) -> np.ndarray:
        """The packed copy of ``array`` (zeros where a padded tile runs past its edge). Each
        original index is an affine form of the atoms: it is computed over the atoms it
        uses only (broadcast, not one full-size array per dimension), and the gather makes
        the one full-size array: a model's weights pack in a fraction of a second."""
        rank = len(self.shape)

        def atom_values(pos: int) -> np.ndarray:   # shaped to broadcast along dimension pos
            view = [1] * rank
            view[pos] = self.shape[pos]
            return (np.arange(self.shape[pos], dtype=np.int64) + self.lows[pos]).reshape(view)

        valid = np.ones((1,) * rank, dtype=bool)
        old = []
        for d, (const, terms) in enumerate(self.forms):
            idx = np.full((1,) * rank, const, dtype=np.int64)
            for pos, coef in terms:
                idx = idx + coef * atom_values(pos)
            valid = valid & (idx >= 0) & (idx < self.original_shape[d])
            old.append(np.clip(idx, 0, max(self.original_shape[d] - 1, 0)))
        gathered = array[tuple(old)] if old else array
        packed = np.array(np.broadcast_to(gathered, self.shape))
        if not valid.all():
            packed[~np.broadcast_to(valid, self.shape)] = 0
        return packed


#: reads by the stages' operations and bodies and which stages are inlined, all they depend
#: on: the programs of one sketch share them whatever their loops
_READS = IdentityMemo(20_000)


def _the_read(state, tensor) -> tuple[int, tuple] | None:
    """(index of the one stage that reads ``tensor``, the indices of its read, through
    inlined stages), or None when several stages read it, or an inlined one, or one reads
    it at different indices."""
    stages = state.stages
    sources = [tensor.op] + [x for st in stages for x in (st.op, st.body, st.axes)]
    return _READS.get(sources, tuple(st.compute_at == "inline" for st in stages),
                      lambda: _find_the_read(state, tensor))


def _find_the_read(state, tensor) -> tuple[int, tuple] | None:
    readers = state.readers(state.stage_index(tensor.op))
    if len(readers) != 1 or state.stages[readers[0]].compute_at == "inline":
        return None
    reads = expand_reads(state, state.stages[readers[0]].body, tensor)
    if len({tuple(structural_key(i) for i in r) for r in reads}) != 1:
        return None
    return readers[0], reads[0]


def _loop_position(state, stage_idx: int) -> dict[int, int]:
    """Position of every loop variable on the path from the root to ``stage_idx``'s loops."""
    segments = [(stage_idx, None)]
    st = state.stages[stage_idx]
    while st.compute_at == "iter":
        target, pos = st.attach
        segments.append((target, pos))
        st = state.stages[target]
    order = []
    for idx, upto in reversed(segments):
        iters = state.stages[idx].iters
        order.extend(it.var for it in (iters if upto is None else iters[:upto + 1]))
    return {id(v): p for p, v in enumerate(order)}


def plan(state, tensor, read=False) -> LayoutPlan | None:
    """A layout for constant ``tensor``, or None when its reads do not allow one (read by
    several stages, through inlined stages, with different indices, or too large).
    ``read``: ``_the_read(state, tensor)`` when the caller has it."""
    if read is False:
        read = _the_read(state, tensor)
    if read is None:
        return None
    sidx, indices = read
    st = state.stages[sidx]
    bounds = all_iter_bounds(state)
    simplify = Simplifier(bounds)
    mapping = dict(zip(st.all_axes, st.axis_values))
    positions = _loop_position(state, sidx)
    atoms: dict = {}
    forms = []
    for index in indices:
        form = simplify.normal_affine(E.substitute(index, mapping))
        terms = []
        for key, (atom, coef) in form.terms.items():
            vars_ = E.free_vars(atom)
            if not vars_ or any(id(v) not in positions for v in vars_):
                return None
            if key not in atoms:
                atoms[key] = atom
            terms.append((key, coef))
        forms.append((form.const, terms))

    def order_key(item):
        key, atom = item
        pos = max(positions[id(v)] for v in E.free_vars(atom))
        sub = 0 if isinstance(atom, E.Binary) and atom.op == "//" else 1
        return (pos, sub)

    ordered = sorted(atoms.items(), key=order_key)
    lows, shape = [], []
    for _, atom in ordered:
        lo, hi = interval(atom, bounds)
        if lo == -float("inf") or hi == float("inf"):
            return None
        lows.append(int(lo))
        shape.append(int(hi - lo + 1))
    if math.prod(shape) > MAX_GROWTH * math.prod(tensor.shape):
        return None
    where = {key: p for p, (key, _) in enumerate(ordered)}
    plan_forms = [(const, [(where[k], c) for k, c in terms]) for const, terms in forms]
    return LayoutPlan(tensor.name, tuple(tensor.shape), [a for _, a in ordered], lows, tuple(shape),
                      plan_forms, st.name)


#: plans by what they are made of (``_made_of``): a search lowers thousands of programs of
#: one sketch, and a mutation that leaves the constant's reader as it was (an unroll step,
#: another stage's tiles) leaves its plan as it was
_PLANS = IdentityMemo(20_000)


def plan_all(state) -> dict[int, LayoutPlan]:
    """Plans for every constant placeholder of the DAG that can be rewritten (by op id)."""
    out = {}
    for t in state.dag.inputs:
        if getattr(t.op, "constant", False):
            read = _the_read(state, t)
            made_of = None if read is None else _made_of(state, t, read)
            p = None if made_of is None else _PLANS.get(*made_of, lambda: plan(state, t, read))
            if p is not None:
                out[id(t.op)] = p
    return out


def _made_of(state, tensor, read):
    """(objects, signature) of everything ``plan(state, tensor)`` reads, given the tensor's
    single direct reader ``read`` (``_the_read``): its read, the loops and body of its
    reader and of the stages it is computed inside (compared by identity; derived loops
    stand for their operation, axes and root region, see ``ir.stage``) and their locations."""
    objects, signature = [tensor.op, read], []
    at = read[0]
    while True:
        st = state.stages[at]
        objects += (st.loops, st.body)
        signature.append((at, st.compute_at, st.attach))
        if st.compute_at != "iter":
            return objects, tuple(signature)
        at = st.attach[0]
