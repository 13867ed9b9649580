"""One native call per network run: a compiled loop over the kernels of a network.

Calling each kernel from Python costs a few microseconds of argument checks and a ctypes
call, and leaves the OpenMP threads waiting on Python between parallel regions. The driver
is a small LLVM function, compiled once per process, that walks a table of (function
address, argument vector) pairs prepared once by the executor (arguments checked then, by
``Kernel.native_call``) and calls each in turn; ``timer`` runs it back to back in native
code, as the kernels' own timers do. A kernel that fails (a checked allocation, an index
checked at run time: see ``ir.cpu.codegen``) stops the run; the driver returns its status and
leaves its position in the plan, so that the kernel's own message is raised.
"""
from __future__ import annotations

import ctypes
import functools

from ..backend import KernelSequence
from .codegen import timer_function as timer_ir
from .runtime import CompiledModule

_NAME = "autosched_graph_driver"

# plan: {i64 count, ptr functions, ptr argument vectors, i64 the position of a failed kernel}
_DRIVER_IR = f"""
define i32 @{_NAME}(ptr %plan) nounwind {{
entry:
  %n = load i64, ptr %plan, align 8
  %fns.slot = getelementptr inbounds i8, ptr %plan, i64 8
  %fns = load ptr, ptr %fns.slot, align 8
  %argvs.slot = getelementptr inbounds i8, ptr %plan, i64 16
  %argvs = load ptr, ptr %argvs.slot, align 8
  %empty = icmp eq i64 %n, 0
  br i1 %empty, label %done, label %loop
loop:
  %i = phi i64 [0, %entry], [%i.next, %next]
  %fn.slot = getelementptr inbounds ptr, ptr %fns, i64 %i
  %fn = load ptr, ptr %fn.slot, align 8
  %argv.slot = getelementptr inbounds ptr, ptr %argvs, i64 %i
  %argv = load ptr, ptr %argv.slot, align 8
  %status = call i32 %fn(ptr %argv)
  %failed = icmp ne i32 %status, 0
  br i1 %failed, label %fail, label %next
next:
  %i.next = add nuw i64 %i, 1
  %more = icmp ult i64 %i.next, %n
  br i1 %more, label %loop, label %done
fail:
  %at.slot = getelementptr inbounds i8, ptr %plan, i64 24
  store i64 %i, ptr %at.slot, align 8
  ret i32 %status
done:
  ret i32 0
}}
define ptr @{_NAME}.error(i32 %code) {{
  ret ptr null
}}
{timer_ir(_NAME)}"""


class _Plan(ctypes.Structure):
    _fields_ = [("count", ctypes.c_int64), ("functions", ctypes.c_void_p), ("argvs", ctypes.c_void_p),
                ("failed", ctypes.c_int64)]


@functools.cache
def _module() -> CompiledModule:
    return CompiledModule(_DRIVER_IR, _NAME)


class NativeDriver(KernelSequence):
    """``run()`` calls every ``(address, argv, check)`` of ``calls`` (``Kernel.native_call``)
    in order, in one native call; ``check(status)`` raises the error of a failed kernel."""

    def __init__(self, calls):
        calls = list(calls)
        n = len(calls)
        self._argvs_alive = [argv for _, argv, _ in calls]
        self._checks = [check for _, _, check in calls]
        self._functions = (ctypes.c_void_p * max(n, 1))(*[address for address, _, _ in calls])
        self._argvs = (ctypes.c_void_p * max(n, 1))(*[ctypes.addressof(argv) for argv in self._argvs_alive])
        self._plan = _Plan(n, ctypes.addressof(self._functions), ctypes.addressof(self._argvs))
        self._arg = ctypes.addressof(self._plan)
        module = _module()
        self._entry, self._timer = module.entry, module.timer
        self.count = n

    def run(self) -> None:
        self._raise_failure(self._entry(self._arg))

    def _raise_failure(self, status: int) -> None:
        if status:
            self._checks[self._plan.failed](status)

    def seconds_per_run(self, runs: int) -> float:
        """Seconds per run over ``runs`` back-to-back runs, timed in native code."""
        if runs < 1:
            raise ValueError(f"runs must be >= 1, got {runs}")
        nanoseconds = self._timer(self._arg, runs)
        if nanoseconds < 0:
            self._raise_failure(-nanoseconds)
        return nanoseconds * 1e-9 / runs
