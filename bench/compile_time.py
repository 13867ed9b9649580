"""How long it takes to lower and compile one naive kernel of each operator, by phase.

A tuning run builds thousands of programs, so the time from a State to a callable kernel
bounds how many trials fit in a budget. For every operator of ``autosched.ops`` at a small
shape this prints the median milliseconds of each phase of ``ir.build`` — (a) lowering,
(b) LLVM IR text generation, (c) parsing, verifying and O3 optimisation, (d) MCJIT code
generation — and of ``ir.build`` as a whole, says which phase dominates, and (full run
only) profiles one build with cProfile to show where the Python time goes.

    python bench/compile_time.py [--repeat N] [--smoke] [--json-only]
"""
from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import ir  # noqa: E402
from autosched import ops  # noqa: E402
from ir.cpu.runtime import optimize  # noqa: E402
from common import Table, bench_args, emit_json, jit, json_row  # noqa: E402

#: a small representative workload of every operator: (args, kwargs)
SHAPES: dict[str, tuple[tuple, dict]] = {
    "add": (((64, 256),), {}),
    "multiply": (((64, 256),), {}),
    "bias_add": (((64, 256),), {}),
    "relu": (((64, 256),), {}),
    "gelu": (((64, 256),), {}),
    "sigmoid": (((64, 256),), {}),
    "tanh": (((64, 256),), {}),
    "matmul": ((128, 128, 128), {}),
    "batch_matmul": ((4, 64, 64, 64), {}),
    "dense": ((16, 256, 128), {"bias": True}),
    "norm": ((1, 256, 256), {}),
    "softmax": (((64, 256),), {}),
    "layer_norm": (((64, 256),), {}),
    "batch_norm": ((1, 14, 14, 64), {}),
    "max_pool2d": ((1, 28, 28, 32, 3), {"stride": 2, "padding": 1}),
    "avg_pool2d": ((1, 28, 28, 32, 3), {"stride": 2, "padding": 1}),
    "global_max_pool2d": ((1, 7, 7, 128), {}),
    "global_avg_pool2d": ((1, 7, 7, 128), {}),
    "conv1d": ((1, 64, 32, 64, 3), {"padding": 1}),
    "conv2d": ((1, 14, 14, 32, 32, 3), {"padding": 1}),
    "conv3d": ((1, 8, 8, 8, 16, 16, 3), {"padding": 1}),
    "depthwise_conv2d": ((1, 28, 28, 32, 3), {"padding": 1}),
    "conv2d_transpose": ((1, 8, 8, 64, 32, 4), {"stride": 2, "padding": 1}),
    "capsule_conv2d": ((1, 8, 8, 16, 16, 3), {"padding": 1}),
    "conv_layer": ((1, 14, 14, 32, 32, 3), {"padding": 1}),
    "transpose_batch_matmul": ((1, 64, 4, 32), {}),
    "pad": (((1, 14, 14, 32), (0, 1, 1, 0)), {}),
    "transpose": (((64, 32, 16), (2, 0, 1)), {}),
    "reshape": (((64, 32, 16), (64, 512)), {}),
}
SMOKE = ("matmul", "conv2d")
PHASES = ("lower", "codegen", "optimize", "jit")
PHASE_NAMES = {"lower": "lowering (ir.lower)", "codegen": "LLVM IR text generation",
               "optimize": "parse + verify + O3", "jit": "MCJIT code generation"}
NAME = "bench_kernel"


def workloads(names) -> tuple[dict[str, ops.Workload], list[str]]:
    """The workloads of ``names`` and the operators that have no shape here yet."""
    found = {n: ops.workload(n, *SHAPES[n][0], **SHAPES[n][1]) for n in names if n in SHAPES}
    return found, [n for n in names if n not in SHAPES]


def time_phases(state) -> tuple[dict[str, float], int]:
    """Seconds of each phase of one build of ``state``, and the LLVM IR's line count."""
    t0 = time.perf_counter()
    lowered = ir.lower(state, NAME)
    t1 = time.perf_counter()
    text = ir.cpu.codegen.generate(lowered, NAME)
    t2 = time.perf_counter()
    module = optimize(text)
    t3 = time.perf_counter()
    engine = jit(module)
    engine.get_function_address(NAME)
    t4 = time.perf_counter()
    return {"lower": t1 - t0, "codegen": t2 - t1, "optimize": t3 - t2, "jit": t4 - t3}, text.count("\n")


def time_build(dag, state) -> float:
    t0 = time.perf_counter()
    ir.build(dag, state, NAME)
    return time.perf_counter() - t0


def measure(w: ops.Workload, repeat: int) -> dict:
    """Median milliseconds per phase and of ``ir.build`` over ``repeat`` builds each."""
    dag = ir.ComputeDAG(w.tensors)
    state = dag.init_state()
    ir.build(dag, state, NAME)  # warm caches (target machine, libgomp) outside the timings
    runs, builds = [], []
    for _ in range(repeat):  # interleaved, so that the machine's noise hits both alike
        runs.append(time_phases(state))
        builds.append(time_build(dag, state))
    row = {f"{p}_ms": statistics.median(r[p] for r, _ in runs) * 1e3 for p in PHASES}
    row["build_ms"] = statistics.median(builds) * 1e3
    row["ir_lines"] = runs[0][1]
    row["stages"] = sum(1 for op in dag.ops if not isinstance(op, ir.PlaceholderOp))
    return row


def profile_build(w: ops.Workload, top: int = 10) -> str:
    """cProfile's top ``top`` functions by cumulative time in one build of ``w``."""
    dag = ir.ComputeDAG(w.tensors)
    state = dag.init_state()
    profiler = cProfile.Profile()
    profiler.runcall(ir.build, dag, state, NAME)
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).strip_dirs().sort_stats("cumulative").print_stats(top)
    return out.getvalue().strip()


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], parents=[bench_args()])
    parser.add_argument("--repeat", type=int, default=None,
                        help="builds per operator and phase (default 10; 2 with --smoke)")
    args = parser.parse_args(argv)
    repeat = args.repeat or (2 if args.smoke else 10)
    names = list(SMOKE) if args.smoke else sorted(ops.OPERATORS)
    say = (lambda *a: None) if args.json_only else (lambda *a: print(*a, flush=True))

    found, missing = workloads(names)
    rows = []
    table = Table(["operator", "stages", "IR lines", *[f"{p} ms" for p in PHASES], "build ms"])
    for name, w in found.items():
        r = measure(w, repeat)
        rows.append(json_row(str(w), operator=name, **r))
        table.add(name, r["stages"], r["ir_lines"], *[r[f"{p}_ms"] for p in PHASES], r["build_ms"])

    overall = {p: statistics.median(r[f"{p}_ms"] for r in rows) for p in (*PHASES, "build")}
    table.add("median", None, None, *[overall[p] for p in PHASES], overall["build"])
    say(f"Naive kernel build time, median of {repeat} builds per operator and phase:\n")
    if not args.json_only:
        table.print()
    share = {p: overall[p] / sum(overall[q] for q in PHASES) for p in PHASES}
    top = max(share, key=share.get)
    say(f"\nMedian ir.build: {overall['build']:.2f} ms per kernel. "
        f"Dominant phase: {PHASE_NAMES[top]}, {share[top]:.0%} of the phase total "
        f"({', '.join(f'{p} {share[p]:.0%}' for p in PHASES)}).")
    if missing:
        say(f"No shape in bench/compile_time.py SHAPES for: {', '.join(missing)} (not measured).")
    if not args.smoke:
        slowest = max(rows, key=lambda r: r["build_ms"])
        say(f"\ncProfile of one build of the slowest, {slowest['workload']}:\n")
        say(profile_build(found[slowest["operator"]]))
        say()
    emit_json("compile_time", rows)


if __name__ == "__main__":
    main()
