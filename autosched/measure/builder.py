"""``LocalBuilder``: lowers and compiles candidate programs in worker processes, in parallel,
each under a timeout; the result of a build is a native object that a runner loads."""
from __future__ import annotations

import os
from concurrent.futures import BrokenExecutor, Executor

from .common import BuildResult, MeasureErrorNo, MeasureInput, MeasurementLost, short
from .executors import collect, submit, task_payload
from .jobs import WORKER_PRELOAD, build_job
from ..workers import WorkerCrashed, WorkerPool, WorkerTimeout, memory_share


class LocalBuilder:
    """Builds ``MeasureInput``s into ``BuildResult``s.

    ``timeout``: seconds per program (Ansor: 15); ``n_parallel``: worker processes (default:
    one per core); ``executor``: any ``concurrent.futures.Executor`` to build on instead of
    the builder's own ``WorkerPool`` (whose workers are fresh interpreters, never forks,
    killed and replaced when a build crashes or hangs). With another executor, isolation
    and killing are that executor's business; a build pending ``timeout`` seconds after the
    last one finished counts as timed out. ``memory_limit``: bytes each worker of its own
    pool may allocate ("auto": half this machine's memory shared among them; None: no
    limit); a build needing more is a compile error, never the machine's memory."""

    def __init__(self, timeout: float = 15.0, n_parallel: int | None = None, executor: Executor | None = None,
                 memory_limit: int | None | str = "auto"):
        if timeout is not None and timeout <= 0:
            raise ValueError(f"timeout must be positive seconds (or None), got {timeout!r}")
        self.timeout = timeout
        self.memory_limit = memory_limit
        self.n_parallel = n_parallel or os.cpu_count() or 1
        self._own = executor is None
        self._executor = executor

    @property
    def executor(self) -> Executor:
        if self._executor is None:
            limit = memory_share(self.n_parallel) if self.memory_limit == "auto" else self.memory_limit
            self._executor = WorkerPool(self.n_parallel, timeout=self.timeout, name="autosched-builder",
                                        preload=WORKER_PRELOAD, memory_limit=limit)
        return self._executor

    def build(self, inputs: list[MeasureInput]) -> list[BuildResult]:
        """Compile every input; results in input order (errors included, never raised)."""
        executor = self.executor
        futures = []
        for inp in inputs:
            key, payload = task_payload(inp.task)
            futures.append(submit(executor, self.timeout, build_job, key, payload, inp.step_records(),
                                  bool(inp.task.layout_rewrite), inp.hook))
        results: list[BuildResult | None] = [None] * len(inputs)

        def done(i, future):
            results[i] = self._result(future)

        collect(executor, futures, self.timeout, done)
        return results

    def _result(self, future) -> BuildResult:
        if future is None:
            return BuildResult(None, "", error_no=MeasureErrorNo.BUILD_TIMEOUT,
                               error_msg=f"the build did not finish within {self.timeout:g} s", time_cost=self.timeout)
        try:
            got = future.result()
        except WorkerTimeout as err:
            return BuildResult(None, "", error_no=MeasureErrorNo.BUILD_TIMEOUT, error_msg=str(err),
                               time_cost=err.timeout)
        except MeasurementLost:
            raise   # (not a measurement: see ProgramMeasurer.measure_inputs)
        except (WorkerCrashed, BrokenExecutor) as err:
            return BuildResult(None, "", error_no=MeasureErrorNo.COMPILE_HOST,
                               error_msg=short(f"the build crashed its worker process: {err}"))
        except Exception as err:
            return BuildResult(None, "", error_no=MeasureErrorNo.UNKNOWN_ERROR,
                               error_msg=short(f"{type(err).__name__}: {err}"))
        if got["error_no"]:
            return BuildResult(None, "", error_no=got["error_no"], error_msg=got["error_msg"], time_cost=got["time"])
        return BuildResult(got["object"], got["name"], got["layouts"], time_cost=got["time"])

    def close(self) -> None:
        """Stop the builder's own worker processes (an executor passed in is left alone)."""
        if self._own and self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
