"""Tune the single-operator suite (and the ConvLayer and TBS subgraphs) of the Ansor paper;
print each tuned kernel's GFLOPS beside numpy and PyTorch measured in the same run, and the
tuning time split into search, build and run. The comparison with TVM's MetaSchedule, tuned
and re-timed in the same run, is ``bench/vs_metaschedule.py``.

    python bench/tune_ops.py --trials N [--workloads GMM C2D-1x7x7x512x512-k3s1p1 ...]
    python bench/tune_ops.py --target cuda --trials N --workloads ...   # on the GPU, beside PyTorch CUDA
    python bench/tune_ops.py --ablation --trials N      # paper Fig. 7 on the last ResNet-50 conv,
                                                        # with the base model, the records database
                                                        # and from scratch
    python bench/tune_ops.py --round-time               # one search round vs measuring its batch
    python bench/tune_ops.py --round-time --workloads C2D-1x14x14x256x256-k3s1p1 DEP-1x14x14x512-k3s2p1 \
        GMM-1x512x512x512 NRM-1x1024x1024           # one round on each (PYTHONPATH: whose code)
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

import ir  # noqa: E402
import autosched  # noqa: E402
import sketch_rules  # noqa: E402
from autosched import ops  # noqa: E402
from autosched.history.records import trials_of  # noqa: E402
from autosched.tune import search_workers  # noqa: E402
from evolution import RandomModel, SearchParams, SketchPolicy, XGBoostModel  # noqa: E402

ABLATION_WORKLOAD = "C2D-1x7x7x512x512-k3s1p1"


def torch_baseline(w) -> float | None:
    """PyTorch seconds for the same computation (channels-last where it has a layout)."""
    if not common.torch_available():
        return None
    program = torch_program(w)
    return None if program is None else common.time_torch(*program)


def torch_program(w, device: str = "cpu"):
    """``(fn, *tensors)``: PyTorch's version of the workload on ``device`` (channels-last
    where it has a layout), None where it has no operator for it."""
    import torch
    import torch.nn.functional as F
    p = w.params
    x = [torch.from_numpy(a).to(device) for a in w.random_inputs(np.random.default_rng(0))]

    def cl(t, dims):  # NHWC data / HWIO weight -> channel-first tensors in channels-last memory
        return t.permute(*dims).contiguous()

    name = w.name
    if name == "batch_matmul":
        return torch.bmm, x[0], x[1]
    if name in ("conv1d", "conv2d", "conv3d", "depthwise_conv2d", "conv_layer"):
        nd = {"conv1d": 1, "conv3d": 3}.get(name, 2)
        data = cl(x[0], (0, nd + 1) + tuple(range(1, nd + 1)))
        if nd == 2:
            data = data.contiguous(memory_format=torch.channels_last)
        weight = cl(x[1], (nd + 1, nd) + tuple(range(nd))) if name != "depthwise_conv2d" else \
            cl(x[1], (2, 3, 0, 1)).reshape(-1, 1, p["kernel"], p["kernel"])
        groups = p.get("groups", 1) if name != "depthwise_conv2d" else p["C"]
        conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[nd]
        kw = dict(stride=p["stride"], padding=p["padding"], dilation=p.get("dilation", 1), groups=groups)
        if name == "conv_layer":
            bias, scale, shift = x[2], x[3].view(1, -1, 1, 1), x[4].view(1, -1, 1, 1)
            return (lambda d, wt: torch.relu(conv(d, wt, bias, **kw) * scale + shift)), data, weight
        return (lambda d, wt: conv(d, wt, **kw)), data, weight
    if name == "conv2d_transpose":
        data = cl(x[0], (0, 3, 1, 2)).contiguous(memory_format=torch.channels_last)
        weight = cl(x[1], (2, 3, 0, 1))
        return (lambda d, wt: F.conv_transpose2d(d, wt, stride=p["stride"], padding=p["padding"])), data, weight
    if name == "norm":
        return (lambda a: torch.sqrt((a * a).sum(dim=(1, 2)))), x[0]
    if name == "transpose_batch_matmul":
        def tbs(q, k):
            s = q.permute(0, 2, 1, 3) @ k.permute(0, 2, 3, 1)
            return torch.softmax(s, dim=-1)
        return tbs, x[0], x[1]
    return None  # capsule conv2d has no PyTorch operator


def numpy_baseline(w) -> float | None:
    """numpy seconds: its own float32 routine where it has one (``ops.numpy_routine``:
    np.matmul, a BLAS dot per row for the norm), the (vectorised, float64) numpy reference
    otherwise."""
    inputs = w.random_inputs(np.random.default_rng(0))
    routine = ops.numpy_routine(w, inputs)
    if routine is not None:
        return common.time_numpy(routine)
    return common.time_numpy(w.reference, inputs, min_time=0.2, repeat=3)


def retime(kernel, dag, w) -> float:
    """A tuned kernel checked and re-timed in this process (same conditions as the baselines)."""
    inputs = w.random_inputs(np.random.default_rng(0))
    args = [kernel.pack(t.name, a) if t.name in kernel.layouts else a for t, a in zip(dag.inputs, inputs)]
    outputs = w.output_buffers()
    kernel(*args, *outputs)
    for got, want in zip(outputs, w.reference(inputs)):
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3)
    return kernel.time(*args, *outputs, number=1, repeat=5, min_repeat_ms=50).median


def compare_speeds(kernels, dag, w, rounds: int = 3) -> tuple[list, float | None, float | None]:
    """Seconds per call of each tuned kernel, of numpy and of PyTorch (None where it does
    not apply), the fastest of ``rounds`` turns (``common.fastest_in_turns``)."""
    timers = {i: (lambda k=k: retime(k, dag, w)) for i, k in enumerate(kernels)}
    timers.update(numpy=lambda: numpy_baseline(w), torch=lambda: torch_baseline(w))
    best = common.fastest_in_turns(timers, rounds)
    return [best[i] for i in range(len(kernels))], best["numpy"], best["torch"]


def best_record_at(path, task, n: int):
    """The fastest valid record among the first ``n`` trials of ``task`` in a log (None if
    it holds fewer than ``n``, or none of them is valid)."""
    records = [r for r in trials_of(autosched.read_records(path)) if r.workload_key == task.workload_key]
    valid = [r for r in records[:n] if r.ok]
    return min(valid, key=lambda r: r.mean_cost) if len(records) >= n and valid else None


def history_from_log(path, task) -> list[tuple[int, float, float]]:
    """(trials, best GFLOPS, seconds since the first record started) after every record of
    ``task`` in a tuning log: the whole tuning, across resumed runs (the time between two
    runs counts); re-timings (``retimed`` records) are not trials and are left out."""
    records = [r for r in trials_of(autosched.read_records(path)) if r.workload_key == task.workload_key]
    if not records:
        return []
    flops, best, out = task.dag.flop_count(), float("inf"), []
    start = records[0].timestamp - records[0].all_cost
    for i, rec in enumerate(records, 1):
        if rec.ok:
            best = min(best, rec.mean_cost)
        out.append((i, flops / best / 1e9 if best < float("inf") else 0.0, rec.timestamp - start))
    return out


def at_trials(history, n: int) -> tuple[float, float] | tuple[None, None]:
    """(best GFLOPS, seconds of tuning) after ``n`` trials; Nones if tuning stopped before."""
    got = (None, None)
    for trials, gflops, elapsed in history:
        if trials <= n:
            got = (gflops, elapsed)
    return got if history and history[-1][0] >= n else (None, None)


def tune_suite(args, names) -> list[dict]:
    table = common.Table(["workload", "trials", "ours GFLOPS", "numpy", "torch", "vs numpy", "vs torch",
                          "search s", "build s", "run s", "search s/round", "measure s/round"])
    rows = []
    with tempfile.TemporaryDirectory() as scratch:  # the tuning logs, without --log-dir
        for name in names:
            w = ops.suite_workload(name)
            task = ir.SearchTask(ir.ComputeDAG(w.tensors), desc=name)
            log = os.path.join(args.log_dir or scratch, f"{name}.json")
            result = autosched.auto_schedule(task, trials=args.trials, measure_batch=args.batch, seed=args.seed,
                                             log_file=log, search_params=_params(args), verbose=1)
            rounds = max(len(result.history), 1)
            per_round = (result.time_search / rounds, result.time_measure / rounds)
            if result.kernel is None:
                table.add(name, result.trials, None, None, None, None, None, result.time_search,
                          result.time_build, result.time_run, *per_round)
                rows.append(common.json_row(name, trials=result.trials, error="no valid program"))
                continue
            secs, numpy_s, torch_s = compare_speeds([result.kernel], task.dag, w)
            ours, nf, tf = (common.gflops(w.flops, t) for t in (secs[0], numpy_s, torch_s))
            table.add(name, result.trials, ours, nf, tf, common.ratio(ours, nf), common.ratio(ours, tf),
                      result.time_search, result.time_build, result.time_run, *per_round)
            if not args.json_only:  # a line as each workload ends: a long suite run killed midway keeps them
                print(f"{name}: {ours:.1f} GFLOPS after {result.trials} trials; numpy {nf or 0:.1f}, "
                      f"torch {tf or 0:.1f}", flush=True)
            rows.append(common.json_row(name, ours, nf, tf, trials=result.trials,
                                        search_s=result.time_search, build_s=result.time_build,
                                        run_s=result.time_run, search_s_per_round=per_round[0],
                                        measure_s_per_round=per_round[1],
                                        wall_s=result.time_search + result.time_measure, history=result.history))
    if not args.json_only:
        table.print()
    return rows


def torch_cuda_seconds(w) -> float | None:
    """PyTorch on the GPU (cuBLAS/cuDNN, float32 with TF32 off, cuDNN choosing its fastest
    algorithm): seconds per call timed with CUDA events. None without a CUDA PyTorch."""
    torch = common.torch_cuda(tf32=False)
    if torch is None:
        return None
    program = torch_program(w, "cuda")
    if program is None:
        return None
    fn, *args = program
    with torch.no_grad():
        return common.time_cuda(lambda: fn(*args), torch.cuda.synchronize, common.torch_cuda_events(torch))


def cuda_seconds(kernel, w) -> float:
    """Our tuned GPU program checked against numpy and timed on the device (CUDA events)."""
    inputs, outputs = w.random_inputs(np.random.default_rng(0)), w.output_buffers()
    kernel(*inputs, *outputs)
    for got, want in zip(outputs, w.reference(inputs)):
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3)
    return kernel.time(*inputs, *outputs, number=1, repeat=5, min_repeat_ms=50).median


def tune_suite_cuda(args, names) -> list[dict]:
    """The suite on the GPU beside PyTorch CUDA timed in the same run (fastest of three
    turns each)."""
    table = common.Table(["workload", "trials", "ours GFLOPS", "torch GFLOPS", "vs torch", "search s", "build s",
                          "run s"])
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for name in names:
            w = ops.suite_workload(name)
            task = ir.SearchTask(ir.ComputeDAG(w.tensors), target="cuda", desc=name)
            log = os.path.join(args.log_dir or scratch, f"{name}.cuda.json")
            result = autosched.auto_schedule(task, trials=args.trials, measure_batch=args.batch, seed=args.seed,
                                             log_file=log, search_params=_params(args), verbose=1)
            if result.kernel is None:
                table.add(name, result.trials, None, None, None, result.time_search, result.time_build,
                          result.time_run)
                rows.append(common.json_row(name, trials=result.trials, error="no valid program", target="cuda"))
                continue
            ours_s = torch_s = None
            for _ in range(3):
                t = cuda_seconds(result.kernel, w)
                ours_s = t if ours_s is None else min(ours_s, t)
                t = torch_cuda_seconds(w)
                torch_s = t if torch_s is None or t is None else min(torch_s, t)
            ours, tf = common.gflops(w.flops, ours_s), common.gflops(w.flops, torch_s)
            table.add(name, result.trials, ours, tf, common.ratio(ours, tf), result.time_search, result.time_build,
                      result.time_run)
            if not args.json_only:
                print(f"{name}: {ours:.1f} GFLOPS on the GPU after {result.trials} trials; PyTorch CUDA "
                      f"{tf or 0:.1f}", flush=True)
            rows.append(common.json_row(name, ours, None, tf, trials=result.trials, target="cuda",
                                        search_s=result.time_search, build_s=result.time_build,
                                        run_s=result.time_run, history=result.history))
    if not args.json_only:
        table.print()
    return rows


def _params(args) -> SearchParams:
    return SearchParams(population=args.population, generations=args.generations, islands=args.islands,
                        random_walk_q=args.random_walk_q, contextual_eps=args.contextual_eps)


#: the variants of ``--ablation``: what a tuning starts from (the shipped base model, a
#: records database of other workloads' records, nothing), then the paper's Fig. 7 ones
ABLATION_VARIANTS = ("base model", "records database", "from scratch", "random sampling", "limited space")


def training_records_db(folder: str) -> str:
    """A records database holding the base model's training logs (other workloads than any
    benchmark's): what a user's database holds after tuning those workloads."""
    import tarfile
    path = os.path.join(folder, "records.jsonl")
    with tarfile.open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "data",
                                   "training_records.tar.gz")) as tar, open(path, "wb") as out:
        for member in sorted(tar.getmembers(), key=lambda m: m.name):
            if member.isfile():
                out.write(tar.extractfile(member).read())
    return path


def ablation(args) -> list[dict]:
    """Best GFLOPS vs trials on a workload in neither the base model's training data nor
    the database: starting from the shipped base model, from a records database of the
    training workloads' records (no base model), from scratch (neither: random programs
    until the model has 100 measurements); then the paper's Fig. 7: random sampling
    without fine-tuning, and a limited space (no cache-write/fusion sketches)."""
    w = ops.suite_workload(args.ablation_workload)
    task = ir.SearchTask(ir.ComputeDAG(w.tensors), desc=args.ablation_workload)
    limited = [r for r in sketch_rules.rules_for("cpu") if r.name not in ("add_cache_write",
                                                                          "multi_level_tiling_with_fusion")]
    scratch = tempfile.mkdtemp(prefix="ablation_")
    none = dict(base_model=None, records_db=None)
    variants = {
        "base model": dict(search_params=_params(args), records_db=None),
        "records database": dict(search_params=_params(args), base_model=None,
                                 records_db=training_records_db(scratch)),
        "from scratch": dict(search_params=_params(args), **none),
        "random sampling": dict(cost_model=RandomModel(seed=args.seed), **none,
                                search_params=SearchParams(generations=0, eps_greedy=1.0, population=args.population)),
        "limited space": dict(search_params=_params(args), custom_rules=[_OnlyRules(limited)], **none),
    }
    variants = {k: v for k, v in variants.items() if k in args.ablation_variants}
    curves = {}
    log = os.path.join(args.log_dir, f"{args.ablation_workload}.json") if args.log_dir else None
    if log and os.path.exists(log) and "base model" in variants:
        # the suite run (base model, no database) tuned it already: its log is that curve
        curves["base model"] = curve_from_log(log, task, args.trials, args.batch)
        print(f"base model: the first {args.trials} trials of {log}")
    for label, kw in variants.items():
        if label in curves:
            continue
        if not args.json_only:
            print(f"# {label}", flush=True)
        result = autosched.auto_schedule(task, trials=args.trials, measure_batch=args.batch, seed=args.seed,
                                         verbose=1, **kw)
        curves[label] = [(t, g) for t, g, _ in result.history]
    checkpoints = sorted({t for c in curves.values() for t, _ in c})
    table = common.Table(["trials"] + list(curves))
    for t in checkpoints:
        table.add(t, *[max([g for n, g in c if n <= t], default=None) for c in curves.values()])
    if not args.json_only:
        print(f"\nablation on {args.ablation_workload}: best GFLOPS vs trials")
        table.print()
        _plot(curves, args.ablation_workload)
    return [common.json_row(f"ablation {label}", max((g for _, g in c), default=None), curve=c)
            for label, c in curves.items()]


def curve_from_log(path, task, trials: int, batch: int) -> list[tuple[int, float]]:
    """Best GFLOPS after every ``batch`` trials of the first ``trials`` records of ``task``
    in a tuning log (records are written in measurement order)."""
    history = history_from_log(path, task)[:trials]
    return [(n, g) for n, g, _ in history if n % batch == 0 or n == len(history)]


class _OnlyRules(sketch_rules.SketchRule):
    """Applies a fixed rule list in place of the built-in ones (for the limited space)."""
    name = "limited_space"

    def __init__(self, rules):
        self.rules = rules

    def condition(self, ctx, state, stage_id):
        return sketch_rules.Condition.APPLY_AND_SKIP_REST

    def apply(self, ctx, state, stage_id):
        out = []
        for rule in self.rules:
            cond = rule.condition(ctx, state, stage_id)
            if cond is sketch_rules.Condition.PASS:
                continue
            out.extend(rule.apply(ctx, state, stage_id))
            if cond is sketch_rules.Condition.APPLY_AND_SKIP_REST:
                break
        return out


def _plot(curves, title) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(matplotlib is not installed: no PNG plot)")
        return
    fig, ax = plt.subplots(figsize=(6, 4))
    for label, c in curves.items():
        ax.plot([t for t, _ in c], [g for _, g in c], marker="o", label=label)
    ax.set_xlabel("trials")
    ax.set_ylabel("best GFLOPS")
    ax.set_title(title)
    ax.legend()
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tune_ops_ablation.png")
    fig.savefig(path, dpi=100, bbox_inches="tight")
    print(f"plot: {path}")


ROUND_TIME_WORKLOAD = "GMM-1x1024x1024x1024"


def round_time(args, names) -> list[dict]:
    """One search round at full size (population 2048, 4 generations) per workload (default
    GMM-1024), once the cost model is trained, beside the time to measure the batch it
    proposes. Run it with ``PYTHONPATH`` at another checkout to time that code's round."""
    rows = []
    for name in names:
        search_s, search_cpu_s, measure_s, batch, islands = _one_round(args, name)
        if not args.json_only:
            cpu = "" if search_cpu_s is None else f" ({search_cpu_s:.2f} CPU s in all processes)"
            print(f"one search round (population {args.population}, {args.generations} generations, "
                  f"{islands} island(s), {name}): {search_s:.2f} s{cpu}; measuring its batch of {batch}: "
                  f"{measure_s:.1f} s")
        rows.append(common.json_row(f"search round {name}", search_s=search_s, search_cpu_s=search_cpu_s,
                                    measure_s=measure_s, batch=batch, population=args.population,
                                    generations=args.generations, islands=islands))
    return rows


def process_tree_cpu_s() -> float | None:
    """CPU seconds used so far by this process and its live descendants (the islands of a
    round evolve in worker processes), from Linux's /proc; None where there is none."""
    if not os.path.isdir("/proc"):
        return None
    tick = os.sysconf("SC_CLK_TCK")
    parent, cpu = {}, {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:  # the process ended meanwhile
            continue
        parent[int(entry)], cpu[int(entry)] = int(fields[1]), (int(fields[11]) + int(fields[12])) / tick
    me, total = os.getpid(), 0.0
    for pid, seconds in cpu.items():
        at = pid
        while at > 1 and at != me:
            at = parent.get(at, 0)
        if at == me:
            total += seconds
    times = os.times()
    return total + times.children_user + times.children_system


def _one_round(args, name: str) -> tuple[float, float | None, float, int, int]:
    w = ops.suite_workload(name)
    task = ir.SearchTask(ir.ComputeDAG(w.tensors))
    model = XGBoostModel(seed=args.seed)
    params = SearchParams(population=args.population, generations=args.generations, islands=args.islands)
    pool = search_workers(params, task.hardware.num_cores)  # as auto_schedule does
    policy = SketchPolicy(task, model, params, seed=args.seed, executor=pool)
    measurer = autosched.ProgramMeasurer()
    try:
        while not model.can_rank:  # random batches until the model is past its warm-up
            first = policy.next_batch(args.batch)
            policy.update(first, [r.mean_cost if r.ok else None for r in measurer.measure(task, first)])
        t0, cpu0 = time.perf_counter(), process_tree_cpu_s()
        batch = policy.next_batch(args.batch)
        search_s, cpu1 = time.perf_counter() - t0, process_tree_cpu_s()
        search_cpu_s = None if cpu0 is None or cpu1 is None else cpu1 - cpu0
        t0 = time.perf_counter()
        measurer.measure(task, batch)
        measure_s = time.perf_counter() - t0
    finally:
        measurer.close()
        if pool is not None:
            pool.shutdown()
    return search_s, search_cpu_s, measure_s, len(batch), params.n_islands(task.hardware.num_cores)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, parents=[common.bench_args()],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--workloads", nargs="*", default=None,
                        help="suite names or family codes (GMM C2D ...); default: the whole suite + CBR, TBS")
    parser.add_argument("--population", type=int, default=2048)
    parser.add_argument("--generations", type=int, default=4)
    parser.add_argument("--islands", type=int, default=None,
                        help="search processes (default: one per core for populations of 512 and more)")
    parser.add_argument("--random-walk-q", type=float, default=None, help="OpEvo's q-random walk tile mutation")
    parser.add_argument("--contextual-eps", action="store_true", help="AdaTune's contextual epsilon")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--target", choices=["cpu", "cuda"], default="cpu",
                        help="tune for this CPU (beside numpy and PyTorch) or the GPU (beside PyTorch CUDA)")
    parser.add_argument("--log-dir", default=None, help="keep a tuning log per workload here (resumable)")
    parser.add_argument("--ablation", action="store_true", help="run the Fig. 7 ablation")
    parser.add_argument("--ablation-workload", default=ABLATION_WORKLOAD)
    parser.add_argument("--ablation-variants", nargs="+", choices=ABLATION_VARIANTS, default=list(ABLATION_VARIANTS),
                        metavar="VARIANT",
                        help=f"the ablation's variants (default all: {', '.join(ABLATION_VARIANTS)})")
    parser.add_argument("--round-time", action="store_true",
                        help="time one full search round per workload (--workloads; default GMM-1024)")
    args = parser.parse_args(argv)
    if args.smoke:
        args.trials, args.batch, args.population, args.generations = 8, 4, 32, 1
        names = ["GMM-1x64x64x64"]
    else:
        names = _select(args.workloads)
    if args.log_dir:
        os.makedirs(args.log_dir, exist_ok=True)
    rows = []
    if args.round_time:
        rows += round_time(args, names if args.workloads else [ROUND_TIME_WORKLOAD])
    elif args.ablation:
        rows += ablation(args)
    elif args.target == "cuda":
        rows += tune_suite_cuda(args, names)
    else:
        rows += tune_suite(args, names)
    common.emit_json("tune_ops", rows)


def _select(wanted) -> list[str]:
    suite = ops.suite_names()
    if not wanted:
        return suite
    out = []
    for item in wanted:
        out.extend([n for n in suite if n.split("-")[0] == item] if "-" not in item else [item])
    return out


if __name__ == "__main__":
    main()
