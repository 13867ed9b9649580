"""``LocalRunner``: runs compiled programs in a worker process, checks their outputs against
the reference and times them (fixed or adaptive repeats, optional CPU cache flush)."""
from __future__ import annotations

import os
import shutil
import tempfile
import warnings
import weakref
from concurrent.futures import BrokenExecutor, Executor
from dataclasses import replace

from .common import BuildResult, MeasureErrorNo, MeasureInput, MeasureResult, MeasurementLost, short
from .executors import collect, submit, task_payload
from .jobs import WORKER_PRELOAD, RunOptions, reference_job, run_job
from ..workers import WorkerCrashed, WorkerPool, WorkerTimeout, memory_share
from .verify import DEFAULT_SEED


class LocalRunner:
    """Runs ``BuildResult``s and returns ``MeasureResult``s.

    Timing: after one call that is checked (and warms up), each of ``repeat`` repeats runs
    back-to-back calls in native code, at least ``number`` (default 1) and as many as make
    one repeat last ``min_repeat_ms`` (default 40; found by probes of growing length, the
    last of which, as long as a repeat, is the first repeat); a cost is the seconds per
    call of one repeat. With ``enable_cpu_cache_flush`` the
    last-level cache is flushed before every repeat and ``min_repeat_ms`` defaults to 0
    (each repeat one cold call, as Ansor does). With ``cold_constants`` the task's constant
    inputs (weights), and the run-time inputs of its reductions larger than a core's L2
    (``evolution.cold_reads.cold_tensors``), are evicted from the caches before every
    repeat, its other inputs stay cached, and each repeat is one call: how a kernel runs
    inside a model whose weights do not fit the last-level cache (its weights come from
    memory, and so does most of a large activation its producer wrote: ResNet-50's
    56x56x256 -> 64 1x1 convolution ran 0.30 ms cached and 0.85 ms in a run with a program
    that walks its input's rows). ``tune_networks`` times so for such models.

    Adaptive timing (after AdaTune, on by default): ``repeat`` is the most repeats; the
    runner stops once at least ``min_repeats`` repeats have a coefficient of variation below
    ``cv_threshold``, and reports the repeats it saved (``MeasureResult.saved_repeats``).
    Whatever the mode, repeats stop once they have taken ``max_timing_s`` seconds (at least
    one is made), so that a slow program is timed in a few calls, not ten (the search needs
    to know it is slow, not by how much to the last percent). For the same reason a program
    ``slow_single_repeat`` times slower than the fastest program of its task timed so far
    (None: never) is retired early: at once when the checked call and up to three short
    repeats of warm calls (5 ms each, or one call) all say so, its cost those repeats. A
    program whose first repeat reads more than ``one_repeat_over_best`` (1.5) times that
    fastest is timed by that repeat alone (None: only past ``slow_single_repeat``): repeats
    refine the programs that may be the best; of the others the search needs the rank.
    Only a calibrated repeat (``min_repeat_ms`` of calls) counts so: one cold call is too
    noisy to judge by.

    Verification (on by default): before timing, the program runs once on random inputs
    (seed ``verify_seed``) and its outputs are compared with the naive program's, within a
    tolerance for the dtype and reduction length (``autosched.measure.verify``); a mismatch
    is a ``WRONG_ANSWER``. The reference is computed once per task (``reference_timeout``);
    if that fails, the task's programs are timed unverified, with a warning.

    ``timeout``: seconds per program (load, check and time; Ansor: 10). ``n_parallel``:
    worker processes (1: programs are timed one at a time, as timings need). ``executor``:
    any ``concurrent.futures.Executor`` instead of the runner's own ``WorkerPool``.
    ``memory_limit``: bytes each of its own workers may allocate ("auto": half this
    machine's memory shared among them; None: no limit); a program (or its reference)
    needing more is a runtime error, never the machine's memory."""

    def __init__(self, timeout: float = 10.0, number: int = 1, repeat: int = 10,
                 min_repeat_ms: float | None = None, enable_cpu_cache_flush: bool = False,
                 cold_constants: bool = False,
                 adaptive: bool = True, cv_threshold: float = 0.05, min_repeats: int = 3,
                 verify: bool = True, verify_seed: int = DEFAULT_SEED, reference_timeout: float = 300.0,
                 n_parallel: int = 1, executor: Executor | None = None, max_timing_s: float = 1.0,
                 slow_single_repeat: float | None = 4.0, one_repeat_over_best: float | None = 1.5,
                 memory_limit: int | None | str = "auto"):
        flush, cold = bool(enable_cpu_cache_flush), bool(cold_constants)
        min_repeat_ms = (0.0 if flush or cold else 40.0) if min_repeat_ms is None else min_repeat_ms
        if cold and min_repeat_ms > 0:
            raise ValueError(f"cold_constants times one call per repeat (the next call would find the weights "
                             f"cached); min_repeat_ms must be 0 or None with it, got {min_repeat_ms}")
        if number < 1 or repeat < 1 or min_repeats < 1:
            raise ValueError(f"number, repeat and min_repeats must be >= 1, got number={number}, "
                             f"repeat={repeat}, min_repeats={min_repeats}")
        if min_repeat_ms < 0 or cv_threshold < 0 or max_timing_s < 0:
            raise ValueError(f"min_repeat_ms, cv_threshold and max_timing_s must be >= 0, got {min_repeat_ms}, "
                             f"{cv_threshold}, {max_timing_s}")
        if timeout is not None and timeout <= 0:
            raise ValueError(f"timeout must be positive seconds (or None), got {timeout!r}")
        if slow_single_repeat is not None and slow_single_repeat < 1:
            raise ValueError(f"slow_single_repeat must be >= 1 (or None), got {slow_single_repeat!r}")
        if one_repeat_over_best is not None and one_repeat_over_best < 1:
            raise ValueError(f"one_repeat_over_best must be >= 1 (or None), got {one_repeat_over_best!r}")
        self.timeout = timeout
        self.reference_timeout = reference_timeout
        self.options = RunOptions(number=number, repeat=repeat, min_repeat_ms=float(min_repeat_ms),
                                  cache_flush=flush, cold_constants=cold, adaptive=bool(adaptive), cv_threshold=float(cv_threshold),
                                  min_repeats=min_repeats, verify=bool(verify), seed=verify_seed,
                                  max_timing_s=float(max_timing_s), slow_single_repeat=slow_single_repeat,
                                  one_repeat_over_best=one_repeat_over_best)
        self.n_parallel = n_parallel
        self.memory_limit = memory_limit
        self._own = executor is None
        self._executor = executor
        self._references: dict = {}  # task key -> what run jobs find the reference by (None: unverified)
        self._started: dict = {}  # task key -> (future, path, task) of a reference ``prepare`` started
        self._fastest: dict[str, float] = {}  # task key -> the fastest mean cost timed so far
        self._dir: str | None = None
        self._cleanup = None

    def _reference_dir(self) -> str:
        if self._dir is None:
            self._dir = tempfile.mkdtemp(prefix="autosched-reference-")
            self._cleanup = weakref.finalize(self, shutil.rmtree, self._dir, True)
        return self._dir

    @property
    def executor(self) -> Executor:
        if self._executor is None:
            limit = memory_share(self.n_parallel) if self.memory_limit == "auto" else self.memory_limit
            self._executor = WorkerPool(self.n_parallel, timeout=self.timeout, name="autosched-runner",
                                        preload=WORKER_PRELOAD, memory_limit=limit)
        return self._executor

    # the reference of each task ------------------------------------------------------------
    def _reference(self, task):
        """What a run job is given to find ``task``'s reference (computed on first use; see
        ``_compute_reference``); None if that failed."""
        key, _ = task_payload(task)
        if key not in self._references:
            try:
                self._references[key] = self._compute_reference(task)
            except MeasurementLost:
                raise
            except Exception as err:
                warnings.warn(f"autosched: the reference (naive program) of task {task!r} failed "
                              f"({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}); "
                              "its programs are timed WITHOUT verification", RuntimeWarning, stacklevel=3)
                self._references[key] = None
        return self._references[key]

    def prepare(self, task) -> None:
        """Start computing ``task``'s reference in a worker and return at once: a caller
        that searches the task's programs next (a network's first round) overlaps the two
        (a task's reference is a naive program built and run, about 0.6 s for a MobileNet-V3
        task). Nothing when the task's reference is known or under way, or programs are not
        verified; a reference that cannot be started now is computed when first needed (and
        its failure reported then). ``run`` waits for every started reference before it
        times anything, so that none runs beside a timing."""
        key, _ = task_payload(task)
        if not self.options.verify or key in self._references or key in self._started:
            return
        try:
            self._start_reference(task)
        except Exception:  # noqa: BLE001 - the first run of the task computes it again and says why
            pass

    def _start_reference(self, task) -> None:
        key, payload = task_payload(task)
        path = os.path.join(self._reference_dir(), f"{key}-{self.options.seed}.npz")
        future = submit(self.executor, self.reference_timeout, reference_job, key, payload, self.options.seed, path)
        self._started[key] = future, path, task

    def _compute_reference(self, task) -> str:
        """Compute ``task``'s reference in a worker (or finish the one ``prepare`` started),
        saved to a file that the run jobs read (its path); raises if that fails."""
        key, _ = task_payload(task)
        if key not in self._started:
            self._start_reference(task)
        future, path, _ = self._started.pop(key)
        got: list = [None]
        collect(self.executor, [future], self.reference_timeout, lambda i, f: got.__setitem__(0, f))
        if got[0] is None:
            raise TimeoutError(f"it took longer than {self.reference_timeout:g} s")
        got[0].result()
        return path

    # running -------------------------------------------------------------------------------
    def run(self, inputs: list[MeasureInput], build_results: list[BuildResult], on_result=None,
            timeout: float | None = None) -> list[MeasureResult]:
        """Measure every built program; results in input order (errors included, never
        raised). ``on_result(index, result)`` is called as each result is ready.
        ``timeout``: seconds per program for this call, in place of ``self.timeout``."""
        timeout = self.timeout if timeout is None else timeout
        if len(inputs) != len(build_results):
            raise ValueError(f"run got {len(inputs)} inputs but {len(build_results)} build results")
        results: list[MeasureResult | None] = [None] * len(inputs)

        def finish(i, result):
            results[i] = result
            if on_result is not None:
                on_result(i, result)

        for _, _, started in list(self._started.values()):   # none may run beside a timing
            self._reference(started)
        todo, futures = [], []
        for i, (inp, build) in enumerate(zip(inputs, build_results)):
            if build.error_no:
                finish(i, MeasureResult.failed(build.error_no, build.error_msg, build_time=build.time_cost))
                continue
            opts = self.options
            ref = self._reference(inp.task) if opts.verify else None
            if opts.verify and ref is None:
                opts = replace(opts, verify=False)
            key, payload = task_payload(inp.task)
            opts = replace(opts, fastest=self._fastest.get(key))
            todo.append(i)
            futures.append(submit(self.executor, timeout, run_job, key, payload, build.object, build.name,
                                  build.layouts, opts, ref, inp.hook))

        def done(j, future):
            i = todo[j]
            result = self._result(future, build_results[i].time_cost, timeout)
            key, _ = task_payload(inputs[i].task)
            if result.ok and result.mean_cost < self._fastest.get(key, float("inf")):
                self._fastest[key] = result.mean_cost
            finish(i, result)

        collect(self.executor, futures, timeout, done)
        return results

    def _result(self, future, build_time: float, timeout: float | None) -> MeasureResult:
        if future is None:
            return MeasureResult.failed(MeasureErrorNo.RUN_TIMEOUT, f"the run did not finish within {timeout:g} s",
                                        build_time, timeout)
        try:
            got = future.result()
        except WorkerTimeout as err:
            return MeasureResult.failed(MeasureErrorNo.RUN_TIMEOUT, str(err), build_time, err.timeout)
        except MeasurementLost:
            raise   # (not a measurement: see ProgramMeasurer.measure_inputs)
        except (WorkerCrashed, BrokenExecutor) as err:
            return MeasureResult.failed(MeasureErrorNo.RUNTIME_DEVICE,
                                        short(f"the program crashed its worker process: {err}"), build_time)
        except Exception as err:
            return MeasureResult.failed(MeasureErrorNo.UNKNOWN_ERROR, short(f"{type(err).__name__}: {err}"),
                                        build_time)
        if got["error_no"]:
            return MeasureResult.failed(got["error_no"], got["error_msg"], build_time, got["time"])
        return MeasureResult(tuple(got["costs"]), 0, "", build_time + got["time"], build_time=build_time,
                             run_time=got["time"], repeats=got["repeats"], saved_repeats=got["saved_repeats"],
                             number=got["number"], kernel_time=got["kernel_time"], verified=got["verified"])

    def close(self) -> None:
        """Stop the runner's own worker process(es) and remove its reference files."""
        if self._own and self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None
        self._references.clear()
        self._started.clear()
        if self._cleanup is not None:
            self._cleanup()
            self._dir = self._cleanup = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
