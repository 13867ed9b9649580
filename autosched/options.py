"""``TuneOptions``: how a tuning spends and records its measurements, one object for
``auto_schedule`` and ``tune_networks`` (which also take its fields as keyword arguments)
that the command line builds once. What differs between the two (a computation's target
and rules; a network's objective and task scheduler) stays their own arguments."""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, fields, replace

from evolution import SearchParams

#: programs of each task re-timed in turns at the end of a tuning, and the turns: one
#: kernel timed for 20 s on this project's shared 2-core VM read 63-145 GFLOPS in spells of
#: 1-3 s; the best of 256 trials read 153 GFLOPS in its trial and 76-104 re-timed, no faster
#: than the programs it had edged out (about 6 s a task)
RETIME_BEST = 4
RETIME_TURNS = 3

#: the least value of each count a tuning takes, and whether None is allowed
_COUNTS = {"trials": (0, True), "measure_batch": (1, False), "early_stopping": (1, True),
           "early_stopping_per_task": (1, True), "retime_best": (0, False)}


def check_counts(**values) -> None:
    """Refuse a count of a tuning that is not an integer (``trials=2.5``, ``trials="8"``:
    ``TypeError``) or is too small (``ValueError``), and a time budget that is not a
    positive number of seconds, before anything is tuned."""
    for name, value in values.items():
        if name == "time_budget_s":
            if value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Real)):
                raise TypeError(f"time_budget_s must be seconds (a number) or None, got {value!r}")
            if value is not None and not (0 < value < math.inf):
                raise ValueError(f"time_budget_s must be positive and finite, got {value!r}")
            continue
        least, optional = _COUNTS[name]
        if value is None and optional:
            continue
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise TypeError(f"{name} must be an integer >= {least}{' or None' if optional else ''}, got {value!r} "
                            f"({type(value).__name__})")
        if value < least:
            raise ValueError(f"{name} must be >= {least}, got {value}")


@dataclass(frozen=True)
class TuneOptions:
    """``trials``: measurements in all (None: 1000 per task, as the paper), ``measure_batch``
    per round. ``log_file``: every measurement appended, and a run resumes from it.
    ``seed``: the search is deterministic for it given the same measurements.
    ``early_stopping``: stop after that many trials without improvement;
    ``time_budget_s``: start no round that would end after this many wall seconds.
    ``retime_best``: at the end, that many fastest programs of each task re-timed in turns
    (0: none). ``builder``/``runner``: measurement (default: local worker processes).
    ``cost_model``: "xgb", "xgb-pack-sum", "random" or a CostModel; ``base_model`` and
    ``records_db``: where the cost model starts ("default", a path, or None; see
    ``auto_schedule``). ``search_params``: the evolutionary search's (``SearchParams``).
    ``verbose``: 0 silent, 1 progress."""
    trials: int | None = None
    measure_batch: int = 64
    log_file: str | None = None
    seed: int = 0
    early_stopping: int | None = None
    time_budget_s: float | None = None
    retime_best: int = RETIME_BEST
    builder: object = None
    runner: object = None
    cost_model: object = "xgb"
    base_model: object = "default"
    records_db: object = "default"
    search_params: SearchParams | None = None
    verbose: int = 1

    def __post_init__(self):
        check_counts(trials=self.trials, measure_batch=self.measure_batch, early_stopping=self.early_stopping,
                     retime_best=self.retime_best, time_budget_s=self.time_budget_s)
        if self.search_params is None:
            object.__setattr__(self, "search_params", SearchParams())

    @classmethod
    def of(cls, options: "TuneOptions | None" = None, **values) -> "TuneOptions":
        """``options`` (default: the defaults) with ``values`` in place of its fields."""
        if options is not None and not isinstance(options, TuneOptions):
            raise TypeError(f"options must be an autosched.TuneOptions, got {type(options).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise TypeError(f"unexpected keyword argument {unknown[0]!r}; the tuning options are {sorted(known)}")
        return replace(options or cls(), **values)

    def trials_for(self, n_tasks: int) -> int:
        """The measurements of a tuning of ``n_tasks`` tasks."""
        return self.trials if self.trials is not None else 1000 * n_tasks
