"""What measurement passes around: inputs, build results, measure results, error codes.

Error codes follow Ansor's numbering, so that records read alike; a failed measurement
costs ``MAX_COST`` seconds (1e10), as in Ansor, so that sorting by cost just works.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from enum import IntEnum

#: the cost (seconds) of a program whose measurement failed
MAX_COST = 1e10


class MeasureErrorNo(IntEnum):
    """Why a measurement failed (Ansor's numbering)."""
    NO_ERROR = 0
    INSTANTIATION_ERROR = 1   # the steps do not replay: an invalid program
    COMPILE_HOST = 2          # lowering, code generation or LLVM failed (or crashed the builder)
    COMPILE_DEVICE = 3        # (GPU code generation; unused on CPU)
    RUNTIME_DEVICE = 4        # the program raised or crashed its worker (a signal)
    WRONG_ANSWER = 5          # the outputs differ from the reference (the naive program)
    BUILD_TIMEOUT = 6
    RUN_TIMEOUT = 7
    UNKNOWN_ERROR = 8

    @property
    def label(self) -> str:
        """A short human name: 'compile error', 'run timeout', ..."""
        return _LABELS[self]


_LABELS = {
    MeasureErrorNo.NO_ERROR: "ok",
    MeasureErrorNo.INSTANTIATION_ERROR: "invalid program",
    MeasureErrorNo.COMPILE_HOST: "compile error",
    MeasureErrorNo.COMPILE_DEVICE: "compile error (device)",
    MeasureErrorNo.RUNTIME_DEVICE: "runtime error",
    MeasureErrorNo.WRONG_ANSWER: "wrong answer",
    MeasureErrorNo.BUILD_TIMEOUT: "build timeout",
    MeasureErrorNo.RUN_TIMEOUT: "run timeout",
    MeasureErrorNo.UNKNOWN_ERROR: "unknown error",
}


@dataclass(frozen=True, eq=False)
class MeasureInput:
    """One program to measure: a ``SearchTask`` and a ``State`` of its DAG.

    ``hook`` (for tests of the harness): an object sent to the worker processes whose
    ``build(state)`` is called before the program is compiled and whose
    ``call(kernel, args, outputs)`` runs the checked call in place of ``kernel(*args)``;
    it must pickle and be importable there. An input with a hook is another program."""
    task: object
    state: object
    hook: object = None

    @property
    def key(self) -> str:
        """The program's identity (``State.key``), which deduplicates measurements."""
        return self.state.key if self.hook is None else f"{self.state.key}:{self.hook!r}"

    def step_records(self) -> list:
        """The state as JSON-able step records (what crosses to worker processes)."""
        return [s.record() for s in self.state.steps]


@dataclass(frozen=True, eq=False)
class BuildResult:
    """A compiled program: the native object's bytes and the layout plans of rewritten
    constants, or an error. ``time_cost``: seconds the builder spent on it."""
    object: bytes | None
    name: str
    layouts: dict = field(default_factory=dict)
    error_no: int = MeasureErrorNo.NO_ERROR
    error_msg: str = ""
    time_cost: float = 0.0


class HasCosts:
    """``ok`` and ``mean_cost`` of anything with ``error_no`` and ``costs`` (a measurement
    result, a tuning record)."""

    @property
    def ok(self) -> bool:
        return self.error_no == MeasureErrorNo.NO_ERROR

    @property
    def mean_cost(self) -> float:
        """Mean seconds per call over the repeats; ``MAX_COST`` for a failed measurement."""
        return statistics.fmean(self.costs) if self.ok and self.costs else MAX_COST

    @property
    def rank(self) -> tuple[bool, float]:
        """The one order of a workload's programs (smaller first: the measurer's best so far,
        ``history.records.ranked``): re-timings in turns first (on a noisy machine the fastest
        single trial is often only the luckiest), then the fastest."""
        return not getattr(self, "retimed", False), self.mean_cost


@dataclass(frozen=True)
class MeasureResult(HasCosts):
    """The outcome of measuring one program.

    ``costs``: seconds per call, one per repeat (``(MAX_COST,)`` on error); ``all_cost``:
    the seconds the measurement took (build + run); ``build_time``/``run_time``: its parts;
    ``repeats``/``saved_repeats``: repeats done and, in adaptive mode, left out because the
    timing had settled; ``number``: calls per repeat; ``kernel_time``: seconds spent in the
    kernel itself (warm-up, calibration and timed calls); ``verified``: the outputs were
    checked against the reference (and matched); ``retimed``: a program measured before,
    timed again in turns with the task's other best programs (``ProgramMeasurer.retime``):
    not a trial, and what picks the task's best."""
    costs: tuple
    error_no: int = MeasureErrorNo.NO_ERROR
    error_msg: str = ""
    all_cost: float = 0.0
    timestamp: float = field(default_factory=time.time)
    build_time: float = 0.0
    run_time: float = 0.0
    repeats: int = 0
    saved_repeats: int = 0
    number: int = 0
    kernel_time: float = 0.0
    verified: bool = False
    retimed: bool = False

    @property
    def error(self) -> MeasureErrorNo:
        return MeasureErrorNo(self.error_no)

    @classmethod
    def failed(cls, error_no: int, error_msg: str, build_time: float = 0.0, run_time: float = 0.0,
               ) -> "MeasureResult":
        return cls((MAX_COST,), int(error_no), error_msg, build_time + run_time,
                   build_time=build_time, run_time=run_time)

    def __str__(self) -> str:
        if self.ok:
            return (f"MeasureResult({1e3 * self.mean_cost:.4f} ms x {len(self.costs)} repeats, "
                    f"build {self.build_time:.2f} s, run {self.run_time:.2f} s)")
        return f"MeasureResult({self.error.label}: {self.error_msg.splitlines()[0] if self.error_msg else ''})"


class MeasurementLost(RuntimeError):
    """A job whose machine (a Dask worker, or the whole cluster) was lost before it reported:
    not a measurement of the program, so never an error record. The measurer measures the
    batch's unreported programs again once; when that is lost too (no cluster left), it
    raises this after the results that did report are handed to the callbacks (logged)."""


def short(msg: str, limit: int = 2000) -> str:
    """An error message cut to ``limit`` characters (the head and the tail, which says most)."""
    if len(msg) <= limit:
        return msg
    half = limit // 2
    return f"{msg[:half]}\n... [{len(msg) - limit} characters cut] ...\n{msg[-half:]}"
