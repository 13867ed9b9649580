"""What builders and runners execute in worker processes, with per-process caches.

Jobs take the task as ``(task_key, task_payload)``: the key identifies it, the payload
is the pickled ``SearchTask`` (a few hundred bytes), unpickled once per worker process and
kept. States travel as step records and are replayed on the task's DAG. Jobs return plain
dicts and catch what the program does wrong; only a crash or a hang of the worker is left
to the executor (``WorkerPool`` kills and replaces the worker).
"""
from __future__ import annotations

import io
import os
import pickle
import statistics
import sys
import time
import traceback
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

import ir
from evolution.cold_reads import cold_tensors
from ir.cpu.runtime import can_evict, evict_from_caches

from .common import MeasureErrorNo, short
from .verify import DEFAULT_SEED, Reference, compare, compute_reference, output_buffers, random_inputs

#: seconds of each of the (up to 3) short repeats of warm calls that confirm a program is
#: hopeless before it is retired (one call if that is longer): one call of a microsecond
#: kernel is too noisy to judge by, and one short repeat of a parallel kernel on a busy
#: machine may have lost a thread for a time slice; all of them must say hopeless
RETIRE_CONFIRM_S = 5e-3
#: the symbol every measured program is compiled under
KERNEL_NAME = "measured_kernel"
#: what measurement workers import before they take jobs
WORKER_PRELOAD = ("numpy", "ir", "autosched.measure.jobs")
#: the exit status of a runner worker that ended itself after a kernel broke its process
#: (``Backend.breaks_process``: a GPU context a faulting kernel left unusable)
FAULT_EXIT_STATUS = 70

_tasks: "OrderedDict[str, object]" = OrderedDict()
_references: "OrderedDict[tuple, Reference]" = OrderedDict()
_inputs: "OrderedDict[tuple, list]" = OrderedDict()
#: the fastest mean cost this worker has timed per task key (see RunOptions.slow_single_repeat)
_fastest: "OrderedDict[str, float]" = OrderedDict()
_flush_buffer: np.ndarray | None = None


def _remember(cache: OrderedDict, key, value, size: int):
    cache[key] = value
    cache.move_to_end(key)
    while len(cache) > size:
        cache.popitem(last=False)
    return value


def task_of(task_key: str, task_payload: bytes):
    """The task of this key, unpickled once per process."""
    task = _tasks.get(task_key)
    if task is None:
        task = _remember(_tasks, task_key, pickle.loads(task_payload), 32)
    return task


def _elapsed(t0: float) -> float:
    return time.perf_counter() - t0


def _error(error_no: int, msg: str, t0: float) -> dict:
    return {"error_no": int(error_no), "error_msg": short(msg), "time": _elapsed(t0)}


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}\n{''.join(traceback.format_exception(exc)[-6:])}"


def _guarded(backend, fn):
    """``fn`` that ends this worker process when what it raises breaks the process for
    further programs (the pool records a runtime error and starts a fresh worker)."""
    def call(*args):
        try:
            return fn(*args)
        except Exception as exc:
            if not backend.breaks_process(exc):
                raise
            print(f"autosched: the program broke this runner process ({exc}); it ends", file=sys.stderr, flush=True)
            os._exit(FAULT_EXIT_STATUS)
    return call


# building ------------------------------------------------------------------------------

def build_job(task_key: str, task_payload: bytes, step_records: list, layout_rewrite: bool,
              hook=None) -> dict:
    """Replay, lower, generate and compile one program to a native object (``hook``: see
    ``MeasureInput``)."""
    t0 = time.perf_counter()
    task = task_of(task_key, task_payload)
    backend = task.target.backend
    wrong = backend.foreign(task.target)
    if wrong:
        return _error(MeasureErrorNo.COMPILE_HOST, wrong, t0)
    try:
        state = ir.State.from_steps(task.dag, step_records)
    except ir.InvalidStep as exc:
        return _error(MeasureErrorNo.INSTANTIATION_ERROR, f"the steps do not replay: {type(exc).__name__}: {exc}", t0)
    try:
        if hook is not None:
            hook.build(state)
        obj, layouts = backend.compile(task.target, state, KERNEL_NAME, layout_rewrite)
    except ir.InvalidStep as exc:
        return _error(MeasureErrorNo.INSTANTIATION_ERROR, f"invalid program: {exc}", t0)
    except Exception as exc:
        return _error(MeasureErrorNo.COMPILE_HOST, f"compilation failed: {_describe(exc)}", t0)
    return {"error_no": 0, "error_msg": "", "object": obj, "name": KERNEL_NAME,
            "layouts": layouts, "time": _elapsed(t0)}


# the reference -------------------------------------------------------------------------

def _fresh_reference(task_key: str, task_payload: bytes, seed: int) -> Reference:
    """The task's reference computed now, and kept in this process for its run jobs."""
    dag = task_of(task_key, task_payload).dag
    return _remember(_references, (task_key, seed), compute_reference(dag, seed), 4)


def reference_job(task_key: str, task_payload: bytes, seed: int, path: str | None) -> float:
    """Compute the task's reference (its naive program on random inputs), keep it in this
    process and save it to ``path`` for the other workers; returns the seconds it took."""
    t0 = time.perf_counter()
    ref = _fresh_reference(task_key, task_payload, seed)
    if path:
        tmp = f"{path}.{os.getpid()}.tmp.npz"
        ref.save(tmp)
        os.replace(tmp, path)
    return _elapsed(t0)


def reference_bytes_job(task_key: str, task_payload: bytes, seed: int) -> bytes:
    """``reference_job`` for runners on other machines: the reference file's bytes."""
    ref = _fresh_reference(task_key, task_payload, seed)
    buffer = io.BytesIO()
    ref.save(buffer)
    return buffer.getvalue()


def _reference(task_key: str, dag, seed: int, path: str | None) -> Reference:
    ref = _references.get((task_key, seed))
    if ref is None:
        if path and os.path.exists(path):
            ref = Reference.load(path)
        else:  # no shared copy (e.g. another machine): compute it here
            ref = compute_reference(dag, seed)
        _remember(_references, (task_key, seed), ref, 4)
    return ref


def _random_inputs(task_key: str, dag, seed: int) -> list:
    got = _inputs.get((task_key, seed))
    if got is None:
        got = _remember(_inputs, (task_key, seed), random_inputs(dag, seed), 4)
    return got


# running -------------------------------------------------------------------------------

@dataclass(frozen=True)
class RunOptions:
    """How a runner times and checks a program (see ``LocalRunner``)."""
    number: int = 1
    repeat: int = 10
    min_repeat_ms: float = 40.0
    cache_flush: bool = False
    #: evict the task's constant inputs (weights), and the run-time inputs of its reductions
    #: larger than a core's L2, from the caches before every repeat
    cold_constants: bool = False
    adaptive: bool = True
    cv_threshold: float = 0.05
    min_repeats: int = 3
    verify: bool = True
    seed: int = DEFAULT_SEED
    #: stop adding repeats once they have taken this long (at least one repeat is made)
    max_timing_s: float = 1.0
    #: a program this many times slower than the fastest program of its task is timed by
    #: short repeats (``RETIRE_CONFIRM_S``) when its checked call and they all say so, else
    #: once its first repeat does (None: never)
    slow_single_repeat: float | None = 4.0
    #: a program whose first repeat (of ``min_repeat_ms``: not a single call) reads more than
    #: this many times the fastest of its task is timed by that repeat alone (None: only
    #: past ``slow_single_repeat``): more repeats refine the programs that could be the
    #: best, and the search needs only the rank of the others
    one_repeat_over_best: float | None = 1.5
    #: the fastest mean cost of the task the runner has had back so far (None: none yet);
    #: the job also knows the fastest its own process has timed
    fastest: float | None = None


def last_level_cache_bytes() -> int:
    """The size of this CPU's last-level cache (sysfs; 32 MiB when it does not say)."""
    for index in range(4, 0, -1):
        try:
            with open(f"/sys/devices/system/cpu/cpu0/cache/index{index}/size") as f:
                text = f.read().strip()
        except OSError:
            continue
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:].upper(), 1)
        try:
            return int(text.rstrip("KMGkmg")) * scale
        except ValueError:
            continue
    return 32 << 20


def flush_cpu_cache() -> None:
    """Write a buffer twice the size of the last-level cache, evicting the kernel's data."""
    global _flush_buffer
    if _flush_buffer is None:
        _flush_buffer = np.zeros(min(2 * last_level_cache_bytes(), 1 << 30), dtype=np.uint8)
    np.add(_flush_buffer, 1, out=_flush_buffer)


def calibrate(run, number: int, target: float) -> tuple[int, float, float | None]:
    """Calls per repeat so that one repeat lasts ``target`` seconds (at least ``number``),
    the seconds the probes took, and the seconds per call of the last probe when it made
    that many calls (else None): it lasted ``target`` as a repeat does, so it can be the
    first repeat. Probes start at one call and grow; a probe stretched by preemption (a
    shared machine) can at worst leave the repeats shorter than ``target``."""
    n, best, spent = 1, float("inf"), 0.0
    while True:
        seconds = run(n)
        spent += seconds
        best = min(best, seconds / n)
        if n * best >= target or n >= 1 << 30:
            return max(number, n), spent, seconds / n if n >= number else None
        n = max(2 * n, min(int(target / max(best, 1e-12) * 1.1) + 1, 1 << 30))


def _cv(costs: list) -> float:
    """Coefficient of variation (sample standard deviation over mean)."""
    mean = statistics.fmean(costs)
    return statistics.stdev(costs) / mean if mean > 0 else 0.0


def run_job(task_key: str, task_payload: bytes, obj: bytes, name: str, layouts: dict,
            opts: RunOptions, reference_path: str | None, hook=None) -> dict:
    """Load a compiled program, run it once and check its outputs, then time it
    (``hook``: see ``MeasureInput``)."""
    t0 = time.perf_counter()
    task = task_of(task_key, task_payload)
    backend = task.target.backend
    wrong = backend.foreign(task.target)
    if wrong:
        return _error(MeasureErrorNo.RUNTIME_DEVICE, wrong, t0)
    dag = task.dag
    try:
        kernel = backend.load(dag, obj, name, layouts)
    except Exception as exc:
        return _error(MeasureErrorNo.RUNTIME_DEVICE, f"could not load the compiled program: {_describe(exc)}", t0)
    ref = _reference(task_key, dag, opts.seed, reference_path) if opts.verify else None
    inputs = iter(ref.inputs if ref is not None else _random_inputs(task_key, dag, opts.seed))
    outputs = output_buffers(dag)
    outs = iter(outputs)
    args, constants = [], []
    # evicted before each repeat when timed as in a network: the weights, and the inputs of
    # its reductions that its producer leaves mostly outside the caches (``cold_tensors``)
    in_memory = cold_tensors(dag) if opts.cold_constants else ()
    for t in dag.tensors:  # the kernel's argument order; fresh copies: a program may scribble
        if isinstance(t.op, ir.PlaceholderOp):
            a = next(inputs)
            args.append(kernel.pack(t.name, a) if t.name in kernel.layouts else a.copy())
            if t.op.constant or t.name in in_memory:
                constants.append(args[-1])
        else:
            args.append(next(outs))
    try:
        t1 = time.perf_counter()
        if hook is None:
            _guarded(backend, kernel)(*args)
        else:
            _guarded(backend, hook.call)(kernel, args, outputs)
        kernel_time = _elapsed(t1)
    except Exception as exc:
        return _error(MeasureErrorNo.RUNTIME_DEVICE, f"the program raised: {_describe(exc)}", t0)
    if ref is not None:
        mismatch = compare(outputs, ref)
        if mismatch:
            return _error(MeasureErrorNo.WRONG_ANSWER, mismatch, t0)
    run = _guarded(backend, _guarded(backend, backend.timer)(kernel, *args))
    known = [f for f in (_fastest.get(task_key), opts.fastest) if f]
    fastest = min(known) if known else None
    slow = opts.slow_single_repeat * fastest if fastest and opts.slow_single_repeat else float("inf")
    if kernel_time > slow:  # the checked call says hopeless; short repeats (the cost) confirm
        calls = max(1, int(RETIRE_CONFIRM_S / kernel_time))  # (the checked call is the slower)
        confirm: list = []
        while len(confirm) < 3 and sum(confirm) * calls < 3 * RETIRE_CONFIRM_S:
            seconds = run(calls)
            kernel_time += seconds
            confirm.append(seconds / calls)
            if confirm[-1] <= slow:
                break
        if min(confirm) > slow:
            return _timed(opts, confirm, calls, kernel_time, ref is not None, t0)
    costs, number = [], max(1, opts.number)
    # (a repeat of one cold call is too noisy to judge by: only calibrated repeats count)
    near = opts.one_repeat_over_best if opts.min_repeat_ms > 0 else None
    ratios = [r for r in (opts.slow_single_repeat, near) if r]
    one_repeat = min(ratios) * fastest if fastest and ratios else float("inf")
    if opts.min_repeat_ms > 0:
        number, probe_time, last_probe = calibrate(run, number, opts.min_repeat_ms * 1e-3)
        kernel_time += probe_time
        if last_probe is not None and not (opts.cache_flush or opts.cold_constants):  # (a repeat after a flush is cold)
            costs.append(last_probe)
    while len(costs) < opts.repeat:
        if opts.adaptive and len(costs) >= max(2, opts.min_repeats) and _cv(costs) < opts.cv_threshold:
            break
        if costs and sum(costs) * number >= opts.max_timing_s:
            break
        if costs and costs[0] > one_repeat:
            break
        if opts.cache_flush:
            flush_cpu_cache()
        elif opts.cold_constants and constants and backend.host_memory:  # (elsewhere than x86: all of the caches)
            evict_from_caches(constants) if can_evict() else flush_cpu_cache()
        seconds = run(number)
        kernel_time += seconds
        costs.append(seconds / number)
    mean = statistics.fmean(costs)
    if mean < _fastest.get(task_key, float("inf")):
        _remember(_fastest, task_key, mean, 64)
    return _timed(opts, costs, number, kernel_time, ref is not None, t0)


def _timed(opts: RunOptions, costs: list, number: int, kernel_time: float, verified: bool, t0: float) -> dict:
    """The answer of a run job that timed its program."""
    return {"error_no": 0, "error_msg": "", "costs": costs, "number": number, "repeats": len(costs),
            "saved_repeats": opts.repeat - len(costs) if opts.adaptive else 0,
            "kernel_time": kernel_time, "verified": verified, "time": _elapsed(t0)}
