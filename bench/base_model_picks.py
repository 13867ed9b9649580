"""How well does a base model pick among a task's programs, alone and after a probe of the
task's own measurements? Offline, on tuning logs (no measurement is made).

    python bench/base_model_picks.py LOG... [--base-model FILE] [--probe 16]

For every log (one workload each; its workload is rebuilt from its records' key, so logs of
``autosched tune NAME``, the operator suite and the training workloads qualify), the
programs are taken in the order they were measured. "alone": the base model ranks all of
them; "after probe": a tuning's model (the base model as its starting margin, the rank
objective) learns from the first ``--probe`` records and ranks the others. Printed per log
and in geometric mean over the logs: the pairwise accuracy of the ranking, and the
throughput of its top pick and of the best of its top 8 relative to the best program
ranked. Use logs of workloads the base model was not trained on (e.g. the logs of
``bench/vs_metaschedule.py --log-dir``): that is what it meets in use.
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import Table, bench_args, emit_json  # noqa: E402

import autosched  # noqa: E402
from autosched.history import base_model as B  # noqa: E402
from autosched.tune import make_cost_model  # noqa: E402
from evolution.cost_model import pairwise_accuracy  # noqa: E402

TOP = 8


def pick_quality(scores, throughputs) -> tuple[float, float, float]:
    """(pairwise accuracy, top pick / best, best of the top ``TOP`` / best)."""
    order = np.argsort(-np.asarray(scores))
    best = throughputs.max()
    return (pairwise_accuracy(np.asarray(scores), throughputs), throughputs[order[0]] / best,
            throughputs[order[:TOP]].max() / best)


def evaluate(log: str, base, probe: int) -> dict | None:
    programs = B.training_programs(autosched.read_records(log))
    if len(programs) <= probe + 1:
        return None
    task = programs[0][0]
    programs = [p for p in programs if p[0] is task]  # (a log of one workload)
    states = [s for _, s, _ in programs]
    throughputs = np.array([1.0 / c if c else 0.0 for _, _, c in programs])
    rest = slice(probe, len(programs))
    alone = pick_quality(base.predict(task, states[rest]), throughputs[rest])
    model = make_cost_model("xgb", 0, start=base)
    model.update(programs[:probe])
    after = pick_quality(model.predict(task, states[rest]), throughputs[rest])
    return {"workload": task.desc or os.path.basename(log).split(".")[0], "log": os.path.basename(log),
            "programs": len(programs),
            "probe": probe, "alone_pairwise": alone[0], "alone_top1": alone[1], "alone_top8": alone[2],
            "probe_pairwise": after[0], "probe_top1": after[1], "probe_top8": after[2]}


def geomean(values) -> float:
    return float(np.exp(np.mean(np.log(np.maximum(values, 1e-3)))))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0], parents=[bench_args()])
    parser.add_argument("logs", nargs="*", help="tuning logs, one workload each")
    parser.add_argument("--base-model", default="default", help="the model file (default: the shipped one)")
    parser.add_argument("--probe", type=int, default=16, help="own measurements learnt before ranking (default 16)")
    args = parser.parse_args(argv)
    if not args.logs:
        parser.error("give at least one tuning log")
    base = B.load_base_model(args.base_model)
    if base is None:
        parser.error(f"no base model: {args.base_model!r}")
    rows = [r for log in args.logs if (r := evaluate(log, base, args.probe)) is not None]
    if not rows:
        parser.error(f"no log has more than {args.probe + 1} programs of a workload that can be rebuilt")
    table = Table(["log", "programs", "alone: pairwise", "top 1", f"top {TOP}",
                   f"after {args.probe}: pairwise", "top 1", f"top {TOP}"])
    for r in rows:
        table.add(r["log"][:40], r["programs"], r["alone_pairwise"], r["alone_top1"], r["alone_top8"],
                  r["probe_pairwise"], r["probe_top1"], r["probe_top8"])
    keys = ["alone_pairwise", "alone_top1", "alone_top8", "probe_pairwise", "probe_top1", "probe_top8"]
    table.add("geometric mean", sum(r["programs"] for r in rows), *(geomean([r[k] for r in rows]) for k in keys))
    if not args.json_only:
        table.print()
    emit_json("base_model_picks", rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
