"""``autosched.InferenceSession``: onnxruntime's Python surface over an ONNX model or a
compiled artifact, so that switching is one import.

An ``.onnx`` file runs in this process through ``GraphExecutor`` (tuned programs from
``log_file``, zero-trial programs for the rest: the compiler is imported, and kernels are
built, when the session is made); anything else is read as an artifact (``autosched
compile``) and runs through ``autosched.runtime`` with numpy and ctypes only. Calls from
several threads are safe: one session runs one call at a time, different sessions at once.
"""
from __future__ import annotations

import ctypes
import os
import threading

from dataclasses import dataclass

import numpy as np

from .runtime import Model, TensorInfo
from .runtime.model import input_arrays


@dataclass(frozen=True)
class NodeArg:
    """An input or output as onnxruntime describes it: name, shape (a list), type ("tensor(float)")."""
    name: str
    shape: list
    type: str


def _node_args(infos) -> list[NodeArg]:
    return [NodeArg(i.name, list(i.shape), i.type) for i in infos]


class _ExecutorModel:
    """A GraphExecutor behind the runtime Model's surface (inputs, outputs, run)."""

    def __init__(self, path, log_file, num_threads, input_shapes):
        import warnings

        from .deploy import import_model
        from .graph import GraphExecutor
        from .history.records import UntunedWorkloadWarning
        if log_file is not None and not os.path.isfile(log_file):
            raise FileNotFoundError(f"no tuning log at {log_file!r}")
        part, output_names = import_model(path, input_shapes)
        with warnings.catch_warnings():
            if log_file is None:   # zero-trial programs were asked for: no warning that they are untuned
                warnings.simplefilter("ignore", UntunedWorkloadWarning)
            self.executor = GraphExecutor(part, log_file=log_file)
        graph, model = part.graph, part.original   # the model's own dtypes (a float16 model's in float16)
        self.inputs = [TensorInfo(n.name, tuple(n.shape), np.dtype(d)) for n, d in zip(graph.inputs, model.input_dtypes)]
        self.outputs = [TensorInfo(name, tuple(n.shape), np.dtype(d))
                        for n, name, d in zip(graph.outputs, output_names, model.output_dtypes)]
        self.num_threads = num_threads
        self._lock = threading.Lock()

    def run(self, inputs) -> list[np.ndarray]:
        arrays = input_arrays(self.inputs, inputs)
        with self._lock:   # the executor's buffers are one
            if self.num_threads is None:
                return self.executor.run(*arrays)
            gomp = ctypes.CDLL("libgomp.so.1")   # loaded already by the kernels; the team size is per thread
            previous = gomp.omp_get_max_threads()
            gomp.omp_set_num_threads(self.num_threads)
            try:
                return self.executor.run(*arrays)
            finally:
                gomp.omp_set_num_threads(previous)


class InferenceSession:
    """``InferenceSession(path, log_file=None, num_threads=None)``: ``path`` an ``.onnx``
    model (run with the tuned programs of ``log_file``, zero-trial programs without one;
    ``input_shapes`` fixes dimensions it leaves open) or a compiled artifact (``spin``: the
    OpenMP spin policy, see ``autosched.runtime.set_spin_policy``)."""

    def __init__(self, path, log_file=None, num_threads: int | None = None, spin: str | None = None,
                 input_shapes: dict | None = None):
        if num_threads is not None and (not isinstance(num_threads, int) or num_threads < 1):
            raise ValueError(f"num_threads must be a positive integer or None, got {num_threads!r}")
        path = os.fspath(path)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"no model at {path!r} (expected an .onnx file or an artifact of "
                                    "`autosched compile`)")
        if path.endswith(".onnx"):
            self._model = _ExecutorModel(path, log_file, num_threads, input_shapes)
        else:
            if log_file is not None or input_shapes is not None:
                raise ValueError(f"{path!r} is read as a compiled artifact: its programs and shapes are in it, "
                                 "log_file and input_shapes are for .onnx models")
            self._model = Model(path, num_threads=num_threads, spin=spin)
        self.path = path

    def get_inputs(self) -> list[NodeArg]:
        return _node_args(self._model.inputs)

    def get_outputs(self) -> list[NodeArg]:
        return _node_args(self._model.outputs)

    def run(self, output_names, input_feed: dict, run_options=None) -> list[np.ndarray]:
        """The outputs named ``output_names`` (None: all, in the model's order) on
        ``input_feed`` ({input name: array}); ``run_options`` is accepted for onnxruntime's
        signature and must be None."""
        if run_options is not None:
            raise ValueError("run_options is not supported (it must be None)")
        if not isinstance(input_feed, dict):
            raise TypeError(f"input_feed must be a dict of input name -> numpy array, got {type(input_feed).__name__}")
        names = [o.name for o in self._model.outputs]
        if output_names is not None:
            unknown = [n for n in output_names if n not in names]
            if unknown:
                raise ValueError(f"unknown output names {unknown}; the model's outputs are {names}")
        outputs = self._model.run(input_feed)
        if output_names is None:
            return outputs
        return [outputs[names.index(n)] for n in output_names]

    def __repr__(self) -> str:
        return f"InferenceSession({self.path!r})"
