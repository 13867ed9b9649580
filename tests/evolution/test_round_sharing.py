"""A program is its step list: within a search round an equal step list is built once
(``genes.shared_replays``) and scored once (``Evolution``), and that changes nothing the
round proposes (``tests/autosched/test_same_programs.py`` pins the proposals)."""
from __future__ import annotations

import collections
from dataclasses import replace

import numpy as np

import ir
import sketch_rules as SR
from autosched import ops
from evolution import SearchParams
from evolution.evolve import Evolution
from evolution.genes import replay, shared_replays
from ir.steps import SplitStep
from tests.autosched.stand_ins import StandInModel

HW = ir.HardwareParams(num_cores=2, vector_lanes=16)


def _task(name: str = "GMM-1x128x128x128") -> ir.SearchTask:
    return ir.SearchTask(ir.ComputeDAG(ops.suite_workload(name).tensors), hardware=HW)


def _programs(task, n: int, seed: int = 0) -> tuple[list, list[ir.State]]:
    sketches = SR.generate_sketches(task)
    return sketches, SR.sample_programs(task, sketches, n, np.random.default_rng(seed))


def test_a_round_builds_an_equal_step_list_once_and_only_inside_it():
    task = _task()
    state = _programs(task, 1)[0][0]
    steps = list(state.steps)
    assert replay(task.dag, steps) is not replay(task.dag, steps)  # outside a round: built afresh
    split = next(i for i, s in enumerate(steps) if isinstance(s, SplitStep))
    invalid = steps[:split] + [replace(steps[split], iter_id=99)] + steps[split + 1:]
    with shared_replays():
        first = replay(task.dag, steps)
        with shared_replays():  # a nested use shares the round's memory
            assert replay(task.dag, tuple(steps)) is first
        assert replay(task.dag, invalid) is None and replay(task.dag, invalid) is None
        assert str(first) == str(state)
    with shared_replays():  # a new round starts empty
        assert replay(task.dag, steps) is not first


class CountingModel(StandInModel):
    """The stand-in model (a pure function of the printed program), counting the step
    lists it is asked to score."""

    def __init__(self):
        super().__init__()
        self.asked: collections.Counter = collections.Counter()

    def predict(self, task, states):
        self.asked.update(s.steps for s in states)
        return super().predict(task, states)


def test_a_round_scores_each_program_once_and_returns_the_models_scores():
    for name in ("GMM-1x128x128x128", "C2D-1x14x14x256x256-k3s1p1"):
        task = _task(name)
        sketches, population = _programs(task, 24, seed=1)
        model = CountingModel()
        params = SearchParams(population=24, generations=4, init_min_population=8, islands=1)
        evolution = Evolution(task, model, params, sketches, np.random.default_rng(0))
        best = evolution.run(population, 8, set())
        assert model.asked and max(model.asked.values()) == 1, name
        assert len(best) == 8
        fresh = StandInModel().predict(task, [ir.State.from_steps(task.dag, s.steps) for _, s in best])
        assert [score for score, _ in best] == [float(x) for x in fresh]
        assert sorted((score for score, _ in best), reverse=True) == [score for score, _ in best]
