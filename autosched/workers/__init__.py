"""Isolated worker processes behind the ``concurrent.futures.Executor`` interface: what
measurement (builders, runners) and the search (its islands) run their jobs in."""
from .pool import WorkerCrashed, WorkerPool, WorkerTimeout, memory_share

__all__ = ["WorkerPool", "WorkerCrashed", "WorkerTimeout", "memory_share"]
