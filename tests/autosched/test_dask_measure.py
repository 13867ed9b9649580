"""Measurement on Dask ``distributed`` (``autosched.measure.dask``) with a ``LocalCluster`` on
loopback: the same guarantees as local measurement (isolation of each program in a child
process of the worker, timeouts, verification on the worker), a tuning whose log resumes
locally, and no measurement lost when a worker dies in the middle of a batch."""
import os
import signal
import threading
import time

import numpy as np
import pytest

distributed = pytest.importorskip("distributed", reason="measurement on Dask needs the `distributed` package")

import ir  # noqa: E402
from autosched import MeasureErrorNo, MeasureInput, ProgramMeasurer, RecordToFile, auto_schedule  # noqa: E402
from autosched.measure.dask import DaskBuilder, DaskRunner  # noqa: E402
from autosched.history.apply import apply_history_best  # noqa: E402
from autosched.history.records import read_records, trials_of  # noqa: E402
from tests.autosched.measure_faults import Fault  # noqa: E402
from tests.autosched.test_measure import assert_good, matmul_dag, states, task  # noqa: E402,F401 (fixtures)

E = MeasureErrorNo


def local_cluster(**kwargs):
    """A loopback cluster, no dashboard: two workers, each a runner machine."""
    options = dict(n_workers=2, threads_per_worker=1, resources={"runner": 1}, dashboard_address=None,
                   host="127.0.0.1", protocol="tcp")
    options.update(kwargs)
    return distributed.LocalCluster(**options)


@pytest.fixture(scope="module")
def client():
    with local_cluster(processes=False) as cluster, distributed.Client(cluster, set_as_default=False) as c:
        yield c


def measure_on(client, inputs, **runner_options):
    options = dict(timeout=5, min_repeat_ms=2, repeat=5, slow_single_repeat=None, one_repeat_over_best=None)
    options.update(runner_options)
    with DaskBuilder(client, timeout=5) as builder, DaskRunner(client, **options) as runner:
        return runner.run(inputs, builder.build(inputs))


def test_programs_are_built_verified_and_timed_on_the_workers(client, task, states):
    results = measure_on(client, [MeasureInput(task, s) for s in states])
    for res in results:
        assert_good(res)


def test_segfault_hang_and_wrong_answer_are_error_records_and_the_workers_survive(client, task, states):
    workers = set(client.scheduler_info()["workers"])
    faults = ["run:segfault", "run:hang", "run:wrong", "build:segfault"]
    inputs = [MeasureInput(task, states[0], Fault(kind)) for kind in faults] + [MeasureInput(task, states[1])]
    t0 = time.monotonic()
    results = measure_on(client, inputs, timeout=2)
    crashed, hung, wrong, build_crash, good = results
    assert crashed.error_no == E.RUNTIME_DEVICE and "SIGSEGV" in crashed.error_msg
    assert hung.error_no == E.RUN_TIMEOUT
    assert wrong.error_no == E.WRONG_ANSWER and "differs from the reference" in wrong.error_msg
    assert build_crash.error_no == E.COMPILE_HOST
    assert_good(good)
    assert time.monotonic() - t0 < 60
    assert set(client.scheduler_info()["workers"]) == workers  # no Dask worker was lost
    assert_good(measure_on(client, [MeasureInput(task, states[2])])[0])


def test_a_builder_and_a_runner_are_rejected_without_a_cluster_address(task):
    with pytest.raises(TypeError, match="Dask scheduler address"):
        DaskBuilder(42).build([MeasureInput(task, task.dag.init_state())])
    with pytest.raises(TypeError, match="no executor"):
        DaskRunner("tcp://127.0.0.1:1", n_parallel=2)


def test_a_short_tuning_through_dask_gives_verified_results_and_a_log_that_resumes_locally(client, tmp_path):
    dag = matmul_dag(n=48)
    log = str(tmp_path / "dask.jsonl")
    builder = DaskBuilder(client, timeout=10)
    runner = DaskRunner(client, timeout=10, min_repeat_ms=2, repeat=3)
    result = auto_schedule(dag, trials=8, measure_batch=4, log_file=log, seed=1, builder=builder, runner=runner,
                           verbose=0)
    assert result.state is not None and result.gflops > 0
    records = trials_of(read_records(log))  # (and the re-timings the tuning ended with)
    assert len(records) == result.trials == 8
    assert all(r.ok for r in records), [r.error_msg for r in records if not r.ok]
    # resumed locally: nothing measured again, the same best program
    again = auto_schedule(dag, trials=0, log_file=log, seed=1, verbose=0)
    assert again.state is not None and again.state.key == result.state.key
    assert len(read_records(log)) == len(records) + sum(r.retimed for r in read_records(log))  # nothing new
    with apply_history_best(log) as history:
        kernel = ir.build(dag)
    assert history.applied == [dag.workload_key()]
    a, b = (np.random.default_rng(0).standard_normal((48, 48), dtype=np.float32) for _ in range(2))
    c = np.zeros((48, 48), np.float32)
    kernel(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


def test_killing_a_worker_in_the_middle_of_a_batch_loses_no_measurement(task, states, tmp_path):
    with local_cluster(processes=True) as cluster, distributed.Client(cluster, set_as_default=False) as c:
        inputs = [MeasureInput(task, s, Fault(f"run:sleep:{t}")) for s in states[:4] for t in (0.4, 0.5)]
        pids = c.run(os.getpid)
        killed = []
        log = str(tmp_path / "killed.jsonl")

        def kill_one_while_it_runs():
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                busy = [w for w, jobs in c.processing().items() if any("autosched-run-run_job" in j for j in jobs)]
                if busy:
                    killed.append(pids[busy[0]])
                    os.kill(killed[0], signal.SIGKILL)
                    return
                time.sleep(0.05)

        killer = threading.Thread(target=kill_one_while_it_runs)
        with ProgramMeasurer(DaskBuilder(c, timeout=20), DaskRunner(c, timeout=20, min_repeat_ms=2, repeat=3),
                             callbacks=[RecordToFile(log)], max_consecutive_errors=0) as measurer:
            measurer.builder.build(inputs[:1])  # the workers are up; the reference comes with the batch
            killer.start()
            results = measurer.measure_inputs(inputs)
            killer.join()
        assert len(results) == len(inputs) and all(r is not None for r in results)
        for res in results:  # each re-queued (and measured) or an error that says why
            assert res.ok or res.error_msg, res
        assert sum(r.ok for r in results) >= len(inputs) - 2
        assert len(list(read_records(log))) == len(inputs)
        assert killed and killed[0] not in c.run(os.getpid).values()  # a worker did die mid-batch


def test_the_command_line_tunes_on_a_dask_cluster(client, tmp_path, capsys):
    from autosched import cli
    log = str(tmp_path / "cli.jsonl")
    code = cli.main(["tune", "GMM-1x128x128x128", "--trials", "4", "--batch", "2", "--log-file", log,
                     "--dask", client.scheduler.address])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "verified against numpy: OK" in out
    assert len(trials_of(read_records(log))) == 4


def test_the_command_line_says_when_it_cannot_use_dask(monkeypatch, capsys):
    from autosched import cli
    import autosched.measure.dask as dask_measure

    def unreachable(address):
        raise OSError(f"Timed out trying to connect to {address}")
    monkeypatch.setattr(dask_measure, "connect", unreachable)
    assert cli.main(["tune", "GMM-1x128x128x128", "--trials", "1", "--dask", "tcp://nowhere:8786"]) == cli.USAGE_ERROR
    assert "cannot connect to a Dask scheduler" in capsys.readouterr().err


def test_jobs_no_worker_can_take_are_announced(client, task, states):
    runner = DaskRunner(client, resources={"gpu-board": 1}, timeout=5)
    with pytest.warns(RuntimeWarning, match="no worker of the Dask cluster.*gpu-board=1"):
        runner.executor._check_workers()
    runner.close()


def test_a_lost_scheduler_stops_the_run_without_error_records(task, states, tmp_path):
    """The issue's case: a lost scheduler marked the in-flight programs as failed (error 8,
    "cancelled": a resume never measured them) and ended in a traceback. Now what reported
    is logged, what did not is no record at all, and the run stops with ``MeasurementLost``."""
    from autosched.measure.common import MeasurementLost
    log = str(tmp_path / "lost.jsonl")
    cluster = local_cluster(processes=False)
    c = distributed.Client(cluster, set_as_default=False)
    inputs = [MeasureInput(task, s, Fault("run:sleep:1.5")) for s in states[:6]]
    try:
        with ProgramMeasurer(DaskBuilder(c, timeout=20), DaskRunner(c, timeout=20, min_repeat_ms=2, repeat=3),
                             callbacks=[RecordToFile(log)], max_consecutive_errors=0) as measurer:
            measurer.builder.build(inputs[:1])
            closer = threading.Timer(2.5, cluster.close)
            closer.start()
            with pytest.raises(MeasurementLost, match="lost before it reported"):
                measurer.measure_inputs(inputs)
            closer.join()
    finally:
        c.close()
        cluster.close()
    records = read_records(log)
    assert all(r.ok for r in records), [r.error_msg for r in records]
    assert len(records) < len(inputs)
