"""The one operator registry: an elementwise declaration makes a workload and a graph node
kind that both compute what its numpy reference does; bad declarations, attributes and
names are refused clearly."""
import numpy as np
import pytest

import ir
from autosched import graph as G
from autosched import ops


def _cube_reference(x, scale):
    return scale * np.asarray(x, np.float64) ** 3


@pytest.fixture
def cube():
    """An elementwise operator with one attribute, registered for one test."""
    @ops.elementwise_operator("test_cube", reference=_cube_reference, flops=3)
    def test_cube(x, scale=1.0, name="test_cube"):
        return ops.unary(x, lambda v: v * v * v * float(scale), name)
    yield test_cube
    ops.unregister_operator("test_cube")


def test_an_elementwise_declaration_is_a_workload_and_a_node_kind(cube):
    w = ops.workload("test_cube", (3, 5), scale=0.5)
    assert w.flops == 3 * 15 and [t.name for t in w.inputs] == ["x"]
    assert w == ops.workload("test_cube", (3, 5), "float32", scale=0.5)       # defaults bound as given
    inputs, outputs = w.random_inputs(np.random.default_rng(0)), w.output_buffers()
    ir.build(ir.ComputeDAG(w.tensors))(*inputs, *outputs)
    np.testing.assert_allclose(outputs[0], 0.5 * inputs[0].astype(np.float64) ** 3, rtol=1e-5)

    assert ops.opdef("test_cube").pattern == ops.registry.ELEMWISE and G.OPDEFS["test_cube"].arity == 1
    b = G.GraphBuilder("cube", seed=0)
    x = b.input((2, 7), "x")
    graph = b.graph([b.op("relu", [b.op("test_cube", [x], scale=2.0)])])
    (group,) = G.partition(graph).subgraphs                                    # fused into one task
    assert [n.kind for n in group.nodes] == ["test_cube", "relu"]
    data = graph.random_inputs(0)
    got = G.GraphExecutor(G.partition(graph), base_model=None, warn_untuned=False).run(*data)[0]
    np.testing.assert_allclose(got, np.maximum(2.0 * data[0].astype(np.float64) ** 3, 0), rtol=1e-5, atol=1e-6)


def test_unregistering_frees_the_name(cube):
    ops.unregister_operator("test_cube")
    assert "test_cube" not in ops.OPERATORS and "test_cube" not in G.OPDEFS
    with pytest.raises(ValueError, match="unknown operator kind 'test_cube'"):
        G.opdef("test_cube")
    ops.elementwise_operator("test_cube", reference=_cube_reference)(cube)   # (the fixture removes it again)
    with pytest.raises(ValueError, match="no operator or node kind 'never_registered'"):
        ops.unregister_operator("never_registered")


def test_two_tensors_broadcast_and_default_to_one_shape():
    w = ops.workload("prelu", (2, 3, 4), (4,))
    assert [t.shape for t in w.inputs] == [(2, 3, 4), (4,)] and w.outputs[0].shape == (2, 3, 4)
    assert [t.shape for t in ops.workload("logical_and", (3, 2)).inputs] == [(3, 2), (3, 2)]
    assert ops.workload("logical_and", (3, 2)).inputs[0].dtype == "bool"
    assert ops.opdef("prelu").pattern == ops.registry.BROADCAST


def test_bool_inputs_are_drawn_both_ways():
    (a, b) = ops.workload("logical_xor", (64,)).random_inputs(np.random.default_rng(0))
    assert a.dtype == np.bool_ and 0 < a.sum() < 64 and 0 < b.sum() < 64


def _declare(arity=1, **kwargs):
    def fn(x, y=None, dtype="float32", name="bad"):
        return ops.unary(x, lambda v: v, name)
    return ops.elementwise_operator("bad_declaration", reference=np.asarray, arity=arity, **kwargs)(fn)


@pytest.mark.parametrize("declare, message", [
    (lambda: _declare(arity=3), r"'bad_declaration': arity 3; expected 1 or 2"),
    (lambda: _declare(), r"none named dtype, shape\), then name; got fn\(x, y=None, dtype='float32'"),
    (lambda: ops.elementwise_operator("nameless", reference=np.abs)(lambda x: x),
     r"'nameless': its tensor function must take 1 tensor\(s\)"),
    (lambda: ops.elementwise_operator("relu", reference=np.abs)(ops.relu), r"operator 'relu' is registered twice"),
    (lambda: ops.node_kind("softmax", 3, None, None), r"node kind 'softmax' is registered twice"),
    (lambda: ops.node_kind("fresh_kind", 9, None, None), r"pattern 9 is not one of \[0, 1, 2, 3, 4\]"),
    (lambda: ops.workload("concat", (2, 3)), r"unknown operator 'concat' \(a node kind of the network graph only\)"),
])
def test_bad_declarations_and_names_are_refused(declare, message):
    with pytest.raises(ValueError, match=message):
        declare()
    assert "bad_declaration" not in ops.OPERATORS and "fresh_kind" not in G.OPDEFS


def test_node_attributes_are_checked_against_the_tensor_function():
    b = G.GraphBuilder("attrs", seed=0)
    x = b.input((2, 3), "x")
    with pytest.raises(ValueError, match=r"leaky_relu: attributes \['slope'\] do not fit"):
        b.op("leaky_relu", [x], slope=0.1)
    with pytest.raises(ValueError, match=r"scalar: attributes \['op'\] do not fit .*missing a required argument"):
        b.op("scalar", [x], op="+")
    node = b.op("leaky_relu", [x])                                              # the default alpha
    assert node.shape == (2, 3)
