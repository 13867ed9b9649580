"""Measurement: isolated builders and runners, verification, adaptive timing, the measurer.

Programs that crash, hang or compute a wrong answer are injected with a ``MeasureInput``
hook (``measure_faults.Fault``); each must give its error record while the
next good program is still measured (and verified) correctly.
"""
import collections
import dataclasses
import math
import os
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import ir
from ir.steps import Step
from autosched import (LocalBuilder, LocalRunner, MeasureErrorNo, MeasureInput, MeasureResult, ProgramMeasurer,
                       RecordToFile, TooManyMeasureErrors, WorkerCrashed, WorkerPool, WorkerTimeout, MAX_COST)
from autosched.measure import verify
from tests.autosched.measure_faults import Fault
from autosched.measure import MeasurementLost
from tests.autosched.stand_ins import StandInBuilder, StandInRunner

E = MeasureErrorNo


def matmul_dag(n=32, constant_b=False):
    a = ir.placeholder((n, n), name="A")
    b = ir.placeholder((n, n), name="B", constant=constant_b)
    k = ir.reduce_axis(n, name="k")
    c = ir.compute((n, n), lambda i, j: ir.sum(a[i, k] * b[k, j], axis=k), name="C")
    return ir.ComputeDAG([a, b, c])


@pytest.fixture(scope="module")
def task():
    return ir.SearchTask(matmul_dag(), layout_rewrite=False, desc="matmul-32")


@pytest.fixture(scope="module")
def states(task):
    s0 = task.dag.init_state()
    return [s0.split("C", "i", [f]).split("C", "j", [g]) for f, g in [(2, 4), (4, 8), (8, 2), (4, 4), (2, 16)]]


@pytest.fixture(scope="module")
def builder():
    b = LocalBuilder(timeout=3, n_parallel=2)
    yield b
    b.close()


@pytest.fixture(scope="module")
def runner():
    r = LocalRunner(timeout=3, min_repeat_ms=2, repeat=5, slow_single_repeat=None,
                    one_repeat_over_best=None)  # every good one: >= 3 repeats
    yield r
    r.close()


def measure(builder, runner, inputs):
    builds = builder.build(inputs)
    return runner.run(inputs, builds)


def assert_good(res):
    assert res.error_no == E.NO_ERROR, res.error_msg
    assert res.verified
    assert len(res.costs) == res.repeats >= 3
    assert all(0 < c < 1e-2 for c in res.costs)  # a 32^3 matmul: microseconds, not 1e10
    assert res.build_time > 0 and res.run_time > 0 and res.kernel_time > 0


# the worker pool -----------------------------------------------------------------------

def test_worker_pool_results_crashes_timeouts_and_replacement():
    with WorkerPool(max_workers=1, timeout=5) as pool:
        pid = pool.submit(os.getpid).result()
        assert pid != os.getpid()
        assert pool.submit(math.sqrt, 16.0).result() == 4.0
        with pytest.raises(ValueError):  # a task's own exception comes back as itself
            pool.submit(math.sqrt, -1.0).result()
        assert pool.submit(os.getpid).result() == pid  # ...and the worker lives on
        with pytest.raises(WorkerCrashed, match="exited with status 3"):
            pool.submit(os._exit, 3).result()
        with pytest.raises(WorkerCrashed, match="SIGABRT"):
            pool.submit(os.abort).result()
        t0 = time.monotonic()
        with pytest.raises(WorkerTimeout, match="0.5 s"):
            pool.submit_timed(0.5, time.sleep, 30).result()
        assert time.monotonic() - t0 < 20  # killed at its timeout, long before the 30 s sleep ends
        new_pid = pool.submit(os.getpid).result()
        assert new_pid not in (pid, os.getpid())
        assert pool.stats["crashed"] == 2 and pool.stats["timed_out"] == 1 and pool.stats["started"] == 4
    assert pool.n_workers == 0


def test_worker_pool_runs_in_parallel_and_rejects_unpicklable():
    with WorkerPool(max_workers=2, timeout=10) as pool:
        futures = [pool.submit(time.sleep, 0.5) for _ in range(2)]
        pool.submit(os.getpid).result()  # both workers up
        t0 = time.monotonic()
        futures = [pool.submit(time.sleep, 0.5) for _ in range(2)]
        [f.result() for f in futures]
        assert time.monotonic() - t0 < 0.95
        with pytest.raises(TypeError, match="cannot send"):
            pool.submit(lambda: 1)
    with WorkerPool(max_workers=1) as untimed:  # no timeout: waits as long as the task takes
        assert untimed.submit(time.sleep, 0.2).result() is None and untimed.submit(os.getpid).result() > 0


# builder and runner --------------------------------------------------------------------

def test_good_programs_are_verified_and_timed_in_order(task, states, builder, runner):
    inputs = [MeasureInput(task, s) for s in states[:3]]
    builds = builder.build(inputs)
    assert all(b.error_no == 0 and b.object and b.time_cost > 0 for b in builds)
    seen = []
    results = runner.run(inputs, builds, on_result=lambda i, r: seen.append(i))
    assert sorted(seen) == [0, 1, 2]
    for res in results:
        assert_good(res)
        assert res.all_cost == pytest.approx(res.build_time + res.run_time)


def test_segfault_hang_and_wrong_answer_are_recorded_and_the_runner_goes_on(task, states, builder, runner):
    good = [MeasureInput(task, s) for s in states[:4]]
    inputs = [good[0],
              MeasureInput(task, states[0], Fault("run:segfault")), good[1],
              MeasureInput(task, states[0], Fault("run:hang")), good[2],
              MeasureInput(task, states[0], Fault("run:wrong")), good[3],
              MeasureInput(task, states[0], Fault("run:error"))]
    stats = dict(runner.executor.stats)
    t0 = time.monotonic()
    results = measure(builder, runner, inputs)
    assert time.monotonic() - t0 < 25
    codes = [r.error_no for r in results]
    assert codes == [E.NO_ERROR, E.RUNTIME_DEVICE, E.NO_ERROR, E.RUN_TIMEOUT, E.NO_ERROR, E.WRONG_ANSWER,
                     E.NO_ERROR, E.RUNTIME_DEVICE]
    assert "SIGSEGV" in results[1].error_msg and "Segmentation fault" in results[1].error_msg
    assert "timeout of 3 s" in results[3].error_msg
    assert "output 'C' differs from the reference" in results[5].error_msg and "1 of 1024" in results[5].error_msg
    assert "injected runtime error" in results[7].error_msg
    for bad in (results[1], results[3], results[5], results[7]):
        assert bad.costs == (MAX_COST,) and bad.mean_cost == MAX_COST and not bad.verified
    for res in results[0::2]:  # every good program after a fault: measured, verified, plausible
        assert_good(res)
    fastest, slowest = min(r.mean_cost for r in results[0::2]), max(r.mean_cost for r in results[0::2])
    assert slowest < 50 * fastest
    assert runner.executor.stats["crashed"] == stats["crashed"] + 1
    assert runner.executor.stats["timed_out"] == stats["timed_out"] + 1


def test_build_crash_hang_error_and_invalid_program(task, states, builder, runner):
    invalid = dataclasses.replace(states[1], steps=states[1].steps + (Step.from_record(["SP", 9, 0, [4], True]),))
    inputs = [MeasureInput(task, states[0], Fault("build:segfault")),
              MeasureInput(task, states[0], Fault("build:hang")),
              MeasureInput(task, states[0], Fault("build:error")),
              MeasureInput(task, invalid),
              MeasureInput(task, states[4])]
    results = measure(builder, runner, inputs)
    assert [r.error_no for r in results] == [E.COMPILE_HOST, E.BUILD_TIMEOUT, E.COMPILE_HOST,
                                             E.INSTANTIATION_ERROR, E.NO_ERROR]
    assert "SIGSEGV" in results[0].error_msg
    assert "timeout of 3 s" in results[1].error_msg
    assert "injected build error" in results[2].error_msg
    assert "do not replay" in results[3].error_msg and "no stage 9" in results[3].error_msg
    assert_good(results[4])


def test_a_program_needing_more_memory_than_its_worker_may_have_is_a_runtime_error(task, states, builder):
    """Workers run under a memory limit: a program that needs more fails alone (the
    machine keeps its memory) and the next program is measured as usual."""
    inputs = [MeasureInput(task, states[0], Fault(f"run:allocate:{2 << 30}")), MeasureInput(task, states[1])]
    with LocalRunner(timeout=10, min_repeat_ms=1, repeat=3, memory_limit=768 << 20) as limited:
        greedy, good = limited.run(inputs, builder.build(inputs))
    assert greedy.error_no == E.RUNTIME_DEVICE and "MemoryError" in greedy.error_msg
    assert_good(good)
    with pytest.raises(ValueError, match="memory_limit"):
        WorkerPool(1, memory_limit=1 << 20)


def test_adaptive_timing_stops_early_and_counts_saved_repeats(task, states, builder):
    inputs = [MeasureInput(task, states[1])]
    builds = builder.build(inputs)
    # the CV of 3 samples is at most sqrt(3): a threshold of 2 always stops at min_repeats=3
    with LocalRunner(timeout=5, min_repeat_ms=2, repeat=8, cv_threshold=2.0) as adaptive:
        (res,) = adaptive.run(inputs, builds)
    assert res.ok and res.repeats == 3 and res.saved_repeats == 5 and len(res.costs) == 3
    with LocalRunner(timeout=5, min_repeat_ms=2, repeat=8, adaptive=False) as fixed:
        (res,) = fixed.run(inputs, builds)
    assert res.ok and res.repeats == 8 and res.saved_repeats == 0 and len(res.costs) == 8
    assert res.number >= 1 and res.kernel_time >= 8 * res.number * min(res.costs)


def test_slow_programs_are_timed_in_few_calls(task, states, builder):
    inputs = [MeasureInput(task, states[1])]
    builds = builder.build(inputs)
    # min_repeat_ms below one call: the first probe (one call) is the first repeat
    with LocalRunner(timeout=5, min_repeat_ms=1e-4, repeat=6, adaptive=False, max_timing_s=0) as budgeted:
        (res,) = budgeted.run(inputs, builds)
    assert res.ok and res.number == 1 and res.repeats == 1 and len(res.costs) == 1
    with LocalRunner(timeout=5, min_repeat_ms=1e-4, repeat=6, adaptive=False, max_timing_s=100) as unbounded:
        (res,) = unbounded.run(inputs, builds)
    assert res.ok and res.number == 1 and res.repeats == 6
    with pytest.raises(ValueError, match="max_timing_s"):
        LocalRunner(max_timing_s=-1)


@pytest.fixture
def run_here(task, states, builder):
    """Jobs of one program run here, in this process, so that the worker's memory of the
    fastest program of its task (``jobs._fastest``, restored afterwards) can be set:
    ``run_here(**options)`` gives ``run(hook=None, **changes)``, which times the program
    under those ``RunOptions`` (unverified, fixed repeats) with ``changes`` and returns the
    job's answer, and the task's key."""
    from autosched.measure import jobs
    from autosched.measure.executors import task_payload
    (build,) = builder.build([MeasureInput(task, states[1])])
    key, payload = task_payload(task)
    saved = dict(jobs._fastest)

    def make(**options):
        opts = jobs.RunOptions(adaptive=False, verify=False, max_timing_s=100, **options)

        def run(hook=None, **changes):
            res = jobs.run_job(key, payload, build.object, build.name, build.layouts,
                               dataclasses.replace(opts, **changes), None, hook)
            assert res["error_no"] == 0, res["error_msg"]
            return res
        return run, key
    yield make
    jobs._fastest.clear()
    jobs._fastest.update(saved)


def test_a_program_far_slower_than_the_fastest_so_far_is_timed_once(run_here):
    """1 ns makes any program hopeless; a slower record is replaced by this one."""
    from autosched.measure import jobs
    run, key = run_here(min_repeat_ms=0.01, repeat=6)
    jobs._fastest[key] = 1e-9
    assert run()["repeats"] == 3  # the short repeats that confirm it is hopeless
    assert run(slow_single_repeat=None, one_repeat_over_best=None)["repeats"] == 6
    jobs._fastest[key] = 1.0
    res = run()
    assert res["repeats"] == 6 and jobs._fastest[key] == pytest.approx(sum(res["costs"]) / 6)
    with pytest.raises(ValueError, match="slow_single_repeat"):
        LocalRunner(slow_single_repeat=0.5)


def test_a_hopeless_program_is_retired_after_its_checked_call_and_one_warm_call(run_here):
    """The fastest so far comes from the runner (``RunOptions.fastest``) or the worker's own
    memory; a program whose checked call and short repeats of warm calls are all
    ``slow_single_repeat`` times slower is timed by those repeats, before any calibration;
    a first call that was slow only once (cold) does not retire a fast program."""
    from autosched.measure import jobs
    run, key = run_here(min_repeat_ms=50, repeat=6)
    jobs._fastest.clear()
    retired = run(fastest=1e-7)  # 0.4 us: hopeless for a 32^3 matmul (~3 us); 3 x ~5 ms confirm it
    assert retired["repeats"] == len(retired["costs"]) == 3 and retired["number"] >= 1
    assert retired["kernel_time"] < 0.045  # no 50 ms repeats
    assert retired["costs"][0] > 4e-7 and retired["saved_repeats"] == 0
    assert key not in jobs._fastest  # a retired program is never the fastest
    normal = run()  # nothing known: timed in full; the worker remembers it
    assert normal["repeats"] == 6 and normal["number"] > 1
    fastest = jobs._fastest[key]
    cold = run(Fault("run:sleep:0.05"), fastest=fastest, one_repeat_over_best=None)  # a slow checked call,
    assert cold["repeats"] == 6 and cold["number"] > 1                                 # then fast calls
    assert run(fastest=1e-7, slow_single_repeat=None, one_repeat_over_best=None)["repeats"] == 6


def test_a_program_well_behind_the_best_is_timed_by_its_first_repeat_alone(run_here):
    """Repeats refine the programs that may be the best: one whose first repeat reads more
    than ``one_repeat_over_best`` times the fastest of its task (but is not hopeless) stops
    there; near the best, or with the option off, it gets every repeat."""
    from autosched.measure import jobs
    run, _ = run_here(min_repeat_ms=20, repeat=5)
    jobs._fastest.clear()
    own = statistics.fmean(run()["costs"])   # its own speed (nothing known: 5 repeats)
    jobs._fastest.clear()
    behind = run(fastest=own / 3)           # 3x the best: past 1.5, short of hopeless (4)
    assert behind["repeats"] == len(behind["costs"]) == 1 and behind["number"] > 1
    assert run(fastest=own / 3, one_repeat_over_best=None)["repeats"] == 5
    jobs._fastest.clear()
    assert run(fastest=own * 2)["repeats"] == 5  # it would be the best: every repeat
    # a repeat of one call (as cold timing makes) is too noisy to stop on; a calibrated one is not
    assert run(fastest=own / 3, min_repeat_ms=0, slow_single_repeat=None)["repeats"] == 5
    assert run(fastest=own / 3, slow_single_repeat=None)["repeats"] == 1
    with pytest.raises(ValueError, match="one_repeat_over_best"):
        LocalRunner(one_repeat_over_best=0.9)

def test_programs_of_another_cpu_are_neither_built_nor_timed_here(task, states, builder, runner):
    """A task names the CPU it targets; a build or a run on a machine of another CPU (a
    Dask worker elsewhere) is an error that says so, not code or timings for the wrong CPU."""
    elsewhere = dataclasses.replace(task, target="llvm -mcpu=a-cpu-of-elsewhere")
    (failed,) = builder.build([MeasureInput(elsewhere, states[0])])
    assert failed.error_no == E.COMPILE_HOST and "a-cpu-of-elsewhere" in failed.error_msg
    (good,) = builder.build([MeasureInput(task, states[0])])
    with LocalRunner(timeout=5, verify=False) as r:
        (res,) = r.run([MeasureInput(elsewhere, states[0])], [good])
    assert res.error_no == E.RUNTIME_DEVICE and "must be built and run on machines of the target's CPU" in res.error_msg


def test_calibration_probes_grow_to_a_repeat_and_the_last_probe_is_the_first_repeat():
    from autosched.measure.jobs import calibrate
    calls = []

    def run(n):  # a program of 1 ms a call
        calls.append(n)
        return n * 1e-3
    number, spent, first = calibrate(run, 1, 0.010)
    assert calls == [1, 12] and number == 12 and spent == pytest.approx(0.013)
    assert first == pytest.approx(1e-3)  # 12 calls of 1 ms: a repeat of >= 10 ms
    calls.clear()
    number, spent, first = calibrate(run, 20, 0.010)  # more calls asked than the probe made
    assert number == 20 and first is None
    assert calibrate(lambda n: n * 0.05, 1, 0.010) == (1, 0.05, 0.05)  # one call already lasts a repeat


def test_the_runner_hands_the_fastest_so_far_to_its_jobs(task, states, builder):
    from autosched.measure.executors import task_payload
    inputs = [MeasureInput(task, s) for s in states[:3]]
    builds = builder.build(inputs)
    with LocalRunner(timeout=5, min_repeat_ms=2, repeat=4, adaptive=False) as r:
        results = r.run(inputs, builds)
        assert all(res.ok for res in results)
        key = task_payload(task)[0]
        assert r._fastest[key] == min(res.mean_cost for res in results)
        r._fastest[key] = 1e-9  # as if a far faster program had been timed (by any worker)
        (again,) = r.run([MeasureInput(task, states[3])], builder.build([MeasureInput(task, states[3])]))
    assert again.ok and again.verified and again.repeats == 3 and again.kernel_time < 0.045


def test_cache_flush_times_single_cold_calls(task, states, builder):
    inputs = [MeasureInput(task, states[2])]
    with LocalRunner(timeout=5, enable_cpu_cache_flush=True, repeat=4, adaptive=False) as flushing:
        assert flushing.options.number == 1 and flushing.options.min_repeat_ms == 0
        (res,) = flushing.run(inputs, builder.build(inputs))
    assert res.ok and res.verified and res.number == 1 and len(res.costs) == 4
    assert all(c > 0 for c in res.costs)


def test_cold_constants_evicts_only_the_weights_before_each_single_call_repeat(monkeypatch, builder):
    from autosched.measure import jobs
    dag = matmul_dag(48, constant_b=True)
    task = ir.SearchTask(dag, layout_rewrite=True, desc="cold-weights")
    s = dag.init_state().cache_write("C")
    inputs = [MeasureInput(task, s.split("C", "j", [16]))]
    evicted = []
    monkeypatch.setattr(jobs, "evict_from_caches", lambda arrays: evicted.append([a.size for a in arrays]))
    with ThreadPoolExecutor(1) as pool:  # the job runs in this process, where the patch is
        with LocalRunner(timeout=5, cold_constants=True, repeat=4, adaptive=False, executor=pool) as cold:
            assert cold.options.min_repeat_ms == 0
            (res,) = cold.run(inputs, builder.build(inputs))
    assert res.ok and res.verified and res.number == 1 and len(res.costs) == 4
    assert evicted == [[48 * 48]] * 4  # B (the weight, packed) before every repeat; A (under the L2) and C stay
    with pytest.raises(ValueError, match="min_repeat_ms must be 0 or None with it, got 5"):
        LocalRunner(cold_constants=True, min_repeat_ms=5)


def test_cold_constants_evicts_a_reduction_input_larger_than_the_l2_too(monkeypatch, builder):
    from autosched.measure import jobs
    from evolution import cold_reads
    dag = matmul_dag(48, constant_b=True)
    task = ir.SearchTask(dag, layout_rewrite=True, desc="cold-activations")
    inputs = [MeasureInput(task, dag.init_state().cache_write("C").split("C", "j", [16]))]
    evicted = []
    monkeypatch.setattr(jobs, "evict_from_caches", lambda arrays: evicted.append([a.size for a in arrays]))
    monkeypatch.setattr(cold_reads, "l2_bytes", lambda: 4096)   # A's 9 KB no longer fit
    with ThreadPoolExecutor(1) as pool:
        with LocalRunner(timeout=5, cold_constants=True, repeat=3, adaptive=False, executor=pool) as cold:
            (res,) = cold.run(inputs, builder.build(inputs))
    assert res.ok and res.verified and len(res.costs) == 3
    assert evicted == [[48 * 48, 48 * 48]] * 3  # A (its producer's output, from memory) and B; C stays


def test_verification_can_be_switched_off(task, states, builder):
    inputs = [MeasureInput(task, states[3], Fault("run:wrong"))]
    with LocalRunner(timeout=5, min_repeat_ms=1, repeat=3, verify=False) as unchecked:
        (res,) = unchecked.run(inputs, builder.build(inputs))
    assert res.ok and not res.verified and res.mean_cost < 1e-2


def test_a_reference_started_before_the_search_is_the_one_the_runs_check_against(task, states, builder):
    """``prepare`` starts a task's reference in a worker and returns; the task's runs then
    check against that one (no second computation), and a wrong program is still caught."""
    with LocalRunner(timeout=5, min_repeat_ms=1, repeat=3, slow_single_repeat=None, one_repeat_over_best=None) as r:
        measurer = ProgramMeasurer(builder, r)   # (not closed: the builder is the module's)
        measurer.prepare(task)
        measurer.prepare(task)   # once a task
        (key, (future, path, _)), = r._started.items()
        inputs = [MeasureInput(task, states[1]), MeasureInput(task, states[2], Fault("run:wrong"))]
        good, wrong = r.run(inputs, builder.build(inputs))
        assert future.done() and not r._started and r._references[key] == path and os.path.exists(path)
        assert_good(good)
        assert wrong.error_no == E.WRONG_ANSWER
        measurer.prepare(task)   # known: nothing started
        assert not r._started
        # another task's started reference is finished before anything of this one is timed
        other = ir.SearchTask(matmul_dag(24), layout_rewrite=False, desc="matmul-24")
        r.prepare(other)
        (other_key, (other_future, _, _)), = r._started.items()
        (again,) = r.run(inputs[:1], builder.build(inputs[:1]))
        assert_good(again)
        assert other_future.done() and not r._started and os.path.exists(r._references[other_key])
    with LocalRunner(timeout=5, min_repeat_ms=1, repeat=3, verify=False) as unchecked:
        unchecked.prepare(task)
        assert not unchecked._started


def test_a_reference_that_cannot_be_started_early_is_computed_when_first_needed(builder):
    """``prepare`` never raises: when its executor refuses the job it starts nothing, and the
    task's first run computes the reference and verifies against it. (A task of its own: jobs
    run in this process keep their memos.)"""
    class RefusingOnce(ThreadPoolExecutor):
        refused = 0

        def submit(self, fn, *args, **kwargs):
            if not self.refused:
                self.refused += 1
                raise RuntimeError("no worker yet")
            return super().submit(fn, *args, **kwargs)

    task = ir.SearchTask(matmul_dag(40), layout_rewrite=False, desc="matmul-40")
    s0 = task.dag.init_state()
    with RefusingOnce(1) as pool:
        r = LocalRunner(timeout=5, min_repeat_ms=1, repeat=3, executor=pool, slow_single_repeat=None,
                        one_repeat_over_best=None)
        r.prepare(task)
        assert pool.refused == 1 and not r._started
        inputs = [MeasureInput(task, s0.split("C", "j", [8])), MeasureInput(task, s0, Fault("run:wrong"))]
        good, wrong = r.run(inputs, builder.build(inputs))
        assert_good(good)
        assert wrong.error_no == E.WRONG_ANSWER
        r.close()


def test_layout_rewritten_constants_are_packed_and_verified(builder, runner):
    dag = matmul_dag(48, constant_b=True)
    task = ir.SearchTask(dag, layout_rewrite=True, desc="packed")
    s = dag.init_state().cache_write("C")
    s = s.split("C", "i", [4]).split("C", "j", [16]).reorder("C", ["j.0", "i.0", "i.1", "j.1"])
    s = s.compute_at("C.local", "C", "i.0").split("C.local", "k", [8])
    s = s.reorder("C.local", ["k.0", "k.1", "i", "j"]).vectorize("C.local", "j")
    inputs = [MeasureInput(task, s), MeasureInput(task, s, Fault("run:wrong"))]
    builds = builder.build(inputs)
    assert "B" in builds[0].layouts  # B is stored in the order the loops read it
    good, wrong = runner.run(inputs, builds)
    assert_good(good)
    assert wrong.error_no == E.WRONG_ANSWER


def test_any_executor_can_build_and_run(task, states):
    inputs = [MeasureInput(task, s) for s in states[:2]]
    with ThreadPoolExecutor(2) as pool:
        builder = LocalBuilder(timeout=10, executor=pool)
        runner = LocalRunner(timeout=10, min_repeat_ms=1, repeat=3, executor=pool)
        results = runner.run(inputs, builder.build(inputs))
        runner.close()
        builder.close()
        assert not pool._shutdown  # an executor passed in is left to its owner
    for res in results:
        assert_good(res)


# verification ----------------------------------------------------------------------------

def test_tolerance_fits_dtype_and_reduction_length():
    assert verify.tolerance("int32", 1000) == 0.0
    f32, f64 = verify.tolerance("float32", 1), verify.tolerance("float64", 1)
    assert 1e-6 < f32 < 1e-4 and f64 < 1e-12
    assert verify.tolerance("float32", 512) == pytest.approx(f32 * math.sqrt(512))
    assert verify.reduction_length(matmul_dag(32)) == 32


def test_compare_catches_unwritten_and_wrong_outputs():
    dag = matmul_dag(8)
    ref = verify.compute_reference(dag, seed=1)
    a, b = ref.inputs
    np.testing.assert_allclose(ref.outputs[0], a @ b, rtol=1e-5, atol=1e-5)
    assert verify.compare([(a.astype(np.float64) @ b).astype(np.float32)], ref) is None  # another order: fine
    unwritten = verify.output_buffers(dag)
    assert "64 of 64 elements" in verify.compare(unwritten, ref)
    off = ref.outputs[0].copy()
    off[2, 3] += 0.5
    assert "worst at (2, 3)" in verify.compare([off], ref)


# the measurer ------------------------------------------------------------------------------

@pytest.fixture()
def measurer(builder, runner):
    return ProgramMeasurer(builder, runner)


def test_measurer_dedups_and_keeps_the_best(task, states, measurer):
    results = measurer.measure(task, [states[0], states[1], states[0]])
    assert measurer.n_measured == 2 and results[0] is results[2]
    assert measurer.has_measured(task, states[1]) and not measurer.has_measured(task, states[2])
    again = measurer.measure(task, [states[1].replay()])  # prints the same: the same program
    assert again[0] is results[1] and measurer.n_measured == 2
    assert measurer.best_cost(task) == min(r.mean_cost for r in results[:2])
    best = min(results[:2], key=lambda r: r.mean_cost)
    assert str(measurer.best_state(task)) == str(states[results.index(best)])
    assert len(measurer.measured_keys(task)) == 2
    assert measurer.summary() == "2 measured, 2 ok"


def test_measurer_gives_up_on_programs_far_slower_than_the_best(task, states, builder, runner):
    with ProgramMeasurer(builder, runner, max_slowdown=10) as m:
        assert m._run_timeout([MeasureInput(task, states[0])]) == runner.timeout  # no best yet
        (good,) = m.measure(task, [states[0]])
        limit = m._run_timeout([MeasureInput(task, states[1])])
        assert limit == pytest.approx(ProgramMeasurer.TIMEOUT_OVERHEAD_S + 30 * good.mean_cost)
        assert limit < runner.timeout
        t0 = time.perf_counter()
        (hung,) = m.measure_inputs([MeasureInput(task, states[1], Fault("run:hang"))])
        assert hung.error_no == E.RUN_TIMEOUT and f"timeout of {limit:g} s" in hung.error_msg
        assert time.perf_counter() - t0 < runner.timeout + 2
    with ProgramMeasurer(builder, runner, max_slowdown=None) as fixed:
        fixed.measure(task, [states[0]])
        assert fixed._run_timeout([MeasureInput(task, states[1])]) == runner.timeout
    with pytest.raises(ValueError, match="max_slowdown"):
        ProgramMeasurer(builder, runner, max_slowdown=0.5)


def test_error_counts_and_early_stop_of_an_all_error_run(task, states, measurer):
    measurer.max_consecutive_errors = 4
    # invalid programs that print differently (the dedup key is the printed loop nest)
    bad = [dataclasses.replace(s, steps=s.steps + (Step.from_record(["SP", 9, 0, [2], True]),)) for s in states[:4]]
    seen = []
    measurer.callbacks.append(lambda inp, res: seen.append(res.error_no))
    measurer.measure(task, bad[:2])  # 2 in a row: goes on
    assert measurer.error_counts == {E.INSTANTIATION_ERROR: 2}
    with pytest.raises(TooManyMeasureErrors, match=r"all 4 measurements failed .*invalid program \(4x\): "
                                                   r"the steps do not replay") as err:
        measurer.measure(task, bad[2:4])
    assert err.value.error_counts == {E.INSTANTIATION_ERROR: 4} and len(err.value.results) == 2
    assert seen == [E.INSTANTIATION_ERROR] * 4  # every result reached the callbacks before the stop
    assert "4 invalid program" in measurer.summary()
    measurer.measure(task, [states[4]])  # a success resets the run of errors
    assert measurer.consecutive_errors == 0


class ScriptedTurns:
    """A runner whose n-th run of a program gives the n-th of its scripted seconds (None:
    the run fails): what a shared machine does to a program timed at different moments."""
    timeout = 10.0

    def __init__(self, seconds: dict):
        self.seconds, self.runs = seconds, collections.Counter()

    def run(self, inputs, builds, on_result=None, timeout=None):
        out = []
        for i, inp in enumerate(inputs):
            cost = self.seconds[inp.key][self.runs[inp.key]]
            self.runs[inp.key] += 1
            out.append(MeasureResult((cost,)) if cost is not None else MeasureResult.failed(E.RUNTIME_DEVICE, "boom"))
            if on_result is not None:
                on_result(i, out[-1])
        return out

    def close(self):
        pass


def test_retiming_in_turns_keeps_each_programs_fastest_turn_and_the_fastest_program(task, states):
    lucky, steady, broken = states[:3]
    runner = ScriptedTurns({lucky.key: [1e-3, 5e-3, 4e-3, 4.5e-3],   # its trial: a quiet moment
                            steady.key: [2e-3, 3e-3, 2.5e-3, 2.8e-3],
                            broken.key: [3e-3, None, None, None]})
    seen = []
    m = ProgramMeasurer(StandInBuilder(), runner, callbacks=[lambda inp, res: seen.append((inp.key, res))])
    m.measure(task, [lucky, steady, broken])
    assert m.best_state(task).key == lucky.key
    got = m.retime(task, [lucky, steady, broken, lucky], turns=3)
    assert [r.retimed for r in got] == [True] * 3 and [r.costs for r in got[:2]] == [(4e-3,), (2.5e-3,)]
    assert got[2].error_no == E.RUNTIME_DEVICE
    assert m.best_state(task).key == steady.key and m.best_cost(task) == 2.5e-3
    assert m.n_measured == 3 and dict(runner.runs) == {lucky.key: 4, steady.key: 4, broken.key: 4}
    assert [k for k, _ in seen[3:]] == [lucky.key, steady.key, broken.key] and seen[4][1] is got[1]
    with pytest.raises(ValueError, match="turns must be >= 1"):
        m.retime(task, [lucky], turns=0)
    assert m.retime(task, []) == []


class _LosesItsCluster(StandInRunner):
    """A runner whose first ``losses`` runs report the first two programs, then lose the rest
    (``MeasurementLost``); later runs measure all they are given."""

    def __init__(self, losses: int):
        super().__init__()
        self.losses = losses
        self.given: list[int] = []

    def run(self, inputs, builds, on_result=None, timeout=None):
        self.given.append(len(inputs))
        if self.losses:
            self.losses -= 1
            super().run(inputs[:2], builds[:2], on_result, timeout)
            raise MeasurementLost("a Dask job was lost before it reported: stand-in")
        return super().run(inputs, builds, on_result, timeout)


def test_a_batch_whose_machine_was_lost_is_measured_again_once(task, states, tmp_path):
    """Lost once: the programs that did not report are measured again (only they), and each
    program has one result and one log line. Lost twice: the error goes up, and what
    reported is in the log."""
    from autosched.history.records import read_records
    unique = list({s.key: s for s in states}.values())
    n = len(unique)
    assert n >= 4
    inputs = [MeasureInput(task, s) for s in unique]
    log = str(tmp_path / "again.jsonl")
    runner = _LosesItsCluster(losses=1)
    with ProgramMeasurer(StandInBuilder(), runner, callbacks=[RecordToFile(log)], max_consecutive_errors=0) as m:
        results = m.measure_inputs(inputs)
    assert runner.given == [n, n - 2]
    assert len(results) == n and all(r is not None for r in results)
    assert sorted(r.state(task.dag).key for r in read_records(log)) == sorted(s.key for s in unique)
    log2 = str(tmp_path / "lost.jsonl")
    runner = _LosesItsCluster(losses=2)
    with ProgramMeasurer(StandInBuilder(), runner, callbacks=[RecordToFile(log2)], max_consecutive_errors=0) as m:
        with pytest.raises(MeasurementLost):
            m.measure_inputs(inputs)
    assert runner.given == [n, n - 2] and len(read_records(log2)) == 4
