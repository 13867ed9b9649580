"""``WorkerPool``: isolated worker processes behind the ``concurrent.futures.Executor``
interface, with a per-task timeout. A task that crashes its worker (a signal, an abort)
or outlives its timeout fails its future with ``WorkerCrashed`` / ``WorkerTimeout``; the
worker is killed and replaced and the pool goes on with the next task.

Used by measurement (builders and runners) and by the search (its islands); the pool knows
nothing of either, it runs picklable functions.

Workers are fresh interpreters (``python -m autosched.workers.process``), never forks: a
process that has used libgomp or LLVM cannot be forked safely (a forked child deadlocks in
``GOMP_parallel``), and a fresh interpreter does not re-import the caller's ``__main__``
either. Tasks and results travel as pickles over pipes; a worker's stderr (and stdout)
goes to a file whose tail explains a crash. A worker dies with its parent (Linux
``PR_SET_PDEATHSIG``) and when its pipe closes.
"""
from __future__ import annotations

import atexit
import collections
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from concurrent.futures import Executor, Future
from multiprocessing.connection import Connection, wait

#: modules a worker imports before it says it is ready (so imports don't eat task timeouts)
DEFAULT_PRELOAD = ("numpy",)


class WorkerCrashed(RuntimeError):
    """The worker running a task died (a signal, an abort, ``os._exit``) or could not start."""

    def __init__(self, message: str, returncode: int | None = None, stderr_tail: str = ""):
        super().__init__(message)
        self.returncode = returncode
        self.stderr_tail = stderr_tail


class WorkerTimeout(TimeoutError):
    """A task ran past its timeout; its worker was killed."""

    def __init__(self, message: str, timeout: float):
        super().__init__(message)
        self.timeout = timeout

    def __reduce__(self):  # crosses machines (autosched.measure.dask): keep the timeout
        return type(self), (str(self), self.timeout)


def memory_share(n_workers: int) -> int | None:
    """Bytes each of ``n_workers`` workers may allocate so that together they stay within
    half of this machine's memory (None where that is unknown)."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None
    return max(64 << 20, total // (2 * max(1, n_workers)))


def describe_exit(returncode: int | None) -> str:
    """'killed by SIGSEGV', 'exited with status 3', ..."""
    if returncode is None:
        return "still running"
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exited with status {returncode}"


class _Task:
    __slots__ = ("future", "payload", "timeout", "running")

    def __init__(self, future, payload, timeout):
        self.future, self.payload, self.timeout = future, payload, timeout
        self.running = False

    def start(self) -> bool:
        """Mark the future running; False if it was cancelled meanwhile."""
        if not self.running:
            if not self.future.set_running_or_notify_cancel():
                return False
            self.running = True
        return True


class _Worker:
    """The parent's end of one worker process."""

    def __init__(self, name: str, preload: tuple[str, ...], memory_limit: int | None):
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        self.log = tempfile.TemporaryFile(prefix=f"{name}-", suffix=".log")
        cmd = [sys.executable, "-m", "autosched.workers.process", str(to_child_r), str(from_child_w),
               str(os.getpid()), ",".join(preload), str(memory_limit or 0)]
        try:
            self.proc = subprocess.Popen(cmd, pass_fds=(to_child_r, from_child_w), stdin=subprocess.DEVNULL,
                                         stdout=self.log, stderr=self.log, close_fds=True)
        finally:
            os.close(to_child_r)
            os.close(from_child_w)
        self.send = Connection(to_child_w, readable=False)
        self.recv = Connection(from_child_r, writable=False)
        self.state = "starting"
        self.since = time.monotonic()
        self.task: _Task | None = None
        self.deadline = float("inf")

    def stderr_tail(self, limit: int = 3000) -> str:
        try:
            self.log.flush()
            size = self.log.seek(0, os.SEEK_END)
            self.log.seek(max(0, size - limit))
            text = self.log.read().decode(errors="replace")
        except (OSError, ValueError):
            return ""
        # faulthandler's list of loaded extension modules says nothing about the crash
        return "\n".join(line for line in text.splitlines() if not line.startswith("Extension modules:")).strip()

    def kill(self) -> int | None:
        if self.proc.poll() is None:
            try:
                self.proc.kill()
            except ProcessLookupError:
                pass
        try:
            return self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            return None

    def close(self) -> None:
        for conn in (self.send, self.recv):
            try:
                conn.close()
            except OSError:
                pass
        try:
            self.log.close()
        except OSError:
            pass


_live_pools: "weakref.WeakSet[WorkerPool]" = weakref.WeakSet()


@atexit.register
def _shutdown_all() -> None:
    for pool in list(_live_pools):
        pool.shutdown(wait=False, cancel_futures=True)
        for w in list(pool._workers):
            if w.proc.poll() is None:
                try:
                    w.proc.kill()
                except OSError:
                    pass


class WorkerPool(Executor):
    """Up to ``max_workers`` (default: all cores) isolated worker processes, started on
    demand and reused. ``submit(fn, *args)`` runs ``fn`` (a picklable, importable function)
    in a worker under the pool's default ``timeout`` (seconds, None for none);
    ``submit_timed(timeout, fn, *args)`` gives a task its own. The time to start a worker
    is not charged to a task (``start_timeout`` bounds it; a worker that cannot start fails
    one waiting task with the reason, so that a broken setup cannot loop forever).

    ``preload``: modules a worker imports before it takes tasks (so that imports do not eat
    task timeouts). ``memory_limit``: bytes each worker may allocate (None: no limit); a
    task needing more gets a ``MemoryError`` (or, in native code that does not check, a
    crash), never the machine's memory.

    ``stats`` counts workers started, tasks that crashed their worker and tasks timed out."""

    def __init__(self, max_workers: int | None = None, timeout: float | None = None,
                 start_timeout: float = 120.0, name: str = "autosched-worker",
                 preload: tuple[str, ...] = DEFAULT_PRELOAD, memory_limit: int | None = None):
        if max_workers is not None and max_workers < 1:
            raise ValueError(f"max_workers must be >= 1, got {max_workers}")
        if memory_limit is not None and memory_limit < (64 << 20):
            raise ValueError(f"memory_limit must be at least 64 MiB (an interpreter's own need), "
                             f"got {memory_limit} bytes")
        self.max_workers = max_workers or os.cpu_count() or 1
        self.timeout = timeout
        self.start_timeout = start_timeout
        self.name = name
        self.preload = tuple(preload)
        self.memory_limit = memory_limit
        self.stats = collections.Counter(started=0, crashed=0, timed_out=0, completed=0)
        self._pending: collections.deque[_Task] = collections.deque()
        self._workers: list[_Worker] = []
        self._lock = threading.Lock()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        self._shutdown = False
        self._broken = ""
        self._thread: threading.Thread | None = None
        _live_pools.add(self)

    # Executor interface --------------------------------------------------------------
    def submit(self, fn, /, *args, **kwargs) -> Future:
        return self.submit_timed(self.timeout, fn, *args, **kwargs)

    def submit_timed(self, timeout: float | None, fn, /, *args, **kwargs) -> Future:
        """``submit`` with this task's own timeout in seconds (None: no limit)."""
        future: Future = Future()
        try:
            payload = pickle.dumps((fn, args, kwargs), protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as err:  # an unpicklable function or argument: the caller's mistake
            raise TypeError(f"WorkerPool.submit: cannot send {getattr(fn, '__name__', fn)!r} and its "
                            f"arguments to a worker process: {err}") from err
        with self._lock:
            if self._shutdown or self._broken:
                raise RuntimeError(self._broken or "cannot submit to a WorkerPool after shutdown")
            self._pending.append(_Task(future, payload, timeout))
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name=f"{self.name}-dispatch", daemon=True)
                self._thread.start()
        self._wake()
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            if cancel_futures:
                while self._pending:
                    self._pending.popleft().future.cancel()
            self._shutdown = True
            thread = self._thread
        self._wake()
        if thread is None:
            self._close_all()
        elif wait and thread is not threading.current_thread():
            thread.join()

    @property
    def n_workers(self) -> int:
        """Worker processes alive now (starting, idle or busy)."""
        return len(self._workers)

    # the dispatcher thread -------------------------------------------------------------
    def _wake(self) -> None:
        try:
            os.write(self._wake_w, b"x")
        except (BlockingIOError, OSError):
            pass

    def _loop(self) -> None:
        try:
            self._serve()
        except BaseException as err:  # a bug here must not leave callers waiting forever
            self._broken = f"the WorkerPool's dispatcher failed: {type(err).__name__}: {err}"
            raise
        finally:
            self._close_all()

    def _serve(self) -> None:
        while True:
            with self._lock:
                self._drop_cancelled()
                busy = sum(w.state == "busy" for w in self._workers)
                if self._shutdown and not self._pending and busy == 0:
                    return
                want = min(self.max_workers, busy + len(self._pending))
                while len(self._workers) < want:
                    self._start_worker()
                self._dispatch()
            self._wait_and_handle()

    def _start_worker(self) -> None:
        try:
            self._workers.append(_Worker(self.name, self.preload, self.memory_limit))
            self.stats["started"] += 1
        except OSError as err:
            while self._pending:
                task = self._pending.popleft()
                if task.start():
                    task.future.set_exception(WorkerCrashed(f"could not start a worker process: {err}"))
                    break

    def _drop_cancelled(self) -> None:
        if any(t.future.cancelled() for t in self._pending):
            self._pending = collections.deque(t for t in self._pending if not t.future.cancelled())

    def _dispatch(self) -> None:
        for w in self._workers:
            if w.state != "idle":
                continue
            while self._pending:
                task = self._pending.popleft()
                if not task.start():
                    continue
                try:
                    w.send.send_bytes(task.payload)
                except OSError:  # the idle worker is gone: retire it, give the task to another
                    self._pending.appendleft(task)
                    self._retire(w)
                    break
                w.state, w.task = "busy", task
                w.deadline = time.monotonic() + task.timeout if task.timeout else float("inf")
                break

    def _wait_and_handle(self) -> None:
        now = time.monotonic()
        watched = [w for w in self._workers if w.state in ("starting", "busy")]
        deadlines = [w.deadline for w in watched if w.state == "busy" and w.deadline != float("inf")]
        deadlines += [w.since + self.start_timeout for w in watched if w.state == "starting"]
        timeout = max(0.0, min(deadlines) - now) if deadlines else None
        by_conn = {w.recv: w for w in watched}
        ready = wait([self._wake_r, *by_conn], timeout)
        for obj in ready:
            if obj == self._wake_r:
                try:
                    os.read(self._wake_r, 4096)
                except (BlockingIOError, OSError):
                    pass
                continue
            with self._lock:
                self._receive(by_conn[obj])
        now = time.monotonic()
        with self._lock:
            for w in list(self._workers):
                if w.state == "busy" and now >= w.deadline:
                    self._timeout(w)
                elif w.state == "starting" and now >= w.since + self.start_timeout:
                    w.kill()
                    self._fail_start(w, f"the worker did not start within {self.start_timeout:g} s")

    def _receive(self, w: _Worker) -> None:
        try:
            message = pickle.loads(w.recv.recv_bytes())
        except (EOFError, OSError):
            self._died(w)
            return
        except Exception as err:  # a result that does not unpickle here
            message = ("err", RuntimeError(f"could not read the worker's answer: {err!r}"), "")
        kind = message[0]
        if kind == "ready":
            w.state = "idle"
            return
        task, w.task, w.state, w.deadline = w.task, None, "idle", float("inf")
        if task is None:
            return
        self.stats["completed"] += 1
        if kind == "ok":
            task.future.set_result(message[1])
        else:
            exc, tb = message[1], message[2]
            if tb and not getattr(exc, "remote_traceback", None):
                try:
                    exc.remote_traceback = tb
                except AttributeError:
                    pass
            task.future.set_exception(exc)

    def _died(self, w: _Worker) -> None:
        code = w.kill()
        tail = w.stderr_tail()
        if w.state == "starting":
            self._fail_start(w, f"the worker {describe_exit(code)} while starting", code, tail)
            return
        task = w.task
        self._retire(w)
        if task is not None:
            self.stats["crashed"] += 1
            msg = f"the worker process {describe_exit(code)} while running the task"
            task.future.set_exception(WorkerCrashed(msg + (f"; its stderr ends with:\n{tail}" if tail else ""),
                                                    code, tail))

    def _timeout(self, w: _Worker) -> None:
        task = w.task
        w.kill()
        self._retire(w)
        self.stats["timed_out"] += 1
        task.future.set_exception(WorkerTimeout(f"the task ran past its timeout of {task.timeout:g} s; "
                                                "its worker was killed", task.timeout))

    def _fail_start(self, w: _Worker, reason: str, code: int | None = None, tail: str = "") -> None:
        if tail == "":
            tail = w.stderr_tail()
        self._retire(w)
        while self._pending:
            task = self._pending.popleft()
            if task.start():
                task.future.set_exception(WorkerCrashed(
                    reason + (f"; its stderr ends with:\n{tail}" if tail else ""), code, tail))
                break

    def _retire(self, w: _Worker) -> None:
        if w in self._workers:
            self._workers.remove(w)
        w.kill()
        w.close()

    def _close_all(self) -> None:
        with self._lock:
            workers, self._workers = self._workers, []
            pending, self._pending = self._pending, collections.deque()
        for task in pending:
            if task.running:
                task.future.set_exception(RuntimeError("the WorkerPool was shut down"))
            else:
                task.future.cancel()
        for w in workers:
            if w.task is not None:
                w.task.future.set_exception(RuntimeError("the WorkerPool was shut down"))
            try:
                w.send.close()  # EOF: an idle worker exits by itself
            except OSError:
                pass
        deadline = time.monotonic() + 1.0
        for w in workers:
            try:
                w.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            w.kill()
            w.close()

    def __del__(self):
        try:
            self.shutdown(wait=False, cancel_futures=True)
            os.close(self._wake_r)
            os.close(self._wake_w)
        except Exception:
            pass

