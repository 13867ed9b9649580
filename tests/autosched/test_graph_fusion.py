"""Fusion across reshapes (``graph.passes.sink_reshapes``): a dense layer exported as Gemm
between reshapes (GPT-2's Conv1D) keeps its tanh GELU in its task;
GELU written as a chain of operators becomes one (``graph.passes.recognise_activations``);
the network still computes what numpy computes node by node on the graph as given; and the
arrays a run hands back stay the caller's."""
import numpy as np

from autosched import graph as G
from autosched.graph.executor import run_reference
from autosched.graph.passes import recognise_activations, sink_reshapes


def gelu_tanh_by_operators(b: G.GraphBuilder, x):
    """GELU as GPT-2's export writes it, 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))): x is
    read by three operators whose paths meet again."""
    cube = b.op("power_scalar", [x], exponent=3.0)
    inner = b.add(x, b.op("scalar", [cube], op="*", value=0.044715))
    t = b.tanh(b.op("scalar", [inner], op="*", value=float(np.sqrt(2.0 / np.pi))))
    return b.multiply(b.op("scalar", [x], op="*", value=0.5), b.op("scalar", [t], op="+", value=1.0))


def conv1d_block():
    """A GPT-2 MLP block at batch 1: every dense layer a Gemm on the flattened tokens between
    reshapes, the tanh GELU and the residual add on the (1, tokens, width) tensors."""
    b = G.GraphBuilder("conv1d_block", seed=0)
    x = b.input((1, 6, 16))
    h = b.reshape(b.dense(b.reshape(x, (6, 16)), 32), (1, 6, 32))
    y = b.reshape(b.dense(b.reshape(gelu_tanh_by_operators(b, h), (6, 32)), 16), (1, 6, 16))
    return b.graph([b.layer_norm(b.add(y, x))])


def test_gelu_joins_its_dense_task_across_reshapes():
    g = conv1d_block()
    p = G.partition(g)
    assert [sg.name for sg in p.subgraphs] == [
        "fused_reshape",                   # the input seen as (6, 16): a view
        "fused_dense_bias_add_gelu_tanh",  # the chain of seven operators, one operator, the epilogue
        "fused_dense_bias_add",
        "fused_reshape_add_layer_norm"]    # the residual add of a run-time tensor stays after the reshape
    assert [t.name.split("_")[1] for t in p.tasks] == ["dense", "dense", "reshape"]
    ex = G.GraphExecutor(p, base_model=None, warn_untuned=False)
    assert ex.n_kernels == 3                # the reshapes between dense layers are views, no kernel
    ok, err = ex.verify()                   # against numpy on the graph as given (reshapes first)
    assert ok, err
    x = g.random_inputs(1)
    np.testing.assert_allclose(ex.run(*x)[0], run_reference(g, x)[0], rtol=1e-4, atol=1e-5)


def test_sink_reshapes_moves_a_reshape_only_where_broadcasting_carries_over():
    b = G.GraphBuilder("broadcasts", seed=0)
    x = b.input((6, 8))
    z = b.input((2, 3, 8), "z")
    r = b.reshape(b.dense(x, 8), (2, 3, 8))
    per_width = b.const((8,), G.normal(1.0), "per_width")     # along the last axis: the same before the reshape
    same_source = b.reshape(b.relu(x), (2, 3, 8))             # a reshape of a tensor of r's source shape
    per_row = b.const((3, 1), G.normal(1.0), "per_row")       # along an axis the reshape made: stays
    g = b.graph([b.add(b.multiply(b.add(b.add(r, per_width), same_source), per_row), z)])
    sunk = sink_reshapes(g)
    kinds = [(n.kind, n.shape) for n in sunk.nodes if n.is_op and n.kind in ("add", "multiply", "reshape")]
    assert kinds == [("add", (6, 8)), ("add", (6, 8)), ("reshape", (2, 3, 8)), ("multiply", (2, 3, 8)),
                     ("add", (2, 3, 8))]           # z, a run-time tensor of the whole shape, is not reshaped
    inputs = g.random_inputs(0)
    np.testing.assert_allclose(run_reference(sunk, inputs)[0], run_reference(g, inputs)[0], rtol=1e-12)
    assert G.GraphExecutor(G.partition(g), base_model=None, warn_untuned=False).verify()[0]


def test_reshapes_of_reshapes_collapse_and_graph_outputs_keep_their_shape():
    b = G.GraphBuilder("chain", seed=0)
    x = b.input((4, 6))
    y = b.tanh(b.reshape(b.reshape(b.relu(x), (2, 12)), (24,)))
    g = b.graph([y])
    sunk = sink_reshapes(g)
    assert [(n.kind, n.shape) for n in sunk.nodes if n.is_op] == [("relu", (4, 6)), ("tanh", (4, 6)),
                                                                   ("reshape", (24,))]
    assert sunk.outputs[0].shape == (24,)
    inputs = g.random_inputs(0)
    np.testing.assert_allclose(run_reference(sunk, inputs)[0], run_reference(g, inputs)[0])


def test_a_later_run_leaves_the_arrays_of_an_earlier_one_alone():
    """The executor reuses its planned memory run after run; what ``run`` returns is the
    caller's: a second run on other inputs neither changes it nor depends on it."""
    g = conv1d_block()
    ex = G.GraphExecutor(G.partition(g), base_model=None, warn_untuned=False)
    x1, x2 = g.random_inputs(1), g.random_inputs(2)
    y1 = ex.run(*x1)[0]
    kept = y1.copy()
    y2 = ex.run(*x2)[0]
    np.testing.assert_array_equal(y1, kept)
    assert not np.allclose(y1, y2)
    np.testing.assert_allclose(y2, run_reference(g, x2)[0], rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(ex.run(*x1)[0], kept)


def gelu_erf_by_operators(b: G.GraphBuilder, x, half):
    """GELU as BERT's exporter writes it, (x · (1 + erf(x / √2))) · 0.5, the 0.5 a constant
    tensor of one element (``half``) after the paths of x met."""
    t = b.op("scalar", [b.op("erf", [b.op("scalar", [x], op="/", value=1.4142135381698608)])], op="+", value=1.0)
    return b.multiply(b.multiply(x, t), half)


def test_gelu_chains_become_one_operator_only_where_they_compute_gelu():
    b = G.GraphBuilder("chains", seed=0)
    x = b.input((4, 16))
    half = b.const((1,), G.constant(0.5), "half")
    gelu = gelu_erf_by_operators(b, b.dense(x, 16), half)
    # not GELU: y · (1 + erf(y)) · 0.5, without the 1/√2 (the same diamond otherwise)
    y = b.dense(x, 16, name="other")
    t = b.op("scalar", [b.op("erf", [y])], op="+", value=1.0)
    not_gelu = b.multiply(b.multiply(y, t), half)
    g = b.graph([gelu, not_gelu])
    kinds = [n.kind for n in recognise_activations(g).nodes if n.is_op]
    assert kinds.count("gelu") == 1 and kinds.count("erf") == 1
    p = G.partition(g)
    assert "fused_dense_bias_add_gelu" in [t.name for t in p.tasks]
    ex = G.GraphExecutor(p, base_model=None, warn_untuned=False)
    ok, err = ex.verify()
    assert ok, err
