"""autosched: a template-free auto-scheduler for tensor programs, after Ansor.

The product layer: the operator library (``autosched.ops``), measurement
(``autosched.measure``: builders, runners, verification), tuning records
(``autosched.history``), compiled models (``autosched.compile``, ``autosched.runtime``,
``autosched.InferenceSession``) and the command line (``autosched``). The compiler it drives
is the ``ir`` package.

Names are imported on first use (PEP 562), so that ``import autosched.runtime`` loads a
compiled model with numpy and ctypes only: nothing here imports the compiler (llvmlite,
xgboost, networkx) until a name that needs it is asked for.
"""
from __future__ import annotations

import importlib
import importlib.util

__version__ = "0.1.0"

#: public name -> the submodule (relative to this package) that defines it
_EXPORTS = {
    "auto_schedule": ".tune", "TuneResult": ".tune", "TuneOptions": ".options",
    "generate_sketches": ".space",
    "register_sketch_rule": "sketch_rules", "unregister_sketch_rule": "sketch_rules",
    # measurement
    **dict.fromkeys(["MAX_COST", "BuildResult", "DaskBuilder", "DaskRunner", "LocalBuilder", "LocalRunner",
                     "MeasureErrorNo", "MeasureInput", "MeasureResult", "MeasurementLost", "ProgramMeasurer",
                     "TooManyMeasureErrors"],
                    ".measure"),
    **dict.fromkeys(["WorkerCrashed", "WorkerPool", "WorkerTimeout"], ".workers"),
    # records
    **dict.fromkeys(["NotATuningLog", "RecordToFile", "TuningRecord", "UntunedWorkloadWarning",
                     "best_record", "best_records", "distill_records", "load_records",
                     "read_records", "save_records"], ".history.records"),
    "apply_history_best": ".history.apply",
    # networks
    "tune_networks": ".networks", "NetworkTuneResult": ".networks",
    "from_onnx": ".graph", "from_torch": ".graph",
    # deployment
    "compile": ".deploy", "InferenceSession": ".session",
}
#: the main subpackages (every submodule is reachable as an attribute: ``autosched.graph.partition``)
_SUBMODULES = ("ops", "graph", "runtime", "deploy", "measure", "history", "networks", "workers", "cli")

#: (``compile`` is public but not in ``__all__``: ``from autosched import *`` must not hide the builtin)
__all__ = ["__version__", *_SUBMODULES[:2], *(name for name in _EXPORTS if name != "compile")]


def __getattr__(name: str):
    if name in _EXPORTS:
        where = _EXPORTS[name]
        value = getattr(importlib.import_module(where, __name__ if where.startswith(".") else None), name)
    elif not name.startswith("__") and importlib.util.find_spec(f"{__name__}.{name}") is not None:
        value = importlib.import_module(f".{name}", __name__)   # any submodule, as an eager package had it
    else:
        raise AttributeError(f"module 'autosched' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS) | set(_SUBMODULES))
