"""The analyses the derivation rules ask of a (state, stage): inlinable, data reuse, a
fusible consumer, rfactor."""
import ir
from autosched import ops
from sketch_rules import analysis as A


def test_predicates_of_matmul_relu():
    x, w = ir.placeholder((8, 5), name="X"), ir.placeholder((5, 6), name="W", constant=True)
    s = ir.ComputeDAG([x, w, ops.relu(ops.matmul(x, w, name="C"), name="D")]).init_state()
    c, d = s.stage_index("C"), s.stage_index("D")
    assert A.needs_multi_level_tiling(s, c) and not A.needs_multi_level_tiling(s, d)
    assert A.is_strict_inlinable(s, d) and not A.is_strict_inlinable(s, c)
    assert A.single_elementwise_consumer(s, c) == d
    assert A.single_elementwise_consumer(s, d) is None  # an output has none
    assert not A.needs_rfactor(s, c, num_cores=2)
    assert A.should_always_inline(s, d) is False  # an output is stored


def test_predicates_of_norm_and_softmax():
    X = ir.placeholder((4, 1024), name="X")
    r, c = ir.reduce_axis(4, "r"), ir.reduce_axis(1024, "c")
    S = ir.compute((1,), lambda b: ir.sum(X[r, c] * X[r, c], axis=[r, c]), name="S")
    N = ir.compute((1,), lambda b: ir.sqrt(S[b]), name="N")
    s = ir.ComputeDAG([X, N]).init_state()
    assert A.needs_rfactor(s, s.stage_index("S"), num_cores=2)
    assert not A.is_strict_inlinable(s, s.stage_index("N"))  # sqrt is expensive to recompute
    Y = ir.placeholder((8, 16), name="Y")
    k = ir.reduce_axis(16, "k")
    M = ir.compute((8,), lambda i: ir.max(Y[i, k], axis=k), name="M")
    E = ir.compute((8, 16), lambda i, j: ir.exp(Y[i, j] - M[i]), name="E")
    s = ir.ComputeDAG([Y, E]).init_state()
    assert not A.needs_multi_level_tiling(s, s.stage_index("M"))
    assert not A.is_strict_inlinable(s, s.stage_index("E"))


def test_expensive_math_read_once_elementwise_is_inlined_and_read_twice_is_not():
    """SiLU as ONNX exports it (sigmoid, then x times it): the sigmoid's one consumer reads
    it once per element, so inlining it repeats nothing; x * x of a sigmoid would."""
    x = ir.placeholder((4, 6), name="X")
    sig = ir.compute((4, 6), lambda i, j: ir.sigmoid(x[i, j]), name="sig")
    silu = ir.compute((4, 6), lambda i, j: x[i, j] * sig[i, j], name="silu")
    s = ir.ComputeDAG([x, silu]).init_state()
    assert A.read_once_elementwise(s, s.stage_index("sig")) and A.should_always_inline(s, s.stage_index("sig"))
    sig2 = ir.compute((4, 6), lambda i, j: ir.sigmoid(x[i, j]), name="sig2")
    square = ir.compute((4, 6), lambda i, j: sig2[i, j] * sig2[i, j], name="square")
    s = ir.ComputeDAG([x, square]).init_state()
    assert not A.read_once_elementwise(s, s.stage_index("sig2")) and not A.is_strict_inlinable(s, s.stage_index("sig2"))
    gate = ir.placeholder((1, 6), name="gate")                # a gate broadcast over the rows: read 4 times
    sig3 = ir.compute((1, 6), lambda i, j: ir.sigmoid(gate[i, j]), name="sig3")
    scaled = ir.compute((4, 6), lambda i, j: x[i, j] * sig3[0, j], name="scaled")
    s = ir.ComputeDAG([x, gate, scaled]).init_state()
    assert not A.is_strict_inlinable(s, s.stage_index("sig3"))


def test_a_broadcasting_operator_over_a_batch_of_one_is_elementwise_and_has_no_reuse():
    """``ops.add`` of two (1, H, W, C) tensors reads both at batch index 0: still the
    convolution's one elementwise consumer (a residual tail fuses), and no data reuse."""
    w = ops.workload("conv2d_chain", 1, 6, 6, 8, 16, 1, epilogue="bias-residual")
    s = ir.ComputeDAG(w.tensors).init_state()
    conv, add = s.stage_index("conv2d_nhwc"), s.stage_index("add_1")
    assert "[0, ax1, ax2, ax3]" in str(s.stages[add].body)
    s = s.compute_inline(s.stage_index("bias_add_0"))
    assert A.single_elementwise_consumer(s, conv) == add
    assert not A.needs_multi_level_tiling(s, add)
    ax0 = s.stages[add].axes[0]
    assert A.at_axis(ax0, ax0) and A.at_axis(ir.expr.Const(0, "int64"), ax0)
    assert not A.at_axis(ir.expr.Const(0, "int64"), s.stages[add].axes[1])  # an axis of 6: 0 is one of them


def test_guarded_reads_are_padding_and_concatenation_not_data_dependent_selects():
    w = ops.workload("conv2d", 1, 8, 8, 4, 8, 3, stride=1, padding=1, layout="NHWC")
    s = ir.ComputeDAG(w.tensors).init_state()
    pad = s.stage_index("pad")
    assert A.has_guarded_read(s, pad) and A.is_strict_inlinable(s, pad)
    assert A.should_always_inline(s, pad) and not A.should_always_inline(s, pad, guarded_reads=False)
    assert not A.has_guarded_read(s, s.stage_index("conv2d_nhwc"))
    X = ir.placeholder((4, 6), name="X")
    Y = ir.placeholder((4, 2), name="Y")
    cat = ir.compute((4, 8), lambda i, j: ir.select(j < 6, X[i, j], Y[i, j - 6]), name="cat")
    leaky = ir.compute((4, 6), lambda i, j: ir.select(X[i, j] > 0.0, X[i, j], X[i, j] * 0.1), name="leaky")
    out = ir.compute((4, 6), lambda i, j: cat[i, j] + leaky[i, j], name="out")
    s = ir.ComputeDAG([X, Y, out]).init_state()
    assert A.has_guarded_read(s, s.stage_index("cat"))
    assert not A.has_guarded_read(s, s.stage_index("leaky"))  # the condition reads data: no index guard
    assert not A.has_guarded_read(s, s.stage_index("X"))


def test_parallel_region_starts_counts_the_loops_around_a_parallel_loop():
    x, w = ir.placeholder((8, 6), name="X"), ir.placeholder((6, 12), name="W", constant=True)
    s = ir.ComputeDAG([x, w, ops.relu(ops.matmul(x, w, name="C"), name="D")]).init_state()
    c, d = s.stage_index("C"), s.stage_index("D")
    assert A.parallel_region_starts(s) == 1                     # no parallel loop
    outer = s.parallel(d, s.stages[d].iters[0].name)
    assert A.parallel_region_starts(outer) == 1                 # outermost: once a call
    inner = s.parallel(d, s.stages[d].iters[1].name)
    assert A.parallel_region_starts(inner) == 8                 # inside a serial loop of 8 rows
    # a stage computed inside a consumer's loop: the consumer's loops up to there count too
    tiled = s.split(d, s.stages[d].iters[1].name, [4])          # D: i, j.0 (3), j.1 (4)
    tiled = tiled.compute_at(c, d, 1)
    nested = tiled.parallel(c, tiled.stages[c].iters[0].name)
    assert A.parallel_region_starts(nested) == 8 * 3
