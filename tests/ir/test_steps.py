"""Transform steps, one focused test per step kind.

Every test applies steps to a small workload, compiles the program, runs it against numpy
and asserts something structural (iterator names, extents, annotations, the printed loop
nest or the lowered program). Validity checks must raise ``ir.InvalidStep`` with a message
that says what is wrong; records must round-trip through JSON and replay to the same
program text.

The workloads (matmul, conv2d NHWC with a padding stage, depthwise conv2d, softmax,
matrix 2-norm, ConvLayer) are written here with the ``ir`` API, with numpy references, and
are shared with ``test_steps_property.py``. The ir bugs the property tests found are
kept as regression tests (``FIXED_IR_BUGS``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import pytest

import ir
from ir.steps import (AnnotationStep, ComputeAtStep, FuseStep, ReorderStep, SplitStep, Step, steps_from_json,
                      steps_to_json)


# workloads ---------------------------------------------------------------------------------

@dataclass
class Workload:
    """A small DAG with a numpy reference: ``make_inputs(rng)`` gives the placeholders'
    arrays by name, ``reference(inputs)`` the expected outputs by name (float64)."""
    name: str
    dag: ir.ComputeDAG
    make_inputs: Callable[[np.random.Generator], dict]
    reference: Callable[[dict], dict]


def _normal(rng, *shape):
    return rng.standard_normal(shape).astype("float32")


def matmul(n=8, m=12, k=10) -> Workload:
    A = ir.placeholder((n, k), name="A")
    B = ir.placeholder((k, m), name="B")
    r = ir.reduce_axis(k, "k")
    C = ir.compute((n, m), lambda i, j: ir.sum(A[i, r] * B[r, j], axis=r), name="C")
    return Workload("matmul", ir.ComputeDAG([A, B, C]),
                    lambda rng: {"A": _normal(rng, n, k), "B": _normal(rng, k, m)},
                    lambda x: {"C": x["A"].astype("float64") @ x["B"]})


def _pad_nhwc(X, p: int, name: str = "pad"):
    N, H, W, C = X.shape
    return ir.compute((N, H + 2 * p, W + 2 * p, C),
                      lambda n, h, w, c: ir.select((h >= p) & (h < H + p) & (w >= p) & (w < W + p),
                                                   X[n, h - p, w - p, c], 0.0), name=name)


def _np_conv_nhwc(x, w, p):
    """x: (N, H, W, CI), w: (KH, KW, CI, CO), stride 1, zero padding p."""
    kh, kw = w.shape[:2]
    xp = np.pad(x.astype("float64"), ((0, 0), (p, p), (p, p), (0, 0)))
    oh, ow = xp.shape[1] - kh + 1, xp.shape[2] - kw + 1
    out = np.zeros((x.shape[0], oh, ow, w.shape[3]))
    for a in range(kh):
        for b in range(kw):
            out += np.einsum("nhwc,co->nhwo", xp[:, a:a + oh, b:b + ow, :], w[a, b])
    return out


def conv2d(n=1, h=6, w=6, ci=3, co=4, kernel=3, p=1) -> Workload:
    X = ir.placeholder((n, h, w, ci), name="X")
    W = ir.placeholder((kernel, kernel, ci, co), name="W")
    P = _pad_nhwc(X, p)
    oh, ow = h + 2 * p - kernel + 1, w + 2 * p - kernel + 1
    rh, rw, rc = ir.reduce_axis(kernel, "rh"), ir.reduce_axis(kernel, "rw"), ir.reduce_axis(ci, "rc")
    Y = ir.compute((n, oh, ow, co), lambda n, h, w, co: ir.sum(P[n, h + rh, w + rw, rc] * W[rh, rw, rc, co],
                                                                axis=[rh, rw, rc]), name="conv")
    return Workload("conv2d", ir.ComputeDAG([X, W, Y]),
                    lambda rng: {"X": _normal(rng, n, h, w, ci), "W": _normal(rng, kernel, kernel, ci, co)},
                    lambda x: {"conv": _np_conv_nhwc(x["X"], x["W"], p)})


def depthwise_conv2d(n=1, h=6, w=5, c=4, kernel=3, p=1) -> Workload:
    X = ir.placeholder((n, h, w, c), name="X")
    W = ir.placeholder((kernel, kernel, c), name="W")
    P = _pad_nhwc(X, p)
    oh, ow = h + 2 * p - kernel + 1, w + 2 * p - kernel + 1
    rh, rw = ir.reduce_axis(kernel, "rh"), ir.reduce_axis(kernel, "rw")
    Y = ir.compute((n, oh, ow, c), lambda n, h, w, c: ir.sum(P[n, h + rh, w + rw, c] * W[rh, rw, c],
                                                              axis=[rh, rw]), name="dwconv")

    def reference(x):
        xp = np.pad(x["X"].astype("float64"), ((0, 0), (p, p), (p, p), (0, 0)))
        out = np.zeros((n, oh, ow, c))
        for a in range(kernel):
            for b in range(kernel):
                out += xp[:, a:a + oh, b:b + ow, :] * x["W"][a, b]
        return {"dwconv": out}

    return Workload("depthwise_conv2d", ir.ComputeDAG([X, W, Y]),
                    lambda rng: {"X": _normal(rng, n, h, w, c), "W": _normal(rng, kernel, kernel, c)}, reference)


def softmax(m=5, n=12) -> Workload:
    X = ir.placeholder((m, n), name="X")
    k1, k2 = ir.reduce_axis(n, "k"), ir.reduce_axis(n, "k")
    mx = ir.compute((m,), lambda i: ir.max(X[i, k1], axis=k1), name="maxv")
    ex = ir.compute((m, n), lambda i, j: ir.exp(X[i, j] - mx[i]), name="exp")
    sm = ir.compute((m,), lambda i: ir.sum(ex[i, k2], axis=k2), name="sumv")
    out = ir.compute((m, n), lambda i, j: ex[i, j] / sm[i], name="softmax")

    def reference(x):
        e = np.exp(x["X"] - x["X"].max(axis=1, keepdims=True).astype("float64"))
        return {"softmax": e / e.sum(axis=1, keepdims=True)}

    return Workload("softmax", ir.ComputeDAG([X, out]), lambda rng: {"X": _normal(rng, m, n)}, reference)


def matrix_norm(m=6, n=10) -> Workload:
    A = ir.placeholder((m, n), name="A")
    i, j = ir.reduce_axis(m, "i"), ir.reduce_axis(n, "j")
    S = ir.compute((1,), lambda x: ir.sum(A[i, j] * A[i, j], axis=[i, j]), name="sumsq")
    R = ir.compute((1,), lambda x: ir.sqrt(S[x]), name="norm")
    return Workload("matrix_norm", ir.ComputeDAG([A, R]), lambda rng: {"A": _normal(rng, m, n)},
                    lambda x: {"norm": np.array([np.sqrt((x["A"].astype("float64") ** 2).sum())])})


def conv_layer(n=1, h=5, w=5, ci=3, co=4, kernel=3, p=1) -> Workload:
    """conv2d NHWC + bias + batch-norm scale/shift + relu, each a separate compute."""
    X = ir.placeholder((n, h, w, ci), name="X")
    W = ir.placeholder((kernel, kernel, ci, co), name="W", constant=True)
    bias = ir.placeholder((co,), name="bias")
    scale = ir.placeholder((co,), name="scale")
    shift = ir.placeholder((co,), name="shift")
    P = _pad_nhwc(X, p)
    oh, ow = h + 2 * p - kernel + 1, w + 2 * p - kernel + 1
    rh, rw, rc = ir.reduce_axis(kernel, "rh"), ir.reduce_axis(kernel, "rw"), ir.reduce_axis(ci, "rc")
    Y = ir.compute((n, oh, ow, co), lambda n, h, w, c: ir.sum(P[n, h + rh, w + rw, rc] * W[rh, rw, rc, c],
                                                               axis=[rh, rw, rc]), name="conv")
    B = ir.compute(Y.shape, lambda n, h, w, c: Y[n, h, w, c] + bias[c], name="bias_add")
    S = ir.compute(Y.shape, lambda n, h, w, c: B[n, h, w, c] * scale[c] + shift[c], name="bn")
    R = ir.compute(Y.shape, lambda n, h, w, c: ir.max(S[n, h, w, c], 0.0), name="relu")

    def reference(x):
        y = _np_conv_nhwc(x["X"], x["W"], p)
        return {"relu": np.maximum((y + x["bias"]) * x["scale"] + x["shift"], 0.0)}

    return Workload("conv_layer", ir.ComputeDAG([X, W, bias, scale, shift, R]),
                    lambda rng: {"X": _normal(rng, n, h, w, ci), "W": _normal(rng, kernel, kernel, ci, co),
                                 "bias": _normal(rng, co), "scale": _normal(rng, co), "shift": _normal(rng, co)},
                    reference)


WORKLOADS = {"matmul": matmul, "conv2d": conv2d, "depthwise_conv2d": depthwise_conv2d, "softmax": softmax,
             "matrix_norm": matrix_norm, "conv_layer": conv_layer}


# checks --------------------------------------------------------------------------------------

def run_program(wl: Workload, state, seed: int = 0) -> tuple[dict, dict]:
    """Compile ``state``, run it on random inputs; outputs start as NaN so that an element
    the program never writes shows up."""
    inputs = wl.make_inputs(np.random.default_rng(seed))
    kernel = ir.build(wl.dag, state)
    arrays, outputs = [], {}
    for t in wl.dag.tensors:
        if t.name in inputs:
            arrays.append(inputs[t.name])
        else:
            outputs[t.name] = np.full(t.shape, np.nan, t.dtype)
            arrays.append(outputs[t.name])
    kernel(*arrays)
    return inputs, outputs


def assert_matches_numpy(wl: Workload, state, rtol: float = 1e-4, atol: float = 1e-4) -> None:
    inputs, outputs = run_program(wl, state)
    expected = wl.reference(inputs)
    assert set(expected) == set(outputs)
    for name, want in expected.items():
        np.testing.assert_allclose(outputs[name], want, rtol=rtol, atol=atol,
                                   err_msg=f"{wl.name}: output '{name}' differs from numpy for\n{state}")


def assert_round_trip(state) -> None:
    """JSON records, ``Step.from_record`` and ``replay()`` rebuild the same program."""
    text = steps_to_json(state.steps)
    steps = steps_from_json(text)
    assert steps == list(state.steps)
    assert [Step.from_record(s.record()) for s in state.steps] == list(state.steps)
    rebuilt = state.dag.init_state()
    for step in steps:
        rebuilt = rebuilt.apply(step)
    lowered = str(ir.lower(state))
    for other in (rebuilt, state.replay()):
        assert str(other) == str(state)
        assert str(ir.lower(other)) == lowered
    assert steps_to_json(rebuilt.steps) == text


def check(wl: Workload, state) -> None:
    assert_matches_numpy(wl, state)
    assert_round_trip(state)


def iters(state, stage) -> list[tuple[str, int]]:
    return [(it.name, it.extent) for it in state[stage].iters]


def kinds(state, stage) -> list[str]:
    return [it.kind for it in state[stage].iters]


# known ir bugs: minimal reproductions (each raises while the bug is there) -------------------

def repro_masked_horizontal_reduction() -> None:
    """Vectorizing the innermost reduce loop of a split that does not divide (10 by 4)."""
    wl = matmul()
    state = wl.dag.init_state().split("C", "k", [4]).vectorize("C", "k.1")
    assert_matches_numpy(wl, state)


def repro_lane_invariant_masked_store() -> None:
    """A stage computed inside its consumer's loop (region of 1 element) and split so that its
    vectorized loop has one valid lane under a guard: the store B[0] does not depend on the
    lane, which the vector code generator refuses instead of storing lane 0."""
    A = ir.placeholder((6,), name="A")
    B = ir.compute((6,), lambda i: A[i] * 2.0, name="B")
    C = ir.compute((6,), lambda i: B[i] + 1.0, name="C")
    wl = Workload("chain", ir.ComputeDAG([A, C]), lambda rng: {"A": _normal(rng, 6)},
                  lambda x: {"C": x["A"] * 2.0 + 1.0})
    s = wl.dag.init_state().compute_at("B", "C", "i").split("B", "i", [1]).split("B", "i.0", [2])
    s = s.reorder("B", ["i.0.0", "i.1", "i.0.1"]).vectorize("B", "i.0.1")  # i.0.1 (0,2) guarded < 1
    assert_matches_numpy(wl, s)


def repro_vector_math_lane_count() -> None:
    """exp in a vectorized loop of 12 lanes (not a power of two)."""
    wl = softmax(m=3, n=12)
    state = wl.dag.init_state().vectorize("exp", "j")
    assert_matches_numpy(wl, state)


def repro_cache_read_of_attached_stage() -> None:
    """cache_read of a stage computed inside its reader: either refused or correct."""
    wl = matmul()
    state = wl.dag.init_state().cache_write("C").compute_at("C.local", "C", "j")
    try:
        state = state.cache_read("C.local", "shared", ["C"])
    except ir.InvalidStep:
        return
    assert_matches_numpy(wl, state)


def repro_stale_region_guards() -> None:
    """An attached stage with region guards (its consumer's i split 5 by 4) is split itself
    after its region was inferred: its guards must follow its new loop variables."""
    A = ir.placeholder((5,), name="A")
    B = ir.compute((5,), lambda i: A[i] * 2.0, name="B")
    C = ir.compute((5,), lambda i: B[i] + 1.0, name="C")
    wl = Workload("chain", ir.ComputeDAG([A, C]), lambda rng: {"A": _normal(rng, 5)},
                  lambda x: {"C": x["A"] * 2.0 + 1.0})
    s = wl.dag.init_state().split("C", "i", [4]).compute_at("B", "C", "i.0")
    assert s["B"].root_extents == (4,) and s["B"].region_guard_specs  # i.0 * 4 + i < 5
    s = s.split("B", "i", [2])
    assert iters(s, "B") == [("i.0", 2), ("i.1", 2)]
    assert_matches_numpy(wl, s)


def repro_slp_miscompile() -> None:
    """A row sum with its reduce loop unrolled, then a division by it under a split guard:
    wrong values (inf) after O3; correct with SLP vectorisation off or without ``noalias``."""
    A = ir.placeholder((5, 12), name="A")
    k = ir.reduce_axis(12, "k")
    B = ir.compute((5,), lambda i: ir.sum(A[i, k], axis=k), name="B")
    C = ir.compute((5, 12), lambda i, j: A[i, j] / B[i], name="C")
    wl = Workload("row_normalise", ir.ComputeDAG([A, C]), lambda rng: {"A": _normal(rng, 5, 12)},
                  lambda x: {"C": x["A"] / x["A"].sum(axis=1, keepdims=True, dtype="float64")})
    assert_matches_numpy(wl, wl.dag.init_state().split("C", "j", [5]).unroll("B", "k"))


def repro_root_loop_memo_ignores_axes() -> None:
    """rfactor keeps the stage's op but gives it a new reduce axis (k_v): its loops must not
    come from loops memoised for the same op before rfactor (iterator 'k', old variable)."""
    wl = softmax()
    before = wl.dag.init_state().compute_at("sumv", "softmax", "i")
    assert iters(before, "sumv") == [("i", 1), ("k", 12)]
    after = wl.dag.init_state().rfactor("sumv", "k", 0).compute_at("sumv", "softmax", "i")
    assert iters(after, "sumv") == [("i", 1), ("k_v", 12)]
    check(wl, after.unroll("sumv", "k_v"))


#: ir bugs the property tests found, fixed; each reproduction stays as a regression test
FIXED_IR_BUGS = {
    "masked_horizontal_reduction": repro_masked_horizontal_reduction,
    "lane_invariant_masked_store": repro_lane_invariant_masked_store,
    "vector_math_lane_count": repro_vector_math_lane_count,
    "cache_read_of_attached_stage": repro_cache_read_of_attached_stage,
    "slp_miscompile": repro_slp_miscompile,
    "root_loop_memo_ignores_axes": repro_root_loop_memo_ignores_axes,
    "stale_region_guards": repro_stale_region_guards,
}


@pytest.mark.parametrize("tag", list(FIXED_IR_BUGS))
def test_fixed_ir_bug_stays_fixed(tag):
    FIXED_IR_BUGS[tag]()


# split -------------------------------------------------------------------------------------

def test_split_by_dividing_factors():
    wl = matmul()
    s = wl.dag.init_state().split("C", "i", [2, 2])
    assert iters(s, "C") == [("i.0", 2), ("i.1", 2), ("i.2", 2), ("j", 12), ("k", 10)]
    assert kinds(s, "C") == ["space"] * 4 + ["reduce"]
    assert s.steps == (SplitStep(2, 0, (2, 2), True),)
    assert "for i.1 (0,2)" in str(s)
    assert " if " not in str(ir.lower(s))  # a dividing split needs no guard
    check(wl, s)


def test_split_by_non_dividing_length_adds_a_guard():
    wl = matmul()
    s = wl.dag.init_state().split("C", "j", [5])
    assert iters(s, "C") == [("i", 8), ("j.0", 3), ("j.1", 5), ("k", 10)]
    assert "< 12)" in str(ir.lower(s))  # 3 * 5 = 15 > 12: the tail iterations are skipped
    check(wl, s)


def test_split_of_a_reduce_iterator():
    wl = matmul()
    s = wl.dag.init_state().split("C", "k", [3])
    assert iters(s, "C")[2:] == [("k.0", 4), ("k.1", 3)]
    assert kinds(s, "C") == ["space", "space", "reduce", "reduce"]
    check(wl, s)


@pytest.mark.parametrize("lengths, expected", [
    ([2, 3], [("j.0", 2), ("j.1", 3), ("j.2", 2)]),
    ([5], [("j.0", 5), ("j.1", 3)]),  # 5 * 3 = 15 > 12: guarded
])
def test_split_outer_to_inner(lengths, expected):
    wl = matmul()
    s = wl.dag.init_state().split("C", "j", lengths, inner_to_outer=False)
    assert iters(s, "C")[1:-1] == expected
    assert s.steps[-1].inner_to_outer is False
    check(wl, s)


def test_split_with_unchosen_length_takes_one():
    wl = matmul()
    s = wl.dag.init_state().split("C", "i", [None])
    assert iters(s, "C")[:2] == [("i.0", 8), ("i.1", 1)]
    check(wl, s)


def test_split_of_every_iterator_then_round_trip():
    wl = conv2d()
    s = wl.dag.init_state()
    for name in ["n", "h", "w", "co", "rh", "rw", "rc"]:
        s = s.split("conv", name, [2])
    assert len(s["conv"].iters) == 14
    assert iters(s, "conv")[2:4] == [("h.0", 3), ("h.1", 2)]
    assert iters(s, "conv")[8:10] == [("rh.0", 2), ("rh.1", 2)]
    check(wl, s)


def test_split_validity_checks():
    s = matmul().dag.init_state()
    with pytest.raises(ir.InvalidStep, match=r"split: iterator 3 out of range 0\.\.2"):
        s.apply(SplitStep(2, 3, (2,), True))
    with pytest.raises(ir.InvalidStep, match="stage 'C' has no iterator 'q'"):
        s.split("C", "q", [2])
    with pytest.raises(ir.InvalidStep, match="lengths must be positive ints"):
        s.split("C", "i", [0])
    with pytest.raises(ir.InvalidStep, match="split: needs at least one length"):
        s.split("C", "i", [])
    with pytest.raises(ir.InvalidStep, match="split: stage 'A' is an input placeholder"):
        s.apply(SplitStep(0, 0, (2,), True))
    with pytest.raises(ir.InvalidStep, match="iterator 'i' is annotated parallel; split before annotating"):
        s.parallel("C", "i").split("C", "i", [2])


# follow_split / follow_fused_split -----------------------------------------------------------

@pytest.mark.parametrize("n_split, expected", [
    (1, [("i.0", 2), ("i.1", 4)]),
    (2, [("i.0", 2), ("i.1", 2), ("i.2", 2)]),
])
def test_follow_split(n_split, expected):
    wl = matmul()
    s = wl.dag.init_state().cache_write("C")      # step 0
    s = s.split("C", "i", [2, 2])                 # step 1: C's i -> 2, 2, 2
    s = s.follow_split("C.local", "i", 1, n_split)
    assert iters(s, "C.local")[:-2] == expected
    assert s.steps[-1].record() == ["FSP", 2, 0, 1, n_split]
    check(wl, s)


def test_follow_split_tiles_a_cache_like_its_consumer():
    """Ansor's use: the cache stage computed inside the consumer's tile follows its split."""
    wl = matmul()
    s = wl.dag.init_state().cache_write("C")
    s = s.split("C", "j", [3, 2])                 # step 1: j -> 2, 3, 2
    s = s.reorder("C", ["i", "j.0", "j.1", "j.2"])
    s = s.compute_at("C.local", "C", "j.0")
    assert s["C.local"].root_extents == (1, 6, 10)
    s = s.follow_split("C.local", "j", 1, 2)      # lengths (3, 2) on the region of 6
    assert iters(s, "C.local") == [("i", 1), ("j.0", 1), ("j.1", 3), ("j.2", 2), ("k", 10)]
    check(wl, s)


def test_follow_split_validity_checks():
    s = matmul().dag.init_state().cache_write("C").split("C", "i", [2, 2])
    with pytest.raises(ir.InvalidStep, match="follow_split: step 0 is CacheWriteStep, not a split"):
        s.follow_split("C.local", "i", 0, 1)
    with pytest.raises(ir.InvalidStep, match=r"follow_split: n_split must be in 1\.\.2, got 3"):
        s.follow_split("C.local", "i", 1, 3)
    with pytest.raises(ir.InvalidStep, match=r"follow_split: no step 7 \(the state has 2\)"):
        s.follow_split("C.local", "i", 7, 1)


@pytest.mark.parametrize("src, factor_or_nparts, expected", [
    ([1], True, [("i.0", 2), ("i.1", 4)]),      # the inner part takes step 1's length 4
    ([1], False, [("i.0", 4), ("i.1", 2)]),     # the outer part does
    ([1, 2], True, [("i.0", 1), ("i.1", 8)]),   # 4 * 3 = 12 > 8: a part is at most the loop
    ([1, 2], False, [("i.0", 8), ("i.1", 1)]),
])
def test_follow_fused_split(src, factor_or_nparts, expected):
    wl = matmul()
    s = wl.dag.init_state().cache_write("C")  # step 0
    s = s.split("C", "i", [4])                # step 1: i -> 2, 4
    s = s.split("C", "j", [3])                # step 2: j -> 4, 3
    s = s.reorder("C", ["i.0", "j.0", "i.1", "j.1"]).fuse("C", ["i.0", "j.0"]).parallel("C", "i.0@j.0@")
    assert iters(s, "C")[0] == ("i.0@j.0@", 8)
    s = s.follow_fused_split("C.local", "i", src, 0, factor_or_nparts)
    assert iters(s, "C.local")[:2] == expected
    assert s.steps[-1].record() == ["FFSP", 2, 0, src, 0, factor_or_nparts]
    check(wl, s)


def test_follow_fused_split_validity_checks():
    s = matmul().dag.init_state().split("C", "i", [4])
    with pytest.raises(ir.InvalidStep, match="follow_fused_split: level 1 out of range for step 0"):
        s.follow_fused_split("C", "j", [0], 1, True)
    with pytest.raises(ir.InvalidStep, match="follow_fused_split: step 1 is AnnotationStep, not a split"):
        s.parallel("C", 0).follow_fused_split("C", "j", [0, 1], 0, True)


# fuse ----------------------------------------------------------------------------------------

def test_fuse_space_iterators_and_parallelize():
    wl = matmul()
    s = wl.dag.init_state().fuse("C", ["i", "j"])
    assert iters(s, "C") == [("i@j@", 96), ("k", 10)]
    assert kinds(s, "C") == ["space", "reduce"]
    assert s.steps[-1] == FuseStep(2, (0, 1))
    s = s.parallel("C", "i@j@")
    assert "parallel i@j@ (0,96)" in str(s)
    check(wl, s)


def test_fuse_three_iterators_after_split():
    wl = conv2d()
    s = wl.dag.init_state().split("conv", "w", [4])  # w -> 2, 4 (guarded: 8 > 6)
    s = s.fuse("conv", ["n", "h", "w.0"]).parallel("conv", 0)
    assert iters(s, "conv")[:2] == [("n@h@w.0@", 12), ("w.1", 4)]
    check(wl, s)


def test_fuse_reduce_iterators():
    wl = conv2d()
    s = wl.dag.init_state().fuse("conv", ["rh", "rw", "rc"])
    assert iters(s, "conv")[-1] == ("rh@rw@rc@", 27)
    assert kinds(s, "conv")[-1] == "reduce"
    check(wl, s.unroll("conv", "rh@rw@rc@"))


@pytest.mark.parametrize("annotation", ["none", "vectorize", "unroll"])
def test_fused_loop_of_any_kind_compiles(annotation):
    """LLVM names of fused iterators ('i@j@') are sanitised (was a parse error)."""
    wl = matmul()
    s = wl.dag.init_state().reorder("C", ["k", "i", "j"]).fuse("C", ["i", "j"])
    if annotation != "none":
        s = s.apply(AnnotationStep(2, 1, annotation))
    assert s["C"].iters[1].name == "i@j@" and s["C"].iters[1].annotation == annotation
    check(wl, s)


def test_fuse_of_one_iterator_changes_nothing():
    wl = matmul()
    s = wl.dag.init_state().fuse("C", ["j"])
    assert iters(s, "C") == iters(wl.dag.init_state(), "C")
    check(wl, s)


def test_fuse_validity_checks():
    s = matmul().dag.init_state()
    with pytest.raises(ir.InvalidStep, match=r"fuse: iterators must be consecutive, got \[0, 2\]"):
        s.fuse("C", ["i", "k"])
    with pytest.raises(ir.InvalidStep, match=r"fuse: iterators must be consecutive, got \[1, 0\]"):
        s.fuse("C", ["j", "i"])
    with pytest.raises(ir.InvalidStep, match=r"fuse: iterators \[2, 3\] out of range"):
        s.apply(FuseStep(2, (2, 3)))
    with pytest.raises(ir.InvalidStep, match="fuse: cannot fuse space and reduce iterators together"):
        s.fuse("C", ["j", "k"])
    with pytest.raises(ir.InvalidStep, match="fuse: iterator 'i' is annotated unroll"):
        s.unroll("C", "i").fuse("C", ["i", "j"])
    with pytest.raises(ir.InvalidStep, match="stage 'C' has no iterator 'x'"):
        s.fuse("C", ["i", "x"])


# reorder -------------------------------------------------------------------------------------

def test_reorder_reduce_loop_outermost():
    wl = matmul()
    s = wl.dag.init_state().reorder("C", ["k", "j", "i"])
    assert [it.name for it in s["C"].iters] == ["k", "j", "i"]
    assert s.steps[-1] == ReorderStep(2, (2, 1, 0))
    text = str(ir.lower(s))
    # the initialisation runs over the space loops before the reduce loop
    assert text.index("= 0.0f") < text.index("for k in range(10)")
    check(wl, s)


def test_reorder_conv_reduce_loops_between_space_loops():
    wl = conv2d()
    s = wl.dag.init_state().split("conv", "co", [2])
    s = s.reorder("conv", ["n", "h", "rh", "w", "co.0", "rw", "rc", "co.1"])
    assert [it.name for it in s["conv"].iters] == ["n", "h", "rh", "w", "co.0", "rw", "rc", "co.1"]
    check(wl, s)


def test_reorder_validity_checks():
    s = matmul().dag.init_state()
    with pytest.raises(ir.InvalidStep, match=r"reorder: order must be a permutation of 0\.\.2, got \[0, 1\]"):
        s.reorder("C", ["i", "j"])
    with pytest.raises(ir.InvalidStep, match="reorder: order must be a permutation"):
        s.apply(ReorderStep(2, (0, 0, 1)))


# annotations ---------------------------------------------------------------------------------

def test_parallel():
    wl = matmul()
    s = wl.dag.init_state().parallel("C", "i")
    assert [it.annotation for it in s["C"].iters] == ["parallel", "none", "none"]
    assert s.steps[-1] == AnnotationStep(2, 0, "parallel")
    assert "parallel i (0,8)" in str(s)
    assert "for i in range(8) (parallel):" in str(ir.lower(s))
    check(wl, s)


def test_parallel_inner_space_loop():
    wl = conv2d()
    s = wl.dag.init_state().parallel("conv", "h").parallel("pad", "h")
    assert s["conv"].iters[1].annotation == "parallel"
    check(wl, s)


def test_vectorize_innermost_space_loop():
    wl = matmul()
    s = wl.dag.init_state().reorder("C", ["i", "k", "j"]).vectorize("C", "j")
    assert s["C"].iters[-1].annotation == "vectorize"
    assert "vectorize j (0,12)" in str(s)
    assert "for j in range(12) (vectorize):" in str(ir.lower(s))
    check(wl, s)


def test_vectorize_innermost_reduce_loop():
    """A horizontal reduction: allowed when the reduce loop is innermost."""
    wl = matmul()
    s = wl.dag.init_state().split("C", "k", [5]).vectorize("C", "k.1")
    assert s["C"].iters[-1].annotation == "vectorize" and s["C"].iters[-1].kind == "reduce"
    check(wl, s)


def test_vectorize_split_tail_of_a_space_loop():
    wl = matmul()
    s = wl.dag.init_state().reorder("C", ["i", "k", "j"]).split("C", "j", [8]).vectorize("C", "j.1")
    assert iters(s, "C")[-2:] == [("j.0", 2), ("j.1", 8)]  # guarded: 16 > 12
    check(wl, s)


def test_vectorize_exp_power_of_two_lanes():
    wl = softmax(m=3, n=16)
    s = wl.dag.init_state().vectorize("exp", "j").vectorize("softmax", "j")
    check(wl, s)


def test_unroll():
    wl = matmul()
    s = wl.dag.init_state().unroll("C", "k").unroll("C", "j")
    assert [it.annotation for it in s["C"].iters] == ["none", "unroll", "unroll"]
    assert "unroll k (0,10)" in str(s)
    assert "for k in range(10) (unroll):" in str(ir.lower(s))
    check(wl, s)


def test_annotation_validity_checks():
    s = matmul().dag.init_state()
    with pytest.raises(ir.InvalidStep, match=r"cannot \w+ reduce iterator 'k'.*parallel"):
        s.parallel("C", "k")
    with pytest.raises(ir.InvalidStep, match="reduce iterator 'k' can be vectorised only as the innermost loop"):
        s.reorder("C", ["i", "k", "j"]).vectorize("C", "k")
    with pytest.raises(ir.InvalidStep, match="unknown annotation 'gpu'"):
        s.apply(AnnotationStep(2, 0, "gpu"))
    with pytest.raises(ir.InvalidStep, match=r"annotate: iterator 5 out of range 0\.\.2"):
        s.apply(AnnotationStep(2, 5, "unroll"))


def test_pragma_auto_unroll():
    wl = matmul()
    s = wl.dag.init_state().split("C", "k", [5]).pragma_auto_unroll("C", 16)
    assert s["C"].auto_unroll_max_step == 16
    assert "C auto_unroll: 16" in str(s)
    assert "pragma auto_unroll_max_step=16:" in str(ir.lower(s))
    check(wl, s)
    with pytest.raises(ir.InvalidStep, match="auto_unroll_max_step must be >= 0, got -1"):
        s.pragma_auto_unroll("C", -1)


# compute_at ----------------------------------------------------------------------------------

def test_compute_at_infers_the_region():
    wl = conv2d()
    s = wl.dag.init_state().compute_at("pad", "conv", "w")
    assert s["pad"].compute_at == "iter" and s["pad"].attach == (3, 2)
    assert s["pad"].root_extents == (1, 3, 3, 3)  # a 3x3 window for one output pixel
    assert iters(s, "pad") == [("n", 1), ("h", 3), ("w", 3), ("c", 3)]
    assert str(s).splitlines()[1:10] == [
        "for n (0,1)", "  for h (0,6)", "    for w (0,6)",
        "      for n (0,1)", "        for h (0,3)", "          for w (0,3)", "            for c (0,3)",
        "              pad = ...",
        "      for co (0,4)"]
    assert "allocate pad[27] float32 (local)" in str(ir.lower(s))
    check(wl, s)


def test_compute_at_a_reduce_loop():
    wl = conv2d()
    s = wl.dag.init_state().compute_at("pad", "conv", "rh")
    assert s["pad"].root_extents == (1, 1, 3, 3)
    check(wl, s)


def test_compute_at_reinfers_after_reorder_of_the_target():
    wl = conv2d()
    s = wl.dag.init_state().compute_at("pad", "conv", "w")
    s = s.reorder("conv", ["n", "w", "h", "co", "rh", "rw", "rc"])  # h now runs inside the attach point
    assert s["pad"].attach == (3, 1)
    assert s["pad"].root_extents == (1, 8, 3, 3)
    check(wl, s)


def test_compute_at_reinfers_after_split_of_the_target():
    wl = conv2d()
    s = wl.dag.init_state().compute_at("pad", "conv", "h")
    assert s["pad"].root_extents == (1, 3, 8, 3)
    s = s.split("conv", "h", [2])  # the attach point moves to h.1; the region start now uses h.0, h.1
    assert s["pad"].attach == (3, 2)
    assert s["pad"].root_extents == (1, 3, 8, 3)
    assert "h.0" in str(s["pad"].root_starts[1]) and "h.1" in str(s["pad"].root_starts[1])
    check(wl, s)


def test_compute_at_reinfers_after_non_dividing_split_inside():
    wl = depthwise_conv2d()  # w: 5, padded 7
    s = wl.dag.init_state().compute_at("pad", "dwconv", "h")
    assert s["pad"].root_extents == (1, 3, 7, 4)
    s = s.split("dwconv", "w", [2]).reorder("dwconv", ["n", "h", "w.1", "w.0", "c", "rh", "rw"])
    s = s.compute_at("pad", "dwconv", "w.1")
    assert s["pad"].root_extents == (1, 3, 7, 4)  # w.0 (3 iterations of 2) runs inside
    s = s.reorder("dwconv", ["n", "h", "w.0", "w.1", "c", "rh", "rw"])
    assert s["pad"].root_extents == (1, 3, 3, 4)
    check(wl, s)


def test_compute_at_reinfers_after_fuse_of_the_target():
    wl = conv2d()
    s = wl.dag.init_state().compute_at("pad", "conv", "h")
    assert s["pad"].root_extents == (1, 3, 8, 3)
    s = s.fuse("conv", ["h", "w"])  # the attach point is now one (h, w) pixel
    assert s["pad"].attach == (3, 1)
    assert s["pad"].root_extents == (1, 3, 3, 3)
    s = s.parallel("conv", "h@w@")  # the stage's buffer is private to each parallel iteration
    check(wl, s)


def test_compute_at_then_transform_the_attached_stage():
    wl = conv2d()
    s = wl.dag.init_state().compute_at("pad", "conv", "w")
    s = s.fuse("pad", ["n", "h"]).split("pad", "w", [3]).vectorize("pad", "c")
    assert iters(s, "pad") == [("n@h@", 3), ("w.0", 1), ("w.1", 3), ("c", 3)]
    check(wl, s.unroll("pad", "n@h@"))


def test_cache_write_compute_at_with_tiling():
    """/tmp/t5.py in small: cache_write + multi-level tiling + compute_at + annotations."""
    wl = matmul(n=8, m=16, k=6)
    s = wl.dag.init_state().cache_write("C")
    s = s.split("C", "i", [2, 2]).split("C", "j", [2, 4])
    s = s.reorder("C", ["i.0", "j.0", "i.1", "j.1", "i.2", "j.2"])
    s = s.compute_at("C.local", "C", "j.1")
    assert s["C.local"].root_extents == (2, 4, 6)
    s = s.split("C.local", "k", [3]).reorder("C.local", ["k.0", "i", "k.1", "j"])
    s = s.vectorize("C.local", "j").unroll("C.local", "i")
    s = s.fuse("C", ["i.0", "j.0"]).parallel("C", "i.0@j.0@").vectorize("C", "j.2")
    assert iters(s, "C") == [("i.0@j.0@", 4), ("i.1", 2), ("j.1", 2), ("i.2", 2), ("j.2", 4)]
    assert s["C.local"].attach == (3, 2)
    assert s["C.local"].root_extents == (2, 4, 6)
    check(wl, s)


def test_compute_at_through_inlined_stages():
    wl = conv_layer()
    s = wl.dag.init_state().compute_inline("bias_add").compute_inline("bn")
    s = s.compute_at("conv", "relu", "w")
    assert s["conv"].root_extents[:4] == (1, 1, 1, 4)
    check(wl, s)


def test_compute_at_whole_softmax_row():
    """A stage read by several consumers may go inside one of them once the others are
    computed inside it too: softmax's four stages fused per row."""
    wl = softmax()
    s = wl.dag.init_state().compute_at("sumv", "softmax", "i").compute_at("exp", "softmax", "i")
    s = s.compute_at("maxv", "softmax", "i").split("softmax", "j", [4]).vectorize("softmax", "j.1")
    assert [(st.name, st.compute_at, st.root_extents) for st in s.stages[1:]] == [
        ("maxv", "iter", (1, 12)), ("exp", "iter", (1, 12)), ("sumv", "iter", (1, 12)),
        ("softmax", "root", (5, 12))]
    assert "allocate exp[12] float32 (local)" in str(ir.lower(s))
    check(wl, s)


def test_compute_at_validity_checks():
    wl = conv_layer()
    s = wl.dag.init_state()
    with pytest.raises(ir.InvalidStep, match=r"compute_at: stage 'relu' does not consume 'pad' "
                                             r"\(its consumers are \['conv'\]\)"):
        s.compute_at("pad", "relu", "w")
    with pytest.raises(ir.InvalidStep, match="compute_at: stage 'conv' into itself"):
        s.compute_at("conv", "conv", "w")
    with pytest.raises(ir.InvalidStep, match="'relu' is an output of the DAG and must stay at root"):
        s.compute_at("relu", "bn", "n")
    with pytest.raises(ir.InvalidStep, match="compute_at: stage 'conv' has no iterator 99"):
        s.apply(ComputeAtStep(s.stage_index("pad"), s.stage_index("conv"), 99))
    sm = softmax().dag.init_state()
    with pytest.raises(ir.InvalidStep, match=r"'exp' is also read by \['sumv'\]"):
        sm.compute_at("exp", "softmax", "i")


# compute_inline / compute_root ------------------------------------------------------------------

def test_compute_inline_padding():
    wl = conv2d()
    s = wl.dag.init_state().compute_inline("pad")
    assert s["pad"].compute_at == "inline"
    assert "pad = ..." not in str(s)
    lowered = str(ir.lower(s))
    assert "pad[" not in lowered and "select(" in lowered
    check(wl, s)


def test_compute_inline_elementwise_chain():
    wl = conv_layer()
    s = wl.dag.init_state().compute_inline("bias_add").compute_inline("bn").compute_inline("pad")
    assert [line for line in str(s).splitlines() if line.strip().endswith("= ...")] == \
        ["              conv = ...", "        relu = ..."]
    check(wl, s)


def test_compute_inline_validity_checks():
    s = conv_layer().dag.init_state()
    with pytest.raises(ir.InvalidStep, match="compute_inline: 'conv' is a reduction and cannot be inlined"):
        s.compute_inline("conv")
    with pytest.raises(ir.InvalidStep, match="compute_inline: 'relu' is an argument of the kernel and must be stored"):
        s.compute_inline("relu")
    with pytest.raises(ir.InvalidStep, match=r"compute_inline: stages \['conv'\] are computed inside 'bias_add'"):
        s.compute_at("conv", "bias_add", "c").compute_inline("bias_add")
    with pytest.raises(ir.InvalidStep, match="stage 'bias_add' is inlined"):
        s.compute_inline("bias_add").split("bias_add", 0, [2])


def test_compute_root_undoes_compute_at():
    wl = conv2d()
    s0 = wl.dag.init_state()
    s = s0.compute_at("pad", "conv", "w").compute_root("pad")
    assert s["pad"].compute_at == "root" and s["pad"].attach is None
    assert s["pad"].root_extents == (1, 8, 8, 3)
    assert str(s) == str(s0)
    assert str(ir.lower(s)) == str(ir.lower(s0))
    check(wl, s)


def test_compute_root_keeps_loop_transforms():
    wl = conv2d()
    s = wl.dag.init_state().compute_at("pad", "conv", "w").split("pad", "c", [2]).compute_root("pad")
    assert iters(s, "pad") == [("n", 1), ("h", 8), ("w", 8), ("c.0", 2), ("c.1", 2)]
    check(wl, s)


# cache_write / cache_read -----------------------------------------------------------------------

def test_cache_write():
    wl = matmul()
    s = wl.dag.init_state().cache_write("C", "local")
    assert [st.name for st in s.stages] == ["A", "B", "C.local", "C"]
    assert s["C.local"].origin == "cache_write"
    assert iters(s, "C.local") == [("i", 8), ("j", 12), ("k", 10)]
    assert iters(s, "C") == [("i", 8), ("j", 12)]  # the copy has no reduction
    assert str(s).splitlines()[-1] == "    C = ..."
    check(wl, s)


def test_cache_write_renumbers_attached_stages():
    wl = conv_layer()
    s = wl.dag.init_state().compute_at("pad", "conv", "w")
    pad_attach = s["pad"].attach
    s = s.compute_at("bias_add", "bn", "c").cache_write("relu")
    assert s["bias_add"].attach == (s.stage_index("bn"), 3)
    assert s["pad"].attach == pad_attach  # conv comes before the new stage
    check(wl, s)


def test_cache_write_validity_checks():
    s = matmul().dag.init_state()
    with pytest.raises(ir.InvalidStep, match="cache_write: stage 'C' already has loop transforms; "
                                             "apply cache_write first"):
        s.split("C", "i", [2]).cache_write("C")
    with pytest.raises(ir.InvalidStep, match="cache_write: stage 'A' is an input placeholder"):
        s.cache_write("A")
    c = conv2d().dag.init_state().compute_at("pad", "conv", "w")
    with pytest.raises(ir.InvalidStep, match="cache_write: stages are computed inside 'conv'"):
        c.cache_write("conv")
    with pytest.raises(ir.InvalidStep, match="cache_write: stage 'pad' must be at root"):
        c.cache_write("pad")


def test_cache_read_computed_at_a_tile():
    wl = matmul()
    s = wl.dag.init_state().cache_read("A", "shared", ["C"])
    assert [st.name for st in s.stages] == ["A", "A.shared", "B", "C"]
    assert iters(s, "A.shared") == [("ax0", 8), ("ax1", 10)]
    s = s.split("C", "i", [4]).split("C", "k", [5]).reorder("C", ["i.0", "j", "k.0", "i.1", "k.1"])
    s = s.compute_at("A.shared", "C", "k.0")
    assert s["A.shared"].root_extents == (4, 5)
    assert "allocate A.shared[20] float32 (local)" in str(ir.lower(s))
    check(wl, s)


def test_cache_read_of_an_intermediate_stage():
    wl = conv_layer()
    s = wl.dag.init_state().cache_read("bias_add", "local", ["bn"])
    assert s.readers(s.stage_index("bias_add.local")) == [s.stage_index("bn")]
    check(wl, s)


def test_cache_read_validity_checks():
    s = matmul().dag.init_state()
    with pytest.raises(ir.InvalidStep, match=r"cache_read: stage 1 does not read 'A' \(its readers are \['C'\]\)"):
        s.cache_read("A", "shared", ["B"])
    with pytest.raises(ir.InvalidStep, match="cache_read: needs at least one reader stage"):
        s.cache_read("A", "shared", [])


# rfactor -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("factor_iter_id", [0, 1])
@pytest.mark.parametrize("factor", ["i@j@.0", "i@j@.1"])
def test_rfactor_of_fused_reduce_axes(factor, factor_iter_id):
    """2-norm: fuse the two reduce axes, split, rfactor either part to either position."""
    wl = matrix_norm()
    s = wl.dag.init_state().fuse("sumsq", ["i", "j"]).split("sumsq", "i@j@", [4])
    assert iters(s, "sumsq") == [("x", 1), ("i@j@.0", 15), ("i@j@.1", 4)]
    s = s.rfactor("sumsq", factor, factor_iter_id)
    assert [st.name for st in s.stages] == ["A", "sumsq.rf", "sumsq", "norm"]
    assert s["sumsq.rf"].origin == "rfactor"
    rf = s["sumsq.rf"]
    space = [it.extent for it in rf.iters if it.kind == "space"]
    extent = 15 if factor.endswith(".0") else 4
    assert space == ([extent, 1] if factor_iter_id == 0 else [1, extent])
    assert [it.extent for it in rf.iters if it.kind == "reduce"] == [60 // extent]
    assert [(it.kind, it.extent) for it in s["sumsq"].iters] == [("space", 1), ("reduce", extent)]
    check(wl, s)


@pytest.mark.parametrize("factor_iter_id", [0, 1])
def test_rfactor_of_a_split_reduce_axis(factor_iter_id):
    wl = matrix_norm()
    s = wl.dag.init_state().split("sumsq", "j", [4])  # 10 by 4: guarded
    s = s.rfactor("sumsq", "j.1", factor_iter_id)
    rf = s["sumsq.rf"]
    assert iters(s, "sumsq.rf") == ([("j_1", 4), ("x", 1)] if factor_iter_id == 0 else [("x", 1), ("j_1", 4)]) + \
        [("i", 6), ("j_0", 3)]
    assert kinds(s, "sumsq.rf") == ["space", "space", "reduce", "reduce"]
    assert rf.op.shape == ((4, 1) if factor_iter_id == 0 else (1, 4))
    assert iters(s, "sumsq") == [("x", 1), ("j_1_v", 4)]
    check(wl, s)
    # Ansor then computes the partial sums in parallel and the final sum inside its consumer
    t = s.parallel("sumsq.rf", 0 if factor_iter_id == 0 else 1).compute_at("sumsq", "norm", "x")
    check(wl, t)


def test_rfactor_then_compute_at_consumer():
    wl = matmul(n=4, m=3, k=12)
    s = wl.dag.init_state().split("C", "k", [4]).rfactor("C", "k.0", 2)
    assert iters(s, "C.rf") == [("i", 4), ("j", 3), ("k_0", 3), ("k_1", 4)]
    s = s.compute_at("C.rf", "C", "j").vectorize("C.rf", "k_1")
    assert s["C.rf"].root_extents == (1, 1, 3, 4)
    check(wl, s)


def test_rfactor_validity_checks():
    s = matrix_norm().dag.init_state()
    with pytest.raises(ir.InvalidStep, match="rfactor: iterator 'x' is not a reduce iterator"):
        s.rfactor("sumsq", "x", 0)
    with pytest.raises(ir.InvalidStep, match="rfactor: stage 'norm' is not a reduction"):
        s.rfactor("norm", "x", 0)
    with pytest.raises(ir.InvalidStep, match=r"rfactor: factor_iter_id must be in 0\.\.1, got 2"):
        s.rfactor("sumsq", "j", 2)
    m = matmul().dag.init_state()
    with pytest.raises(ir.InvalidStep, match="the space axes of 'C' must not be split or fused before rfactor"):
        m.split("C", "i", [2]).rfactor("C", "k", 0)
    with pytest.raises(ir.InvalidStep, match="rfactor: stage 'sumsq' must be at root"):
        s.compute_at("sumsq", "norm", "x").rfactor("sumsq", "j", 0)


# records and replay --------------------------------------------------------------------------------

def _conv_layer_schedule():
    wl = conv_layer()
    s = wl.dag.init_state().compute_inline("bias_add").compute_inline("bn").cache_write("conv")
    s = s.split("relu", "c", [2]).split("relu", "w", [None])
    s = s.follow_split("conv", "c", 3, 1)
    s = s.compute_at("conv.local", "conv", "c.0").compute_at("pad", "conv.local", "rh")
    s = s.fuse("relu", ["n", "h"]).parallel("relu", 0).vectorize("relu", "c.1").pragma_auto_unroll("relu", 64)
    return wl, s


def test_records_round_trip_and_replay():
    wl, s = _conv_layer_schedule()
    records = [step.record() for step in s.steps]
    assert records[0] == ["CI", 7]
    assert records[2] == ["CHW", 6, "local"]  # conv.local becomes stage 6, relu moves to 10
    assert records[3:5] == [["SP", 10, 3, [2], True], ["SP", 10, 2, [None], True]]
    assert all(type(step).from_record(step.record()) == step for step in s.steps)
    check(wl, s)


def test_replay_rebuilds_stage_numbering():
    """Steps name stages by index; replay after cache_write / rfactor renumbers the same way."""
    wl = matrix_norm()
    s = wl.dag.init_state().split("sumsq", "j", [5]).rfactor("sumsq", "j.0", 1).cache_write("norm")
    assert [st.name for st in s.stages] == ["A", "sumsq.rf", "sumsq", "norm.local", "norm"]
    assert [type(st).__name__ for st in s.steps] == ["SplitStep", "RfactorStep", "CacheWriteStep"]
    assert str(s.replay()) == str(s)
    check(wl, s)


def test_step_records_are_checked():
    with pytest.raises(ValueError, match="unknown step record"):
        Step.from_record(["XX", 1])
    with pytest.raises(ValueError, match=r"step record \['SP', 2, 0\] has 2 fields"):
        Step.from_record(["SP", 2, 0])
    assert steps_from_json('[["SP",2,0,[4,null],false]]') == [SplitStep(2, 0, (4, None), False)]


def test_tile_larger_than_its_region_stays_inside_its_buffer():
    """A cache stage whose tile does not divide the region it is computed for loops past
    its region (guarded out) under a vector mask: those addresses must stay inside its
    buffer (this segfaulted when the buffer held only the region)."""
    A = ir.placeholder((16, 32), name="A")
    B = ir.placeholder((32, 64), name="B")
    k = ir.reduce_axis(32, "k")
    C = ir.compute((16, 64), lambda i, j: ir.sum(A[i, k] * B[k, j], axis=k), name="C")
    wl = Workload("matmul_big_tile", ir.ComputeDAG([A, B, C]),
                  lambda rng: {"A": _normal(rng, 16, 32), "B": _normal(rng, 32, 64)},
                  lambda x: {"C": x["A"].astype("float64") @ x["B"]})
    s = wl.dag.init_state().cache_write("C")
    s = s.split("C.local", "i", [3]).split("C.local", "j", [64])      # tiles of 3 rows, 64 columns
    s = s.reorder("C.local", ["i.0", "j.0", "k", "i.1", "j.1"])
    s = s.split("C", "i", [4]).compute_at("C.local", "C", "i.0")       # ...computed for 4-row regions
    s = s.vectorize("C.local", "j.1")
    rows = [it.extent for it in s["C.local"].iters if it.name.startswith("i.")]
    assert s["C.local"].root_extents[0] == 4 and rows[0] * rows[1] > 4  # loops past the region
    assert_matches_numpy(wl, s)
