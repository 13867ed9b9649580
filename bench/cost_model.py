"""The learned cost model: how well it ranks random programs it has not seen, how fast
features are extracted, and what share of a search round they cost.

    python bench/cost_model.py [--smoke] [--json-only] [--conv N] [--gmm N] [--transfer N]
    python bench/cost_model.py --families [--logs DIR] [--folds 3] [--base-model FILE] [--ablate] [--top-weight W]

``--families``: the base model's held-out accuracy per operator family and CPU vector width
(AVX2, AVX-512), from the training logs (bench/cost_model_families.py), instead of the
experiments below; ``--ablate`` adds a model retrained without the target's register features,
``--top-weight W`` one retrained with its rank pairs weighted towards the fast programs.

Data set: random programs (``sketch_rules.sample_programs``) of ResNet-50's 3x3 conv layer
(C2D-1x14x14x256x256-k3s1p1) and of GMM (512³), measured by ``autosched.measure`` (built
in worker processes, each run verified against the naive program, then timed: the best of
3 repeats; 3 s run timeout), cached as JSON lines (steps and seconds) under bench/.cache/
so that a rerun measures only what is missing (measuring ~2400 programs takes an hour or
two on 2 cores). A third set (C2D-1x28x28x128x128) serves the transfer experiment. Models train
on 80 % of each workload's programs and are scored on the other 20 %: RMSE and R² of the
program score against the throughput normalised to the workload's best, pairwise
comparison accuracy and recall@30 (Ansor section 7.5: 0.851 and 0.624), per workload and
pooled. Throughput normalisation, the objectives and the models are evolution's.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import cost_model_families  # noqa: E402

import ir  # noqa: E402
import sketch_rules  # noqa: E402
from autosched import ops  # noqa: E402
from autosched.history import base_model as B  # noqa: E402
from evolution import FeatureExtractor, extract_features  # noqa: E402
from evolution.cost_model import (MeasuredProgram, RandomModel, XGBoostEnsemble, XGBoostModel,  # noqa: E402
                                  normalized_throughputs, pairwise_accuracy, r2, recall_at_k, rmse)
from ir.steps import steps_from_json, steps_to_json  # noqa: E402

CACHE = os.path.join(os.path.dirname(os.path.abspath(__file__)), ".cache")
CONV, GMM, CONV28 = "C2D-1x14x14x256x256-k3s1p1", "GMM-1x512x512x512", "C2D-1x28x28x128x128-k3s1p1"


# the data set --------------------------------------------------------------------------------

def make_task(name: str):
    w = ops.suite_workload(name)
    return w, ir.SearchTask(ir.ComputeDAG(w.tensors), desc=name)


def make_measurer(smoke: bool):
    """autosched.measure: builds in parallel worker processes, runs one program at a time in
    a worker (verified against the naive program, then timed), a run timeout of 3 s (slower
    programs are under 0.1 % of the best throughput: Ansor counts them as errors, label 0)."""
    from autosched.measure import LocalBuilder, LocalRunner, ProgramMeasurer
    runner = LocalRunner(timeout=3.0, repeat=3, min_repeat_ms=5 if smoke else 20, min_repeats=2)
    return ProgramMeasurer(LocalBuilder(timeout=60), runner, max_consecutive_errors=0)


def load_cache(path: str, dag) -> dict:
    """program text -> (state, cost) of the measurements cached in ``path``."""
    out = {}
    if not os.path.exists(path):
        return out
    with open(path) as f:
        for line in f:
            if not line.strip():
                continue
            rec = json.loads(line)
            state = ir.State.from_steps(dag, steps_from_json(rec["steps"]))
            out[state.key] = (state, rec["cost"])
    return out


def dataset(name: str, n: int, seed: int, measurer, cache: bool = True, log=print, batch: int = 32):
    """``n`` random programs of workload ``name`` and their costs (seconds, the best repeat;
    None for failures), measured or from the cache; also the errors by kind."""
    w, task = make_task(name)
    path = os.path.join(CACHE, f"cost_model_{name}.jsonl")
    have = load_cache(path, task.dag) if cache else {}
    errors: dict = {}
    if len(have) >= n:
        items = list(have.values())[:n]
        return w, task, [s for s, _ in items], [c for _, c in items], errors
    sketches = sketch_rules.generate_sketches(task)
    states = sketch_rules.sample_programs(task, sketches, n, np.random.default_rng(seed))
    todo = [s for s in states if s.key not in have]
    os.makedirs(CACHE, exist_ok=True)
    t0 = time.time()
    with open(path, "a") if cache else open(os.devnull, "w") as f:
        for i in range(0, len(todo), batch):
            part = todo[i:i + batch]
            for state, res in zip(part, measurer.measure(task, part)):
                cost = min(res.costs) if res.ok else None
                if not res.ok:
                    errors[res.error.label] = errors.get(res.error.label, 0) + 1
                have[state.key] = (state, cost)
                f.write(json.dumps({"steps": steps_to_json(state.steps), "cost": cost,
                                    "error": None if res.ok else res.error.label}) + "\n")
            f.flush()
            done = i + len(part)
            log(f"  {name}: measured {done}/{len(todo)} ({(time.time() - t0) / done:.2f} s each)")
    items = [have[s.key] for s in states if s.key in have]
    return w, task, [s for s, _ in items], [c for _, c in items], errors


# the experiments -------------------------------------------------------------------------------

def split(n: int, rng, test_share: float = 0.2):
    order = rng.permutation(n)
    n_test = int(round(n * test_share))
    return np.sort(order[n_test:]), np.sort(order[:n_test])


def evaluate(model, sets, test_idx) -> dict:
    """Metrics of ``model`` on each set's test programs and pooled (pairs within a set)."""
    preds, labels, groups, per = [], [], [], {}
    for g, (name, (w, task, states, costs)) in enumerate(sets.items()):
        y = normalized_throughputs(costs, [0] * len(costs))[test_idx[name]]
        p = model.predict(task, [states[i] for i in test_idx[name]])
        p = np.where(np.isfinite(p), p, np.nanmin(np.where(np.isfinite(p), p, np.nan)) - 1)
        per[name] = {"rmse": rmse(p, y), "r2": r2(p, y), "pairwise": pairwise_accuracy(p, y),
                     "recall30": recall_at_k(p, y, 30)}
        preds.append(p)
        labels.append(y)
        groups.append(np.full(len(y), g))
    p, y, g = np.concatenate(preds), np.concatenate(labels), np.concatenate(groups)
    pooled = {"rmse": rmse(p, y), "r2": r2(p, y), "pairwise": pairwise_accuracy(p, y, g),
              "recall30": float(np.mean([per[n]["recall30"] for n in per]))}
    return {"per": per, "pooled": pooled}


def records(sets, idx):
    return [MeasuredProgram(task, states[i], costs[i]) for name, (w, task, states, costs) in sets.items()
            for i in idx[name]]


def extraction_throughput(task, sketches, n: int, rng) -> tuple[float, float, list]:
    """Programs per second of extract_features on ``n`` fresh programs (cold cache), and
    on the same programs again (every nest cached)."""
    states = sketch_rules.sample_programs(task, sketches, n, rng)
    ex = FeatureExtractor()
    t0 = time.perf_counter()
    extract_features(task, states, ex)
    cold = len(states) / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    extract_features(task, states, ex)
    warm = len(states) / (time.perf_counter() - t0)
    return cold, warm, states


class _TimedModel:
    """A cost model that accounts the time of feature extraction and of prediction."""

    def __init__(self, model):
        self.model = model
        self.seconds = {"feature extraction": 0.0, "prediction": 0.0, "retraining": 0.0}

    def predict(self, task, states):
        t0 = time.perf_counter()
        feats = self.model.features(task, states)
        t1 = time.perf_counter()
        scores = self.model.predict_features(feats)
        self.seconds["feature extraction"] += t1 - t0
        self.seconds["prediction"] += time.perf_counter() - t1
        return scores

    def update(self, records):
        t0 = time.perf_counter()
        self.model.update(records)
        self.seconds["retraining"] += time.perf_counter() - t0


def one_round(task, model, measurer, smoke: bool = False) -> dict:
    """Seconds of one round of evolution.SketchPolicy (Ansor's defaults: population 2048,
    4 generations) with ``model``: search (sampling, mutation, crossover) apart from feature
    extraction and prediction, measuring its batch of 64, and retraining."""
    from evolution import SearchParams, SketchPolicy
    timed = _TimedModel(model)
    params = SearchParams(population=64, generations=1) if smoke else SearchParams()
    policy = SketchPolicy(task, timed, params, seed=0)
    t0 = time.perf_counter()
    batch = policy.next_batch(8 if smoke else 64)
    search = time.perf_counter() - t0
    t0 = time.perf_counter()
    results = measurer.measure(task, batch)
    measure_s = time.perf_counter() - t0
    policy.update(batch, [min(r.costs) if r.ok else None for r in results])
    sec = timed.seconds
    return {"search without the model": search - sec["feature extraction"] - sec["prediction"],
            "feature extraction": sec["feature extraction"], "prediction": sec["prediction"],
            "measurement": measure_s, "retraining": sec["retraining"]}


def family_table(args) -> None:
    """Print (and emit as JSON) the held-out accuracy per operator family, on the CPUs of each
    vector width the logs hold, of the base model given and of one retrained on the logs
    (with ``--ablate``: also retrained without the target's register features)."""
    if args.folds < 2:
        raise SystemExit(f"--folds must be at least 2, got {args.folds}")
    log = (lambda *a: None) if args.json_only else (lambda *a: print(*a, flush=True))
    rows = cost_model_families.held_out_accuracy(args.logs, args.base_model, args.folds,
                                                 rounds=20 if args.smoke else B.MAX_ROUNDS, log=log,
                                                 ablate=args.ablate, top_weight=args.top_weight)
    k = cost_model_families.TOP_K
    models = [m for m in cost_model_families.MODELS if m in rows[0]]
    heads = {"pairwise": "pairwise", "recall": f"recall@{k}", "top1": "top pick / best"}
    columns = ["CPU", "family", "workloads"] + [f"{heads[metric]}: {model}" if i == 0 else model
                                                for metric in heads for i, model in enumerate(models)]
    table = common.Table(columns, "{:.3f}")
    out = []
    for lanes in sorted({r["vector_lanes"] for r in rows}):
        cpu = f"{lanes} lanes ({'AVX-512' if lanes == 16 else 'AVX2' if lanes == 8 else 'other'})"
        for fam, m in cost_model_families.by_family(rows, lanes).items():
            table.add(cpu, fam, m["workloads"], *[m[f"{model}_{metric}"] for metric in heads for model in models])
            out.append(common.json_row(fam, model="held-out per family", vector_lanes=lanes, **m))
    for r in rows:
        out.append(common.json_row(r["workload"], model="held-out workload", family=r["family"],
                                   vector_lanes=r["vector_lanes"], programs=r["programs"],
                                   **{f"{model}_{metric}": v for model in models
                                      for metric, v in r[model].items()}))
    if not args.json_only:
        table.print()
    common.emit_json("cost_model_families", out)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, parents=[common.bench_args()],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--conv", type=int, default=1000, help=f"programs of {CONV} (default 1000)")
    parser.add_argument("--gmm", type=int, default=1000, help=f"programs of {GMM} (default 1000)")
    parser.add_argument("--transfer", type=int, default=400, help=f"programs of {CONV28} (default 400)")
    parser.add_argument("--batch", type=int, default=2048, help="programs in the extraction batch (default 2048)")
    parser.add_argument("--families", action="store_true",
                        help="the base model's held-out accuracy per operator family, from the training logs")
    parser.add_argument("--logs", default=cost_model_families.LOGS,
                        help="--families: the folder of the new training logs (default bench/.cache/training)")
    parser.add_argument("--folds", type=int, default=3, help="--families: folds of the held-out workloads")
    parser.add_argument("--base-model", default="default", help="--families: the model to compare (default: shipped)")
    parser.add_argument("--ablate", action="store_true",
                        help="--families: also retrain without the target's register features (what they add)")
    parser.add_argument("--top-weight", type=float, default=None,
                        help="--families: also retrain with the rank pairs weighted by the better program's "
                             "throughput to this power (what weighting the fast programs adds)")
    args = parser.parse_args(argv)
    if args.top_weight is not None and not 0 <= args.top_weight < float("inf"):
        parser.error(f"--top-weight must be a number >= 0 (finite), got {args.top_weight}")
    if args.families:
        family_table(args)
        return
    log = (lambda *a: None) if args.json_only else (lambda *a: print(*a, flush=True))
    if args.smoke:
        names = {"C2D-1x8x8x16x16-k3s1p1": 24, "GMM-1x64x64x64": 24}
        transfer_name, n_transfer, batch, cache = "C2D-1x8x8x32x16-k3s1p1", 16, 64, False
        warmup_kw = {"max_rounds": 50}
    else:
        names = {CONV: args.conv, GMM: args.gmm}
        transfer_name, n_transfer, batch, cache = CONV28, args.transfer, args.batch, True
        warmup_kw = {}

    # 1. data ---------------------------------------------------------------------------------
    sets, errors = {}, {}
    measurer = make_measurer(args.smoke)
    for seed, (name, n) in enumerate(names.items()):
        t0 = time.time()
        w, task, states, costs, errs = dataset(name, n, seed=10 * seed, measurer=measurer, cache=cache, log=log)
        sets[name] = (w, task, states, costs)
        for k, v in errs.items():
            errors[k] = errors.get(k, 0) + v
        ok = [c for c in costs if c is not None]
        log(f"{name}: {len(states)} programs, {len(ok)} valid, best {w.flops / min(ok) / 1e9:.1f} GFLOPS, "
            f"median {w.flops / np.median(ok) / 1e9:.1f} GFLOPS ({time.time() - t0:.0f} s)")
    rng = np.random.default_rng(0)
    train_idx, test_idx = {}, {}
    for name, (w, task, states, costs) in sets.items():
        train_idx[name], test_idx[name] = split(len(states), rng)

    # 2. models ---------------------------------------------------------------------------------
    table = common.Table(["model", "workload", "RMSE", "R2", "pairwise acc", "recall@30", "train s"], "{:.3f}")
    # (RMSE and R2 compare scores with normalised throughputs: meaningful for pack-sum only;
    # rank scores have an arbitrary scale)
    rows, results = [], {}
    models = {
        "xgb pack-sum (Ansor: throughput-weighted)": lambda: XGBoostModel("pack-sum", num_warmup_sample=0, seed=1,
                                                                          **warmup_kw),
        "xgb pack-sum, unweighted": lambda: XGBoostModel("pack-sum", num_warmup_sample=0, seed=1, weight_floor=1.0,
                                                         **warmup_kw),
        "xgb rank (AutoTVM)": lambda: XGBoostModel("rank", num_warmup_sample=0, seed=1, **warmup_kw),
        "xgb rank ensemble(5) (AdaTune)": lambda: XGBoostEnsemble(5, "rank", num_warmup_sample=0, seed=1,
                                                                  **(warmup_kw or {"max_rounds": 300})),
        "random": lambda: RandomModel(seed=1),
    }
    train_records = records(sets, train_idx)
    for label, make in models.items():
        model = make()
        t0 = time.perf_counter()
        model.update(train_records)
        train_s = time.perf_counter() - t0
        res = evaluate(model, sets, test_idx)
        results[label] = res
        for wl, m in list(res["per"].items()) + [("pooled", res["pooled"])]:
            table.add(label, wl, m["rmse"], m["r2"], m["pairwise"], m["recall30"], train_s)
            rows.append(common.json_row(wl, model=label, rmse=m["rmse"], r2=m["r2"],
                                        pairwise_accuracy=m["pairwise"], recall_at_30=m["recall30"],
                                        train_seconds=train_s, n_train=len(train_records)))
    best = max((lbl for lbl in results if lbl != "random"), key=lambda lbl: results[lbl]["pooled"]["pairwise"])
    if not args.json_only:
        table.print()
        print(f"best pooled pairwise accuracy: {results[best]['pooled']['pairwise']:.3f} ({best}; "
              f"the bar is 0.80)")
        print(f"(paper, Ansor's model on 5000 held-out ResNet-50 programs: RMSE 0.079, R2 0.958, "
              f"pairwise 0.851, recall@30 0.624; measurement errors of this run: {errors or 'none'})")

    # 3. transfer: other workloads' records, before any of the new one's --------------------------
    target = next(iter(names))
    t_w, t_task, t_states, t_costs, _ = dataset(transfer_name, n_transfer, seed=99, measurer=measurer, cache=cache,
                                                log=log)
    others = {transfer_name: (t_w, t_task, t_states, t_costs),
              **{n: s for n, s in sets.items() if n != target}}
    old = [MeasuredProgram(task, s, c) for (w, task, states, costs) in others.values() for s, c in zip(states, costs)]
    only_target = {target: sets[target]}
    n_few = 50 if not args.smoke else 8
    few = {target: train_idx[target][:n_few]}
    pre = XGBoostModel("rank", num_warmup_sample=0, seed=2, **warmup_kw)
    pre.update(old)
    transfer_rows = [("pre-trained on other workloads, 0 of its own", pre)]
    local = XGBoostModel("rank", num_warmup_sample=0, seed=2, base_model=pre, **warmup_kw)
    local.update(records(only_target, few))
    transfer_rows.append((f"pre-trained base + {n_few} of its own (AutoTVM)", local))
    joint = XGBoostModel("rank", num_warmup_sample=0, seed=2, **warmup_kw)
    joint.update(old + records(only_target, few))
    transfer_rows.append((f"old records + {n_few} of its own in one model (Ansor)", joint))
    scratch = XGBoostModel("rank", num_warmup_sample=0, seed=2, **warmup_kw)
    scratch.update(records(only_target, few))
    transfer_rows.append((f"from scratch on {n_few} of its own", scratch))
    ttable = common.Table(["transfer to " + target + " (rank objective)", "pairwise acc", "recall@30"], "{:.3f}")
    for label, model in transfer_rows:
        m = evaluate(model, only_target, test_idx)["per"][target]
        ttable.add(label, m["pairwise"], m["recall30"])
        rows.append(common.json_row(target, model="transfer: " + label, pairwise_accuracy=m["pairwise"],
                                    recall_at_30=m["recall30"], n_old_records=len(old)))
    if not args.json_only:
        ttable.print()

    # 4. extraction speed, and the share of one real search round ------------------------------------
    stable = common.Table(["workload", "extract progs/s (cold)", "cached progs/s", "predict progs/s"], "{:.0f}")
    model = XGBoostModel(num_warmup_sample=0, seed=3, **warmup_kw)   # the tuner's default (pack-sum)
    model.update(train_records)
    rtable = common.Table(["one round of " + ", ".join(names), "seconds", "share"], "{:.2f}")
    for name, (w, task, states, costs) in sets.items():
        sketches = sketch_rules.generate_sketches(task)
        cold, warm, batch_states = extraction_throughput(task, sketches, batch, np.random.default_rng(8))
        feats = extract_features(task, batch_states)
        t0 = time.perf_counter()
        model.predict_features(feats)
        predict_rate = len(feats) / (time.perf_counter() - t0)
        stable.add(name, cold, warm, predict_rate)
        rows.append(common.json_row(name, model="features", extract_programs_per_s=cold,
                                    extract_cached_programs_per_s=warm, predict_programs_per_s=predict_rate,
                                    batch=len(batch_states)))
    if not args.json_only:
        stable.print()
    for name, (w, task, states, costs) in sets.items():
        parts = one_round(task, model, make_measurer(args.smoke), smoke=args.smoke)
        total = sum(parts.values())
        share = (parts["feature extraction"] + parts["prediction"]) / total
        for part, sec in parts.items():
            rtable.add(f"{name}: {part}", sec, sec / total)
        rtable.add(f"{name}: extraction + prediction", parts["feature extraction"] + parts["prediction"], share)
        rows.append(common.json_row(name, model="search round", round_seconds=total, extract_predict_share=share,
                                    **{k.replace(" ", "_") + "_seconds": v for k, v in parts.items()}))
    if not args.json_only:
        rtable.print()
    common.emit_json("cost_model", rows)


if __name__ == "__main__":
    main()
