"""A compiled model loaded from its artifact, run through the C entry points of its library.

The Python runtime and a C program use the same functions (``autosched.h``): Python checks
what it can say more clearly first (the format, the autosched version, the CPU, the
library's checksum), then ``autosched_model_load`` maps the weights and prepares the calls.
A run releases the GIL: different models run at the same time from different threads; one
model runs one call at a time (its arena is one), in the order the calls arrive.
"""
from __future__ import annotations

import atexit
import ctypes
import os
import shutil
import tempfile
import threading
from dataclasses import dataclass

import numpy as np

from . import artifact, cpu, openmp


@dataclass(frozen=True)
class TensorInfo:
    """An input or output of a model: onnxruntime's ``NodeArg`` (``type`` is "tensor(float)")."""
    name: str
    shape: tuple
    dtype: np.dtype

    @property
    def type(self) -> str:
        return f"tensor({_ONNX_TYPE_NAMES.get(self.dtype.name, self.dtype.name)})"


_ONNX_TYPE_NAMES = {"float32": "float", "float64": "double", "int64": "int64", "int32": "int32", "float16": "float16",
                    "bfloat16": "bfloat16",
                    "int8": "int8", "uint8": "uint8", "bool": "bool"}


def _version() -> str:
    from .. import __version__
    return __version__


def _tensors(entries) -> tuple[list[TensorInfo], list[np.dtype]]:
    """The model's inputs or outputs as its users see them (a float16 ONNX model's in float16)
    and the dtypes the library computes them in (the manifest's ``dtype``)."""
    infos = [TensorInfo(e["name"], tuple(e["shape"]), _dtype(e.get("model_dtype", e["dtype"]))) for e in entries]
    return infos, [_dtype(e["dtype"]) for e in entries]


def _dtype(name: str) -> np.dtype:
    """numpy's dtype of ``name``; bfloat16 (a bfloat16 ONNX model's interface) is ml_dtypes'."""
    if name == "bfloat16":
        try:
            import ml_dtypes  # noqa: F401 - registers the dtype with numpy
        except ImportError:
            raise artifact.ArtifactError("the model takes or returns bfloat16 arrays, which need the ml_dtypes "
                                         "package (pip install ml_dtypes)") from None
    return np.dtype(name)


def _check_runnable(path: str, manifest: dict) -> None:
    if manifest.get("autosched_version") != _version():
        raise artifact.ArtifactError(f"{path!r} was compiled by autosched {manifest.get('autosched_version')}; this "
                                     f"is autosched {_version()}: compile the model again with it")
    lacking = cpu.missing(manifest.get("cpu", {}))
    if lacking:
        raise artifact.ArtifactError(f"{path!r} was compiled for {manifest['cpu'].get('name')}; this CPU lacks "
                                     f"what its code uses: {', '.join(lacking)}. Compile the model on (or for) "
                                     "this machine")


def input_arrays(infos: list[TensorInfo], inputs, computed=None) -> list[np.ndarray]:
    """``inputs`` (a list in the order of ``infos``, or a dict by name) checked against the
    model's inputs: C-contiguous arrays of the right dtypes and shapes, in order, converted
    to the dtypes ``computed`` gives (default: as they are)."""
    names = [i.name for i in infos]
    if isinstance(inputs, dict):
        unknown = sorted(set(inputs) - set(names))
        absent = [n for n in names if n not in inputs]
        if unknown or absent:
            raise ValueError(f"the model's inputs are {names}; got {sorted(inputs)}"
                             + (f" (missing {absent})" if absent else "")
                             + (f" (unknown {unknown})" if unknown else ""))
        inputs = [inputs[n] for n in names]
    inputs = list(inputs)
    if len(inputs) != len(infos):
        raise ValueError(f"the model takes {len(infos)} inputs ({', '.join(names)}), got {len(inputs)}")
    arrays = []
    for info, x in zip(infos, inputs):
        if not isinstance(x, np.ndarray):
            raise TypeError(f"input '{info.name}' must be a numpy array, got {type(x).__name__}")
        if x.dtype != info.dtype:
            raise TypeError(f"input '{info.name}' has dtype {x.dtype}, the model expects {info.dtype}")
        if x.shape != info.shape:
            raise ValueError(f"input '{info.name}' has shape {x.shape}, the model expects {info.shape}")
        arrays.append(np.ascontiguousarray(x))
    if computed is not None:
        arrays = [a if a.dtype == d else a.astype(d) for a, d in zip(arrays, computed)]
    return arrays


#: path -> (device, inode) of the file this process loaded under that name
_loaded_files: dict[str, tuple[int, int]] = {}
_aliases_folder: list[str] = []


def _open_library(path: str) -> ctypes.CDLL:
    """``ctypes.CDLL(path)``, but never a library this process loaded before from a file since
    replaced at ``path`` (compiling again to the same name): the dynamic loader hands back
    whatever it loaded under a name it has seen, so a replaced file is opened under a name of
    its own (a symbolic link in a private folder, named by the file's inode); the loader still
    shares one copy of each file."""
    info = os.stat(path)
    file_id = (info.st_dev, info.st_ino)
    name = path
    if _loaded_files.setdefault(path, file_id) != file_id:
        if not _aliases_folder:
            folder = tempfile.mkdtemp(prefix="autosched-libs-")
            atexit.register(shutil.rmtree, folder, True)
            _aliases_folder.append(folder)
        name = os.path.join(_aliases_folder[0], f"{info.st_dev}-{info.st_ino}-{os.path.basename(path)}")
        if not os.path.lexists(name):
            os.symlink(path, name)
    return ctypes.CDLL(name)


class Model:
    """A compiled model (``autosched compile``) ready to run: ``run(inputs)``.

    ``num_threads``: the OpenMP team size of its runs (None: OpenMP's default, one thread a
    core); ``spin``: how idle OpenMP threads wait ("short", "active", "passive"; see
    ``openmp.set_spin_policy``: a setting of the process, fixed when OpenMP loads)."""

    def __init__(self, path: str, num_threads: int | None = None, spin: str | None = None):
        path = os.path.abspath(os.fspath(path))   # dlopen searches the library path for a bare name
        if num_threads is not None and (not isinstance(num_threads, int) or num_threads < 1):
            raise ValueError(f"num_threads must be a positive integer or None, got {num_threads!r}")
        sections = artifact.read_sections(path)
        manifest = artifact.read_manifest(path, sections)
        _check_runnable(path, manifest)
        artifact.check_library(path, sections, manifest)
        openmp.set_spin_policy(spin)
        self.path, self.manifest = path, manifest
        self.inputs, self._input_dtypes = _tensors(manifest["inputs"])
        self.outputs, self._output_dtypes = _tensors(manifest["outputs"])
        try:
            self._lib = _open_library(path)
        except OSError as err:
            raise artifact.ArtifactError(f"{path!r}: the dynamic loader cannot load its library: {err}") from None
        try:
            self._bind()
        except AttributeError as err:   # a library with a trailer, but not an artifact's
            raise artifact.ArtifactError(f"{path!r} has no autosched entry points ({err})") from None
        handle = self._lib.autosched_model_load(path.encode())
        if not handle:
            raise artifact.ArtifactError(self._lib.autosched_last_error().decode())
        self._handle = ctypes.c_void_p(handle)
        self._lock = threading.Lock()
        if num_threads is not None:
            self._lib.autosched_model_set_num_threads(self._handle, num_threads)
        self.num_threads = num_threads

    def _bind(self) -> None:
        lib = self._lib
        lib.autosched_model_load.restype = ctypes.c_void_p
        lib.autosched_model_load.argtypes = [ctypes.c_char_p]
        lib.autosched_model_run.restype = ctypes.c_int
        lib.autosched_model_run.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        lib.autosched_model_free.argtypes = [ctypes.c_void_p]
        lib.autosched_model_set_num_threads.argtypes = [ctypes.c_void_p, ctypes.c_int]
        lib.autosched_last_error.restype = ctypes.c_char_p

    def _output_arrays(self, outputs) -> list[np.ndarray]:
        if outputs is None:
            return [np.empty(o.shape, o.dtype) for o in self.outputs]
        outputs = list(outputs)
        if len(outputs) != len(self.outputs):
            raise ValueError(f"the model has {len(self.outputs)} outputs, got {len(outputs)} arrays for them")
        for info, y in zip(self.outputs, outputs):
            if not isinstance(y, np.ndarray) or y.dtype != info.dtype or y.shape != info.shape:
                got = f"{y.dtype} {y.shape}" if isinstance(y, np.ndarray) else type(y).__name__
                raise ValueError(f"output '{info.name}' needs a {info.dtype} array of shape {info.shape}, got {got}")
            if not y.flags.writeable:
                raise ValueError(f"output '{info.name}' is a read-only array; pass a writeable one such as "
                                 f"np.empty({info.shape}, '{info.dtype}')")
            if not y.flags.c_contiguous:
                raise ValueError(f"output '{info.name}' is not C-contiguous; pass np.empty({info.shape}, "
                                 f"'{info.dtype}')")
        return outputs

    def run(self, inputs, outputs=None) -> list[np.ndarray]:
        """The model's outputs on ``inputs`` (a list in the model's order, or a dict by
        name), written into ``outputs`` when given (writeable arrays), else new arrays."""
        ins, outs = input_arrays(self.inputs, inputs, self._input_dtypes), self._output_arrays(outputs)
        # the library writes outputs in the dtypes it computes; a float16 model's are converted after
        native = [y if y.dtype == d else np.empty(y.shape, d) for y, d in zip(outs, self._output_dtypes)]
        in_ptrs = (ctypes.c_void_p * max(len(ins), 1))(*[a.ctypes.data for a in ins])
        out_ptrs = (ctypes.c_void_p * max(len(native), 1))(*[a.ctypes.data for a in native])
        with self._lock:   # also keeps close() from freeing the model under a run
            if self._handle is None:
                raise RuntimeError(f"the model {self.path!r} is closed")
            status = self._lib.autosched_model_run(self._handle, in_ptrs, out_ptrs)
            if status:
                message = self._lib.autosched_last_error().decode()
                kind = MemoryError if "MemoryError" in message else RuntimeError
                raise kind(message)
        for y, computed in zip(outs, native):
            if y is not computed:
                np.copyto(y, computed, casting="same_kind")
        return outs

    def close(self) -> None:
        """Free the model's memory now (else when it is garbage-collected)."""
        lock = getattr(self, "_lock", None)
        if lock is None:
            return
        with lock:
            if self._handle is not None:
                self._lib.autosched_model_free(self._handle)
                self._handle = None

    def __del__(self):
        self.close()

    def __repr__(self) -> str:
        ins = ", ".join(f"{i.name}{list(i.shape)}:{i.dtype}" for i in self.inputs)
        outs = ", ".join(f"{o.name}{list(o.shape)}:{o.dtype}" for o in self.outputs)
        return f"Model({self.path!r}: {ins} -> {outs})"
