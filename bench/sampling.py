"""The search space without search: how fast programs are sampled, and how good the best
of 64 random programs is (Ansor's "random sampling" baseline), beside numpy and PyTorch
measured in the same run.

    python bench/sampling.py [--smoke] [--samples 64] [--json-only]
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

import autosched  # noqa: E402
import ir  # noqa: E402
import sketch_rules  # noqa: E402
from autosched import ops  # noqa: E402


def sampling_rate(task: ir.SearchTask, sketches, n: int, rng) -> float:
    """Programs per second of ``sample_programs`` (sketch choice + all init rules)."""
    t0 = time.perf_counter()
    states = sketch_rules.sample_programs(task, sketches, n, rng)
    return len(states) / (time.perf_counter() - t0)


def best_of_random(task, states) -> tuple[float, int, int]:
    """Measure every program with autosched's measurer (isolated workers with build and run
    timeouts, each output verified against the naive program): the best seconds, and how
    many programs were valid and how many failed."""
    measurer = autosched.ProgramMeasurer(runner=autosched.LocalRunner(timeout=10))
    try:
        results = measurer.measure(task, states)
    finally:
        measurer.close()
    ok = [r.mean_cost for r in results if r.ok]
    return (min(ok) if ok else float("inf")), len(ok), len(results) - len(ok)


def baselines(name: str, w):
    """numpy and PyTorch seconds for the same computation."""
    inputs = w.random_inputs(np.random.default_rng(0))
    if name.startswith("GMM"):
        a, b = inputs[0][0], inputs[1][0]
        return common.time_numpy(np.matmul, a, b), common.time_torch(lambda x, y: x @ y, a, b)
    torch_s = None
    if common.torch_available():
        import torch
        p = w.params
        data = torch.from_numpy(inputs[0]).permute(0, 3, 1, 2).contiguous(memory_format=torch.channels_last)
        weight = torch.from_numpy(inputs[1]).permute(3, 2, 0, 1).contiguous(memory_format=torch.channels_last)
        torch_s = common.time_torch(
            lambda x, y: torch.nn.functional.conv2d(x, y, stride=p["stride"], padding=p["padding"]), data, weight)
    return None, torch_s


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, parents=[common.bench_args()],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=64, help="random programs per workload (default 64)")
    args = parser.parse_args(argv)
    if args.smoke:
        names, samples = ["GMM-1x64x64x64", "C2D-1x8x8x16x16-k3s1p1"], 4
    else:
        names, samples = ["GMM-1x1024x1024x1024", "C2D-1x56x56x64x64-k3s1p1"], args.samples
    rng = np.random.default_rng(0)
    table = common.Table(["workload", "sketches", "programs/s", "valid", "best GFLOPS", "numpy", "torch",
                          "vs numpy", "vs torch"])
    rows = []
    for name in names:
        w = ops.suite_workload(name)
        task = ir.SearchTask(ir.ComputeDAG(w.tensors))
        sketches = sketch_rules.generate_sketches(task)
        rate = sampling_rate(task, sketches, 256 if not args.smoke else 16, rng)
        states = sketch_rules.sample_programs(task, sketches, samples, rng)
        best, ok, bad = best_of_random(task, states)
        numpy_s, torch_s = baselines(name, w)
        ours, nf, tf = (common.gflops(w.flops, s) for s in (best if ok else None, numpy_s, torch_s))
        table.add(name, len(sketches), rate, f"{ok}/{ok + bad}", ours, nf, tf, common.ratio(ours, nf),
                  common.ratio(ours, tf))
        rows.append(common.json_row(name, ours, nf, tf, sketches=len(sketches), programs_per_s=rate,
                                    valid=ok, invalid=bad, samples=len(states)))
    if not args.json_only:
        table.print()
    common.emit_json("sampling", rows)


if __name__ == "__main__":
    main()
