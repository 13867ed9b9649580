"""What builders and runners share: the task's payload for workers, submitting to any
``concurrent.futures.Executor``, and waiting for results under a timeout."""
from __future__ import annotations

import hashlib
import pickle
import time
import weakref
from concurrent.futures import FIRST_COMPLETED, Executor, Future, wait
from concurrent.futures import TimeoutError as FutureTimeout

_payloads: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def task_payload(task) -> tuple[str, bytes]:
    """``(task_key, pickled task)``, made once per task object: jobs unpickle it once per
    worker process and cache it under the key: the workload key and a digest of the whole
    task, since tasks of one workload may differ in target or layout rewrite."""
    got = _payloads.get(task)
    if got is None:
        payload = pickle.dumps(task, protocol=pickle.HIGHEST_PROTOCOL)
        got = (f"{task.workload_key}-{hashlib.sha1(payload).hexdigest()[:12]}", payload)
        _payloads[task] = got
    return got


def isolating(executor: Executor) -> bool:
    """Whether ``executor`` runs each job in an isolated process under a timeout of its
    own, counted from the job's start (its ``submit_timed(timeout, fn, *args)``): a
    ``WorkerPool``, ``autosched.measure.dask.DaskExecutor``."""
    return callable(getattr(executor, "submit_timed", None))


def submit(executor: Executor, timeout: float | None, fn, *args) -> Future:
    """Submit ``fn(*args)``; an isolating executor enforces ``timeout`` itself (killing the
    process), other executors get it applied while waiting (see ``collect``)."""
    if isolating(executor):
        return executor.submit_timed(timeout, fn, *args)
    return executor.submit(fn, *args)


def collect(executor: Executor, futures: list[Future], timeout: float | None, on_done) -> None:
    """Call ``on_done(index, future)`` as each future finishes. An isolating executor times
    tasks out itself. For another executor, which cannot kill a task, a future still pending
    ``timeout`` seconds after the last one finished (or after the start) is cancelled and
    reported as a ``concurrent.futures.TimeoutError`` (``on_done(index, None)``)."""
    index = {id(f): i for i, f in enumerate(futures)}
    pending = set(futures)
    enforce = timeout is not None and not isolating(executor)
    last = time.monotonic()
    while pending:
        left = max(0.0, last + timeout - time.monotonic()) if enforce else None
        done, pending = wait(pending, timeout=left, return_when=FIRST_COMPLETED)
        if done:
            last = time.monotonic()
            for f in sorted(done, key=lambda f: index[id(f)]):
                on_done(index[id(f)], f)
        elif enforce:
            for f in sorted(pending, key=lambda f: index[id(f)]):
                f.cancel()
                on_done(index[id(f)], None)
            return


__all__ = ["task_payload", "isolating", "submit", "collect", "FutureTimeout"]
