"""Verification: a measured program's outputs against the reference (the naive program of
its DAG) on random inputs, within a tolerance that fits the dtype and reduction length.

A transformed program may sum in another order (split reductions, rfactor, vector lanes,
FMA contraction), so float outputs agree only up to rounding that grows with the length
of the reduction: ``rtol = 100 * eps(dtype) * sqrt(reduction length)`` (float32: 1.2e-5
for an elementwise op, 2.7e-4 for a 512-long dot product), with an absolute floor of
``rtol * max |reference|`` so that entries near zero (cancellation) do not fail a correct
program. Outputs start filled with NaN (or a sentinel for integers), so a program that
leaves part of an output unwritten is caught too.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

import ir

#: the seed of the verification inputs (fixed, so that every program sees the same data)
DEFAULT_SEED = 0


def random_inputs(dag, seed: int = DEFAULT_SEED) -> list[np.ndarray]:
    """Random values for the DAG's inputs, in order: standard normal floats, small
    integers, random booleans. The naive reference makes any values consistent."""
    rng = np.random.default_rng(seed)
    arrays = []
    for t in dag.inputs:
        dtype = np.dtype(t.dtype)
        if dtype == np.bool_:
            a = rng.integers(0, 2, size=t.shape).astype(bool)
        elif np.issubdtype(dtype, np.integer):
            a = rng.integers(-4, 5, size=t.shape).astype(dtype)
        else:
            a = rng.standard_normal(t.shape).astype(dtype)
        arrays.append(np.ascontiguousarray(a))
    return arrays


def output_buffers(dag) -> list[np.ndarray]:
    """Output arrays pre-filled with NaN (floats) or an unlikely sentinel (integers), so
    that elements a program leaves unwritten show up as differences (booleans: True)."""
    bufs = []
    for t in dag.outputs:
        dtype = np.dtype(t.dtype)
        if np.issubdtype(dtype, np.floating):
            fill = np.nan
        elif np.issubdtype(dtype, np.integer):
            fill = np.iinfo(dtype).min + 7
        else:
            fill = True
        bufs.append(np.full(t.shape, fill, dtype=dtype))
    return bufs


def reduction_length(dag) -> int:
    """The longest reduction of the DAG: the product of one op's reduce-axis extents,
    maximised over its ops (1 for a DAG without reductions)."""
    longest = 1
    for op in dag.compute_ops:
        longest = max(longest, math.prod(int(ax.extent) for ax in op.reduce_axis))
    return longest


def tolerance(dtype, reduce_len: int = 1) -> float:
    """Relative tolerance of a float output: ``100 * eps * sqrt(reduce_len)``, at most 5%.
    0 for integers and booleans (exact)."""
    dtype = np.dtype(dtype)
    if not np.issubdtype(dtype, np.floating):
        return 0.0
    return float(min(0.05, 100 * np.finfo(dtype).eps * math.sqrt(max(1, reduce_len))))


@dataclass
class Reference:
    """Inputs and the naive program's outputs on them, with each output's tolerances."""
    inputs: list[np.ndarray]
    outputs: list[np.ndarray]
    names: list[str]
    rtols: list[float]
    atols: list[float]

    def save(self, path: str) -> None:
        arrays = {f"in{i}": a for i, a in enumerate(self.inputs)}
        arrays.update({f"out{i}": a for i, a in enumerate(self.outputs)})
        np.savez(path, names=np.array(self.names), rtols=np.array(self.rtols),
                 atols=np.array(self.atols), n_in=len(self.inputs), n_out=len(self.outputs), **arrays)

    @classmethod
    def load(cls, path: str) -> "Reference":
        with np.load(path, allow_pickle=False) as f:
            n_in, n_out = int(f["n_in"]), int(f["n_out"])
            return cls([f[f"in{i}"] for i in range(n_in)], [f[f"out{i}"] for i in range(n_out)],
                       [str(n) for n in f["names"]], [float(x) for x in f["rtols"]],
                       [float(x) for x in f["atols"]])


def compute_reference(dag, seed: int = DEFAULT_SEED) -> Reference:
    """Build and run the naive program of ``dag`` once on ``random_inputs(dag, seed)``."""
    inputs = random_inputs(dag, seed)
    outputs = output_buffers(dag)
    ir.build(dag, dag.init_state(), name="reference", layout_rewrite=False)(*inputs, *outputs)
    return reference_of(dag, inputs, outputs)


def reference_of(dag, inputs: list[np.ndarray], outputs: list[np.ndarray]) -> Reference:
    """``outputs`` (what ``dag`` computes from ``inputs``, by any means) as the reference
    programs are compared with, with the tolerances for ``dag``'s dtypes and reductions."""
    reduce_len = reduction_length(dag)
    rtols, atols = [], []
    for out in outputs:
        rtol = tolerance(out.dtype, reduce_len)
        finite = np.abs(out[np.isfinite(out)]) if np.issubdtype(out.dtype, np.floating) else np.zeros(0)
        magnitude = float(finite.max()) if finite.size else 0.0
        rtols.append(rtol)
        atols.append(rtol * magnitude if magnitude > 0 else rtol)
    return Reference(inputs, outputs, [t.name for t in dag.outputs], rtols, atols)


def compare(outputs: list[np.ndarray], ref: Reference) -> str | None:
    """None if every output matches the reference within its tolerance; otherwise a
    message naming the first output that does not, how many elements differ and the worst."""
    for got, want, name, rtol, atol in zip(outputs, ref.outputs, ref.names, ref.rtols, ref.atols):
        if np.issubdtype(want.dtype, np.floating):
            bad = ~np.isclose(got, want, rtol=rtol, atol=atol, equal_nan=True)
        else:
            bad = got != want
        n_bad = int(np.count_nonzero(bad))
        if not n_bad:
            continue
        with np.errstate(invalid="ignore"):
            err = np.abs(got.astype(np.float64) - want.astype(np.float64))
        err = np.where(bad, np.nan_to_num(err, nan=np.inf), -1.0)
        worst = np.unravel_index(int(np.argmax(err)), want.shape) if want.ndim else ()
        return (f"output '{name}' differs from the reference (the naive program) in {n_bad} of {want.size} "
                f"elements beyond rtol={rtol:.2g}, atol={atol:.2g}; worst at {tuple(int(i) for i in worst)}: "
                f"got {got[worst].item()!r}, expected {want[worst].item()!r}")
    return None
