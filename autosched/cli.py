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
    generate_sketches(ir.ComputeDAG(w.tensors), samples=args.samples, seed=args.seed, target_kind=args.target)
    return 0


def cmd_tune(args) -> int:
    """Tune a workload; print the winner's loop nest and its speed beside numpy."""
    from .tune import auto_schedule
    if args.workload is not None and args.workload.endswith(".onnx"):
        return cmd_tune_model(args)
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
    result = auto_schedule(ir.SearchTask(dag, desc=args.workload), trials=args.trials,
                           measure_batch=args.batch, log_file=args.log_file, seed=args.seed,
                           early_stopping=args.early_stopping)
    if result.kernel is None:
        print("# no valid program was found", file=sys.stderr)
        return 1
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


# models from ONNX files -------------------------------------------------------------------

def _input_shapes(specs) -> dict:
    """``["ids=1x128", ...]`` -> ``{"ids": (1, 128)}``."""
    shapes = {}
    for spec in specs or []:
        name, sep, dims = spec.rpartition("=")
        try:
            shapes[name] = tuple(int(d) for d in dims.split("x"))
        except ValueError:
            sep = ""
        if not sep or not name:
            raise SystemExit(f"autosched: --input-shape {spec!r}: expected NAME=DIMS such as input=1x3x224x224")
    return shapes


def _import_model(args):
    from .graph import UnsupportedModelError, from_onnx
    try:
        return from_onnx(args.model if hasattr(args, "model") else args.workload, _input_shapes(args.input_shape))
    except (UnsupportedModelError, FileNotFoundError, ValueError) as err:
        raise SystemExit(f"autosched: {err}") from None


def _compare_with_baselines(path, shapes, executor, inputs, ours) -> bool:
    """Check ``ours`` against onnxruntime (the numpy reference without it) and print the
    latency of the model beside onnxruntime and PyTorch, all timed now."""
    import os
    from .graph import onnx_baselines as B
    threads = os.cpu_count() or 1
    latency = executor.benchmark(*inputs, repeat=10, min_repeat_ms=100)["median"]
    lines = [f"# autosched: {1e3 * latency:.3f} ms end to end"]
    try:
        ort_run = B.onnxruntime_runner(path, threads)
    except ImportError:
        ok, err = executor.verify(*inputs)
        lines.append(f"# onnxruntime not installed; checked against the numpy reference: {'OK' if ok else 'WRONG'} "
                     f"(max relative error {err:.2e})")
    else:
        want = ort_run(*inputs)
        err = max(float(np.max(np.abs(g.astype(np.float64) - w))) / (float(np.max(np.abs(w))) or 1.0)
                  for g, w in zip(ours, want))
        ok = err <= 1e-3
        t = B.seconds_per_call(lambda: ort_run(*inputs), repeat=10)
        lines.append(f"# onnxruntime {threads} threads: {1e3 * t:.3f} ms -> autosched {t / latency:.2f}x; outputs "
                     f"match onnxruntime's: {'OK' if ok else 'WRONG'} (max relative error {err:.2e})")
    try:
        torch_run = B.torch_runner(path, shapes, threads)
    except ImportError:
        lines.append("# PyTorch not installed: no comparison")
    except B.Unsupported as err:
        lines.append(f"# PyTorch: cannot run this model ({err})")
    else:
        t = B.seconds_per_call(lambda: torch_run(*inputs), repeat=10)
        lines.append(f"# PyTorch {threads} threads (TorchScript): {1e3 * t:.3f} ms -> autosched {t / latency:.2f}x")
    print("\n".join(lines))
    return ok


def cmd_tune_model(args) -> int:
    """``autosched tune model.onnx``: import the model, tune every task, then run the tuned
    model, check it and time it beside onnxruntime and PyTorch."""
    from .graph import partition
    from .networks import tune_networks
    graph = _import_model(args)
    part = partition(graph)
    print(f"# {graph.summary()}\n# {part.summary()}", flush=True)
    trials = args.trials if args.trials is not None else 200
    result = tune_networks(part, trials=trials, measure_batch=args.batch, log_file=args.log_file, seed=args.seed,
                           early_stopping=args.early_stopping)
    executor = result.executor(0, warn_untuned=False)
    estimate = result.estimated_latencies()[part.name]
    estimate = f"{1e3 * estimate:.3f} ms" if estimate < 1e9 else "- (a task has no valid program yet)"
    print(f"# tuned {result.trials} trials; {len(executor.untuned)} of {len(part.tasks)} tasks untuned; "
          f"estimated from the tasks {estimate}")
    inputs = graph.random_inputs(args.seed)
    ok = _compare_with_baselines(args.workload, _input_shapes(args.input_shape), executor, inputs,
                                 executor.run(*inputs))
    return 0 if ok else 1


def cmd_run(args) -> int:
    """``autosched run model.onnx --log-file F``: run a model with its tuned programs."""
    import os
    from .graph import GraphExecutor, partition
    if not os.path.exists(args.log_file):
        raise SystemExit(f"autosched run: no tuning log at {args.log_file!r}; make one with "
                         f"`autosched tune {args.model} --log-file {args.log_file}`")
    graph = _import_model(args)
    executor = GraphExecutor(partition(graph), log_file=args.log_file)
    if args.input:
        if len(args.input) != len(graph.inputs):
            raise SystemExit(f"autosched run: the model takes {len(graph.inputs)} inputs "
                             f"({', '.join(i.name for i in graph.inputs)}), got {len(args.input)} --input files")
        inputs = [np.load(f) for f in args.input]
    else:
        inputs = graph.random_inputs(args.seed)
        print(f"# no --input: random inputs (seed {args.seed})")
    try:
        outputs = executor.run(*inputs)
    except ValueError as err:
        raise SystemExit(f"autosched run: {err}") from None
    for node, out in zip(graph.outputs, outputs):
        print(f"# output '{node.name}': shape {out.shape}, mean {float(out.mean()):.6g}")
    if args.output:
        if len(outputs) == 1:
            np.save(args.output, outputs[0])
        else:
            np.savez(args.output, **{n.name: o for n, o in zip(graph.outputs, outputs)})
        print(f"# written to {args.output}")
    latency = executor.benchmark(*inputs, repeat=5, min_repeat_ms=50)["median"]
    print(f"# {1e3 * latency:.3f} ms end to end ({len(executor.untuned)} of {len(executor.partitioned.tasks)} "
          "tasks untuned)")
    if args.verify:
        return 0 if _compare_with_baselines(args.model, _input_shapes(args.input_shape), executor, inputs,
                                            outputs) else 1
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="autosched", description="A template-free auto-scheduler for tensor programs.")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="list the benchmark suite's workloads and the operators").set_defaults(fn=cmd_list)
    build = sub.add_parser("build", help="compile a workload's naive program, verify it, time it beside numpy")
    build.add_argument("workload", help="a suite name such as GMM-1x512x512x512 (see `autosched list`)")
    build.add_argument("--seed", type=int, default=0)
    build.set_defaults(fn=cmd_build)
    tune = sub.add_parser("tune", help="tune a workload, a network (--network) or an ONNX model (model.onnx)")
    tune.add_argument("workload", nargs="?", default=None,
                      help="a suite name such as GMM-1x512x512x512 (see `autosched list`), or a .onnx file")
    tune.add_argument("--trials", type=int, default=None, help="measurements (default 200)")
    tune.add_argument("--batch", type=int, default=64, help="programs measured per round (default 64)")
    tune.add_argument("--log-file", default=None, help="JSON-lines tuning log: appended to, and resumed from")
    tune.add_argument("--early-stopping", type=int, default=None, help="stop after N trials without improvement")
    tune.add_argument("--seed", type=int, default=0)
    tune.add_argument("--network", default=None,
                      help="tune a whole network instead: resnet50, mobilenet_v2, resnet3d_18, dcgan or bert")
    tune.add_argument("--batch-size", type=int, default=1, help="the network's batch size (default 1)")
    tune.add_argument("--strategy", choices=["gradient", "round-robin"], default="gradient",
                      help="task scheduling (default: Ansor's gradient scheduler)")
    tune.add_argument("--objective", choices=["latency", "early_stopping"], default="latency",
                      help="task scheduler objective (default: the network's latency)")
    tune.add_argument("--early-stopping-per-task", type=int, default=None,
                      help="retire a task after N trials without improvement")
    tune.add_argument("--input-shape", action="append", default=[], metavar="NAME=DIMS",
                      help="an ONNX model's input shape where the model leaves it open, e.g. input_ids=1x128")
    tune.set_defaults(fn=cmd_tune)
    run = sub.add_parser("run", help="run an ONNX model with its tuned programs (from a tuning log)")
    run.add_argument("model", help="the .onnx file")
    run.add_argument("--log-file", required=True, help="the tuning log of `autosched tune model.onnx --log-file`")
    run.add_argument("--input", action="append", default=[], help=".npy file of an input (one per input, in order)")
    run.add_argument("--output", default=None, help="write the output to this .npy file (.npz for several)")
    run.add_argument("--input-shape", action="append", default=[], metavar="NAME=DIMS",
                     help="an input shape the model leaves open, e.g. input_ids=1x128")
    run.add_argument("--verify", action="store_true", help="check against onnxruntime and time both and PyTorch")
    run.add_argument("--seed", type=int, default=0, help="random inputs when no --input is given")
    run.set_defaults(fn=cmd_run)
    sketches = sub.add_parser("sketches", help="print a workload's sketches and a few sampled programs")
    sketches.add_argument("workload", help="a suite name such as C2D-1x56x56x64x64-k1s1p0")
    sketches.add_argument("--samples", type=int, default=3, help="random programs to print (default 3)")
    sketches.add_argument("--seed", type=int, default=0)
    sketches.add_argument("--target", choices=["cpu", "gpu"], default="cpu")
    sketches.set_defaults(fn=cmd_sketches)
    args = parser.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
