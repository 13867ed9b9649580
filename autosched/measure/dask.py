"""Measurement across machines on Dask ``distributed``: ``DaskBuilder`` and ``DaskRunner``
are ``LocalBuilder`` and ``LocalRunner`` whose jobs go to the workers of a Dask cluster
through a ``DaskExecutor``, with the same guarantees.

- Isolation: on the Dask worker, every job runs in a child process of a ``WorkerPool``
  kept by that worker (one pool for builds, one for runs). A program that crashes or
  hangs kills its child, never the Dask worker, and comes back as ``WorkerCrashed`` /
  ``WorkerTimeout``, which the builder and runner turn into error records as they do
  locally.
- Timeouts count from the moment the child process starts the job: time spent waiting in
  Dask's queues, moving data or starting a child is not charged to the program.
- Placement: runs ask for Dask worker resources (default ``{"runner": 1}``): start one
  worker per target machine with ``--resources "runner=1"`` and Dask runs one timing job
  there at a time. Builds go to any worker (or to those with the resources given).
- No shared file system: compiled objects travel in the job's arguments; the reference
  of a task is computed once, by a job on a runner worker, and stays there as the result
  of that Dask task; run jobs take it as an argument, so that Dask copies it once to each
  worker that needs it, where it is written to a local file for the child processes.
- A worker lost mid-batch: Dask runs its jobs again on another worker. A job that has
  lost ``distributed.scheduler.allowed-failures`` workers, or whose scheduler is gone,
  was never measured: it ends in ``MeasurementLost``, never an error record; the measurer
  measures it again, and with no cluster left the tuning stops saying what was saved.

``distributed`` is imported only here, and only when one of these is made.
"""
from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import threading
import uuid
import warnings
from concurrent.futures import Executor, Future

from ..workers import WorkerPool, memory_share
from .builder import LocalBuilder
from .common import MeasurementLost
from .executors import task_payload
from .jobs import WORKER_PRELOAD, reference_bytes_job
from .runner import LocalRunner

#: the resources a run job asks for, unless told otherwise
RUNNER_RESOURCES = {"runner": 1}


def connect(address_or_client):
    """``(client, owned)``: a ``distributed.Client`` given, or one connected to the
    scheduler at an address such as ``tcp://host:8786`` (owned: ours to close)."""
    try:
        import distributed
    except ImportError as err:
        raise ImportError("measurement on Dask needs the `distributed` package: pip install 'autosched[dask]'") from err
    if isinstance(address_or_client, distributed.Client):
        return address_or_client, False
    if not isinstance(address_or_client, str):
        raise TypeError(f"expected a Dask scheduler address such as 'tcp://host:8786' or a distributed.Client, "
                        f"got {address_or_client!r}")
    return distributed.Client(address_or_client, set_as_default=False), True


class ShippedFile:
    """A file a job needs on whatever machine runs it: ``name`` and the Dask future of its
    bytes. In a job's arguments, the worker replaces it by the path of a local copy."""

    def __init__(self, name: str, data):
        self.name, self.data = name, data


class DaskExecutor(Executor):
    """Runs jobs on a Dask cluster, each in an isolated child process of the worker, under
    a timeout counted from the job's start there (``submit_timed``, as ``WorkerPool``).

    ``role``: "build" or "run" (the pool of child processes a job goes to on the worker:
    as many processes as cores for builds, one for runs); ``resources``: the Dask worker
    resources each job asks for (None: any worker)."""

    def __init__(self, address_or_client, role: str, resources: dict | None = None):
        if role not in ("build", "run"):
            raise ValueError(f"role must be 'build' or 'run', got {role!r}")
        self.client, self._owned = connect(address_or_client)
        self.role = role
        self.resources = dict(resources) if resources else None
        self._checked = False

    def submit(self, fn, /, *args, **kwargs) -> Future:
        if kwargs:
            raise TypeError("DaskExecutor.submit takes positional arguments only")
        return self.submit_timed(None, fn, *args)

    def submit_timed(self, timeout: float | None, fn, /, *args) -> Future:
        """Run ``fn(*args)`` in a child process of a Dask worker, killed after ``timeout``
        seconds of running (None: no limit); ``ShippedFile`` arguments arrive as paths."""
        return _as_concurrent(self._submit(timeout, fn, args))

    def ship(self, name: str, timeout: float | None, fn, *args) -> ShippedFile:
        """Compute a file's bytes with ``fn(*args)`` (as ``submit_timed``) and leave them on
        the worker; waits until they are ready and raises what the job raised."""
        future, finished = self._submit(timeout, fn, args), threading.Event()
        future.add_done_callback(lambda f: finished.set())
        finished.wait()  # not result(): the bytes stay on the worker
        if future.status == "cancelled":
            raise _lost("it was cancelled (the scheduler or the client is gone)")
        if future.status != "finished":
            err = future.exception()
            raise _lost("its workers died", err) if isinstance(err, _cluster_errors()) else err
        return ShippedFile(name, future)

    def _check_workers(self) -> None:
        """Warn (once) when no worker of the cluster has the resources the jobs ask for:
        Dask would keep them waiting for one, silently."""
        self._checked = True
        workers = self.client.scheduler_info().get("workers", {}).values()
        if not any(all(w.get("resources", {}).get(k, 0) >= v for k, v in (self.resources or {}).items())
                   for w in workers):
            need = ",".join(f"{k}={v}" for k, v in (self.resources or {}).items())
            warnings.warn(f"autosched: no worker of the Dask cluster at {getattr(self.client.scheduler, 'address', '?')} can take "
                          f"the {self.role} jobs" + (f" (they ask for the resources {need}: start one with "
                                                     f"`dask worker ADDRESS --resources \"{need}\"`)" if need else "")
                          + "; they wait until one joins", RuntimeWarning, stacklevel=4)

    def _submit(self, timeout, fn, args):
        if self.client.status in ("closing", "closed"):
            raise _lost(f"the Dask client is {self.client.status} (the scheduler is gone)")
        try:
            if not self._checked:
                self._check_workers()
            files = {i: (a.name, a.data) for i, a in enumerate(args) if isinstance(a, ShippedFile)}
            plain = tuple(None if i in files else a for i, a in enumerate(args))
            return self.client.submit(isolated_call, self.role, timeout, fn, plain, files, resources=self.resources,
                                      key=f"autosched-{self.role}-{getattr(fn, '__name__', 'job')}-"
                                          f"{uuid.uuid4().hex}")
        except (*_cluster_errors(), OSError, TimeoutError) as err:
            raise _lost("the scheduler did not take it", err) from None

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Close the client if this executor connected it (the cluster is left running)."""
        if self._owned:
            self.client.close()
            self._owned = False


def _lost(what: str, err: BaseException | None = None) -> MeasurementLost:
    why = f" ({type(err).__name__}: {str(err)[:200]})" if err is not None else ""
    return MeasurementLost(f"a Dask job was lost before it reported: {what}{why}")


def _cluster_errors() -> tuple:
    """What ``distributed`` raises when a job's worker or the scheduler is gone (not what
    the job raised)."""
    from distributed import CancelledError
    from distributed.comm.core import CommClosedError
    from distributed.scheduler import KilledWorker
    return CancelledError, CommClosedError, KilledWorker, ConnectionError


def _as_concurrent(dask_future) -> Future:
    """A ``concurrent.futures.Future`` that follows ``dask_future``; a job lost with its
    worker or the scheduler ends in ``MeasurementLost``, never in a measurement."""
    future: Future = Future()
    future.set_running_or_notify_cancel()

    def done(f):
        try:
            if f.status == "finished":
                future.set_result(f.result())
            elif f.status == "cancelled":
                future.set_exception(_lost("it was cancelled (the scheduler or the client is gone)"))
            else:
                err = f.exception()
                future.set_exception(_lost("its workers died", err) if isinstance(err, _cluster_errors()) else err)
        except BaseException as err:  # noqa: BLE001 - whatever happens, the caller hears of it
            if not future.done():   # (only the cluster's failures are a lost job; others are errors)
                lost = isinstance(err, (*_cluster_errors(), OSError, TimeoutError))
                future.set_exception(_lost("the cluster did not answer", err) if lost else err)

    dask_future.add_done_callback(done)
    future._dask_future = dask_future  # keeps the Dask job alive while someone waits for it
    return future


# on the Dask worker ------------------------------------------------------------------------

_pools: dict = {}
_lock = threading.Lock()
_files_dir: list = []


def _pool(role: str) -> WorkerPool:
    """This worker's pool of child processes for ``role`` (started on first use)."""
    try:
        from distributed import get_worker
        where = get_worker().address
    except (ImportError, ValueError):
        where = ""
    with _lock:
        pool = _pools.get((role, where))
        if pool is None:
            n = (os.cpu_count() or 1) if role == "build" else 1
            pool = _pools[(role, where)] = WorkerPool(n, name=f"autosched-dask-{role}", preload=WORKER_PRELOAD,
                                                      memory_limit=memory_share(n))
        return pool


def _local_file(name: str, data: bytes) -> str:
    """The path of this machine's copy of a shipped file (written once per process)."""
    with _lock:
        if not _files_dir:
            _files_dir.append(tempfile.mkdtemp(prefix="autosched-dask-"))
            atexit.register(shutil.rmtree, _files_dir[0], True)
        path = os.path.join(_files_dir[0], os.path.basename(name))
        if not os.path.exists(path):
            with open(f"{path}.tmp", "wb") as f:
                f.write(data)
            os.replace(f"{path}.tmp", path)
        return path


def isolated_call(role: str, timeout: float | None, fn, args: tuple, files: dict):
    """A Dask job: ``fn(*args)`` in a child process of this worker's ``role`` pool, with
    the shipped ``files`` ({argument index: (name, bytes)}) as local paths."""
    args = list(args)
    for i, (name, data) in files.items():
        args[i] = _local_file(name, data)
    return _pool(role).submit_timed(timeout, fn, *args).result()


# the builder and the runner ----------------------------------------------------------------

class DaskBuilder(LocalBuilder):
    """``LocalBuilder`` on a Dask cluster (see the module docstring). ``address_or_client``:
    the scheduler's address (``tcp://host:8786``) or a ``distributed.Client`` (left open:
    the caller's to close); ``resources``: the worker resources a build asks for (None:
    any worker)."""

    def __init__(self, address_or_client, timeout: float = 15.0, resources: dict | None = None):
        super().__init__(timeout=timeout)
        self.address_or_client, self.resources = address_or_client, resources

    @property
    def executor(self) -> DaskExecutor:
        if self._executor is None:
            self._executor = DaskExecutor(self.address_or_client, "build", self.resources)
        return self._executor


class DaskRunner(LocalRunner):
    """``LocalRunner`` on a Dask cluster (see the module docstring): the runner options are
    ``LocalRunner``'s; ``address_or_client`` as ``DaskBuilder``'s; ``resources``: what a
    run job asks for (default ``{"runner": 1}``: the workers started with ``--resources
    "runner=1"``, one run at a time on each)."""

    def __init__(self, address_or_client, resources: dict | None = None, **options):
        if "executor" in options or "n_parallel" in options:
            raise TypeError("DaskRunner runs on the Dask workers: it takes no executor or n_parallel")
        super().__init__(**options)
        self.address_or_client = address_or_client
        self.resources = RUNNER_RESOURCES if resources is None else resources

    @property
    def executor(self) -> DaskExecutor:
        if self._executor is None:
            self._executor = DaskExecutor(self.address_or_client, "run", self.resources)
        return self._executor

    def prepare(self, task) -> None:
        """Nothing: a task's reference is computed on the cluster and shipped to its
        workers when its first program runs (``_compute_reference``)."""

    def _compute_reference(self, task) -> ShippedFile:
        key, payload = task_payload(task)
        return self.executor.ship(f"{key}-{self.options.seed}.npz", self.reference_timeout,
                                  reference_bytes_job, key, payload, self.options.seed)
