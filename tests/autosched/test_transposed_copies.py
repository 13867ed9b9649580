"""Attention's Q·Kᵀ with the keys as a model stores them (``graph.passes.copy_transposed_operands``):
the product reads a transposed copy, a kernel of its own, padded with zeros where the token
count has no whole vector tile; the network computes what numpy computes on the graph as
given, with the product's padded vector tiles too."""
import numpy as np
import pytest

import sketch_rules as SR
from autosched import graph as G
from autosched.graph.executor import run_reference
from autosched.graph.passes import STARTS_KERNEL, copy_transposed_operands
from sketch_rules.annotation import padded_extent

HEADS, FEATURES = 2, 16


def attention_scores(tokens: int):
    """softmax(Q·Kᵀ) of projections of one input, the keys multiplied as stored (tokens by features)."""
    b = G.GraphBuilder("scores", seed=0)
    x = b.input((HEADS, tokens, FEATURES))
    q = b.relu(x)
    k = b.scale(x, 0.5)
    return b.graph([b.softmax(b.batch_matmul(q, k, transpose_b=True))])


@pytest.mark.parametrize("tokens, copy", [(61, ["transpose", "pad"]), (64, ["transpose"])])
def test_the_product_reads_a_transposed_copy_made_by_a_kernel_of_its_own(tokens, copy):
    g = attention_scores(tokens)
    rewritten = copy_transposed_operands(g)
    product = next(n for n in rewritten.nodes if n.kind == "batch_matmul")
    assert product.attrs["transpose_b"] is False and product.attrs["columns"] == tokens
    assert product.inputs[1].shape == (HEADS, FEATURES, padded_extent(tokens))
    assert copy_transposed_operands(rewritten) is rewritten              # once is enough
    groups = [[n.kind for n in sg.nodes] for sg in G.partition(g).subgraphs]
    assert copy in groups                                                # not joined to the scale before it
    assert ["scale"] in groups


def test_a_constant_operand_is_left_to_layout_rewrite():
    b = G.GraphBuilder("constant_keys", seed=0)
    x = b.input((HEADS, 61, FEATURES))
    keys = b.const((HEADS, 61, FEATURES), G.normal(1.0), "keys")
    g = b.graph([b.batch_matmul(x, keys, transpose_b=True)])
    assert copy_transposed_operands(g) is g


def test_scores_over_prime_tokens_match_numpy_with_padded_vector_tiles():
    g = attention_scores(61)
    p = G.partition(g)
    copy = next(sg for sg in p.subgraphs if sg.nodes[0].attrs.get(STARTS_KERNEL))
    assert [n.kind for n in copy.nodes] == ["transpose", "pad"]
    task = next(w for w in p.tasks if "batch_matmul" in w.name)
    search = task.search_task()
    programs = SR.sample_programs(search, SR.generate_sketches(search), 30, np.random.default_rng(0))
    padded = next(s for s in programs if any(st.iters and st.iters[-1].annotation == "vectorize"
                                             and st.iters[-1].extent in (8, 16, 24) for st in s.stages))
    ex = G.GraphExecutor(p, states={task.workload_key: padded}, base_model=None, warn_untuned=False)
    x = g.random_inputs(1)
    np.testing.assert_allclose(ex.run(*x)[0], run_reference(g, x)[0], rtol=1e-4, atol=1e-5)


def test_a_two_dimensional_product_reads_its_copy_too():
    """ONNX MatMul of two run-time matrices, the second stored transposed (61 rows, a prime:
    its copy 64 columns wide)."""
    b = G.GraphBuilder("matmul_nt", seed=0)
    x = b.input((5, FEATURES))
    y = b.input((61, FEATURES), "y")
    g = b.graph([b.matmul(b.relu(x), b.scale(y, 2.0), transpose_b=True)])
    product = next(n for n in copy_transposed_operands(g).nodes if n.kind == "matmul")
    assert product.inputs[1].shape == (FEATURES, 64) and product.attrs["columns"] == 61
    ex = G.GraphExecutor(G.partition(g), base_model=None, warn_untuned=False)
    inputs = g.random_inputs(3)
    np.testing.assert_allclose(ex.run(*inputs)[0], run_reference(g, inputs)[0], rtol=1e-4, atol=1e-5)
