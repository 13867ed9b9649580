"""Fault injection for the tests of the measurement harness: a ``MeasureInput`` hook that
makes its worker misbehave on purpose at one point.

- ``"build:segfault"``, ``"build:hang"``, ``"build:error"``: the builder's worker crashes
  (SIGSEGV), hangs, or raises, before compiling;
- ``"run:segfault"``, ``"run:hang"``, ``"run:error"``: the runner's worker crashes, hangs,
  or raises instead of calling the program;
- ``"run:wrong"``: the program runs, then one output element is changed (a wrong answer);
- ``"run:sleep:S"``: the runner's worker sleeps S seconds before calling the program (a
  slow measurement, for the tests of workers lost mid-batch);
- ``"run:allocate:N"``: the runner's worker allocates N bytes before calling the program
  (a program that needs more memory than its worker may have).

The hook travels pickled to the worker processes, which import this module by its name
``tests.autosched.measure_faults`` (the repository root is their working directory).
"""
from __future__ import annotations

import ctypes
import time

import numpy as np

FAULTS = ("build:segfault", "build:hang", "build:error", "run:segfault", "run:hang", "run:error", "run:wrong",
          "run:allocate", "run:sleep")


def _segfault() -> None:
    ctypes.string_at(0)


def _hang() -> None:
    while True:
        time.sleep(3600)


class Fault:
    """The hook of a ``MeasureInput`` whose measurement misbehaves as ``kind`` says."""

    def __init__(self, kind: str):
        if ":".join(kind.split(":")[:2]) not in FAULTS:
            raise ValueError(f"unknown fault {kind!r}; expected one of {', '.join(FAULTS)}")
        self.kind = kind

    def __repr__(self) -> str:
        return f"Fault({self.kind!r})"

    def _misbehave(self, where: str) -> None:
        """Crash, hang or raise here if the fault is of this place ("build" or "run")."""
        place, what = self.kind.split(":")[:2]
        if place != where:
            return
        if what == "segfault":
            _segfault()
        elif what == "hang":
            _hang()
        elif what == "error":
            raise RuntimeError(f"injected {'build' if where == 'build' else 'runtime'} error")

    def build(self, state) -> None:
        self._misbehave("build")

    def call(self, kernel, args, outputs) -> None:
        self._misbehave("run")
        if self.kind.startswith("run:allocate:"):
            need = np.ones(int(self.kind.split(":")[2]) // 8)  # touched, not only reserved
            need[-1] = 0
        if self.kind.startswith("run:sleep:"):
            time.sleep(float(self.kind.split(":")[2]))
        kernel(*args)
        if self.kind == "run:wrong":
            flat = outputs[0].reshape(-1)
            flat[flat.size // 2] += 1 + abs(flat[flat.size // 2])
