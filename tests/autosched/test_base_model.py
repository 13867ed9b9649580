"""The base cost model: shipped as package data, trained on workloads the benchmarks do
not evaluate (each rebuilt from its records' workload key), rebuilt by ``autosched
pretrain``; with it a tuning's first batch is chosen by the model (no random warm-up)."""
import json
import os
import re
import sys
import tarfile

import numpy as np
import pytest

import autosched
import ir
from autosched.history import base_model as B
from autosched import cli
from autosched.history.records import read_records
from autosched.history.zero_trial import model_identity
import sketch_rules as SR
from evolution import SearchParams, SketchPolicy, XGBoostEnsemble, XGBoostModel
from evolution.cost_model import objectives as O, pairwise_accuracy
from tests.autosched.stand_ins import StandInBuilder, StandInRunner

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRAINING_LOGS = os.path.join(ROOT, "bench", "data", "training_records.tar.gz")
AVX512_TRAINING_LOGS = os.path.join(ROOT, "bench", "data", "training_records_avx512.tar.gz")
AVX2_TRAINING_LOGS = os.path.join(ROOT, "bench", "data", "training_records_avx2.tar.gz")
AVX2_PICKS_LOGS = os.path.join(ROOT, "bench", "data", "training_records_avx2_picks.tar.gz")
AVX2_PICKS2_LOGS = os.path.join(ROOT, "bench", "data", "training_records_avx2_picks2.tar.gz")
INTEL_PICKS_LOGS = os.path.join(ROOT, "bench", "data", "training_records_intel_picks.tar.gz")
AVX512_PICKS_LOGS = os.path.join(ROOT, "bench", "data", "training_records_avx512_picks.tar.gz")


def package_data() -> list[str]:
    """The files pyproject.toml ships as autosched's package data (its ``autosched = [...]`` line)."""
    with open(os.path.join(ROOT, "pyproject.toml")) as f:
        line = next(line for line in f if line.startswith("autosched = ["))
    return [name.strip(' "') for name in line.split("[", 1)[1].rsplit("]", 1)[0].split(",")]


def test_the_shipped_model_is_package_data_and_loads():
    assert os.path.isfile(B.SHIPPED_MODEL) and os.path.getsize(B.SHIPPED_MODEL) < 8 << 20
    assert "data/base_model.json" in package_data()
    model = B.load_base_model(B.SHIPPED_MODEL)     # four members (docs/history.md)
    assert isinstance(model, XGBoostEnsemble) and len(model.members) == 4 and model.objective == "rank"
    assert all(isinstance(m, XGBoostModel) and m.booster is not None for m in model.members)
    assert B.load_base_model(None) is None and B.load_base_model("off") is None


def test_the_shipped_model_is_chosen_by_the_targets_vector_width(monkeypatch):
    """AVX-512 targets rank with the model whose pairs weigh the fast programs more (on an
    AVX-512 CPU the AVX2 model's pick sat near the bottom of its own best 16); AVX2 and
    anything else with the AVX2 one (on an AMD CPU: Intel's AVX-512 CPUs have their own, below)."""
    monkeypatch.delenv(B.ENV_VAR, raising=False)
    monkeypatch.setattr(B, "cpu_maker", lambda cpu=None: "amd")
    avx512, avx2, sse = (ir.HardwareParams(num_cores=2, vector_lanes=n) for n in (16, 8, 4))
    assert B.base_model_path("default", avx512) == B.SHIPPED_MODELS[16] != B.SHIPPED_MODEL
    assert B.base_model_path("default", avx2) == B.base_model_path("default", sse) == B.SHIPPED_MODEL
    assert "data/" + os.path.basename(B.SHIPPED_MODELS[16]) in package_data()
    wide, narrow = B.load_base_model("default", avx512), B.load_base_model("default", avx2)
    assert wide is not narrow and wide.objective == narrow.objective == "rank"
    # both are ensembles of four (``--members 4``), of other records and pair weights
    assert isinstance(wide, XGBoostEnsemble) and len(wide.members) == 4 and len(wide.boosters()) == 4
    assert isinstance(narrow, XGBoostEnsemble) and len(narrow.boosters()) == 4
    assert model_identity(wide) != model_identity(narrow)
    host = ir.Target.host().hardware
    assert B.base_model_path() == B.shipped_model_path(host)
    monkeypatch.setenv(B.ENV_VAR, B.SHIPPED_MODEL)      # the variable wins over the width
    assert B.base_model_path("default", avx512) == B.SHIPPED_MODEL


def test_the_zero_trial_search_of_a_task_uses_the_model_of_its_width(monkeypatch):
    monkeypatch.delenv(B.ENV_VAR, raising=False)
    from autosched.history.zero_trial import ZeroTrial
    for lanes in (8, 16):
        hardware = ir.HardwareParams(num_cores=2, vector_lanes=lanes)
        zero = ZeroTrial.from_spec("default", records_db=None, hardware=hardware)
        assert zero.model is B.load_base_model(B.shipped_model_path(hardware))


def _trees(model) -> list:
    """The split conditions of each tree of an ``XGBoostModel``, in order."""
    saved = json.loads(bytes(model.booster.save_raw("json")))
    return [t["split_conditions"] for t in saved["learner"]["gradient_booster"]["model"]["trees"]]


def test_an_intel_avx512_cpu_ranks_with_the_avx512_model_continued_on_intels_own_picks(monkeypatch):
    """On an Intel AVX-512 CPU the AVX-512 model (AMD's records) picked 1.4x the best of its
    own 16; the Intel model is that model with more trees learnt from its picks timed there."""
    monkeypatch.delenv(B.ENV_VAR, raising=False)
    avx512, avx2 = (ir.HardwareParams(num_cores=2, vector_lanes=n) for n in (16, 8))
    assert B.cpu_maker("znver4") == B.cpu_maker("znver5") == "amd"
    if B.cpu_maker("sapphirerapids") != "intel":
        pytest.skip("not an x86 machine: LLVM names no Intel CPU here")
    intel_path = B.MAKER_MODELS[(16, "intel")]
    assert B.shipped_model_path(avx512, "rocketlake") == intel_path
    assert B.shipped_model_path(avx512, "znver5") == B.SHIPPED_MODELS[16]
    assert B.shipped_model_path(avx2, "alderlake") == B.SHIPPED_MODEL    # no Intel AVX2 model: the AVX2 one
    assert "data/" + os.path.basename(intel_path) in package_data()
    amd, intel = B.load_base_model(B.SHIPPED_MODELS[16]), B.load_base_model(intel_path)
    assert isinstance(intel, XGBoostEnsemble) and len(intel.members) == len(amd.members) == 4
    for first, continued in zip(amd.members, intel.members):
        assert continued.rounds > first.rounds and _trees(continued)[:first.rounds] == _trees(first)


def archived_logs(archive: str, tmp_path) -> dict:
    """Workload label -> the records of its log in a training archive of bench/data."""
    with tarfile.open(archive) as tar:
        tar.extractall(tmp_path, filter="data")
    return {path.stem: read_records(str(path)) for path in sorted(tmp_path.glob("*/*.json"))}


def test_the_avx512_models_own_logs_are_avx512_records_of_the_model_family_workloads(tmp_path):
    """Its tunings of the workloads only it learnt (64 or 128 trials each) and up to six
    rounds of picks (at most 16 and the default schedule a round) of every model-family
    workload."""
    logs = archived_logs(AVX512_TRAINING_LOGS, tmp_path)
    assert set(logs) == set(B.MODEL_FAMILY_OPERATORS)
    for label, records in logs.items():
        assert {r.target for r in records} == {"llvm -mcpu=znver5"} and all(r.ok for r in records), label
        assert {r.hardware["vector_lanes"] for r in records} == {16}
        tuned = 128 if label in B.AVX512_ONLY_TRAINING else 0
        assert tuned // 2 + 2 <= len(records) <= tuned + 6 * 17, label


def test_the_avx2_logs_of_the_avx512_only_workloads_are_a_tuning_and_a_round_of_picks_each(tmp_path):
    """AVX2 records of the workloads that had AVX-512 records only (the shipped AVX2 model
    learnt them: docs/history.md): 128 trials from scratch, then at most 16 picks and the
    default schedule."""
    logs = archived_logs(AVX2_TRAINING_LOGS, tmp_path)
    assert set(logs) == set(B.AVX512_ONLY_TRAINING)
    for label, records in logs.items():
        assert {r.target for r in records} == {"llvm -mcpu=znver3"}, label
        assert {r.hardware["vector_lanes"] for r in records} == {8}
        measured = [r for r in records if not r.retimed]     # (a tuning re-times its best few)
        assert 128 + 2 <= len(measured) <= 128 + 17 and sum(r.ok for r in measured) >= 120, label


def test_the_avx2_picks_archive_holds_a_round_of_picks_of_every_other_model_family_workload(tmp_path):
    """A round of ``--picks 16`` of the AVX2 model shipped before it on every model-family
    workload but the 21 of ``training_records_avx2.tar.gz`` (which had theirs): at most 16
    picks and the default schedule each, timed on a Zen 3 VM."""
    logs = archived_logs(AVX2_PICKS_LOGS, tmp_path)
    assert set(logs) == set(B.MODEL_FAMILY_OPERATORS) - B.AVX512_ONLY_TRAINING
    for label, records in logs.items():
        assert {r.target for r in records} == {"llvm -mcpu=znver3"}, label
        assert {r.hardware["vector_lanes"] for r in records} == {8}
        assert 2 <= len(records) <= 17 and all(r.ok for r in records), label


@pytest.mark.parametrize("archive, target, lanes", [(AVX2_PICKS2_LOGS, "llvm -mcpu=znver3", 8),
                                                    (AVX512_PICKS_LOGS, "llvm -mcpu=znver5", 16)])
def test_the_next_rounds_picks_archives_hold_the_ensembles_picks_of_every_model_family_workload(
        archive, target, lanes, tmp_path):
    """A round of ``--picks 16`` of a shipped ensemble on all 64 model-family workloads, on its
    CPU kind (not learnt by a shipped model yet: docs/history.md)."""
    logs = archived_logs(archive, tmp_path)
    assert set(logs) == set(B.MODEL_FAMILY_OPERATORS)
    for label, records in logs.items():
        assert {r.target for r in records} == {target}, label
        assert {r.hardware["vector_lanes"] for r in records} == {lanes}
        assert 2 <= len(records) <= 17 and sum(r.ok for r in records) >= 2, label


def test_the_intel_picks_archive_holds_three_rounds_of_picks_of_every_training_workload(tmp_path):
    """Three rounds of ``--picks 16`` on every training workload, timed on an Intel VM: the
    AVX-512 model's picks, then those of the model continued on each round before (the
    shipped Intel model learnt all three)."""
    logs = archived_logs(INTEL_PICKS_LOGS, tmp_path)
    assert set(logs) == set(B.training_workloads())
    for label, records in logs.items():
        assert {r.target for r in records} == {"llvm -mcpu=rocketlake"}, label
        assert {r.hardware["vector_lanes"] for r in records} == {16}
        assert 2 <= len(records) <= 3 * 17 and sum(r.ok for r in records) >= 2, label


def test_the_environment_variable_chooses_the_base_model(monkeypatch, tmp_path):
    monkeypatch.setenv(B.ENV_VAR, B.SHIPPED_MODEL)
    assert B.base_model_path() == B.SHIPPED_MODEL
    monkeypatch.setenv(B.ENV_VAR, "off")
    assert B.load_base_model() is None
    with pytest.raises(FileNotFoundError, match="autosched pretrain"):
        B.load_base_model(str(tmp_path / "missing.json"))
    bad = tmp_path / "bad.json"
    bad.write_text("not a model")
    with pytest.raises(ValueError, match="cannot be read"):
        B.load_base_model(str(bad))


def test_every_training_workload_is_rebuilt_from_its_key_alone():
    for label, w in B.training_workloads().items():
        key = ir.ComputeDAG(w.tensors).workload_key()
        dag = B.rebuild_workload(key)
        assert dag is not None and dag.workload_key() == key, label
    assert B.rebuild_workload("0" * 32) is None


def test_the_dense_layers_over_awkward_token_counts_compute_their_reference():
    # rows no row tile divides (a prime count of tokens, seq-first or batch-first or
    # two-dimensional), at the widths and epilogues of transformer MLPs and projections
    labels = [label for label in B.MODEL_FAMILY_OPERATORS
              if label in ("dense_chain-1x211x512x2048-add-gelu", "dense_chain-211x1x512x1536-add",
                           "dense_chain-139x896x896-bias", "dense_chain-1x67x896x3584-add-gelu",
                           "dense_chain-1x211x2048x512-add")]
    assert len(labels) == 5
    rng = np.random.default_rng(0)
    for label in labels:
        w = B.training_workloads()[label]
        rows = int(np.prod(w.tensors[0].shape[:-1]))
        assert all(rows % d for d in range(2, 17)), label
        dag = ir.ComputeDAG(w.tensors)
        kernel = ir.build(dag, SR.cpu_default_schedule(dag))
        inputs, outputs = w.random_inputs(rng), w.output_buffers()
        kernel(*inputs, *outputs)
        np.testing.assert_allclose(outputs[0], w.reference(inputs)[0], rtol=1e-4, atol=1e-4, err_msg=label)


def _training_records():
    """bench/training_records.py, imported."""
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    try:
        import training_records
    finally:
        sys.path.pop(0)
    return training_records


def test_the_training_workloads_are_disjoint_from_the_benchmarks():
    training_records = _training_records()
    evaluated = training_records.evaluated_keys()
    assert len(evaluated) > 40                      # the suite and ResNet-50's tasks
    for label, w in B.training_workloads().items():
        assert ir.ComputeDAG(w.tensors).workload_key() not in evaluated, label
    training_records.check_disjoint(B.training_workloads())


def test_a_training_workload_at_a_coverage_models_shape_is_refused_whatever_its_epilogue():
    training_records = _training_records()
    shapes = training_records.coverage_shapes()
    models = {where.split(":")[0] for where in shapes.values()}
    assert models == set(training_records.COVERAGE_MODELS)
    # MobileNet-V3's first expansion (1x1, 16 -> 64 channels at 112x112, bias and ReLU),
    # here with another epilogue; and a 3x3 depthwise layer at its shape but another stride
    same = autosched.ops.workload("conv2d_chain", 1, 112, 112, 16, 64, 1, epilogue="bias-hard_swish")
    strided = autosched.ops.workload("depthwise_chain", 1, 112, 112, 16, 3, stride=2, padding=1)
    found = training_records.clashes({"same": same, "strided": strided})
    assert list(found) == ["same"] and found["same"].startswith("mobilenet_v3_large: fused_conv_bias_add_relu(")
    with pytest.raises(SystemExit, match="training workloads that a benchmark evaluates"):
        training_records.check_disjoint({"same": same})


def _extract(tmp_path, names):
    with tarfile.open(TRAINING_LOGS) as tar:
        members = [m for m in tar.getmembers() if os.path.basename(m.name) in names]
        tar.extractall(tmp_path, members=members, filter="data")
    return [str(tmp_path / m.name) for m in members]


def test_pretrain_builds_a_model_that_loads_and_ranks(tmp_path, capsys):
    logs = _extract(tmp_path, {"GMM-4x128x128x64.json", "NRM-1x128x512.json"})
    assert len(logs) == 2
    out = tmp_path / "model.json"
    assert cli.main(["pretrain", *logs, "-o", str(out), "--rounds", "30"]) == 0
    # 256 programs of each tuning, and 34 of two rounds of the base models' picks on AVX2
    assert "546 programs of 2 workload(s)" in capsys.readouterr().out
    model = B.load_base_model(str(out))
    programs = B.training_programs(read_records(logs[0]))
    task, states = programs[0][0], [s for _, s, c in programs if c is not None]
    costs = np.array([c for _, _, c in programs if c is not None])
    scores = model.predict(task, states)
    assert np.all(np.isfinite(scores))
    assert pairwise_accuracy(scores, -costs) > 0.7   # it learnt the order of what it was shown


def test_pretrain_members_make_an_ensemble_that_loads_ranks_by_its_mean_and_is_checked(tmp_path, capsys):
    logs = _extract(tmp_path, {"NRM-1x128x512.json"})
    out = tmp_path / "ensemble.json"
    assert cli.main(["pretrain", *logs, "-o", str(out), "--rounds", "10", "--members", "3"]) == 0
    assert re.search(r"# \S+: \d+ \+ \d+ \+ \d+ trees trained on", capsys.readouterr().out)
    model = B.load_base_model(str(out))
    assert isinstance(model, XGBoostEnsemble) and len(model.members) == 3 and model.objective == "rank"
    programs = B.training_programs(read_records(logs[0]))[:20]
    task, states = programs[0][0], [s for _, s, _ in programs]
    scores = np.array([m.predict(task, states) for m in model.members])
    assert np.ptp(scores, axis=0).max() > 0         # the members differ (each its own resample)
    np.testing.assert_allclose(model.predict(task, states), scores.mean(0))
    from autosched.history.zero_trial import model_identity
    assert model_identity(model) not in {model_identity(m) for m in model.members}
    # a damaged tree in any member is refused, naming the member
    saved = json.loads(out.read_text())
    saved["members"][2]["learner"]["gradient_booster"]["model"]["trees"][3]["parents"][1] = 10 ** 9
    (tmp_path / "damaged.json").write_text(json.dumps(saved))
    with pytest.raises(ValueError, match="cannot be read .*member 2: tree 3: parents holds 1000000000"):
        B.load_base_model(str(tmp_path / "damaged.json"))
    saved["members"] = []
    (tmp_path / "empty.json").write_text(json.dumps(saved))
    with pytest.raises(ValueError, match="not a list of 1 to 64 models"):
        B.load_base_model(str(tmp_path / "empty.json"))
    assert cli.main(["pretrain", *logs, "-o", str(tmp_path / "big.json"), "--members", "65"]) == cli.USAGE_ERROR
    assert "at most 64 members" in capsys.readouterr().err and not (tmp_path / "big.json").exists()


def test_pretrain_start_continues_each_members_trees_with_what_new_logs_say(tmp_path, capsys):
    first, second = _extract(tmp_path, {"NRM-1x128x512.json"}), _extract(tmp_path, {"GMM-4x128x128x64.json"})
    start = tmp_path / "start.json"
    assert cli.main(["pretrain", *first, "-o", str(start), "--rounds", "8", "--members", "2"]) == 0
    out = tmp_path / "continued.json"
    assert cli.main(["pretrain", *second, "--start", str(start), "-o", str(out), "--rounds", "6"]) == 0
    assert "trees trained on" in capsys.readouterr().out
    before, after = B.load_base_model(str(start)), B.load_base_model(str(out))
    assert isinstance(after, XGBoostEnsemble) and len(after.members) == 2
    for old, new in zip(before.members, after.members):
        assert old.rounds < new.rounds <= old.rounds + 6 and _trees(new)[:old.rounds] == _trees(old)
    programs = B.training_programs(read_records(second[0]))
    task, states = programs[0][0], [s for _, s, c in programs if c is not None]
    speed = -np.array([c for _, _, c in programs if c is not None])
    assert pairwise_accuracy(after.predict(task, states), speed) > pairwise_accuracy(before.predict(task, states),
                                                                                      speed) + 0.05
    with pytest.raises(ValueError, match="only a rank model can be continued"):
        B.pretrain(read_records(second[0]), start=XGBoostModel(objective="pack-sum"))
    with pytest.raises(SystemExit):
        cli.main(["pretrain", *second, "--start", str(tmp_path / "none.json"), "-o", str(tmp_path / "n.json")])
    assert "--start" in capsys.readouterr().err and not (tmp_path / "n.json").exists()
    assert cli.main(["pretrain", *second, "--start", str(start), "--members", "3",
                     "-o", str(tmp_path / "n.json")]) == cli.USAGE_ERROR
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "keeps the members of" in err and not (tmp_path / "n.json").exists()


def test_pretrain_reports_bad_input_in_one_line(tmp_path, capsys):
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    with pytest.raises(SystemExit) as exit_:
        cli.main(["pretrain", str(notes), "-o", str(tmp_path / "m.json")])
    assert exit_.value.code == cli.USAGE_ERROR and "is not a tuning log" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["pretrain", str(tmp_path / "missing.json"), "-o", str(tmp_path / "m.json")])
    assert "no tuning log at" in capsys.readouterr().err
    empty = tmp_path / "empty.json"
    empty.write_text("# nothing measured yet\n")
    assert cli.main(["pretrain", str(empty), "-o", str(tmp_path / "m.json")]) == cli.USAGE_ERROR
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no usable record" in err
    assert not (tmp_path / "m.json").exists()


def test_pretrain_top_weight_reaches_the_rank_pairs_and_refuses_a_negative_power(tmp_path, capsys, monkeypatch):
    logs = _extract(tmp_path, {"NRM-1x128x512.json"})
    seen = []
    real = O.ranking_pairs
    monkeypatch.setattr(O, "ranking_pairs", lambda *a, **k: seen.append(k.get("top_weight")) or real(*a, **k))
    assert cli.main(["pretrain", *logs, "-o", str(tmp_path / "m.json"), "--rounds", "5", "--top-weight", "2"]) == 0
    assert seen == [2.0] and B.load_base_model(str(tmp_path / "m.json")) is not None
    with pytest.raises(SystemExit):
        cli.main(["pretrain", *logs, "-o", str(tmp_path / "n.json"), "--top-weight", "-1"])
    assert "--top-weight must be a number >= 0" in capsys.readouterr().err


def test_a_tuning_with_the_base_model_measures_no_random_warm_up_batch(monkeypatch):
    w = autosched.ops.workload("matmul", 32, 48, 64)
    task = ir.SearchTask(ir.ComputeDAG(w.tensors))
    params = SearchParams(population=32, generations=1, init_min_population=8, islands=1)
    batches = []
    real = SketchPolicy.next_batch
    monkeypatch.setattr(SketchPolicy, "next_batch", lambda self, n: batches.append(real(self, n)) or batches[-1])
    monkeypatch.setattr(SketchPolicy, "random_batch", lambda self, n: pytest.fail("a random warm-up batch"))
    result = autosched.auto_schedule(task, trials=16, measure_batch=8, search_params=params, seed=0,
                                     builder=StandInBuilder(), runner=StandInRunner(), verbose=0,
                                     base_model=B.SHIPPED_MODEL, records_db=None)
    # a probe of half a batch first, which the model learns from before it picks the rest
    assert result.trials == 16 and [len(b) for b in batches] == [4, 8, 4]


def test_a_model_with_a_base_learns_from_the_first_measurements_of_its_task():
    from autosched.tune import WARMUP_SAMPLES, make_cost_model
    w = autosched.ops.workload("matmul", 32, 48, 64)
    task = ir.SearchTask(ir.ComputeDAG(w.tensors))
    states = SR.sample_programs(task, SR.generate_sketches(task), 6, np.random.default_rng(0))
    base = B.load_base_model(B.SHIPPED_MODEL)
    model = make_cost_model("xgb", 0, start=base)
    before = model.predict(task, states)
    model.update([(task, s, 1e-3 * (i + 1)) for i, s in enumerate(states)])  # the first is the fastest
    after = model.predict(task, states)
    assert model.booster is not None and not np.allclose(before, after)
    assert np.corrcoef(after, -np.arange(len(states)))[0, 1] > np.corrcoef(before, -np.arange(len(states)))[0, 1]
    assert make_cost_model("xgb", 0).num_warmup_sample == WARMUP_SAMPLES  # from nothing: waits


@pytest.mark.parametrize("damage, message", [
    (lambda t: t["parents"].__setitem__(19, 10 ** 9), "parents holds 1000000000"),   # (crashed XGBoost)
    (lambda t: t["left_children"].__setitem__(0, 500), "left_children holds 500"),
    (lambda t: t["split_indices"].__setitem__(0, 167), "split_indices holds 167"),   # N_FEATURES
    (lambda t: t["left_children"].__setitem__(6, 0), "node 6's child 0 is not a node of its own"),   # (a cycle)
    (lambda t: t["base_weights"].pop(), "base_weights is not a list of"),
    (lambda t: t["tree_param"].__setitem__("num_nodes", "x"), "no valid tree_param"),
])
def test_a_damaged_tree_is_refused_before_xgboost_reads_it(tmp_path, damage, message):
    """bench/fuzz_inputs.py found it: a tree whose parent index points outside it killed the
    process with a segmentation fault inside XGBoost."""
    model = json.loads(open(B.SHIPPED_MODEL).read())        # an ensemble: its second member damaged
    damage(model["members"][1]["learner"]["gradient_booster"]["model"]["trees"][84])
    path = tmp_path / "damaged.json"
    path.write_text(json.dumps(model))
    with pytest.raises(ValueError, match=f"cannot be read .*{re.escape(message)}"):
        B.load_base_model(str(path))


def test_a_tree_of_an_output_group_the_model_lacks_is_refused(tmp_path):
    """bench/fuzz_inputs.py found it: a tree_info entry naming group 3 of a one-output model
    loaded, then aborted the process (SIGABRT) inside XGBoost's prediction."""
    model = json.loads(open(B.SHIPPED_MODEL).read())["members"][0]     # a single model's file
    model["learner"]["gradient_booster"]["model"]["tree_info"][20] = 3
    path = tmp_path / "damaged.json"
    path.write_text(json.dumps(model))
    with pytest.raises(ValueError, match="cannot be read .*tree_info names output groups outside 0..0"):
        B.load_base_model(str(path))


def test_a_base_model_of_another_format_is_refused(tmp_path):
    path = tmp_path / "model.ubj"
    path.write_bytes(b"{}")
    with pytest.raises(ValueError, match="must be XGBoost's JSON format"):
        B.load_base_model(str(path))


def test_measure_picks_adds_the_models_picks_and_the_default_schedule_to_a_log_once(tmp_path):
    training_records = _training_records()
    w = autosched.ops.workload("depthwise_chain", 1, 8, 8, 16, 3, 1, 1, epilogue="bias-relu")
    task = training_records.training_task("depthwise_chain-1x8x8x16-k3s1-bias-relu", w)
    log = str(tmp_path / "picks.json")
    model = B.load_base_model(B.SHIPPED_MODEL)
    measured, gflops = training_records.measure_picks(task, model, 2, log)
    records = read_records(log)
    default = SR.search_space(task.target).default_schedule(task.dag, task.hardware)
    programs = {r.state(task.dag).key for r in records}
    assert measured == len(records) and 2 <= len(records) <= 3 and gflops > 0
    assert all(r.ok for r in records)          # each one checked against the naive program, then timed
    assert default.key in programs
    assert training_records.measure_picks(task, model, 2, log)[0] == 0     # nothing measured twice
    assert len(read_records(log)) == len(records)
