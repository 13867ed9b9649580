"""How long idle OpenMP threads spin before they sleep, as a time rather than a count.

libgomp's GOMP_SPINCOUNT counts iterations of a loop around the PAUSE instruction, whose
cost differs by CPU about fivefold: 1000 spins are about 50 µs on the AMD EPYC VMs this
project was tuned on and 11 µs on an Intel Xeon VM (11 ns a PAUSE), where a thread that
fell asleep between two kernels of a network took 50-90 µs to wake (a KVM wake-up), more
than most of MobileNet-V3's kernels: 1000 spins there ran MobileNet-V3 and ShuffleNet-V2
1.1-1.4x slower end to end than 5000. So the count is the one that spins ``SPIN_SECONDS``
on this CPU, from the cost of PAUSE timed once per process, when ``ir`` is imported (before
anything loads libgomp: PyTorch's copy has the same name, and the first one loaded is the
one every kernel uses).
"""
from __future__ import annotations

import ctypes
import time

import llvmlite.binding as llvm

#: how long a thread waits for the next parallel region before it sleeps: long enough to go
#: from one kernel of a network to the next without a wake-up, short enough not to keep a
#: core from a thread that has work (libgomp's default spins milliseconds: on a machine with
#: one other busy process, every parallel region then costs a whole spin)
SPIN_SECONDS = 50e-6
#: the count where PAUSE cannot be timed (not x86) and the bounds of a timed one
DEFAULT_SPIN_COUNT = 1000
MIN_SPIN_COUNT, MAX_SPIN_COUNT = 200, 50_000
#: PAUSE instructions a timing runs (about 0.2-1 ms), and how many timings (the fastest counts)
_TIMED_PAUSES, _TIMINGS = 20_000, 3

_PAUSE_LOOP = """
define void @pause_loop(i64 %n) {
entry:
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %next, %loop ]
  call void @llvm.x86.sse2.pause()
  %next = add i64 %i, 1
  %done = icmp uge i64 %next, %n
  br i1 %done, label %exit, label %loop
exit:
  ret void
}
declare void @llvm.x86.sse2.pause()
"""


def pause_seconds() -> float | None:
    """Seconds one PAUSE takes on this CPU (the fastest of a few timings of a loop of them,
    compiled for it: about 15 ms with LLVM's set-up); None where there is no PAUSE (not x86)."""
    if not llvm.get_default_triple().startswith(("x86_64", "i386", "i686")):
        return None
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    machine = llvm.Target.from_default_triple().create_target_machine(cpu=llvm.get_host_cpu_name())
    engine = llvm.create_mcjit_compiler(llvm.parse_assembly(_PAUSE_LOOP), machine)
    engine.finalize_object()
    loop = ctypes.CFUNCTYPE(None, ctypes.c_int64)(engine.get_function_address("pause_loop"))
    best = float("inf")
    for _ in range(_TIMINGS):
        t0 = time.perf_counter()
        loop(_TIMED_PAUSES)
        best = min(best, time.perf_counter() - t0)
    return best / _TIMED_PAUSES


def spin_count() -> int:
    """The GOMP_SPINCOUNT that spins about ``SPIN_SECONDS`` on this CPU."""
    pause = pause_seconds()
    if not pause:
        return DEFAULT_SPIN_COUNT
    return int(min(max(round(SPIN_SECONDS / pause), MIN_SPIN_COUNT), MAX_SPIN_COUNT))
