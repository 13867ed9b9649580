"""bench/round_structure.py: how a round's programs group by structure (the numbers that size
the numpy population path)."""
from __future__ import annotations

from dataclasses import replace

import numpy as np

import ir
import sketch_rules
from autosched import ops
from autosched.history.base_model import SHIPPED_MODEL
from evolution.genes import lengths_from_parts, split_parts, with_step
from ir.steps import PragmaStep, SplitStep

from .test_bench_common import _load

round_structure = _load("round_structure")


def _program():
    a, b = ir.placeholder((16, 32), name="A"), ir.placeholder((32, 16), name="B")
    task = ir.SearchTask(ir.ComputeDAG([a, b, ops.matmul(a, b)]))
    sketches = sketch_rules.generate_sketches(task)
    rng = np.random.default_rng(0)
    for state in sketch_rules.sample_programs(task, sketches, 32, rng):
        if any(isinstance(s, PragmaStep) for s in state.steps) and \
                any(isinstance(s, SplitStep) and split_parts(s) and 1 in split_parts(s)[1:] for s in state.steps):
            return sketches, state
    raise AssertionError("no sampled program with an unroll pragma and an inner tile of 1")


def _without_an_inner_one(state):
    """``state`` with an inner tile length of 1 made 2 (a factor 2 moved from another level)."""
    at = next(i for i, s in enumerate(state.steps)
              if isinstance(s, SplitStep) and split_parts(s) and 1 in split_parts(s)[1:])
    step = state.steps[at]
    parts = split_parts(step)
    one = parts.index(1, 1)
    src = next(i for i, p in enumerate(parts) if p % 2 == 0 and i != one)
    moved = list(parts)
    moved[src] //= 2
    moved[one] *= 2
    other = with_step(state, at, replace(step, lengths=lengths_from_parts(step, moved)))
    assert other is not None
    return other


def test_programs_that_differ_in_tile_lengths_share_a_structure_not_their_ones():
    sketches, state = _program()
    other = _without_an_inner_one(state)
    key, any_unroll, ones = round_structure.structure_keys(state, sketches)
    key2, any_unroll2, ones2 = round_structure.structure_keys(other, sketches)
    assert key == key2 and any_unroll == any_unroll2
    assert ones != ones2


def test_the_unroll_value_is_part_of_a_structure_only_where_asked():
    sketches, state = _program()
    at = next(i for i, s in enumerate(state.steps) if isinstance(s, PragmaStep))
    step = state.steps[at]
    other = with_step(state, at, replace(step, auto_unroll_max_step=step.auto_unroll_max_step + 1))
    key, any_unroll, _ = round_structure.structure_keys(state, sketches)
    key2, any_unroll2, _ = round_structure.structure_keys(other, sketches)
    assert key != key2 and any_unroll == any_unroll2


def test_a_nest_key_leaves_tile_lengths_and_the_unroll_value_out():
    _, state = _program()
    other = _without_an_inner_one(state)
    pragma_at = next(i for i, s in enumerate(other.steps) if isinstance(s, PragmaStep))
    pragma = other.steps[pragma_at]
    other = with_step(other, pragma_at, replace(pragma, auto_unroll_max_step=pragma.auto_unroll_max_step + 1))
    keys = round_structure.nest_keys(state)
    roots = [st.name for st in state.stages if not st.is_placeholder and st.compute_at == "root"]
    assert sorted(k[0] for k in keys) == sorted(roots)
    assert round_structure.nest_keys(other) == keys
    unannotated = ir.State.from_steps(state.dag, [s for s in state.steps if not isinstance(s, PragmaStep)])
    assert round_structure.nest_keys(unannotated) != keys


def test_a_smoke_round_counts_its_programs_by_structure():
    row = round_structure.one_round("GMM-1x128x128x128", population=32, generations=1, seed=0,
                                    base_model=SHIPPED_MODEL)
    assert row["programs"] >= row["structures_ones"] >= row["structures"] >= row["structures_any_unroll"] >= 1
    assert row["programs"] >= row["nest_shapes"] >= 1
    assert row["largest_structure"] * row["structures"] >= row["programs"]
    assert row["nest_structures"] >= 1 and row["nests_per_structure"] >= 1
    assert row["sketches"] == len(sketch_rules.generate_sketches(
        ir.SearchTask(ir.ComputeDAG(ops.suite_workload("GMM-1x128x128x128").tensors))))
