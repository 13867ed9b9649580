"""Tune the training workloads of the shipped base cost model and keep their records.

    python bench/training_records.py --trials 128 --log-dir bench/.cache/training
    python bench/training_records.py --list          # the workloads, one a line

The base model that ships inside the package must rank programs of workloads it has never
seen, so it is trained on records of *other* shapes than those the benchmarks evaluate:
no shape of the operator suite (``autosched list``: every workload of bench/tune_ops.py
and bench/vs_metaschedule.py) and no task of the zoo's ResNet-50 (the zero-trial network
benchmark). ``TRAINING_WORKLOADS`` below is that list; ``check_disjoint`` enforces it.
Each workload is tuned as a user would (random programs first, then the search), so the
log holds both random and good programs, which is what a model must tell apart.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

import ir  # noqa: E402
import autosched  # noqa: E402
from autosched import ops  # noqa: E402

#: suite-style names (any shape of a family parses) and operator workloads, chosen to cover
#: every family of the suite at shapes it does not hold
SUITE_STYLE = [
    "GMM-1x256x256x256", "GMM-1x768x384x512", "GMM-1x64x1024x256", "GMM-4x128x128x64",
    "C1D-1x128x64x64-k3s1p1", "C1D-1x256x32x128-k5s2p2",
    "C2D-1x28x28x96x96-k3s1p1", "C2D-1x56x56x48x96-k3s2p1", "C2D-1x14x14x192x384-k1s1p0",
    "C2D-1x7x7x384x384-k3s1p1", "C2D-1x112x112x3x32-k3s2p1", "C2D-1x28x28x160x64-k1s1p0",
    "C3D-1x8x28x28x32x32-k3s1p1",
    "GRP-1x28x28x128x128-k3s1p1g8", "GRP-1x56x56x32x64-k3s2p1g2",
    "DIL-1x28x28x64x64-k3s1p1d2",
    "DEP-1x56x56x96-k3s1p1", "DEP-1x28x28x192-k3s2p1", "DEP-1x14x14x384-k3s1p1", "DEP-1x112x112x16-k3s1p1",
    "T2D-1x8x8x128x64-k4s2p1", "T2D-1x16x16x64x32-k4s2p1", "T2D-1x4x4x256x128-k4s2p1",
    "CAP-1x8x8x16x32-k3s1p1",
    "NRM-1x128x512", "NRM-1x2048x256",
    "CBR-1x28x28x64x96-k3s1p1", "CBR-1x14x14x128x256-k3s2p1",
    "TBS-1x64x8x64", "TBS-1x128x4x32",
]
OPERATOR_STYLE = {
    "dense-64x768x3072-bias": ("dense", (64, 768, 3072), {"bias": True}),
    "dense-1x1024x1000": ("dense", (1, 1024, 1000), {}),
    "softmax-64x500": ("softmax", ((64, 500),), {}),
    "softmax-8x128x128": ("softmax", ((8, 128, 128),), {}),
    "layer_norm-128x768": ("layer_norm", ((128, 768),), {}),
    "layer_norm-256x512": ("layer_norm", ((256, 512),), {}),
}


def training_workloads() -> dict[str, ops.Workload]:
    out = {name: ops.suite_workload(name) for name in SUITE_STYLE}
    for label, (op, args, kwargs) in OPERATOR_STYLE.items():
        out[label] = ops.workload(op, *args, **kwargs)
    return out


def evaluated_keys() -> dict[str, str]:
    """Workload key -> name of every computation a benchmark evaluates: the whole operator
    suite and ResNet-50's tasks."""
    keys = {ir.ComputeDAG(ops.suite_workload(n).tensors).workload_key(): n for n in ops.suite_names()}
    part = autosched.graph.partition(autosched.graph.get_network("resnet50", batch=1))
    for task in part.tasks:
        keys[task.dag.workload_key()] = f"resnet50 task {task.desc or ''}"
    return keys


def check_disjoint(workloads: dict) -> None:
    evaluated = evaluated_keys()
    clash = {name: evaluated[key] for name, w in workloads.items()
             if (key := ir.ComputeDAG(w.tensors).workload_key()) in evaluated}
    if clash:
        raise SystemExit(f"training workloads that a benchmark evaluates: {clash}")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, parents=[common.bench_args()],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=128)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--log-dir", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                          ".cache", "training"))
    parser.add_argument("--list", action="store_true", help="print the training workloads and exit")
    parser.add_argument("--workloads", nargs="*", default=None, help="a subset, by label")
    args = parser.parse_args(argv)
    workloads = training_workloads()
    if args.list:
        for name in workloads:
            print(name)
        return
    check_disjoint(workloads)
    if args.smoke:
        args.trials, args.batch, args.workloads = 4, 4, ["NRM-1x128x512"]
    names = args.workloads or list(workloads)
    os.makedirs(args.log_dir, exist_ok=True)
    table = common.Table(["workload", "trials", "best GFLOPS", "seconds"])
    rows = []
    for name in names:
        t0 = time.perf_counter()
        result = autosched.auto_schedule(ir.ComputeDAG(workloads[name].tensors), trials=args.trials,
                                         measure_batch=args.batch, seed=args.seed,
                                         log_file=os.path.join(args.log_dir, f"{name}.json"), verbose=1)
        seconds = time.perf_counter() - t0
        table.add(name, result.trials, result.gflops, seconds)
        rows.append(common.json_row(name, result.gflops, trials=result.trials, tuning_s=seconds))
        print(f"{name}: {result.gflops:.1f} GFLOPS after {result.trials} trials, {seconds:.0f} s", flush=True)
    if not args.json_only:
        table.print()
    common.emit_json("training_records", rows)


if __name__ == "__main__":
    main()
