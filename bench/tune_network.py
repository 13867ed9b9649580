"""Tune a whole network with the task scheduler; run it end to end beside PyTorch.

    python bench/tune_network.py --network resnet50 --trials 400
    python bench/tune_network.py --network mobilenet_v2 --trials 300 --compare-round-robin
    python bench/tune_network.py --smoke
    python bench/tune_network.py --network resnet50 --trials 0 [--log-file tuned.jsonl]

The network (``autosched.graph`` zoo, random weights from ``--seed``) is partitioned into
tasks and tuned with ``autosched.tune_networks``; the tuned network then runs from its
kernels (``GraphExecutor``), is checked against the numpy reference of the whole network,
and is timed end to end beside the same network untuned (default schedules) and PyTorch
(same architecture and weights, ``torch.set_num_threads`` = cores, eager and TorchScript
frozen; the faster counts), all in this run. ``--trials 0`` tunes nothing: every task runs
its zero-trial program (the program the shipped base cost model ranks best after a short
search, ``autosched.history.zero_trial``), timed beside the default schedules, the tuned network
of ``--log-file`` when one is given, and PyTorch. ``--compare-round-robin`` tunes a second time
from scratch with equal rounds per task (the paper's Fig. 10 ablation) and prints both
curves of estimated latency against trials. The search can be made cheaper per round
(``--population``, ``--generations``) to spend the budget on measurements.
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
from common import bench_args, emit_json, fastest_in_turns, network_runner, machine_info, torch_available  # noqa: E402

import autosched  # noqa: E402
from autosched import graph as G  # noqa: E402
from evolution import SearchParams  # noqa: E402


# PyTorch: the same graph, node by node ---------------------------------------------------------

def torch_module(graph):
    """A callable running ``graph`` with PyTorch ops on its constants (channel-last views,
    so that convolutions take PyTorch's channels-last path without copies)."""
    import torch
    import torch.nn.functional as F

    def cl_to_cf(x):           # NHWC / NDHWC view -> NCHW / NCDHW shaped view
        return x.permute(0, x.ndim - 1, *range(1, x.ndim - 1))

    def cf_to_cl(x):
        return x.permute(0, *range(2, x.ndim), 1)

    consts = {}
    for n in graph.constants:
        consts[id(n)] = torch.from_numpy(np.ascontiguousarray(n.value))
    prepared = {}
    for n in graph.op_nodes:          # weights in PyTorch's layouts, once
        if n.kind in ("conv", "depthwise_conv2d", "conv2d_transpose"):
            w = consts[id(n.inputs[1])]
            sd = w.ndim - 2
            if n.kind == "conv":
                w = w.permute(sd + 1, sd, *range(sd))                         # (*K, I, O) -> (O, I, *K)
            elif n.kind == "depthwise_conv2d":
                kh, kw, c, m = w.shape
                w = w.permute(2, 3, 0, 1).reshape(c * m, 1, kh, kw)
            else:
                w = w.permute(2, 3, 0, 1)                                      # (kh, kw, I, O) -> (I, O, kh, kw)
            prepared[id(n)] = w.contiguous()

    def conv(n, x):
        a = n.attrs
        sd = x.ndim - 2
        w = prepared[id(n)]
        xc = cl_to_cf(x)
        if n.kind == "conv":
            fn = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[sd]
            y = fn(xc, w, None, a["stride"], a["padding"], a.get("dilation", 1), a.get("groups", 1))
        elif n.kind == "depthwise_conv2d":
            y = F.conv2d(xc, w, None, a["stride"], a["padding"], a.get("dilation", 1), groups=x.shape[-1])
        else:
            y = F.conv_transpose2d(xc, w, None, a["stride"], a["padding"])
        return cf_to_cl(y)

    def run(*inputs):
        vals = {}
        for node, x in zip(graph.inputs, inputs):
            vals[id(node)] = x
        for n in graph.nodes:
            if n.is_const:
                vals[id(n)] = consts[id(n)]
                continue
            if not n.is_op:
                continue
            xs = [vals[id(p)] for p in n.inputs]
            a, k = n.attrs, n.kind
            if k in ("conv", "depthwise_conv2d", "conv2d_transpose"):
                y = conv(n, xs[0])
            elif k == "dense":
                y = F.linear(xs[0], xs[1])
            elif k in ("matmul", "batch_matmul"):
                p, q = xs
                y = torch.matmul(p.transpose(-1, -2) if a.get("transpose_a") else p,
                                 q.transpose(-1, -2) if a.get("transpose_b") else q)
            elif k == "relu":
                y = F.relu(xs[0])
            elif k == "relu6":
                y = F.relu6(xs[0])
            elif k == "gelu":
                y = F.gelu(xs[0])
            elif k == "tanh":
                y = torch.tanh(xs[0])
            elif k == "sigmoid":
                y = torch.sigmoid(xs[0])
            elif k == "scale":
                y = xs[0] * a["value"]
            elif k == "add":
                y = xs[0] + xs[1]
            elif k == "multiply":
                y = xs[0] * xs[1]
            elif k == "bias_add":
                axis = a.get("axis", -1) % xs[0].ndim
                shape = [1] * xs[0].ndim
                shape[axis] = -1
                y = xs[0] + xs[1].reshape(shape)
            elif k == "batch_norm":
                y = cf_to_cl(F.batch_norm(cl_to_cf(xs[0]), xs[3], xs[4], xs[1], xs[2], False, 0.0, a.get("eps", 1e-5)))
            elif k == "reshape":
                y = xs[0].reshape(a["shape"])
            elif k == "transpose":
                y = xs[0].permute(*a["axes"])
            elif k == "pool":
                x = cl_to_cf(xs[0])
                sd = x.ndim - 2
                if a["pool_type"] == "max":
                    fn = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}[sd]
                    y = fn(x, a["kernel"], a["stride"], a["padding"])
                else:
                    fn = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}[sd]
                    y = fn(x, a["kernel"], a["stride"], a["padding"], count_include_pad=False)
                y = cf_to_cl(y)
            elif k == "global_pool":
                dims = tuple(range(1, xs[0].ndim - 1))
                y = xs[0].mean(dims, keepdim=True) if a["pool_type"] == "avg" else xs[0].amax(dims, keepdim=True)
            elif k == "softmax":
                y = F.softmax(xs[0], -1)
            elif k == "layer_norm":
                y = F.layer_norm(xs[0], (xs[0].shape[-1],), xs[1], xs[2], a.get("eps", 1e-5))
            else:
                raise NotImplementedError(f"no PyTorch mapping for {k}")
            vals[id(n)] = y
        return tuple(vals[id(o)] for o in graph.outputs)

    return run


def time_torch_network(graph, inputs, repeat: int) -> dict:
    """Eager and TorchScript-frozen seconds per run (median), and the output for a check."""
    import torch
    torch.set_num_threads(os.cpu_count() or 1)
    run = torch_module(graph)
    xs = tuple(torch.from_numpy(np.ascontiguousarray(x)) for x in inputs)
    out: dict = {}
    with torch.inference_mode():
        out["output"] = run(*xs)[0].numpy().copy()
        out["eager"] = _median_time(lambda: run(*xs), repeat)
    out["script"] = _script_time(run, xs, repeat)
    return out


def _script_time(run, xs, repeat):
    """The graph traced as a module, frozen (PyTorch folds batch norms into convs then) and
    optimised for inference; None where that fails."""
    import torch

    class Net(torch.nn.Module):
        def forward(self, *a):
            return run(*a)

    try:
        with torch.no_grad():
            traced = torch.jit.trace(Net().eval(), xs, check_trace=False)
            frozen = torch.jit.optimize_for_inference(torch.jit.freeze(traced))
        with torch.inference_mode():
            return _median_time(lambda: frozen(*xs), repeat)
    except Exception as err:
        print(f"# TorchScript freeze failed ({type(err).__name__}: {str(err)[:200]}); eager only", file=sys.stderr)
        return None


def _median_time(fn, repeat: int) -> float:
    fn()
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


# the benchmark ---------------------------------------------------------------------------

def network_kwargs(args) -> dict:
    kw = {}
    if args.image_size is not None:
        if args.network in ("bert", "dcgan"):
            raise SystemExit(f"--image-size does not apply to {args.network}")
        kw["image_size"] = args.image_size
    if args.smoke:
        kw = {"resnet50": dict(image_size=32, blocks=(1,), num_classes=10),
              "mobilenet_v2": dict(image_size=32, num_classes=10, config=((1, 16, 1, 1), (6, 24, 1, 2)),
                                   last_channels=64),
              "resnet3d_18": dict(frames=4, image_size=16, blocks=(1,), num_classes=10),
              "dcgan": dict(z_dim=16, base_channels=32, layers=3),
              "bert": dict(seq_len=16, hidden=64, layers=1, heads=4, ffn=128)}[G.zoo.ALIASES.get(args.network,
                                                                                               args.network)]
    return kw


def tune(part, args, strategy: str, log_file: str):
    params = SearchParams(population=args.population, generations=args.generations,
                          init_min_population=min(50, args.population))
    runner = network_runner([part], args.min_repeat_ms)
    return autosched.tune_networks(part, trials=args.trials, measure_batch=args.measure_batch, log_file=log_file,
                                   seed=args.seed, strategy=strategy, search_params=params, runner=runner,
                                   early_stopping_per_task=args.early_stopping_per_task,
                                   verbose=0 if args.json_only else 1)


def curve_points(result, every: int) -> list[tuple[int, float]]:
    pts, last = [], None
    for p in result.curve:
        lat = p["latencies"][0]
        if lat >= 1e9:
            continue
        if last is None or p["trials"] - last >= every or p is result.curve[-1]:
            pts.append((p["trials"], lat))
            last = p["trials"]
    return pts


def torch_seconds(graph, inputs, repeat: int) -> float | None:
    """The faster of PyTorch eager and TorchScript on ``graph`` (None without PyTorch)."""
    if not torch_available():
        return None
    t = time_torch_network(graph, inputs, repeat)
    return min(x for x in (t["eager"], t["script"]) if x is not None)


def zero_trial(graph, part, args, say) -> int:
    """``--trials 0``: the network with every task's zero-trial program, beside its default
    schedules, the tuned network of ``--log-file`` (if given) and PyTorch, timed in turns."""
    inputs = graph.random_inputs(args.seed)
    flops = graph.flop_count()
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", autosched.UntunedWorkloadWarning)
        zero = G.GraphExecutor(part, warn_untuned=False)
    search_s = time.perf_counter() - t0
    if not any(p.zero_trial for p in zero.programs.values()):
        raise SystemExit("no base cost model (AUTOSCHED_BASE_MODEL=off?): nothing to compare")
    ok, err = zero.verify(*inputs)
    default = G.GraphExecutor(part, warn_untuned=False, base_model=None)
    per_turn = max(3, args.repeat // 3)
    timers = {"zero-trial": lambda: zero.benchmark(*inputs, repeat=per_turn)["median"],
              "default schedules": lambda: default.benchmark(*inputs, repeat=3)["median"]}
    if args.log_file:
        tuned = G.GraphExecutor(part, log_file=args.log_file, warn_untuned=False)
        timers[f"tuned ({len(part.tasks) - len(tuned.untuned)} of {len(part.tasks)} tasks in the log)"] = \
            lambda: tuned.benchmark(*inputs, repeat=per_turn)["median"]
    timers["torch"] = lambda: torch_seconds(graph, inputs, per_turn)
    times = fastest_in_turns(timers)  # in turns, the fastest of 3 of each
    torch_best = times.pop("torch")
    say(f"\n# {part.name} batch {args.batch_size}, no measurement: zero-trial programs found in {search_s:.0f} s "
        f"({search_s / max(len(part.tasks), 1):.1f} s a task); verified against numpy: {'OK' if ok else 'WRONG'} "
        f"({err:.1e})")
    zero_s = times["zero-trial"]
    for label, t in times.items():
        say(f"  {label:<44} {1e3 * t:10.3f} ms  (the zero-trial latency is {zero_s / t:.2f}x this)")
    if torch_best:
        say(f"  {'PyTorch ' + machine_info()['torch']:<44} {1e3 * torch_best:10.3f} ms  "
            f"-> zero-trial {torch_best / zero_s:.2f}x PyTorch")
    else:
        say("# PyTorch not installed (pip install torch==2.13.0): no comparison")
    tuned_ms = [1e3 * t for k, t in times.items() if k.startswith("tuned")]
    emit_json("tune_network", [{
        "workload": f"{part.name}-b{args.batch_size}-zero-trial", "ours_gflops": flops / zero_s / 1e9,
        "numpy_gflops": None, "torch_gflops": flops / torch_best / 1e9 if torch_best else None, "vs_numpy": None,
        "vs_torch": torch_best / zero_s if torch_best else None, "latency_ms": 1e3 * zero_s,
        "default_ms": 1e3 * times["default schedules"], "tuned_ms": tuned_ms[0] if tuned_ms else None,
        "vs_tuned": tuned_ms[0] / (1e3 * zero_s) if tuned_ms else None,
        "zero_over_tuned": 1e3 * zero_s / tuned_ms[0] if tuned_ms else None,
        "torch_ms": 1e3 * torch_best if torch_best else None, "trials": 0, "tasks": len(part.tasks),
        "zero_trial_search_s": search_s, "verified": ok}])
    return 0 if ok else 1


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0], parents=[bench_args()])
    parser.add_argument("--network", default="resnet50", help=f"one of {', '.join(G.network_names())}")
    parser.add_argument("--trials", type=int, default=None, help="measurements in all (default: two rounds per task)")
    parser.add_argument("--batch-size", type=int, default=1, help="the network's batch size")
    parser.add_argument("--image-size", type=int, default=None, help="smaller images for a quicker run")
    parser.add_argument("--measure-batch", type=int, default=8, help="programs measured per round (default 8)")
    parser.add_argument("--population", type=int, default=256, help="evolution population (Ansor: 2048)")
    parser.add_argument("--generations", type=int, default=2, help="evolution generations (Ansor: 4)")
    parser.add_argument("--min-repeat-ms", type=float, default=20, help="runner: minimum ms per timing repeat (a model whose weights exceed the last-level cache is timed by single calls with its weights evicted)")
    parser.add_argument("--early-stopping-per-task", type=int, default=None)
    parser.add_argument("--compare-round-robin", action="store_true",
                        help="also tune with round robin from scratch and print both curves (Fig. 10)")
    parser.add_argument("--log-file", default=None, help="tuning log (default: a temporary file)")
    parser.add_argument("--repeat", type=int, default=10, help="end-to-end timing repeats")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.smoke:
        args.population, args.generations, args.measure_batch = 16, 1, 1
        args.min_repeat_ms, args.repeat = 2, 3
    say = (lambda *a, **k: None) if args.json_only else print

    graph = G.get_network(args.network, batch=args.batch_size, seed=args.seed, **network_kwargs(args))
    part = G.partition(graph)
    if args.trials is None:
        args.trials = 2 * args.measure_batch * len(part.tasks)
    flops = graph.flop_count()
    say(f"# {graph.summary()}\n# {flops / 1e9:.3f} GFLOP per run\n# {part.summary()}")
    if args.trials == 0:
        return zero_trial(graph, part, args, say)
    say(f"# tuning {args.trials} trials, {args.measure_batch} per round (population {args.population}, "
        f"{args.generations} generations)", flush=True)
    tmp = tempfile.mkdtemp(prefix="tune_network_")
    log = args.log_file or os.path.join(tmp, "gradient.jsonl")
    t0 = time.perf_counter()
    result = tune(part, args, "gradient", log)
    tune_s = time.perf_counter() - t0
    rr = None
    if args.compare_round_robin:
        say("# round robin (no task scheduler), from scratch", flush=True)
        t0 = time.perf_counter()
        rr = tune(part, args, "round-robin", os.path.join(tmp, "round_robin.jsonl"))
        rr_s = time.perf_counter() - t0

    inputs = graph.random_inputs(args.seed)
    executor = result.executor(0, warn_untuned=False)
    ok, err = executor.verify(*inputs)
    ours = executor.benchmark(*inputs, repeat=args.repeat)["median"]
    untuned = G.GraphExecutor(part, warn_untuned=False, base_model=None).benchmark(*inputs,
                                                                                  repeat=max(3, args.repeat // 3))
    rr_ms = None
    if rr is not None:
        rr_ms = 1e3 * rr.executor(0, warn_untuned=False).benchmark(*inputs, repeat=args.repeat)["median"]
    torch_t = None
    if torch_available():
        torch_t = time_torch_network(graph, inputs, args.repeat)
        ref = G.run_reference(graph, inputs)[0]
        scale = float(np.abs(ref).max()) or 1.0
        torch_err = float(np.abs(torch_t["output"] - ref).max()) / scale
        if torch_err > 1e-3:
            print(f"# WARNING: the PyTorch model differs from the numpy reference ({torch_err:.2e})", file=sys.stderr)
    torch_best = None
    if torch_t:
        torch_best = min(t for t in (torch_t["eager"], torch_t["script"]) if t is not None)

    say("\n# per task (gradient scheduler)")
    say(result.table())
    say("\n# kernels of the tuned network, as run by the executor")
    prof = executor.profile(*inputs, repeat=2)
    prof_total = sum(r["total"] for r in prof)
    for r in sorted(prof, key=lambda r: -r["total"])[:12]:
        say(f"  {r['workload'][:60]:<60} x{r['weight']:<3} {1e3 * r['seconds']:9.4f} ms  "
            f"{100 * r['total'] / prof_total:5.1f}%  {'tuned' if r['tuned'] else 'default'}")
    if rr is not None:
        say("\n# estimated latency (ms) against trials: gradient scheduler vs round robin (Fig. 10)")
        gp, rp = dict(curve_points(result, 1)), dict(curve_points(rr, 1))
        every = max(1, args.trials // 16)
        marks = sorted(t for t in set(gp) | set(rp) if t % every < args.measure_batch or t == args.trials)
        say(f"  {'trials':>7} {'gradient':>12} {'round-robin':>12}")
        g_last = r_last = None
        for t in marks:
            g_last, r_last = gp.get(t, g_last), rp.get(t, r_last)
            fmt = lambda v: f"{1e3 * v:12.3f}" if v is not None else f"{'-':>12}"  # noqa: E731
            say(f"  {t:7d} {fmt(g_last)} {fmt(r_last)}")
    say(f"\n# {part.name} batch {args.batch_size}: tuned {1e3 * ours:.3f} ms end to end "
        f"({flops / ours / 1e9:.1f} GFLOPS; estimated from tasks {1e3 * result.estimated_latencies()[part.name]:.3f} ms)"
        f"; untuned {1e3 * untuned['median']:.3f} ms; verified against numpy: {'OK' if ok else 'WRONG'} ({err:.1e})")
    if rr_ms is not None:
        say(f"# round robin with the same trials: {rr_ms:.3f} ms end to end (tuning {rr_s:.0f} s)")
    if torch_t:
        script = f"{1e3 * torch_t['script']:.3f} ms" if torch_t["script"] else "n/a"
        say(f"# PyTorch {machine_info()['torch']} ({os.cpu_count()} threads): eager {1e3 * torch_t['eager']:.3f} ms, "
            f"TorchScript frozen {script} -> ours {torch_best / ours:.2f}x PyTorch")
    else:
        say("# PyTorch not installed (pip install torch==2.13.0): no comparison")
    say(f"# tuning time {tune_s:.0f} s; {result.trials} trials; log {log}")

    row = {"workload": f"{part.name}-b{args.batch_size}", "ours_gflops": flops / ours / 1e9, "numpy_gflops": None,
           "torch_gflops": flops / torch_best / 1e9 if torch_best else None,
           "vs_numpy": None, "vs_torch": torch_best / ours if torch_best else None,
           "latency_ms": 1e3 * ours, "torch_ms": 1e3 * torch_best if torch_best else None,
           "torch_eager_ms": 1e3 * torch_t["eager"] if torch_t else None,
           "torch_script_ms": 1e3 * torch_t["script"] if torch_t and torch_t["script"] else None,
           "untuned_ms": 1e3 * untuned["median"], "estimated_ms": 1e3 * result.estimated_latencies()[part.name],
           "trials": result.trials, "tasks": len(part.tasks), "strategy": "gradient", "verified": ok,
           "tuning_s": tune_s, "curve": [[t, 1e3 * v] for t, v in curve_points(result, args.measure_batch)]}
    rows = [row]
    if rr is not None:
        rows.append({"workload": f"{part.name}-b{args.batch_size}-round-robin",
                     "ours_gflops": flops / (rr_ms / 1e3) / 1e9, "latency_ms": rr_ms,
                     "torch_gflops": row["torch_gflops"], "vs_torch": torch_best / (rr_ms / 1e3) if torch_best else None,
                     "estimated_ms": 1e3 * rr.estimated_latencies()[part.name], "trials": rr.trials,
                     "strategy": "round-robin", "tuning_s": rr_s,
                     "curve": [[t, 1e3 * v] for t, v in curve_points(rr, args.measure_batch)]})
    emit_json("tune_network", rows)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
