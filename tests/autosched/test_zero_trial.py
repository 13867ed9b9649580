"""Zero-trial programs: an untuned task gets the program the base cost model ranks best
after a short search, never measured; it computes what its DAG says (checked against
numpy), and the graph executor and ``apply_history_best`` use it, loudly."""
import warnings

import numpy as np
import pytest

import ir
from autosched import UntunedWorkloadWarning, apply_history_best, ops
from autosched import graph as G
from autosched.history.base_model import SHIPPED_MODEL, load_base_model
from autosched.history.zero_trial import ZeroTrial, ranked_programs, zero_trial_program
from evolution import SearchParams
from sketch_rules import search_space
from sketch_rules.analysis import parallel_region_starts


def _run(kernel, dag, inputs, outputs):
    args = [kernel.pack(t.name, a) if t.name in kernel.layouts else a for t, a in zip(dag.inputs, inputs)]
    kernel(*args, *outputs)


@pytest.mark.parametrize("name", ["C2D-1x14x14x32x48-k3s1p1", "GMM-1x48x64x80", "NRM-1x64x96"])
def test_the_zero_trial_program_is_correct(name):
    w = ops.suite_workload(name)
    dag = ir.ComputeDAG(w.tensors)
    state = zero_trial_program(ir.SearchTask(dag), load_base_model(SHIPPED_MODEL), seed=0)
    assert state.steps                      # a searched program, not the naive one
    inputs = w.random_inputs(np.random.default_rng(1))
    outputs = w.output_buffers()
    _run(ir.build(dag, state, layout_rewrite=True), dag, inputs, outputs)
    for got, want in zip(outputs, w.reference(inputs)):
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3)


def test_zero_trial_programs_are_found_once_per_workload():
    zero = ZeroTrial.from_spec(SHIPPED_MODEL)
    w = ops.suite_workload("GMM-1x32x32x32")
    a, b = zero.program(ir.ComputeDAG(w.tensors)), zero.program(ir.ComputeDAG(w.tensors))
    assert str(a) == str(b) and len(zero._steps) == 1
    assert ZeroTrial.from_spec(None) is None


def _network():
    b = G.GraphBuilder("small_cnn", seed=0)
    x = b.input((1, 12, 12, 8))
    y = b.relu(b.conv(x, 16, 3, padding=1))
    y = b.dense(b.global_avg_pool(y), 10)
    return b.graph([y])


def test_the_executor_runs_untuned_tasks_with_their_zero_trial_programs():
    part = G.partition(_network())
    with pytest.warns(UntunedWorkloadWarning, match="zero-trial program"):
        executor = G.GraphExecutor(part, base_model=SHIPPED_MODEL)
    tasks = [executor.programs[t.workload_key] for t in part.tasks]
    assert tasks and all(p.zero_trial and not p.tuned for p in tasks)
    assert len(executor.untuned) == len(part.tasks)
    ok, err = executor.verify()
    assert ok, err
    with pytest.warns(UntunedWorkloadWarning, match="run a default schedule"):
        plain = G.GraphExecutor(part, base_model=None)
    assert not any(p.zero_trial for p in plain.programs.values())


def test_apply_history_best_builds_the_zero_trial_program_of_a_workload_without_records(tmp_path):
    w = ops.suite_workload("GMM-1x40x40x40")
    dag = ir.ComputeDAG(w.tensors)
    log = tmp_path / "log.jsonl"
    log.write_text("# no records yet\n")
    with apply_history_best(log, base_model=SHIPPED_MODEL) as history:
        with pytest.warns(UntunedWorkloadWarning, match="UNTUNED zero-trial program"):
            kernel = ir.build(dag)
    assert history.fallbacks == [dag.workload_key()]
    assert str(kernel.state) != str(dag.init_state())
    inputs = w.random_inputs(np.random.default_rng(2))
    outputs = w.output_buffers()
    _run(kernel, dag, inputs, outputs)
    np.testing.assert_allclose(outputs[0], w.reference(inputs)[0], rtol=1e-3, atol=1e-3)


def test_ranked_programs_are_distinct_best_first_and_begin_with_the_zero_trial_program():
    w = ops.suite_workload("DEP-1x14x14x24-k3s1p1")
    task = ir.SearchTask(ir.ComputeDAG(w.tensors))
    model = load_base_model(SHIPPED_MODEL)
    params = SearchParams(population=32, generations=1, init_min_population=16, islands=1)
    default = search_space(task.target).default_schedule(task.dag, task.hardware)
    ranked = ranked_programs(task, model, 0, [default, default], params, top=6)
    assert len(ranked) == 6 and len({s.key for s in ranked}) == 6
    scores = model.predict(task, ranked)
    assert all(a >= b for a, b in zip(scores, scores[1:]))
    assert ranked[0].key == zero_trial_program(task, model, 0, [default], params).key
    everything = ranked_programs(task, model, 0, [default], params, top=10_000)
    assert default.key in {s.key for s in everything}      # the candidates are ranked with the search's


class _FavoursRestartedRegions:
    """The shipped model, but every program that starts a parallel region more than once a
    call scored above all others (as the base model ranked one for RegNet's 1x1 convolution)."""

    def __init__(self, model):
        self.model = model

    def __getattr__(self, name):
        return getattr(self.model, name)

    def predict(self, task, states):
        scores = np.asarray(self.model.predict(task, states), dtype=np.float64)
        return scores + 100.0 * np.array([parallel_region_starts(s) > 1 for s in states])


def test_a_program_that_starts_parallel_regions_repeatedly_is_never_the_zero_trial_pick():
    w = ops.suite_workload("GMM-1x48x64x80")
    task = ir.SearchTask(ir.ComputeDAG(w.tensors))
    s = task.dag.init_state()
    c = next(i for i, st in enumerate(s.stages) if not st.is_placeholder)
    restarted = s.parallel(c, s.stages[c].iters[2].name)          # inside a serial loop of 48 rows
    assert parallel_region_starts(restarted) == 48
    model = _FavoursRestartedRegions(load_base_model(SHIPPED_MODEL))
    params = SearchParams(population=32, generations=1, init_min_population=16, islands=1)
    ranked = ranked_programs(task, model, 0, [restarted], params, top=10_000)
    assert model.predict(task, [restarted])[0] > max(model.predict(task, ranked[:1]))   # the model's favourite...
    assert parallel_region_starts(ranked[0]) == 1                                       # ...is not picked
    assert ranked[-1].key == restarted.key or parallel_region_starts(ranked[-1]) > 1
    inputs = w.random_inputs(np.random.default_rng(1))
    outputs = w.output_buffers()
    _run(ir.build(task.dag, ranked[0], layout_rewrite=True), task.dag, inputs, outputs)
    for got, want in zip(outputs, w.reference(inputs)):
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3)


class _CountsSteps:
    """A stand-in model that ranks a program by its number of steps: a searched program
    above a naive one, whatever the task."""

    def predict(self, task, states):
        return np.array([float(len(s.steps)) for s in states])


def test_a_task_takes_the_pick_of_its_family_adapted_to_it_where_the_model_ranks_that_first():
    from autosched.history.zero_trial import shared_in_family
    dense = [ops.workload("dense_chain", (1, 24), 64, n, epilogue="bias-relu") for n in (96, 160)]
    conv = ops.workload("conv2d_chain", 1, 8, 8, 16, 32, 3, epilogue="bias-relu")
    tasks = [ir.SearchTask(ir.ComputeDAG(w.tensors), layout_rewrite=True) for w in (*dense, conv)]
    good = ranked_programs(tasks[1], load_base_model(SHIPPED_MODEL), 0)[0]
    naive = ir.State.initial(tasks[0].dag)
    picks = {tasks[0].workload_key: naive, tasks[1].workload_key: good,
             tasks[2].workload_key: ir.State.initial(tasks[2].dag)}
    out = shared_in_family(tasks, picks, _CountsSteps())
    shared = out[tasks[0].workload_key]
    assert shared.key != naive.key and [type(s) for s in shared.steps] == [type(s) for s in good.steps]
    assert out[tasks[1].workload_key] is good                       # its own ranked first
    assert out[tasks[2].workload_key] is picks[tasks[2].workload_key]   # another family: nothing to take
    again = shared_in_family(tasks[::-1], picks, _CountsSteps())     # the tasks' order does not matter
    assert {k: s.key for k, s in again.items()} == {k: s.key for k, s in out.items()}
    rng = np.random.default_rng(3)                                  # what it computes: the dense layer
    inputs, outputs = dense[0].random_inputs(rng), dense[0].output_buffers()
    _run(ir.build(tasks[0].dag, shared, layout_rewrite=True), tasks[0].dag, inputs, outputs)
    np.testing.assert_allclose(outputs[0], dense[0].reference(inputs)[0], rtol=1e-4, atol=1e-4)
