"""The base model's held-out accuracy per operator family: how well (a) a given base model
(the shipped one) and (b) one retrained on the training logs rank the programs of
workloads neither has seen, from the logs alone (no measurement).

    python bench/cost_model.py --families [--logs DIR] [--folds 3] [--base-model FILE]

The logs: ``bench/data/training_records.tar.gz`` and the ``*.json`` tuning logs of ``--logs``
(default ``bench/.cache/training``, where ``bench/training_records.py`` writes; a log there
replaces the archive's of the same name). The held-out workloads are the model-family
training workloads (``base_model.MODEL_FAMILY_OPERATORS``) that have a log, which the
shipped model of before them never saw: they are split into ``--folds`` folds, round robin
within each family, and the retrained model of a fold learns every other log (the rank
model ``autosched pretrain`` makes), so each workload is ranked by a model that has not
seen it. Per family (and over all): the pairwise accuracy of the ranking of each
workload's programs, the recall of its top ``TOP_K`` and the throughput of its top pick
relative to the best program, averaged over the family's workloads. A workload measured on
CPUs of both vector widths (AVX2's 8 float lanes, AVX-512's 16) is ranked once per width,
each against its own measurements; ``by_family(rows, lanes)`` summarises one width.
``ablate``: a third model per fold, retrained with the target's register features
(``evolution.features``: ``vector_bytes``, ``vec_registers``, ``alloc_register_share``)
zeroed, which says what those features add on workloads no model has seen.
"""
from __future__ import annotations

import math
import os
import tarfile
import tempfile

import numpy as np

import autosched
import ir
from autosched import ops
from autosched.history import base_model as B
from evolution import extract_features
from evolution.features import TARGET_BASE
from evolution.cost_model import TrainingSet, normalized_throughputs, pairwise_accuracy, recall_at_k

HERE = os.path.dirname(os.path.abspath(__file__))
ARCHIVE = os.path.join(HERE, "data", "training_records.tar.gz")
LOGS = os.path.join(HERE, ".cache", "training")
TOP_K = 8
#: the rankings a row can hold, in the order tables print them
MODELS = ("shipped", "retrained", "top_weighted", "no_target")


def family(label: str) -> str:
    """The operator family of a model-family training workload, as a real model's task."""
    op, args, kwargs = B.MODEL_FAMILY_OPERATORS[label]
    p = ops.operator_def(op).bind(args, kwargs)
    if op == "dense_chain":
        rows = p["rows"] if isinstance(p["rows"], tuple) else (p["rows"],)
        return "dense, one row (classifier)" if math.prod(rows) == 1 else "dense (MLP, projection)"
    if op == "conv2d_chain":
        if p["H"] == p["W"] == 1:
            return "squeeze-excitation"
        return "grouped conv" if p["groups"] > 1 else f"{p['kernel']}x{p['kernel']} conv"
    return {"depthwise_chain": "depthwise conv", "winograd_chain": "3x3 conv (Winograd)",
            "se_gate": "squeeze-excitation",
            "global_avg_pool2d": "squeeze-excitation", "layer_norm": "layer norm",
            "batch_matmul": "attention batch matmul"}[op]


def log_files(logs_dir: str, scratch: str, archive: str | None = ARCHIVE) -> dict[str, str]:
    """Workload label -> tuning log: the ``archive``'s (extracted into ``scratch``), replaced
    by those of ``logs_dir``."""
    out = {}
    if archive is not None:
        with tarfile.open(archive) as tar:
            members = [m for m in tar.getmembers() if m.isfile() and m.name.endswith(".json")]
            tar.extractall(scratch, members=members, filter="data")
        for m in members:
            out[os.path.basename(m.name)[:-len(".json")]] = os.path.join(scratch, m.name)
    if os.path.isdir(logs_dir):
        for name in sorted(os.listdir(logs_dir)):
            if name.endswith(".json"):
                out[name[:-len(".json")]] = os.path.join(logs_dir, name)
    return out


def workload_data(path: str) -> dict[int, dict] | None:
    """The features, costs and group keys (workload, target) of the programs of one log, by
    the float vector lanes of the CPU that measured them (None when none replays)."""
    programs = B.training_programs(autosched.read_records(path))
    if not programs:
        return None
    by_task: dict = {}
    for task, state, cost in programs:
        by_task.setdefault(id(task), (task, [], []))
        by_task[id(task)][1].append(state)
        by_task[id(task)][2].append(cost)
    out: dict[int, dict] = {}
    for task, states, task_costs in by_task.values():
        d = out.setdefault(task.hardware.vector_lanes, {"features": [], "costs": [], "groups": []})
        d["features"] += extract_features(task, states)
        d["costs"] += task_costs
        d["groups"] += [(task.workload_key, str(task.target))] * len(states)
    return out


def _without_target_features(features: list) -> list:
    return [np.concatenate([f[:, :TARGET_BASE], np.zeros_like(f[:, TARGET_BASE:])], axis=1) for f in features]


def scores_quality(scores: np.ndarray, data: dict) -> dict:
    """Pairwise accuracy, recall@TOP_K and top pick / best of ``scores`` on one workload."""
    y = normalized_throughputs(data["costs"], data["groups"])
    scores = np.where(np.isfinite(scores), scores, -1e30)
    return {"pairwise": pairwise_accuracy(scores, y, np.unique(data["groups"], return_inverse=True)[1]),
            "recall": recall_at_k(scores, y, TOP_K), "top1": float(y[int(np.argmax(scores))])}


def folds_of(labels: list[str], n_folds: int) -> list[list[str]]:
    """``labels`` in ``n_folds`` folds, round robin within each family (each fold holds
    about its share of every family)."""
    folds = [[] for _ in range(n_folds)]
    by_family: dict[str, list[str]] = {}
    for label in sorted(labels):
        by_family.setdefault(family(label), []).append(label)
    i = 0
    for members in by_family.values():
        for label in members:
            folds[i % n_folds].append(label)
            i += 1
    return [f for f in folds if f]


def held_out_accuracy(logs_dir: str = LOGS, base_model="default", n_folds: int = 3, rounds: int = B.MAX_ROUNDS,
                      log=print, archive: str | None = ARCHIVE, ablate: bool = False,
                      top_weight: float | None = None) -> list[dict]:
    """One row per held-out workload and CPU vector width (``vector_lanes``): its family and
    the quality of the models' rankings ("shipped": ``base_model``, for "default" the shipped
    model of the row's width; "retrained": learnt from
    the other folds; with ``ablate``, "no_target": the same without the target's register
    features; with ``top_weight``, "top_weighted": retrained with the rank pairs weighted
    by it, ``objectives.ranking_pairs``), from the logs of ``archive`` and ``logs_dir``."""
    def shipped_for(lanes: int):
        """The base model of that vector width ("default": the shipped one of that width)."""
        return B.load_base_model(base_model, ir.HardwareParams(num_cores=1, vector_lanes=lanes))
    if shipped_for(8) is None:
        raise ValueError(f"no base model to compare: {base_model!r}")
    with tempfile.TemporaryDirectory(prefix="families_") as scratch:
        data = {}
        for label, path in log_files(logs_dir, scratch, archive).items():
            if (d := workload_data(path)) is not None:
                data[label] = d
    held_out = [label for label in B.MODEL_FAMILY_OPERATORS if label in data]
    if not held_out:
        raise ValueError(f"no log of a model-family training workload in {logs_dir!r} (run "
                         f"bench/training_records.py first)")
    n_programs = sum(len(d["costs"]) for widths in data.values() for d in widths.values())
    log(f"{n_programs} programs of {len(data)} workloads; {len(held_out)} held out in {n_folds} folds")
    rows = []
    for fold in folds_of(held_out, n_folds):
        train, plain = TrainingSet(), TrainingSet()
        for label, widths in data.items():
            if label not in fold:
                for d in widths.values():
                    train.add(d["features"], d["costs"], d["groups"])
                    if ablate:
                        plain.add(_without_target_features(d["features"]), d["costs"], d["groups"])
        models = {"retrained": B.rank_model(rounds=rounds)}
        models["retrained"].fit(train)
        if top_weight is not None:
            models["top_weighted"] = B.rank_model(rounds=rounds, top_weight=top_weight)
            models["top_weighted"].fit(train)
        if ablate:
            models["no_target"] = B.rank_model(rounds=rounds)
            models["no_target"].fit(plain)
        for label in fold:
            for lanes, d in sorted(data[label].items()):
                row = {"workload": label, "family": family(label), "vector_lanes": lanes, "programs": len(d["costs"]),
                       "shipped": scores_quality(shipped_for(lanes).predict_features(d["features"]), d)}
                for name, model in models.items():
                    feats = _without_target_features(d["features"]) if name == "no_target" else d["features"]
                    row[name] = scores_quality(model.predict_features(feats), d)
                rows.append(row)
        log(f"  fold of {len(fold)} held out: trained on {len(train)} programs")
    return rows


def by_family(rows: list[dict], lanes: int | None = None) -> dict[str, dict]:
    """Family (and "all") -> the mean of each model's metrics over its workloads (those
    measured on CPUs of ``lanes`` float vector lanes; None: every width)."""
    rows = [r for r in rows if lanes is None or r["vector_lanes"] == lanes]
    models = [m for m in MODELS if rows and m in rows[0]]
    groups: dict[str, list[dict]] = {}
    for r in rows:
        groups.setdefault(r["family"], []).append(r)
    if rows:
        groups["all"] = rows
    return {fam: {"workloads": len(members),
                  **{f"{model}_{metric}": float(np.mean([m[model][metric] for m in members]))
                     for model in models for metric in ("pairwise", "recall", "top1")}}
            for fam, members in groups.items()}
