"""Evolutionary search: mutations and crossover give valid programs; the policy is
deterministic for a seed and improves on random sampling; auto_schedule end to end."""
import hashlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ir
import sketch_rules as SR
from autosched import ops
from evolution import (Crossover, SearchParams, SketchPolicy, XGBoostModel, mutate_auto_unroll,
                       mutate_compute_location, mutate_parallel, mutate_tile_size, mutate_tile_size_random_walk)
from tests.evolution.programs import check_computes

MUTATIONS = [mutate_tile_size, mutate_tile_size_random_walk,
             lambda state, rng: mutate_auto_unroll(state, rng, SR.CPU_SPACE.auto_unroll_choices), mutate_parallel,
             mutate_compute_location]
HW = ir.HardwareParams(num_cores=2, vector_lanes=16)


def setup(w):
    task = ir.SearchTask(ir.ComputeDAG(w.tensors), hardware=HW)
    sketches = SR.generate_sketches(task)
    return task, sketches


WORKLOADS = {
    "matmul": ops.workload("matmul", 16, 24, 32),
    "conv2d": ops.workload("conv2d", 1, 6, 6, 4, 8, 3, stride=1, padding=1, layout="NHWC"),
    "softmax": ops.workload("softmax", (4, 24)),
}
SETUPS = {name: setup(w) for name, w in WORKLOADS.items()}
POOLS = {name: SR.sample_programs(t, s, 12, np.random.default_rng(3)) for name, (t, s) in SETUPS.items()}


def check_program(name, state):
    check_computes(WORKLOADS[name], SETUPS[name][0], state)


@settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(sorted(WORKLOADS)), which=st.integers(0, len(MUTATIONS) - 1),
       parent=st.integers(0, 11), seed=st.integers(0, 2 ** 16))
def test_mutations_yield_valid_programs(name, which, parent, seed):
    state = POOLS[name][parent % len(POOLS[name])]
    child = MUTATIONS[which](state, np.random.default_rng(seed))
    if child is None:
        return  # not applicable to this program (e.g. no stage to move)
    assert str(child.replay()) == str(child)
    check_program(name, child)


@settings(max_examples=15, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(sorted(WORKLOADS)), a=st.integers(0, 11), b=st.integers(0, 11), seed=st.integers(0, 99))
def test_crossover_yields_valid_programs(name, a, b, seed):
    task, sketches = SETUPS[name]
    pool = POOLS[name]
    child = Crossover(sketches)(pool[a % len(pool)], pool[b % len(pool)], np.random.default_rng(seed))
    if child is None:
        return  # parents of different sketches, or the merge did not verify
    check_program(name, child)


def test_tile_size_mutation_keeps_the_product():
    state = POOLS["matmul"][0]
    child = mutate_tile_size(state, np.random.default_rng(0))
    changed = [(a, b) for a, b in zip(state.steps, child.steps) if a.record() != b.record()]
    assert len(changed) == 1
    (old, new), = changed
    assert np.prod(old.lengths) * (old.extent // np.prod(old.lengths)) == \
        np.prod(new.lengths) * (new.extent // np.prod(new.lengths)) == old.extent


def synthetic_cost(state) -> float:
    """A deterministic stand-in for measurement: fast when the innermost loop of the main
    stage is vectorised and long, and the outer loop is parallel; plus a hash jitter."""
    names = [s.name for s in state.stages]
    main = state["matmul.local"] if "matmul.local" in names else state["matmul"]
    inner = main.iters[-1]
    vec = inner.extent if inner.annotation == "vectorize" else 1
    par = max([it.extent for s in state.stages for it in s.iters if it.annotation == "parallel"], default=1)
    jitter = int(hashlib.sha1(str(state).encode()).hexdigest()[:6], 16) / 0xFFFFFF
    return 1.0 / (min(vec, 16) * min(par, 8)) * (1 + 0.1 * jitter)


def run_policy(seed, rounds=3, batch=8):
    task, sketches = SETUPS["matmul"]
    policy = SketchPolicy(task, XGBoostModel(num_warmup_sample=8, seed=seed),
                          SearchParams(population=48, generations=2, init_min_population=16), seed=seed,
                          sketches=sketches)
    proposed, best = [], []
    for _ in range(rounds):
        states = policy.next_batch(batch)
        costs = [synthetic_cost(s) for s in states]
        policy.update(states, costs)
        proposed.append([str(s) for s in states])
        best.append(min(c for c, _, _ in policy.measured))
    return proposed, best


def test_policy_is_deterministic_for_a_seed():
    a, _ = run_policy(seed=5)
    b, _ = run_policy(seed=5)
    assert a == b
    c, _ = run_policy(seed=6)
    assert c != a


def test_policy_never_proposes_a_measured_program_and_improves():
    # seed 0: a first batch far from the best of the space (seed 3's is already the best)
    proposed, best = run_policy(seed=0, rounds=4)
    flat = [p for batch in proposed for p in batch]
    assert len(flat) == len(set(flat))
    assert best[-1] < best[0]


class Untrained(XGBoostModel):
    """A model in its warm-up that fails if the policy asks it to score anything."""

    def predict(self, task, states):
        raise AssertionError("an untrained model was asked to rank programs")


def test_policy_samples_at_random_until_the_model_can_rank():
    task, sketches = SETUPS["matmul"]
    model = Untrained(num_warmup_sample=12, seed=0)
    policy = SketchPolicy(task, model, SearchParams(population=48, generations=2), seed=0, sketches=sketches)
    assert not model.can_rank
    first = policy.next_batch(8)
    assert len(first) == 8 and len({str(s) for s in first}) == 8 and policy.stats["evolved"] == 0
    policy.update(first, [synthetic_cost(s) for s in first])
    second = policy.next_batch(8)  # 8 programs seen, warm-up is 12: still random, none repeated
    assert len(second) == 8 and not {str(s) for s in second} & {str(s) for s in first}
    policy.update(second, [synthetic_cost(s) for s in second])
    assert model.can_rank
    with pytest.raises(AssertionError, match="asked to rank"):  # trained: now the search uses it
        policy.next_batch(8)


def island_batches(executor, seed, rounds=2):
    task, sketches = SETUPS["matmul"]
    policy = SketchPolicy(task, XGBoostModel(num_warmup_sample=8, seed=seed),
                          SearchParams(population=48, generations=2, init_min_population=16, islands=2), seed=seed,
                          sketches=sketches, executor=executor)
    out = []
    for _ in range(rounds):
        states = policy.next_batch(8)
        policy.update(states, [synthetic_cost(s) for s in states])
        out.append([str(s) for s in states])
    return out, policy


def test_islands_in_worker_processes_are_deterministic_and_propose_valid_unmeasured_programs():
    from autosched import WorkerPool
    with WorkerPool(2) as pool:
        a, policy = island_batches(pool, seed=4, rounds=3)
        b, _ = island_batches(pool, seed=4, rounds=3)
    assert a == b
    flat = [p for batch in a for p in batch]
    assert len(flat) == len(set(flat)) == 24
    for _, _, state in policy.measured[-8:]:  # the islands' programs (the model was trained by then)
        check_program("matmul", state)


class BrokenExecutor:
    def submit(self, fn, *args, **kwargs):
        raise RuntimeError("no workers here")


def test_a_failing_island_executor_falls_back_to_evolving_here():
    with pytest.warns(RuntimeWarning, match="evolving in parallel processes failed"):
        a, _ = island_batches(BrokenExecutor(), seed=4)
    assert [len(batch) for batch in a] == [8, 8]


@pytest.mark.parametrize("name", ["matmul", "conv2d"])
def test_short_tuning_improves_and_matches_numpy(name, tmp_path):
    import autosched
    w = {"matmul": ops.workload("matmul", 48, 48, 48),
         "conv2d": ops.workload("conv2d", 1, 10, 10, 8, 16, 3, stride=1, padding=1, layout="NHWC")}[name]
    task = ir.SearchTask(ir.ComputeDAG(w.tensors), hardware=HW, desc=name)
    result = autosched.auto_schedule(task, trials=24, measure_batch=8, seed=0, log_file=str(tmp_path / "log.json"),
                                     cost_model=XGBoostModel(num_warmup_sample=8, seed=0),
                                     search_params=SearchParams(population=64, generations=2), verbose=0,
                                     retime_best=0)  # (the best trial: what the search found, compared below)
    assert result.trials == 24 and result.kernel is not None
    first_batch_best = result.history[0][1]
    assert result.gflops >= first_batch_best > 0
    assert [h[0] for h in result.history] == [8, 16, 24]
    inputs = w.random_inputs(np.random.default_rng(0))
    args = [result.kernel.pack(t.name, a) if t.name in result.kernel.layouts else a
            for t, a in zip(task.dag.inputs, inputs)]
    outputs = w.output_buffers()
    result.kernel(*args, *outputs)
    np.testing.assert_allclose(outputs[0], w.reference(inputs)[0], rtol=1e-4, atol=1e-4)
    # resuming from the log measures only new programs
    again = autosched.auto_schedule(task, trials=8, measure_batch=8, seed=1, log_file=str(tmp_path / "log.json"),
                                    cost_model=XGBoostModel(num_warmup_sample=8, seed=1),
                                    search_params=SearchParams(population=64, generations=2), verbose=0,
                                    retime_best=0)
    assert again.gflops >= result.gflops * 0.999
    lines = (tmp_path / "log.json").read_text().splitlines()
    programs = [l for l in lines if l.strip() and not l.startswith("#")]
    assert len(programs) == 32


def test_a_batch_takes_at_most_two_programs_the_model_scores_exactly_alike():
    from evolution.search_policy import pick_distinguishable
    task, sketches = SETUPS["matmul"]
    states = SR.sample_programs(task, sketches, 12, np.random.default_rng(0))
    scored = [(1.0, s) for s in states[:6]] + [(0.5, s) for s in states[6:9]] + [(0.2, states[9])]
    picked = list(pick_distinguishable(scored, 4).values())
    assert picked == [states[0], states[1], states[6], states[7]]
    # twins only where nothing else is left: the batch is still full
    picked = list(pick_distinguishable(scored, 8).values())
    assert picked == [states[0], states[1], states[6], states[7], states[9], states[2], states[3], states[4]]


class HalfBlind(XGBoostModel):
    """A trained-looking model that cannot tell apart one program in eight (they all score
    1, above all others) and ranks every other program below them, each differently."""

    def predict(self, task, states):
        def score(s):
            h = int(hashlib.sha1(s.key.encode()).hexdigest()[:6], 16)
            return 1.0 if h % 8 == 0 else h / 0xFFFFFF * 0.5
        return np.array([score(s) for s in states])

    @property
    def can_rank(self):
        return True


def test_a_batch_is_not_filled_with_programs_the_model_cannot_tell_apart():
    task, sketches = SETUPS["matmul"]
    # seed 1: seed 0's evolution returns too few candidates the model tells apart to fill a probe
    policy = SketchPolicy(task, HalfBlind(seed=0), SearchParams(population=48, generations=1, init_min_population=32),
                          seed=1, sketches=sketches)
    probe = policy.next_batch(8)  # (the first round of a task the model ranks unmeasured: half a batch)
    assert len(probe) == 4 and sum(policy.model.predict(task, probe) == 1.0) == 2
    policy.update(probe, [synthetic_cost(s) for s in probe])
    scores = policy.model.predict(task, policy.next_batch(8))
    assert len(scores) == 8 and sum(scores == 1.0) == 2


def test_the_first_round_of_a_task_the_model_ranks_unmeasured_is_a_small_probe():
    from evolution.search_policy import PROBE_BATCH
    task, sketches = SETUPS["matmul"]
    policy = SketchPolicy(task, HalfBlind(seed=0), SearchParams(population=48, generations=1, init_min_population=32),
                          seed=0, sketches=sketches)
    first = policy.next_batch(4 * PROBE_BATCH)
    assert len(first) == PROBE_BATCH  # then the model learns from them before it picks the rest
    policy.update(first, [synthetic_cost(s) for s in first])
    assert len(policy.next_batch(4 * PROBE_BATCH)) == 4 * PROBE_BATCH


def test_best_of_ranks_offered_programs_by_the_model_never_a_measured_one():
    task, sketches = SETUPS["matmul"]
    model = HalfBlind(seed=0)
    policy = SketchPolicy(task, model, SearchParams(population=48, generations=1), seed=0, sketches=sketches)
    offered = SR.sample_programs(task, sketches, 40, np.random.default_rng(3))
    offered = list({s.key: s for s in offered}.values())
    scores = model.predict(task, offered)
    probe = policy.best_of(offered + offered[:3], 8)   # unmeasured: half of 8, twins of a score 2 at most
    ranked = sorted(range(len(offered)), key=lambda i: -scores[i])
    assert len(probe) == 4 and len({s.key for s in probe}) == 4
    tied = [offered[i] for i in ranked if scores[i] == 1.0]   # (the others' scores all differ)
    below = [offered[i] for i in ranked if scores[i] < 1.0]
    assert [s.key for s in probe] == [s.key for s in (tied[:2] + below)[:4]]
    policy.update(probe, [synthetic_cost(s) for s in probe])
    later = policy.best_of(offered, 8)
    assert len(later) == 8 and not {s.key for s in later} & {s.key for s in probe}
    assert policy.best_of(probe, 4) == []


@pytest.mark.parametrize("seed", range(6))
def test_draw_picks_what_rng_choice_picks_from_the_same_stream(seed):
    from evolution.evolve import Draw
    shape = np.random.default_rng(seed)
    n = int(shape.integers(1, 3000))
    p = shape.random(n) ** 3
    p[::5] = 0.0  # unfit programs are never drawn
    p = p / p.sum() if seed else np.full(n, 1.0 / n)
    ours, numpy_s = np.random.default_rng(seed), np.random.default_rng(seed)
    draw = Draw(p)
    picks = [draw(ours) for _ in range(300)]
    assert picks == [int(numpy_s.choice(n, p=p)) for _ in range(300)]
    assert ours.random() == numpy_s.random()  # one uniform number a draw, as rng.choice
    assert all(p[i] > 0 for i in picks)


@pytest.mark.parametrize("weights", [None, {"tile_size": 0.5, "auto_unroll": 0.25, "parallel": 0.25},
                                     {"auto_unroll": 1.0}])
def test_draw_mutation_draws_what_rng_choice_draws(weights):
    from evolution.mutation import cpu_mutations, draw_mutation
    mutations = cpu_mutations()
    drawn = [m for m in mutations if weights is None or m.name in weights]
    p = np.array([m.weight if weights is None else weights[m.name] for m in drawn], dtype=float)
    ours, numpy_s = np.random.default_rng(3), np.random.default_rng(3)
    picks = [draw_mutation(ours, mutations, weights) for _ in range(200)]
    assert picks == [drawn[int(numpy_s.choice(len(drawn), p=p / p.sum()))] for _ in range(200)]
    assert len({m.name for m in picks}) == len(drawn)
    with pytest.raises(ValueError, match="name none"):
        draw_mutation(ours, mutations, {"no_such_mutation": 1.0})
