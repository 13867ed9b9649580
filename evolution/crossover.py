"""Node-based crossover (Ansor 5.1): a child takes, for every stage of the DAG, the
decisions of one of two parents sampled from the same sketch — the tile lengths of the
stage's splits and its compute location, parallel, unroll and vectorize steps — and is
kept only if its merged steps replay to a valid program."""
from __future__ import annotations

from dataclasses import replace
from typing import Sequence

import numpy as np

import ir
from ir.steps import SplitStep, stage_names_along

from .genes import decision_phase, replay, sketch_length


class Crossover:
    """Crossover for the programs of one task; the per-sketch step-to-stage tables are
    computed once."""

    def __init__(self, sketches: Sequence[ir.State]):
        self.sketches = list(sketches)
        self._names = [stage_names_along(s.dag, s.steps) for s in self.sketches]

    def __call__(self, a: ir.State, b: ir.State, rng: np.random.Generator) -> ir.State | None:
        ka, kb = sketch_length(a, self.sketches), sketch_length(b, self.sketches)
        if ka is None or ka != kb:
            return None  # only programs of one sketch share their genes' structure
        k, n = ka
        names = self._names[k]
        stage_names = [st.name for st in a.raw_stages]
        if stage_names != [st.name for st in b.raw_stages]:
            return None  # one sketch makes one set of stages: these parents are not of one sketch
        take_b = {name: bool(rng.integers(2)) for name in stage_names}
        if all(take_b.values()) or not any(take_b.values()):
            return None  # the child would be a copy of one parent
        steps = []
        for i in range(n):
            step = a.steps[i]
            if isinstance(step, SplitStep) and take_b[names[i]]:
                step = replace(step, lengths=b.steps[i].lengths)
            steps.append(step)
        decisions = []
        for parent, use_b in ((a, False), (b, True)):
            for pos, step in enumerate(parent.steps[n:]):
                if take_b[parent.raw_stages[step.stage_id].name] == use_b:
                    decisions.append((decision_phase(step, parent), step.stage_id, use_b, pos, step))
        decisions.sort(key=lambda d: d[:4])
        return replay(a.dag, steps + [d[4] for d in decisions])
