"""Open axes: a model whose batch (or sequence) axis is open is imported once and run at
several shapes, each with its own programs, cached by shape in a bounded cache; tuning names
the shapes it tunes, and a record of one shape serves that shape. Outputs against
onnxruntime. Skipped without onnx and onnxruntime."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="ONNX import needs the onnx package (pip install 'autosched[onnx]')")
ort = pytest.importorskip("onnxruntime", reason="checking imported models needs onnxruntime")
from onnx import helper  # noqa: E402

import autosched  # noqa: E402
from autosched import graph as G  # noqa: E402

from .test_networks import HW, SMALL_SEARCH, measuring, pools  # noqa: E402,F401 - pools is a fixture
from .test_onnx import make_model, w  # noqa: E402


def batch_open_cnn():
    """Conv -> Relu -> GlobalAveragePool -> Flatten -> Gemm on x ["batch", 3, 6, 6]."""
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("GlobalAveragePool", ["r"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("Gemm", ["f", "wf", "bf"], ["y"], transB=1)]
    return make_model(nodes, {"x": ("batch", 3, 6, 6)}, ["y"],
                      {"w1": w(8, 3, 3, 3), "b1": w(8), "wf": w(5, 8), "bf": w(5)}, 13)


def onnxruntime_run(model, feeds: dict) -> list:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def assert_matches(ours, theirs, rtol=1e-4):
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol * (float(np.max(np.abs(b))) or 1.0))


def test_one_import_runs_batch_1_and_4_each_with_its_programs():
    model = batch_open_cnn()
    dynamic = G.from_onnx(model)
    assert isinstance(dynamic, G.DynamicModel) and dynamic.open_axes == {"x": {0: "batch"}}
    run = dynamic.executor(warn_untuned=False)
    rng = np.random.default_rng(0)
    for batch in (1, 4):
        x = rng.standard_normal((batch, 3, 6, 6)).astype(np.float32)
        assert_matches(run(x), onnxruntime_run(model, {"x": x}))
    assert run.builds == 2 and run.cached_shapes == [{"x": (1, 3, 6, 6)}, {"x": (4, 3, 6, 6)}]
    one, four = run.executor_for({"x": (1, 3, 6, 6)}), run.executor_for({"x": (4, 3, 6, 6)})
    assert one.graph.inputs[0].shape == (1, 3, 6, 6) and four.graph.inputs[0].shape == (4, 3, 6, 6)
    assert {w.workload_key for w in one.partitioned.tasks}.isdisjoint(w.workload_key for w in four.partitioned.tasks)
    with pytest.raises(ValueError, match=r"axis 1 is fixed at 3"):
        run(np.zeros((1, 4, 6, 6), np.float32))


def test_partitioning_a_model_of_open_axes_says_how_to_give_shapes():
    """bench/fuzz_inputs.py found it: partition(DynamicModel) ended in an AttributeError."""
    with pytest.raises(ValueError, match=r"leaves input axes open .*from_onnx\(path, input_shapes="):
        G.partition(G.from_onnx(batch_open_cnn()))


def test_the_cache_keeps_the_most_recently_used_shapes():
    run = G.from_onnx(batch_open_cnn()).executor(cache_size=2, warn_untuned=False)
    for batch in (1, 2, 1, 3):                       # 1 is used again before 3 comes: 2 is dropped
        run(np.ones((batch, 3, 6, 6), np.float32))
    assert run.builds == 3 and [s["x"][0] for s in run.cached_shapes] == [1, 3]
    run(np.ones((2, 3, 6, 6), np.float32))           # built again
    assert run.builds == 4 and [s["x"][0] for s in run.cached_shapes] == [3, 2]
    with pytest.raises(ValueError, match="cache_size must be at least 1"):
        G.DynamicExecutor(run.model, cache_size=0)


def test_axes_of_one_name_share_their_extent():
    nodes = [helper.make_node("Add", ["ids", "mask"], ["y"])]
    model = make_model(nodes, {"ids": ("batch", "seq"), "mask": ("batch", "seq")}, ["y"])
    dynamic = G.from_onnx(model)
    assert dynamic.input_shapes({"ids": (2, 7)}) == {"ids": (2, 7), "mask": (2, 7)}
    graph = G.from_onnx(model, input_shapes={"mask": (3, 4)})           # shapes given: a static graph
    assert [i.shape for i in graph.inputs] == [(3, 4), (3, 4)]
    with pytest.raises(ValueError, match=r"\('seq'\) given 5, another input gave 'seq' = 4"):
        dynamic.input_shapes({"ids": (3, 4), "mask": (3, 5)})
    with pytest.raises(ValueError, match="not inputs of"):
        dynamic.input_shapes({"y": (3, 4)})
    x = np.random.default_rng(0).standard_normal((2, 4, 5)).astype(np.float32)   # a rank the model does not have
    with pytest.raises(ValueError, match=r"declares \['batch', 'seq'\]"):
        dynamic.executor()(x, x)


def test_tune_networks_takes_the_shapes_and_a_record_serves_its_shape(tmp_path, pools):
    model = batch_open_cnn()
    dynamic = G.from_onnx(model)
    with pytest.raises(ValueError, match="give the shapes to tune for"):
        autosched.tune_networks(dynamic, trials=1)
    log = str(tmp_path / "open.jsonl")
    res = autosched.tune_networks(dynamic, trials=6, measure_batch=2, log_file=log, cost_model="random",
                                  search_params=SMALL_SEARCH, hardware=HW, verbose=0, retime_best=0,
                                  input_shapes=[{"x": (1, 3, 6, 6)}], **measuring(pools))
    assert [p.name for p in res.networks] == ["test[x=1x3x6x6]"]
    assert all(c < 1 for c in res.best_costs)                       # every task has a measured program
    run = G.DynamicExecutor(dynamic, log_file=log, warn_untuned=False)
    x1 = np.ones((1, 3, 6, 6), np.float32)
    x4 = np.random.default_rng(1).standard_normal((4, 3, 6, 6)).astype(np.float32)
    tuned, untuned = run.executor_for({"x": x1.shape}), run.executor_for({"x": x4.shape})
    assert not tuned.untuned and all(tuned.programs[w.workload_key].tuned for w in tuned.partitioned.tasks)
    assert len(untuned.untuned) == len(untuned.partitioned.tasks) > 0
    assert_matches(run(x1), onnxruntime_run(model, {"x": x1}))
    assert_matches(run(x4), onnxruntime_run(model, {"x": x4}))


def test_several_shapes_are_several_networks_of_one_tuning(pools):
    res = autosched.tune_networks(G.from_onnx(batch_open_cnn()), trials=0, cost_model="random",
                                  search_params=SMALL_SEARCH, hardware=HW, verbose=0, retime_best=0,
                                  input_shapes=[{"x": (1, 3, 6, 6)}, {"x": (2, 3, 6, 6)}], **measuring(pools))
    assert len(res.networks) == 2 and res.weights.shape[0] == 2
    assert res.weights[0] @ res.weights[1] == 0                     # other shapes, other tasks
    with pytest.raises(ValueError, match="applies to a model with open axes"):
        autosched.tune_networks(G.from_onnx(batch_open_cnn(), {"x": (1, 3, 6, 6)}), trials=0,
                                input_shapes={"x": (1, 3, 6, 6)})
