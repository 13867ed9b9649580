"""Soak test of the tuner: tune ten suite workloads (fused subgraphs included) back to back
with real measurement, and show that nothing kills a run. Per workload: trials done,
candidates rejected by kind (measurement errors, and candidates the search left out
because making them raised: there should be none), the best GFLOPS, and whether the
returned kernel matches numpy's reference on fresh inputs.

    python bench/soak.py --trials 300                      # the ten workloads, 300 trials each
    python bench/soak.py --trials 20 --workloads GMM-1x128x128x128 CBR-1x28x28x128x256-k1s2p0

Exits with status 1 if an exception escaped a tuning or a returned kernel was wrong.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import traceback

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

import ir  # noqa: E402
import autosched  # noqa: E402
from autosched import ops  # noqa: E402
from autosched.measure import verify  # noqa: E402
from evolution import SearchParams  # noqa: E402

#: ten suite workloads of every family with a reduction, three of them fused subgraphs
#: (CBR: conv + bias + batch norm + ReLU; TBS: transposes + batch matmul + softmax; NRM:
#: square-sum + sqrt), sized so that 300 trials of each take minutes, not hours
WORKLOADS = ["GMM-1x512x512x512", "C1D-1x256x64x128-k3s2p1", "C2D-1x14x14x256x256-k3s1p1",
             "GRP-1x14x14x256x256-k3s1p1g4", "DEP-1x14x14x512-k3s2p1", "T2D-1x4x4x512x256-k4s2p1",
             "CAP-1x8x8x16x16-k3s1p1", "NRM-1x256x256", "CBR-1x28x28x128x256-k1s2p0", "TBS-1x64x12x128"]


def check_kernel(w, task, kernel, seed: int) -> str | None:
    """None if ``kernel`` computes what numpy's reference does on fresh random inputs (within
    the measurement's tolerance); otherwise what differs."""
    inputs = w.random_inputs(np.random.default_rng(seed))
    args = [kernel.pack(t.name, a) if t.name in kernel.layouts else a for t, a in zip(task.dag.inputs, inputs)]
    outputs = w.output_buffers()
    kernel(*args, *outputs)
    want = [np.asarray(x) for x in w.reference(inputs)]
    return verify.compare(outputs, verify.reference_of(task.dag, inputs, want))


def soak(name: str, args, log_dir: str) -> dict:
    """Tune one workload; the row of the table (an escaped exception is reported, not raised)."""
    w = ops.suite_workload(name)
    task = ir.SearchTask(ir.ComputeDAG(w.tensors), desc=name)
    params = SearchParams(population=args.population, generations=args.generations)
    t0 = time.perf_counter()
    try:
        result = autosched.auto_schedule(task, trials=args.trials, measure_batch=args.batch, seed=args.seed,
                                         log_file=os.path.join(log_dir, f"{name}.jsonl"), search_params=params,
                                         verbose=args.verbose)
    except Exception as err:  # noqa: BLE001 - what this benchmark looks for
        traceback.print_exc()
        return {"name": name, "escaped": f"{type(err).__name__}: {err}", "seconds": time.perf_counter() - t0}
    wrong = check_kernel(w, task, result.kernel, args.seed + 1) if result.kernel is not None else "no kernel"
    return {"name": name, "trials": result.trials, "gflops": result.gflops if result.state is not None else None,
            "errors": result.measure_errors, "rejected": result.search_rejected, "wrong": wrong,
            "escaped": None, "seconds": time.perf_counter() - t0}


def _kinds(counts: dict) -> str:
    return ", ".join(f"{n} {kind}" for kind, n in sorted(counts.items())) or "-"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, parents=[common.bench_args()],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=300)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--workloads", nargs="*", default=None, help="suite names (default: the ten of WORKLOADS)")
    parser.add_argument("--population", type=int, default=2048)
    parser.add_argument("--generations", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--log-dir", default=None, help="keep the tuning logs here (default: a temporary folder)")
    parser.add_argument("--verbose", type=int, default=0, help="1: the progress line of each tuning")
    args = parser.parse_args(argv)
    names = args.workloads or WORKLOADS
    if args.smoke:
        args.trials, args.batch, args.population, args.generations = 6, 3, 32, 1
        names = ["GMM-1x128x128x128"]
    table = common.Table(["workload", "trials", "best GFLOPS", "measurement errors", "search rejected",
                          "kernel", "seconds"])
    rows, failed = [], False
    with tempfile.TemporaryDirectory() as tmp:
        log_dir = args.log_dir or tmp
        os.makedirs(log_dir, exist_ok=True)
        for name in names:
            r = soak(name, args, log_dir)
            bad = r["escaped"] is not None or r["wrong"] is not None or bool(r.get("rejected"))
            failed |= bad
            verdict = "verified" if r["escaped"] is None and r["wrong"] is None else \
                f"WRONG: {r['wrong']}" if r["escaped"] is None else f"ESCAPED: {r['escaped']}"
            table.add(name, r.get("trials"), r.get("gflops"), _kinds(r.get("errors", {})),
                      _kinds(r.get("rejected", {})), verdict[:60], r["seconds"])
            rows.append(common.json_row(name, r.get("gflops"), trials=r.get("trials"),
                                        measure_errors=r.get("errors"), search_rejected=r.get("rejected"),
                                        verified=r["escaped"] is None and r["wrong"] is None,
                                        escaped=r["escaped"], seconds=r["seconds"]))
            if not args.json_only:
                print(f"# {name}: done in {r['seconds']:.0f} s", flush=True)
    if not args.json_only:
        print(f"\n# soak: {len(names)} workloads, {args.trials} trials each (population {args.population}, "
              f"{args.generations} generations)\n")
        table.print()
        print("\nno exception escaped, every kernel verified" if not failed else "\nFAILED: see the table")
    common.emit_json("soak", rows)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
