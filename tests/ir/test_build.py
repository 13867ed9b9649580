"""Naive lowering and code generation, run against numpy; the Kernel calling contract."""
import numpy as np
import pytest

import ir

RNG = np.random.default_rng(0)


def run(tensors, inputs, out_dtype=None):
    dag = ir.ComputeDAG(tensors)
    kernel = ir.build(dag)
    outs = [np.zeros(t.shape, t.dtype) for t in dag.outputs]
    kernel(*inputs, *outs)
    return outs


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
def test_matmul_every_dtype(dtype):
    A = ir.placeholder((7, 5), dtype, name="A")
    B = ir.placeholder((5, 3), dtype, name="B")
    k = ir.reduce_axis(5, "k")
    C = ir.compute((7, 3), lambda i, j: ir.sum(A[i, k] * B[k, j], axis=k), name="C")
    a = RNG.integers(-5, 5, (7, 5)).astype(dtype)
    b = RNG.integers(-5, 5, (5, 3)).astype(dtype)
    (c,) = run([A, B, C], [a, b])
    np.testing.assert_allclose(c, a @ b, rtol=1e-6)


def test_bool_output_and_comparisons():
    A = ir.placeholder((10,), name="A")
    M = ir.compute((10,), lambda i: (A[i] > 0.0) & ~(A[i] > 1.0), name="M")
    a = np.linspace(-1, 2, 10).astype("float32")
    (m,) = run([A, M], [a])
    assert m.dtype == np.bool_
    np.testing.assert_array_equal(m, (a > 0) & ~(a > 1))


def test_floor_division_and_modulo_of_negative_values():
    A = ir.placeholder((9,), "int32", name="A")
    Q = ir.compute((9,), lambda i: A[i] // 4 + (A[i] % 4) * 100, name="Q")
    a = np.arange(-4, 5, dtype="int32") * 3
    (q,) = run([A, Q], [a])
    np.testing.assert_array_equal(q, a // 4 + (a % 4) * 100)


def test_lazy_select_does_not_read_out_of_bounds():
    """Padding reads A[i - 1]; a read of A[-1] from a huge offset would crash."""
    n = 6
    A = ir.placeholder((n,), name="A")
    P = ir.compute((n + 2,), lambda i: ir.select((i >= 1) & (i <= n), A[i - 1], 0.0), name="P")
    big = ir.placeholder((n,), name="X")
    Y = ir.compute((n,), lambda i: ir.select(i < 0, big[i - 10 ** 12], P[i + 1] + P[i]), name="Y")
    a = RNG.standard_normal(n).astype("float32")
    (y,) = run([A, big, Y], [a, a])
    p = np.pad(a, 1)
    np.testing.assert_allclose(y, p[1:n + 1] + p[:n], rtol=1e-6)


def test_math_calls_and_casts():
    A = ir.placeholder((64,), name="A")
    fns = {
        "exp": (ir.exp, np.exp), "log": (lambda x: ir.log(ir.abs(x) + 1.0), lambda x: np.log(np.abs(x) + 1)),
        "tanh": (ir.tanh, np.tanh), "sigmoid": (ir.sigmoid, lambda x: 1 / (1 + np.exp(-x))),
        "sqrt": (lambda x: ir.sqrt(ir.abs(x)), lambda x: np.sqrt(np.abs(x))),
        "floor": (ir.floor, np.floor), "ceil": (ir.ceil, np.ceil),
        "pow": (lambda x: ir.pow(ir.abs(x) + 0.5, 1.5), lambda x: (np.abs(x) + 0.5) ** 1.5),
    }
    outs = [ir.compute((64,), lambda i, f=f: f(A[i]), name=name) for name, (f, _) in fns.items()]
    cast = ir.compute((64,), lambda i: ir.cast(ir.cast(A[i] * 10.0, "int32"), "float32"), name="cast")
    a = RNG.uniform(-3, 3, 64).astype("float32")
    results = run([A, *outs, cast], [a])
    for (name, (_, ref)), got in zip(fns.items(), results):
        np.testing.assert_allclose(got, ref(a.astype("float64")), rtol=2e-6, atol=1e-6, err_msg=name)
    np.testing.assert_array_equal(results[-1], np.trunc(a * np.float32(10)).astype("float32"))


def test_max_min_reductions_with_condition_and_offset_axis():
    A = ir.placeholder((5, 9), name="A")
    k = ir.reduce_axis((2, 8), "k")
    mx = ir.compute((5,), lambda i: ir.max(A[i, k], axis=k), name="mx")
    k2 = ir.reduce_axis(9, "k2")
    mn = ir.compute((5,), lambda i: ir.min(A[i, k2], axis=k2, where=k2 % 2 == 0), name="mn")
    a = RNG.standard_normal((5, 9)).astype("float32")
    got_max, got_min = run([A, mx, mn], [a])
    np.testing.assert_array_equal(got_max, a[:, 2:8].max(axis=1))
    np.testing.assert_array_equal(got_min, a[:, ::2].min(axis=1))


def test_intermediate_buffers_and_multiple_outputs():
    A = ir.placeholder((4, 8), name="A")
    k = ir.reduce_axis(8, "k")
    M = ir.compute((4,), lambda i: ir.max(A[i, k], axis=k), name="M")
    E = ir.compute((4, 8), lambda i, j: ir.exp(A[i, j] - M[i]), name="E")
    k2 = ir.reduce_axis(8, "k2")
    S = ir.compute((4,), lambda i: ir.sum(E[i, k2], axis=k2), name="S")
    Y = ir.compute((4, 8), lambda i, j: E[i, j] / S[i], name="Y")
    a = RNG.standard_normal((4, 8)).astype("float32")
    y, m = run([A, Y, M], [a])
    e = np.exp(a - a.max(1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(1, keepdims=True), rtol=1e-6)
    np.testing.assert_array_equal(m, a.max(1))


@pytest.fixture(scope="module")
def add_kernel():
    A = ir.placeholder((3, 4), name="A")
    B = ir.compute((3, 4), lambda i, j: A[i, j] + 1.0, name="B")
    return ir.build(ir.ComputeDAG([A, B]))


def test_call_checks_shape(add_kernel):
    with pytest.raises(ValueError, match=r"input 'A' has shape \(4, 3\), the kernel expects \(3, 4\)"):
        add_kernel(np.zeros((4, 3), "float32"), np.zeros((3, 4), "float32"))


def test_call_checks_dtype(add_kernel):
    with pytest.raises(TypeError, match="input 'B' has dtype float64, the kernel expects float32"):
        add_kernel(np.zeros((3, 4), "float32"), np.zeros((3, 4)))


def test_call_checks_contiguity(add_kernel):
    a = np.zeros((4, 3), "float32").T
    with pytest.raises(ValueError, match="input 'A' is not C-contiguous"):
        add_kernel(a, np.zeros((3, 4), "float32"))


def test_call_checks_argument_count(add_kernel):
    with pytest.raises(TypeError, match=r"kernel takes 2 arrays \(A, B\), got 1"):
        add_kernel(np.zeros((3, 4), "float32"))
    with pytest.raises(TypeError, match=r"argument 0 \('A'\) must be a numpy array, got list"):
        add_kernel([[0.0] * 4] * 3, np.zeros((3, 4), "float32"))


def test_time_reports_per_call_seconds(add_kernel):
    a, b = np.ones((3, 4), "float32"), np.zeros((3, 4), "float32")
    res = add_kernel.time(a, b, number=5, repeat=4, min_repeat_ms=2)
    assert len(res.results) == 4 and res.number >= 5
    assert 0 < res.median < 1e-3
    assert res.number > 5  # min_repeat_ms grew `number` (a ~10 ns call: by thousands)
    np.testing.assert_array_equal(b, a + 1)


@pytest.mark.skipif(not __import__("ir.cpu.runtime").cpu.runtime.can_evict(), reason="clflush needs an x86 CPU")
def test_evicting_arrays_from_the_caches_keeps_their_values():
    from ir.cpu.runtime import evict_from_caches
    rng = np.random.default_rng(0)
    a = rng.standard_normal(100_003).astype("float32")
    expected = a.copy()
    a[::7] += 1.0  # dirty lines: eviction must write them back, not drop them
    expected[::7] += 1.0
    evict_from_caches([a, a[3:17], a[:0], np.zeros((2, 3))])  # unaligned, empty and 2-d arrays too
    np.testing.assert_array_equal(a, expected)


def test_llvm_schedulers_compare_memory_operations_within_a_window():
    """A block of many loads and stores that may alias (an unrolled product into a tile on
    the stack) compiles in time linear in its length: ``set_llvm_options`` caps the window
    of LLVM's schedulers (a ResNet-50 Winograd kernel took 33 s with LLVM's default, 2 s
    with the cap); with the default restored, the same block takes several times longer."""
    import time
    import llvmlite.binding as llvm
    from ir.cpu.runtime import compile_object, target_machine
    from ir.llvm_codegen import SCHEDULER_ALIAS_WINDOW
    target_machine()
    body = []
    for i in range(1500):
        body += [f"  %a{i} = getelementptr float, ptr %p, i64 {i}", f"  %v{i} = load float, ptr %a{i}",
                 f"  %b{i} = getelementptr float, ptr %q, i64 {i}", f"  store float %v{i}, ptr %b{i}"]
    text = "\n".join(["define void @copy(ptr %p, ptr %q) {", *body, "  ret void", "}"])

    def seconds():
        t0 = time.perf_counter()
        compile_object(text)
        return time.perf_counter() - t0
    capped = min(seconds(), seconds())
    try:
        llvm.set_option("test", "-dag-maps-huge-region=1000")   # LLVM's default
        default = seconds()
    finally:
        llvm.set_option("test", f"-dag-maps-huge-region={SCHEDULER_ALIAS_WINDOW}")
    assert default > 3 * capped, (capped, default)
