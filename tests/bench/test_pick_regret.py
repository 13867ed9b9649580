"""bench/pick_regret.py: a base model's pick among measured candidates, offline."""
import json
import os
import sys

import pytest

pytest.importorskip("onnx")

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
import pick_regret as P  # noqa: E402

from autosched.history.base_model import SHIPPED_MODELS, load_base_model  # noqa: E402
from autosched.history.zero_trial import best_first  # noqa: E402
from ir.steps import steps_from_json  # noqa: E402
import ir  # noqa: E402


#: the shipped model of this CPU's width (the tests' environment turns the default off)
MODEL = SHIPPED_MODELS.get(ir.Target.host().hardware.vector_lanes, SHIPPED_MODELS[8])


def test_collect_measures_the_candidates_resumes_and_the_regret_is_the_picks_time_over_the_fastest(tmp_path):
    out = str(tmp_path / "picks.json")
    data = P.collect(["smoke"], out, seed=0, largest=1, turns=1, specs=[MODEL], params=P.SMOKE_SEARCH, say=lambda *_: None)
    (entry,) = data["tasks"]
    timed = [c for c in entry["candidates"] if c["ms"] is not None]
    assert len(timed) >= 2 and all(c["ms"] > 0 for c in timed)
    assert P.load(out) == data
    # a second run keeps what the file holds and measures nothing again
    again = P.collect(["smoke"], out, seed=0, largest=1, turns=1, specs=[MODEL], params=P.SMOKE_SEARCH,
                      say=lambda *_: pytest.fail("measured again"))
    assert again["tasks"] == data["tasks"]
    # a model whose candidates a task lacks adds them, and the whole pool is timed again
    (ident, own_pick), = entry["picks"].items()
    assert own_pick in [c["steps"] for c in timed]
    entry["picks"] = {}
    with open(out, "w") as f:
        json.dump(data, f)
    said = []
    refreshed = P.collect(["smoke"], out, seed=0, largest=1, turns=1, specs=[MODEL], params=P.SMOKE_SEARCH, say=said.append)
    (entry,) = refreshed["tasks"]
    assert len(said) == 1 and entry["picks"] == {ident: own_pick}
    timed = [c for c in entry["candidates"] if c["ms"] is not None]

    # the regret of a model whose pick is known: make the pick the slowest candidate
    _, tasks = P.model_tasks("smoke", 0, 1)
    workload = tasks[0][0]
    states = [ir.State.from_steps(workload.dag, steps_from_json(c["steps"])) for c in timed]
    pick = best_first(workload.search_task(), load_base_model(MODEL), states)[0]
    slowest = max(c["ms"] for c in timed)
    for k, c in enumerate(timed):
        c["ms"] = slowest if k == pick else slowest / 2 if k == (pick + 1) % len(timed) else slowest * 0.9
    entry["candidates"] = timed
    with open(out, "w") as f:
        json.dump(refreshed, f)
    (row,) = P.regrets(P.load(out), MODEL)
    assert row["regret"] == pytest.approx(2.0) and row["place"] == len(timed)
    assert row["own_regret"] == pytest.approx(timed[[c["steps"] for c in timed].index(own_pick)]["ms"] / (slowest / 2))
    s = P.summary([row, {**row, "regret": 1.0, "pick_ms": row["fastest_ms"], "calls": 3, "place": 1, "own_regret": None}])
    assert s["geomean_regret"] == pytest.approx(2 ** 0.5) and s["first_place"] == 1
    assert s["weighted_regret"] == pytest.approx((row["calls"] * row["pick_ms"] + 3 * row["fastest_ms"]) /
                                                 ((row["calls"] + 3) * row["fastest_ms"]))


def test_own_pick_times_sum_calls_times_each_models_own_pick_over_the_tasks_all_of_them_timed():
    def row(model, calls, fastest, own):
        return {"model": model, "calls": calls, "fastest_ms": fastest, "own_ms": own}
    by_spec = {"a": {("m", "t1"): row("m", 2, 1.0, 1.5), ("m", "t2"): row("m", 1, 3.0, 3.0),
                     ("n", "t3"): row("n", 4, 0.5, 0.5), ("n", "t4"): row("n", 1, 1.0, 2.0)},
               "b": {("m", "t1"): row("m", 2, 1.0, 1.0), ("m", "t2"): row("m", 1, 3.0, 6.0),
                     ("n", "t3"): row("n", 4, 0.5, None), ("n", "t4"): row("n", 1, 1.0, 1.0)}}
    got = P.own_pick_times(by_spec, ["a", "b"])
    # t3 is left out: b's own pick of it was not timed
    assert got == {"m": (2 * 1.0 + 3.0, [2 * 1.5 + 3.0, 2 * 1.0 + 6.0]), "n": (1.0, [2.0, 1.0])}


def test_a_file_named_gz_is_written_compressed_and_read_back(tmp_path):
    path = str(tmp_path / "picks.json.gz")
    data = {"format": P.FORMAT, "machine": {}, "tasks": []}
    P._write(data, path)
    with open(path, "rb") as f:
        assert f.read(2) == b"\x1f\x8b"                      # gzip's magic
    assert P.load(path) == data


def test_a_file_of_something_else_is_refused(tmp_path):
    path = tmp_path / "other.json"
    path.write_text(json.dumps({"format": "something else", "tasks": []}))
    with pytest.raises(ValueError, match="not a file of measured candidates"):
        P.load(str(path))


def test_a_damaged_file_is_refused_in_one_line(tmp_path, capsys):
    cut = tmp_path / "cut.json.gz"
    P._write({"format": P.FORMAT, "machine": {}, "tasks": [{"model": "m"}] * 1000}, str(cut))
    cut.write_bytes(cut.read_bytes()[:40])                          # a download cut short
    no_fields = tmp_path / "no_fields.json"
    no_fields.write_text(json.dumps({"format": P.FORMAT, "machine": {}, "tasks": [{"model": "m"}]}))
    for path, says in ((cut, "cut short"), (no_fields, "without the fields")):
        with pytest.raises(ValueError, match=says):
            P.load(str(path))
        assert P.main(["--evaluate", str(path), "--base-models", MODEL]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("pick_regret: ") and says in err and "\n" not in err


@pytest.mark.parametrize("name, avx512, models", [
    # the picks of the AVX2 models shipped before and since 2026-12-02, the AVX-512 one's, and an
    # ensemble of the first and the third's members; the AVX-512 model's and one retrained on a
    # round of its own picks (BENCHMARKS.md)
    ("pick_regret_avx2.json.gz", False, 4), ("pick_regret_avx512.json.gz", True, 2)])
def test_the_files_in_bench_data_hold_measured_candidates_of_seven_models(name, avx512, models):
    data = P.load(os.path.join(os.path.dirname(P.__file__), "data", name))
    assert data["machine"]["avx2"] and data["machine"]["avx512f"] == avx512
    assert {t["model"] for t in data["tasks"]} == {"resnet50", "regnet_x_1_6gf", "mobilenet_v3_large",
                                                    "efficientnet_b0", "convnext_tiny", "distilbert", "gpt2"}
    assert len(data["tasks"]) == 69
    for t in data["tasks"]:
        timed = {c["steps"] for c in t["candidates"] if c["ms"] is not None}
        assert len(timed) >= 16 and len(t["picks"]) == models and set(t["picks"].values()) <= timed, t["desc"]


def test_collecting_into_a_file_of_another_cpu_is_refused_in_one_line_and_the_file_is_left_alone(tmp_path, capsys):
    path = tmp_path / "other_cpu.json"
    text = json.dumps({"format": P.FORMAT, "machine": {"llvm_cpu": "not-this-cpu"}, "tasks": []})
    path.write_text(text)
    assert P.main(["--collect", "--models", "smoke", "-o", str(path), "--base-models", MODEL]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("pick_regret: ") and "not-this-cpu" in err and "\n" not in err
    assert path.read_text() == text


def test_a_candidate_whose_steps_do_not_replay_is_left_out_of_the_choice(tmp_path):
    out = str(tmp_path / "picks.json")
    data = P.collect(["smoke"], out, seed=0, largest=1, turns=1, specs=[MODEL], params=P.SMOKE_SEARCH,
                     say=lambda *_: None)
    (entry,) = data["tasks"]
    timed = [c for c in entry["candidates"] if c["ms"] is not None]
    fastest = min(c["ms"] for c in timed)
    entry["candidates"].append({"steps": '[["SP", 99, 0, [4], true]]', "ms": fastest / 10})   # no stage 99
    with open(out, "w") as f:
        json.dump(data, f)
    (row,) = P.regrets(P.load(out), MODEL)
    assert row["candidates"] == len(timed) and row["fastest_ms"] == fastest and row["regret"] >= 1.0
