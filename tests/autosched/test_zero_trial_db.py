"""Zero-trial programs remembered in the records database: a second load of a model replays
them (no search) while another base model or target searches again; the entries are a cache
(junk and unknown fields tolerated, entries that no longer replay searched again) and never
a measurement (tuning, ranking, pretraining, resuming and counting trials skip them); the
searches of many tasks run over worker processes, largest first, with the same programs
whatever the number of workers."""
import dataclasses
import json
import warnings

import pytest

import autosched
import ir
from autosched import TuningRecord, ops
from autosched import graph as G
from autosched.cli import count_trials
from autosched.history import database as D
from autosched.history import zero_trial as Z
from autosched.history.base_model import SHIPPED_MODEL, load_base_model, pretrain
from autosched.history.records import best_records, read_records, resume
from evolution import XGBoostModel
from tests.autosched.test_records_db import _tune, matmul_task, record
from tests.autosched.test_zero_trial import _network

TINY = ("GMM-1x16x16x16", "NRM-1x16x32", "GMM-1x8x24x16")


def _task(name, target=None):
    return ir.SearchTask(ir.ComputeDAG(ops.suite_workload(name).tensors), target=target, desc=name)


def _model():
    return load_base_model(SHIPPED_MODEL)


def _no_search(monkeypatch):
    def fail(*args):
        raise AssertionError("searched, though the program is remembered")
    monkeypatch.setattr(Z, "search_steps", fail)


def _steps(states):
    return {k: [s.record() for s in v.steps] for k, v in states.items()}


def test_a_second_load_replays_the_remembered_programs(tmp_path, monkeypatch):
    db = tmp_path / "db.jsonl"
    first = Z.ZeroTrial(_model(), records_db=db, workers=1)
    tasks = [_task(n) for n in TINY[:2]]
    found = first.programs(tasks)
    assert first.stats == {"remembered": 0, "searched": 2, "failed": 0}
    entries = [json.loads(line) for line in db.read_text().splitlines()]
    assert [e["kind"] for e in entries] == ["zero_trial", "zero_trial"]
    assert {e["workload_key"] for e in entries} == {t.workload_key for t in tasks}
    _no_search(monkeypatch)
    second = Z.ZeroTrial(_model(), records_db=db, workers=1)
    again = second.programs(tasks)
    assert second.stats == {"remembered": 2, "searched": 0, "failed": 0}
    assert _steps(again) == _steps(found)


def test_the_family_choice_is_remembered_and_made_again_when_what_decides_it_changes(tmp_path, monkeypatch):
    from autosched.history.program_library import ProgramLibrary
    db = tmp_path / "db.jsonl"
    tasks = [_task("GMM-1x16x16x16"), _task("GMM-1x8x24x16"), _task("NRM-1x16x32")]   # two of one family
    found = Z.ZeroTrial(_model(), records_db=db, workers=1).programs(tasks)
    shared = [e for e in map(json.loads, db.read_text().splitlines()) if e["search"].startswith("shared-")]
    assert {e["workload_key"] for e in shared} == {t.workload_key for t in tasks[:2]}   # the NRM has no choice
    asked = []
    real = Z.shared_in_family

    def spy(tasks, picks, model, library=None, keys=None):
        asked.append(set(keys) if keys is not None else None)
        return real(tasks, picks, model, library, keys)
    monkeypatch.setattr(Z, "shared_in_family", spy)
    again = Z.ZeroTrial(_model(), records_db=db, workers=1).programs(tasks)
    assert asked == [set()] and _steps(again) == _steps(found)          # nothing chosen again
    with_library = Z.ZeroTrial(_model(), records_db=db, workers=1, library=ProgramLibrary([], identity="another"))
    with_library.programs(tasks)
    assert asked[-1] == {t.workload_key for t in tasks}                  # another library: chosen again
    lines = db.read_text().splitlines()
    db.write_text("".join(line.replace('"steps":[[', '"steps":[["XX",0],[') + "\n" if '"shared-' in line
                          else line + "\n" for line in lines))            # remembered choices that do not replay
    Z.ZeroTrial(_model(), records_db=db, workers=1).programs(tasks)
    assert asked[-1] == {t.workload_key for t in tasks[:2]}


def test_small_tasks_get_the_short_search_under_its_own_identity(tmp_path, monkeypatch):
    small, large = _task("GMM-1x16x16x16"), _task("GMM-1x128x128x128")
    assert small.dag.flop_count() < Z.SMALL_TASK_FLOPS <= large.dag.flop_count()
    assert Z.zero_trial_params(small) is Z.SMALL_TASK_PARAMS
    assert Z.zero_trial_params(large) is Z.ZERO_TRIAL_PARAMS
    assert Z.SMALL_TASK_PARAMS.population < Z.ZERO_TRIAL_PARAMS.population
    searched = []
    real = Z.ranked_programs

    def spy(task, model, seed=0, candidates=(), params=None, top=1):
        searched.append((task.desc, params or Z.zero_trial_params(task)))
        return real(task, model, seed, candidates, params, top)
    monkeypatch.setattr(Z, "ranked_programs", spy)
    db = tmp_path / "db.jsonl"
    Z.ZeroTrial(_model(), records_db=db, workers=1).programs([small, large])
    assert dict(searched) == {small.desc: Z.SMALL_TASK_PARAMS, large.desc: Z.ZERO_TRIAL_PARAMS}
    entries = {e["workload_key"]: e["search"] for e in map(json.loads, db.read_text().splitlines())
               if not e["search"].startswith("shared-")}      # (the two GMMs' family choice: below)
    assert entries == {small.workload_key: Z.search_identity(0, Z.SMALL_TASK_PARAMS),
                       large.workload_key: Z.search_identity(0, Z.ZERO_TRIAL_PARAMS)}
    # a ZeroTrial given its own search uses it for every task, and searches again
    searched.clear()
    given = Z.ZeroTrial(_model(), records_db=db, workers=1, params=Z.SMALL_TASK_PARAMS)
    given.programs([small, large])
    assert given.stats == {"remembered": 1, "searched": 1, "failed": 0}
    assert searched == [(large.desc, Z.SMALL_TASK_PARAMS)]


def test_another_base_model_or_target_searches_again(tmp_path):
    db = tmp_path / "db.jsonl"
    model = _model()
    Z.ZeroTrial(model, records_db=db, workers=1).programs([_task(TINY[0])])
    fewer_trees = XGBoostModel(objective="rank")
    fewer_trees.booster = model.members[0].booster[:50]     # (the shipped model: four members)
    assert Z.model_identity(fewer_trees) != Z.model_identity(model)
    other_model = Z.ZeroTrial(fewer_trees, records_db=db, workers=1)
    other_model.programs([_task(TINY[0])])
    other_target = Z.ZeroTrial(model, records_db=db, workers=1)
    other_target.programs([_task(TINY[0], target="llvm -mcpu=skylake-avx512")])
    assert other_model.stats["searched"] == other_target.stats["searched"] == 1
    assert other_model.stats["remembered"] == other_target.stats["remembered"] == 0
    assert len(db.read_text().splitlines()) == 3
    same = Z.ZeroTrial(load_base_model(SHIPPED_MODEL), records_db=db, workers=1)
    same.programs([_task(TINY[0])])
    assert same.stats["remembered"] == 1   # (the identity is the trees', not the object's)
    other_seed = Z.ZeroTrial(model, seed=1, records_db=db, workers=1)
    other_seed.programs([_task(TINY[0])])
    assert other_seed.stats["searched"] == 1


@pytest.mark.parametrize("off", ["none", "env"])
def test_without_a_database_nothing_is_remembered(tmp_path, monkeypatch, off):
    db = tmp_path / "db.jsonl"
    if off == "env":
        monkeypatch.setenv("AUTOSCHED_RECORDS_DB", "off")
    zero = Z.ZeroTrial(_model(), records_db=None if off == "none" else "default", workers=1)
    zero.programs([_task(TINY[0])])
    assert zero.db is None and zero.stats["searched"] == 1 and not db.exists()


def test_junk_unknown_fields_and_entries_that_do_not_replay(tmp_path, monkeypatch):
    db = tmp_path / "db.jsonl"
    task = _task(TINY[0])
    zero = Z.ZeroTrial(_model(), records_db=db, workers=1)
    zero.programs([task])
    good = json.loads(db.read_text())
    newer = dict(good, a_field_of_a_newer_version=[1, 2])
    db.write_text("\n".join(["# notes", "not json", json.dumps(dict(good, steps="junk")), json.dumps(newer),
                             json.dumps(dict(good, workload_key=7, base_model=None, steps=[]))]) + "\n")
    with pytest.warns(RuntimeWarning, match="skipped 1 line"):
        again = Z.ZeroTrial(_model(), records_db=db, workers=1)
        again.programs([task])
    assert again.stats["remembered"] == 1
    # an entry whose steps do not replay on the workload (another search space's) is searched again
    broken = dict(good, steps=[["SP", 99, 0, [4], True]])
    db.write_text(json.dumps(broken) + "\n")
    third = Z.ZeroTrial(_model(), records_db=db, workers=1)
    third.programs([task])
    assert third.stats == {"remembered": 0, "searched": 1, "failed": 0}


def _database_with_both(tmp_path):
    """A records database holding one measured record and a zero-trial entry of its workload."""
    task = matmul_task()
    db = tmp_path / "db.jsonl"
    rec = record(task, 4, 1e-3)
    entry = Z.ZeroTrialEntry(task.workload_key, rec.target, "a-model", Z.search_identity(0),
                             tuple(s.record() for s in task.dag.init_state().split("C", "i", [2]).steps))
    D.RecordsDB(db).append([entry, rec, entry])
    return task, db, rec


def test_readers_of_measurements_skip_zero_trial_entries(tmp_path, recwarn):
    task, db, rec = _database_with_both(tmp_path)
    assert read_records(db) == [rec]
    assert D.RecordsDB(db).read() == [rec]
    assert count_trials(str(db)) == 1
    assert best_records(str(db))[task.workload_key] == [rec]
    own, _ = D.prior_knowledge(D.RecordsDB(db), [task])
    assert own == [rec]
    with pytest.raises(ValueError, match="no 'costs' field"):   # an older autosched: a line it skips
        TuningRecord.from_json(db.read_text().splitlines()[0])
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]


class _Policy:
    def remember(self, states, costs):
        self.costs = costs
        return [(None, s, c) for s, c in zip(states, costs)]


class _Measurer:
    def load(self, records):
        self.records = records


class _Model:
    def update(self, records):
        self.records = list(records)


def test_pretraining_and_resuming_skip_zero_trial_entries(tmp_path):
    task, db, rec = _database_with_both(tmp_path)
    only_entries = tmp_path / "entries.jsonl"
    only_entries.write_text("".join(line + "\n" for line in db.read_text().splitlines() if '"kind"' in line))
    with pytest.raises(ValueError, match="no usable record among 0"):
        pretrain(read_records(only_entries))
    policy, measurer, model = _Policy(), _Measurer(), _Model()
    assert resume(read_records(db), [task], [policy], model, measurer) == [1]
    assert measurer.records == [rec] and policy.costs == [rec.mean_cost] and len(model.records) == 1


def test_resuming_leaves_out_the_records_of_another_target(tmp_path):
    """A log copied from another machine holds that machine's timings: they are neither the
    best so far here, nor trials, nor what the cost model learns of this CPU."""
    task, db, rec = _database_with_both(tmp_path)
    elsewhere = dataclasses.replace(rec, target="llvm -mcpu=elsewhere", costs=(rec.mean_cost / 10,))
    policy, measurer, model = _Policy(), _Measurer(), _Model()
    with pytest.warns(RuntimeWarning, match="1 of 'llvm -mcpu=elsewhere'.*not resumed|not resumed.*1 of "
                                            "'llvm -mcpu=elsewhere'"):
        assert resume([rec, elsewhere], [task], [policy], model, measurer) == [1]
    assert measurer.records == [rec] and policy.costs == [rec.mean_cost] and len(model.records) == 1


def test_a_tuning_with_the_database_counts_only_measurements(tmp_path):
    task, db, rec = _database_with_both(tmp_path)
    result = _tune(task, str(db), trials=2)
    assert result.trials == 2 and result.latency == pytest.approx(rec.mean_cost)   # (resumed from the measurement)
    lines = db.read_text().splitlines()
    assert sum('"kind":"zero_trial"' in line for line in lines) == 2 and len(read_records(db)) == 3


def test_many_tasks_search_once_per_workload_largest_first_in_this_process(monkeypatch):
    order = []
    real = Z.search_steps

    def spy(task, model, seed, params=None, single_threaded=False):
        order.append(task.desc)
        return real(task, model, seed, params, single_threaded)

    monkeypatch.setattr(Z, "search_steps", spy)
    zero = Z.ZeroTrial(_model(), records_db=None, workers=1)
    tasks = [_task(n) for n in TINY] + [_task(TINY[0])]
    got = zero.programs(tasks)
    assert len(got) == 3 and zero.stats["searched"] == 3
    flops = {t.desc: t.dag.flop_count() for t in tasks}
    assert order == sorted(TINY, key=lambda n: -flops[n])


def test_the_runners_up_of_a_search_are_kept_for_the_first_round_not_remembered(tmp_path):
    db = tmp_path / "db.jsonl"
    zero = Z.ZeroTrial(_model(), records_db=db, workers=1)
    task = _task(TINY[0])
    pick = zero.programs([task])[task.workload_key]
    runners = zero.runners_up(task)
    ranked = Z.ranked_programs(task, _model(), 0, [Z.search_space(task.target).default_schedule(task.dag, task.hardware)],
                               Z.zero_trial_params(task), top=Z.CANDIDATES)
    assert [s.key for s in runners] == [s.key for s in ranked[1:]] and ranked[0].key not in {s.key for s in runners}
    assert len(runners) >= 4
    again = Z.ZeroTrial(_model(), records_db=db, workers=1)
    assert again.programs([task])[task.workload_key].key == pick.key and again.runners_up(task) == []


def test_the_programs_are_the_same_whatever_the_number_of_workers():
    tasks = [_task(n) for n in TINY]
    alone = Z.ZeroTrial(_model(), records_db=None, workers=1).programs(tasks)
    pooled = Z.ZeroTrial(_model(), records_db=None, workers=2)
    assert _steps(pooled.programs(tasks)) == _steps(alone)
    assert pooled.stats["searched"] == 3


def test_the_executor_remembers_and_replays_zero_trial_programs(tmp_path, monkeypatch):
    db = tmp_path / "db.jsonl"
    part = G.partition(_network())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", autosched.UntunedWorkloadWarning)
        first = G.GraphExecutor(part, base_model=SHIPPED_MODEL, records_db=db)
        assert first.zero_trial.stats["searched"] == len(part.tasks) > 0
        monkeypatch.setattr(Z, "_search_all", lambda *a: pytest.fail("searched, though remembered"))
        second = G.GraphExecutor(part, base_model=SHIPPED_MODEL, records_db=db)
    assert second.zero_trial.stats == {"remembered": len(part.tasks), "searched": 0, "failed": 0}
    assert all(str(second.programs[k].state) == str(first.programs[k].state) for k in first.programs)
    ok, err = second.verify()
    assert ok, err


def test_a_task_whose_worker_crashes_is_searched_in_this_process(monkeypatch):
    import autosched.workers
    from concurrent.futures import Future

    class CrashingPool:
        def __init__(self, *args, **kwargs):
            pass

        def submit(self, *args):
            future = Future()
            future.set_exception(autosched.workers.WorkerCrashed("killed by SIGSEGV"))
            return future

        def shutdown(self, **kwargs):
            pass

    monkeypatch.setattr(autosched.workers, "WorkerPool", CrashingPool)
    tasks = [_task(n) for n in TINY[:2]]
    zero = Z.ZeroTrial(_model(), records_db=None, workers=2)
    got = zero.programs(tasks)
    assert zero.stats == {"remembered": 0, "searched": 2, "failed": 0}
    assert _steps(got) == _steps(Z.ZeroTrial(_model(), records_db=None, workers=1).programs(tasks))


def test_a_task_whose_search_finds_nothing_runs_its_default_schedule_with_a_warning(tmp_path, monkeypatch):
    def nothing(task, *args):
        raise ValueError(f"the search found no program of {task}")

    monkeypatch.setattr(Z, "search_steps", nothing)
    monkeypatch.setattr(Z.os, "cpu_count", lambda: 1)   # (searched in this process, where the stand-in is)
    part = G.partition(_network())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        executor = G.GraphExecutor(part, base_model=SHIPPED_MODEL, records_db=tmp_path / "db.jsonl")
    said = [str(w.message) for w in caught if "no zero-trial program" in str(w.message)]
    assert len(said) == len(part.tasks) and "the search found no program" in said[0]
    assert executor.zero_trial.stats["failed"] == len(part.tasks)
    assert not any(p.zero_trial for p in executor.programs.values())
    assert not (tmp_path / "db.jsonl").exists()
    ok, err = executor.verify()
    assert ok, err


def test_run_and_compile_take_the_records_database_options(tmp_path):
    from autosched.cli import make_parser
    model = tmp_path / "m.onnx"
    model.write_bytes(b"")
    parser = make_parser()
    for command in ("run", "compile"):
        assert parser.parse_args([command, str(model)]).records_db == "default"
        assert parser.parse_args([command, str(model), "--no-records-db"]).records_db is None
        db = str(tmp_path / "db.jsonl")
        assert parser.parse_args([command, str(model), "--records-db", db]).records_db == db


def test_the_database_remembers_each_tasks_own_pick_and_every_load_shares_them(tmp_path, monkeypatch):
    """What ``programs`` returns is what ``shared_in_family`` makes of the own picks; what the
    records database holds are the own picks, so a task's entry does not depend on its
    siblings. (The stand-in sharing swaps every pick for the naive program, so the two differ.)"""
    given = []

    def naive_for_all(tasks, picks, model, library=None, keys=None):
        given.append(_steps(picks))
        return {t.workload_key: ir.State.initial(t.dag) for t in tasks if t.workload_key in picks}
    monkeypatch.setattr(Z, "shared_in_family", naive_for_all)
    db = tmp_path / "db.jsonl"
    tasks = [_task(n) for n in TINY[:2]]
    found = Z.ZeroTrial(_model(), records_db=db, workers=1).programs(tasks)
    assert _steps(found) == {t.workload_key: [] for t in tasks}
    own = given[0]
    assert all(own[t.workload_key] for t in tasks)      # searched programs, not the naive one
    entries = {e["workload_key"]: e["steps"] for e in map(json.loads, db.read_text().splitlines())}
    assert entries == json.loads(json.dumps(own))
    _no_search(monkeypatch)
    again = Z.ZeroTrial(_model(), records_db=db, workers=1).programs(tasks)
    assert _steps(again) == _steps(found) and given[1] == own
