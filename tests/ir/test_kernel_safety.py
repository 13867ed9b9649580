"""A kernel never corrupts memory or kills the process (issue 13): read-only outputs are
refused, reads outside a tensor are rejected with the definition or checked at run time,
a failed allocation raises MemoryError, integer division by zero gives numpy's 0."""
import numpy as np
import pytest

import ir
import sketch_rules
from autosched import ops
from ir.index_check import analyse
from ir.cpu.runtime import compile_object, load_kernel

RNG = np.random.default_rng(0)


def add_one():
    A = ir.placeholder((8,), name="A")
    B = ir.compute((8,), lambda i: A[i] + 1.0, name="B")
    return ir.ComputeDAG([A, B])


def read_only_outputs(tmp_path):
    frozen = np.zeros(8, "float32")
    frozen.flags.writeable = False
    np.save(tmp_path / "out.npy", np.zeros(8, "float32"))
    return {"writeable=False": frozen,
            "buffer over bytes": np.frombuffer(bytes(32), dtype="float32"),
            "np.load mmap_mode=r": np.load(tmp_path / "out.npy", mmap_mode="r")}


def test_read_only_outputs_are_refused_before_the_call(tmp_path):
    kernel = ir.build(add_one())
    a = np.arange(8, dtype="float32")
    for what, out in read_only_outputs(tmp_path).items():
        with pytest.raises(ValueError, match=r"output 'B' is a read-only array.*writeable"):
            kernel(a, out)
        assert not out.any(), what
    a.flags.writeable = False  # read-only inputs are fine
    b = np.zeros(8, "float32")
    kernel(a, b)
    np.testing.assert_array_equal(b, a + 1)


# reads outside a tensor: rejected with the definition --------------------------------

def test_a_read_past_the_last_element_rejects_the_definition():
    X = ir.placeholder((10,), name="X")
    Y = ir.compute((10,), lambda i: X[i + 1], name="Y")
    with pytest.raises(ir.IndexOutOfRange) as info:
        ir.ComputeDAG([X, Y])
    message = str(info.value)
    for part in ("compute 'Y'", "'X' (shape (10,))", "(i + 1)", "ranges over 1..10", "0..9", "at i=9 it is 10"):
        assert part in message, (part, message)


def _violations():
    X = ir.placeholder((10,), name="X")
    k = ir.reduce_axis(4, "k")
    T = ir.compute((10,), lambda i: X[i] * 2.0, name="T")
    return {
        "negative": (X, ir.compute((10,), lambda i: X[8 - i], name="Y"), "at i=9 it is -1"),
        "reduction": (X, ir.compute((8,), lambda i: ir.sum(X[i + k], axis=k), name="Y"), "it is 10"),
        "intermediate": (X, ir.compute((10,), lambda i: T[(i + 3) % 11], name="Y"), "outside 'T'"),
        "padding too short": (X, ir.compute((12,), lambda i: ir.select(i >= 1, X[i - 1], 0.0), name="Y"),
                              "at i=11 it is 10"),
        "floor division": (X, ir.compute((21,), lambda i: X[i // 2], name="Y"), "at i=20 it is 10"),
        "else branch": (X, ir.compute((12,), lambda i: ir.select(i < 10, X[i], X[i + 1]), name="Y"),
                        "at i=10 it is 11"),
        "two variables": (X, ir.compute((10, 10), lambda i, j: ir.select(i + j < 10, X[i + j + 1], 0.0),
                                        name="Y"), "at i=0, j=9 it is 10"),
    }


@pytest.mark.parametrize("case", sorted(_violations()))
def test_reads_outside_a_tensor_reject_the_definition(case):
    x, y, detail = _violations()[case]
    with pytest.raises(ir.IndexOutOfRange, match="compute 'Y' reads") as info:
        ir.ComputeDAG([x, y])
    assert detail in str(info.value)


def test_guarded_reads_are_legal_and_cost_no_check():
    X = ir.placeholder((10,), name="X")
    k = ir.reduce_axis(10, "k")
    legal = {
        "padding": ir.compute((12,), lambda i: ir.select(ir.all_of([i >= 1, i < 11]), X[i - 1], 0.0), name="P"),
        "else branch": ir.compute((12,), lambda i: ir.select(i >= 10, 0.0, X[i]), name="E"),
        "triangular": ir.compute((10,), lambda i: ir.sum(X[i - k], axis=k, where=k <= i), name="S"),
        "diagonal": ir.compute((10, 10), lambda i, j: ir.select(i + j < 10, X[i + j], 0.0), name="D"),
        "modulo": ir.compute((25,), lambda i: X[(3 * i + 1) % 10], name="M"),
    }
    x = RNG.random(10).astype("float32")
    xp = np.concatenate([[0], x, [0]])
    want = {"padding": xp, "else branch": np.concatenate([x, [0, 0]]), "triangular": np.cumsum(x),
            "diagonal": np.array([[x[i + j] if i + j < 10 else 0 for j in range(10)] for i in range(10)]),
            "modulo": x[(3 * np.arange(25) + 1) % 10]}
    for name, y in legal.items():
        dag = ir.ComputeDAG([X, y])
        assert "else error" not in str(ir.lower(dag)), name
        out = np.zeros(y.shape, "float32")
        ir.build(dag)(x, out)
        np.testing.assert_allclose(out, want[name], rtol=1e-5, err_msg=name)


def test_the_suite_needs_no_run_time_checks():
    for name in ops.suite_names():
        dag = ir.ComputeDAG(ops.suite_workload(name).tensors)
        for op in dag.compute_ops:
            violations, unproven = analyse(op.name, op.body, tuple(op.axis) + tuple(op.reduce_axis))
            assert not violations and not unproven, (name, op.name)


def test_sampled_programs_have_no_checks():
    """Partial tiles (region guards, vector masks), cache stages and rfactor read only
    where the definition does: the programs the search samples carry no run-time index
    check (and the padded conv's still compute the right thing)."""
    w = ops.workload("conv2d", 1, 9, 9, 8, 16, 3, stride=1, padding=1, layout="NHWC")
    names = ["GMM-1x128x128x128", "C1D-1x256x64x128-k3s2p1", "DEP-1x14x14x512-k3s2p1", "T2D-1x4x4x512x256-k4s2p1",
             "CAP-1x8x8x16x16-k3s1p1", "NRM-1x256x256", "TBS-1x128x12x64", "CBR-1x7x7x512x512-k3s1p1"]
    for workload in [w] + [ops.suite_workload(n) for n in names]:
        task = ir.SearchTask(ir.ComputeDAG(workload.tensors))
        programs = sketch_rules.sample_programs(task, sketch_rules.generate_sketches(task), 8,
                                                np.random.default_rng(1))
        assert programs
        for state in programs:
            assert "else error" not in str(ir.lower(state, layout_rewrite=True)), (workload, str(state))
    task = ir.SearchTask(ir.ComputeDAG(w.tensors))
    inputs = w.random_inputs(np.random.default_rng(0))
    want = w.reference(inputs)[0]
    for state in sketch_rules.sample_programs(task, sketch_rules.generate_sketches(task), 3,
                                              np.random.default_rng(2)):
        out = w.output_buffers()
        ir.build(task.dag, state)(*inputs, *out)
        np.testing.assert_allclose(out[0], want, rtol=1e-4, atol=1e-4)


# reads the build cannot prove: checked at run time ---------------------------------------

def gather():
    X = ir.placeholder((10, 16), name="X")
    idx = ir.placeholder((8,), "int32", name="idx")
    G = ir.compute((8, 16), lambda i, j: X[idx[i], j] * 2.0, name="G")
    return ir.ComputeDAG([X, idx, G])


@pytest.mark.parametrize("schedule", ["naive", "vectorize", "parallel"])
def test_a_read_at_an_index_from_data_is_checked_at_run_time(schedule):
    dag = gather()
    state = dag.init_state()
    if schedule == "vectorize":
        state = state.vectorize("G", "j")
    elif schedule == "parallel":
        state = state.parallel("G", "i").vectorize("G", "j")
    kernel = ir.build(dag, state)
    x, out = RNG.random((10, 16)).astype("float32"), np.zeros((8, 16), "float32")
    idx = RNG.integers(0, 10, 8).astype("int32")
    kernel(x, idx, out)
    np.testing.assert_allclose(out, x[idx] * 2)
    for bad in (10, -1, 1 << 30):
        idx[5] = bad
        with pytest.raises(IndexError, match="read 'X' at an index outside it"):
            kernel(x, idx, out)
        with pytest.raises(IndexError):
            kernel.time(x, idx, out, number=2, repeat=1)


@pytest.mark.parametrize("axis", ["i", "j"])
@pytest.mark.parametrize("index_dtype", ["int32", "int64"])
def test_a_read_at_an_index_from_data_under_a_vector_mask(axis, index_dtype):
    """A split that does not divide (6 by 4) masks the last vector: the read of the index
    (lane-invariant or gathered) and the read it addresses are masked loads/gathers."""
    D = ir.placeholder((10, 6), name="D")
    idx = ir.placeholder((6,), index_dtype, name="I")
    O = ir.compute((6, 6), lambda i, j: D[idx[i], j], name="O")
    dag = ir.ComputeDAG([D, idx, O])
    kernel = ir.build(dag, dag.init_state().split("O", axis, [4]).vectorize("O", f"{axis}.1"))
    d, out = RNG.random((10, 6)).astype("float32"), np.zeros((6, 6), "float32")
    i = np.array([3, 0, 9, 5, 9, 1], index_dtype)
    kernel(d, i, out)
    np.testing.assert_array_equal(out, d[i])


def test_an_affine_read_the_build_cannot_decide_is_checked_at_run_time():
    n = 1000  # too many points to search them all, and no corner of the domain is wrong
    X = ir.placeholder((n,), name="X")
    Y = ir.compute((n, n), lambda i, j: ir.select(i + j < n, X[i + j + 1], 0.0), name="Y")
    dag = ir.ComputeDAG([X, Y])
    assert "else error" in str(ir.lower(dag))
    with pytest.raises(IndexError, match="'X'"):
        ir.build(dag)(RNG.random(n).astype("float32"), np.zeros((n, n), "float32"))


# allocation ---------------------------------------------------------------------------------

def huge_intermediate():
    n = 10 ** 7  # 400 TB of float32: more than any address space, whatever the overcommit policy
    A = ir.placeholder((n,), name="A")
    T = ir.compute((n, n), lambda i, j: A[i] * A[j], name="T")
    r = ir.reduce_axis(n, "r")
    S = ir.compute((n,), lambda i: ir.sum(T[i, r], axis=r), name="S")
    return ir.ComputeDAG([A, S])


def test_an_intermediate_too_large_raises_memory_error():
    dag = huge_intermediate()
    kernel = ir.build(dag)
    a, s = np.ones(10 ** 7, "float32"), np.zeros(10 ** 7, "float32")
    for _ in range(2):  # the process is intact: calling again fails the same way
        with pytest.raises(MemoryError, match=r"could not allocate 400000000000000 bytes .*'T'"):
            kernel(a, s)
    with pytest.raises(MemoryError):
        kernel.time(a, s, number=1, repeat=1)
    lowered = ir.lower(dag)
    loaded = load_kernel(dag, compile_object(ir.cpu.codegen.generate(lowered, "k")), "k")
    with pytest.raises(MemoryError, match="'T'"):
        loaded(a, s)


def two_large_locals(parallel: bool):
    n = 1_500_000  # two 6 MB buffers per thread: more than an 8 MB thread stack
    A = ir.placeholder((4, n), name="A")
    C = ir.compute((4, n), lambda i, j: A[i, j] * 2.0, name="C")
    E = ir.compute((4, n), lambda i, j: A[i, j] * 3.0, name="E")
    D = ir.compute((4, n), lambda i, j: C[i, j] + E[i, j], name="D")
    dag = ir.ComputeDAG([A, D])
    state = dag.init_state().compute_at("C", "D", "i").compute_at("E", "D", "i")
    return dag, state.parallel("D", "i") if parallel else state


@pytest.mark.parametrize("parallel", [False, True])
def test_local_buffers_too_large_for_a_stack_come_from_the_heap(parallel):
    dag, state = two_large_locals(parallel)
    kernel = ir.build(dag, state)
    assert "aligned_alloc" in kernel.llvm_ir
    a = RNG.random(dag.tensors[0].shape).astype("float32")
    d = np.zeros_like(a)
    kernel(a, d)
    np.testing.assert_allclose(d, a * 5, rtol=1e-6)


@pytest.mark.parametrize("parallel", [False, True])
def test_a_local_buffer_that_cannot_be_allocated_raises_memory_error(parallel, monkeypatch):
    """Every thread's allocation fails (asked for more than any machine has): the threads
    report it, the call raises, nothing is written."""
    from ir import llvm_codegen
    monkeypatch.setattr(llvm_codegen, "heap_bytes", lambda nbytes: llvm_codegen.MAX_ALLOCATION)
    dag, state = two_large_locals(parallel)
    kernel = ir.build(dag, state)
    a = np.ones(dag.tensors[0].shape, "float32")
    d = np.zeros_like(a)
    with pytest.raises(MemoryError, match=r"per thread for its local buffer '[CE]'"):
        kernel(a, d)
    assert not d.any()


# integer division ----------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["int8", "int32", "int64", "uint8"])
@pytest.mark.parametrize("vectorize", [False, True])
def test_integer_division_by_zero_gives_numpy_results(dtype, vectorize):
    A = ir.placeholder((16,), dtype, name="A")
    B = ir.placeholder((16,), dtype, name="B")
    Q = ir.compute((16,), lambda i: A[i] // B[i], name="Q")
    R = ir.compute((16,), lambda i: A[i] % B[i], name="R")
    dag = ir.ComputeDAG([A, B, Q, R])
    state = dag.init_state()
    if vectorize:
        state = state.vectorize("Q", "i").vectorize("R", "i")
    kernel = ir.build(dag, state)
    info = np.iinfo(dtype)
    a = RNG.integers(max(info.min, -50), 50, 16).astype(dtype)
    b = RNG.integers(max(info.min, -3), 4, 16).astype(dtype)
    b[:3] = 0
    if info.min < 0:
        a[3], b[3] = info.min, -1  # the other division that traps in hardware
    q, r = np.zeros(16, dtype), np.zeros(16, dtype)
    kernel(a, b, q, r)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(q, a // b)
        np.testing.assert_array_equal(r, a % b)


@pytest.mark.parametrize("channels", [(5, 16, 3, 32, 1, 17, 9), (32,) * 25])
def test_a_vectorised_concatenation_loads_only_the_inputs_its_lanes_read(channels):
    """A concatenation on its vectorised axis is a tree of masked selects: a vector whose
    lanes all come from one input skips the others' loads (a branch on the mask), and a
    vector that straddles two inputs still takes each lane from its own."""
    from autosched.ops.transform import concat
    xs = [ir.placeholder((3, 4, c), name=f"X{k}") for k, c in enumerate(channels)]
    out = concat(xs, axis=-1)
    dag = ir.ComputeDAG(xs + [out])
    state = dag.init_state().split(out.op.name, 2, [16])   # the joined axis, 16 lanes a vector
    state = state.vectorize(out.op.name, 3)
    kernel = ir.build(dag, state)
    assert "msel.run" in kernel.llvm_ir
    arrays = [RNG.random(x.shape).astype("float32") for x in xs]
    got = np.zeros(out.shape, dtype="float32")
    kernel(*arrays, got)
    np.testing.assert_array_equal(got, np.concatenate(arrays, axis=-1))
