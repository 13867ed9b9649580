"""How the programs one search round scores group by structure: the measurement that sizes
the numpy population path (programs of one structure get their features from one template).

One round (population 2048, 4 generations by default) evolves under the shipped base model,
as a task's first round and zero-trial search do; every distinct program it scores is
counted and grouped by

- ``sketches``: the sketch it was sampled from;
- ``structures``: its sketch and its decision steps (compute locations, fused parallel
  loop, unroll pragma, vectorization): what must be equal for two programs to differ only
  in their tile lengths;
- ``structures_any_unroll``: the same with the unroll pragma's value left out (a template
  that takes the unroll step as a vector too);
- ``structures_ones``: structures split further by which tile lengths are 1 (the loops of
  extent 1 change the lowered index expressions: a template built from one lowered
  representative holds only for programs with the same ones);
- ``nest_shapes``: distinct lowered loop nests with every number blanked out (what such
  a template would have to match);
- ``nest_structures``: root loop nests (the feature cache's unit) by their root stage and
  the steps on their stages with tile lengths and the unroll value left out (the unit of a
  template parametric in both), and ``nests_per_structure``, the nests of the round's
  programs per such structure.

    python bench/round_structure.py [--workloads GMM-1x512x512x512 C2D-1x14x14x256x256-k3s1p1 ...]
"""
from __future__ import annotations

import argparse
import collections
import os
import re
import sys
import time
from dataclasses import replace

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402  (sets the benchmark environment first)


import ir  # noqa: E402
from autosched import ops  # noqa: E402
from autosched.history.base_model import load_base_model  # noqa: E402
from evolution import SearchParams, SketchPolicy  # noqa: E402
from evolution.features import feature_lowering  # noqa: E402
from evolution.genes import sketch_length, split_parts  # noqa: E402
from ir.steps import ComputeInlineStep, PragmaStep, SplitStep, stage_names_along  # noqa: E402

DEFAULT_WORKLOADS = ["GMM-1x512x512x512", "C2D-1x14x14x256x256-k3s1p1", "DEP-1x14x14x512-k3s2p1", "NRM-1x1024x1024"]
SMOKE_WORKLOADS = ["GMM-1x128x128x128"]


class RecordingModel:
    """Scores with ``model`` and keeps every distinct program (by step list) it was asked to score."""

    def __init__(self, model):
        self.model = model
        self.scored: dict[tuple, ir.State] = {}

    can_rank = True

    def predict(self, task, states):
        for s in states:
            self.scored.setdefault(s.steps, s)
        return self.model.predict(task, states)


def structure_keys(state: ir.State, sketches) -> tuple[tuple, tuple, tuple]:
    """(structure, structure with the unroll value left out, structure with its ones)."""
    found = sketch_length(state, sketches)
    at = found[1] if found is not None else len(state.steps)
    decisions = state.steps[at:]
    ones = tuple(p == 1 for s in state.steps[:at] if isinstance(s, SplitStep) for p in (split_parts(s) or ()))
    key = (found, decisions)
    any_unroll = (found, tuple(type(s).__name__ if isinstance(s, PragmaStep) else s for s in decisions))
    return key, any_unroll, key + (ones,)


def nest_keys(state: ir.State) -> set[tuple]:
    """A key per root loop nest of ``state``: its root stage and the steps on the stages it
    holds (attached ones included), split lengths and the unroll value blanked; inlining
    steps belong to every nest (an inlined stage is read where it is used)."""
    stages = state.stages
    attached: dict[int, list[int]] = {}
    for idx, st in enumerate(stages):
        if st.compute_at == "iter":
            attached.setdefault(st.attach[0], []).append(idx)
    root_of = {}
    for idx, st in enumerate(stages):
        if not st.is_placeholder and st.compute_at == "root":
            todo = [idx]
            while todo:
                held = todo.pop()
                root_of[stages[held].name] = st.name
                todo += attached.get(held, [])
    steps: dict[str, list] = {name: [] for name in set(root_of.values())}
    shared = []
    for step, name in zip(state.steps, stage_names_along(state.dag, state.steps)):
        if isinstance(step, SplitStep):
            step = replace(step, lengths=(None,) * len(step.lengths))
        elif isinstance(step, PragmaStep):
            step = replace(step, auto_unroll_max_step=0)
        if isinstance(step, ComputeInlineStep) or name not in root_of:
            shared.append(step)
        else:
            steps[root_of[name]].append(step)
    return {(name, tuple(shared), tuple(own)) for name, own in steps.items()}


def nest_shape(task, state: ir.State) -> str:
    """The lowered root nests of ``state`` with every number blanked."""
    lowering = feature_lowering(task, state, bool(getattr(task, "layout_rewrite", False)), False)
    text = "".join(str(lowering.stage_nest(i)) for i, st in enumerate(state.stages)
                   if not st.is_placeholder and st.compute_at == "root")
    return re.sub(r"\d+", "#", text)


def one_round(name: str, population: int, generations: int, seed: int, base_model="default") -> dict:
    """The counts of one round on suite workload ``name`` under ``base_model`` (a
    ``load_base_model`` spec)."""
    w = ops.suite_workload(name)
    task = ir.SearchTask(ir.ComputeDAG(w.tensors))
    base = load_base_model(base_model)
    if base is None:
        raise SystemExit("round_structure: the base model is off (AUTOSCHED_BASE_MODEL); nothing to rank with")
    model = RecordingModel(base)
    params = SearchParams(population=population, generations=generations, islands=1)
    policy = SketchPolicy(task, model, params, seed=seed, executor=None)
    t0 = time.perf_counter()
    policy.evolve(policy.sample_initial(), 64)
    round_s = time.perf_counter() - t0
    programs = list(model.scored.values())
    groups = [collections.Counter() for _ in range(3)]
    for s in programs:
        for counter, key in zip(groups, structure_keys(s, policy.sketches)):
            counter[key] += 1
    shapes = {nest_shape(task, s) for s in programs}
    nests = collections.Counter(key for s in programs for key in nest_keys(s))
    sizes = sorted(groups[0].values(), reverse=True)
    return dict(programs=len(programs), sketches=len(policy.sketches), structures=len(groups[0]),
                structures_any_unroll=len(groups[1]), structures_ones=len(groups[2]), nest_shapes=len(shapes),
                nest_structures=len(nests), nests_per_structure=round(sum(nests.values()) / max(len(nests), 1), 1),
                largest_structure=sizes[0] if sizes else 0,
                programs_per_structure=round(len(programs) / max(len(groups[0]), 1), 1),
                programs_per_structure_ones=round(len(programs) / max(len(groups[2]), 1), 1),
                round_s=round(round_s, 2))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, parents=[common.bench_args()],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workloads", nargs="*", default=None, help="suite names (default: four of the suite)")
    parser.add_argument("--population", type=int, default=2048)
    parser.add_argument("--generations", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    names = args.workloads or (SMOKE_WORKLOADS if args.smoke else DEFAULT_WORKLOADS)
    population, generations = (64, 1) if args.smoke else (args.population, args.generations)
    rows = []
    cols = ["programs", "sketches", "structures", "structures_any_unroll", "structures_ones", "nest_shapes",
            "programs_per_structure", "programs_per_structure_ones", "nest_structures", "nests_per_structure",
            "round_s"]
    if not args.json_only:
        print(f"one round, population {population}, {generations} generations, under the base model")
        print(f"{'workload':32s} " + " ".join(f"{c:>12s}" for c in cols))
    for name in names:
        row = one_round(name, population, generations, args.seed)
        if not args.json_only:
            print(f"{name:32s} " + " ".join(f"{row[c]:>12}" for c in cols))
        rows.append(common.json_row(name, **row))
    common.emit_json("round_structure", rows)


if __name__ == "__main__":
    main()
