"""The TaskScheduler driving fake policies and a fake measurer with deterministic latency
curves: warm-up, choices, strategies, early stopping, objectives, callbacks."""
import io
import json
import math
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np
import pytest

from task_scheduler import LogEstimatedLatency, PrintTableInfo, TaskScheduler


@dataclass
class FakeResult:
    mean_cost: float
    ok: bool = True


class FakeMeasurer:
    """Task i's k-th measured program costs curves[i](k); best_cost is the best so far."""

    def __init__(self, curves):
        self.curves = curves
        self.count = {}
        self.best = {}

    def measure(self, task, states):
        out = []
        for _ in states:
            k = self.count.get(task.index, 0)
            self.count[task.index] = k + 1
            cost = self.curves[task.index](k)
            self.best[task.index] = min(self.best.get(task.index, math.inf), cost)
            out.append(FakeResult(cost))
        return out

    def best_cost(self, task):
        return self.best.get(task.index, 1e10)


class FakePolicy:
    def __init__(self, limit=None):
        self.n, self.limit, self.updates = 0, limit, 0

    def next_batch(self, n):
        if self.limit is not None:
            n = min(n, self.limit - self.n)
        out = [f"p{self.n + k}" for k in range(max(n, 0))]
        self.n += len(out)
        return out

    def update(self, states, costs):
        self.updates += 1
        assert len(states) == len(costs)


def decay(start, floor, tau):
    return lambda k: floor + (start - floor) * math.exp(-k / tau)


def flat(value):
    return lambda k: value


def tasks_of(n):
    return [SimpleNamespace(index=i, desc=f"task{i}") for i in range(n)]


def run(curves, weights, trials, batch=4, limits=None, **kw):
    n = len(curves)
    kw.setdefault("flops", [1e8] * n)
    kw.setdefault("tags", [""] * n)
    sched = TaskScheduler(tasks_of(n), weights=np.asarray(weights, float), **kw)
    policies = [FakePolicy(None if limits is None else limits[i]) for i in range(n)]
    sched.tune(policies, FakeMeasurer(curves), trials=trials, measure_batch=batch)
    return sched, policies


CURVES = [decay(20e-3, 2e-3, 30), decay(2e-3, 1e-3, 10), decay(1e-3, 0.8e-3, 10)]


def test_warm_up_is_one_round_robin_pass_then_gradient():
    sched, policies = run(CURVES, [[3, 1, 1]], trials=80, eps_greedy=0.0)
    assert sched.choices[:3] == [0, 1, 2]
    assert sched.total_trials == 80 and sum(sched.trials) == 80
    # task 0: heavy (weight 3) and far from its floor -> most of the rounds
    assert sched.rounds[0] > sched.rounds[1] + sched.rounds[2]
    assert all(p.updates == r for p, r in zip(policies, sched.rounds))
    # histories are the best latency after each round, never increasing
    for h in sched.histories:
        assert all(b <= a for a, b in zip(h, h[1:]))


def test_same_seed_same_choices():
    a, _ = run(CURVES, [[3, 1, 1]], trials=120, seed=3)
    b, _ = run(CURVES, [[3, 1, 1]], trials=120, seed=3)
    assert a.choices == b.choices


def test_round_robin_gives_equal_rounds_and_gradient_wins():
    rr, _ = run(CURVES, [[3, 1, 1]], trials=120, strategy="round-robin")
    assert max(rr.rounds) - min(rr.rounds) <= 1
    gd, _ = run(CURVES, [[3, 1, 1]], trials=120, eps_greedy=0.0)
    assert gd.objective_value() < rr.objective_value()
    # ...and its curve is lower at every trial count after the warm-up
    for point_gd, point_rr in zip(gd.curve[3:], rr.curve[3:]):
        assert point_gd["trials"] == point_rr["trials"]
        assert point_gd["objective"] <= point_rr["objective"] + 1e-12


def test_similar_task_guess_pulls_a_slow_twin_forward():
    # tasks 0 and 1 are similar (same tag and flops); 1 is 10x slower per flop than 0 is
    # after warm-up, so the optimistic guess makes 1 the priority despite equal weights
    curves = [flat(1e-3), decay(10e-3, 9e-3, 100), flat(5e-3)]
    sched, _ = run(curves, [[1, 1, 1]], trials=20, tags=["conv", "conv", "dense"], eps_greedy=0.0)
    assert sched.choices[3] == 1
    assert sched.rounds[1] > sched.rounds[2]


def test_per_task_early_stopping_retires_a_stalled_task():
    curves = [flat(5e-3), decay(4e-3, 1e-3, 20)]
    sched, _ = run(curves, [[1, 1]], trials=100, early_stopping_per_task=12, eps_greedy=0.0)
    assert sched.dead[0] and not sched.dead[1]
    assert sched.trials[0] <= 12 + 4      # retired once 12 trials passed without improving
    assert sched.total_trials == 100


def test_a_task_without_candidates_is_retired_and_all_retired_stops():
    sched, _ = run(CURVES, [[1, 1, 1]], trials=100, limits=[8, 4, 4])
    assert all(sched.dead)
    assert sched.total_trials == 16
    assert "retired" in sched.stop_reason


def test_f2_spends_nothing_on_a_network_that_met_its_requirement():
    # network A = task 0 (already 1 ms: meets 2 ms); network B = tasks 1, 2 (misses 3 ms)
    curves = [decay(1e-3, 0.5e-3, 10), decay(4e-3, 1e-3, 20), decay(3e-3, 1e-3, 20)]
    weights = [[1, 0, 0], [0, 1, 1]]
    sched, _ = run(curves, weights, trials=200, objective="requirement", latency_requirements=[2e-3, 3e-3],
                   eps_greedy=0.0)
    after_warm_up = sched.choices[3:]
    assert after_warm_up and 0 not in after_warm_up
    # once B met 3 ms as well, nothing is left to gain: tuning stops before the budget
    assert sched.network_latencies()[1] <= 3e-3
    assert sched.total_trials < 200 and "nothing left to gain" in sched.stop_reason
    # f1 on the same case keeps spending on task 0 too
    f1, _ = run(curves, weights, trials=200, eps_greedy=0.0)
    assert 0 in f1.choices[3:]


def test_f4_and_user_objective_through_the_scheduler():
    curves = [flat(5e-3), decay(4e-3, 1e-3, 20)]
    sched, _ = run(curves, [[1, 1]], trials=60, objective="early_stopping", patience=2, eps_greedy=0.0)
    assert sched.rounds[0] <= 3            # warm-up, then frozen once its latency stalled
    # any callable of the task latencies: here only task 1 counts
    user, _ = run(curves, [[1, 1]], trials=40, objective=lambda g: 10 * g[1], eps_greedy=0.0)
    assert user.choices[2:] == [1] * (len(user.choices) - 2)


def test_restore_counts_past_rounds():
    sched = TaskScheduler(tasks_of(2), flops=[1e8, 1e8], tags=["", ""])
    sched.restore(0, 2e-3, measured=10, measure_batch=4)
    assert sched.rounds == [3, 0] and sched.trials == [10, 0] and sched.histories[0] == [2e-3] * 3
    assert sched.next_task() == 1                      # warm-up still owes task 1 its round


def test_callbacks_print_the_table_and_log_the_curve(tmp_path):
    out = io.StringIO()
    path = tmp_path / "curve.jsonl"
    log = LogEstimatedLatency(str(path))
    sched = TaskScheduler(tasks_of(3), weights=np.array([[3.0, 1, 1]]), flops=[1e8] * 3, tags=[""] * 3,
                          names=["conv_a", "conv_b", "dense_c"], callbacks=[PrintTableInfo(file=out), log])
    sched.tune([FakePolicy() for _ in range(3)], FakeMeasurer(CURVES), trials=40, measure_batch=4)
    text = out.getvalue()
    assert "conv_a" in text and "dense_c" in text and "Estimated latency" in text and "stopped" in text
    split = sched.time_split()
    assert split["search"] == sum(s["search"] for s in sched.seconds) > 0
    assert split["measure"] == sum(s["measure"] for s in sched.seconds) > 0
    assert f"search {split['search']:.0f} s, measuring {split['measure']:.0f} s" in sched.table()
    assert len(log.points) == len(sched.choices) == 10
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [p["trials"] for p in lines] == list(range(4, 44, 4))
    est = [p["latencies"][0] for p in lines[3:]]
    assert all(b <= a for a, b in zip(est, est[1:]))   # the estimate only improves after warm-up
    assert lines[-1]["latencies"][0] == pytest.approx(float(sched.network_latencies()[0]))


def test_a_time_budget_starts_no_round_that_would_end_after_it(monkeypatch):
    import task_scheduler.scheduler as scheduler_module
    clock = [100.0]
    monkeypatch.setattr(scheduler_module.time, "perf_counter", lambda: clock[0])

    class SlowMeasurer(FakeMeasurer):  # every round takes 10 s of the fake clock
        def measure(self, task, states):
            clock[0] += 10.0
            return super().measure(task, states)
    for budget, rounds in ((35, 3), (40, 4), (5, 1)):
        # rounds of 10 s end at 10, 20, 30 s: a fourth would end at 40 s; the first always runs
        sched = TaskScheduler(tasks_of(3), weights=np.ones((1, 3)), flops=[1e8] * 3, tags=[""] * 3)
        sched.tune([FakePolicy() for _ in range(3)], SlowMeasurer(CURVES), trials=1000, measure_batch=4,
                   time_budget_s=budget)
        assert sum(sched.rounds) == rounds and sched.total_trials == 4 * rounds, budget
        assert f"time budget of {budget} s" in sched.stop_reason
    with pytest.raises(ValueError, match="time_budget_s"):
        sched.tune([FakePolicy() for _ in range(3)], FakeMeasurer(CURVES), trials=4, time_budget_s=0)


def test_bad_arguments():
    with pytest.raises(ValueError, match="strategy"):
        TaskScheduler(tasks_of(2), strategy="random", flops=[1, 1], tags=["", ""])
    with pytest.raises(ValueError, match="at least one task"):
        TaskScheduler([])
    sched = TaskScheduler(tasks_of(2), flops=[1, 1], tags=["", ""])
    with pytest.raises(ValueError, match="policies"):
        sched.tune([FakePolicy()], FakeMeasurer(CURVES), trials=4)
