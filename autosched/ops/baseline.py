"""numpy's own float32 routine for a workload, where numpy has one: what a user would call
instead of a tuned kernel, so the speed to compare with. The references in ``reference``
compute in float64 for checking results, and are no measure of numpy's speed."""
from __future__ import annotations

from typing import Callable

import numpy as np


def numpy_routine(w, inputs) -> Callable[[], object] | None:
    """A call of numpy's fastest float32 routine for workload ``w`` on ``inputs``:
    ``np.matmul`` (BLAS) for matmul and batch_matmul, a BLAS dot per row for the norm;
    None for operators numpy has no routine for (convolutions...)."""
    p = w.params
    if w.name in ("matmul", "batch_matmul"):
        a, b = inputs[0], inputs[1]
        a = np.swapaxes(a, -1, -2) if p.get("transpose_a") else a
        b = np.swapaxes(b, -1, -2) if p.get("transpose_b") else b
        return lambda: np.matmul(a, b)
    if w.name == "norm":
        flat = inputs[0].reshape(inputs[0].shape[0], -1)
        return lambda: np.sqrt(np.array([np.dot(r, r) for r in flat]))
    return None
