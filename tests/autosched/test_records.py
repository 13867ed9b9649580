"""Tuning records: the log format, reading damaged logs, best and distilled records,
re-applying the best program under ``apply_history_best``, and resuming a measurement
loop killed with SIGKILL midway."""
import json
import os
import runpy
import signal
import subprocess
import sys
import textwrap
import time
import warnings

import numpy as np
import pytest

import ir
import autosched
from autosched import (LocalBuilder, LocalRunner, MeasureErrorNo, MeasureInput, MeasureResult, NotATuningLog,
                       ProgramMeasurer, RecordToFile, TuningRecord, UntunedWorkloadWarning, apply_history_best,
                       best_record, best_records, distill_records, load_records, read_records)
from autosched.history.records import trials_of
from autosched.tune import RETIME_TURNS

# the measurement loop of the SIGKILL test; also imported here for the same task and states
LOOP = textwrap.dedent('''
    import sys, time
    import ir, autosched

    def make():
        a = ir.placeholder((24, 24), name="A")
        b = ir.placeholder((24, 24), name="B")
        k = ir.reduce_axis(24, name="k")
        c = ir.compute((24, 24), lambda i, j: ir.sum(a[i, k] * b[k, j], axis=k), name="C")
        dag = ir.ComputeDAG([a, b, c])
        task = ir.SearchTask(dag, layout_rewrite=False, desc="resume-test")
        s0 = dag.init_state()
        states = [s0.split("C", "i", [f]).split("C", "j", [g]) for f in (2, 3, 4, 6) for g in (2, 4, 8)]
        return task, states

    def measurer(path):
        log = autosched.RecordToFile(path)
        return autosched.ProgramMeasurer(autosched.LocalBuilder(timeout=20, n_parallel=1),
                                         autosched.LocalRunner(timeout=20, min_repeat_ms=1, repeat=3),
                                         callbacks=[log], preloaded=log.read())

    if __name__ == "__main__":
        task, states = make()
        m = measurer(sys.argv[1])
        for i in range(0, len(states), 2):      # rounds of two programs, some search time between
            m.measure(task, states[i:i + 2])
            time.sleep(0.3)
''')


def matmul_dag(n=16, constant_b=False):
    a = ir.placeholder((n, n), name="A")
    b = ir.placeholder((n, n), name="B", constant=constant_b)
    k = ir.reduce_axis(n, name="k")
    c = ir.compute((n, n), lambda i, j: ir.sum(a[i, k] * b[k, j], axis=k), name="C")
    return ir.ComputeDAG([a, b, c])


def record(task, state, cost, error_no=0, timestamp=1.0):
    res = (MeasureResult((cost, cost), timestamp=timestamp) if error_no == 0
           else MeasureResult.failed(error_no, "boom"))
    return TuningRecord.from_measure(MeasureInput(task, state), res)


@pytest.fixture()
def task():
    return ir.SearchTask(matmul_dag(), layout_rewrite=False, desc="mm16")


def tiled(dag, f):
    return dag.init_state().split("C", "i", [f])


# the format ------------------------------------------------------------------------------

def test_record_round_trip_and_replay(task, tmp_path):
    state = tiled(task.dag, 4).parallel("C", "i.0")
    rec = record(task, state, 2e-6)
    line = rec.to_json()
    d = json.loads(line)
    assert d["v"] == 1 and d["workload_key"] == task.workload_key and d["target"] == str(task.target)
    assert d["steps"] == [s.record() for s in state.steps] and d["costs"] == [2e-6, 2e-6]
    assert d["error_no"] == 0 and d["desc"] == "mm16" and d["hardware"]["num_cores"] == os.cpu_count()
    again = TuningRecord.from_json(line)
    assert again == rec and again.mean_cost == 2e-6
    assert str(again.state(task.dag)) == str(state)
    with pytest.raises(ValueError, match="the record is of workload"):
        again.state(matmul_dag(8))


def test_reading_skips_comments_a_truncated_last_line_and_newer_formats(task, tmp_path):
    path = tmp_path / "log.jsonl"
    recs = [record(task, tiled(task.dag, f), 1e-6 * f) for f in (2, 4)]
    newer = json.dumps({**recs[0].to_dict(), "v": 99})
    path.write_text("# a comment\n\n" + recs[0].to_json() + "\n" + newer + "\n" + recs[1].to_json() + "\n"
                    + recs[1].to_json()[:40])
    with pytest.warns(RuntimeWarning) as caught:
        got = read_records(path)
    assert got == recs
    assert len(caught) == 2  # one warning for each line skipped
    text = " | ".join(str(w.message) for w in caught)
    assert "last line is truncated" in text and "line 4 is not a record (record format version 99" in text
    with pytest.warns(RuntimeWarning):
        by_key = load_records(path)
    assert list(by_key) == [task.workload_key] and by_key[task.workload_key] == recs


def test_record_to_file_cuts_a_truncated_record_of_its_own_before_appending(task, tmp_path):
    path = tmp_path / "log.jsonl"
    first = record(task, tiled(task.dag, 2), 1e-6)
    path.write_text(first.to_json() + "\n" + first.to_json()[:25])
    writer = RecordToFile(path)
    second = record(task, tiled(task.dag, 4), 2e-6)
    with pytest.warns(RuntimeWarning, match="cut a truncated record"):
        writer.write(second)
    writer.close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert read_records(path) == [first, second]


def test_best_and_distilled_records(task, tmp_path):
    other = ir.SearchTask(matmul_dag(8), desc="mm8")
    recs = [record(task, tiled(task.dag, 2), 3e-6), record(task, tiled(task.dag, 4), 1e-6),
            record(task, tiled(task.dag, 8), 0.0, error_no=MeasureErrorNo.RUNTIME_DEVICE),
            record(task, tiled(task.dag, 4), 1.5e-6),  # the same program again, slower
            record(task, tiled(task.dag, 16), 2e-6), record(other, tiled(other.dag, 2), 5e-7)]
    src = tmp_path / "log.jsonl"
    src.write_text("".join(r.to_json() + "\n" for r in recs))
    best = best_records(src)
    assert best[task.workload_key] == [recs[1]] and best[other.workload_key] == [recs[5]]
    assert best_record(src, task.dag) == recs[1] and best_record(src, "nope") is None
    assert best_records(src, top=3)[task.workload_key] == [recs[1], recs[4], recs[0]]  # one entry per program
    assert best_records(src, target="llvm -mcpu=other") == {}
    dst = tmp_path / "best.jsonl"
    assert distill_records(src, dst, top=2) == 3
    assert dst.read_text().startswith("# distilled by autosched")
    assert sorted(r.mean_cost for r in read_records(dst)) == [5e-7, 1e-6, 2e-6]


def retimed(task, state, cost):
    """The record of a re-timing in turns (``ProgramMeasurer.retime``) of ``state``."""
    res = MeasureResult((cost,), timestamp=2.0, retimed=True)
    return TuningRecord.from_measure(MeasureInput(task, state), res)


def test_retimed_programs_rank_first_and_are_not_trials(task, tmp_path):
    lucky, steady, quick = tiled(task.dag, 2), tiled(task.dag, 4), tiled(task.dag, 8)
    recs = [record(task, lucky, 1e-6),           # its trial fell in a quiet moment
            record(task, steady, 2e-6),
            retimed(task, lucky, 3e-6), retimed(task, steady, 2.5e-6),
            record(task, quick, 5e-7)]           # a trial never re-timed
    assert "retimed" not in recs[0].to_dict() and recs[2].to_dict()["retimed"] is True
    assert TuningRecord.from_json(recs[2].to_json()) == recs[2] and recs[2].retimed
    src = tmp_path / "log.jsonl"
    src.write_text("".join(r.to_json() + "\n" for r in recs))
    ranked = best_records(src, top=3)[task.workload_key]
    assert ranked == [recs[3], recs[2], recs[4]]  # re-timed by their re-timing, then the rest
    assert best_record(src, task.dag) == recs[3]
    assert trials_of(read_records(src)) == [recs[0], recs[1], recs[4]]
    assert autosched.history.records.HistoryBest(src, None).program(task.dag)[0].key == steady.key  # what a build gets
    from tests.autosched.stand_ins import StandInBuilder, StandInRunner
    resumed = ProgramMeasurer(StandInBuilder(), StandInRunner(), preloaded=read_records(src))
    assert resumed.best_state(task).key == steady.key and resumed.best_cost(task) == 2.5e-6
    later = retimed(task, steady, 4e-6)  # a later re-timing of each decides: now the lucky one leads
    src.write_text(src.read_text() + later.to_json() + "\n")
    assert best_record(src, task.dag) == recs[2]
    again = ProgramMeasurer(StandInBuilder(), StandInRunner(), preloaded=read_records(src))
    assert again.best_state(task).key == lucky.key and again.best_cost(task) == 3e-6


def test_a_tuning_ends_by_retiming_its_best_programs_in_turns(task, tmp_path):
    log = tmp_path / "log.jsonl"
    result, _ = _tune(task, log, trials=8)
    records = read_records(log)
    trials, retimings = trials_of(records), [r for r in records if r.retimed]
    assert len(trials) == 8 and len(records) == 8 + len(retimings)
    valid = {r.program for r in trials if r.ok}
    assert len(retimings) == min(4, len(valid)) >= 2 and {r.program for r in retimings} <= valid
    assert best_record(log, task.dag).retimed and result.state.key == best_record(log, task.dag).program
    _, proposed = _tune(task, log, trials=4)  # resuming: re-timings are not trials
    second = [r for r in read_records(log) if r.retimed][len(retimings):]
    assert len(trials_of(read_records(log))) == 12 and len(second) >= 2
    assert len(proposed) == 4 + RETIME_TURNS * len(second)  # its trials, then the turns of its re-timing
    _tune(task, tmp_path / "plain.jsonl", trials=8, retime_best=0)
    assert not any(r.retimed for r in read_records(tmp_path / "plain.jsonl"))


# re-applying the best --------------------------------------------------------------------

def test_apply_history_best_builds_the_best_program_with_its_layout(tmp_path):
    dag = matmul_dag(32, constant_b=True)
    task = ir.SearchTask(dag, layout_rewrite=True, desc="packed")
    best = dag.init_state().split("C", "j", [8]).reorder("C", ["j.0", "i", "k", "j.1"]).vectorize("C", "j.1")
    path = tmp_path / "log.jsonl"
    path.write_text(record(task, tiled(dag, 2), 5e-6).to_json() + "\n" + record(task, best, 1e-6).to_json() + "\n")
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((32, 32), dtype=np.float32), rng.standard_normal((32, 32), dtype=np.float32)
    c = np.zeros((32, 32), np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with apply_history_best(path) as history:
            kernel = ir.build(dag)
    assert history.applied == [task.workload_key] and history.fallbacks == []
    assert str(kernel.state) == str(best) and "B" in kernel.layouts  # recorded with layout rewrite
    with pytest.raises(ValueError, match="layout-rewritten constant"):
        kernel(a, b, c)
    kernel(a, kernel.pack("B", b), c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)
    assert str(ir.build(dag).state) == str(dag.init_state())  # outside the block: naive again


def test_apply_history_best_warns_loudly_for_a_workload_without_records(task, tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_text(record(task, tiled(task.dag, 4), 1e-6).to_json() + "\n")
    unknown = matmul_dag(12)
    with apply_history_best(path, base_model=None) as history:
        with pytest.warns(UntunedWorkloadWarning, match=f"no tuning record .*workload {unknown.workload_key()} "
                                                        r"\(outputs C\[12, 12\]\).*UNTUNED"):
            kernel = ir.build(unknown)
        assert str(ir.build(task.dag).state) == str(tiled(task.dag, 4))
    assert str(kernel.state) == str(unknown.init_state()) and history.fallbacks == [unknown.workload_key()]
    with apply_history_best(path, target="llvm -mcpu=elsewhere", base_model=None):
        with pytest.warns(UntunedWorkloadWarning, match="there are records for"):
            ir.build(task.dag)


# resuming after SIGKILL ------------------------------------------------------------------

def test_a_loop_killed_with_sigkill_resumes_from_its_log(tmp_path):
    script = tmp_path / "loop.py"
    script.write_text(LOOP)
    log = tmp_path / "tune.jsonl"
    child = subprocess.Popen([sys.executable, str(script), str(log)], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline and child.poll() is None:
            if log.exists() and log.read_text().count("\n") >= 5:
                break
            time.sleep(0.02)
        assert child.poll() is None, child.stdout.read().decode()
        child.send_signal(signal.SIGKILL)
    finally:
        child.kill()
        child.wait()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the kill may land mid-line
        before = read_records(log)
    loop = runpy.run_path(str(script))
    task, states = loop["make"]()
    assert 5 <= len(before) < len(states), "the kill should land midway"
    assert all(r.ok for r in before)
    keys_before = [r.program for r in before]
    assert len(set(keys_before)) == len(keys_before)  # nothing measured twice before the kill

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = loop["measurer"](str(log))
    try:
        assert m.n_loaded == len(before) and all(m.has_measured(task, s) for s in states[:len(before)])
        results = []
        for i in range(0, len(states), 2):
            results += m.measure(task, states[i:i + 2])
        assert m.n_measured == len(states) - len(before)  # only what the killed run had not measured
        assert all(r.ok for r in results)
    finally:
        m.close()
    after = read_records(log)
    assert after[:len(before)] == before  # nothing recorded before the kill is lost
    assert sorted(r.program for r in after) == sorted(s.key for s in states)
    assert m.best_cost(task) == min(r.mean_cost for r in after)


# a log never loses a byte, a bad record never ends a run ------------------------------------

def _tune(task, log, trials=8, **kwargs):
    """A short tuning with stand-in cost and measurement; returns (result, programs run)."""
    from evolution import SearchParams
    from tests.autosched.stand_ins import StandInBuilder, StandInModel, StandInRunner
    runner = StandInRunner()
    result = autosched.auto_schedule(task, trials=trials, measure_batch=4, log_file=str(log), cost_model=StandInModel(),
                                     search_params=SearchParams(population=16, generations=1, init_min_population=4,
                                                                islands=1),
                                     builder=StandInBuilder(), runner=runner, verbose=0, **kwargs)
    return result, runner.proposed


@pytest.mark.parametrize("content", ["my notes\nabout tuning, no newline at the end",
                                     '{\n  "trials": 200,\n  "log": "x.json"\n}',
                                     "0\n", "[1, 2]\n"])
def test_a_file_that_is_not_a_tuning_log_is_refused_before_measuring(task, tmp_path, content):
    path = tmp_path / "notes.txt"
    path.write_text(content)
    with pytest.raises(NotATuningLog, match="is not a tuning log"):
        RecordToFile(path)
    with pytest.raises(NotATuningLog):
        _tune(task, path)
    with pytest.raises(NotATuningLog):
        distill_records([], path)
    assert path.read_text() == content  # not a byte changed


def test_an_unwritable_log_fails_before_the_first_measurement(task, tmp_path):
    with pytest.raises(NotATuningLog, match="is a directory"):
        _tune(task, tmp_path)
    with pytest.raises(OSError, match="cannot append to the tuning log"):
        _tune(task, tmp_path / "no such folder" / "log.jsonl")


def test_a_last_line_without_its_newline_is_kept(task, tmp_path):
    path = tmp_path / "log.jsonl"
    first, second = record(task, tiled(task.dag, 2), 1e-6), record(task, tiled(task.dag, 4), 2e-6)
    for tail in (first.to_json(), "# a note without its newline"):
        path.write_text(first.to_json() + "\n" + tail)
        writer = RecordToFile(path)
        writer.write(second)
        writer.close()
        assert path.read_text() == first.to_json() + "\n" + tail + "\n" + second.to_json() + "\n"


def test_lines_that_are_not_records_are_skipped_with_a_warning_each_and_tuning_goes_on(task, tmp_path):
    path = tmp_path / "log.jsonl"
    good = [record(task, tiled(task.dag, f), 1e-6 * f) for f in (2, 4)]
    bad_steps = json.dumps({**good[0].to_dict(), "steps": 5})
    bad_step = json.dumps({**good[0].to_dict(), "steps": [[1, 2]]})
    nan = json.dumps({**good[0].to_dict(), "costs": [float("nan")]})
    negative = json.dumps({**good[0].to_dict(), "costs": [-1e-6]})
    lines = [good[0].to_json(), "0", "null", "[1, 2]", '"text"', bad_steps, bad_step, nan, negative, good[1].to_json()]
    path.write_text("\n".join(lines) + "\n")
    with pytest.warns(RuntimeWarning) as caught:
        assert read_records(path) == good
    assert len(caught) == 8
    text = " | ".join(str(w.message) for w in caught)
    assert "not a record object" in text and "not a list of step records" in text
    assert "seconds must be finite and positive" in text
    with pytest.warns(RuntimeWarning):  # (no re-timing: the stand-in runner would time the log's programs anew)
        result, _ = _tune(task, path, retime_best=0)
    assert result.state is not None and result.latency == pytest.approx(1e-6 * 2)


def test_a_best_record_that_does_not_replay_is_never_the_best(task, tmp_path):
    path = tmp_path / "log.jsonl"
    good = [record(task, tiled(task.dag, f), 1e-5 * f) for f in (2, 4, 8)]
    broken = json.dumps({**record(task, tiled(task.dag, 16), 1e-9).to_dict(), "steps": [["SP", 9, 0, [4], True]]})
    path.write_text("".join(r.to_json() + "\n" for r in good) + broken + "\n")
    with pytest.warns(RuntimeWarning, match="does not replay"):
        result, proposed = _tune(task, path, trials=4, retime_best=0)  # (the log's made-up costs stay the best)
    assert len(proposed) == 4 and result.state is not None
    assert result.latency <= 2e-5 and result.latency != 1e-9
    with pytest.warns(RuntimeWarning, match="does not replay"):
        with apply_history_best(path, target="any") as history:
            kernel = ir.build(task.dag)
    assert history.applied == [task.workload_key] and str(kernel.state) == str(tiled(task.dag, 2))
    log = RecordToFile(path)
    measurer = ProgramMeasurer(LocalBuilder(), LocalRunner(), preloaded=log.read())
    with pytest.warns(RuntimeWarning, match="does not replay"):
        assert measurer.best_cost(task) == pytest.approx(2e-5)
    assert str(measurer.best_state(task)) == str(tiled(task.dag, 2))


def test_reading_some_workloads_keeps_only_their_records(tmp_path):
    """Lines are picked by a substring test before parsing; a record of another workload
    whose text names the key (in its desc) must not come back as the key's."""
    from autosched.history.records import read_records
    mine = autosched.TuningRecord("key-a", "llvm", (), (1e-3,), desc="")
    other = autosched.TuningRecord("key-b", "llvm", (), (2e-3,), desc="tuned after key-a")
    path = tmp_path / "log.json"
    path.write_text(mine.to_json() + "\n" + other.to_json() + "\n")
    assert [r.workload_key for r in read_records(str(path), workload_keys={"key-a"})] == ["key-a"]
    assert [r.workload_key for r in read_records(str(path))] == ["key-a", "key-b"]
