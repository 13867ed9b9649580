"""autosched beside TVM MetaSchedule at equal trials, both tuned and re-timed on this machine
in the same run, with numpy and PyTorch timed beside them.

    python bench/vs_metaschedule.py --trials 64 256 [--workloads GMM-512 DEP-112x112x32-3x3 ...]

For every workload that ../shared/metaschedule/ defines and autosched's suite names:
1. autosched tunes it once for each trial count (a run of its own, as a user's: it ends
   by re-timing its best programs in turns, ``auto_schedule(retime_best=)``, and its
   program is the one its log ranks first), with the layout rewrite of constant weights,
   and again without it where the workload has constant weights (MetaSchedule does not
   repack);
2. MetaSchedule tunes it for each trial count (``tvm_ms.py``, in its own venv);
3. every kernel is re-timed back to back in turns: ours in this process beside numpy and
   PyTorch, MetaSchedule's best schedules through ``retime_tvm.py``; the best of the turns
   of each is kept, so a slow spell of the shared machine hits all of them.

MetaSchedule stays out of the project's dependencies: without its venv (``--ms-python``,
default /tmp/ms/bin/python, see ../shared/metaschedule/README.md) its columns are null.
Tuning seconds are wall time: ``auto_schedule``'s run (from its log's timestamps, so that
a resumed log keeps its first run's), ``tune_tir``'s for MetaSchedule.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from tune_ops import numpy_baseline, retime, torch_baseline  # noqa: E402

import ir  # noqa: E402
import autosched  # noqa: E402
from autosched import ops  # noqa: E402
from autosched.history.records import trials_of  # noqa: E402
from autosched.options import RETIME_BEST  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_MS_DIR = os.path.normpath(os.path.join(HERE, "..", "..", "shared", "metaschedule"))

#: MetaSchedule's workload name -> autosched's suite name of the same computation (the
#: shared scripts' SUITE_NAMES, repeated so that this bench runs without TVM's venv)
SUITE_NAMES = {
    "GMM-1024": "GMM-1x1024x1024x1024",
    "GMM-512": "GMM-1x512x512x512",
    "DEP-112x112x32-3x3": "DEP-1x112x112x32-k3s1p1",
    "T2D-4x4x512-256-4x4s2": "T2D-1x4x4x512x256-k4s2p1",
    "NRM-1024x1024": "NRM-1x1024x1024",
    "CBR-56x56x64-128-3x3s2": "CBR-1x56x56x64x128-k3s2p1",
    **{n: n for n in ("C2D-1x224x224x3x64-k7s2p3", "C2D-1x56x56x64x64-k1s1p0", "C2D-1x14x14x256x256-k3s1p1",
                      "C2D-1x7x7x512x512-k3s1p1", "GRP-1x56x56x64x128-k3s2p1g4")},
}


class MetaSchedule:
    """The shared MetaSchedule scripts, run in their own interpreter."""

    def __init__(self, python: str, script_dir: str, work_root: str):
        self.python, self.dir, self.work_root = python, script_dir, work_root

    @property
    def available(self) -> bool:
        return os.path.exists(self.python) and os.path.exists(os.path.join(self.dir, "tvm_ms.py"))

    def _run(self, script: str, args: list[str], out: str) -> list[dict]:
        cmd = [self.python, os.path.join(self.dir, script), *args, "--out", out]
        proc = subprocess.run(cmd, cwd=self.dir, capture_output=True, text=True)
        if proc.returncode != 0:
            print(f"MetaSchedule {script} failed ({proc.returncode}): {proc.stderr[-2000:]}", file=sys.stderr)
        if not os.path.exists(out):
            return []
        with open(out) as f:
            return [json.loads(line) for line in f if line.strip()]

    def _root(self, workload: str) -> str:
        return os.path.join(self.work_root, workload)  # one root per workload: a re-timing sees only it

    def tune(self, workload: str, trials: int, seed: int) -> dict:
        """Tune and return tvm_ms.py's record (``gflops``, ``tuning_s``, ``relerr``, ...).

        The record is kept beside the tuning database: a later run with the same
        ``--ms-work-root`` re-times that database instead of tuning again (tune once, e.g.
        while the machine is busy with something else, then re-time both tuners in a quiet
        window; the record keeps the tuning time of the run that tuned)."""
        kept = os.path.join(self._root(workload), f"record_t{trials}_s{seed}.json")
        if os.path.exists(kept):
            with open(kept) as f:
                return json.load(f)
        with tempfile.TemporaryDirectory() as tmp:
            recs = self._run("tvm_ms.py", ["--trials", str(trials), "--no-default", "--workloads", workload,
                                           "--work-root", self._root(workload), "--seed", str(seed)],
                             os.path.join(tmp, "ms.jsonl"))
        if not recs:
            return {"error": "tvm_ms.py wrote no record"}
        if "error" not in recs[-1]:
            with open(kept, "w") as f:
                json.dump(recs[-1], f)
        return recs[-1]

    def retime(self, workload: str) -> dict[int, float]:
        """Trials -> seconds per call of the best schedule tuned with that many trials,
        re-timed now (median of 7 repeats of at least 200 ms, TVM's time_evaluator)."""
        with tempfile.TemporaryDirectory() as tmp:
            recs = self._run("retime_tvm.py", ["--work-root", self._root(workload)], os.path.join(tmp, "rt.jsonl"))
        return {r["trials_requested"]: r["sec"] for r in recs if r.get("sec") and r.get("relerr", 1.0) < 1e-3}


def has_constant_weights(task: ir.SearchTask) -> bool:
    return any(getattr(t.op, "constant", False) for t in task.dag.inputs)


def trials_in_log(log: str, task: ir.SearchTask) -> int:
    """The trials of ``task`` that ``log`` holds (0 without a log; re-timings do not count)."""
    if not os.path.exists(log):
        return 0
    return sum(r.workload_key == task.workload_key for r in trials_of(autosched.read_records(log)))


def tune_ours(name: str, trials: int, args, layout_rewrite: bool) -> tuple[ir.SearchTask, ir.Kernel | None, float]:
    """Tune with autosched into a log of this workload, variant and trial count, resuming
    it: only the trials it still lacks are measured (``auto_schedule`` spends ``trials``
    more), so a run killed midway and started again ends where one run would, and a log
    already complete is only re-timed; returns (task, kernel of the program the log ranks
    first, tuning wall seconds)."""
    w = ops.suite_workload(name)
    task = ir.SearchTask(ir.ComputeDAG(w.tensors), desc=name, layout_rewrite=layout_rewrite)
    log = os.path.join(args.log_dir, f"{name}{'' if layout_rewrite else '.norewrite'}.t{trials}.json")
    missing = trials - trials_in_log(log, task)
    if missing > 0:
        autosched.auto_schedule(task, trials=missing, measure_batch=args.batch, seed=args.seed, log_file=log,
                                layout_rewrite=layout_rewrite, verbose=1, retime_best=args.retime_best)
    rec = autosched.best_record(log, task.dag)
    if rec is None:
        return task, None, log_seconds(log, task)
    return task, ir.build(task.dag, rec.state(task.dag), layout_rewrite=rec.layout_rewrite), log_seconds(log, task)


def log_seconds(log: str, task: ir.SearchTask) -> float:
    """Wall seconds from the start of the first record of ``task`` in ``log`` to the end of
    its last (trials and re-timings)."""
    records = [r for r in autosched.read_records(log) if r.workload_key == task.workload_key]
    return records[-1].timestamp - (records[0].timestamp - records[0].all_cost) if records else 0.0


def retime_all(w, dag, ours: dict, ms: MetaSchedule | None, ms_name: str, rounds: int) -> tuple[dict, dict, float, float]:
    """Best-of-``rounds`` seconds per call, timed in turns: ours (label -> kernel), numpy,
    PyTorch, and MetaSchedule's schedules (trials -> seconds)."""
    best_ours: dict = {}
    best_ms: dict = {}
    best_np = best_torch = None

    def keep(old, new):
        return new if old is None or (new is not None and new < old) else old

    for _ in range(rounds):
        for label, kernel in ours.items():
            best_ours[label] = keep(best_ours.get(label), retime(kernel, dag, w))
        best_np = keep(best_np, numpy_baseline(w))
        best_torch = keep(best_torch, torch_baseline(w))
        if ms is not None:
            for trials, sec in ms.retime(ms_name).items():
                best_ms[trials] = keep(best_ms.get(trials), sec)
    return best_ours, best_ms, best_np, best_torch


def geomean(values) -> float | None:
    values = [v for v in values if v]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def run(args) -> list[dict]:
    ms = MetaSchedule(args.ms_python, args.ms_dir, args.ms_work_root)
    if not ms.available:
        print(f"MetaSchedule is not installed ({args.ms_python}): its columns are null "
              f"(see {args.ms_dir}/README.md)", file=sys.stderr)
        ms = None
        if args.ms_only:
            raise SystemExit("--ms-only needs MetaSchedule")
    trial_counts = sorted(args.trials)
    table = common.Table(["workload", "trials", "rewrite", "ours GFLOPS", "MS GFLOPS", "vs MS", "our s", "MS s",
                          "numpy", "torch", "vs numpy", "vs torch"])
    rows = []
    for ms_name in args.workloads:
        name = SUITE_NAMES[ms_name]
        w = ops.suite_workload(name)
        print(f"=== {ms_name} ({name})", flush=True)
        if args.ms_only:
            for n in trial_counts:
                print(f"MetaSchedule {ms_name}, {n} trials: {ms.tune(ms_name, n, args.seed)}", flush=True)
            continue
        ours = {}  # (layout_rewrite, trials) -> (kernel, tuning seconds)
        for rewrite in (True, False):
            for n in trial_counts:
                task, kernel, seconds = tune_ours(name, n, args, rewrite)
                if kernel is not None:
                    ours[(rewrite, n)] = (kernel, seconds)
            if not has_constant_weights(task):
                break  # without constant weights there is nothing to repack: one variant
        ms_tuned = {n: ms.tune(ms_name, n, args.seed) for n in trial_counts} if ms is not None else {}
        secs, ms_secs, np_s, torch_s = retime_all(w, task.dag, {k: v[0] for k, v in ours.items()}, ms, ms_name,
                                                  args.rounds)
        numpy_gflops, torch_gflops = common.gflops(w.flops, np_s), common.gflops(w.flops, torch_s)
        for (rewrite, n), (_, tuning_s) in sorted(ours.items(), key=lambda kv: (kv[0][1], not kv[0][0])):
            ours_gflops = common.gflops(w.flops, secs[(rewrite, n)])
            ms_gflops = common.gflops(w.flops, ms_secs.get(n))
            ms_s = ms_tuned.get(n, {}).get("tuning_s")
            table.add(ms_name, n, "yes" if rewrite else "no", ours_gflops, ms_gflops,
                      common.ratio(ours_gflops, ms_gflops), tuning_s, ms_s, numpy_gflops, torch_gflops,
                      common.ratio(ours_gflops, numpy_gflops), common.ratio(ours_gflops, torch_gflops))
            rows.append(common.json_row(name, ours_gflops, numpy_gflops, torch_gflops, metaschedule=ms_name,
                                        trials=n, layout_rewrite=rewrite, metaschedule_gflops=ms_gflops,
                                        vs_metaschedule=common.ratio(ours_gflops, ms_gflops), tuning_s=tuning_s,
                                        metaschedule_tuning_s=ms_s,
                                        metaschedule_error=ms_tuned.get(n, {}).get("error")))
    if not args.json_only:
        table.print()
        print()
        for n in trial_counts:
            for rewrite, label in ((True, "with layout rewrite where it applies"), (False, "without layout rewrite")):
                sel = [r for r in rows if r["trials"] == n and (r["layout_rewrite"] == rewrite or
                                                                 _single_variant(rows, r))]
                speed = geomean(r["vs_metaschedule"] for r in sel)
                ours_s = geomean(r["tuning_s"] for r in sel)
                ms_s = geomean(r["metaschedule_tuning_s"] for r in sel)
                low = min((r["vs_metaschedule"] for r in sel if r["vs_metaschedule"]), default=None)
                print(f"{n} trials, {label}: geomean vs MetaSchedule {_fmt(speed)}x (lowest {_fmt(low)}x); "
                      f"tuning seconds geomean ours {_fmt(ours_s)} vs MS {_fmt(ms_s)}")
    return rows


def _single_variant(rows, row) -> bool:
    """Whether ``row``'s workload was tuned in one variant only (no constant weights)."""
    return sum(1 for r in rows if r["workload"] == row["workload"] and r["trials"] == row["trials"]) == 1


def _fmt(v) -> str:
    return "-" if v is None else f"{v:.2f}"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, parents=[common.bench_args()],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--workloads", nargs="*", default=list(SUITE_NAMES), choices=list(SUITE_NAMES),
                        metavar="NAME", help=f"MetaSchedule workload names (default: all of {list(SUITE_NAMES)})")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--retime-best", type=int, default=RETIME_BEST,
                        help=f"programs of each tuning re-timed in turns at its end (default {RETIME_BEST}; 0: none)")
    parser.add_argument("--rounds", type=int, default=2, help="turns of re-timing; the best of each is kept")
    parser.add_argument("--log-dir", default=None, help="our tuning logs (resumable; default: a temporary folder)")
    parser.add_argument("--ms-python", default=os.environ.get("MS_PYTHON", "/tmp/ms/bin/python"))
    parser.add_argument("--ms-dir", default=DEFAULT_MS_DIR)
    parser.add_argument("--ms-work-root", default=None,
                        help="MetaSchedule's databases (default: temporary); a workload already tuned there "
                             "with the same trials and seed is re-timed, not tuned again")
    parser.add_argument("--ms-only", action="store_true",
                        help="only tune MetaSchedule into --ms-work-root (to re-time it with ours later)")
    args = parser.parse_args(argv)
    if args.smoke:  # CI: our side only, a few trials of the smallest workload
        args.trials, args.workloads, args.batch, args.ms_python = [4], ["NRM-1024x1024"], 4, "/nonexistent"
    with tempfile.TemporaryDirectory() as scratch:
        args.log_dir = args.log_dir or os.path.join(scratch, "ours")
        args.ms_work_root = args.ms_work_root or os.path.join(scratch, "ms")
        os.makedirs(args.log_dir, exist_ok=True)
        rows = run(args)
    common.emit_json("vs_metaschedule", rows)


if __name__ == "__main__":
    main()
