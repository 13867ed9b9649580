"""bench/soak.py: a kernel that is wrong is caught, and the smoke run keeps the JSON contract
(every kernel verified, nothing escaped, no candidate rejected)."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np

import ir
from autosched import ops

from .test_bench_common import ROOT, _load

soak = _load("soak")


def test_check_kernel_catches_a_wrong_kernel():
    w = ops.suite_workload("GMM-1x128x128x128")
    task = ir.SearchTask(ir.ComputeDAG(w.tensors))
    kernel = ir.build(task.dag)
    assert soak.check_kernel(w, task, kernel, seed=1) is None

    def wrong(*args):
        kernel(*args)
        args[-1][0, 0] += 1.0

    wrong.layouts, wrong.pack = kernel.layouts, kernel.pack
    assert "differs from the reference" in soak.check_kernel(w, task, wrong, seed=1)


def test_smoke_run_verifies_its_kernels():
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "soak.py"), "--smoke", "--json-only"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    (row,) = json.loads(proc.stdout.strip().splitlines()[-1])["rows"]
    assert row["verified"] and row["escaped"] is None and row["search_rejected"] == {}
    assert row["trials"] == 6 and np.isfinite(row["ours_gflops"]) and row["ours_gflops"] > 0
