"""``ProgramMeasurer``: what a search policy calls once per round with a batch of States.

It builds (``LocalBuilder``), runs (``LocalRunner``), hands every result to the callbacks
as soon as it is ready (the tuning log, ``autosched.history.records.RecordToFile``, is one), and
keeps what the search needs between rounds: the best cost and State of each workload, the
programs already measured (so that none is measured twice, also across a resumed run:
earlier results come in as ``preloaded`` records), error counts by kind for the progress
display, and the early-stop rule for runs where everything fails. It knows nothing of log
files: the history sits above measurement and talks to it through those two doors.
"""
from __future__ import annotations

import collections
import heapq
import sys
import warnings
import weakref
from dataclasses import dataclass, field, replace

import ir

from .builder import LocalBuilder
from .common import MAX_COST, MeasureErrorNo, MeasureInput, MeasureResult, MeasurementLost
from .runner import LocalRunner


class TooManyMeasureErrors(RuntimeError):
    """Raised by ``ProgramMeasurer.measure`` after a batch once ``max_consecutive_errors``
    measurements in a row have failed: the setup, not the programs, is likely broken. The
    results (already recorded) are in ``results``; ``error_counts`` says what failed."""

    def __init__(self, message: str, error_counts: dict, results: list):
        super().__init__(message)
        self.error_counts = error_counts
        self.results = results


@dataclass
class _Workload:
    results: dict = field(default_factory=dict)      # program key -> MeasureResult
    best_cost: float = MAX_COST
    best_state: object = None                         # a State, or None
    #: valid preloaded results not yet replayed, a heap of (*rank, order, step records)
    #: (``HasCosts.rank``): the first that replays on the task's DAG becomes the best when
    #: the task is first seen
    loaded: list = field(default_factory=list)
    measured: int = 0                                 # measured in this session


_task_ids: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _task_id(task) -> tuple[str, str]:
    """(workload key, target), computed once per task object."""
    try:
        got = _task_ids.get(task)
    except TypeError:  # not weak-referenceable
        return task.workload_key, str(task.target)
    if got is None:
        got = _task_ids[task] = (task.workload_key, str(task.target))
    return got


class ProgramMeasurer:
    """Measures batches of programs and remembers the outcome.

    ``builder``/``runner``: default ``LocalBuilder()``/``LocalRunner()``. ``callbacks``:
    callables ``cb(measure_input, measure_result)`` called as each result is ready; one with
    a ``flush()`` method has it called after each batch, one with ``close()`` at ``close``
    (``autosched.history.records.RecordToFile`` appends each to a tuning log). ``preloaded``:
    results measured before, as records (see ``load``): their programs are not measured
    again and their best is the best so far. ``max_consecutive_errors``: raise
    ``TooManyMeasureErrors`` after a batch once this many measurements in a row have failed
    (0: never). ``verbose``: 1 prints one line per batch.

    ``max_slowdown``: once a workload has a valid program, a new one is stopped (a
    ``RUN_TIMEOUT``) when it runs longer than checking and timing a program this many times
    slower than the best would take (``2 s + 3 * max_slowdown * best``; never beyond the
    runner's own timeout). Random programs can be a thousand times slower than good ones;
    waiting the full timeout for each is most of a tuning run's time otherwise. None: only
    the runner's timeout."""

    #: seconds a program may take beyond its calls: loading, reading the reference
    TIMEOUT_OVERHEAD_S = 2.0

    def __init__(self, builder: LocalBuilder | None = None, runner: LocalRunner | None = None,
                 callbacks=(), preloaded=(), max_consecutive_errors: int = 64, verbose: int = 0,
                 max_slowdown: float | None = 30.0):
        if max_slowdown is not None and max_slowdown < 1:
            raise ValueError(f"max_slowdown must be >= 1 (or None), got {max_slowdown!r}")
        self.max_slowdown = max_slowdown
        self.builder = builder if builder is not None else LocalBuilder()
        self.runner = runner if runner is not None else LocalRunner()
        self.callbacks = list(callbacks)
        self.max_consecutive_errors = max_consecutive_errors
        self.verbose = verbose
        self.error_counts: collections.Counter = collections.Counter()   # MeasureErrorNo -> count
        self._messages: collections.Counter = collections.Counter()      # (error_no, first line) -> count
        self.n_measured = 0          # programs measured in this session
        self.n_loaded = 0            # results preloaded (earlier measurements)
        self.consecutive_errors = 0
        self._workloads: dict[tuple[str, str], _Workload] = {}
        self.load(preloaded)

    # what the search asks ----------------------------------------------------------------
    def _workload(self, task) -> _Workload:
        ident = _task_id(task)
        w = self._workloads.get(ident)
        if w is None:
            w = self._workloads[ident] = _Workload()
        if w.loaded:
            self._settle(task, w)
        return w

    def _settle(self, task, w: _Workload) -> None:
        """The best preloaded program of ``task`` that replays on its DAG becomes the best
        so far (re-timed programs rank first); better ones that do not replay (an edited
        log, another version's steps) are skipped with a warning each."""
        best_rank = 1
        while w.loaded and w.loaded[0][:2] < (best_rank, w.best_cost):
            rank, cost, _, steps = heapq.heappop(w.loaded)
            try:
                w.best_state, w.best_cost = ir.State.from_steps(task.dag, steps), cost
                best_rank = rank
            except ir.InvalidStep as err:
                warnings.warn(f"autosched: a preloaded result of task {getattr(task, 'desc', '') or task.workload_key} "
                              f"({1e3 * cost:.4f} ms) does not replay on its DAG and is not taken as its best: {err}",
                              RuntimeWarning, stacklevel=4)
        w.loaded.clear()

    def has_measured(self, task, state) -> bool:
        """Whether this program (``State.key``) of ``task`` was measured, here or before."""
        return state.key in self._workload(task).results

    def measured_keys(self, task) -> set[str]:
        """The program keys (``State.key``) of ``task`` measured so far."""
        return set(self._workload(task).results)

    def best_cost(self, task) -> float:
        """The best mean seconds per call of ``task`` so far (``MAX_COST`` if none)."""
        return self._workload(task).best_cost

    def best_state(self, task):
        """The fastest State of ``task`` so far, or None."""
        return self._workload(task).best_state

    @property
    def n_errors(self) -> int:
        return sum(self.error_counts.values())

    def summary(self) -> str:
        """One line for the progress display: programs measured and errors by kind."""
        ok = self.n_measured - self.n_errors
        parts = [f"{self.n_measured} measured", f"{ok} ok"]
        parts += [f"{n} {MeasureErrorNo(e).label}" for e, n in sorted(self.error_counts.items())]
        if self.n_loaded:
            parts.append(f"{self.n_loaded} loaded from logs")
        return ", ".join(parts)

    # measuring ---------------------------------------------------------------------------
    def measure(self, task, states) -> list[MeasureResult]:
        """Measure ``states`` (of ``task``); results in input order. A program measured
        before (in this session or a loaded log) is not measured again: its earlier result
        is returned."""
        return self.measure_inputs([MeasureInput(task, s) for s in states])

    def measure_inputs(self, inputs: list[MeasureInput]) -> list[MeasureResult]:
        results: list[MeasureResult | None] = [None] * len(inputs)
        keys = [inp.key for inp in inputs]
        todo: list[int] = []
        first: dict[tuple, int] = {}
        for i, (inp, key) in enumerate(zip(inputs, keys)):
            ident = (_task_id(inp.task), key)
            known = self._workload(inp.task).results.get(key)
            if known is not None:
                results[i] = known
            elif ident not in first:
                first[ident] = i
                todo.append(i)
        batch = [inputs[i] for i in todo]
        if batch:
            def on_result(j: int, res: MeasureResult) -> None:
                i = todo[j]
                results[i] = res
                self._record(inputs[i], keys[i], res)

            self._measure_batch(batch, on_result)
        for i, (inp, key) in enumerate(zip(inputs, keys)):  # duplicates within the batch
            if results[i] is None:
                results[i] = self._workload(inp.task).results[key]
        if self.verbose and batch:
            self._print_batch(batch[0].task, [results[i] for i in todo])
        if self.max_consecutive_errors and self.consecutive_errors >= self.max_consecutive_errors:
            raise TooManyMeasureErrors(self._stop_message(), dict(self.error_counts), results)
        return results

    def _measure_batch(self, batch: list[MeasureInput], on_result) -> None:
        """Build and run ``batch``, handing each result to ``on_result(index, result)``. A
        job whose machine was lost before it reported (``MeasurementLost``) is not a
        measurement: the batch's unreported programs are measured again, once; lost again
        (no cluster left), the error goes up. Either way the results that did report reach
        the callbacks (the log) first."""
        reported: set[int] = set()

        def report(j: int, res: MeasureResult) -> None:
            reported.add(j)
            on_result(j, res)

        try:
            for again in (False, True):
                left = [j for j in range(len(batch)) if j not in reported]
                part = [batch[j] for j in left]
                try:
                    builds = self.builder.build(part)
                    self.runner.run(part, builds, lambda k, res: report(left[k], res),
                                    timeout=self._run_timeout(part))
                    return
                except MeasurementLost as err:
                    if again:
                        raise
                    print(f"[autosched] {err}; measuring the {len(batch) - len(reported)} program(s) that did not "
                          "report again", file=sys.stderr, flush=True)
        finally:
            self._flush_callbacks()

    def retime(self, task, states, turns: int = 3) -> list[MeasureResult]:
        """Time programs of ``task`` measured before again, in ``turns`` turns (each
        program once per turn, in order), and make the fastest of them the task's best.

        Why: on a shared machine one program's speed swings by 2x within seconds (spells
        of other load), so the fastest of many trials, each timed once, is mostly the one
        timed in the quietest moment. Timed in turns, every candidate sees the same
        moments; the fastest turn of each is its result (noise only ever slows a program
        down). Results (``retimed``; a program failing now is a failed result) go to the
        callbacks like measurements, but are not trials: they do not count as measured.
        Returns them in the order of ``states`` (duplicates once)."""
        if turns < 1:
            raise ValueError(f"turns must be >= 1, got {turns!r}")
        unique = {s.key: s for s in states}
        inputs = [MeasureInput(task, s) for s in unique.values()]
        if not inputs:
            return []
        builds = self.builder.build(inputs)
        timeout = self._run_timeout(inputs)
        turns_of = [self.runner.run(inputs, builds, timeout=timeout) for _ in range(turns)]
        out = []
        w = self._workload(task)
        best = None
        for i, inp in enumerate(inputs):
            mine = [results[i] for results in turns_of]
            ok = [r for r in mine if r.ok]
            res = replace(min(ok, key=lambda r: r.mean_cost) if ok else mine[-1], retimed=True,
                          all_cost=sum(r.all_cost for r in mine))
            if res.ok and (best is None or res.mean_cost < best[0]):
                best = (res.mean_cost, inp.state)
            out.append(res)
            for cb in self.callbacks:
                cb(inp, res)
        self._flush_callbacks()
        if best is not None:
            w.best_cost, w.best_state = best
        return out

    def _flush_callbacks(self) -> None:
        """``flush()`` the callbacks that have it (after a batch: the log is on disk)."""
        for cb in self.callbacks:
            flush = getattr(cb, "flush", None)
            if callable(flush):
                flush()

    def _run_timeout(self, batch: list[MeasureInput]) -> float | None:
        """The per-program run timeout for ``batch`` (see ``max_slowdown``)."""
        limit = self.runner.timeout
        if self.max_slowdown is None:
            return limit
        bests = [self.best_cost(inp.task) for inp in batch]
        if any(b >= MAX_COST for b in bests):
            return limit
        own = self.TIMEOUT_OVERHEAD_S + 3 * self.max_slowdown * max(bests)
        return own if limit is None else min(limit, own)

    def _record(self, inp: MeasureInput, key: str, res: MeasureResult) -> None:
        w = self._workload(inp.task)
        w.results[key] = res
        w.measured += 1
        self.n_measured += 1
        if res.ok:
            self.consecutive_errors = 0
            if res.mean_cost < w.best_cost:
                w.best_cost, w.best_state = res.mean_cost, inp.state
        else:
            self.consecutive_errors += 1
            self.error_counts[MeasureErrorNo(res.error_no)] += 1
            line = res.error_msg.strip().splitlines()[0][:300] if res.error_msg.strip() else ""
            self._messages[(int(res.error_no), line)] += 1
        for cb in self.callbacks:
            cb(inp, res)

    def _stop_message(self) -> str:
        n = self.consecutive_errors
        head = (f"all {n} measurements failed" if n >= self.n_measured
                else f"the last {n} measurements failed")
        kind, count = self.error_counts.most_common(1)[0]
        msg = max((item for item in self._messages.items() if item[0][0] == kind), key=lambda item: item[1])[0][1]
        counts = ", ".join(f"{c} {MeasureErrorNo(e).label}" for e, c in self.error_counts.most_common())
        return (f"autosched: {head} ({counts}); stopping instead of going on. The most common error is "
                f"{MeasureErrorNo(kind).label} ({count}x): {msg}")

    def _print_batch(self, task, results: list[MeasureResult]) -> None:
        ok = [r for r in results if r.ok]
        best = self.best_cost(task)
        flops = task.dag.flop_count()
        best_txt = f"best {flops / best / 1e9:.2f} GFLOPS ({1e3 * best:.4f} ms)" if best < MAX_COST else "no valid program yet"
        print(f"[autosched] {getattr(task, 'desc', '') or task.workload_key}: batch of {len(results)}, {len(ok)} ok; "
              f"{best_txt}; session: {self.summary()}", file=sys.stdout, flush=True)

    # results measured before ---------------------------------------------------------------
    def load(self, records) -> int:
        """Take in results measured before: records with ``workload_key``, ``target``,
        ``program`` (the ``State.key``), ``steps`` (step records), ``ok``, ``mean_cost`` and
        ``result()`` (``autosched.history.records.TuningRecord`` has them), and optionally
        ``retimed``. Their programs count as measured; the fastest that replays is the best
        so far, the fastest re-timed one (each by its latest re-timing, as the log ranks
        them) where there are re-timings (see ``retime``).
        Returns how many."""
        records = list(records)
        latest = {(r.workload_key, r.target, r.program): r for r in records if getattr(r, "retimed", False) and r.ok}
        n = 0
        for rec in records:
            ident = (rec.workload_key, rec.target)
            w = self._workloads.get(ident)
            if w is None:
                w = self._workloads[ident] = _Workload()
            if rec.program:
                w.results.setdefault(rec.program, rec.result())
            retimed = getattr(rec, "retimed", False)
            if rec.ok and (not retimed or latest[(rec.workload_key, rec.target, rec.program)] is rec):
                heapq.heappush(w.loaded, (*rec.rank, self.n_loaded + n, rec.steps))
            n += 1
        self.n_loaded += n
        return n

    def prepare(self, task) -> None:
        """Let the runner start what measuring ``task`` needs first (its reference output:
        ``LocalRunner.prepare``) while the caller searches its programs; nothing for a
        runner without ``prepare``."""
        prepare = getattr(self.runner, "prepare", None)
        if prepare is not None:
            prepare(task)

    def close(self) -> None:
        """Stop the builder's and runner's workers and close the callbacks that can be."""
        self.builder.close()
        self.runner.close()
        for cb in self.callbacks:
            close = getattr(cb, "close", None)
            if callable(close):
                close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
