"""The local records database: where it is, that concurrent writers in two processes never
interleave or lose lines, that a truncated last line is skipped with a warning and never
rewritten, and that a tuning appends to it and the next tuning of the workload starts from
what it holds (its first batch chosen by a model, no random warm-up)."""
import json
import os
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

import autosched
import ir
from autosched import MeasureInput, MeasureResult, TuningRecord
from autosched.history import database as D
from autosched.history.records import read_records, trials_of
from evolution import SearchParams, SketchPolicy
from tests.autosched.stand_ins import StandInBuilder, StandInRunner

HW = ir.HardwareParams(num_cores=2, vector_lanes=16)
PARAMS = SearchParams(population=24, generations=1, init_min_population=6, islands=1)


def matmul_task(n=16):
    a = ir.placeholder((n, n), name="A")
    b = ir.placeholder((n, n), name="B")
    k = ir.reduce_axis(n, name="k")
    c = ir.compute((n, n), lambda i, j: ir.sum(a[i, k] * b[k, j], axis=k), name="C")
    return ir.SearchTask(ir.ComputeDAG([a, b, c]), hardware=HW, layout_rewrite=False, desc=f"mm{n}")


def record(task, f, cost):
    state = task.dag.init_state().split("C", "i", [f])
    return TuningRecord.from_measure(MeasureInput(task, state), MeasureResult((cost,), timestamp=1.0))


def test_where_the_database_is(tmp_path, monkeypatch):
    monkeypatch.setenv(D.ENV_VAR, str(tmp_path / "db.jsonl"))
    assert D.records_db_path() == str(tmp_path / "db.jsonl")
    assert D.records_db_path(tmp_path / "x.jsonl") == str(tmp_path / "x.jsonl")
    assert D.records_db_path(None) is None and D.records_db_path("off") is None
    monkeypatch.setenv(D.ENV_VAR, "off")
    assert D.open_records_db() is None
    monkeypatch.delenv(D.ENV_VAR)
    assert D.records_db_path() == os.path.join(os.path.expanduser("~"), ".cache", "autosched", "records.jsonl")


def test_the_tests_never_touch_the_users_database(_private_records_db):
    assert D.records_db_path() == str(_private_records_db)
    assert not D.records_db_path().startswith(os.path.join(os.path.expanduser("~"), ".cache"))


WRITER = textwrap.dedent('''
    import sys
    import ir
    from autosched import MeasureInput, MeasureResult, TuningRecord
    from autosched.history.database import RecordsDB
    from tests.autosched.test_records_db import matmul_task, record
    task, tag, batches = matmul_task(), int(sys.argv[2]), int(sys.argv[3])
    db = RecordsDB(sys.argv[1])
    for b in range(batches):
        # a long line (a long program) so that an unlocked write could be split
        db.append([record(task, 2, (tag * 1000 + b * 10 + i + 1) * 1e-6) for i in range(10)])
''')


def test_concurrent_writers_in_two_processes_never_interleave_or_lose_lines(tmp_path):
    path = tmp_path / "db.jsonl"
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.getcwd(), *sys.path]))
    procs = [subprocess.Popen([sys.executable, str(script), str(path), str(tag), "40"], env=env, cwd=os.getcwd())
             for tag in (1, 2)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    lines = path.read_text().split("\n")
    assert lines[-1] == "" and len(lines) == 2 * 40 * 10 + 1
    costs = sorted(json.loads(line)["costs"][0] for line in lines[:-1])   # every line parses
    want = sorted((tag * 1000 + b * 10 + i + 1) * 1e-6 for tag in (1, 2) for b in range(40) for i in range(10))
    assert costs == pytest.approx(want)
    assert len(D.RecordsDB(path).read()) == 800


def test_a_truncated_last_line_is_skipped_by_readers_and_cut_by_the_next_writer(tmp_path):
    """As in a tuning log (one appender, ``records.append_records``): the torn record of a
    killed writer is cut under the lock, the lines before it stay."""
    task = matmul_task()
    path = tmp_path / "db.jsonl"
    db = D.RecordsDB(path)
    db.append([record(task, 2, 1e-5), record(task, 4, 2e-5)])
    torn = record(task, 8, 3e-5).to_json()[:57]
    with open(path, "a") as f:
        f.write(torn)
    with pytest.warns(RuntimeWarning, match="truncated"):
        assert [r.mean_cost for r in db.read()] == [1e-5, 2e-5]
    with pytest.warns(RuntimeWarning, match="truncated"):
        D.RecordsDB(path).read([task.workload_key])      # the filtered read warns too
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        db.read()                                        # (once per database object)
    with pytest.warns(RuntimeWarning, match="cut a truncated record"):
        db.append([record(task, 16, 4e-5)])
    assert [json.loads(line)["costs"] for line in path.read_text().splitlines()] == [[1e-5], [2e-5], [4e-5]]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert [r.mean_cost for r in db.read()] == [1e-5, 2e-5, 4e-5]


def test_the_database_refuses_a_file_it_did_not_write(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("my notes\n")
    db = D.RecordsDB(path)
    with pytest.warns(RuntimeWarning, match="cannot be written.*not a tuning log"):
        assert db.append([record(matmul_task(), 2, 1e-5)]) == 0
    assert path.read_text() == "my notes\n" and db.failed


def _tune(task, db, trials=8, runner=None, retime_best=0, **kwargs):
    return autosched.auto_schedule(task, trials=trials, measure_batch=4, seed=0, search_params=PARAMS,
                                   builder=StandInBuilder(), runner=runner or StandInRunner(), verbose=0,
                                   base_model=None, records_db=db, retime_best=retime_best, **kwargs)


def _junk_first_line(path):
    path.write_text("this is not a records file\n")


def _foreign_version(path):
    rec = record(matmul_task(), 2, 1e-5).to_dict()
    path.write_text("".join(json.dumps({**rec, "v": 2, "timestamp": i}) + "\n" for i in range(50)))


def _folder_is_a_file(path):
    path.parent.joinpath("file").write_text("x")
    return path.parent / "file" / "db.jsonl"


#: a database that cannot be used, made by each function from the path it is given
#: (returning the path to give the tuning, when another)
BROKEN = {"junk first line": _junk_first_line, "foreign version": _foreign_version,
          "folder is a file": _folder_is_a_file, "a FIFO": lambda path: os.mkfifo(path),
          "a device": lambda path: "/dev/full" if os.path.exists("/dev/full") else pytest.skip("no /dev/full")}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_a_database_that_cannot_be_used_costs_one_warning_never_the_tuning(tmp_path, case):
    """The issue's cases: a junk first line stopped tuning with a traceback after the first
    batch, a device as the database read forever; the database is a cache."""
    path = tmp_path / "db.jsonl"
    path = BROKEN[case](path) or path
    before = path.read_bytes() if os.path.isfile(path) else None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = _tune(matmul_task(), str(path), trials=8, log_file=str(tmp_path / "log.json"))
    assert result.trials == 8 and result.state is not None
    about_db = [w for w in caught if "records database" in str(w.message)]
    assert len(about_db) == 1, [str(w.message) for w in caught]
    if before is not None:   # a file we did not write is never modified; a newer version's is appended to
        assert path.read_bytes() == before if case != "foreign version" else path.read_bytes().startswith(before)


def test_a_database_line_with_a_newer_hardware_field_does_not_stop_tuning(tmp_path):
    """The issue's worst case: one record whose ``hardware`` has a field this version does not
    know made every tuning on the target fail at start with a TypeError."""
    from autosched.history.base_model import training_workloads
    other = ir.SearchTask(ir.ComputeDAG(training_workloads()["GMM-1x256x256x256"].tensors), desc="")
    lines = []
    for f, cost in ((2, 4e-3), (4, 3e-3), (8, 2e-3)):
        state = other.dag.init_state().split("batch_matmul", "ax2", [f])
        rec = TuningRecord.from_measure(MeasureInput(other, state), MeasureResult((cost,), timestamp=1.0)).to_dict()
        rec["hardware"]["l3_cache_bytes"] = 1 << 25
        lines.append(json.dumps(rec) + "\n")
    path = tmp_path / "db.jsonl"
    path.write_text("".join(lines))
    task = ir.SearchTask(matmul_task().dag, target=other.target, layout_rewrite=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        own, model = D.prior_knowledge(D.RecordsDB(path), [task])
    assert own == [] and model is not None and model.can_rank
    assert _tune(task, str(path), trials=4).trials == 4


def test_a_batch_logged_but_cut_before_the_database_is_added_on_the_next_run(tmp_path):
    """The issue's case: kill -9 between the log's write and the database's lost programs
    for good (11 of 43 after three kills); the log and the database now reconcile."""
    task = matmul_task()
    log, db = tmp_path / "log.json", tmp_path / "db.jsonl"
    _tune(task, str(db), trials=8, log_file=str(log))
    lines = db.read_text().splitlines(keepends=True)
    db.write_text("".join(lines[:4]))            # the last batch never reached the database
    _tune(task, str(db), trials=4, log_file=str(log))
    def ids(path):
        return sorted((r.program, r.timestamp) for r in trials_of(read_records(path)))
    assert len(ids(log)) == 12 and ids(db) == ids(log)
    _tune(task, str(db), trials=0, log_file=str(log))
    assert ids(db) == ids(log)                   # nothing added twice


def test_a_tuning_appends_to_the_database_and_the_next_one_starts_from_it(tmp_path, monkeypatch):
    task = matmul_task()
    path = tmp_path / "db.jsonl"
    first = _tune(task, str(path), retime_best=2)
    recs = trials_of(D.RecordsDB(path).read())
    assert sum(r.retimed for r in D.RecordsDB(path).read()) == 2  # the re-timings go to the database too
    assert len(recs) == 8 and {r.workload_key for r in recs} == {task.workload_key}
    # the second tuning: the database's programs are not measured again, their best is the
    # best so far, and the model ranks from the first batch (no random warm-up)
    monkeypatch.setattr(SketchPolicy, "random_batch", lambda self, n: pytest.fail("a random warm-up batch"))
    runner = StandInRunner()
    second = _tune(task, str(path), runner=runner)
    assert second.latency <= first.latency
    assert not {r.program[:16] for r in recs} & set(runner.proposed)
    assert len(trials_of(D.RecordsDB(path).read())) == 16


def test_without_the_database_nothing_is_written_and_warm_up_is_random(tmp_path, monkeypatch):
    monkeypatch.setenv(D.ENV_VAR, str(tmp_path / "db.jsonl"))
    calls = []
    real = SketchPolicy.random_batch
    monkeypatch.setattr(SketchPolicy, "random_batch", lambda self, n: calls.append(n) or real(self, n))
    _tune(matmul_task(), None)
    assert calls and not (tmp_path / "db.jsonl").exists()


def test_records_of_other_workloads_train_the_model_a_tuning_starts_from(tmp_path):
    from autosched.history.base_model import training_workloads
    w = training_workloads()["GMM-1x256x256x256"]
    other = ir.SearchTask(ir.ComputeDAG(w.tensors), desc="")    # rebuilt from its key alone
    states = [other.dag.init_state().split("batch_matmul", "ax2", [f]) for f in (2, 4, 8, 16)]
    db = D.RecordsDB(tmp_path / "db.jsonl")
    db.append([TuningRecord.from_measure(MeasureInput(other, s), MeasureResult((c,), timestamp=1.0))
               for s, c in zip(states, (4e-3, 3e-3, 2e-3, 1e-3))])
    task = ir.SearchTask(matmul_task().dag, target=other.target)
    own, model = D.prior_knowledge(db, [task])
    assert own == [] and model is not None and model.can_rank
    scores = model.predict(other, states)
    assert np.all(np.isfinite(scores)) and np.argmax(scores) == 3    # learnt the order it was shown
