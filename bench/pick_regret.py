"""How well a base model chooses among the programs a zero-trial search ends with, on the
tasks of real models it never trained on: the regret of its pick among measured candidates.

    python bench/pick_regret.py --collect --models resnet50,regnet_x_1_6gf -o picks_avx2.json
    python bench/pick_regret.py --collect --models resnet50 --base-models default new.json -o picks_avx2.json
    python bench/pick_regret.py --evaluate picks_avx2.json --base-models default /tmp/retrained.json
    python bench/pick_regret.py --evaluate bench/data/pick_regret_avx2.json.gz --base-models default F
    python bench/pick_regret.py --evaluate bench/data/pick_regret_avx512.json.gz --base-models default F
    python bench/pick_regret.py --smoke

A zero-trial program is the model's favourite among the few dozen programs its short search
found (``autosched.history.zero_trial``): what decides its speed is the order the model puts
the best of them in, which no timing of a whole model on a shared VM tells apart from noise
(one kernel's readings flip between two speeds there). So:

- ``--collect`` takes, for the largest tasks of each model (exported as
  ``bench/profile_model.py`` exports it: random weights, batch 1), the ``CANDIDATES`` programs
  that each of ``--base-models`` ranks best after its own zero-trial search, and the default
  schedule, and times them all in turns on this CPU (weights evicted before each call, as a
  network runs them and as the base model's training programs were timed). A task is written
  to the file as it is done, so that a run stopped midway goes on where it stopped; a model
  whose candidates a task lacks adds them, and the task's pool is timed again as a whole.
- ``--evaluate`` has each base model choose among every task's measured candidates as the
  zero-trial choice does (``zero_trial.best_first``: its score, the parallel-region and
  cold-read rules) and prints, per task and in all, the regret: the pick's time over the
  fastest candidate's; and, for a model whose candidates were collected, the regret of its
  own zero-trial pick (what it would run). The kernel-weighted regret weighs each task by
  its calls times its fastest time, which is what the model's latency sees. Nothing is
  measured: models are compared on the same programs, offline, in seconds.

A model that did not collect is judged on how it orders the programs the others' searches
found, not on what its own search would find. The file names the CPU it was measured on:
judge models of that vector width with it. ``bench/data/pick_regret_avx2.json.gz`` holds the
10 largest tasks of ResNet-50, RegNetX-1.6GF, MobileNet-V3-Large, EfficientNet-B0,
ConvNeXt-Tiny, DistilBERT and GPT-2 measured on Zen 3 VMs (AVX2; each pool timed again as a
whole on 2026-12-02), each with the candidates of four base models (about 55 a task): the AVX2
model shipped before 2026-12-02, the one shipped since, the AVX-512 one, and an ensemble of the
first and the third's members. An AVX2 model can be judged on it on any machine.
``bench/data/pick_regret_avx512.json.gz`` holds the same 69 tasks measured on a Zen 5 VM
(``znver5``, AVX-512; 2026-12-02) with the candidates of the AVX-512 model and of one retrained
on a round of its own picks (about 31 a task): judge AVX-512 models on it. ``--evaluate`` ends
with each model's own picks summed per model (calls x milliseconds over the tasks where every
model's own pick was timed) and their ratio to the first model's: what each would make of
those tasks' share of a run, on the same programs.
"""
from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import Table, bench_args, emit_json, json_row, machine_info  # noqa: E402
import profile_model  # noqa: E402

import ir  # noqa: E402
from autosched import graph as G  # noqa: E402
from autosched.graph.executor import default_schedule  # noqa: E402
from autosched.history.base_model import load_base_model  # noqa: E402
from autosched.history.zero_trial import CANDIDATES, best_first, model_identity, ranked_programs  # noqa: E402
from autosched.measure import LocalRunner, ProgramMeasurer  # noqa: E402
from ir.steps import steps_from_json, steps_to_json  # noqa: E402

FORMAT = "autosched pick regret 2"
#: the longest file read (the AVX2 one in bench/data: 69 tasks, about 2 MB)
MAX_FILE_CHARS = 256 << 20
#: what every task of a file holds
TASK_FIELDS = frozenset(("model", "workload_key", "desc", "calls", "candidates", "picks"))
#: the smoke run's zero-trial search (a tenth of it)
SMOKE_SEARCH = profile_model.SMOKE_SEARCH


def base_model(spec):
    """The base model ``spec`` names (``load_base_model``); ValueError when it names none."""
    model = load_base_model(spec)
    if model is None:
        raise ValueError(f"base model {spec!r}: none (AUTOSCHED_BASE_MODEL=off?)")
    return model


def model_tasks(name: str, seed: int, largest: int) -> tuple[object, list]:
    """The partition of model ``name`` and its ``largest`` tasks by their share of its work
    (flops times calls), largest first."""
    path = profile_model.smoke_model_path() if name == "smoke" else profile_model.model_path(name, seed)
    part = G.partition(G.from_onnx(path))
    calls = {w.workload_key: sum(1 for sg in part.subgraphs if sg.workload is w) for w in part.tasks}
    tasks = sorted(part.tasks, key=lambda w: -w.dag.flop_count() * calls[w.workload_key])
    return part, [(w, calls[w.workload_key]) for w in tasks[:largest]]


def collect(names: list[str], out: str, seed: int, largest: int, turns: int, specs=("default",), params=None,
            say=print) -> dict:
    """Measure the candidates of the ``largest`` tasks of each model, those of every base
    model of ``specs``, into ``out`` (resumed: a task whose pool holds every model's
    candidates already is kept)."""
    here = machine_info()
    data = load(out) if os.path.exists(out) else {"format": FORMAT, "machine": here, "tasks": []}
    if data["machine"].get("llvm_cpu") != here["llvm_cpu"]:
        raise ValueError(f"{out} was measured on {data['machine'].get('llvm_cpu')!r}, this CPU is "
                         f"{here['llvm_cpu']!r}: collect into another file (timings of two CPUs do not compare)")
    entries = {(t["model"], t["workload_key"]): t for t in data["tasks"]}
    models = {}
    for spec in specs:
        model = base_model(spec)
        models[model_identity(model)] = model
    with ProgramMeasurer(runner=LocalRunner(cold_constants=True)) as measurer:
        for name in names:
            _, tasks = model_tasks(name, seed, largest)
            for workload, calls in tasks:
                entry = entries.get((name, workload.workload_key))
                missing = [i for i in models if entry is None or i not in entry["picks"]]
                if not missing:
                    continue
                t0 = time.perf_counter()
                task = workload.search_task()
                pool = {} if entry is None else {c["steps"]: c for c in entry["candidates"]}
                picks = {} if entry is None else dict(entry["picks"])
                for ident in missing:
                    found = ranked_programs(task, models[ident], seed, [default_schedule(workload.dag)], params,
                                            top=CANDIDATES)
                    for k, state in enumerate(found):
                        steps = steps_to_json(state.steps)
                        pool.setdefault(steps, {"steps": steps, "ms": None})
                        if k == 0:
                            picks[ident] = steps
                states = [ir.State.from_steps(workload.dag, steps_from_json(steps)) for steps in pool]
                results = measurer.retime(task, states, turns=turns)
                for c, r in zip(pool.values(), results):
                    c["ms"] = 1e3 * r.mean_cost if r.ok else None
                entry = {"model": name, "workload_key": workload.workload_key, "desc": workload.desc, "calls": calls,
                         "candidates": list(pool.values()), "picks": picks}
                if (name, workload.workload_key) not in entries:
                    data["tasks"].append(entry)
                else:
                    data["tasks"][data["tasks"].index(entries[(name, workload.workload_key)])] = entry
                entries[(name, workload.workload_key)] = entry
                _write(data, out)
                ok = [c["ms"] for c in pool.values() if c["ms"] is not None]
                say(f"{name}: {workload.desc}: {len(ok)} of {len(pool)} candidates timed, fastest "
                    f"{min(ok) if ok else float('nan'):.3f} ms ({time.perf_counter() - t0:.0f} s)")
    return data


def load(path: str) -> dict:
    """A file ``collect`` wrote (gzip-compressed when its name ends in .gz, as the one in
    bench/data), at most ``MAX_FILE_CHARS`` long."""
    try:
        with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as f:
            text = f.read(MAX_FILE_CHARS + 1)
    except EOFError:   # (a gzip stream cut short; a damaged one is an OSError)
        raise ValueError(f"{path} is a gzip file cut short: not a file of measured candidates") from None
    if len(text) > MAX_FILE_CHARS:
        raise ValueError(f"{path} is longer than {MAX_FILE_CHARS} characters: not a file of measured candidates")
    data = json.loads(text)
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"{path} is not a file of measured candidates ({FORMAT!r})")
    tasks = data.get("tasks")
    if not isinstance(data.get("machine"), dict) or not isinstance(tasks, list) or not all(
            isinstance(t, dict) and TASK_FIELDS <= t.keys() and isinstance(t["candidates"], list)
            and isinstance(t["picks"], dict) for t in tasks):
        raise ValueError(f"{path} has no machine, or a task without the fields {sorted(TASK_FIELDS)}")
    return data


def _write(data: dict, path: str) -> None:
    """Write ``data`` to ``path`` whole or not at all, gzip-compressed when its name ends in
    .gz (``load`` reads it so)."""
    tmp = f"{path}.part"
    with (gzip.open(tmp, "wt") if path.endswith(".gz") else open(tmp, "w")) as f:
        json.dump(data, f)
    os.replace(tmp, path)


def regrets(data: dict, spec, seed: int = 0) -> list[dict]:
    """Per task: the candidate base model ``spec`` picks among all that were timed, its time
    over the fastest one's; and (``own_regret``) that of its own search's pick when its
    candidates were collected (else None)."""
    model = base_model(spec)
    ident = model_identity(model)
    rows = []
    parts: dict = {}
    for entry in data["tasks"]:
        if entry["model"] not in parts:
            part, _ = model_tasks(entry["model"], seed, 0)
            parts[entry["model"]] = {w.workload_key: w for w in part.tasks}
        workload = parts[entry["model"]].get(entry["workload_key"])
        if workload is None:
            continue
        timed, states = [], []
        for c in entry["candidates"]:
            if c["ms"] is None:
                continue
            try:   # (steps of an older search space no longer replay: the candidate is left out)
                states.append(ir.State.from_steps(workload.dag, steps_from_json(c["steps"])))
            except (ir.InvalidStep, ValueError):
                continue
            timed.append(c)
        if len(timed) < 2:
            continue
        pick = timed[best_first(workload.search_task(), model, states)[0]]["ms"]
        fastest = min(c["ms"] for c in timed)
        own = next((c["ms"] for c in timed if c["steps"] == entry["picks"].get(ident)), None)
        rows.append({"model": entry["model"], "desc": entry["desc"], "calls": entry["calls"],
                     "pick_ms": pick, "fastest_ms": fastest, "regret": pick / fastest,
                     "own_ms": own, "own_regret": None if own is None else own / fastest,
                     "place": 1 + sum(c["ms"] < pick for c in timed), "candidates": len(timed)})
    return rows


def summary(rows: list[dict], column: str = "regret") -> dict:
    """Geometric-mean regret (``column``: "regret" or "own_regret"), and the kernel-weighted
    one (calls x the pick's time over calls x the fastest's, summed over tasks), over the
    rows that have it."""
    ms = "pick_ms" if column == "regret" else "own_ms"
    rows = [r for r in rows if r[column] is not None]
    if not rows:
        return {"tasks": 0, "geomean_regret": None, "weighted_regret": None, "first_place": 0}
    geo = math.exp(sum(math.log(r[column]) for r in rows) / len(rows))
    weighted = sum(r["calls"] * r[ms] for r in rows) / sum(r["calls"] * r["fastest_ms"] for r in rows)
    return {"tasks": len(rows), "geomean_regret": geo, "weighted_regret": weighted,
            "first_place": sum(r[ms] == r["fastest_ms"] for r in rows)}


def evaluate(path: str, specs: list[str], seed: int, say=print) -> list[dict]:
    data = load(path)
    say(f"# {len(data['tasks'])} tasks measured on {data['machine'].get('llvm_cpu')} "
        f"({'AVX-512' if data['machine'].get('avx512f') else 'AVX2'})")
    by_spec = {spec: {(r["model"], r["desc"]): r for r in regrets(data, spec, seed)} for spec in specs}
    table = Table(["model", "task", "candidates", *[f"regret {i}" for i in range(len(specs))],
                   *[f"own {i}" for i in range(len(specs))]])
    for key, r in by_spec[specs[0]].items():
        got = [by_spec[s].get(key) for s in specs]
        table.add(r["model"], r["desc"][:60], r["candidates"], *[f"{g['regret']:.2f}" if g else "-" for g in got],
                  *[f"{g['own_regret']:.2f}" if g and g["own_regret"] else "-" for g in got])
    table.print()
    rows = []
    for i, spec in enumerate(specs):
        mine = list(by_spec[spec].values())
        s, own = summary(mine), summary(mine, "own_regret")
        say(f"# regret {i}: {spec}: its choice among all timed candidates of {s['tasks']} tasks: geometric mean "
            f"{s['geomean_regret']:.3f}, kernel-weighted {s['weighted_regret']:.3f}, the fastest in {s['first_place']}"
            + (f"; its own search's pick ({own['tasks']} tasks): {own['geomean_regret']:.3f}, kernel-weighted "
               f"{own['weighted_regret']:.3f}" if own["tasks"] else ""))
        rows.append(json_row(str(spec), **s, own_tasks=own["tasks"], own_geomean_regret=own["geomean_regret"],
                             own_weighted_regret=own["weighted_regret"]))
    own_by_model = own_pick_times(by_spec, specs)
    if own_by_model:
        table = Table(["model", "fastest ms", *[f"own {i} ms" for i in range(len(specs))],
                       *[f"own {i} / own 0" for i in range(1, len(specs))]])
        for name, (fastest, own) in own_by_model.items():
            table.add(name, f"{fastest:.3f}", *[f"{ms:.3f}" for ms in own], *[f"{ms / own[0]:.3f}" for ms in own[1:]])
        table.print()
        for i in range(1, len(specs)):
            ratios = [own[i] / own[0] for _, own in own_by_model.values() if own[0] > 0]
            if ratios:
                say(f"# own {i} / own 0, geometric mean over {len(ratios)} models: "
                    f"{math.exp(sum(map(math.log, ratios)) / len(ratios)):.3f}")
    return rows


def own_pick_times(by_spec: dict, specs: list) -> dict:
    """Per model: (calls x the fastest candidate's ms, [calls x each spec's own pick's ms])
    summed over the tasks where every spec's own pick was timed: what each model's
    zero-trial programs of those tasks would cost a run of the model, on the same programs."""
    fastest: dict = {}
    own: dict = {}
    for key, first in by_spec[specs[0]].items():
        got = [by_spec[s].get(key) for s in specs]
        if any(g is None or g["own_ms"] is None for g in got):
            continue
        name = first["model"]
        fastest[name] = fastest.get(name, 0.0) + first["calls"] * first["fastest_ms"]
        sums = own.setdefault(name, [0.0] * len(specs))
        for i, g in enumerate(got):
            sums[i] += g["calls"] * g["own_ms"]
    return {name: (fastest[name], own[name]) for name in fastest}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, parents=[bench_args()],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--collect", action="store_true", help="measure the candidates of the models' tasks")
    parser.add_argument("--models", default="resnet50", help="comma-separated models (bench/profile_model.py's)")
    parser.add_argument("--largest", type=int, default=12, help="tasks per model, by their share of its work")
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("-o", "--output", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                              ".cache", "pick_regret.json"))
    parser.add_argument("--evaluate", metavar="FILE", help="a file --collect wrote")
    parser.add_argument("--base-models", nargs="+", default=["default"],
                        help="the base models that choose (files, or 'default': the shipped one)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    try:
        rows = _run(args, parser)
    except (ValueError, OSError) as err:   # a file of another kind or CPU, a model that is none
        print(f"pick_regret: {err}", file=sys.stderr)
        return 2
    emit_json("pick_regret", rows)
    return 0


def _run(args, parser) -> list[dict]:
    if args.smoke:
        import tempfile
        out = os.path.join(tempfile.mkdtemp(prefix="pick_regret_"), "smoke.json")
        collect(["smoke"], out, args.seed, 2, 1, params=SMOKE_SEARCH)
        rows = evaluate(out, ["default"], args.seed)
    elif args.collect:
        collect(args.models.split(","), args.output, args.seed, args.largest, args.turns, args.base_models)
        rows = evaluate(args.output, args.base_models, args.seed)
    elif args.evaluate:
        rows = evaluate(args.evaluate, args.base_models, args.seed)
    else:
        parser.error("say --collect, --evaluate FILE or --smoke")
    return rows


if __name__ == "__main__":
    sys.exit(main())
