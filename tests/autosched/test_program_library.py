"""The program library: the fastest measured programs of tuning logs' workloads, offered to
the zero-trial choice of tasks of the same operator family. Built from records, written and
read back, refused with a clear message when damaged; its programs adapted to a task compute
what the task says (checked against numpy)."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import ir
from autosched import ops
from autosched.history import program_library as L
from autosched.history.records import TuningRecord
from autosched.history.zero_trial import ZeroTrial, shared_in_family
from evolution import RandomModel, SearchParams, SketchPolicy

HARDWARE = {"num_cores": 2, "vector_lanes": 16, "cache_line_bytes": 64, "max_innermost_split_factor": 64,
            "max_vectorize_size": 64}


def _dense(rows=24, k=64, n=96):
    w = ops.workload("dense_chain", (1, rows), k, n, epilogue="bias-relu", label=f"dense_chain-1x{rows}x{k}x{n}")
    return w, ir.SearchTask(ir.ComputeDAG(w.tensors), layout_rewrite=True)


def _programs(task, n, seed=0):
    """``n`` distinct sampled programs of ``task``."""
    policy = SketchPolicy(task, RandomModel(), SearchParams(population=4 * n, init_min_population=4 * n, islands=1),
                          seed=seed)
    out = {}
    for state in policy.sample_initial():
        out.setdefault(state.key, state)
    assert len(out) >= n
    return list(out.values())[:n]


def _record(task, state, cost, target="llvm -mcpu=znver5", lanes=16, error_no=0):
    return TuningRecord(workload_key=task.workload_key, desc=task.desc, target=target,
                        hardware=dict(HARDWARE, vector_lanes=lanes), layout_rewrite=task.layout_rewrite,
                        program=state.key[:20], steps=tuple(s.record() for s in state.steps),
                        costs=(cost,) if error_no == 0 else (), error_no=error_no)


@pytest.fixture(autouse=True)
def _known(monkeypatch):
    """The test's workloads are ones autosched can rebuild from their keys."""
    from autosched.history import base_model
    dags = {}
    for rows, n in ((24, 96), (40, 160)):
        w, task = _dense(rows, n=n)
        dags[task.workload_key] = task.dag
    monkeypatch.setattr(base_model, "_known_dags", lambda: dags)


def test_the_library_keeps_the_fastest_distinct_programs_of_each_workload_and_lanes():
    _, task = _dense()
    states = _programs(task, 6)
    records = [_record(task, s, cost) for s, cost in zip(states, (5.0, 1.0, 3.0, 2.0, 4.0, 0.5))]
    records.append(_record(task, states[5], 0.1, target="llvm -mcpu=znver3", lanes=8))   # another vector width
    records.append(_record(task, states[0], 0.01, error_no=2))                        # a failed measurement
    library, info = L.build_library(records, per_workload=3, lanes=16)
    assert info["workloads"] == 1 and info["programs"] == 3
    (entry,) = library["programs"]
    want = [states[i] for i in (5, 1, 3)]                      # 0.5, 1.0, 2.0 s
    assert [ir.State.from_steps(task.dag, s).key for s in entry["steps"]] == [s.key for s in want]
    eight, _ = L.build_library(records, per_workload=3, lanes=8)
    assert [ir.State.from_steps(task.dag, s).key for s in eight["programs"][0]["steps"]] == [states[5].key]


def test_a_workload_measured_on_two_cpus_takes_each_ones_fastest_in_turn():
    _, task = _dense()
    states = _programs(task, 4)
    records = [_record(task, states[0], 1.0, "llvm -mcpu=znver4"), _record(task, states[1], 2.0, "llvm -mcpu=znver4"),
               _record(task, states[2], 9.0, "llvm -mcpu=znver5"), _record(task, states[3], 10.0, "llvm -mcpu=znver5")]
    library, _ = L.build_library(records, per_workload=2)
    got = [ir.State.from_steps(task.dag, s).key for s in library["programs"][0]["steps"]]
    assert got == [states[0].key, states[2].key]               # not the two of the faster machine


def test_a_library_is_written_and_read_back(tmp_path):
    _, task = _dense()
    states = _programs(task, 3)
    library, _ = L.build_library([_record(task, s, c) for s, c in zip(states, (3.0, 1.0, 2.0))])
    path = tmp_path / "lib.json"
    L.save_library(library, path)
    loaded = L.load_program_library(str(path))
    (entry,) = loaded.entries
    assert entry.workload_key == task.workload_key and entry.layout_rewrite and len(entry.programs) == 3
    assert [ir.State.from_steps(task.dag, s).key for s in entry.programs] == \
        [states[1].key, states[2].key, states[0].key]
    assert L.load_program_library("off") is None


@pytest.mark.parametrize("text, says", [
    ("{not json", "not JSON"),
    ('{"programs": []}', "not an autosched program library"),
    ('{"autosched_program_library": 1, "kind": "llvm", "programs": {}}', "no list of programs"),
    ('{"autosched_program_library": 1, "kind": "llvm", "programs": [{"label": ""}]}', "no 'workload_key' field"),
    ('{"autosched_program_library": 1, "kind": "llvm", "programs": [{"label": 1, "workload_key": "k", '
     '"layout_rewrite": true, "steps": []}]}', "must be strings"),
    ('{"autosched_program_library": 1, "kind": "llvm", "programs": [{"label": "", "workload_key": "k", '
     '"layout_rewrite": true, "steps": [[["SP", 2]], 7]}]}', "not a list of step records"),
])
def test_a_damaged_library_is_refused_with_what_is_wrong(tmp_path, text, says):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=says):
        L.load_program_library(str(path))
    with pytest.raises(FileNotFoundError, match="no program library"):
        L.load_program_library(str(tmp_path / "missing.json"))


def test_a_library_file_over_its_cap_is_not_read(tmp_path, monkeypatch):
    path = tmp_path / "big.json"
    path.write_text(" " * 2048)
    monkeypatch.setattr(L, "MAX_LIBRARY_BYTES", 1024)
    with pytest.raises(ValueError, match="over the 1024 bytes"):
        L.load_program_library(str(path))


def test_sources_are_the_nearest_workloads_of_the_family_and_none_elsewhere():
    _, near = _dense(24, n=96)
    _, far = _dense(40, n=160)
    records = [_record(t, s, 1.0 + i) for t in (near, far) for i, s in enumerate(_programs(t, 2))]
    library = L.ProgramLibrary.from_json(json.dumps(L.build_library(records)[0]))
    _, task = _dense(28, n=112)
    assert [s.dag.workload_key() for s in library.sources(task, 1)] == [near.workload_key] * 2
    assert len(library._states) == 1          # only the workload offered was replayed
    assert len(library.sources(task, 2)) == 4 and len(library._states) == 2
    assert library.sources(task, 0) == []
    conv = ops.workload("conv2d_chain", 1, 8, 8, 16, 32, 3, epilogue="bias-relu")
    assert library.sources(ir.SearchTask(ir.ComputeDAG(conv.tensors)), 8) == []   # another family
    assert L.ProgramLibrary(library.entries, kind="cuda").sources(task, 8) == []   # another target kind


def test_a_library_program_over_the_caps_of_steps_read_from_a_file_is_left_out():
    _, task = _dense()
    good = next(s for s in _programs(task, 16) if any(st.record()[0] == "PR" for st in s.steps))
    library, _ = L.build_library([_record(task, good, 1.0)])
    steps = library["programs"][0]["steps"]
    steps.append([[*r[:2], 10 ** 6] if r[0] == "PR" else r for r in steps[0]])   # auto-unroll far over the cap
    ir.State.from_steps(task.dag, steps[1])                     # (which replays, unchecked)
    loaded = L.ProgramLibrary.from_json(json.dumps(library))
    assert [s.key for s in loaded.sources(task, 8)] == [good.key]


class _CountsSteps:
    """A stand-in model that ranks a program by its number of steps."""

    def predict(self, task, states):
        return np.array([float(len(s.steps)) for s in states])


def test_a_task_takes_a_library_program_fitted_to_it_where_the_model_ranks_it_first():
    _, source = _dense(40, n=160)
    good = max(_programs(source, 8), key=lambda s: len(s.steps))
    library = L.ProgramLibrary.from_json(json.dumps(L.build_library([_record(source, good, 1.0)])[0]))
    w, task = _dense(24, n=96)
    naive = ir.State.initial(task.dag)
    out = shared_in_family([task], {task.workload_key: naive}, _CountsSteps(), library)
    got = out[task.workload_key]
    assert got.key != naive.key and [type(s) for s in got.steps] == [type(s) for s in good.steps]
    assert shared_in_family([task], {task.workload_key: naive}, _CountsSteps())[task.workload_key] is naive
    rng = np.random.default_rng(3)
    inputs, outputs = w.random_inputs(rng), w.output_buffers()
    kernel = ir.build(task.dag, got, layout_rewrite=True)
    kernel(*[kernel.pack(t.name, a) if t.name in kernel.layouts else a for t, a in zip(task.dag.inputs, inputs)],
           *outputs)
    np.testing.assert_allclose(outputs[0], w.reference(inputs)[0], rtol=1e-4, atol=1e-4)


def test_the_shipped_libraries_rebuild_and_replay(monkeypatch):
    monkeypatch.undo()                                   # the real workloads autosched can name
    for lanes, path in L.SHIPPED_LIBRARIES.items():
        library = L.load_program_library(path)
        assert library.kind == "llvm" and len(library.entries) >= 40, path
        families = library._by_family()
        replayed = sum(len(library._replayed(index, dag)) for members in families.values()
                       for _, _, index, dag in members)
        assert replayed == sum(len(e.programs) for e in library.entries), path   # every program replays
        assert {"dense", "conv2d_nhwc", "depthwise_conv2d_nhwc"} <= set(families), path


def test_zero_trial_loads_the_library_of_the_hardware_unless_off(monkeypatch):
    monkeypatch.delenv(L.ENV_VAR, raising=False)
    from autosched.history.base_model import SHIPPED_MODEL
    for lanes in (8, 16):                                  # AVX2, AVX-512
        hardware = ir.HardwareParams(num_cores=2, vector_lanes=lanes)
        library = ZeroTrial.from_spec(SHIPPED_MODEL, records_db=None, hardware=hardware).library
        assert library is L.load_program_library(L.SHIPPED_LIBRARIES[lanes]) and library.entries
        assert ZeroTrial.from_spec(SHIPPED_MODEL, records_db=None, hardware=hardware, library="off").library is None
    assert L.library_path("default", ir.HardwareParams(num_cores=2, vector_lanes=4)) is None   # no library


def test_the_cli_writes_a_library_and_says_so_in_one_line_when_it_cannot(tmp_path):
    name = "GMM-1x32x48x64"                               # rebuilt from its name in another process
    task = ir.SearchTask(ir.ComputeDAG(ops.suite_workload(name).tensors), desc=name)
    states = _programs(task, 2)
    log = tmp_path / "log.json"
    log.write_text("".join(_record(task, s, 1.0 + i).to_json() + "\n" for i, s in enumerate(states)))
    out = tmp_path / "lib.json"
    env = dict(os.environ, AUTOSCHED_RECORDS_DB="off")
    run = subprocess.run([sys.executable, "-m", "autosched", "library", str(log), "-o", str(out)],
                         capture_output=True, text=True, env=env)
    assert run.returncode == 0, run.stderr
    assert "2 programs of 1 workload(s)" in run.stdout
    (entry,) = L.load_program_library(str(out)).entries
    assert [ir.State.from_steps(task.dag, s).key for s in entry.programs] == [s.key for s in states]
    out.unlink()
    run = subprocess.run([sys.executable, "-m", "autosched", "library", str(log), "-o", str(out), "--lanes", "8"],
                         capture_output=True, text=True, env=env)
    assert run.returncode == 2 and "no valid measurement on CPUs of 8 vector lanes" in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1 and not out.exists()
