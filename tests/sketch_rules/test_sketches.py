"""Sketch generation: the structures the Ansor paper describes, GPU rules, user rules."""
import numpy as np
import pytest

import ir
import sketch_rules as SR
from sketch_rules import analysis
from autosched import ops


def task_of(tensors):
    return ir.SearchTask(ir.ComputeDAG(tensors), hardware=ir.HardwareParams(num_cores=2, vector_lanes=16))


def matmul(n=32, m=32, k=32):
    A = ir.placeholder((n, k), name="A")
    B = ir.placeholder((k, m), name="B")
    r = ir.reduce_axis(k, name="k")
    C = ir.compute((n, m), lambda i, j: ir.sum(A[i, r] * B[r, j], axis=r), name="C")
    return A, B, C


def matmul_bias_relu():
    A, B, C = matmul()
    bias = ir.placeholder((32,), name="bias", constant=True)
    D = ir.compute((32, 32), lambda i, j: C[i, j] + bias[j], name="D")
    E = ir.compute((32, 32), lambda i, j: ir.max(D[i, j], 0.0), name="E")
    return [A, B, bias, E]


def names(state, stage):
    return [it.name for it in state[stage].iters]


def by_structure(sketches):
    """Sketch kind: 'plain' (no cache/fusion), or the fusion iterator's position."""
    out = {}
    for s in sketches:
        attached = [st for st in s.stages if st.compute_at == "iter"]
        out[attached[0].attach[1] if attached else "plain"] = s
    return out


def packed(sketches, tensor="B"):
    """The sketches that read ``tensor`` through a packing copy, and the others."""
    with_copy = [s for s in sketches if any(st.name == f"{tensor}.local" for st in s.stages)]
    return with_copy, [s for s in sketches if s not in with_copy]


def test_matmul_has_three_sketches_ssrsrs_and_cache_write_fused_at_two_levels():
    with_pack, sketches = packed(SR.generate_sketches(task_of(matmul())))
    assert len(sketches) == 3 and len(with_pack) == 3  # Ansor's three, and each with B packed
    kinds = by_structure(sketches)
    assert set(kinds) == {"plain", 1, 3}
    assert names(kinds["plain"], "C") == ["i.0", "j.0", "i.1", "j.1", "k.0", "i.2", "j.2", "k.1", "i.3", "j.3"]
    for pos, level in ((1, 1), (3, 2)):
        s = kinds[pos]
        assert s["C.local"].origin == "cache_write" and s["C.local"].attach == (s.stage_index("C"), pos)
        assert names(s, "C.local") == ["i.0", "j.0", "i.1", "j.1", "k.0", "i.2", "j.2", "k.1", "i.3", "j.3"]
        assert names(s, "C")[:2 * (level + 1)] == [f"{a}.{lv}" for lv in range(level + 1) for a in "ij"]


def test_matmul_bias_relu_inlines_bias_and_fuses_the_matmul_into_relu():
    with_pack, sketches = packed(SR.generate_sketches(task_of(matmul_bias_relu())))
    assert len(sketches) == 3 and len(with_pack) == 3
    for s in sketches:
        assert s["D"].compute_at == "inline"
        assert s["E"].compute_at == "root"
        assert not any(st.origin == "cache_write" for st in s.stages)
    kinds = by_structure(sketches)
    assert set(kinds) == {"plain", 1, 3}
    assert kinds[1]["C"].attach == (kinds[1].stage_index("E"), 1)


def test_pack_copy_reads_the_input_for_the_tiled_stage_and_is_sampled_inside_its_tiles():
    task = task_of(matmul(64, 64, 64))
    with_pack, _ = packed(SR.generate_sketches(task))
    for s in with_pack:
        copy = s.stage_index("B.local")
        tiled = "C.local" if any(st.name == "C.local" for st in s.stages) else "C"
        assert s.stages[copy].origin == "cache_read" and s.consumers(copy) == [s.stage_index(tiled)]
        assert s.consumers(s.stage_index("B")) == [copy]
    rng = np.random.default_rng(3)
    programs = [p for p in SR.sample_programs(task, with_pack, 24, rng)]
    assert programs
    for p in programs:  # never at root (a plain copy of B) nor inlined (no copy at all)
        assert p["B.local"].compute_at == "iter"


def test_no_pack_copy_for_a_constant_input_under_layout_rewrite_or_an_input_read_along_the_reduction():
    A, B, C = matmul()
    Bc = ir.placeholder((32, 32), name="B", constant=True)
    r = ir.reduce_axis(32, name="k")
    Cc = ir.compute((32, 32), lambda i, j: ir.sum(A[i, r] * Bc[r, j], axis=r), name="C")
    assert not packed(SR.generate_sketches(task_of([A, Bc, Cc])))[0]  # the layout rewrite packs B
    no_rewrite = ir.SearchTask(ir.ComputeDAG([A, Bc, Cc]), hardware=ir.HardwareParams(num_cores=2, vector_lanes=16),
                               layout_rewrite=False)
    assert len(packed(SR.generate_sketches(no_rewrite))[0]) == 3
    assert not packed(SR.generate_sketches(task_of(matmul())), "A")[0]  # A[i, k]: its rows are contiguous already


def test_conv_layer_inlines_bias_and_batch_norm_and_leaves_the_padding_to_annotation():
    w = ops.workload("conv_layer", 1, 8, 8, 4, 8, 3, stride=1, padding=1)
    sketches = SR.generate_sketches(task_of(w.tensors))
    assert len(sketches) == 3
    for s in sketches:
        inlined = {st.name for st in s.stages if st.compute_at == "inline"}
        assert {"bias_add", "bn_mul", "bn_add"} <= inlined and "pad" not in inlined
        assert len(names(s, "conv2d_nhwc")) == 4 * 4 + 3 * 2  # SSRSRS: 4 space axes x4, 3 reduce x2
    assert set(by_structure(sketches)) == {"plain", 3, 7}


@pytest.mark.parametrize("epilogue", ["bias-residual", "bias-silu"])
def test_a_convolution_is_computed_inside_its_residual_or_silu_epilogue(epilogue):
    """As the ONNX importer builds them: a residual add and SiLU's multiply read the
    batch of one at index 0, and SiLU's sigmoid is expensive math read once per element:
    the convolution still fuses into the epilogue's tiles (the output written once), as
    with a ReLU."""
    w = ops.workload("conv2d_chain", 1, 6, 6, 8, 16, 1, epilogue=epilogue)
    sketches = SR.generate_sketches(task_of(w.tensors))
    assert len(sketches) == 3
    out = w.tensors[-1].op.name
    kinds = by_structure(sketches)
    assert set(kinds) == {"plain", 3, 7}
    for s in sketches:
        assert [st.name for st in s.stages if not st.is_placeholder and st.compute_at != "inline"][-1] == out
        assert not any(st.origin == "cache_write" for st in s.stages)
    assert kinds[3]["conv2d_nhwc"].attach == (kinds[3].stage_index(out), 3)


def test_the_gpu_rules_still_inline_the_padding():
    w = ops.workload("conv2d", 1, 8, 8, 4, 8, 3, stride=1, padding=1, layout="NHWC")
    task = ir.SearchTask(ir.ComputeDAG(w.tensors), target="cuda")
    sketches = SR.generate_sketches(task)
    assert sketches and all(s["pad"].compute_at == "inline" for s in sketches)


def test_norm_gets_two_rfactor_sketches_and_a_plain_one():
    w = ops.suite_workload("NRM-1x64x64")
    sketches = SR.generate_sketches(task_of(w.tensors))
    assert len(sketches) == 3
    rf = [s for s in sketches if any(st.origin == "rfactor" for st in s.stages)]
    assert len(rf) == 2
    # the fused reduction is split in two; one sketch factors out the outer part, one the
    # inner part, which is moved innermost (for vectorisation); the outer part stays put
    loops = sorted((s["norm_square_sum"].reduce_axes[0].name,
                    [(it.name, it.kind) for it in s["norm_square_sum.rf"].iters]) for s in rf)
    assert loops == [("r0@r1@_0_v", [("b", "space"), ("r0@r1@_0", "space"), ("r0@r1@_1", "reduce")]),
                     ("r0@r1@_1_v", [("b", "space"), ("r0@r1@_0", "reduce"), ("r0@r1@_1", "space")])]
    for s in rf:
        assert s["norm_square_sum"].reduce_axes[0].extent == s["norm_square_sum.rf"].op.shape[-1]


def test_softmax_rfactors_both_reductions_and_keeps_exp():
    w = ops.workload("softmax", (4, 64))
    sketches = SR.generate_sketches(task_of(w.tensors))
    assert len(sketches) == 9  # (rfactor outer, rfactor inner, none) for max and for sum
    for s in sketches:
        assert s["softmax_exp"].compute_at == "root"  # exp is expensive: never inlined
    n_rf = sorted(sum(st.origin == "rfactor" for st in s.stages) for s in sketches)
    assert n_rf == [0, 1, 1, 1, 1, 2, 2, 2, 2]


def test_a_reduction_is_never_computed_inside_a_loop_its_values_do_not_depend_on():
    """softmax's row max and row sum inside the loop over a row's elements would be
    recomputed 500 times: only the loop over rows (or root) is offered."""
    w = ops.workload("softmax", (4, 500))
    state = ir.ComputeDAG(w.tensors).init_state()
    exp, out = state.stage_index("softmax_exp"), state.stage_index("softmax")
    assert SR.compute_location_choices(state, state.stage_index("softmax_maxelem")) == ["root", (exp, 0)]
    assert SR.compute_location_choices(state, state.stage_index("softmax_expsum")) == ["root", (out, 0)]
    # an elementwise producer may still go anywhere before the reduce loops
    A, B, C = matmul()
    D = ir.compute((32, 32), lambda i, j: A[i, j] * 2.0, name="D")
    E = ir.compute((32, 32), lambda i, j: D[i, j] + C[i, j], name="E")
    state = ir.ComputeDAG([A, B, E]).init_state()
    assert SR.compute_location_choices(state, state.stage_index("D")) == ["root", "inline", (4, 0), (4, 1)]


def test_tbs_inlines_transposes_and_combines_matmul_and_softmax_sketches():
    w = ops.suite_workload("TBS-1x16x2x8")
    sketches = SR.generate_sketches(task_of(w.tensors))
    assert len(sketches) == 3 * 9
    for s in sketches:
        assert s["query_T"].compute_at == "inline" and s["key_T"].compute_at == "inline"


def test_gpu_sketch_of_matmul_uses_sssrrsrs_shared_memory_and_register_cache():
    sketches = SR.generate_sketches(task_of(matmul()), space="gpu")
    assert len(sketches) == 1
    s = sketches[0]
    assert [st.name for st in s.stages] == ["A", "A.shared", "B", "B.shared", "C.local", "C"]
    assert len(names(s, "C.local")) == 5 * 2 + 3 * 1  # SSSRRSRS: 5 space levels, 3 reduce levels
    c_local = s.stage_index("C.local")
    assert s["A.shared"].attach[0] == c_local and s["B.shared"].attach[0] == c_local
    assert s["C.local"].attach == (s.stage_index("C"), 5)  # fused at level 3


def test_gpu_cross_thread_reduction_binds_threadidx():
    w = ops.suite_workload("NRM-1x64x64")
    sketches = SR.generate_sketches(task_of(w.tensors), space="gpu")
    # partial sums by rfactor then cross-thread; cross-thread alone; neither
    assert len(sketches) == 3
    assert sum(any(st.origin == "rfactor" for st in s.stages) for s in sketches) == 1
    bound = [s["norm_square_sum"].iters[-1] for s in sketches if s["norm_square_sum"].transforms]
    assert len(bound) == 2 and all(it.annotation == "threadIdx.x" for it in bound)


class OwnTiles(SR.SketchRule):
    """A user rule: tile C as "SRS" (two levels) and stop the other rules for it."""
    name = "own_tiles"

    def condition(self, ctx, state, stage_id):
        st = state.stages[stage_id]
        return SR.Condition.APPLY_AND_SKIP_REST if st.name == "C" and not st.transforms else SR.Condition.PASS

    def apply(self, ctx, state, stage_id):
        return [(SR.multi_level_tiling(state, stage_id, "SRS")[0], stage_id - 1)]


def test_user_registered_rule_changes_the_sketches():
    task = task_of(matmul())
    rule = SR.register_sketch_rule(OwnTiles(), before="add_cache_write")
    try:
        with_pack, sketches = packed(SR.generate_sketches(task))
    finally:
        SR.unregister_sketch_rule(rule)
    assert len(sketches) == 1 and len(with_pack) == 1
    assert names(sketches[0], "C") == ["i.0", "j.0", "k", "i.1", "j.1"]
    assert len(SR.generate_sketches(task)) == 6  # unregistered: back to the built-in rules


def test_per_task_custom_rules_come_first():
    with_pack, sketches = packed(SR.generate_sketches(task_of(matmul()), custom_rules=[OwnTiles()]))
    assert len(sketches) == 1 and names(sketches[0], "C") == ["i.0", "j.0", "k", "i.1", "j.1"]


def test_register_rejects_unknown_anchor():
    with pytest.raises(ValueError, match="no built-in cpu rule named 'tiling'"):
        SR.register_sketch_rule(OwnTiles(), before="tiling")


def test_factorizations_are_exact_and_bound_the_innermost():
    schemes = SR.factorizations(24, 2, 4)
    assert all(24 % (a * b) == 0 and b <= 4 for a, b in schemes)
    assert len(schemes) == len(set(schemes)) == sum(1 for a in range(1, 25) for b in range(1, 5)
                                                    if 24 % (a * b) == 0)


def test_a_broadcast_operand_alone_is_not_data_reuse():
    """conv + bias as one subgraph (ResNet's downsample convs): the bias_add output reads a
    per-channel bias that misses n, h, w, but only that one tensor misses axes, so it is not
    tiled itself; the conv is tiled and fused into it (TVM's rule)."""
    w = ops.workload("conv2d", 1, 8, 8, 4, 8, 1, stride=1, padding=0, layout="NHWC")
    data, weight, conv = w.tensors
    bias = ir.placeholder((8,), name="bias", constant=True)
    out = ir.compute(conv.shape, lambda n, h, x, c: conv[n, h, x, c] + bias[c], name="bias_add")
    task = task_of([data, weight, bias, out])
    init = task.dag.init_state()
    assert not analysis.needs_multi_level_tiling(init, init.stage_index(out.op))
    assert analysis.needs_multi_level_tiling(init, init.stage_index(conv.op))
    sketches = SR.generate_sketches(task)
    assert len(sketches) == 3
    assert all(not s["bias_add"].transforms or s["conv2d_nhwc"].compute_at == "iter" for s in sketches)


def _vectorised_inside_reduction(state, stage):
    """Whether ``stage``'s last loop is vectorised with its reduce loops around it."""
    iters = state[stage].iters
    return iters[-1].annotation == "vectorize" and iters[-1].kind == "space" and \
        any(it.kind == "reduce" for it in iters[:-1])


def test_nhwc_global_pooling_vectorises_the_channels_inside_the_reduction():
    """The channels are NHWC's contiguous axis: the sketch moves a part of them inside
    the H and W loops, and its sampled programs read contiguous vectors (as the default
    schedule does, 10x faster than the rfactored programs in EfficientNet-B0), right.
    96 channels span vector registers: that sketch is the only one; 4 channels do not: it
    comes beside the two rfactor sketches and the plain one."""
    narrow = ir.placeholder((1, 14, 14, 4), name="x")
    narrow_sketches = SR.generate_sketches(task_of([narrow, ops.global_pool(narrow, "avg", "NHWC")]))
    assert sorted(names(s, "global_pool_avg_sum")[-1] for s in narrow_sketches) == \
        ["ax3.1", "rh@rw@_0_v", "rh@rw@_1_v", "rw"]
    x = ir.placeholder((1, 14, 14, 96), name="x")
    y = ops.global_pool(x, "avg", "NHWC")
    task = task_of([x, y])
    sketches = SR.generate_sketches(task)
    assert len(sketches) == 1
    assert names(sketches[0], "global_pool_avg_sum") == ["ax0", "ax1", "ax2", "ax3.0", "rh", "rw", "ax3.1"]
    assert not any(st.origin == "cache_read" for s in sketches for st in s.stages)  # no packed copy of x
    programs = [p for p in SR.sample_programs(task, sketches, 48, np.random.default_rng(0))
                if _vectorised_inside_reduction(p, "global_pool_avg_sum") and p["global_pool_avg_sum"].iters[-1].extent > 1]
    assert programs
    data = np.random.default_rng(1).standard_normal((1, 14, 14, 96)).astype("float32")
    for p in programs[:3]:
        out = np.zeros((1, 1, 1, 96), "float32")
        ir.build(task.dag, p)(data, out)
        np.testing.assert_allclose(out, data.mean(axis=(1, 2), keepdims=True), rtol=1e-5, atol=1e-6)


def test_no_vector_inside_the_reduction_where_the_reduce_axis_is_contiguous_or_reused():
    nchw = ir.placeholder((1, 96, 14, 14), name="x")
    nhwc = ir.placeholder((1, 14, 14, 96), name="x")
    # layer norm over NHWC's channels: its variance reads the mean at [n, h, w], whose last
    # index is the last space axis, but what moves with the sum is the input along c
    cases = {"NCHW pooling": [nchw, ops.global_pool(nchw, "avg", "NCHW")], "softmax": ops.workload("softmax", (4, 64)).tensors,
             "matmul": matmul(), "NHWC pooling": [nhwc, ops.global_pool(nhwc, "avg", "NHWC")],
             "layer norm": ops.workload("layer_norm", (1, 8, 8, 32)).tensors}
    applies = {}
    for what, tensors in cases.items():
        state = ir.State.initial(ir.ComputeDAG(tensors))
        applies[what] = [sid for sid in range(len(state.stages))
                         if analysis.contiguous_along_last_space_axis(state, sid)]
    assert applies == {"NCHW pooling": [], "softmax": [], "matmul": [], "NHWC pooling": [1], "layer norm": []}
