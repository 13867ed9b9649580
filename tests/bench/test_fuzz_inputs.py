"""bench/fuzz_inputs.py: its mutations change what they mutate, a child's outcome is
classified (a crash, a hang, a traceback), and the smoke run keeps the JSON contract with
nothing in the columns that must stay 0."""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time

from .test_bench_common import ROOT, _load

fuzz = _load("fuzz_inputs")


def test_mutations_change_what_they_mutate():
    rng = random.Random(0)
    record = {"v": 1, "steps": [["SP", 2, 0, [4], True]], "costs": [1e-5]}
    assert sum(fuzz.mutate_json(record, rng) != record for _ in range(50)) >= 40
    assert record == {"v": 1, "steps": [["SP", 2, 0, [4], True]], "costs": [1e-5]}   # (a copy is mutated)
    data = bytes(range(256)) * 4
    assert all(fuzz.mutate_bytes(data, rng) != data for _ in range(20))
    text = "".join(json.dumps({**record, "timestamp": i}) + "\n" for i in range(5))
    assert sum(fuzz.mutate_lines(text, rng) != text for _ in range(50)) >= 40


def _crash():
    os.kill(os.getpid(), signal.SIGKILL)


def _hang():
    time.sleep(60)


def _raise():
    raise KeyError("x")


def _allocate():
    return "correct", str(len(bytearray(fuzz.MEMORY_LIMIT)))


def test_a_childs_outcome_is_classified():
    assert fuzz.in_child(lambda: ("correct", "fine"), (), 10) == ("correct", "fine")
    assert fuzz.in_child(_crash, (), 10)[0] == "crash"
    assert fuzz.in_child(_hang, (), 0.5)[0] == "hang"
    outcome, detail = fuzz.in_child(_raise, (), 10)
    assert outcome == "traceback" and "KeyError" in detail
    assert fuzz.in_child(_allocate, (), 10)[0] == "memory_limit"


def test_smoke_run_finds_nothing_wrong():
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "fuzz_inputs.py"), "--smoke"],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    last = json.loads(proc.stdout.strip().splitlines()[-1])
    assert all(row["cases"] == 1 for row in last["surfaces"].values()) and len(last["surfaces"]) >= 6
    assert last["bad"] == dict.fromkeys(fuzz.BAD, 0)
