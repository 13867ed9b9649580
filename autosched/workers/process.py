"""The main program of a ``WorkerPool`` worker process (see ``pool.py``).

    python -m autosched.workers.process READ_FD WRITE_FD PARENT_PID PRELOAD MEMORY_LIMIT

Limits the memory it may allocate to MEMORY_LIMIT bytes (0: no limit; beyond it an
allocation fails, which Python raises as ``MemoryError``), imports the preload modules,
says ("ready", pid), then answers each pickled ``(fn, args, kwargs)`` with ("ok", result)
or ("err", exception, traceback) until its input closes. Dies with its parent.
"""
from __future__ import annotations

import ctypes
import faulthandler
import importlib
import os
import pickle
import resource
import signal
import sys
import traceback
from multiprocessing.connection import Connection


def _die_with_parent(parent_pid: int) -> None:
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)


def _portable(exc: BaseException) -> BaseException:
    """``exc`` if it pickles (and unpickles), else a RuntimeError carrying its text."""
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:
        return RuntimeError(f"{type(exc).__name__}: {exc}")


def _limit_memory(limit: int) -> None:
    """At most ``limit`` bytes of heap and anonymous mappings (Linux ``RLIMIT_DATA``, which
    numpy's and the kernels' allocations count against, unlike mapped files and code)."""
    if limit > 0:
        _, hard = resource.getrlimit(resource.RLIMIT_DATA)
        soft = limit if hard == resource.RLIM_INFINITY else min(limit, hard)
        resource.setrlimit(resource.RLIMIT_DATA, (soft, hard))


def main(argv: list[str]) -> int:
    read_fd, write_fd, parent_pid = int(argv[0]), int(argv[1]), int(argv[2])
    _die_with_parent(parent_pid)
    _limit_memory(int(argv[4]) if len(argv) > 4 else 0)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    faulthandler.enable(file=sys.stderr, all_threads=True)
    inbox = Connection(read_fd, writable=False)
    outbox = Connection(write_fd, readable=False)
    for name in filter(None, argv[3].split(",") if len(argv) > 3 else []):
        importlib.import_module(name)
    outbox.send_bytes(pickle.dumps(("ready", os.getpid())))
    while True:
        try:
            data = inbox.recv_bytes()
        except (EOFError, OSError):
            return 0
        try:
            fn, args, kwargs = pickle.loads(data)
            answer = pickle.dumps(("ok", fn(*args, **kwargs)), protocol=pickle.HIGHEST_PROTOCOL)
        except BaseException as exc:  # noqa: BLE001 - everything goes back to the caller
            answer = pickle.dumps(("err", _portable(exc), traceback.format_exc()),
                                  protocol=pickle.HIGHEST_PROTOCOL)
        sys.stdout.flush()
        sys.stderr.flush()
        outbox.send_bytes(answer)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
