"""Every model a user brings: does it import, run and match onnxruntime, and how fast is it
before any tuning?

The models: every torchvision classification model (``list_models(module=
torchvision.models)``), the ``transformers`` models BertModel, RobertaModel,
DistilBertModel, GPT2Model and ViTModel (default configurations, random weights; batch 1,
sequence 128), all exported by PyTorch's exporter (``--exporter torchscript``, i.e.
``dynamo=False``, opset 17; or ``--exporter dynamo``), and every ``light_*.onnx`` of the
onnx wheel (random weights). Each model runs in a child process with a time and memory
limit, so that one failure or hang never stops the bench; the export runs in a child of its own
first (the exporter's memory is freed before the model is imported: a model with 2.5 GB of
weights needs both), and the timed run's two children read its one file. Per model one JSON row:

- ``imports``: ``from_onnx`` and ``partition`` succeed (else ``error``: the first line of why);
- ``matches_onnxruntime``: the largest error of any output relative to its largest
  magnitude, ours (zero-trial programs) against onnxruntime on the same random inputs;
  ``matches``: whether that is at most ``--tolerance``;
- ``tasks``, ``import_s`` (import and partition), ``zero_trial_ms`` (the model run
  with the zero-trial programs) and ``onnxruntime_ms`` (2 intra-op threads);
- with ``--time``: ``zero_trial_s`` (the time from the partitioned model to kernels ready to
  run, cold: an empty records database; ``zero_trial_search_s`` of it getting the programs,
  the rest compiling them; ``zero_trial_searched`` and ``zero_trial_remembered`` count the
  programs searched and replayed from the database) and the same of a second process with
  that database (``zero_trial_warm_s``, ``zero_trial_warm_search_s``,
  ``zero_trial_warm_remembered``, ``zero_trial_warm_searched``: a warm run replays every
  program), ``openvino_ms`` (OpenVINO CPU, 2 threads, f32 precision hint) and the ratios;
- with ``--tune-minutes M``: the model tuned M minutes (``autosched tune --minutes M``, from the
  shipped base model, no records database unless ``--records-db``): ``tuned_ms``,
  ``tuned_trials``, ``tuned_tasks_measured``, ``tuned_matches_onnxruntime`` (and ``openvino_ms``),
  where the tuning's time went (``tune_search_s`` proposing programs, ``tune_measure_s`` measuring
  them; ``tune_build_s``, ``tune_run_s`` the workers' compiling and running, summed over them),
  then the zero-trial programs, onnxruntime and OpenVINO timed again beside the tuned ones
  (``zero_trial_ms_after_tuning``, ``onnxruntime_ms_after_tuning``, ``openvino_ms_after_tuning``:
  the machine drifts in ten minutes) and the ratios to those: ``tuned_vs_onnxruntime``,
  ``tuned_vs_openvino``, ``tuned_vs_zero_trial``; ``--log-dir DIR`` keeps each model's tuning
  log as ``DIR/NAME.json`` (a later run with the same directory resumes it; ``autosched run
  --log-file F --verify`` re-times it, e.g. when a noisy spell of the VM met the timings after the
  tuning).

The summary line says ``N/M models import, run and match onnxruntime``; ``--import-only``
skips running programs; ``--default-schedules`` runs default schedules instead of the
zero-trial programs (the row's ``programs`` says which; minutes instead of hours for every
model); ``--models a,b,c`` selects; ``--records-db PATH`` keeps every model's zero-trial
programs in one records database (models that share a workload search it once); ``--smoke``
runs two tiny models (default schedules). Every reading is the median of 5 repeats of at least
100 ms each; ours, onnxruntime and OpenVINO are read in 3 turns and the fastest reading of
each is kept (after tuning: the tuned programs, the zero-trial ones, onnxruntime and
OpenVINO).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import common  # noqa: E402 - bench/ on the path first
import torch_models  # noqa: E402

THREADS = 2
SMOKE_MODELS = ("light_squeezenet", "tiny_bert")
#: each of the 5 timing repeats runs a model until this many milliseconds have passed
TIMING_MS = 100.0
#: ours, onnxruntime and OpenVINO are each read this many times in turns, the fastest kept:
#: a slow spell of the machine then slows all of them, not the one it met (one reading each
#: once put GPT-2 at 0.63x onnxruntime on the Zen 3 VM, 0.87x in turns minutes later)
TURNS = 3


def model_names(exporter_needed: bool = True) -> list[str]:
    """torchvision's classification models, the five transformers models, the light models."""
    from autosched.graph.onnx_zoo import light_model_names
    names = []
    if exporter_needed:
        names += torch_models.torchvision_names() + list(torch_models.TRANSFORMERS)
    return names + [f"light_{n}" for n in light_model_names()]


def model_file(name: str, exporter: str, directory: str) -> str:
    """The ONNX file of a model of the bench, written in ``directory`` (``tiny_<transformers
    name>``: a tiny config, sequence 8, for the smoke run)."""
    path = os.path.join(directory, f"{name}.onnx")
    if name.startswith("light_"):
        import onnx
        from autosched.graph.onnx_zoo import light_model, with_random_weights
        onnx.save(with_random_weights(light_model(name[len("light_"):]), seed=0), path)
        return path
    if name.startswith("tiny_"):
        module, example = torch_models.transformers_model(name[len("tiny_"):], tiny=True, sequence=8)
    elif name in torch_models.TRANSFORMERS:
        module, example = torch_models.transformers_model(name)
    else:
        module, example = torch_models.torchvision_model(name)
    return torch_models.export_onnx_file(module, example, path, exporter)


def _relative_error(ours, theirs) -> float:
    import numpy as np
    worst = 0.0
    for a, b in zip(ours, theirs):
        scale = float(np.max(np.abs(b))) or 1.0
        worst = max(worst, float(np.max(np.abs(np.asarray(a, np.float64) - b))) / scale)
    return worst


def _onnxruntime(path: str):
    """``run(*arrays)``: the model in an onnxruntime CPU session, 2 intra-op threads (from
    the file: a model over 2 GiB keeps its weights beside it)."""
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.intra_op_num_threads = THREADS
    options.log_severity_level = 3
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    return lambda *arrays: session.run(None, dict(zip(names, arrays)))


def _openvino(path: str):
    """``run(*arrays)``: the model compiled by OpenVINO for the CPU, 2 threads, f32."""
    import openvino as ov
    core = ov.Core()
    compiled = core.compile_model(core.read_model(path), "CPU",
                                  {"INFERENCE_NUM_THREADS": THREADS, "INFERENCE_PRECISION_HINT": "f32"})
    request = compiled.create_infer_request()
    return lambda *arrays: request.infer(list(arrays))


def measure(row: dict, path: str, exporter: str, import_only: bool, timed: bool, zero_trial: bool = True,
            tune_minutes: float | None = None, log_dir: str | None = None) -> None:
    """Fill in the ``row`` of the model in the ONNX file ``path`` (in the child process; an
    exception leaves what was found). Without ``zero_trial`` the programs are default schedules
    (the smoke run's seconds); with ``tune_minutes`` the model is then tuned that long (its log
    ``log_dir/NAME.json``, else a temporary file) and its tuned programs timed too."""
    import warnings
    from autosched import graph as G
    from autosched.graph.onnx_baselines import seconds_per_call
    name = row["workload"]
    row.update(exporter=None if name.startswith("light_") else exporter, imports=False)
    with tempfile.TemporaryDirectory(prefix="model_coverage_") as tmp:
        t0 = time.perf_counter()
        graph = G.from_onnx(path, name=name)
        part = G.partition(graph)
        row.update(imports=True, import_s=time.perf_counter() - t0, tasks=len(part.tasks))
        if import_only:
            return
        inputs = graph.random_inputs(0)
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            executor = G.GraphExecutor(part, warn_untuned=False, base_model="default" if zero_trial else None)
        row["programs"] = "zero-trial" if zero_trial else "default"
        row["zero_trial_s" if zero_trial else "build_s"] = time.perf_counter() - t0
        if executor.zero_trial is not None:
            row.update(zero_trial_search_s=executor.zero_trial_seconds,
                       zero_trial_searched=executor.zero_trial.stats["searched"],
                       zero_trial_remembered=executor.zero_trial.stats["remembered"])
        ours = executor.run(*inputs)
        ort = _onnxruntime(path)
        row["matches_onnxruntime"] = _relative_error(ours, ort(*inputs))
        openvino = _openvino(path) if timed or tune_minutes else None
        timers = {"ours": lambda: executor.benchmark(*inputs, repeat=5, min_repeat_ms=TIMING_MS)["median"],
                  "onnxruntime": lambda: seconds_per_call(lambda: ort(*inputs), repeat=5, min_repeat_ms=TIMING_MS)}
        if openvino is not None:
            timers["openvino"] = lambda: seconds_per_call(lambda: openvino(*inputs), repeat=5, min_repeat_ms=TIMING_MS)
        best = {label: 1e3 * s for label, s in common.fastest_in_turns(timers, rounds=TURNS).items()}
        ours_ms = best.pop("ours")
        row["zero_trial_ms" if zero_trial else "default_ms"] = ours_ms
        for label, ms in best.items():
            row[f"{label}_ms"] = ms
            row[f"vs_{label}"] = ms / ours_ms
        if tune_minutes:
            log = os.path.join(log_dir or tmp, f"{name}.json")
            _tune(row, part, inputs, tune_minutes, log, {"zero_trial": executor.run, "onnxruntime": ort,
                                                         "openvino": openvino})


def _tune(row: dict, part, inputs, minutes: float, log: str, others: dict) -> None:
    """Tune ``part`` for ``minutes`` into the tuning log ``log`` (resumed if it exists; as
    ``autosched tune --minutes``: from the shipped base model, with the records database the
    child was given), then check and time its tuned programs and,
    again, ``others`` (label -> ``run(*arrays)``: the zero-trial programs, onnxruntime, OpenVINO):
    ten minutes on a shared machine move every reading, so the tuned ratios are against
    baselines timed beside them: all four in ``TURNS`` turns, the fastest
    turn of each, so that a slow spell of the machine slows every one of them, not only
    the one it happened to meet (with one reading each, EfficientNet-B0's tuned programs
    once read 0.75x its zero-trial ones in a noisy hour)."""
    import autosched
    from autosched.cli import TRIALS_WITHIN_MINUTES
    from autosched.graph.onnx_baselines import seconds_per_call
    t0 = time.perf_counter()
    result = autosched.tune_networks([part], trials=TRIALS_WITHIN_MINUTES, time_budget_s=60.0 * minutes, log_file=log)
    executor = result.executor(0)
    row.update({f"tune_{kind}_s": seconds for kind, seconds in result.scheduler.time_split().items()})
    row.update(tune_s=time.perf_counter() - t0, tuned_trials=result.trials,
               tuned_tasks_measured=sum(1 for c in result.best_costs if c < 1e9),
               tuned_matches_onnxruntime=_relative_error(executor.run(*inputs), others["onnxruntime"](*inputs)))
    timers = {"tuned": lambda: executor.benchmark(*inputs, repeat=5, min_repeat_ms=TIMING_MS)["median"]}
    timers.update({label: lambda run=run: seconds_per_call(lambda: run(*inputs), repeat=5, min_repeat_ms=TIMING_MS)
                   for label, run in others.items()})
    after = {label: 1e3 * s for label, s in common.fastest_in_turns(timers, rounds=TURNS).items()}
    ours_ms = after.pop("tuned")
    row.update(tuned_ms=ours_ms, **{f"{label}_ms_after_tuning": ms for label, ms in after.items()},
               tuned_vs_zero_trial=after["zero_trial"] / ours_ms,
               tuned_vs_onnxruntime=after["onnxruntime"] / ours_ms, tuned_vs_openvino=after["openvino"] / ours_ms)


def _limit_memory(gigabytes: float):
    def apply():
        limit = int(gigabytes * (1 << 30))
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    return apply


def _run(cmd: list[str], args, env: dict, timeout: float) -> dict:
    """The last JSON line a child process prints, under ``timeout`` and ``--memory-gb``; a
    crash, a timeout or a memory-limit hit is ``{"error": why}``."""
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env,
                              preexec_fn=_limit_memory(args.memory_gb))
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:g} s"}
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    if lines:
        return json.loads(lines[-1])
    tail = [ln for ln in done.stderr.splitlines() if ln.strip()][-1:] or [f"exit code {done.returncode}"]
    memory = "MemoryError" in done.stderr or "Cannot allocate memory" in done.stderr
    return {"error": f"memory limit of {args.memory_gb} GiB hit" if memory else tail[0][:300]}


def run_export(name: str, args, directory: str) -> dict:
    """``{"path": file}``: the ONNX file of ``name`` written in ``directory`` by a child process
    (under ``--timeout`` and ``--memory-gb``), or ``{"error": "export: why"}``."""
    cmd = [sys.executable, os.path.abspath(__file__), "--child", name, "--exporter", args.exporter,
           "--export-to", directory]
    done = _run(cmd, args, dict(os.environ, OMP_NUM_THREADS=str(THREADS)), args.timeout)
    return done if "path" in done else {"error": f"export: {done.get('error')}"}


def run_child(name: str, path: str, args, records_db: str | None, import_only: bool,
              tune_minutes: float | None = None) -> dict:
    """The row of the model ``name`` in the ONNX file ``path``, from a child process under
    ``--timeout`` (plus the tuning's minutes) and ``--memory-gb``; a crash, a timeout or a
    memory-limit hit is a row with the reason."""
    cmd = [sys.executable, os.path.abspath(__file__), "--child", name, "--exporter", args.exporter,
           "--model-file", path]
    cmd += ["--import-only"] if import_only else []
    cmd += ["--time"] if args.time else []
    cmd += ["--default-schedules"] if args.default_schedules else []
    cmd += ["--tune-minutes", str(tune_minutes)] if tune_minutes else []
    cmd += ["--log-dir", os.path.abspath(args.log_dir)] if tune_minutes and args.log_dir else []
    env = dict(os.environ, OMP_NUM_THREADS=str(THREADS), AUTOSCHED_RECORDS_DB=records_db or "off")
    row = _run(cmd, args, env, args.timeout + 90 * (tune_minutes or 0))
    return row if "workload" in row else {"workload": name, "imports": False, **row}


def _reason(err: Exception) -> str:
    """An exception in one line: its type and the first four lines of its message."""
    lines = str(err).strip().splitlines()
    return (f"{type(err).__name__}: " + " / ".join(ln.strip() for ln in lines[:4]))[:600]


def child(args) -> None:
    """Export one model (``--export-to``: print its file) or measure it here and print its row
    (an error as a row too)."""
    if args.export_to:
        try:
            print(json.dumps({"path": model_file(args.child, args.exporter, args.export_to)}), flush=True)
        except Exception as err:  # noqa: BLE001 - any failure is the row's finding
            print(json.dumps({"error": _reason(err)}), flush=True)
        return
    row = {"workload": args.child}
    try:
        measure(row, args.model_file, args.exporter, args.import_only, args.time,
                zero_trial=not args.default_schedules, tune_minutes=args.tune_minutes, log_dir=args.log_dir)
    except Exception as err:  # noqa: BLE001 - any failure is the row's finding
        row["error"] = _reason(err)
    print(json.dumps(row), flush=True)


def _geomean(values) -> float | None:
    values = [v for v in values if v]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], parents=[common.bench_args()])
    parser.add_argument("--exporter", choices=("torchscript", "dynamo"), default="torchscript",
                        help="torch.onnx.export(dynamo=False) (default) or dynamo=True")
    parser.add_argument("--models", help="comma-separated model names (default: all)")
    parser.add_argument("--import-only", action="store_true", help="import and partition; run nothing")
    parser.add_argument("--default-schedules", action="store_true",
                        help="run default schedules, not the zero-trial programs (fast; for correctness)")
    parser.add_argument("--time", action="store_true",
                        help="also the time to get the zero-trial programs (cold and warm) and OpenVINO")
    parser.add_argument("--records-db", metavar="PATH",
                        help="one records database for every model's zero-trial programs (models that share "
                             "a workload search it once; default: none; --time always starts each model cold)")
    parser.add_argument("--tune-minutes", type=float, default=None, metavar="M",
                        help="then tune each model for M minutes and time its tuned programs too (tuned_ms, "
                             "tuned_vs_onnxruntime, tuned_vs_openvino)")
    parser.add_argument("--log-dir", default=None, metavar="DIR",
                        help="with --tune-minutes: keep each model's tuning log as DIR/NAME.json (resumed by a "
                             "later run with the same directory; default: a temporary file)")
    parser.add_argument("--tolerance", type=float, default=1e-4, help="largest relative error that matches")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per model")
    parser.add_argument("--memory-gb", type=float, default=12.0, help="address-space limit per model")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--export-to", help=argparse.SUPPRESS)
    parser.add_argument("--model-file", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.default_schedules = args.default_schedules or args.smoke
    if args.log_dir and not args.tune_minutes:
        parser.error("--log-dir keeps tuning logs: it needs --tune-minutes")
    if args.log_dir:
        try:
            os.makedirs(args.log_dir, exist_ok=True)
        except OSError as err:
            parser.error(f"--log-dir {args.log_dir}: cannot make that directory ({err.strerror})")
    if args.child:
        child(args)
        return 0
    names = list(SMOKE_MODELS) if args.smoke else (args.models.split(",") if args.models else model_names())
    say = (lambda *a, **k: None) if args.json_only else print
    rows = []
    for name in names:
        with tempfile.TemporaryDirectory(prefix="model_coverage_") as tmp:
            exported = run_export(name, args, tmp)
            if "path" not in exported:
                row = {"workload": name, "imports": False, **exported}
            else:
                db = os.path.join(tmp, "records.db") if args.time else args.records_db
                row = run_child(name, exported["path"], args, db, args.import_only, tune_minutes=args.tune_minutes)
            if args.time and not args.default_schedules and row.get("imports") and "error" not in row:
                warm = run_child(name, exported["path"], args, db, False)
                for key in ("s", "search_s", "searched", "remembered"):
                    row[f"zero_trial_warm_{key}"] = warm.get(f"zero_trial_{key}")
        row["matches"] = None if args.import_only else all(
            row.get(key) is not None and row[key] <= args.tolerance
            for key in ("matches_onnxruntime",) + (("tuned_matches_onnxruntime",) if args.tune_minutes else ()))
        rows.append(row)
        say(json.dumps(row), flush=True)
    good = [r for r in rows if r.get("imports") and (args.import_only or r["matches"])]
    what = "import" if args.import_only else "import, run and match onnxruntime"
    say(f"{len(good)}/{len(rows)} models {what}")
    programs = "default schedules" if args.default_schedules else "zero-trial"
    for baseline, key in (("onnxruntime", "vs_onnxruntime"), ("OpenVINO", "vs_openvino")):
        mean = _geomean(r.get(key) for r in good)
        if mean:
            say(f"geometric mean of {programs} vs {baseline}: {mean:.2f}x")
        tuned = _geomean(r.get(f"tuned_{key}") for r in good)
        if tuned:
            say(f"geometric mean of programs tuned {args.tune_minutes:g} minutes vs {baseline}: {tuned:.2f}x "
                f"(lowest {min(r[f'tuned_{key}'] for r in good if r.get(f'tuned_{key}')):.2f}x)")
    common.emit_json("model_coverage", rows)
    return 0 if len(good) == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
