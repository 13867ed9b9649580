"""A tuned model out of the tuner: compile it into an artifact, load it, run it.

    python bench/deploy.py --model resnet50 [--log-file resnet50.json]
    python bench/deploy.py --smoke

The model (``bench/onnx_models.py``) is built as ``autosched run`` builds it in every process
(import, partition, the best programs of ``--log-file``, or without one every task's
zero-trial program): that time is the "rebuild". The same executor is then compiled into an
artifact (``autosched.deploy.compile_executor``: the same programs, calls and memory plan).
A fresh interpreter imports ``autosched.runtime`` alone, loads the artifact and runs it once
(the load and the first call, whose weights come from the page cache). In this process the
artifact, the in-tuner executor, onnxruntime and OpenVINO (CPU, f32 precision hint) run on
``--threads`` threads: the artifact and the executor in turns (``--rounds`` rounds, the fastest
of each kept), then onnxruntime, then OpenVINO (whose idle threads would slow ours if they
took turns with them); the outputs are checked against onnxruntime's. Goals: load under 1 s for ResNet-50, steady
latency within 2 % of the in-tuner executor.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import onnx_models  # noqa: E402
from common import _time_callable, bench_args, emit_json, fastest_in_turns  # noqa: E402

from autosched import graph as G  # noqa: E402
from autosched.deploy import compile_executor, import_model  # noqa: E402
from autosched.graph import onnx_baselines as B  # noqa: E402
from autosched.history.records import UntunedWorkloadWarning  # noqa: E402
from autosched.runtime import Model  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: run in a fresh interpreter: the runtime's import, the load and the first call, in seconds
_FRESH_LOAD = """
import json, sys, time
t0 = time.perf_counter()
import numpy as np
from autosched.runtime import Model
t1 = time.perf_counter()
model = Model(sys.argv[1], num_threads=int(sys.argv[2]))
t2 = time.perf_counter()
inputs = [np.zeros(i.shape, i.dtype) for i in model.inputs]
model.run(inputs)
t3 = time.perf_counter()
heavy = [m for m in ("llvmlite", "xgboost", "networkx", "onnx") if m in sys.modules]
print(json.dumps({"import_s": t1 - t0, "load_s": t2 - t1, "first_call_s": t3 - t2, "heavy_imports": heavy}))
"""


def openvino_runner(path: str, threads: int):
    """``run(*arrays)`` of the model compiled by OpenVINO for the CPU (f32), or None and why."""
    try:
        import openvino as ov
    except ImportError:
        return None, "OpenVINO not installed"
    core = ov.Core()
    compiled = core.compile_model(core.read_model(path), "CPU",
                                  {"INFERENCE_NUM_THREADS": threads, "INFERENCE_PRECISION_HINT": "f32"})
    request = compiled.create_infer_request()

    def run(*arrays):
        request.infer(list(arrays))
        return [request.get_output_tensor(k).data.copy() for k in range(len(compiled.outputs))]
    return run, f"OpenVINO {ov.__version__.split('-')[0]}"


def time_in_turns(runs: dict, args) -> dict:
    """Label -> the fastest of ``args.rounds`` timings of each run, the runs timed in turns."""
    return fastest_in_turns({label: (lambda run=run: _time_callable(run, args.min_time, 3))
                             for label, run in runs.items()}, args.rounds)


def relative_error(got, want) -> float:
    return max(float(np.max(np.abs(g.astype(np.float64) - w))) / (float(np.max(np.abs(w))) or 1.0)
               for g, w in zip(got, want))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0], parents=[bench_args()])
    parser.add_argument("--model", default=None, choices=onnx_models.MODELS,
                        help="default resnet50 (squeezenet with --smoke)")
    parser.add_argument("--log-file", default=None, help="the tuning log (default: none, zero-trial programs)")
    parser.add_argument("--threads", type=int, default=2, help="threads of every runtime (default 2)")
    parser.add_argument("--rounds", type=int, default=5, help="timing rounds in turns (default 5)")
    parser.add_argument("--min-time", type=float, default=0.3, help="seconds of each timing repeat (default 0.3)")
    parser.add_argument("--output", default=None, help="the artifact (default: a temporary file)")
    parser.add_argument("--no-base-model", action="store_true",
                        help="untuned tasks run default schedules, not zero-trial programs (a search of "
                             "seconds a task)")
    args = parser.parse_args(argv)
    if args.smoke:
        args.model = args.model or "squeezenet"
        args.rounds, args.min_time, args.no_base_model = 2, 0.05, True
    args.model = args.model or "resnet50"
    say = (lambda *a, **k: None) if args.json_only else print
    src = onnx_models.load(args.model)

    t0 = time.perf_counter()
    part, output_names = import_model(src.path, src.input_shapes)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UntunedWorkloadWarning)
        executor = G.GraphExecutor(part, log_file=args.log_file, base_model=None if args.no_base_model else "default")
    rebuild_s = time.perf_counter() - t0
    programs = [p for w, p in executor.programs.items() if any(w == t.workload_key for t in part.tasks)]
    tuned = sum(p.tuned for p in programs)
    say(f"# {src.path}: {len(part.tasks)} tasks, {tuned} tuned, {sum(p.zero_trial for p in programs)} zero-trial, "
        f"{sum(not p.tuned and not p.zero_trial for p in programs)} default schedules; "
        f"built as `autosched run` builds it in {rebuild_s:.1f} s", flush=True)

    with tempfile.TemporaryDirectory() as folder:
        path = args.output or os.path.join(folder, f"{args.model}.aso")
        t0 = time.perf_counter()
        compile_executor(executor, path, output_names, args.log_file)
        compile_s = time.perf_counter() - t0
        size = os.path.getsize(path)
        fresh = subprocess.run([sys.executable, "-c", _FRESH_LOAD, path, str(args.threads)], capture_output=True,
                               text=True, env=dict(os.environ, PYTHONPATH=ROOT), check=True)
        fresh = json.loads(fresh.stdout.strip().splitlines()[-1])
        say(f"# artifact {size / 2**20:.1f} MiB, compiled in {compile_s:.1f} s; a fresh interpreter imports the "
            f"runtime in {1e3 * fresh['import_s']:.0f} ms, loads it in {1e3 * fresh['load_s']:.1f} ms "
            f"(vs {rebuild_s:.1f} s to rebuild: {rebuild_s / fresh['load_s']:.0f}x), first call "
            f"{1e3 * fresh['first_call_s']:.1f} ms; compiler modules imported: {fresh['heavy_imports'] or 'none'}",
            flush=True)

        model = Model(path, num_threads=args.threads)
        ctypes.CDLL("libgomp.so.1").omp_set_num_threads(args.threads)   # the executor's team, as the artifact's
        inputs = [src.example[0].numpy()] if src.example else part.graph.random_inputs(0)
        ours = {"artifact": lambda: model.run(inputs), "in-tuner executor": lambda: executor.run(*inputs)}
        best = time_in_turns(ours, args)
        # the other runtimes after ours: their idle threads spin (onnxruntime's, OpenVINO's TBB
        # workers) and slowed whichever of ours ran next by up to 2x when all four took turns
        ort_run = B.onnxruntime_runner(src.path, args.threads)
        others = {f"onnxruntime {args.threads} threads": lambda: ort_run(*inputs)}
        ov_run, ov_what = openvino_runner(src.path, args.threads)
        if ov_run is not None:
            others[f"{ov_what} CPU f32, {args.threads} threads"] = lambda: ov_run(*inputs)
        for label, run in others.items():
            best.update(time_in_turns({label: run}, args))
        want = ort_run(*inputs)
        errors = {label: relative_error(run(), want) for label, run in {**ours, **others}.items()}
        model.close()

    ours, executor_s = best["artifact"], best["in-tuner executor"]
    say(f"# steady latency, fastest of {args.rounds} rounds (outputs vs onnxruntime, max relative error):")
    for label, seconds in best.items():
        say(f"{label:>40}: {1e3 * seconds:9.3f} ms  artifact {seconds / ours:5.3f}x  (error {errors[label]:.1e})")
    say(f"# artifact vs in-tuner executor: {100 * (ours / executor_s - 1):+.2f} % (goal: within 2 %); load "
        f"{1e3 * fresh['load_s']:.0f} ms (goal: under 1 s)")
    ort_s = best[f"onnxruntime {args.threads} threads"]
    ov_s = next((s for k, s in best.items() if k.startswith("OpenVINO")), None)
    emit_json("deploy", [{
        "workload": args.model, "tuned_tasks": tuned, "tasks": len(part.tasks), "artifact_bytes": size,
        "compile_s": compile_s, "rebuild_s": rebuild_s, "runtime_import_s": fresh["import_s"],
        "load_s": fresh["load_s"], "first_call_s": fresh["first_call_s"], "artifact_s": ours,
        "executor_s": executor_s, "onnxruntime_s": ort_s, "openvino_s": ov_s,
        "vs_executor": executor_s / ours, "vs_onnxruntime": ort_s / ours,
        "vs_openvino": ov_s / ours if ov_s else None, "threads": args.threads,
        "max_error_vs_onnxruntime": errors["artifact"], "verified": errors["artifact"] <= 1e-3}])
    return 0


if __name__ == "__main__":
    sys.exit(main())
