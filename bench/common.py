"""Helpers shared by the benchmarks: machine description, fp32 peak, timing, output.

Every benchmark prints a table for people and, as its very last line, one JSON object for
machines (the contract ``ROW_KEYS`` and ``emit_json`` keep). The machine is shared and noisy, so benchmarks
time numpy and PyTorch in the same run and report ratios; the fp32 peak measured here is
the yardstick that makes a GFLOPS figure readable across machines.
"""
from __future__ import annotations

import argparse
import ctypes
import functools
import json
import os
import platform
import statistics
import time
from typing import Callable, Sequence

import llvmlite
import llvmlite.binding as llvm
import numpy as np

# a benchmark measures what it tunes in this run: it neither learns from nor adds to the
# user's records database unless asked (AUTOSCHED_RECORDS_DB=path); the base model stays on
os.environ.setdefault("AUTOSCHED_RECORDS_DB", "off")


def bench_args() -> argparse.ArgumentParser:
    """The parent parser of every benchmark: ``--smoke`` (CI-sized) and ``--json-only``."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--smoke", action="store_true",
                        help="a seconds-long run on tiny sizes, as CI runs it")
    parser.add_argument("--json-only", action="store_true",
                        help="print only the JSON line, not the table")
    return parser


# the machine -----------------------------------------------------------------------------

@functools.cache
def _host() -> tuple[str, llvm.FeatureMap]:
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    return llvm.get_host_cpu_name(), llvm.get_host_cpu_features()


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def torch_available() -> bool:
    """Whether PyTorch can be imported (a benchmark-only dependency)."""
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


@functools.cache
def machine_info() -> dict:
    """What the figures of a run depend on: CPU, cores, vector ISA, library versions."""
    cpu, features = _host()
    torch_version = None
    if torch_available():
        import torch
        torch_version = torch.__version__
    return {
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "llvm_cpu": cpu,
        "avx2": bool(features.get("avx2")),
        "avx512f": bool(features.get("avx512f")),
        "fma": bool(features.get("fma")),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "llvmlite": llvmlite.__version__,
        "torch": torch_version,
    }


# the fp32 peak ---------------------------------------------------------------------------

def _fma_peak_ir(lanes: int, accumulators: int, unroll: int) -> str:
    """LLVM IR of ``@fma_peak(ptr %closure)``: ``closure = {i64 iterations, i32 threads,
    ptr buf}``; each of ``threads`` libgomp threads runs ``iterations`` times ``unroll``
    steps of ``accumulators`` independent ``acc = fma(acc, a, b)`` on ``<lanes x float>``
    (a = buf[0], b = buf[1], loaded so nothing folds) and stores its sum to buf[2 + thread].
    Distinct initial values keep LLVM from merging the chains."""
    vt = f"<{lanes} x float>"
    fma = f"@llvm.fma.v{lanes}f32"
    splat = f"<{lanes} x i32> zeroinitializer"
    body = [
        "define internal void @fma_peak.body(ptr %closure) nounwind {",
        "entry:",
        "  %iters = load i64, ptr %closure, align 8",
        "  %buf.slot = getelementptr inbounds i8, ptr %closure, i64 16",
        "  %buf = load ptr, ptr %buf.slot, align 8",
        "  %a.s = load volatile float, ptr %buf, align 4",
        "  %b.p = getelementptr inbounds float, ptr %buf, i64 1",
        "  %b.s = load volatile float, ptr %b.p, align 4",
        f"  %a.0 = insertelement {vt} poison, float %a.s, i64 0",
        f"  %a = shufflevector {vt} %a.0, {vt} poison, {splat}",
        f"  %b.0 = insertelement {vt} poison, float %b.s, i64 0",
        f"  %b = shufflevector {vt} %b.0, {vt} poison, {splat}",
    ]
    for k in range(accumulators):
        body.append(f"  %init{k}.s = fadd float %b.s, {float(k):e}")
        body.append(f"  %init{k}.0 = insertelement {vt} poison, float %init{k}.s, i64 0")
        body.append(f"  %init{k} = shufflevector {vt} %init{k}.0, {vt} poison, {splat}")
    body += ["  br label %loop", "loop:", "  %i = phi i64 [0, %entry], [%i.next, %loop]"]
    for k in range(accumulators):
        body.append(f"  %acc{k}.0 = phi {vt} [%init{k}, %entry], [%acc{k}.{unroll}, %loop]")
    for u in range(unroll):
        for k in range(accumulators):
            body.append(f"  %acc{k}.{u + 1} = call {vt} {fma}({vt} %acc{k}.{u}, {vt} %a, {vt} %b)")
    body += [
        "  %i.next = add nuw i64 %i, 1",
        "  %more = icmp ult i64 %i.next, %iters",
        "  br i1 %more, label %loop, label %done",
        "done:",
    ]
    total = f"%acc0.{unroll}"
    for k in range(1, accumulators):
        body.append(f"  %sum{k} = fadd {vt} {total}, %acc{k}.{unroll}")
        total = f"%sum{k}"
    body += [
        f"  %s = call float @llvm.vector.reduce.fadd.v{lanes}f32(float 0.0, {vt} {total})",
        "  %tid = call i32 @omp_get_thread_num()",
        "  %slot = add i32 %tid, 2",
        "  %out = getelementptr inbounds float, ptr %buf, i32 %slot",
        "  store float %s, ptr %out, align 4",
        "  ret void",
        "}",
    ]
    return "\n".join([
        f"declare {vt} {fma}({vt}, {vt}, {vt})",
        f"declare float @llvm.vector.reduce.fadd.v{lanes}f32(float, {vt})",
        "declare i32 @omp_get_thread_num()",
        "declare void @GOMP_parallel(ptr, ptr, i32, i32)",
        *body,
        "define void @fma_peak(ptr %closure) nounwind {",
        "  %threads.slot = getelementptr inbounds i8, ptr %closure, i64 8",
        "  %threads = load i32, ptr %threads.slot, align 4",
        "  call void @GOMP_parallel(ptr @fma_peak.body, ptr %closure, i32 %threads, i32 0)",
        "  ret void",
        "}",
    ])


class _Closure(ctypes.Structure):
    _fields_ = [("iterations", ctypes.c_int64), ("threads", ctypes.c_int32), ("buf", ctypes.c_void_p)]


def jit(module: llvm.ModuleRef) -> llvm.ExecutionEngine:
    """MCJIT-compile an optimised module for the host, as ``ir.cpu.runtime.CompiledModule``
    does (the engine owns a target machine of its own). Keep the engine alive."""
    cpu, features = _host()
    tm = llvm.Target.from_default_triple().create_target_machine(
        cpu=cpu, features=features.flatten(), opt=3, reloc="default", codemodel="jitdefault")
    engine = llvm.create_mcjit_compiler(module, tm)
    engine.finalize_object()
    return engine


@functools.cache
def _fma_peak_kernel():
    """The JIT engine of the microkernel, its entry point and the FLOPs one thread does
    per loop iteration."""
    from ir.cpu.runtime import optimize  # O3 for the host CPU; also loads libgomp

    _, features = _host()
    lanes, accumulators = (16, 16) if features.get("avx512f") else (8, 12)
    unroll = 4
    engine = jit(optimize(_fma_peak_ir(lanes, accumulators, unroll)))
    entry = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(engine.get_function_address("fma_peak"))
    return engine, entry, 2 * lanes * accumulators * unroll


@functools.cache
def fp32_peak_gflops(threads: int = 1, seconds: float = 0.05, runs: int = 7) -> float:
    """The machine's fp32 peak in GFLOPS on ``threads`` threads: independent vector FMAs on
    the widest vector type the host has, enough chains to hide FMA latency; best of ``runs``
    runs of about ``seconds`` each (best, since noise only ever slows it down). Cached."""
    if not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads must be a positive int, got {threads!r}")
    _, entry, flops_per_iter = _fma_peak_kernel()
    buf = np.zeros(2 + threads, dtype=np.float32)
    buf[:2] = (0.999, 1e-3)
    closure = _Closure(1000, threads, buf.ctypes.data)
    arg = ctypes.addressof(closure)
    entry(arg)  # wake the thread pool
    while True:  # grow the loop until one run lasts `seconds`
        t0 = time.perf_counter()
        entry(arg)
        elapsed = time.perf_counter() - t0
        if elapsed >= seconds:
            break
        closure.iterations = int(closure.iterations * min(10.0, 1.2 * seconds / max(elapsed, 1e-6)))
    best = elapsed
    for _ in range(runs - 1):
        t0 = time.perf_counter()
        entry(arg)
        best = min(best, time.perf_counter() - t0)
    if not np.all(np.isfinite(buf[2:2 + threads])):
        raise RuntimeError(f"the FMA peak kernel computed {buf[2:]}; expected finite sums")
    return flops_per_iter * closure.iterations * threads / best / 1e9


# timing ----------------------------------------------------------------------------------

def _time_callable(fn: Callable[[], object], min_time: float, repeat: int) -> float:
    """Median seconds per call of ``fn()``: one warm-up call, then ``repeat`` measurements
    of ``number`` back-to-back calls, ``number`` grown so that each lasts ``min_time``."""
    fn()
    number = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        elapsed = time.perf_counter() - t0
        if elapsed >= min_time:
            break
        number = max(number * 2, int(number * min_time / max(elapsed, 1e-9) * 1.1))
    results = [elapsed / number]
    for _ in range(repeat - 1):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        results.append((time.perf_counter() - t0) / number)
    return statistics.median(results)


def fastest_in_turns(timers: dict, rounds: int = 3) -> dict:
    """Label -> the fastest of ``rounds`` readings of each timer (a callable returning
    seconds, or None where it does not apply), every timer read once per round in turn:
    on a shared machine a slow spell then slows all of them, not one."""
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    best: dict = dict.fromkeys(timers)
    for _ in range(rounds):
        for label, timer in timers.items():
            seconds = timer()
            if seconds is not None and (best[label] is None or seconds < best[label]):
                best[label] = seconds
    return best


def time_numpy(fn: Callable, *args, min_time: float = 0.05, repeat: int = 5) -> float:
    """Median seconds per call of ``fn(*args)`` (numpy, or any Python callable)."""
    return _time_callable(lambda: fn(*args), min_time, repeat)


def time_torch(fn: Callable, *args, min_time: float = 0.05, repeat: int = 5) -> float | None:
    """Median seconds per call of ``fn(*args)`` under ``torch.no_grad()`` with one thread
    per core; numpy arrays among ``args`` become tensors first. None without PyTorch."""
    if not torch_available():
        return None
    import torch
    torch.set_num_threads(os.cpu_count() or 1)
    targs = [torch.from_numpy(a) if isinstance(a, np.ndarray) else a for a in args]
    with torch.no_grad():
        return _time_callable(lambda: fn(*targs), min_time, repeat)


def time_cuda(run: Callable[[], object], synchronize: Callable[[], object], timed: Callable,
              min_time: float = 0.05, repeat: int = 5) -> float:
    """Median device seconds per call of ``run()`` (work queued on a GPU): a synchronised
    warm-up, then ``repeat`` measurements of ``number`` back-to-back calls by ``timed(run,
    number) -> seconds`` (CUDA events), ``number`` grown so that each lasts ``min_time``."""
    run()
    synchronize()
    number = 1
    while True:
        elapsed = timed(run, number)
        if elapsed >= min_time or number >= 1 << 20:
            break
        number = max(number * 2, int(number * min_time / max(elapsed, 1e-9) * 1.1))
    return statistics.median([elapsed / number] + [timed(run, number) / number for _ in range(repeat - 1)])


def torch_cuda(tf32: bool = False):
    """PyTorch set up for timing on the GPU (cuDNN choosing its fastest algorithms; float32
    with TF32 off, or on: tensor cores), or None without a CUDA PyTorch."""
    if not torch_available():
        return None
    import torch
    if not torch.cuda.is_available():
        return None
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cudnn.benchmark = True
    return torch


def torch_cuda_events(torch) -> Callable:
    """``timed(run, number) -> seconds`` for ``time_cuda``: ``number`` calls of ``run`` between
    two CUDA events of PyTorch's."""
    def timed(run, number: int) -> float:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(number):
            run()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) * 1e-3
    return timed


def gflops(flops: float, seconds: float | None) -> float | None:
    """GFLOPS, or None where there is no time (a baseline that does not apply)."""
    if seconds is None or flops is None or seconds <= 0:
        return None
    return flops / seconds / 1e9


def ratio(ours: float | None, theirs: float | None) -> float | None:
    """``ours / theirs``, None if either is missing."""
    if ours is None or not theirs:
        return None
    return ours / theirs


# output ----------------------------------------------------------------------------------

class Table:
    """Rows of values printed as aligned columns: numbers right-aligned, None as '-'."""

    def __init__(self, columns: Sequence[str], floatfmt: str = "{:.2f}"):
        self.columns = list(columns)
        self.floatfmt = floatfmt
        self.rows: list[list[str]] = []

    def add(self, *values) -> None:
        if len(values) != len(self.columns):
            raise ValueError(f"Table row has {len(values)} values, expected {len(self.columns)} "
                             f"({', '.join(self.columns)})")
        self.rows.append([self._cell(v) for v in values])

    def _cell(self, v) -> str:
        if v is None:
            return "-"
        if isinstance(v, float):
            return self.floatfmt.format(v)
        return str(v)

    def render(self) -> str:
        widths = [max(len(c), *(len(r[i]) for r in self.rows)) if self.rows else len(c)
                  for i, c in enumerate(self.columns)]
        first = [c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(self.columns, widths))]
        lines = ["  ".join(first), "  ".join("-" * w for w in widths)]
        for r in self.rows:
            lines.append("  ".join(v.ljust(w) if i == 0 else v.rjust(w) for i, (v, w) in enumerate(zip(r, widths))))
        return "\n".join(lines)

    def print(self) -> None:
        print(self.render(), flush=True)


#: the keys every JSON row has; null where a baseline does not apply
ROW_KEYS = ("workload", "ours_gflops", "numpy_gflops", "torch_gflops", "vs_numpy", "vs_torch")


def network_runner(parts, min_repeat_ms: float):
    """The runner of a network bench: warm repeats of ``min_repeat_ms``, or single calls with
    the weights evicted when the networks' weights exceed the last-level cache (as the
    default runner of ``autosched.tune_networks`` times them: as they run in the model)."""
    import autosched
    cold = autosched.networks.weights_exceed_cache(parts)
    return autosched.LocalRunner(min_repeat_ms=None if cold else min_repeat_ms, cold_constants=cold)


def json_row(workload: str, ours_gflops=None, numpy_gflops=None, torch_gflops=None, **extra) -> dict:
    """One row of the JSON line, the ratios computed from the GFLOPS given."""
    row = {"workload": workload, "ours_gflops": ours_gflops, "numpy_gflops": numpy_gflops,
           "torch_gflops": torch_gflops, "vs_numpy": ratio(ours_gflops, numpy_gflops),
           "vs_torch": ratio(ours_gflops, torch_gflops)}
    row.update(extra)
    return row


def emit_json(bench_name: str, rows: Sequence[dict], machine: dict | None = None) -> str:
    """Print (and return) the machine-readable last line of a benchmark. Rows missing a
    required key get null for it; NaN and infinity, which JSON lacks, become null too."""
    def clean(v):
        if isinstance(v, float) and not np.isfinite(v):
            return None
        if isinstance(v, np.generic):
            return clean(v.item())
        return v
    full = [{**{k: None for k in ROW_KEYS}, **{k: clean(v) for k, v in row.items()}} for row in rows]
    line = json.dumps({"bench": bench_name, "machine": machine if machine is not None else machine_info(),
                       "rows": full})
    print(line, flush=True)
    return line
