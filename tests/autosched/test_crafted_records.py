"""Records read from a file someone else wrote: a crafted program (a billion-step unroll,
huge splits, vector widths, stage counts) is refused with one warning before any lowering,
so that replaying it costs bounded time and memory; unknown fields are ignored."""
import json
import subprocess
import sys
import textwrap
import time
import warnings

import pytest

import ir
from autosched import TuningRecord, ops
from autosched.history.base_model import hardware_from_record, training_programs
from autosched.history.records import read_records
from ir.step_limits import StepLimitExceeded

N = 64


def matmul_dag():
    a = ir.placeholder((1, N, N), name="A")
    b = ir.placeholder((1, N, N), name="B")
    k = ir.reduce_axis(N, name="k")
    c = ir.compute((1, N, N), lambda z, i, j: ir.sum(a[z, i, k] * b[z, k, j], axis=k), name="C")
    return ir.ComputeDAG([a, b, c])


def record_of(dag, steps, **extra) -> dict:
    rec = TuningRecord(workload_key=dag.workload_key(), target=ir.host_target(), steps=(), costs=(1e-5,),
                       program="forged").to_dict()
    rec["steps"] = steps
    rec.update(extra)
    return rec


#: crafted programs of matmul_dag (stage 2 is C), each over one cap
CRAFTED = {
    "billion-step unroll": [["PR", 2, 1000000000]],
    "wide vector": [["SP", 2, 1, [N], True], ["FU", 2, [1, 2, 3]], ["AN", 2, 1, "vectorize"]],
    "unrolled nest": [["AN", 2, 1, "unroll"], ["AN", 2, 2, "unroll"], ["AN", 2, 3, "unroll"]],
    "many stages": [["CHW", 2, "local"]] * 100,
    "many steps": [["AN", 2, 0, "none"]] * 5000,
    "a number too large": [["SP", 2, 1, [10 ** 40], True]],
    "a long list": [["RE", 2, list(range(1000))]],
}


@pytest.mark.parametrize("name", sorted(CRAFTED))
def test_a_crafted_program_is_refused_before_lowering(name):
    dag = matmul_dag()
    rec = TuningRecord.from_dict(record_of(dag, CRAFTED[name]))
    t0 = time.perf_counter()
    with pytest.raises(StepLimitExceeded):
        rec.state(dag)
    assert time.perf_counter() - t0 < 2.0


def test_the_caps_leave_the_searchs_programs_alone():
    dag = matmul_dag()
    steps = [["SP", 2, 1, [8], True], ["SP", 2, 3, [16], True], ["PR", 2, 512], ["AN", 2, 4, "vectorize"]]
    state = TuningRecord.from_dict(record_of(dag, steps)).state(dag)
    assert len(state.steps) == 4


def test_a_split_length_over_the_extent_is_clamped_by_replay():
    """A huge split length costs nothing: the split loop is as long as the loop it splits."""
    dag = matmul_dag()
    steps = [["SP", 2, 2, [1000000000], True], ["AN", 2, 3, "vectorize"]]
    state = TuningRecord.from_dict(record_of(dag, steps)).state(dag)
    assert [it.extent for it in state.stages[2].iters] == [1, N, 1, N, N]


FORGED_RUN = textwrap.dedent('''
    import resource, sys, time, warnings
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
    sys.path.insert(0, sys.argv[2])
    import ir
    from autosched import apply_history_best
    from tests.autosched.test_crafted_records import matmul_dag
    dag = matmul_dag()
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with apply_history_best(sys.argv[1], base_model=None) as history:
            kernel = ir.build(dag)
    print(len(history.fallbacks), sum("is skipped" in str(w.message) for w in caught),
          round(time.perf_counter() - t0, 1))
''')


def test_apply_history_best_of_a_forged_log_costs_bounded_time_and_memory(tmp_path):
    """The issue's case: ``["PR", 2, 1000000000]`` ran to 6.6 GB; every crafted record is
    now skipped with one warning each, and the naive program is built, under 2 GiB of
    address space and in seconds."""
    dag = matmul_dag()
    log = tmp_path / "forged.json"
    log.write_text("".join(json.dumps(record_of(dag, steps, costs=[1e-6 * (i + 1)], program=f"forged{i}")) + "\n"
                           for i, steps in enumerate(CRAFTED.values())))
    root = str(__import__("pathlib").Path(__file__).resolve().parents[2])
    proc = subprocess.run([sys.executable, "-c", FORGED_RUN, str(log), root], capture_output=True, text=True,
                          timeout=120, cwd=root)
    assert proc.returncode == 0, proc.stderr[-2000:]
    fallbacks, refused, seconds = proc.stdout.split()
    assert int(fallbacks) == 1 and int(refused) == len(CRAFTED)
    assert float(seconds) < 30


def test_a_hardware_field_of_a_newer_version_is_ignored(tmp_path):
    """The issue's case: one such line in the records database made every tuning fail at
    start (``HardwareParams.__init__() got an unexpected keyword argument``)."""
    dag = ir.ComputeDAG(ops.suite_workload("GMM-1x64x64x64").tensors)
    hardware = dict(num_cores=2, vector_lanes=16, l3_cache_bytes=1 << 25)
    assert hardware_from_record(hardware) == ir.HardwareParams(num_cores=2, vector_lanes=16)
    assert hardware_from_record({"vector_lanes": 16}) is None          # a required field missing
    assert hardware_from_record("junk") is None
    log = tmp_path / "db.jsonl"
    line = record_of(dag, [["SP", 2, 1, [8], True]], hardware=hardware, a_field_from_the_future=[1, 2],
                     desc="GMM-1x64x64x64")
    log.write_text(json.dumps(line) + "\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        records = read_records(log)
    [(task, state, cost)] = training_programs(records)
    assert task.hardware == ir.HardwareParams(num_cores=2, vector_lanes=16) and cost == pytest.approx(1e-5)


def test_files_that_are_not_regular_are_refused_before_they_are_read(tmp_path):
    """A device reads forever (the issue's ``--records-db /dev/full`` ran to 24 GB), a FIFO
    blocks: both are refused from their metadata, before a byte is read."""
    import os
    from autosched import NotATuningLog, RecordToFile
    from autosched.files import UnreadableFile, read_bounded
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    devices = [str(fifo)] + [d for d in ("/dev/full", "/dev/zero") if os.path.exists(d)]
    for path in devices:
        with pytest.raises(UnreadableFile, match="expected a regular file"):
            read_records(path)
        with pytest.raises(NotATuningLog, match="not a regular file"):
            RecordToFile(path)
    big = tmp_path / "big.json"
    big.write_bytes(b"#" * 2048)
    with pytest.raises(UnreadableFile, match="2048 bytes, over the 1024 bytes a tuning log may have"):
        read_bounded(big, "tuning log", 1024)


def test_a_record_line_over_the_cap_is_skipped_with_a_warning(tmp_path, monkeypatch):
    import autosched.history.records as R
    monkeypatch.setattr(R, "MAX_RECORD_LINE_BYTES", 4096)
    dag = matmul_dag()
    log = tmp_path / "log.json"
    good = json.dumps(record_of(dag, [["SP", 2, 1, [8], True]]))
    log.write_text(good + "\n" + json.dumps(record_of(dag, [["AN", 2, 0, "none"]] * 400)) + "\n")
    with pytest.warns(RuntimeWarning, match="line 2 has .* characters, over the 4096"):
        assert len(read_records(log)) == 1
