"""Callbacks of the task scheduler: a progress table per task, and a log of the estimated
end-to-end latency over time (the tuning curve of the paper's Fig. 10).

A callback is any object with some of ``on_start(scheduler)``, ``on_round(scheduler,
task_index)`` and ``on_end(scheduler)``.
"""
from __future__ import annotations

import json
import sys
import time


class PrintTableInfo:
    """Print ``scheduler.table()`` after the warm-up pass, then every ``every`` rounds
    (default: once per number of tasks), and at the end; a one-line summary after each
    other round when ``progress``."""

    def __init__(self, every: int | None = None, file=None, progress: bool = True):
        self.every = every
        self.file = file
        self.progress = progress
        self._warm = False

    def _out(self):
        return self.file if self.file is not None else sys.stdout

    def on_round(self, scheduler, i: int) -> None:
        rounds = len(scheduler.choices)
        every = self.every or scheduler.n_tasks
        warm_done = not self._warm and all(r > 0 or d for r, d in zip(scheduler.rounds, scheduler.dead))
        if warm_done or (self._warm and rounds % every == 0):
            self._warm = True
            print(scheduler.table(), file=self._out(), flush=True)
            if warm_done:
                measured = sum(t is not None for t in scheduler.first_measured)
                at = scheduler.all_measured_at()
                print(f"[task_scheduler] warm-up pass done at {time.perf_counter() - scheduler._start:.1f} s: "
                      f"{measured} of {scheduler.n_tasks} tasks have a measured program"
                      + (f", every alive one since {at:.1f} s" if at is not None else ""),
                      file=self._out(), flush=True)
        elif self.progress:
            lat = scheduler.network_latencies()
            est = ", ".join(f"{1e3 * v:.3f} ms" if v < 1e9 else "-" for v in lat)
            print(f"[task_scheduler] round {rounds}: task {i} ({scheduler.names[i][:40]}), "
                  f"best {1e3 * scheduler.best_costs[i]:.4f} ms; estimated {est}; trials {scheduler.total_trials}",
                  file=self._out(), flush=True)

    def on_end(self, scheduler) -> None:
        print(scheduler.table(), file=self._out(), flush=True)
        if scheduler.stop_reason:
            print(f"[task_scheduler] stopped: {scheduler.stop_reason}", file=self._out(), flush=True)


class LogEstimatedLatency:
    """Keep (and with ``path``, append as JSON lines) the estimated latency of every network
    after each round: {"trials", "seconds", "task", "objective", "latencies"}."""

    def __init__(self, path: str | None = None):
        self.path = path
        self.points: list[dict] = []
        self._start = time.perf_counter()

    def on_start(self, scheduler) -> None:
        self._start = time.perf_counter()

    def on_round(self, scheduler, i: int) -> None:
        point = {"trials": scheduler.total_trials, "seconds": round(time.perf_counter() - self._start, 3),
                 "task": i, "objective": scheduler.objective_value(),
                 "latencies": [float(v) for v in scheduler.network_latencies()]}
        self.points.append(point)
        if self.path:
            with open(self.path, "a") as f:
                f.write(json.dumps(point) + "\n")
