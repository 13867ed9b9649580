"""bench/profile_model.py: the operator families of the three engines, and a smoke run."""
import json
import os
import sys

import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
import profile_model as P  # noqa: E402

from autosched import graph as G  # noqa: E402
from autosched.history.base_model import SHIPPED_MODEL  # noqa: E402


@pytest.mark.parametrize("channels, groups, kernel, spatial, family", [
    (64, 1, (1, 1), (56, 56), "conv 1x1"),
    (64, 1, (3, 3), (56, 56), "conv 3x3"),
    (3, 1, (7, 7), (224, 224), "conv kxk"),
    (96, 96, (7, 7), (56, 56), "conv depthwise"),
    (128, 32, (3, 3), (28, 28), "conv grouped"),
    (72, 1, (1, 1), (1, 1), P.SE),
])
def test_conv_family(channels, groups, kernel, spatial, family):
    assert P.conv_family(channels, groups, kernel, spatial) == family


def test_onnxruntime_families_from_its_profile_shapes():
    # shapes as onnxruntime's NCHWc kernels report them: a depthwise filter's channels
    # padded to the block (72 -> 80) on both sides
    assert P.ort_family("Conv", [(1, 80, 56, 56), (80, 1, 5, 5), (80,)]) == "conv depthwise"
    assert P.ort_family("Conv", [(1, 16, 112, 112), (64, 16, 1, 1), (64,)]) == "conv 1x1"
    assert P.ort_family("Conv", [(1, 80, 1, 1), (32, 80, 1, 1)]) == P.SE
    assert P.ort_family("Mul", [(1, 72, 1, 1), (1, 72, 28, 28)]) == P.SE
    assert P.ort_family("Mul", [(1, 72, 28, 28), (1, 72, 28, 28)]) == "elementwise"
    assert P.ort_family("MatMul", [(1, 128, 768), (768, 3072)]) == "dense"
    assert P.ort_family("MatMul", [(1, 12, 128, 64), (1, 12, 64, 128)]) == "batch-matmul/attention"
    assert P.ort_family("ReorderInput", [(1, 72, 28, 28)]) == P.LAYOUT
    assert P.ort_family("GlobalAveragePool", [(1, 72, 28, 28)]) == "global pooling"


def test_openvino_families_from_its_runtime_shapes():
    assert P.ov_family("GroupConvolution", [(1, 72, 56, 56), (72, 1, 1, 5, 5)]) == "conv depthwise"
    assert P.ov_family("GroupConvolution", [(1, 128, 28, 28), (32, 4, 4, 3, 3)]) == "conv grouped"
    assert P.ov_family("Convolution", [(1, 3, 224, 224), (16, 3, 3, 3)]) == "conv 3x3"
    assert P.ov_family("Reorder", [(1, 3, 224, 224)]) == P.LAYOUT
    assert P.ov_family("MVN", [(1, 128, 768)]) == "layer norm"


def test_our_families_of_the_smoke_model():
    part = G.partition(G.from_onnx(P.smoke_model_path()))
    families = {sg.name: P.our_family(sg) for sg in part.subgraphs}
    assert families == {
        "fused_transpose": P.LAYOUT, "fused_conv_bias_add_relu": "conv 3x3",
        "fused_depthwise_conv2d": "conv depthwise", "fused_global_pool": "global pooling",
        "fused_conv_hard_sigmoid_multiply": P.SE, "fused_conv_hard_swish": "conv 1x1",
        "fused_reshape": P.MOVE, "fused_dense_bias_add": "dense", "fused_softmax": "softmax"}


def test_unknown_model_is_one_line_error(capsys):
    assert P.main(["--model", "no_such_net", "--json-only"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("profile_model: unknown model 'no_such_net'") and "\n" not in err


def test_every_model_of_the_coverage_bench_is_known():
    pytest.importorskip("torch")
    try:
        P.torch_models.import_torchvision()     # (against a CPU torch: the shim first)
    except ImportError:
        pytest.skip("torchvision is not installed")
    names = P.model_names()
    assert {"vit_b_16", "swin_t", "resnet50", "gpt2", "bert", "distilbert", "vit"} <= set(names)


def test_a_model_already_exported_is_not_exported_again(monkeypatch, tmp_path):
    monkeypatch.setattr(P, "CACHE", str(tmp_path))
    (tmp_path / "vit_b_16_seed3.onnx").write_bytes(b"cached")
    monkeypatch.setattr(P, "model_names", lambda: pytest.fail("looked up the models"))
    assert P.model_path("vit_b_16", seed=3) == str(tmp_path / "vit_b_16_seed3.onnx")


def test_programs_of_another_model_are_refused(capsys, tmp_path):
    other = tmp_path / "programs.json"
    other.write_text(json.dumps({"workloads": ["not-this-model"], "steps": {}}))
    assert P.main(["--smoke", "--json-only", "--programs", str(other)]) == 2
    assert "another model" in capsys.readouterr().err


def test_smoke_run_sums_every_kernel_into_a_family_and_probes_a_task(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("AUTOSCHED_BASE_MODEL", SHIPPED_MODEL)     # zero-trial programs, as users get them
    programs = str(tmp_path / "programs.json")
    assert P.main(["--smoke", "--json-only", "--cprofile-tasks", "1", "--programs", programs, "--search-only"]) == 0
    searched = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["rows"][0]
    assert searched["tasks"] == 8 and searched["zero_trial_s"] > 0
    assert P.main(["--smoke", "--json-only", "--programs", programs, "--probe-tasks", "1", "--probe-trials", "2"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["bench"] == "profile_model"
    *families, model = out["rows"]
    assert model["workload"] == "smoke_cnn" and model["max_rel_error"] < 1e-3
    assert model["tasks"] == 8 and model["kernels"] == 9
    assert all(f["origins"] == f"{f['kernels']} zero-trial" for f in families
               if f["kernels"] and f["family"] != P.LAYOUT)
    assert {"conv 3x3", "conv depthwise", P.SE, "conv 1x1", "dense", "softmax"} <= {f["family"] for f in families}
    assert sum(f["ours_ms"] for f in families) == pytest.approx(model["kernels_sum_ms"])
    assert sum(f["onnxruntime_ms"] for f in families) == pytest.approx(model["onnxruntime_nodes_sum_ms"])
    assert all(f["onnxruntime_ms"] > 0 for f in families if f["family"] in ("conv 3x3", "dense", "softmax"))
    assert model["search_profile"]["tasks"] == 1 and model["search_profile"]["seconds"] > 0
    probe, = model["probes"]
    assert probe["trials"] == 2 and probe["zero_trial_ms"] > 0 and probe["best_measured_ms"] > 0
    ranked = [m for m in probe["ranked_ms"] if m is not None]      # the base model's best-ranked programs
    assert 1 < len(ranked) <= 16 and probe["fastest_ranked_ms"] == min(ranked)
    assert probe["pick_place"] == 1 + sorted(ranked).index(probe["ranked_ms"][0])   # the pick's place, 1 the fastest
    assert model["zero_trial_s"] == searched["zero_trial_s"]       # read back, not searched again
    assert model["latency_ms"] > 0 and model["onnxruntime_ms"] > 0
    assert model["one_thread_ms"] > 0 and model["default_schedules_ms"] > 0
    assert model["cold_kernels_sum_ms"] > 0           # every kernel timed with its weights evicted too
    assert model["e2e_over_cold_kernels"] == pytest.approx(model["latency_ms"] / model["cold_kernels_sum_ms"])
    assert sum(f["one_thread_ms"] for f in families) == pytest.approx(model["one_thread_kernels_sum_ms"])
    # every kernel timed inside a run too: their sum is a run, give or take a Python call and a
    # thread pool's wake-up per kernel (the smoke run's kernels take microseconds; a busy CI
    # machine read 0.38 ms for a 0.025 ms run)
    assert 0 < model["in_run_kernels_sum_ms"] < 5 * model["latency_ms"] + 0.1 * model["kernels"]


def test_against_times_the_tasks_whose_programs_differ_in_turns(capsys, monkeypatch, tmp_path):
    from autosched.graph.executor import default_schedule
    from ir.steps import steps_to_json
    monkeypatch.setenv("AUTOSCHED_BASE_MODEL", SHIPPED_MODEL)
    programs, other = str(tmp_path / "programs.json"), str(tmp_path / "other.json")
    assert P.main(["--smoke", "--json-only", "--cprofile-tasks", "0", "--programs", programs, "--search-only"]) == 0
    capsys.readouterr()
    search = json.load(open(programs))
    part = G.partition(G.from_onnx(P.smoke_model_path()))
    task = max(part.tasks, key=lambda w: w.dag.flop_count())           # its default schedule in the other set
    assert search["steps"][task.workload_key] != steps_to_json(default_schedule(task.dag).steps)
    search["steps"][task.workload_key] = steps_to_json(default_schedule(task.dag).steps)
    with open(other, "w") as f:
        json.dump(search, f)
    assert P.main(["--smoke", "--json-only", "--cprofile-tasks", "0", "--programs", programs, "--against", other]) == 0
    model = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["rows"][-1]
    changed, = model["against_kernels"]
    assert changed["kernel"] == task.desc and changed["calls"] >= 1
    assert changed["ms"] > 0 and changed["against_ms"] > 0 and model["against_ms"] > 0
    assert P.main(["--smoke", "--json-only", "--programs", programs, "--against", str(tmp_path / "none.json")]) == 2
    assert "no such file" in capsys.readouterr().err
