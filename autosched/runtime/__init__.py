"""Run a compiled model (``autosched compile``, an ``.aso`` artifact) with numpy and ctypes
only: no compiler, no cost model, no ONNX. ``Model(path).run(inputs)``.

The C interface of the same artifact is ``include/autosched.h`` (``header_path()``)."""
from __future__ import annotations

import os

from .artifact import ArtifactError, read_manifest
from .model import Model, TensorInfo
from .openmp import SPIN_POLICIES, set_spin_policy


def header_path() -> str:
    """The C header of the artifact's entry points (autosched_model_load/run/free)."""
    return os.path.join(os.path.dirname(__file__), "include", "autosched.h")


__all__ = ["Model", "TensorInfo", "ArtifactError", "read_manifest", "set_spin_policy", "SPIN_POLICIES",
           "header_path"]
