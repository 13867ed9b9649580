"""Splits compose plain-sum axis values directly (``loops._compose_linear``); the result
must be exactly the expression that substituting and simplifying gives."""
import numpy as np
import pytest

import ir
from autosched import ops
from ir import expr as E
from ir import loops as L
from ir.simplify import Simplifier, structural_key


def _general_split(loops, iter_id, lengths, inner_to_outer):
    """The same split through the general substitute + simplify path."""
    original = L._compose_linear
    L._compose_linear = lambda *a: None
    try:
        return L.split(loops, iter_id, lengths, inner_to_outer)
    finally:
        L._compose_linear = original


def _same(a: L.Loops, b: L.Loops) -> bool:
    rename = {id(x.var): y.var for x, y in zip(a.iters, b.iters)}
    moved = [E.substitute(v, {x.var: rename[id(x.var)] for x in a.iters}) for v in a.axis_values]
    return [structural_key(v) for v in moved] == [structural_key(v) for v in b.axis_values] and \
        [x.extent for x in a.iters] == [y.extent for y in b.iters]


@pytest.mark.parametrize("seed", range(30))
def test_random_split_chains_match_the_simplifier(seed, monkeypatch):
    composed = []
    original = L._compose_linear
    monkeypatch.setattr(L, "_compose_linear", lambda *a: composed.append(original(*a)) or composed[-1])
    rng = np.random.default_rng(seed)
    start = E.Const(int(rng.integers(0, 3)), "int64") if seed % 3 == 0 else None
    loops = L.root_loops(["i", "j", "k"], ["space", "space", "reduce"],
                         [int(x) for x in rng.choice([1, 6, 12, 16, 30, 64], 3)], [start, None, None])
    for _ in range(int(rng.integers(1, 6))):
        iter_id = int(rng.integers(len(loops.iters)))
        extent = loops.iters[iter_id].extent
        lengths = [int(rng.choice([1, 2, 3, 4])) for _ in range(int(rng.integers(1, 4)))]
        inner = bool(rng.integers(2))
        fast, slow = L.split(loops, iter_id, lengths, inner), _general_split(loops, iter_id, lengths, inner)
        assert _same(fast, slow), (extent, lengths, fast.axis_values, slow.axis_values)
        # every value is a function of this stage's loops alone: fixing them gives a number
        point = Simplifier({it.var: (int(rng.integers(it.extent)),) * 2 for it in fast.iters})
        assert all(not point.affine(v).terms for v in fast.axis_values)
        loops = fast
    assert any(c is not None for c in composed)  # the fast path was taken


def test_split_programs_are_unchanged_by_the_fast_path():
    a, b = ir.placeholder((64, 48), name="A"), ir.placeholder((48, 40), name="B")
    dag = ir.ComputeDAG([a, b, ops.matmul(a, b, name="C")])
    s = dag.init_state().split("C", "ax0", [4, 2]).split("C", "ax1", [8]).split("C", "k", [6])
    s = s.fuse("C", [0, 1]).parallel("C", 0)
    x = np.random.default_rng(0).standard_normal((64, 48)).astype("float32")
    y = np.random.default_rng(1).standard_normal((48, 40)).astype("float32")
    out = np.zeros((64, 40), "float32")
    ir.build(dag, s)(x, y, out)
    np.testing.assert_allclose(out, x @ y, rtol=1e-4, atol=1e-4)
