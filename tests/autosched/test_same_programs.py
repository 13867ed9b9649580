"""Refactoring the tuning loop must not change what it proposes: a seeded tuning of a small
matmul (fresh, then resumed from its log) and of a two-task network, under a stand-in cost
model and a stand-in measurement (both pure functions of the printed program), proposes
the same programs, in the same order, as the code did when ``data/same_programs.json``
was written. (Without the re-timing a tuning ends with: it proposes nothing.)

Regenerate the data only for an intended change of the search:
``PYTHONPATH=. python tests/autosched/test_same_programs.py --write``.
"""
import json
import os
import sys

import autosched
import ir
from autosched import ops
from autosched import graph as G
from evolution import SearchParams
from tests.autosched.stand_ins import StandInBuilder, StandInModel, StandInRunner

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "same_programs.json")
HW = ir.HardwareParams(num_cores=2, vector_lanes=16)
PARAMS = SearchParams(population=48, generations=2, init_min_population=12, islands=1)


def _matmul_run(log: str, trials: int, seed: int) -> list[str]:
    w = ops.workload("matmul", 32, 48, 64)
    task = ir.SearchTask(ir.ComputeDAG(w.tensors), hardware=HW)
    runner = StandInRunner()
    autosched.auto_schedule(task, trials=trials, measure_batch=8, log_file=log, seed=seed,
                            cost_model=StandInModel(), search_params=PARAMS, builder=StandInBuilder(),
                            runner=runner, verbose=0, base_model=None, records_db=None, retime_best=0)
    return runner.proposed


def _network():
    b = G.GraphBuilder("two_dense", seed=0)
    x = b.input((4, 24))
    y = b.dense(b.relu(b.dense(x, 32)), 16)
    return b.graph([y])


def _network_run(log: str, trials: int, seed: int) -> list[str]:
    runner = StandInRunner()
    autosched.tune_networks(_network(), trials=trials, measure_batch=8, log_file=log, seed=seed,
                            cost_model=StandInModel(), search_params=PARAMS, builder=StandInBuilder(),
                            runner=runner, hardware=HW, verbose=0, base_model=None, records_db=None,
                            retime_best=0)
    return runner.proposed


def proposals(tmp_dir: str) -> dict:
    mm_log, net_log = os.path.join(tmp_dir, "mm.jsonl"), os.path.join(tmp_dir, "net.jsonl")
    return {"matmul": _matmul_run(mm_log, 40, 0), "matmul resumed": _matmul_run(mm_log, 24, 1),
            "network": _network_run(net_log, 40, 0), "network resumed": _network_run(net_log, 16, 1)}


def test_tuning_proposes_the_same_programs_as_before(tmp_path):
    with open(DATA) as f:
        want = json.load(f)
    got = proposals(str(tmp_path))
    for name in want:
        assert got[name] == want[name], f"{name}: the search proposes other programs than before"


if __name__ == "__main__" and "--write" in sys.argv:
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        data = proposals(d)
    os.makedirs(os.path.dirname(DATA), exist_ok=True)
    with open(DATA, "w") as f:
        json.dump(data, f, indent=0)
    print({k: len(v) for k, v in data.items()})
