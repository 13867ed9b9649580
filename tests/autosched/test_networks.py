"""tune_networks end to end on tiny networks: the scheduler drives real search and
measurement, the tuned network runs and matches numpy, a run resumes from its log; several
networks share tasks (the command line: tests/autosched/test_cli.py)."""
import warnings

import numpy as np
import pytest

import autosched
import ir
from autosched import UntunedWorkloadWarning, networks
from autosched import graph as G
from autosched.history.records import trials_of
from evolution import SearchParams, XGBoostModel

HW = ir.HardwareParams(num_cores=2, vector_lanes=16)
SMALL_SEARCH = SearchParams(population=32, generations=1, init_min_population=8)


@pytest.fixture(scope="module")
def pools():
    """Worker processes shared by the tests (a measurer leaves pools it was given running)."""
    builder = autosched.WorkerPool(2, timeout=15, name="test-builder")
    runner = autosched.WorkerPool(1, timeout=10, name="test-runner")
    yield builder, runner
    builder.shutdown(wait=True, cancel_futures=True)
    runner.shutdown(wait=True, cancel_futures=True)


def measuring(pools):
    return dict(builder=autosched.LocalBuilder(executor=pools[0]),
                runner=autosched.LocalRunner(min_repeat_ms=2, repeat=3, executor=pools[1]))


def tiny(seed=0, channels=8, blocks=1):
    b = G.GraphBuilder(f"tiny{channels}_{seed}", seed=seed)
    x = b.input((1, 6, 6, 4))
    a = b.relu(b.batch_norm(b.conv2d(x, channels, 3, padding=1)))
    for _ in range(blocks):
        a = b.relu(b.add(b.batch_norm(b.conv2d(a, channels, 3, padding=1)), a))
    y = b.dense(b.reshape(b.global_avg_pool(a), (1, channels)), 10)
    return b.graph([y])


def test_tune_network_runs_verifies_and_resumes(tmp_path, pools):
    log = str(tmp_path / "net.jsonl")
    g = tiny(blocks=0)
    kwargs = dict(measure_batch=2, log_file=log, cost_model=XGBoostModel(num_warmup_sample=8, seed=0),
                  search_params=SMALL_SEARCH, hardware=HW, verbose=0, **measuring(pools))
    res = autosched.tune_networks(g, trials=10, seed=0, **kwargs)
    assert res.trials == 10 and len(res.tasks) == 3
    assert res.scheduler.choices[:3] == [0, 1, 2]                      # warm-up: every task once
    assert all(c < 1 for c in res.best_costs)                          # every task has a valid program
    assert set(res.best_states) == {t.workload_key for t in res.tasks}
    est = res.estimated_latencies()["tiny8_0"]
    assert est == pytest.approx(sum(res.best_costs))                   # each task once in this network
    assert [p["trials"] for p in res.curve] == [2, 4, 6, 8, 10]
    with warnings.catch_warnings():
        warnings.simplefilter("error", UntunedWorkloadWarning)
        ex = res.executor(0)
    ok, err = ex.verify(rtol=1e-4)
    assert ok, err
    # the log serves an executor just as well
    with warnings.catch_warnings():
        warnings.simplefilter("error", UntunedWorkloadWarning)
        from_log = G.GraphExecutor(res.networks[0], log_file=log)
    assert from_log.verify(rtol=1e-4)[0]
    records = trials_of(autosched.read_records(log))  # (and the re-timings the tuning ended with)
    assert len(records) == 10
    # resume: the scheduler starts from the log's rounds, only new programs are measured
    again = autosched.tune_networks(g, trials=4, seed=1, **kwargs)
    assert again.trials == 4
    assert sum(again.scheduler.rounds) == 5 + 2
    for t in again.tasks:  # each task's best: the program its log ranks first (re-timed in turns at the end)
        assert again.best_states[t.workload_key].key == autosched.best_record(log, t.dag).program
    records = trials_of(autosched.read_records(log))
    assert len(records) == 14
    programs = [r.program for r in records]
    assert len(set(programs)) == len(programs)


def test_several_networks_share_tasks_and_weights(pools):
    a, b = tiny(0, 8, blocks=0), tiny(1, 8, blocks=0)       # same shapes, other weights: the same 3 tasks
    c = tiny(0, 16, blocks=0)
    res = autosched.tune_networks([a, b, c], trials=9, measure_batch=1, cost_model="random",
                                  search_params=SMALL_SEARCH, hardware=HW, verbose=0, **measuring(pools),
                                  objective="requirement", latency_requirements=[1.0, 1.0, 1e-9],
                                  strategy="gradient", eps_greedy=0.0)
    assert len(res.tasks) == 6
    np.testing.assert_array_equal(res.weights[0], res.weights[1])
    assert res.weights[:2, :3].sum() == 6 and res.weights[2, 3:].sum() == 3
    assert res.weights[:2, 3:].sum() == 0 and res.weights[2, :3].sum() == 0
    # networks 0 and 1 meet 1 s at once: after the warm-up all rounds go to network 2's tasks
    assert res.scheduler.choices[:6] == list(range(6))
    assert res.scheduler.choices[6:] and all(i >= 3 for i in res.scheduler.choices[6:])
    lat = res.estimated_latencies()
    assert lat["tiny8_0"] == pytest.approx(lat["tiny8_1"]) and set(lat) == {"tiny8_0", "tiny8_1", "tiny16_0"}


def test_a_network_whose_weights_exceed_the_last_level_cache_is_timed_with_cold_weights(monkeypatch):
    parts = [networks.as_partitioned(tiny(channels=8, blocks=2))]
    weights = parts[0].constant_bytes  # three 3x3 convs of 8 channels and a dense of 8x10 (+ biases)
    assert weights == 4 * (4 * 9 * 8 + 8 + 2 * (8 * 9 * 8 + 8) + 8 * 10 + 10)
    monkeypatch.setattr(networks, "last_level_cache_bytes", lambda: weights)
    assert not networks.weights_exceed_cache(parts)
    monkeypatch.setattr(networks, "last_level_cache_bytes", lambda: weights - 1)
    assert networks.weights_exceed_cache(parts)
    made = []

    class Measured(Exception):
        pass

    def tune_tasks(scheduler, policies, model, options, trials, **kw):
        made.append(options.runner)
        raise Measured  # what the runner does is test_measure.py's

    monkeypatch.setattr(networks, "tune_tasks", tune_tasks)
    with pytest.raises(Measured):
        autosched.tune_networks(parts[0], trials=1, cost_model="random", verbose=0)
    assert made[0].options.cold_constants and made[0].options.min_repeat_ms == 0


def test_tune_networks_arguments():
    with pytest.raises(ValueError, match="latency_requirements"):
        autosched.tune_networks(tiny(), trials=4, objective="requirement", verbose=0)
    with pytest.raises(TypeError, match="network name"):
        autosched.tune_networks(42, trials=4)
    with pytest.raises(ValueError, match="unknown network"):
        autosched.tune_networks("alexnet", trials=4)


def test_one_options_object_serves_both_front_doors_and_keywords_replace_its_fields(monkeypatch):
    """``auto_schedule`` and ``tune_networks`` take the same ``TuneOptions`` (or its fields as
    keywords, which win); a keyword that is no option is a TypeError naming the options."""
    seen = []

    class Stop(Exception):
        pass

    def tune_tasks(scheduler, policies, model, options, trials, **kw):
        seen.append((options, trials))
        raise Stop

    monkeypatch.setattr(networks, "tune_tasks", tune_tasks)
    monkeypatch.setattr(autosched.tune, "tune_tasks", tune_tasks)
    options = autosched.TuneOptions(trials=3, measure_batch=2, seed=5, cost_model="random", records_db=None,
                                    verbose=0)
    with pytest.raises(Stop):
        autosched.tune_networks(tiny(), options)
    with pytest.raises(Stop):
        autosched.auto_schedule(ir.ComputeDAG(autosched.ops.suite_workload("GMM-1x128x128x128").tensors), options,
                                measure_batch=4)
    (net, net_trials), (one, one_trials) = seen
    assert (net_trials, one_trials) == (3, 3) and net.seed == one.seed == 5
    assert net.measure_batch == 2 and one.measure_batch == 4 and options.measure_batch == 2
    assert autosched.TuneOptions(verbose=0).trials_for(7) == 7000
    with pytest.raises(TypeError, match="unexpected keyword argument 'trails'; the tuning options are"):
        autosched.auto_schedule(ir.ComputeDAG(autosched.ops.suite_workload("GMM-1x128x128x128").tensors), trails=4)
    with pytest.raises(ValueError, match="trials must be >= 0"):
        autosched.TuneOptions(trials=-1)
