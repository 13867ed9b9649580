"""A task's cheap first round (its zero-trial program and the best of its search's runners-up,
or a short search's picks) and tasks
of one operator family seeding each other's search, driven by the TaskScheduler with a
fake measurer; ``tune_networks`` end to end with both."""
import io
import math
from types import SimpleNamespace

import numpy as np
import pytest

import ir
from autosched import ops
from evolution import RandomModel, SearchParams, SketchPolicy
from task_scheduler import FirstRound, PrintTableInfo, TaskScheduler, family_seeds, similarity_tag

HW = ir.HardwareParams(num_cores=2, vector_lanes=16)


class Program:
    def __init__(self, key):
        self.key = key


class RecordingPolicy:
    """Proposes programs "<name>-<k>"; records the arguments of every call."""

    def __init__(self, name, limit=None):
        self.name, self.limit, self.calls, self.measured_keys, self.n = name, limit, [], set(), 0

    def next_batch(self, n, params=None):
        self.calls.append((n, params))
        if self.limit is not None:
            n = min(n, self.limit - self.n)
        out = [Program(f"{self.name}-{self.n + k}") for k in range(max(n, 0))]
        self.n += len(out)
        return out

    def update(self, states, costs):
        self.measured_keys.update(s.key for s in states)


class CostMeasurer:
    """Every program costs ``cost(task, k)`` for the k-th measured of its task."""

    def __init__(self, cost=lambda task, k: 1e-3 / (k + 1)):
        self.cost, self.count, self.best, self.measured = cost, {}, {}, []

    def measure(self, task, states):
        out = []
        for s in states:
            k = self.count.get(id(task), 0)
            self.count[id(task)] = k + 1
            c = self.cost(task, k)
            self.best[id(task)] = min(self.best.get(id(task), math.inf), c)
            self.measured.append((task, s.key))
            out.append(SimpleNamespace(mean_cost=c, ok=True))
        return out

    def best_cost(self, task):
        return self.best.get(id(task), 1e10)


def fake_tasks(n):
    return [SimpleNamespace(desc=f"task{i}") for i in range(n)]


def test_a_task_is_prepared_for_measuring_once_before_its_first_search():
    """A measurer with ``prepare`` (the runner's reference output) is told of each task once,
    before its first round's search runs, so that the two overlap."""
    events = []

    class Logged(RecordingPolicy):
        def next_batch(self, n, params=None):
            events.append(("search", self.name))
            return super().next_batch(n, params)

    class Preparing(CostMeasurer):
        def prepare(self, task):
            events.append(("prepare", task.desc))

    tasks = fake_tasks(2)
    policies = [Logged(t.desc) for t in tasks]
    sched = TaskScheduler(tasks, flops=[1e6] * 2, tags=[""] * 2, first_round=FirstRound(batch=2),
                          strategy="round-robin")
    sched.tune(policies, Preparing(), trials=12, measure_batch=2)
    assert events[:4] == [("prepare", "task0"), ("search", "task0"), ("prepare", "task1"), ("search", "task1")]
    assert [e for e in events if e[0] == "prepare"] == [("prepare", "task0"), ("prepare", "task1")]
    assert len(events) > 6   # later rounds search without preparing again


def test_first_round_measures_the_zero_trial_program_and_a_short_search():
    short = SearchParams(population=8, generations=1)
    zero = {}
    first = FirstRound(short, batch=6, zero_trial=lambda task: zero.setdefault(task.desc, Program(f"zt-{task.desc}")))
    tasks = fake_tasks(3)
    policies = [RecordingPolicy(f"t{i}") for i in range(3)]
    measurer = CostMeasurer()
    out = io.StringIO()
    sched = TaskScheduler(tasks, flops=[1e6] * 3, tags=[""] * 3, first_round=first, strategy="round-robin",
                          callbacks=[PrintTableInfo(file=out, progress=False)])
    sched.tune(policies, measurer, trials=3 * 7 + 3 * 10, measure_batch=10)
    assert "warm-up pass done" in out.getvalue() and "3 of 3 tasks have a measured program" in out.getvalue()
    for i, p in enumerate(policies):
        assert p.calls[0] == (6, short)                 # the first round: the short search, its batch
        assert all(params is None and n == 10 for n, params in p.calls[1:])   # then full rounds
        keys = [k for t, k in measurer.measured if t is tasks[i]]
        assert keys[0] == f"zt-task{i}"                 # measured first
        assert keys[1:7] == [f"t{i}-{k}" for k in range(6)]
        assert sched.trials[i] == 7 + 10
    assert all(t is not None for t in sched.first_measured)
    assert sched.all_measured_at() == max(sched.first_measured)
    assert "First (s)" in sched.table()


class RankingPolicy(RecordingPolicy):
    """A RecordingPolicy that ranks offered programs as ``best_of`` does: never measured,
    the probe rule's half, here by key (its "model")."""

    def __init__(self, name):
        super().__init__(name)
        self.offered = []

    def best_of(self, states, n):
        self.offered.append([s.key for s in states])
        fresh = [s for s in states if s.key not in self.measured_keys]
        return sorted(fresh, key=lambda s: s.key)[:n // 2]


def test_first_round_ranks_the_zero_trial_searchs_runners_up_instead_of_searching():
    runners = {f"task{i}": [Program(f"ru{i}-{k}") for k in (3, 1, 2)] for i in range(2)}
    first = FirstRound(SearchParams(population=8, generations=1), batch=4,
                       zero_trial=lambda task: Program(f"zt-{task.desc}"),
                       runners_up=lambda task: runners[task.desc])
    tasks = fake_tasks(2)
    policies = [RankingPolicy(f"t{i}") for i in range(2)]
    measurer = CostMeasurer()
    sched = TaskScheduler(tasks, flops=[1e6] * 2, tags=[""] * 2, first_round=first, strategy="round-robin")
    sched.tune(policies, measurer, trials=2 * 3 + 2 * 5, measure_batch=5)
    for i, p in enumerate(policies):
        keys = [k for t, k in measurer.measured if t is tasks[i]]
        assert keys[:3] == [f"zt-task{i}", f"ru{i}-1", f"ru{i}-2"]   # the pick, then the best 2 of 4 asked
        assert p.offered[0] == [f"ru{i}-3", f"ru{i}-1", f"ru{i}-2"]
        assert all(params is None and n == 5 for n, params in p.calls)   # no short search: full rounds only


def test_first_round_searches_when_the_runners_up_offer_nothing_new():
    short = SearchParams(population=8, generations=1)
    for offered in ([], [Program("seen")]):
        policy = RankingPolicy("p")
        policy.measured_keys.add("seen")
        first = FirstRound(short, 4, lambda task: Program("zt"), runners_up=lambda task: offered)
        sched = TaskScheduler(fake_tasks(1), flops=[1e6], tags=[""], first_round=first)
        measurer = CostMeasurer()
        sched.tune([policy], measurer, trials=5, measure_batch=8)
        assert policy.calls == [(4, short)]
        assert [k for _, k in measurer.measured] == ["zt", "p-0", "p-1", "p-2", "p-3"]


def test_first_round_searches_when_asking_for_the_runners_up_fails():
    def broken(task):
        raise OSError("the records database could not be written")

    short = SearchParams(population=8, generations=1)
    policy = RankingPolicy("p")
    first = FirstRound(short, 4, broken, runners_up=broken)
    sched = TaskScheduler(fake_tasks(1), flops=[1e6], tags=[""], first_round=first)
    measurer = CostMeasurer()
    with pytest.warns(RuntimeWarning) as caught:
        sched.tune([policy], measurer, trials=4, measure_batch=8)
    said = [str(w.message) for w in caught]
    assert any("no runners-up" in m and "could not be written" in m for m in said)
    assert any("no zero-trial program" in m for m in said)
    assert policy.calls == [(4, short)] and [k for _, k in measurer.measured] == ["p-0", "p-1", "p-2", "p-3"]


def test_first_round_without_a_zero_trial_program_or_with_a_failing_one():
    def broken(task):
        raise ValueError("no program")

    for zero_trial in (None, broken):
        policy = RecordingPolicy("p")
        sched = TaskScheduler(fake_tasks(1), flops=[1e6], tags=[""], first_round=FirstRound(None, 4, zero_trial))
        with pytest.warns(RuntimeWarning, match="no zero-trial program") if zero_trial else _nothing():
            sched.tune([policy], CostMeasurer(), trials=4, measure_batch=8)
        assert policy.calls == [(4, None)] and sched.trials == [4]


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_a_task_whose_policy_proposes_nothing_is_retired_at_its_first_round():
    zero_calls = []
    first = FirstRound(None, 4, lambda task: zero_calls.append(task) or Program("zt"))
    sched = TaskScheduler(fake_tasks(2), flops=[1e6] * 2, tags=[""] * 2, first_round=first)
    sched.tune([RecordingPolicy("a", limit=0), RecordingPolicy("b")], CostMeasurer(), trials=10, measure_batch=4)
    assert sched.dead[0] and not sched.dead[1]
    assert len(zero_calls) == 1                          # asked for the live task only
    assert sched.first_measured[0] is None and sched.all_measured_at() is not None


def test_first_round_arguments_are_checked():
    with pytest.raises(ValueError, match="batch and train_every must be >= 1"):
        FirstRound(None, 0)
    with pytest.raises(ValueError, match="transfer_seeds must be >= 0"):
        TaskScheduler(fake_tasks(1), flops=[1.0], tags=[""], transfer_seeds=-1)


def test_family_seeds_take_the_nearest_tasks_of_the_same_tag_first():
    class Measured:
        def __init__(self, name):
            self.name = name

        def best_measured(self, n):
            return [f"{self.name}{k}" for k in range(n)]

    tags = ["conv", "conv", "dense", "conv", ""]
    flops = [1e6, 1e9, 1e6, 2e6, 1e6]
    policies = [Measured(c) for c in "abcde"]
    assert family_seeds(0, tags, flops, policies, 2, 16) == ["d0", "d1", "b0", "b1"]
    assert family_seeds(0, tags, flops, policies, 2, 3) == ["d0", "d1", "b0"]
    assert family_seeds(2, tags, flops, policies, 2, 16) == []   # alone in its family
    assert family_seeds(4, tags, flops, policies, 2, 16) == []   # no tag: no family


def dense_task(batch, n_in, n_out):
    w = ops.workload("dense", batch, n_in, n_out, bias=True)
    return ir.SearchTask(ir.ComputeDAG(w.tensors), hardware=HW, desc=f"dense{batch}x{n_in}x{n_out}")


def test_tasks_of_one_family_seed_each_other_with_adapted_programs():
    tasks = [dense_task(4, 24, 16), dense_task(6, 40, 36), ir.SearchTask(
        ir.ComputeDAG(ops.workload("softmax", (4, 24)).tensors), hardware=HW, desc="softmax")]
    tags = [similarity_tag(t.dag) for t in tasks]
    assert tags[0] == tags[1] and tags[0] != tags[2]
    params = SearchParams(population=16, generations=1, init_min_population=8)
    policies = [SketchPolicy(t, RandomModel(seed=i), params, seed=i) for i, t in enumerate(tasks)]
    sched = TaskScheduler(tasks, transfer_seeds=2, strategy="round-robin")
    sched.tune(policies, CostMeasurer(), trials=3 * 4, measure_batch=4)
    # task 1's first round came after task 0's: it was offered task 0's best two, adapted
    offered = sched._offered[1]
    assert {s.key for s in policies[0].best_measured(2)} <= offered or len(offered) >= 2
    seeded = list(policies[1].extra_initial.values()) + [s for _, _, s in policies[1].measured]
    assert seeded and all(s.dag is tasks[1].dag for s in seeded)
    assert not sched._offered[2]                         # softmax has no family here
    for s in policies[1].extra_initial.values():
        assert ir.State.from_steps(tasks[1].dag, s.steps).key == s.key


def test_tune_networks_first_round_measures_each_tasks_zero_trial_program_first(tmp_path):
    import autosched
    from autosched import graph as G
    from autosched.history.records import RecordToFile
    from autosched.history.zero_trial import ZeroTrial
    from autosched.networks import FIRST_ROUND_BATCH

    from autosched.history.base_model import SHIPPED_MODEL

    zero = ZeroTrial.from_spec(SHIPPED_MODEL, seed=0, records_db=None, hardware=HW)   # the library of HW, as the tuning
    b = G.GraphBuilder("two_convs", seed=0)
    x = b.input((1, 6, 6, 4))
    y = b.conv2d(b.relu(b.conv2d(x, 8, 3, padding=1)), 12, 1)
    log = str(tmp_path / "log.jsonl")
    builder = autosched.WorkerPool(2, timeout=15, name="test-builder")
    runner = autosched.WorkerPool(1, timeout=10, name="test-runner")
    try:
        res = autosched.tune_networks(b.graph([y]), trials=10, measure_batch=8, seed=0, log_file=log,
                                      records_db=None, base_model=SHIPPED_MODEL, hardware=HW, verbose=0, retime_best=0,
                                      search_params=SearchParams(population=32, generations=1, init_min_population=8),
                                      builder=autosched.LocalBuilder(executor=builder),
                                      runner=autosched.LocalRunner(min_repeat_ms=2, repeat=3, executor=runner))
    finally:
        builder.shutdown(wait=True, cancel_futures=True)
        runner.shutdown(wait=True, cancel_futures=True)
    sched = res.scheduler
    n = len(res.tasks)
    assert n == 2 and sorted(sched.choices[:n]) == list(range(n))
    records = RecordToFile(log).read()
    first_of = {}
    for rec in records:
        first_of.setdefault(rec.workload_key, rec)
    for task in res.tasks:
        expected = zero.program(task.dag, task.target)   # (ranked with the default schedule)
        assert first_of[task.workload_key].state(task.dag).key == expected.key
    # each first round measured the zero-trial program and at most half the short search's
    # batch (the probe), not the measure batch of 8
    first_rounds = np.diff([0] + [p["trials"] for p in sched.curve[:n]])
    assert all(2 <= t <= 1 + FIRST_ROUND_BATCH // 2 for t in first_rounds), first_rounds
    assert all(t is not None for t in sched.first_measured)


def test_a_time_budget_judges_full_rounds_by_full_rounds_not_by_the_cheap_first_ones(monkeypatch):
    import task_scheduler.scheduler as scheduler_module
    clock = [100.0]
    monkeypatch.setattr(scheduler_module.time, "perf_counter", lambda: clock[0])

    class Clocked(CostMeasurer):  # a first round (4 programs) takes 1 s, a full one (8) 10 s
        def measure(self, task, states):
            clock[0] += 1.0 if len(states) <= 4 else 10.0
            return super().measure(task, states)

    sched = TaskScheduler(fake_tasks(3), flops=[1e6] * 3, tags=[""] * 3, first_round=FirstRound(None, 4),
                          strategy="round-robin")
    sched.tune([RecordingPolicy(f"t{i}") for i in range(3)], Clocked(), trials=1000, measure_batch=8,
               time_budget_s=30)
    # first rounds end at 1, 2, 3 s, full ones at 13 and 23 s: a third would end at 33 s (by the
    # mean of all rounds, 4.6 s, it would have been started)
    assert sum(sched.rounds) == 5 and clock[0] - 100.0 == 23.0
    assert "time budget of 30 s" in sched.stop_reason


def test_first_rounds_train_the_model_every_few_tasks_and_before_any_full_round():
    class Model:
        def __init__(self):
            self.trainings = []

        def update(self, records):
            self.trainings.append(sorted({r[0] for r in records}))

    class Learning(RecordingPolicy):
        def __init__(self, name, model):
            super().__init__(name)
            self.model = model

        def remember(self, states, costs):
            self.measured_keys.update(s.key for s in states)
            return [(self.name, s, c) for s, c in zip(states, costs)]

        def update(self, states, costs):
            self.model.update(self.remember(states, costs))

    model = Model()
    policies = [Learning(f"t{i}", model) for i in range(5)]
    sched = TaskScheduler(fake_tasks(5), flops=[1e6] * 5, tags=[""] * 5, strategy="round-robin",
                          first_round=FirstRound(None, 2, train_every=2))
    sched.tune(policies, CostMeasurer(), trials=5 * 2 + 4, measure_batch=4)
    # first rounds of t0, t1 | t2, t3 | t4 (before the first full round) | the full round of t0
    assert model.trainings == [["t0", "t1"], ["t2", "t3"], ["t4"], ["t0"]]
