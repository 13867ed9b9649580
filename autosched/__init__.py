"""autosched: a template-free auto-scheduler for tensor programs, after Ansor.

The product layer: the operator library (``autosched.ops``), measurement
(``autosched.measure``: builders, runners, verification), tuning records
(``autosched.records``) and the command line (``autosched``). The compiler it drives is
the ``ir`` package.
"""
from . import ops
from .space import generate_sketches
from .tune import TuneResult, auto_schedule
from sketch_rules import register_sketch_rule, unregister_sketch_rule
from .measure import (MAX_COST, BuildResult, DaskBuilder, DaskRunner, LocalBuilder, LocalRunner, MeasureErrorNo,
                      MeasureInput, MeasureResult, ProgramMeasurer, TooManyMeasureErrors)
from .workers import WorkerCrashed, WorkerPool, WorkerTimeout
from . import graph
from .graph import from_onnx, from_torch
from .networks import NetworkTuneResult, tune_networks
from .records import (NotATuningLog, RecordToFile, TuningRecord, UntunedWorkloadWarning, apply_history_best,
                      best_record, best_records, distill_records, load_records, read_records, save_records)

__version__ = "0.1.0"
__all__ = ["ops", "__version__", "auto_schedule", "TuneResult", "generate_sketches", "register_sketch_rule", "unregister_sketch_rule",
           # measurement
           "MeasureInput", "MeasureResult", "MeasureErrorNo", "BuildResult", "MAX_COST",
           "LocalBuilder", "LocalRunner", "DaskBuilder", "DaskRunner", "ProgramMeasurer", "TooManyMeasureErrors",
           "WorkerPool", "WorkerCrashed", "WorkerTimeout",
           # records
           "TuningRecord", "RecordToFile", "NotATuningLog", "load_records", "read_records", "save_records", "best_records",
           "best_record", "distill_records", "apply_history_best", "UntunedWorkloadWarning",
           # networks
           "graph", "tune_networks", "NetworkTuneResult", "from_onnx", "from_torch"]
