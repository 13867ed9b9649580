"""A third target is a new folder and one registration: a "cpu-copy" back end (the CPU's
pieces under a new kind, with a search space and mutations of its own) written to a folder
outside the repository, tuned end to end (trials=2, measured in worker processes, which
import it from the pickled task's target) in a fresh interpreter, checked against numpy."""
import json
import os
import pickle
import subprocess
import sys
import textwrap

import pytest

import ir

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PLUGIN = '''
"""A third target: this CPU's back end under a new kind, with a search space of its own."""
from dataclasses import replace

import evolution
import sketch_rules
from ir.cpu.backend import CPUBackend
from ir.target import register_backend


class CPUCopyBackend(CPUBackend):
    name, aliases = "cpu-copy", ("cpu2",)
    search_space = "cpu-copy"

    def spelling(self, target):
        return f"cpu-copy -mcpu={target.device}"


register_backend(CPUCopyBackend())
sketch_rules.register_search_space(replace(sketch_rules.CPU_SPACE, name="cpu-copy"))
evolution.register_mutations("cpu-copy", evolution.cpu_mutations)
'''

TUNE = '''
import numpy as np
import autosched, evolution, ir, sketch_rules
import cpu_copy
from autosched import ops

target = ir.Target.parse("cpu2")
assert target.kind == "cpu-copy" and str(target).startswith("cpu-copy -mcpu=")
assert ir.Target.parse(str(target)) == target
w = ops.workload("matmul", 16, 24, 8)
task = ir.SearchTask(ir.ComputeDAG(w.tensors), target=target)
assert sketch_rules.search_space(task).name == "cpu-copy"
assert {m.name for m in evolution.mutations_for(task)} == {m.name for m in evolution.cpu_mutations()}
result = autosched.auto_schedule(task, trials=2, measure_batch=2, seed=0, log_file="tune.json", base_model=None,
                                 records_db=None, retime_best=0, verbose=0,
                                 search_params=evolution.SearchParams(population=32, generations=1, islands=1))
assert result.trials == 2 and not result.measure_errors, result.measure_errors
inputs, outputs = w.random_inputs(np.random.default_rng(0)), w.output_buffers()
result.kernel(*inputs, *outputs)
np.testing.assert_allclose(outputs[0], w.reference(inputs)[0], rtol=1e-4, atol=1e-4)
print("tuned", result.state is not None)
'''


def test_a_third_target_is_a_folder_and_one_registration(tmp_path):
    (tmp_path / "cpu_copy").mkdir()
    (tmp_path / "cpu_copy" / "__init__.py").write_text(textwrap.dedent(PLUGIN))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), ROOT, os.environ.get("PYTHONPATH", "")]))
    run = subprocess.run([sys.executable, "-c", TUNE], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "tuned True" in run.stdout
    records = [json.loads(line) for line in (tmp_path / "tune.json").read_text().splitlines()]
    assert len(records) == 2
    assert all(r["target"].startswith("cpu-copy -mcpu=") and r["error_no"] == 0 for r in records), records


def test_a_pickled_target_names_its_back_end():
    for target in (ir.Target.host(), ir.Target.parse("cuda -arch=sm_80")):
        assert pickle.loads(pickle.dumps(target)) == target
    stray = ir.Target("no-such-kind", ir.Target.host().hardware)
    with pytest.raises(ValueError, match="'no-such-kind' has no back end in this process"):
        str(stray)
