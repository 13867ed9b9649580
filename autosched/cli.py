"""The ``autosched`` command line."""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np

import ir
from . import ops


def _workload(name: str) -> "ops.Workload":
    try:
        return ops.suite_workload(name)
    except ValueError as err:
        raise SystemExit(f"autosched: {err}\n(see `autosched list` for the suite's names)") from None


def _best_seconds(fn, min_time: float = 0.2) -> float:
    fn()
    runs, start = [], time.perf_counter()
    while time.perf_counter() - start < min_time or len(runs) < 3:
        t0 = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - t0)
    return min(runs)


def cmd_list(args) -> int:
    for name in ops.suite_names():
        print(name)
    print(f"\noperators: {', '.join(sorted(ops.OPERATORS))}")
    return 0


def cmd_build(args) -> int:
    """Compile a workload's naive program, verify it against numpy, time it beside numpy."""
    w = _workload(args.workload)
    dag = ir.ComputeDAG(w.tensors)
    print(f"# {args.workload}: {w.flops / 1e9:.3f} GFLOP, workload key {dag.workload_key()}\n{dag}\n")
    state = dag.init_state()
    print(f"# program\n{state}\n")
    t0 = time.perf_counter()
    kernel = ir.build(dag, state)
    print(f"# built in {1e3 * (time.perf_counter() - t0):.1f} ms")
    inputs = w.random_inputs(np.random.default_rng(args.seed))
    outputs = w.output_buffers()
    kernel(*inputs, *outputs)
    expected = w.reference(inputs)
    for got, want, t in zip(outputs, expected, dag.outputs):
        err = float(np.max(np.abs(got.astype(np.float64) - want))) if got.size else 0.0
        scale = float(np.max(np.abs(want))) or 1.0
        ok = np.allclose(got, want, rtol=1e-3, atol=1e-4 * scale)
        print(f"# output '{t.name}' vs numpy reference: max abs error {err:.3g} -> {'OK' if ok else 'WRONG'}")
        if not ok:
            return 1
    ours = kernel.time(*inputs, *outputs, number=1, repeat=3, min_repeat_ms=50).median
    ref = _best_seconds(lambda: w.reference(inputs))
    print(f"# naive kernel: {1e3 * ours:.3f} ms ({w.flops / ours / 1e9:.2f} GFLOPS); "
          f"numpy reference: {1e3 * ref:.3f} ms ({w.flops / ref / 1e9:.2f} GFLOPS)")
    return 0


def cmd_sketches(args) -> int:
    """Print a workload's sketches and a few sampled programs."""
    from .space import generate_sketches
    w = _workload(args.workload)
    print(f"# {args.workload}\n{ir.ComputeDAG(w.tensors)}\n")
    generate_sketches(ir.ComputeDAG(w.tensors), samples=args.samples, seed=args.seed,
                      target_kind="gpu" if args.target in ("gpu", "cuda") else "cpu")
    return 0


def cmd_tune(args) -> int:
    """Tune a workload; print the winner's loop nest and its speed beside numpy."""
    from .tune import auto_schedule
    if getattr(args, "network", None):
        from .networks import tune_network_command
        return tune_network_command(args)
    if args.workload is None:
        raise SystemExit("autosched tune: give a workload (see `autosched list`) or --network NAME")
    if args.trials is None:
        args.trials = 200
    w = _workload(args.workload)
    dag = ir.ComputeDAG(w.tensors)
    print(f"# tuning {args.workload} ({w.flops / 1e9:.3f} GFLOP) for {args.trials} trials", flush=True)
    target = "cuda" if args.target == "cuda" else None
    try:
        result = auto_schedule(ir.SearchTask(dag, target=target, desc=args.workload), trials=args.trials,
                               measure_batch=args.batch, log_file=args.log_file, seed=args.seed,
                               early_stopping=args.early_stopping)
    except ir.NoCudaDevice as err:
        raise SystemExit(f"autosched: {err}") from None
    if result.kernel is None:
        print("# no valid program was found", file=sys.stderr)
        return 1
    if target == "cuda":
        return _report_cuda(args.workload, w, result, args.seed)
    inputs = w.random_inputs(np.random.default_rng(args.seed))
    outputs = w.output_buffers()
    args_in = [result.kernel.pack(t.name, a) if t.name in result.kernel.layouts else a
               for t, a in zip(dag.inputs, inputs)]
    result.kernel(*args_in, *outputs)
    ok = all(np.allclose(o, e, rtol=1e-3, atol=1e-3) for o, e in zip(outputs, w.reference(inputs)))
    ours = result.kernel.time(*args_in, *outputs, number=1, repeat=5, min_repeat_ms=50).median
    routine = ops.numpy_routine(w, inputs)
    ref = _best_seconds(routine or (lambda: w.reference(inputs)))
    what = "numpy float32" if routine is not None else "numpy float64 reference"
    print(f"# best program\n{result.state}\n")
    print(f"# {args.workload}: {w.flops / ours / 1e9:.2f} GFLOPS ({1e3 * ours:.3f} ms), "
          f"{what} {w.flops / ref / 1e9:.2f} GFLOPS ({1e3 * ref:.3f} ms): {ref / ours:.2f}x numpy; "
          f"verified against numpy: {'OK' if ok else 'WRONG'}")
    print(f"# tuning time: search {result.time_search:.1f} s, measurement {result.time_measure:.1f} s")
    return 0 if ok else 1


def _report_cuda(name: str, w, result, seed: int) -> int:
    """The tuned GPU program: checked against numpy and timed on the device."""
    inputs = w.random_inputs(np.random.default_rng(seed))
    outputs = w.output_buffers()
    result.kernel(*inputs, *outputs)
    ok = all(np.allclose(o, e, rtol=1e-3, atol=1e-3) for o, e in zip(outputs, w.reference(inputs)))
    ours = result.kernel.time(*inputs, *outputs, number=1, repeat=5, min_repeat_ms=50).median
    print(f"# best program\n{result.state}\n")
    print(f"# {name} on the GPU: {w.flops / ours / 1e9:.2f} GFLOPS ({1e3 * ours:.4f} ms); "
          f"verified against numpy: {'OK' if ok else 'WRONG'}")
    print(f"# tuning time: search {result.time_search:.1f} s, measurement {result.time_measure:.1f} s")
    return 0 if ok else 1


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="autosched", description="A template-free auto-scheduler for tensor programs.")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="list the benchmark suite's workloads and the operators").set_defaults(fn=cmd_list)
    build = sub.add_parser("build", help="compile a workload's naive program, verify it, time it beside numpy")
    build.add_argument("workload", help="a suite name such as GMM-1x512x512x512 (see `autosched list`)")
    build.add_argument("--seed", type=int, default=0)
    build.set_defaults(fn=cmd_build)
    tune = sub.add_parser("tune", help="tune a workload (or a whole network with --network) and print the result")
    tune.add_argument("workload", nargs="?", default=None,
                      help="a suite name such as GMM-1x512x512x512 (see `autosched list`)")
    tune.add_argument("--trials", type=int, default=None, help="measurements (default 200)")
    tune.add_argument("--batch", type=int, default=64, help="programs measured per round (default 64)")
    tune.add_argument("--log-file", default=None, help="JSON-lines tuning log: appended to, and resumed from")
    tune.add_argument("--early-stopping", type=int, default=None, help="stop after N trials without improvement")
    tune.add_argument("--seed", type=int, default=0)
    tune.add_argument("--target", choices=["cpu", "cuda"], default="cpu",
                      help="tune for this CPU (default) or for the NVIDIA GPU (cuda)")
    tune.add_argument("--network", default=None,
                      help="tune a whole network instead: resnet50, mobilenet_v2, resnet3d_18, dcgan or bert")
    tune.add_argument("--batch-size", type=int, default=1, help="the network's batch size (default 1)")
    tune.add_argument("--strategy", choices=["gradient", "round-robin"], default="gradient",
                      help="task scheduling (default: Ansor's gradient scheduler)")
    tune.add_argument("--objective", choices=["latency", "early_stopping"], default="latency",
                      help="task scheduler objective (default: the network's latency)")
    tune.add_argument("--early-stopping-per-task", type=int, default=None,
                      help="retire a task after N trials without improvement")
    tune.set_defaults(fn=cmd_tune)
    sketches = sub.add_parser("sketches", help="print a workload's sketches and a few sampled programs")
    sketches.add_argument("workload", help="a suite name such as C2D-1x56x56x64x64-k1s1p0")
    sketches.add_argument("--samples", type=int, default=3, help="random programs to print (default 3)")
    sketches.add_argument("--seed", type=int, default=0)
    sketches.add_argument("--target", choices=["cpu", "gpu", "cuda"], default="cpu",
                          help="the sketch rules of this CPU or of a GPU (gpu and cuda are the same)")
    sketches.set_defaults(fn=cmd_sketches)
    args = parser.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
