"""``autosched.compile``: a tuned model out of the tuner, into one artifact file.

The artifact (``runtime/artifact.py`` has its layout) is a shared library holding every kernel
of the model and the network driver (``loader.c``, with the plan of ``plan.py``), followed by
the weights in the layout the kernels read and a manifest. It is made from a ``GraphExecutor``
of the model, so it runs exactly the programs, calls and memory plan that ``autosched run``
runs; ``autosched.runtime`` (numpy and ctypes) or a C program loads it.
"""
from __future__ import annotations

import os
import secrets
import tempfile
import time
import warnings
import zlib

import numpy as np

import ir
from .. import __version__
from ..graph import GraphExecutor, PartitionedGraph, partition
from ..graph.graph import Graph
from ..history.records import HistoryBest, UntunedWorkloadWarning
from ..runtime import artifact, cpu
from .native import LinkError, NoCCompiler, c_compiler, kernel_object, link
from .plan import plan_network, plan_header

__all__ = ["compile", "compile_executor", "import_model", "NoCCompiler", "LinkError", "c_compiler"]


def import_model(model, input_shapes: dict | None = None, winograd: bool = True) -> tuple[PartitionedGraph, list[str]]:
    """``model`` (a Graph, PartitionedGraph, onnx.ModelProto or .onnx path) partitioned (as
    ``graph.partition(winograd=)``: as it was tuned), and the names of its outputs (an ONNX
    model's own: its graph's output nodes are named by the importer)."""
    if isinstance(model, PartitionedGraph):
        return model, [n.name for n in model.graph.outputs]
    if isinstance(model, Graph):
        return partition(model, winograd=winograd), [n.name for n in model.outputs]
    is_path = isinstance(model, (str, os.PathLike))
    if (is_path and str(model).endswith(".onnx")) or type(model).__name__ == "ModelProto":
        from ..graph.onnx import from_onnx, load_model
        proto = load_model(str(model) if is_path else model)
        name = proto.graph.name or (os.path.splitext(os.path.basename(str(model)))[0] if is_path else "onnx_model")
        graph = from_onnx(proto, dict(input_shapes or {}), name=name)
        return partition(graph, winograd=winograd), [o.name for o in proto.graph.output]
    raise TypeError(f"expected a Graph, a PartitionedGraph, an onnx.ModelProto or the path of an .onnx file; "
                    f"got {model!r}")


def _tensors(nodes, names, model_dtypes) -> list[dict]:
    """Manifest entries: ``dtype`` is what the library's entry points take (as the C API's
    ``autosched_tensor_info``), ``model_dtype`` the model's own where it differs (a float16
    ONNX model, computed in float32: the Python runtime casts at the border, as its executor)."""
    entries = []
    for n, name, model_dtype in zip(nodes, names, model_dtypes):
        entry = {"name": name, "shape": list(n.shape), "dtype": str(np.dtype(n.dtype)), "layout": "row-major"}
        if np.dtype(model_dtype) != np.dtype(n.dtype):
            entry["model_dtype"] = str(np.dtype(model_dtype))
        entries.append(entry)
    return entries


def _cpu() -> dict:
    """What the code compiled here needs of a CPU (the manifest's ``cpu``)."""
    name, features = ir.cpu.runtime.host_cpu()
    llvm_features = [f for f in features.split(",") if f.startswith("+")]
    return {"arch": cpu.machine(), "name": name, "llvm_features": llvm_features,
            "flags": cpu.required_flags(llvm_features)}


def _manifest(executor: GraphExecutor, plan, output_names, log_file, build_id: bytes, library: bytes,
              cpu_needs: dict) -> dict:
    part = executor.partitioned
    history = HistoryBest(log_file, ir.host_target()) if log_file is not None else None
    symbol_of = {id(k): s for s, k in plan.kernels.items()}
    tasks, records = [], []
    for w in part.workloads:
        prog = executor.programs.get(w.workload_key)
        if prog is None:     # reshapes only: views, no kernel
            continue
        how = "tuned" if prog.tuned else "zero-trial" if prog.zero_trial else "default schedule"
        tasks.append({"workload_key": w.workload_key, "desc": w.desc, "calls": w.weight, "task": w in part.tasks,
                      "program": how, "kernel": symbol_of.get(id(prog.kernel))})
        if prog.tuned and history is not None and w.workload_key in history.best:
            records.append(history.best[w.workload_key].to_dict())
    return {
        "format": artifact.FORMAT, "autosched_version": __version__, "model": part.name,
        "build_id": build_id.hex(), "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "inputs": _tensors(executor.graph.inputs, [n.name for n in executor.graph.inputs],
                           part.original.input_dtypes),
        "outputs": _tensors(executor.graph.outputs, output_names, part.original.output_dtypes),
        "arena": {"bytes": plan.arena_bytes, "without_reuse_bytes": executor.memory.naive_bytes,
                  "tensors": len(executor.memory.offsets)},
        "weights": {"bytes": len(plan.weights)},
        "cpu": cpu_needs,
        "library": {"bytes": len(library), "crc32": zlib.crc32(library), "kernels": len(plan.kernels),
                    "calls": len(plan.calls)},
        "log_file": os.path.abspath(log_file) if log_file is not None else None,
        "tasks": tasks, "records": records,
        "untuned_tasks": [t["desc"] for t in tasks if t["task"] and t["program"] != "tuned"],
    }


def compile(model, log_file=None, output=None, input_shapes: dict | None = None, base_model="default",
            winograd: bool = True, records_db="default") -> str:
    """Compile ``model`` (a Graph, PartitionedGraph, onnx.ModelProto or .onnx path; open
    input dimensions fixed by ``input_shapes``) with the best programs of ``log_file`` (tasks
    without one get their zero-trial program, said in the manifest; ``base_model`` and
    ``records_db`` as for ``GraphExecutor``; ``winograd`` as ``graph.partition``, as the model was tuned) into the
    artifact ``output`` (default: the model's name + ".aso"); returns its path."""
    c_compiler()   # before any work: say at once that there is no linker
    if log_file is not None and not os.path.isfile(log_file):
        raise FileNotFoundError(f"no tuning log at {log_file!r}")
    part, output_names = import_model(model, input_shapes, winograd)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UntunedWorkloadWarning)   # the manifest says which
        executor = GraphExecutor(part, log_file=log_file, base_model=base_model, records_db=records_db)
    return compile_executor(executor, output, output_names, log_file)


def compile_executor(executor: GraphExecutor, output=None, output_names=None, log_file=None) -> str:
    """The artifact of a built ``GraphExecutor``: its programs, calls and memory plan as they
    are (``output_names``: the outputs' names, default the graph's; ``log_file``: where its
    tuned programs came from, for the manifest's records)."""
    c_compiler()
    output = str(output) if output is not None else f"{executor.partitioned.name}.aso"
    output_names = list(output_names or [n.name for n in executor.graph.outputs])
    plan = plan_network(executor)
    build_id = secrets.token_bytes(16)
    cpu_needs = _cpu()
    with tempfile.TemporaryDirectory(prefix="autosched-compile-") as folder:
        objects = {f"{s}.o": kernel_object(k, s) for s, k in plan.kernels.items()}
        header = plan_header(plan, executor.graph, output_names, build_id, cpu_needs["name"], cpu_needs["flags"])
        library = link(objects, header, folder)
    manifest = _manifest(executor, plan, output_names, log_file, build_id, library, cpu_needs)
    artifact.write(output, library, bytes(plan.weights), manifest, build_id)
    return output
