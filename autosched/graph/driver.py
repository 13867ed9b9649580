"""One native call per network run: a compiled loop over the kernels of a network.

Calling each kernel from Python costs a few microseconds of argument checks and a ctypes
call, and leaves the OpenMP threads waiting on Python between parallel regions. The driver
is a small LLVM function, compiled once per process, that walks a table of (function
address, argument vector) pairs prepared once by the executor (arguments checked then, by
``Kernel.native_call``) and calls each in turn; ``timer`` runs it back to back in native
code, as the kernels' own timers do.
"""
from __future__ import annotations

import ctypes
import functools

from ir.codegen.cpu import _timer as timer_ir
from ir.runtime import CompiledModule

_NAME = "autosched_graph_driver"

# plan: {i64 count, ptr functions, ptr argument vectors}
_DRIVER_IR = f"""
define void @{_NAME}(ptr %plan) nounwind {{
entry:
  %n = load i64, ptr %plan, align 8
  %fns.slot = getelementptr inbounds i8, ptr %plan, i64 8
  %fns = load ptr, ptr %fns.slot, align 8
  %argvs.slot = getelementptr inbounds i8, ptr %plan, i64 16
  %argvs = load ptr, ptr %argvs.slot, align 8
  %empty = icmp eq i64 %n, 0
  br i1 %empty, label %done, label %loop
loop:
  %i = phi i64 [0, %entry], [%i.next, %loop]
  %fn.slot = getelementptr inbounds ptr, ptr %fns, i64 %i
  %fn = load ptr, ptr %fn.slot, align 8
  %argv.slot = getelementptr inbounds ptr, ptr %argvs, i64 %i
  %argv = load ptr, ptr %argv.slot, align 8
  call void %fn(ptr %argv)
  %i.next = add nuw i64 %i, 1
  %more = icmp ult i64 %i.next, %n
  br i1 %more, label %loop, label %done
done:
  ret void
}}
{timer_ir(_NAME)}"""


class _Plan(ctypes.Structure):
    _fields_ = [("count", ctypes.c_int64), ("functions", ctypes.c_void_p), ("argvs", ctypes.c_void_p)]


@functools.cache
def _module() -> CompiledModule:
    return CompiledModule(_DRIVER_IR, _NAME)


class NativeDriver:
    """``run()`` calls every ``(address, argv)`` of ``calls`` in order, in one native call."""

    def __init__(self, calls):
        calls = list(calls)
        n = len(calls)
        self._argvs_alive = [argv for _, argv in calls]
        self._functions = (ctypes.c_void_p * max(n, 1))(*[address for address, _ in calls])
        self._argvs = (ctypes.c_void_p * max(n, 1))(*[ctypes.addressof(argv) for argv in self._argvs_alive])
        self._plan = _Plan(n, ctypes.addressof(self._functions), ctypes.addressof(self._argvs))
        self._arg = ctypes.addressof(self._plan)
        module = _module()
        self._entry, self._timer = module.entry, module.timer
        self.count = n

    def run(self) -> None:
        self._entry(self._arg)

    def seconds_per_run(self, runs: int) -> float:
        """Seconds per run over ``runs`` back-to-back runs, timed in native code."""
        if runs < 1:
            raise ValueError(f"runs must be >= 1, got {runs}")
        return self._timer(self._arg, runs) * 1e-9 / runs
