"""Networks: the graph IR, partitioning into tasks with weights, batch-norm folding, the
model zoo, and the executor against the numpy reference of the whole network."""
import warnings

import numpy as np
import pytest

import ir
from autosched import UntunedWorkloadWarning
from autosched import graph as G


def small_resnet():
    """x -> [conv-bn-relu] -> a; two residual blocks of the same shape; pool; head."""
    b = G.GraphBuilder("small", seed=0)
    x = b.input((1, 8, 8, 4))
    a = b.relu(b.batch_norm(b.conv2d(x, 8, 3, padding=1)))
    for _ in range(2):
        h = b.relu(b.batch_norm(b.conv2d(a, 8, 3, padding=1)))
        a = b.relu(b.add(b.batch_norm(b.conv2d(h, 8, 3, padding=1)), a))
    y = b.max_pool(a, 2, 2)
    y = b.reshape(b.global_avg_pool(y), (1, 8))
    y = b.softmax(b.dense(y, 5))
    return b.graph([y])


def test_partition_into_expected_tasks_and_weights():
    p = G.partition(small_resnet())
    assert [sg.name for sg in p.subgraphs] == [
        "fused_conv_bias_add_relu",                     # stem (batch norm folded into the conv)
        "fused_conv_bias_add_relu", "fused_conv_bias_add_add_relu",
        "fused_conv_bias_add_relu", "fused_conv_bias_add_add_relu",
        "fused_pool", "fused_global_pool", "fused_reshape", "fused_dense_bias_add", "fused_softmax"]
    # the stem conv (4 -> 8 channels) differs from the blocks' (8 -> 8); the blocks repeat
    assert [(t.name, t.weight) for t in p.tasks] == [
        ("fused_conv_bias_add_relu", 1), ("fused_conv_bias_add_relu", 2), ("fused_conv_bias_add_add_relu", 2),
        ("fused_pool", 1), ("fused_global_pool", 1), ("fused_dense_bias_add", 1), ("fused_softmax", 1)]
    # the reshape alone is a simple workload: it runs, but is not tuned
    assert len(p.workloads) == 8 and not p.workloads[5].tunable and p.workloads[5].name == "fused_reshape"
    assert G.partition(small_resnet(), include_simple_tasks=True).tasks[5].name == "fused_reshape"
    # the residual add's second operand is an input of the fused subgraph, weights are constants
    block = p.tasks[2].subgraphs[0]
    kinds = [("const" if n.is_const else "data") for n in block.inputs]
    assert kinds == ["data", "const", "const", "data"]
    assert [t.op.constant for t in block.dag.inputs] == [False, True, True, False]
    # deduplicated by workload key: identical subgraphs share their key
    keys = [sg.dag.workload_key() for sg in p.tasks[1].subgraphs]
    assert keys[0] == keys[1] == p.tasks[1].workload_key


def test_partition_without_folding_keeps_batch_norm_in_the_conv_task():
    p = G.partition(small_resnet(), fold_batch_norm=False)
    assert p.tasks[0].name == "fused_conv_batch_norm_relu"
    assert p.tasks[2].name == "fused_conv_batch_norm_add_relu"
    assert [t.weight for t in p.tasks] == [1, 2, 2, 1, 1, 1, 1]


def test_fusion_rules_elementwise_into_reductions_and_multi_consumer_boundaries():
    b = G.GraphBuilder("rules", seed=1)
    x = b.input((2, 6, 16))
    pos = b.const((6, 16), G.normal(0.1), "pos")
    h = b.layer_norm(b.reshape(b.add(x, pos), (12, 16)))          # add+reshape fuse into the layer norm
    d = b.dense(h, 16)                                             # h has two consumers: a boundary
    y = b.layer_norm(b.add(b.gelu(d), h))                          # gelu, add join the dense; not the norm
    t = b.transpose(b.reshape(y, (2, 6, 4, 4)), (0, 2, 1, 3))      # injective chain: one simple subgraph
    s = b.softmax(b.scale(b.batch_matmul(t, t, transpose_b=True), 0.5))
    g = b.graph([s])
    p = G.partition(g)
    assert [sg.name for sg in p.subgraphs] == [
        "fused_add_reshape_layer_norm", "fused_dense_bias_add_gelu_add", "fused_layer_norm",
        "fused_reshape_transpose",
        "fused_transpose",              # the keys' transposed copy (passes.copy_transposed_operands)
        "fused_batch_matmul_scale", "fused_softmax"]
    assert [w.tunable for w in p.workloads] == [True, True, True, False, False, True, True]


def test_fold_batch_norm_is_exact():
    b = G.GraphBuilder("fold", seed=2)
    x = b.input((1, 6, 6, 4))
    y = b.relu(b.batch_norm(b.depthwise_conv2d(x, 3, padding=1, multiplier=2)))
    y = b.batch_norm(b.conv2d(y, 6, 1))
    y = b.batch_norm(b.conv2d_transpose(y, 3, 4, 2, 1))
    z = b.batch_norm(b.dense(b.reshape(y, (1, 12 * 12 * 3)), 7, bias=False))
    g = b.graph([z])
    folded = G.fold_batch_norm(g)
    assert not any(n.kind == "batch_norm" for n in folded.nodes)
    inputs = g.random_inputs(0)
    np.testing.assert_allclose(G.run_reference(folded, inputs)[0], G.run_reference(g, inputs)[0], rtol=1e-5,
                               atol=1e-6)


def test_constants_depend_only_on_the_seed():
    a, b = G.resnet50(image_size=32, blocks=(1, 1, 1, 1)), G.resnet50(image_size=32, blocks=(1, 1, 1, 1))
    ca, cb = a.constants, b.constants
    np.testing.assert_array_equal(ca[5].value, cb[5].value)     # made lazily, in any order
    np.testing.assert_array_equal(ca[0].value, cb[0].value)
    c = G.resnet50(image_size=32, blocks=(1, 1, 1, 1), seed=1)
    assert not np.array_equal(c.constants[0].value, ca[0].value)


@pytest.mark.parametrize("name, tasks, params_m", [("resnet50", 27, 25.6), ("mobilenet_v2", 32, 3.5),
                                                   ("resnet3d_18", 18, 33.4), ("dcgan", 5, 3.6),
                                                   ("bert", 9, 85.2)])
def test_zoo_networks_build_and_partition(name, tasks, params_m):
    g = G.get_network(name)
    p = G.partition(g)
    assert len(p.tasks) == tasks
    assert g.n_params() / 1e6 == pytest.approx(params_m, abs=0.1)
    assert sum(len(sg.nodes) for sg in p.subgraphs) == len(p.graph.op_nodes)
    anchors = sum(1 for n in g.op_nodes if G.opdef(n.kind).pattern == G.ANCHOR)
    assert sum(t.weight for t in p.tasks if any(G.opdef(n.kind).pattern == G.ANCHOR
                                                for n in t.subgraphs[0].nodes)) == anchors


def test_zoo_batch_size_is_a_parameter():
    g = G.get_network("bert", batch=2, layers=1)
    assert g.inputs[0].shape == (2, 128, 768) and g.outputs[0].shape == (2, 128, 768)
    assert G.get_network("resnet-50", batch=16).inputs[0].shape == (16, 224, 224, 3)
    with pytest.raises(ValueError, match="unknown network"):
        G.get_network("alexnet")


SMALL = {
    "resnet50": lambda: G.resnet50(image_size=32, blocks=(1, 1, 1, 1), num_classes=10),
    "mobilenet_v2": lambda: G.mobilenet_v2(image_size=32, num_classes=10,
                                           config=((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 1, 2)), last_channels=64),
    "resnet3d_18": lambda: G.resnet3d_18(frames=4, image_size=16, blocks=(1, 1, 1, 1), num_classes=10),
    "dcgan": lambda: G.dcgan(batch=2, z_dim=16, base_channels=32, layers=3),
    "bert": lambda: G.bert(seq_len=16, hidden=64, layers=1, heads=4, ffn=128),
}


@pytest.mark.parametrize("name", sorted(SMALL))
def test_executor_matches_numpy_with_default_schedules(name):
    g = SMALL[name]()
    p = G.partition(g)
    with pytest.warns(UntunedWorkloadWarning, match="default schedule"):
        ex = G.GraphExecutor(p)
    assert len(ex.untuned) == len(p.tasks)
    ok, err = ex.verify(rtol=1e-4)
    assert ok, f"{name}: max relative error {err}"
    inputs = g.random_inputs(1)
    got = ex.run(*inputs)
    want = G.run_reference(g, inputs)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-4 * np.abs(want[0]).max())
    assert ex.benchmark(*inputs, repeat=2)["median"] > 0


def test_executor_uses_tuned_programs_and_packs_weights_once():
    import sketch_rules
    g = small_resnet()
    p = G.partition(g)
    states = {}
    rng = np.random.default_rng(0)
    for t in p.tasks:       # a random valid program of each task stands in for a tuned one
        task = t.search_task()
        states[t.workload_key] = sketch_rules.sample_programs(task, sketch_rules.generate_sketches(task), 1, rng)[0]
    with warnings.catch_warnings():
        warnings.simplefilter("error", UntunedWorkloadWarning)
        ex = G.GraphExecutor(p, states=states)
    assert not ex.untuned
    assert all(ex.programs[t.workload_key].tuned for t in p.tasks)
    packed = [a for _, kernel, args in ex.calls for a in args if kernel.layouts]
    assert packed, "some conv weights are layout-rewritten"
    ok, err = ex.verify(rtol=1e-4)
    assert ok, err
    rows = ex.profile(repeat=1)
    with_kernels = {sg.workload.workload_key for sg, _, _ in ex.calls}
    assert len(rows) == len(with_kernels) and all(r["seconds"] > 0 for r in rows)


def test_default_schedule_parallelises_and_vectorises():
    p = G.partition(G.resnet50(image_size=56, blocks=(1, 1, 1, 1)))
    state = G.default_schedule(p.tasks[2].dag)
    text = str(state)
    assert "parallel" in text and "vectorize" in text
    assert isinstance(state, ir.State)


def test_default_schedule_of_a_channel_last_transpose_fuses_only_enough_loops():
    """The input layout transpose (NCHW -> NHWC, 3 channels) cannot vectorise: its default
    schedule fuses the outer loops up to enough parallel work and keeps the others serial
    (one fused loop over every element paid a division per element), and stays correct."""
    from autosched import ops
    w = ops.workload("transpose", (1, 3, 256, 96), (0, 2, 3, 1))
    dag = ir.ComputeDAG(w.tensors)
    state = G.default_schedule(dag)
    text = str(state)
    assert "parallel ax0@ax1@ (0,256)" in text, text
    assert "for ax2 (0,96)" in text and "for ax3 (0,3)" in text, text
    x = np.random.default_rng(0).standard_normal((1, 3, 256, 96)).astype(np.float32)
    out = np.empty((1, 256, 96, 3), np.float32)
    ir.build(dag, state)(x, out)
    np.testing.assert_array_equal(out, np.transpose(x, (0, 2, 3, 1)))


def test_memory_plan_reuses_memory_without_overlapping_live_tensors():
    """Liveness-based planning: tensors alive at the same kernel never share bytes, the arena
    is smaller than one buffer per tensor, and reshape-only subgraphs are views (no kernel)."""
    from autosched.graph.memory import nbytes
    g = small_resnet()
    p = G.partition(g)
    ex = G.GraphExecutor(p, warn_untuned=False)
    plan = ex.memory
    assert plan.arena_bytes < plan.naive_bytes
    order = {id(sg.output): k for k, sg in enumerate(p.subgraphs)}
    span = {}
    for k, sg in enumerate(p.subgraphs):
        for n in [sg.output] + [i for i in sg.inputs if not i.is_const]:
            s = plan.storage(n)
            if id(s) in plan.offsets:
                first, last = span.get(id(s), (order[id(s)], k))
                span[id(s)] = (first, max(last, k))
    nodes = {id(n): n for n in p.graph.nodes}
    items = [(plan.offsets[i], plan.offsets[i] + nbytes(nodes[i]), *span[i]) for i in span]
    for a in items:
        for b in items:
            if a is not b and a[2] <= b[3] and b[2] <= a[3]:       # alive together
                assert a[1] <= b[0] or b[1] <= a[0], (a, b)
    reshapes = [sg for sg in p.subgraphs if all(n.kind == "reshape" for n in sg.nodes)]
    assert reshapes and ex.n_kernels == len(p.subgraphs) - len(reshapes)
    ok, err = ex.verify()
    assert ok, err
    x = g.random_inputs(3)
    first = ex.run(*x)[0]
    np.testing.assert_array_equal(ex.run(*x)[0], first)        # runs are repeatable on reused memory


def test_openmp_threads_spin_briefly_unless_the_user_chose():
    """libgomp's default spin (milliseconds) makes every parallel region on a machine with
    another busy process cost a whole spin; ``ir`` asks for a short one before libgomp loads,
    and leaves a wait policy or spin count the user set alone."""
    import os
    import subprocess
    import sys
    code = "import ir, os; print(os.environ.get('GOMP_SPINCOUNT'))"
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    run = lambda extra: subprocess.run([sys.executable, "-c", code], env={**env, **extra}, capture_output=True,  # noqa: E731
                                       text=True, check=True).stdout.strip()
    from ir.cpu import spin
    count = int(run({}))                              # about SPIN_SECONDS of PAUSE on this CPU
    assert spin.MIN_SPIN_COUNT <= count <= spin.MAX_SPIN_COUNT
    pause = spin.pause_seconds()
    if pause is not None and spin.MIN_SPIN_COUNT < count < spin.MAX_SPIN_COUNT:
        assert spin.SPIN_SECONDS / 4 < count * pause < 4 * spin.SPIN_SECONDS
    assert run({"GOMP_SPINCOUNT": "5"}) == "5"
    assert run({"OMP_WAIT_POLICY": "active"}) == "None"
