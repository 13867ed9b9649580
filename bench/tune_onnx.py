"""Tune a real model from its ONNX file for a wall-time budget; run it end to end beside
onnxruntime and PyTorch.

    python bench/tune_onnx.py --model resnet50 --minutes 20
    python bench/tune_onnx.py --model bert --minutes 40
    python bench/tune_onnx.py --model mobilenet_v2 --minutes 10
    python bench/tune_onnx.py --smoke

The model (``bench/onnx_models.py``: the ONNX zoo's ResNet-50 and SqueezeNet from the onnx
wheel, MobileNet-V2 and BERT-base exported from PyTorch) is imported with
``autosched.graph.from_onnx`` and first run untuned (every task its zero-trial program,
the base model's pick; default schedules with ``AUTOSCHED_BASE_MODEL=off``). It is then tuned
with ``autosched.tune_networks`` in chunks that resume from one log; after each chunk the
model runs end to end from the best programs so far (the curve of end-to-end latency
against tuning time; building and timing are not counted as tuning time). At the end the
tuned model is checked against onnxruntime's outputs and timed in turns (three rounds, the
fastest of each kept) with the untuned model, onnxruntime (2 intra-op threads) and PyTorch
(2 threads: the exported module itself, or the ONNX file run by PyTorch for the zoo's
models), all in this run. The end-to-end latency is also set
against the sum of its tasks' measured latencies (what the executor adds between kernels)
and against the executor's own per-kernel profile.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import onnx_models  # noqa: E402
from common import bench_args, emit_json, fastest_in_turns, network_runner  # noqa: E402

import autosched  # noqa: E402
from autosched import graph as G  # noqa: E402
from autosched.graph import onnx_baselines as B  # noqa: E402
from autosched.options import RETIME_BEST  # noqa: E402
from evolution import SearchParams  # noqa: E402

THREADS = 2
#: the last chunk re-times every task's best programs in turns (RETIME_BEST of them), reserved
#: out of the budget: ResNet-50's 28 tasks took 38 s here (2026-11-24), 1.4 s a task
RETIME_SECONDS_PER_TASK = 2.0


def torch_baseline(src, inputs):
    """A run of PyTorch on 2 threads, its outputs, and what runs (None, None and why where
    it cannot run the model)."""
    try:
        import torch
    except ImportError:
        return None, None, "PyTorch not installed"
    torch.set_num_threads(THREADS)
    if src.torch_module is not None:
        xs = tuple(torch.from_numpy(np.ascontiguousarray(x)) for x in inputs)
        with torch.no_grad():
            frozen = torch.jit.optimize_for_inference(torch.jit.freeze(torch.jit.trace(src.torch_module, xs,
                                                                                       check_trace=False)))

        def run():
            with torch.inference_mode():
                return frozen(*xs)
        what = "the PyTorch module, TorchScript frozen"
        out = [run().numpy()]
    else:
        try:
            runner = B.torch_runner(src.path, src.input_shapes, THREADS)
        except B.Unsupported as err:
            return None, None, f"PyTorch cannot run it ({err})"

        def run():
            return runner(*inputs)
        what = "the ONNX file run by PyTorch, TorchScript frozen"
        out = run()
    return run, out, what


def relative_error(got, want) -> float:
    return max(float(np.max(np.abs(g.astype(np.float64) - w))) / (float(np.max(np.abs(w))) or 1.0)
               for g, w in zip(got, want))


def tune_chunk(part, args, trials: int, log: str, chunk: int, seconds: float | None, last: bool):
    """One chunk of the tuning; only the last ends by re-timing every task's best programs
    in turns (``tune_networks(retime_best=)``), as one tuning of the whole budget would."""
    params = SearchParams(population=args.population, generations=args.generations,
                          init_min_population=min(50, args.population))
    runner = network_runner([part], args.min_repeat_ms)
    return autosched.tune_networks(part, trials=trials, measure_batch=args.measure_batch, log_file=log,
                                   seed=args.seed + chunk, search_params=params, runner=runner,
                                   time_budget_s=seconds, retime_best=RETIME_BEST if last else 0,
                                   verbose=0 if args.json_only else 1)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0], parents=[bench_args()])
    parser.add_argument("--model", default=None, choices=onnx_models.MODELS,
                        help="default resnet50 (mobilenet_v2 with --smoke)")
    parser.add_argument("--minutes", type=float, default=20.0, help="tuning wall time (default 20)")
    parser.add_argument("--curve-points", type=int, default=6, help="end-to-end measurements while tuning")
    parser.add_argument("--measure-batch", type=int, default=16, help="programs measured per round (default 16)")
    parser.add_argument("--population", type=int, default=256, help="evolution population (Ansor: 2048)")
    parser.add_argument("--generations", type=int, default=2, help="evolution generations (Ansor: 4)")
    parser.add_argument("--min-repeat-ms", type=float, default=20, help="runner: minimum ms per timing repeat (a model whose weights exceed the last-level cache is timed by single calls with its weights evicted)")
    parser.add_argument("--log-file", default=None, help="tuning log (default: a temporary file); resumed from")
    parser.add_argument("--repeat", type=int, default=10, help="end-to-end timing repeats")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-winograd", dest="winograd", action="store_false",
                        help="compute 3x3 stride-1 convolutions directly (graph.partition(winograd=False))")
    args = parser.parse_args(argv)
    if args.smoke:
        args.model = args.model or "mobilenet_v2"
        args.minutes, args.curve_points, args.measure_batch = min(args.minutes, 0.3), 2, 1
        args.population, args.generations, args.min_repeat_ms, args.repeat = 16, 1, 2, 3
    args.model = args.model or "resnet50"
    say = (lambda *a, **k: None) if args.json_only else print

    src = onnx_models.load(args.model, smoke=args.smoke, seed=args.seed)
    t0 = time.perf_counter()
    graph = G.from_onnx(src.path, src.input_shapes)
    import_s = time.perf_counter() - t0
    part = G.partition(graph, winograd=args.winograd)
    flops = graph.flop_count()
    say(f"# {src.path}\n# imported in {import_s:.1f} s: {graph.summary()}\n# {flops / 1e9:.3f} GFLOP per run\n"
        f"# {part.summary()}", flush=True)
    inputs = [src.example[0].numpy()] if src.example else graph.random_inputs(args.seed)

    kernels: dict = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        untuned_ex = G.GraphExecutor(part, warn_untuned=False, kernel_cache=kernels)
    untuned_kind = ("zero-trial programs" if any(p.zero_trial for p in untuned_ex.programs.values())
                    else "default schedules")
    untuned_first = untuned_ex.benchmark(*inputs, repeat=max(3, args.repeat // 3))["median"]
    say(f"# untuned ({untuned_kind}): {1e3 * untuned_first:.3f} ms end to end ({untuned_ex.n_kernels} kernels, "
        f"built in {untuned_ex.build_seconds:.1f} s)", flush=True)

    log = args.log_file or os.path.join(tempfile.mkdtemp(prefix="tune_onnx_"), f"{args.model}.jsonl")
    budget, tuned_s, chunk, curve, result = 60.0 * args.minutes, 0.0, 0, [], None
    first = len(part.tasks) * args.measure_batch          # the warm-up: one round per task
    rounds, last = 0, False
    retime_s = RETIME_SECONDS_PER_TASK * len(part.tasks)  # the last chunk's re-timing, kept out of its slice
    while not last:
        # the warm-up (one round per task) whole, then chunks of wall time, each starting no
        # round that would end after it (TaskScheduler.tune's time budget); the last is the
        # one after which no round of the mean length so far would fit in the budget
        left = budget - tuned_s - retime_s
        round_s = tuned_s / rounds if rounds else 0.0
        slice_s = min(left, budget / args.curve_points)
        last = chunk > 0 and left - slice_s < round_s
        if chunk > 0 and slice_s < round_s:
            break
        trials, seconds = (first, None) if chunk == 0 else (1 << 30, slice_s)
        t0 = time.perf_counter()
        result = tune_chunk(part, args, trials, log, chunk, seconds, last=last)
        tuned_s += time.perf_counter() - t0
        rounds += -(-result.trials // args.measure_batch)
        chunk += 1
        ex = result.executor(0, warn_untuned=False, kernel_cache=kernels)
        # the fastest of three short readings: a burst of the host (its kernel's memory
        # monitor takes a core for 100-200 ms at times) can poison one, not all three
        e2e = fastest_in_turns({"e2e": lambda: ex.benchmark(*inputs, repeat=3, min_repeat_ms=50)["median"]})["e2e"]
        est = result.estimated_latencies()[part.name]
        curve.append([tuned_s, 1e3 * e2e, 1e3 * est if est < 1e9 else None, len(ex.untuned)])
        say(f"# after {tuned_s:6.0f} s of tuning: {1e3 * e2e:9.3f} ms end to end; tasks' sum "
            f"{'-' if est >= 1e9 else f'{1e3 * est:.3f} ms'}; {len(ex.untuned)} tasks untuned", flush=True)
        if result.trials == 0:
            say("# the scheduler has nothing left to tune")
            break

    executor = G.GraphExecutor(part, log_file=log, warn_untuned=False, kernel_cache=kernels)
    ours_out = executor.run(*inputs)
    ort_run = B.onnxruntime_runner(src.path, THREADS)
    ort_out = ort_run(*inputs)
    err = relative_error(ours_out, ort_out)
    ok = err <= 1e-3
    torch_run, torch_out, torch_what = torch_baseline(src, inputs)
    if torch_out is not None and relative_error(torch_out, ort_out) > 1e-3:
        print("# WARNING: PyTorch's outputs differ from onnxruntime's", file=sys.stderr)
    per_turn = max(3, args.repeat // 3)  # the final timings: in turns, the fastest of 3 kept
    final = fastest_in_turns({
        "ours": lambda: executor.benchmark(*inputs, repeat=per_turn, min_repeat_ms=100)["median"],
        "untuned": lambda: untuned_ex.benchmark(*inputs, repeat=per_turn, min_repeat_ms=100)["median"],
        "onnxruntime": lambda: B.seconds_per_call(lambda: ort_run(*inputs), repeat=per_turn),
        "torch": lambda: B.seconds_per_call(torch_run, repeat=per_turn) if torch_run else None})
    ours, untuned, ort_t, torch_t = final["ours"], final["untuned"], final["onnxruntime"], final["torch"]
    del untuned_ex
    tasks_sum = result.estimated_latencies()[part.name] if result is not None else float("inf")
    profile = executor.profile(*inputs, repeat=3)
    profile_sum = sum(r["total"] for r in profile)

    say("\n# per task (last tuning chunk's scheduler)")
    say(result.table() if result is not None else "  (not tuned)")
    say("\n# kernels as the executor runs them, timed one at a time")
    for r in sorted(profile, key=lambda r: -r["total"])[:15]:
        say(f"  {r['workload'][:64]:<64} x{r['weight']:<3} {1e3 * r['seconds']:9.4f} ms  "
            f"{100 * r['total'] / profile_sum:5.1f}%  {'tuned' if r['tuned'] else 'default'}")
    say("\n# end-to-end latency against tuning time")
    say(f"  {'tuning s':>9} {'end to end ms':>14} {'tasks sum ms':>13} {'untuned tasks':>14}")
    for s, e, t, u in curve:
        say(f"  {s:9.0f} {e:14.3f} {'-' if t is None else f'{t:.3f}':>13} {u:14d}")
    ratio = ours / tasks_sum if tasks_sum < 1e9 else None
    say(f"\n# timed in turns, the fastest of 3 of each: {args.model} tuned {1e3 * ours:.3f} ms end to end "
        f"({flops / ours / 1e9:.1f} GFLOPS), untuned ({untuned_kind}) {1e3 * untuned:.3f} ms = {untuned / ours:.2f}x "
        f"the tuned latency; outputs vs onnxruntime: {'OK' if ok else 'WRONG'} (max relative error {err:.1e})")
    say(f"# end to end / sum of the tasks' measured latencies ({1e3 * tasks_sum:.3f} ms): "
        f"{'-' if ratio is None else f'{ratio:.3f}'}; / the executor's per-kernel profile "
        f"({1e3 * profile_sum:.3f} ms): {ours / profile_sum:.3f}")
    say(f"# onnxruntime {THREADS} threads: {1e3 * ort_t:.3f} ms -> autosched {ort_t / ours:.2f}x")
    if torch_t is not None:
        say(f"# PyTorch {THREADS} threads ({torch_what}): {1e3 * torch_t:.3f} ms -> autosched {torch_t / ours:.2f}x")
    else:
        say(f"# PyTorch: {torch_what}")
    say(f"# tuning time {tuned_s:.0f} s in {chunk} chunks; log {log}")

    row = {"workload": args.model, "ours_gflops": flops / ours / 1e9, "numpy_gflops": None,
           "torch_gflops": flops / torch_t / 1e9 if torch_t else None, "vs_numpy": None,
           "vs_torch": torch_t / ours if torch_t else None, "latency_ms": 1e3 * ours,
           "onnxruntime_ms": 1e3 * ort_t, "vs_onnxruntime": ort_t / ours,
           "torch_ms": 1e3 * torch_t if torch_t else None, "untuned_ms": 1e3 * untuned, "untuned_programs": untuned_kind,
           "untuned_over_tuned": untuned / ours, "tuning_s": tuned_s,
           "trials": len(autosched.read_records(log)) if os.path.exists(log) else 0,
           "tasks_sum_ms": 1e3 * tasks_sum if tasks_sum < 1e9 else None, "e2e_over_tasks": ratio,
           "profile_sum_ms": 1e3 * profile_sum, "e2e_over_profile": ours / profile_sum,
           "kernels": executor.n_kernels, "tasks": len(part.tasks), "verified": ok, "max_rel_error": err,
           "import_s": import_s, "winograd": args.winograd, "curve": curve}
    emit_json("tune_onnx", [row])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
