"""Fault injection, for tests of the measurement harness only.

``FaultyMeasureInput(task, state, fault)`` measures like a ``MeasureInput`` but makes its
worker misbehave on purpose at one point:

- ``"build:segfault"``, ``"build:hang"``, ``"build:error"``: the builder's worker crashes
  (SIGSEGV), hangs, or raises, before compiling;
- ``"run:segfault"``, ``"run:hang"``, ``"run:error"``: the runner's worker crashes, hangs,
  or raises instead of calling the program;
- ``"run:wrong"``: the program runs, then one output element is changed (a wrong answer).

Production code never creates these; the jobs only look at a fault a test put there.
"""
from __future__ import annotations

import ctypes
import time
from dataclasses import dataclass

from .common import MeasureInput, program_key

FAULTS = ("build:segfault", "build:hang", "build:error", "run:segfault", "run:hang", "run:error", "run:wrong")


@dataclass(frozen=True, eq=False)
class FaultyMeasureInput(MeasureInput):
    """A ``MeasureInput`` whose measurement misbehaves as ``fault`` says (see ``FAULTS``)."""
    fault: str = ""

    def __post_init__(self):
        if self.fault not in FAULTS:
            raise ValueError(f"unknown fault {self.fault!r}; expected one of {', '.join(FAULTS)}")

    def program_key(self) -> str:  # not the same program as the healthy one
        return program_key(self.state) + ":" + self.fault


def _segfault() -> None:
    ctypes.string_at(0)


def _hang() -> None:
    while True:
        time.sleep(3600)


def inject_build_fault(fault: str) -> None:
    if fault == "build:segfault":
        _segfault()
    elif fault == "build:hang":
        _hang()
    elif fault == "build:error":
        raise RuntimeError("injected build error")


def faulty_call(fault: str, kernel, outputs):
    """A stand-in for ``kernel(*args)`` that misbehaves as ``fault`` says."""
    def call(*args):
        if fault == "run:segfault":
            _segfault()
        elif fault == "run:hang":
            _hang()
        elif fault == "run:error":
            raise RuntimeError("injected runtime error")
        kernel(*args)
        if fault == "run:wrong":
            flat = outputs[0].reshape(-1)
            flat[flat.size // 2] += 1 + abs(flat[flat.size // 2])
    return call
