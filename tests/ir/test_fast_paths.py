"""The fast paths a search round takes are the slow ones written out: each is checked
against the general code it stands for, on random expressions and on evolved programs
(substitution, free variables, affine forms of axis values, lowering in one walk, the
readers memo, the loop-variable dependencies that feature positions read, unrolled-loop
kinds)."""
import numpy as np
import pytest

import ir
from autosched import ops
from evolution import features as F
from ir import expr as E
from ir.loop_ir import For, IfThenElse, Allocate, Pragma, Seq, nest_trips
from ir.lower import Lowering
from ir.simplify import Simplifier, structural_key
from tests.evolution.test_shared_replay import HW, evolved_programs

WORKLOADS = ["C2D-1x14x14x256x256-k3s1p1", "GMM-1x128x128x128", "DEP-1x14x14x512-k3s2p1",
             "NRM-1x256x256", "CBR-1x28x28x128x256-k1s2p0"]


def _random_expr(rng, leaves, depth: int):
    if depth == 0 or rng.random() < 0.2:
        return leaves[int(rng.integers(len(leaves)))]
    kind = int(rng.integers(5))
    a = _random_expr(rng, leaves, depth - 1)
    b = _random_expr(rng, leaves, depth - 1)
    if kind == 0:
        return E.Binary(["+", "-", "*", "//", "%", "min"][int(rng.integers(6))], a, b)
    if kind == 1:
        return E.Select(E.Compare("<", a, b), a, b)
    if kind == 2:
        return E.Cast("int64", E.Binary("+", a, a))  # a node shared by two parents
    if kind == 3:
        return E.Not(E.Compare(">=", a, b)) if rng.random() < 0.5 else E.Binary("max", a, b)
    return E.Binary("+", E.Binary("*", a, E.Const(int(rng.integers(1, 9)), "int64")), b)


def _reference_substitute(e, mapping):
    by_id = {id(k): v for k, v in mapping.items()}
    return E.transform(e, lambda n: by_id.get(id(n)) if isinstance(n, E.Var) else None)


def test_substitute_and_free_vars_are_the_general_walks():
    rng = np.random.default_rng(0)
    xs = [E.Var(f"x{i}") for i in range(4)]
    ys = [E.Var(f"y{i}") for i in range(3)]
    leaves = xs + ys + [E.Const(3, "int64"), E.Const(-2, "int64")]
    for _ in range(300):
        e = _random_expr(rng, leaves, 5)
        mapping = {x: _random_expr(rng, ys + [E.Const(7, "int64")], 2) for x in xs if rng.random() < 0.6}
        got, want = E.substitute(e, mapping), _reference_substitute(e, mapping)
        assert structural_key(got) == structural_key(want)
        if not any(id(v) in {id(x) for x in mapping} for v in E.free_vars(e)):
            assert got is e  # nothing to replace: the same tree, not a copy
        walked = list({id(n): n for n in E.walk(e) if isinstance(n, E.Var)}.values())
        assert [id(v) for v in E.free_vars(e)] == [id(v) for v in walked]


def test_normal_affine_is_the_affine_form_of_the_simplified_expression():
    rng = np.random.default_rng(1)
    vs = [E.Var(f"v{i}") for i in range(5)]
    bounds = {vs[0]: (0, 0), vs[1]: (0, 6), vs[2]: (0, 3), vs[3]: (0, 0)}  # v0, v3: loops of one iteration
    for _ in range(400):
        e = None
        for _ in range(int(rng.integers(1, 6))):
            v = vs[int(rng.integers(len(vs)))]
            coef = int(rng.choice([-3, -1, 1, 1, 2, 7]))
            term = v if coef == 1 else E.Binary("*", v, E.Const(coef, "int64"))
            op = "+" if rng.random() < 0.7 else "-"
            e = term if e is None else E.Binary(op, e, term)
        if rng.random() < 0.5:
            e = E.Binary("+" if rng.random() < 0.5 else "-", e, E.Const(int(rng.integers(0, 5)), "int64"))
        got = Simplifier(bounds).normal_affine(e)
        fresh = Simplifier(bounds)
        want = fresh.affine(fresh(e))
        assert [(k, c) for k, (_, c) in got.terms.items()] == [(k, c) for k, (_, c) in want.terms.items()]
        assert got.const == want.const


def _programs(name, n_children=30):
    task = ir.SearchTask(ir.ComputeDAG(ops.suite_workload(name).tensors), hardware=HW, desc=name)
    return task, evolved_programs(task, 10, n_children, seed=3)


@pytest.mark.parametrize("name", WORKLOADS)
def test_lowering_in_one_walk_is_lowering_the_substituted_body(name):
    task, programs = _programs(name)
    checked = 0
    for state in programs:
        lowering = Lowering(state, layout_rewrite=True)
        for st in state.stages:
            if st.is_placeholder or st.compute_at == "inline":
                continue
            lowering.reader = st
            axis_map = dict(zip(st.all_axes, st.axis_values))
            body = st.body.source if isinstance(st.body, E.Reduce) else st.body
            got = lowering.expr(body, axis_map)
            want = lowering.expr(E.substitute(body, axis_map))
            assert structural_key(got) == structural_key(want), (str(state), st.name)
            checked += 1
    assert checked > len(programs)


@pytest.mark.parametrize("name", WORKLOADS)
def test_readers_and_loop_dependencies_are_those_a_walk_finds(name):
    task, programs = _programs(name)
    for state in programs:
        stages = state.stages
        for i, st in enumerate(stages):
            tensor = st.op.output
            want = [r for r, other in enumerate(stages) if other.body is not None and
                    any(isinstance(n, E.TensorRead) and n.tensor is tensor for n in E.walk(other.body))]
            assert state.readers(i) == want
            # feature positions read which axes a loop moves from ``deps``
            assert [set(d) for d in st.loops.deps] == \
                [{id(v) for v in E.free_vars(value)} for value in st.loops.axis_values]


def _reference_kinds(stmt, unroll, out) -> None:
    """Loop kinds around every statement, deciding unrolling with ``nest_trips``."""
    def walk(s, kinds, unroll):
        if isinstance(s, For):
            kind = "unroll" if unroll and s.kind == "serial" and nest_trips(s) <= unroll else s.kind
            walk(s.body, kinds + [kind], unroll)
        elif isinstance(s, Seq):
            for x in s.stmts:
                walk(x, kinds, unroll)
        elif isinstance(s, IfThenElse):
            walk(s.then, kinds, unroll)
            if s.otherwise is not None:
                walk(s.otherwise, kinds, unroll)
        elif isinstance(s, Allocate):
            walk(s.body, kinds, unroll)
        elif isinstance(s, Pragma):
            walk(s.body, kinds, s.value if s.key == "auto_unroll_max_step" else unroll)
        elif isinstance(s, ir.loop_ir.Store):
            out.append(kinds)
    walk(stmt, [], unroll)


@pytest.mark.parametrize("name", ["C2D-1x14x14x256x256-k3s1p1", "GMM-1x128x128x128"])
def test_unrolled_loop_kinds_are_decided_by_the_nest_trips(name):
    task, programs = _programs(name)
    pragmas = 0
    for state in programs:
        nest = ir.lower(state).body
        statements = []
        trips = F._collect(nest, [], [], 0, {}, statements, [0])
        assert trips == nest_trips(nest)
        want = []
        _reference_kinds(nest, 0, want)
        assert [[lp.kind for lp in st.loops] for st in statements] == want
        pragmas += any(st.unroll for st in statements)
    assert pragmas  # programs with auto_unroll_max_step pragmas were checked
