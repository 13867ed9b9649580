"""Measurement that survives bad programs.

- ``LocalBuilder``: lowers and compiles candidates in worker processes, in parallel, each
  under a timeout; the artefact is a native object.
- ``LocalRunner``: runs each compiled program in a worker process: verification against
  the naive program, then timing (``number``/``repeat``/``min_repeat_ms``, optional CPU
  cache flush, adaptive repeats that stop once the timing has settled).
- ``ProgramMeasurer``: the object a search policy calls once per round
  (``measure(task, states) -> list[MeasureResult]``), with records, the best program so
  far, deduplication, error counts and the early stop of all-error runs.
- ``DaskBuilder``/``DaskRunner`` (``autosched.measure.dask``): the same on the machines of
  a Dask ``distributed`` cluster, each program still in an isolated child process there.
Both run in ``autosched.workers.WorkerPool``s (isolated processes under a memory limit; a
crashed or hung worker is killed and replaced) or in any ``concurrent.futures.Executor``.
Results go to the callers through callbacks (the tuning log is one, ``autosched.history.records``).
"""
from .common import MAX_COST, BuildResult, MeasureErrorNo, MeasureInput, MeasureResult, MeasurementLost
from .builder import LocalBuilder
from .runner import LocalRunner
from .measurer import ProgramMeasurer, TooManyMeasureErrors
from .dask import DaskBuilder, DaskRunner

__all__ = ["MAX_COST", "BuildResult", "MeasureErrorNo", "MeasureInput", "MeasureResult",
           "LocalBuilder", "LocalRunner", "DaskBuilder", "DaskRunner", "ProgramMeasurer", "TooManyMeasureErrors",
           "MeasurementLost"]
