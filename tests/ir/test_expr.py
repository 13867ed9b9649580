"""Expressions, tensors and their error messages; the index simplifier."""
import numpy as np
import pytest

import ir
from ir import expr as E
from ir.simplify import interval, simplify


def test_compute_records_axes_reduction_and_inputs():
    A = ir.placeholder((4, 8), name="A")
    B = ir.placeholder((8, 5), name="B")
    k = ir.reduce_axis(8, name="k")
    C = ir.compute((4, 5), lambda i, j: ir.sum(A[i, k] * B[k, j], axis=k), name="C")
    assert [ax.name for ax in C.op.axis] == ["i", "j"]
    assert C.op.reduce_axis == (k,)
    assert C.op.input_tensors == [A, B]
    assert str(C.op.body) == "sum((A[i, k] * B[k, j]), axis=[k])"


def test_reduce_axis_with_bounds():
    k = ir.reduce_axis((2, 7), name="k")
    assert (k.lo, k.extent, k.kind) == (2, 5, "reduce")
    with pytest.raises(ValueError, match=r"expected a positive int extent or ints lo < hi, got \(3, 3\)"):
        ir.reduce_axis((3, 3))


def test_index_of_wrong_arity():
    A = ir.placeholder((4, 8), name="A")
    with pytest.raises(IndexError, match=r"tensor 'A' has 2 dimension\(s\) \(4, 8\), but was indexed with 3"):
        A[0, 1, 2]


def test_float_index_is_rejected():
    A = ir.placeholder((4,), name="A")
    X = ir.placeholder((4,), name="X")
    with pytest.raises(TypeError, match="index 0 of tensor 'A' must be an integer expression, got float32"):
        A[X[0]]


def test_reduce_axis_outside_reducer():
    A = ir.placeholder((4, 8), name="A")
    k = ir.reduce_axis(8, name="k")
    with pytest.raises(ValueError, match="compute 'bad': reduce axis 'k' is used outside a reducer"):
        ir.compute((4,), lambda i: A[i, k], name="bad")


def test_reduction_inside_expression_is_rejected():
    A = ir.placeholder((4, 8), name="A")
    k = ir.reduce_axis(8, name="k")
    with pytest.raises(ValueError, match="may only be the whole body of a compute"):
        ir.compute((4,), lambda i: ir.sum(A[i, k], axis=k) * 2.0, name="bad")


def test_reduction_over_unlisted_axis():
    A = ir.placeholder((4, 8, 3), name="A")
    k = ir.reduce_axis(8, name="k")
    r = ir.reduce_axis(3, name="r")
    with pytest.raises(ValueError, match="reduce axis 'r' is used in a reduction over \\[k\\]"):
        ir.compute((4,), lambda i: ir.sum(A[i, k, r], axis=k), name="bad")


def test_dtype_mismatch_names_both_sides():
    A = ir.placeholder((4,), name="A")
    B = ir.placeholder((4,), "float64", name="B")
    with pytest.raises(TypeError, match=r"dtype mismatch: A\[i\] is float32 but B\[i\] is float64"):
        ir.compute((4,), lambda i: A[i] + B[i])
    C = ir.compute((4,), lambda i: A[i] + ir.cast(B[i], "float32"), name="C")
    assert C.dtype == "float32"


def test_fcompute_arity_and_shape_errors():
    with pytest.raises(TypeError, match=r"the shape has 2 dimension\(s\) but fcompute takes 1 argument"):
        ir.compute((4, 5), lambda i: i, name="bad")
    with pytest.raises(ValueError, match=r"shape must be a tuple of positive ints, got \(4, 0\)"):
        ir.placeholder((4, 0), name="Z")
    with pytest.raises(TypeError, match="unsupported dtype 'float17'"):
        ir.placeholder((4,), "float17")


def test_integer_true_division_and_python_truth_are_rejected():
    i = E.Var("i")
    with pytest.raises(TypeError, match="use '//'"):
        i / 2
    with pytest.raises(TypeError, match="has no Python truth value"):
        bool(i < 3)


def test_math_needs_float_and_reducer_needs_axis():
    i = E.Var("i")
    with pytest.raises(TypeError, match="exp needs a float operand, got int64"):
        ir.exp(i)
    with pytest.raises(TypeError, match="ir.sum needs axis="):
        ir.sum(i)
    assert isinstance(ir.max(i, 3), E.Binary)


def test_vars_work_as_dict_keys():
    i, j = E.Var("i"), E.Var("j")
    d = {i: 1, j: 2}
    assert d[i] == 1 and d[j] == 2


@pytest.mark.parametrize("expr_fn, bounds, expected", [
    (lambda i, j: (i * 8 + j) // 8, {"j": (0, 7)}, "i"),
    (lambda i, j: (i * 8 + j) % 8, {"j": (0, 7)}, "j"),
    (lambda i, j: (i * 16 + j * 2 + 1) // 4, {"j": (0, 1)}, "(i * 4)"),
    (lambda i, j: (i + 3) - (i + 1) + j * 0, {}, "2"),
    (lambda i, j: ((i * 6 + j) // 2) // 3, {"j": (0, 5)}, "i"),
    (lambda i, j: i * 4 + i * 2 - j + j, {}, "(i * 6)"),
    # a split channel axis over groups of 32 (grouped conv): lane-invariant inside the vector
    (lambda i, j: ((i * 8 + j) // 32) * 16, {"j": (0, 7)}, "((i // 4) * 16)"),
    (lambda i, j: (i * 8 + j) % 32, {"j": (0, 7)}, "(((i % 4) * 8) + j)"),
])
def test_simplifier(expr_fn, bounds, expected):
    i, j = E.Var("i"), E.Var("j")
    named = {"i": i, "j": j}
    out = simplify(expr_fn(i, j), {named[k]: v for k, v in bounds.items()})
    assert str(out) == expected


def test_simplified_index_matches_numpy_on_all_points():
    i, j = E.Var("i"), E.Var("j")
    e = (i * 12 + j * 3 + 5) // 4 + (i * 12 + j * 3 + 5) % 4 - ((j + 2) // 3) * 7
    s = simplify(e, {i: (0, 9), j: (0, 3)})
    for iv in range(10):
        for jv in range(4):
            env = {"i": iv, "j": jv}
            assert _eval(s, env) == _eval(e, env)


@pytest.mark.parametrize("a, c, j_hi", [(8, 32, 7), (8, 32, 8), (6, 4, 1), (12, 18, 5), (4, 6, 1), (3, 9, 2)])
def test_division_of_a_split_axis_matches_numpy_on_all_points(a, c, j_hi):
    """(a·i + j + off) // c and % c for j in [0, j_hi]: exact where the aligned split
    applies and where it must not (j + off reaches the next multiple of gcd(a, c))."""
    i, j = E.Var("i"), E.Var("j")
    for op, off in [("//", 0), ("%", 0), ("//", 1), ("%", 1)]:
        e = E.Binary(op, i * a + j + off, E.const(c))
        s = simplify(e, {i: (-20, 20), j: (0, j_hi)})
        for iv in range(-20, 21):
            for jv in range(j_hi + 1):
                env = {"i": iv, "j": jv}
                assert _eval(s, env) == _eval(e, env), (op, str(s), env)


def _eval(e, env):
    if isinstance(e, E.Const):
        return e.value
    if isinstance(e, E.Var):
        return env[e.name]
    a, b = _eval(e.a, env), _eval(e.b, env)
    ops = {"+": lambda: a + b, "-": lambda: a - b, "*": lambda: a * b, "//": lambda: a // b, "%": lambda: a % b}
    return ops[e.op]()


def test_interval_arithmetic():
    i = E.Var("i")
    assert interval((i * 3 - 2) // 2, {i: (0, 5)}) == (-1, 6)
    assert interval(i % 4, {i: (0, 100)}) == (0, 3)


def test_float_constant_folding_uses_float32():
    x = simplify(ir.const(0.1, "float32") + ir.const(0.2, "float32"))
    assert x.value == float(np.float32(0.1) + np.float32(0.2))
