"""Tune the training workloads of the shipped base cost model and keep their records.

    python bench/training_records.py --trials 128 --log-dir bench/.cache/training
    python bench/training_records.py --list          # the workloads, one a line
    python bench/training_records.py --picks 16 --log-dir bench/.cache/training   # the model's own picks
    for a in training_records training_records_avx512 training_records_avx2 training_records_avx2_picks; do
        tar xzf bench/data/$a.tar.gz -C /tmp; done
    python -m autosched pretrain /tmp/training/*.json /tmp/training_avx2/*.json /tmp/training_avx2_picks/*.json \
        --members 4 -o autosched/data/base_model.json
    python -m autosched pretrain /tmp/training/*.json /tmp/training_avx512/*.json --top-weight 1 \
        --members 4 -o autosched/data/base_model_avx512.json
    # Intel's AVX-512 model: three rounds of --picks 16 on an Intel VM, each with the model
    # continued on the rounds before (--base-model), then the AVX-512 model continued on all three
    tar xzf bench/data/training_records_intel_picks.tar.gz -C /tmp
    python -m autosched pretrain /tmp/training_intel_picks/*.json --start autosched/data/base_model_avx512.json \
        --rounds 50 --top-weight 1 -o autosched/data/base_model_avx512_intel.json

The base model that ships inside the package must rank programs of workloads it has never
seen, so it is trained on records of *other* shapes than those the benchmarks evaluate:
no shape of the operator suite (``autosched list``: every workload of bench/tune_ops.py
and bench/vs_metaschedule.py), no task of the zoo's ResNet-50 (the zero-trial network
benchmark), and no operator workload (``base_model.TRAINING_OPERATORS``: the
model-family ones among them) at an anchor shape (the shapes of a task's first reduction:
a dense layer's rows and widths, a convolution's map, channels, stride and kernel,
whatever its epilogue) of a task of the coverage models in ``COVERAGE_MODELS``
(bench/model_coverage.py, exported with random weights; their shapes are cached in
``COVERAGE_SHAPES``, which ``--refresh-coverage`` rewrites). The suite-style workloads
predate that check, and one of them, DEP-1x112x112x16-k3s1p1, is MobileNet-V3-Large's
first depthwise layer. ``autosched.history.base_model.training_workloads`` is
that list; ``check_disjoint`` enforces it. The logs of the shipped models are
``bench/data/training_records.tar.gz`` (both), ``bench/data/training_records_avx512.tar.gz``
(the AVX-512 one: tunings and two to six rounds of ``--picks 16`` made on Zen 5 VMs), and
``training_records_avx2.tar.gz`` and ``training_records_avx2_picks.tar.gz`` (the AVX2 one:
tunings of the workloads that had AVX-512 records only, and a round of ``--picks 16`` of the
others, made on Zen 3 VMs). ``training_records_avx2_picks2.tar.gz`` and ``training_records_avx512_picks.tar.gz`` are
the next rounds of each ensemble's picks (Zen 3, Zen 5), not learnt by a shipped model.
Each workload is tuned as a user would (random programs first, then the search), so the
log holds both random and good programs, which is what a model must tell apart.
Workloads in ``base_model.COLD_WEIGHT_TRAINING`` are timed as a network's tasks are, with
their weights evicted before each call; those in ``base_model.NETWORK_TASK_TRAINING`` (a
network's fused tasks) are also tuned with the layout rewrite of their weights, as
``tune_networks`` tunes them.

``--picks N`` adds to each workload's log what the base model (``--base-model``, default
the shipped one) would choose without measuring: the ``N`` programs its zero-trial search
ranks best (``zero_trial.ranked_programs``) and the workload's default schedule, measured
as the tuning's programs were. A model that learnt only from tunings never saw its own
favourite mistakes (long vectors of an odd width, giant unrolling, a padded input
recomputed for every output pixel) nor a default schedule; with these records beside the
tuned programs of the same workload it learns how they compare.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

import ir  # noqa: E402
import autosched  # noqa: E402
from autosched import ops  # noqa: E402
from autosched.history import base_model  # noqa: E402
from autosched.history.zero_trial import ranked_programs  # noqa: E402
from autosched.measure import LocalRunner, ProgramMeasurer  # noqa: E402
from sketch_rules import search_space  # noqa: E402

#: the workloads (every family of the suite at shapes it does not hold) live in the package,
#: beside the model trained on them: ``autosched.history.base_model.training_workloads``
training_workloads = base_model.training_workloads


def evaluated_keys() -> dict[str, str]:
    """Workload key -> name of every computation a benchmark evaluates: the whole operator
    suite and ResNet-50's tasks."""
    keys = {ir.ComputeDAG(ops.suite_workload(n).tensors).workload_key(): n for n in ops.suite_names()}
    part = autosched.graph.partition(autosched.graph.get_network("resnet50", batch=1))
    for task in part.tasks:
        keys[task.dag.workload_key()] = f"resnet50 task {task.desc or ''}"
    return keys


#: the models of bench/model_coverage.py whose operator families the training workloads
#: are drawn from, never at their shapes
COVERAGE_MODELS = ("mobilenet_v3_large", "efficientnet_b0", "convnext_tiny", "distilbert", "resnet50")
COVERAGE_SHAPES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "coverage_task_shapes.json")


def anchor_shape(dag: ir.ComputeDAG) -> str:
    """The shapes that name a task's operator: of the inputs, the output and the reduction of
    its first reduction (the anchor: a dense layer, a convolution, a norm), else of its last
    stage; the same whatever the epilogue or the placeholders' names."""
    computes = [op for op in dag.ops if not isinstance(op, ir.PlaceholderOp)]
    op = next((op for op in computes if op.reduce_axis), computes[-1])
    inputs = sorted(list(t.shape) for t in op.input_tensors)
    return f"{inputs}->{list(op.shape)}/{[int(ax.extent) for ax in op.reduce_axis]}"


def coverage_shapes(refresh: bool = False) -> dict[str, str]:
    """Anchor shape -> "model: task" of every task of the ``COVERAGE_MODELS``: from the cache
    file, or (``refresh``, or no cache) by exporting and partitioning the models (minutes)."""
    if not refresh and os.path.exists(COVERAGE_SHAPES):
        with open(COVERAGE_SHAPES) as f:
            return json.load(f)
    import model_coverage
    shapes = {}
    with tempfile.TemporaryDirectory(prefix="coverage_shapes_") as tmp:
        for name in COVERAGE_MODELS:
            part = autosched.graph.partition(autosched.graph.from_onnx(model_coverage.model_file(name, "torchscript",
                                                                                                 tmp)))
            for task in part.tasks:
                shapes.setdefault(anchor_shape(task.dag), f"{name}: {task.desc}")
    with open(COVERAGE_SHAPES, "w") as f:
        json.dump(dict(sorted(shapes.items())), f, indent=0)
        f.write("\n")
    return shapes


def clashes(workloads: dict, refresh_coverage: bool = False) -> dict[str, str]:
    """Training workload -> what a benchmark evaluates at its shape, for every clash: any
    workload at a key of the suite or of ResNet-50's tasks; any but a suite-style one also
    at an anchor shape of a coverage model's task."""
    evaluated, coverage = evaluated_keys(), coverage_shapes(refresh_coverage)
    out = {}
    for name, w in workloads.items():
        dag = ir.ComputeDAG(w.tensors)
        found = evaluated.get(dag.workload_key()) or (name not in base_model.TRAINING_SUITE_STYLE
                                                      and coverage.get(anchor_shape(dag)))
        if found:
            out[name] = found
    return out


def check_disjoint(workloads: dict, refresh_coverage: bool = False) -> None:
    clash = clashes(workloads, refresh_coverage)
    if clash:
        raise SystemExit(f"training workloads that a benchmark evaluates: {clash}")


def training_task(name: str, workload) -> ir.SearchTask:
    """The task of training workload ``name``, with the layout rewrite of its weights when it
    is a network's fused task (``base_model.NETWORK_TASK_TRAINING``), as it is tuned."""
    return ir.SearchTask(ir.ComputeDAG(workload.tensors), desc=name,
                         layout_rewrite=name in base_model.NETWORK_TASK_TRAINING)


def training_runner(name: str) -> LocalRunner | None:
    """The runner of training workload ``name``: weights evicted before each call for those
    timed as a network's tasks are (``base_model.COLD_WEIGHT_TRAINING``), else the default."""
    return LocalRunner(cold_constants=True) if name in base_model.COLD_WEIGHT_TRAINING else None


def measure_picks(task: ir.SearchTask, model, top: int, log_file: str, seed: int = 0) -> tuple[int, float]:
    """Measure the ``top`` programs that ``model``'s zero-trial search ranks best and the
    default schedule of ``task`` (those its log does not already hold), appending them to
    ``log_file``. Returns the programs measured now and the best GFLOPS of the whole log."""
    default = search_space(task.target).default_schedule(task.dag, task.hardware)
    picks = ranked_programs(task, model, seed, [default], top=top)
    states = list({s.key: s for s in [*picks, default]}.values())
    earlier = autosched.read_records(log_file) if os.path.exists(log_file) else []
    with ProgramMeasurer(runner=training_runner(task.desc), callbacks=[autosched.RecordToFile(log_file)],
                         preloaded=earlier, verbose=1) as measurer:
        measurer.measure(task, states)
        return measurer.n_measured, task.dag.flop_count() / measurer.best_cost(task) / 1e9


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, parents=[common.bench_args()],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=128)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--log-dir", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                          ".cache", "training"))
    parser.add_argument("--list", action="store_true", help="print the training workloads and exit")
    parser.add_argument("--workloads", nargs="*", default=None, help="a subset, by label")
    parser.add_argument("--picks", type=int, default=0,
                        help="instead of tuning: measure the N programs the base model ranks best without "
                             "measuring, and the default schedule, into each workload's log")
    parser.add_argument("--base-model", default="default", help="--picks: the model whose picks are measured")
    parser.add_argument("--refresh-coverage", action="store_true",
                        help="export the coverage models again to rewrite the cache of their task shapes")
    args = parser.parse_args(argv)
    workloads = training_workloads()
    if args.list:
        for name in workloads:
            print(name)
        return
    check_disjoint(workloads, args.refresh_coverage)
    if args.smoke:
        args.trials, args.batch, args.workloads = 4, 4, ["NRM-1x128x512"]
    names = args.workloads or list(workloads)
    os.makedirs(args.log_dir, exist_ok=True)
    table = common.Table(["workload", "trials", "best GFLOPS", "seconds"])
    rows = []
    model = base_model.load_base_model(args.base_model) if args.picks else None
    for name in names:
        t0 = time.perf_counter()
        task = training_task(name, workloads[name])
        log_file = os.path.join(args.log_dir, f"{name}.json")
        if model is not None:
            trials, gflops = measure_picks(task, model, args.picks, log_file, args.seed)
        else:
            result = autosched.auto_schedule(task, trials=args.trials, measure_batch=args.batch, seed=args.seed,
                                             log_file=log_file, verbose=1, base_model=None, records_db=None,
                                             runner=training_runner(name))
            trials, gflops = result.trials, result.gflops
        seconds = time.perf_counter() - t0
        table.add(name, trials, gflops, seconds)
        rows.append(common.json_row(name, gflops, trials=trials, tuning_s=seconds))
        print(f"{name}: {gflops:.1f} GFLOPS after {trials} trials, {seconds:.0f} s", flush=True)
    if not args.json_only:
        table.print()
    common.emit_json("training_records", rows)


if __name__ == "__main__":
    main()
