"""What measurement costs beside the kernel, and what adaptive timing saves.

For a small and a large kernel (tiled matrix multiplications), a batch of distinct
programs goes through ``ProgramMeasurer`` (isolated builder and runner processes,
verification, adaptive timing, records written to a log), after a warm-up batch that
starts the workers and computes the reference. Per measured program it prints the wall
time, the time spent inside the kernel itself, and the difference: what the harness adds
(build, process hops, loading, verification, calibration bookkeeping, the record).

Then each program is timed three ways in the same run: adaptive (stop once the
coefficient of variation of the repeats is under 5%, at most ``REPEAT`` repeats), fixed
``REPEAT`` repeats, and a long fixed measurement (``LONG`` repeats) taken as the truth.
"saved" is the share of repeats adaptive timing left out; "error" the mean relative
difference of a measurement's mean cost from the long measurement (fixed-``REPEAT`` error
shown beside it as the noise floor of this machine).

Last, what one trial of a tuning costs: random programs of a suite workload (as the
search's first rounds pick them) measured with the tuning defaults, after a first batch
that found a best: wall time per trial, its build and run parts, how many programs were
timed by a single call (retired as hopeless), and the best GFLOPS of the two batches.

With ``--dask`` the same programs are also measured through ``DaskBuilder``/``DaskRunner``
(on a loopback ``LocalCluster`` of one worker, or the cluster at ``--dask ADDRESS``): the
per-program wall time and harness time of Dask measurement beside local measurement.

    python bench/measure_overhead.py [--smoke] [--json-only] [--dask [ADDRESS]]
"""
from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

import ir  # noqa: E402
from autosched import LocalBuilder, LocalRunner, MeasureInput, ProgramMeasurer, RecordToFile  # noqa: E402


def matmul_task(n: int) -> ir.SearchTask:
    a = ir.placeholder((n, n), name="A")
    b = ir.placeholder((n, n), name="B", constant=True)
    k = ir.reduce_axis(n, name="k")
    c = ir.compute((n, n), lambda i, j: ir.sum(a[i, k] * b[k, j], axis=k), name="C")
    return ir.SearchTask(ir.ComputeDAG([a, b, c]), layout_rewrite=True, desc=f"GMM-{n}")


def tiled(dag, mi: int, mj: int, kb: int, parallel: bool):
    """A register-tiled GEMM (as in bench/handwritten.py) with tile mi x mj, k-block kb."""
    s = dag.init_state().cache_write("C")
    s = s.split("C", "i", [mi]).split("C", "j", [mj])
    s = s.reorder("C", ["j.0", "i.0", "i.1", "j.1"])
    s = s.compute_at("C.local", "C", "i.0")
    s = s.split("C.local", "k", [kb]).reorder("C.local", ["k.0", "k.1", "i", "j"])
    s = s.unroll("C.local", "i").vectorize("C.local", "j")
    s = s.fuse("C", ["j.0", "i.0"])
    if parallel:
        s = s.parallel("C", "j.0@i.0@")
    return s.vectorize("C", "j.1")


def variants(n: int, count: int, parallel: bool) -> list:
    shapes = [(mi, mj, kb) for mj in (16, 32, 64) for mi in (2, 4, 8) for kb in (16, 64, 256)
              if mj <= n and kb <= n and mi <= n]
    return [(shape, parallel) for shape in shapes[:count]]


def rel_error(a: float, b: float) -> float:
    return abs(a - b) / b


def measured_batch(measurer: ProgramMeasurer, task, warmup, programs) -> tuple[float, list]:
    """(wall seconds per program, results) of measuring ``programs`` after ``warmup``
    (which computes the task's reference and warms the workers)."""
    measurer.measure(task, [warmup])
    t0 = time.perf_counter()
    results = measurer.measure(task, programs)
    wall = time.perf_counter() - t0
    bad = [r for r in results if not r.ok]
    if bad:
        raise RuntimeError(f"{task.desc}: {len(bad)} program(s) failed: {bad[0].error_msg}")
    return wall / len(programs), results


def bench_kernel(n: int, n_programs: int, measurer: ProgramMeasurer, comparison: list, repeat: int,
                 table: common.Table, rows: list, dask_measurer: ProgramMeasurer | None = None) -> None:
    task = matmul_task(n)
    parallel = n >= 256
    programs = [tiled(task.dag, *shape, parallel) for shape, parallel in variants(n, n_programs + 1, parallel)]
    warmup, programs = programs[0], programs[1:]
    per_prog_wall, results = measured_batch(measurer, task, warmup, programs)
    dask = {}
    if dask_measurer is not None:  # the same programs through Dask, right after
        wall, dask_results = measured_batch(dask_measurer, task, warmup, programs)
        in_kernel = statistics.fmean(r.kernel_time for r in dask_results)
        dask = {"dask_wall_ms_per_program": 1e3 * wall, "dask_overhead_ms_per_program": 1e3 * (wall - in_kernel),
                "dask_vs_local_wall": wall / per_prog_wall}
    inputs = [MeasureInput(task, s) for s in programs]
    builds = measurer.builder.build(inputs)
    # the same programs timed three ways, interleaved program by program so that all three
    # see the same machine (it is shared): adaptive, fixed repeats, and the long truth
    ada, fixed, truth = [], [], []
    for inp, build in zip(inputs, builds):
        for runner, out in zip(comparison, (ada, fixed, truth)):
            (res,) = runner.run([inp], [build])
            if not res.ok:
                raise RuntimeError(f"{task.desc}: {res.error_msg}")
            out.append(res)
    long = comparison[2].options.repeat
    min_repeat_ms = comparison[2].options.min_repeat_ms
    kernel_time = statistics.fmean(r.kernel_time for r in results)
    build_time = statistics.fmean(r.build_time for r in results)
    run_overhead = statistics.fmean(r.run_time - r.kernel_time for r in results)
    overhead = per_prog_wall - kernel_time
    cost = statistics.median(r.mean_cost for r in truth)
    repeats = statistics.fmean(r.repeats for r in ada)
    saved = statistics.fmean(r.saved_repeats for r in ada) / repeat
    ada_err = statistics.fmean(rel_error(a.mean_cost, t.mean_cost) for a, t in zip(ada, truth))
    fix_err = statistics.fmean(rel_error(f.mean_cost, t.mean_cost) for f, t in zip(fixed, truth))
    ada_max = max(rel_error(a.mean_cost, t.mean_cost) for a, t in zip(ada, truth))
    flops = task.dag.flop_count()
    best = min(t.mean_cost for t in truth)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    numpy_gf = common.gflops(flops, common.time_numpy(np.matmul, a, b))
    torch_gf = common.gflops(flops, common.time_torch(lambda x, y: x @ y, a, b))
    ours_gf = common.gflops(flops, best)
    table.add(task.desc, len(programs), 1e6 * cost, 1e3 * per_prog_wall, 1e3 * kernel_time, 1e3 * overhead,
              1e3 * build_time, 1e3 * run_overhead, f"{repeats:.1f}/{repeat}", f"{100 * saved:.0f}%", f"{100 * ada_err:.2f}%",
              f"{100 * ada_max:.2f}%", f"{100 * fix_err:.2f}%", ours_gf, numpy_gf, torch_gf,
              *([dask["dask_wall_ms_per_program"], dask["dask_overhead_ms_per_program"]] if dask else []))
    rows.append(common.json_row(
        task.desc, ours_gf, numpy_gf, torch_gf, programs=len(programs), kernel_ms=1e3 * cost,
        wall_ms_per_program=1e3 * per_prog_wall, kernel_ms_per_program=1e3 * kernel_time,
        overhead_ms_per_program=1e3 * overhead, build_ms_per_program=1e3 * build_time,
        runner_overhead_ms_per_program=1e3 * run_overhead,
        adaptive_repeats=repeats, max_repeats=repeat, repeats_saved_fraction=saved,
        adaptive_rel_error=ada_err, adaptive_max_rel_error=ada_max, fixed_rel_error=fix_err, long_repeats=long,
        min_repeat_ms=min_repeat_ms, **dask))


def bench_trials(name: str, n_programs: int, table: common.Table, rows: list) -> None:
    """What one trial of a tuning costs: random programs of a suite workload (as the
    search's first rounds measure them) through a ``ProgramMeasurer`` with the tuning
    defaults, a first batch (which starts the workers, computes the reference and finds a
    best) then a second one, timed: wall seconds per program and their parts."""
    import sketch_rules
    from autosched import ops
    w = ops.suite_workload(name)
    task = ir.SearchTask(ir.ComputeDAG(w.tensors), desc=name)
    rng = np.random.default_rng(0)
    programs, seen = [], set()
    for state in sketch_rules.sample_programs(task, sketch_rules.generate_sketches(task), 4 * n_programs, rng):
        if state.key not in seen and len(programs) < 2 * n_programs:
            seen.add(state.key)
            programs.append(state)
    with ProgramMeasurer(LocalBuilder(), LocalRunner(), max_consecutive_errors=0) as measurer:
        measurer.measure(task, programs[:n_programs])
        t0 = time.perf_counter()
        results = measurer.measure(task, programs[n_programs:])
        wall = (time.perf_counter() - t0) / len(results)
        best = measurer.best_cost(task)
    ok = [r for r in results if r.ok]
    one_call = sum(r.number == 1 and r.repeats == 1 for r in ok)
    build = statistics.fmean(r.build_time for r in results)
    run = statistics.fmean(r.run_time for r in results)
    kernel = statistics.fmean(r.kernel_time for r in results)
    best_gf = common.gflops(w.flops, best)
    table.add(name, len(results), len(ok), one_call, 1e3 * wall, 1e3 * build, 1e3 * run, 1e3 * kernel, best_gf)
    rows.append(common.json_row(f"{name} random trials", best_gf, trials=len(results), ok=len(ok),
                                timed_by_one_call=one_call, wall_ms_per_trial=1e3 * wall,
                                build_ms_per_trial=1e3 * build, run_ms_per_trial=1e3 * run,
                                kernel_ms_per_trial=1e3 * kernel))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, parents=[common.bench_args()],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dask", nargs="?", const="local", default=None, metavar="ADDRESS",
                        help="also measure through Dask: on the cluster at ADDRESS, or (no address) on a "
                             "loopback LocalCluster of one runner worker started here")
    args = parser.parse_args(argv)
    if args.smoke:
        sizes, n_programs, repeat, long, min_ms = (32, 96), 2, 5, 8, 2.0
        trial_workloads, trial_programs = ("GMM-1x128x128x128",), 3
    else:
        sizes, n_programs, repeat, long, min_ms = (64, 512), 8, 10, 30, 40.0
        trial_workloads, trial_programs = ("GMM-1x512x512x512", "C2D-1x56x56x64x64-k1s1p0"), 32
    table = common.Table(["workload", "programs", "kernel us", "wall/prog ms", "in kernel ms", "harness ms",
                          "build ms", "runner ms", "repeats", "saved", "adaptive err", "max err", "fixed err", "ours GFLOPS",
                          "numpy GFLOPS", "torch GFLOPS"])
    if args.dask:
        table.columns += ["dask wall/prog ms", "dask harness ms"]
    rows: list = []
    with contextlib.ExitStack() as stack:
        dask_measurer = stack.enter_context(dask_measurement(args.dask, repeat, min_ms)) if args.dask else None
        run(sizes, n_programs, repeat, long, min_ms, table, rows, dask_measurer)
    trials = common.Table(["workload", "trials", "ok", "timed by 1 call", "wall/trial ms", "build ms", "run ms",
                           "in kernel ms", "best GFLOPS"])
    for name in trial_workloads:
        bench_trials(name, trial_programs, trials, rows)
    if not args.json_only:
        print(f"# measurement overhead: {os.cpu_count()} cores; adaptive timing: CV < 5%, at most {repeat} repeats "
              f"of >= {min_ms:g} ms; truth: {long} fixed repeats\n")
        table.print()
        print("\n# harness = wall time per measured program - time inside the kernel; build = compile time of one "
              "program in a builder\n# (builds run in parallel, one per core); runner = the runner's own time per "
              "program (load, check, bookkeeping)\n# err = mean |mean cost - long measurement| / long measurement; "
              "fixed err = the same for a fixed-repeat measurement")
        print(f"\n# one trial of a tuning: {trial_programs} random programs measured with the tuning defaults after "
              f"a first batch of {trial_programs}\n")
        trials.print()
        if args.dask:
            print("# dask: the same programs measured through DaskBuilder/DaskRunner (each job in a child process "
                  f"of a Dask worker) on {'a loopback LocalCluster' if args.dask == 'local' else args.dask}")
    common.emit_json("measure_overhead", rows)


@contextlib.contextmanager
def dask_measurement(address: str, repeat: int, min_ms: float):
    """A ProgramMeasurer on Dask: the cluster at ``address``, or ("local") a loopback
    LocalCluster with one worker that builds and runs, as this machine would be."""
    import distributed
    from autosched import DaskBuilder, DaskRunner
    with contextlib.ExitStack() as stack:
        if address == "local":
            cluster = stack.enter_context(distributed.LocalCluster(
                n_workers=1, threads_per_worker=os.cpu_count() or 1, resources={"runner": 1}, processes=True,
                dashboard_address=None, host="127.0.0.1", protocol="tcp"))
            address = cluster.scheduler_address
        client = stack.enter_context(distributed.Client(address, set_as_default=False))
        yield stack.enter_context(ProgramMeasurer(DaskBuilder(client, timeout=60),
                                                  DaskRunner(client, timeout=60, repeat=repeat, min_repeat_ms=min_ms),
                                                  max_consecutive_errors=0))


def run(sizes, n_programs, repeat, long, min_ms, table, rows, dask_measurer) -> None:
    with tempfile.TemporaryDirectory() as tmp, \
            ProgramMeasurer(LocalBuilder(timeout=60), LocalRunner(timeout=60, repeat=repeat, min_repeat_ms=min_ms),
                            callbacks=[RecordToFile(os.path.join(tmp, "tune.jsonl"))],
                            max_consecutive_errors=0) as measurer, \
            LocalRunner(timeout=120, repeat=repeat, min_repeat_ms=min_ms) as adaptive, \
            LocalRunner(timeout=120, repeat=repeat, min_repeat_ms=min_ms, adaptive=False) as fixed, \
            LocalRunner(timeout=300, repeat=long, min_repeat_ms=min_ms, adaptive=False) as truth:
        for n in sizes:
            bench_kernel(n, n_programs, measurer, [adaptive, fixed, truth], repeat, table, rows, dask_measurer)


if __name__ == "__main__":
    main()
