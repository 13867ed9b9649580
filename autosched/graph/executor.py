"""Run a partitioned network from its kernels, and the numpy reference of the whole network.

``GraphExecutor`` compiles one kernel per workload (identical subgraphs share it): the
tuned program where there is one (``states`` by workload key, or the best records of a
tuning log); else, for a tuning task, the base cost model's zero-trial program
(``autosched.history.zero_trial``: the searches of all untuned tasks at once over the cores,
each program remembered in the records database for the next load) with a loud
``UntunedWorkloadWarning``, and a default schedule for the rest (and for every untuned
task without a base model). Kernels compiled once are loaded from the compiled-kernel
cache beside the records database the next time (``autosched.history.object_cache``).
Everything a run needs
is prepared when the executor is built: constant weights packed for layout-rewritten
kernels, the tensors' memory planned by liveness (``memory``; reshapes are views), every
kernel's arguments checked, and the calls laid out for the native driver (``driver``), so
that ``run`` is one native call: no allocation, no checks and no Python between kernels.

``run_reference`` is independent numpy code per node type (float64, the node kinds of ``ops.registry``) run over the
original graph (before batch-norm folding), so it checks the passes as well as the kernels.
"""
from __future__ import annotations

import statistics
import time
import warnings
from dataclasses import dataclass

import numpy as np

import ir
from sketch_rules import search_space
from ..history.object_cache import object_cache
from ..history.records import HistoryBest, UntunedWorkloadWarning
from ..history.zero_trial import ZeroTrial
from .graph import Graph
from ..ops.registry import opdef
from .memory import ALIGNMENT, MemoryPlan, nbytes, plan_memory
from .partition import PartitionedGraph


def run_reference(graph: Graph, inputs) -> list[np.ndarray]:
    """The outputs of ``graph`` on ``inputs`` computed with numpy (float64)."""
    if len(inputs) != len(graph.inputs):
        raise ValueError(f"{graph.name} takes {len(graph.inputs)} inputs, got {len(inputs)}")
    values: dict[int, np.ndarray] = {}
    for node, x in zip(graph.inputs, inputs):
        x = np.asarray(x)
        if x.shape != node.shape:
            raise ValueError(f"input '{node.name}' has shape {x.shape}, the network expects {node.shape}")
        values[id(node)] = x.astype(np.float64)
    for node in graph.nodes:
        if node.is_const:
            values[id(node)] = node.value.astype(np.float64)
        elif node.is_op:
            out = opdef(node.kind).reference([values[id(p)] for p in node.inputs], node.attrs)
            values[id(node)] = np.asarray(out, np.float64)
    return [values[id(o)] for o in graph.outputs]


def time_repeats(fn, repeat: int, min_repeat_ms: float = 0.0) -> list[float]:
    """Seconds per call of ``fn`` in each of ``repeat`` repeats, after one warm-up call; a
    repeat calls it until ``min_repeat_ms`` have passed (once at least)."""
    fn()
    times = []
    for _ in range(repeat):
        n, t0 = 0, time.perf_counter()
        while True:
            fn()
            n += 1
            elapsed = time.perf_counter() - t0
            if elapsed * 1e3 >= min_repeat_ms:
                break
        times.append(elapsed / n)
    return times


def _runtime_inputs(sg) -> list:
    return [n for n in sg.inputs if not n.is_const]


def _is_alias(sg) -> bool:
    """A subgraph that only reshapes one run-time tensor: a view of it, no kernel."""
    return all(n.kind == "reshape" for n in sg.nodes) and len(sg.inputs) == 1 and not sg.inputs[0].is_const


def _aligned_empty(size: int) -> np.ndarray:
    """``size`` uninitialised bytes starting on an ``ALIGNMENT`` boundary."""
    raw = np.empty(size + ALIGNMENT, np.uint8)
    start = -raw.ctypes.data % ALIGNMENT
    return raw[start:start + size]


@dataclass
class _Program:
    state: ir.State
    layout_rewrite: bool
    tuned: bool
    kernel: object = None
    zero_trial: bool = False


def default_schedule(dag: ir.ComputeDAG, target=None) -> ir.State:
    """The program an untuned workload runs on ``target`` (default this CPU): its search
    space's default schedule (``sketch_rules.default_schedules``)."""
    target = ir.Target.parse(target)
    return search_space(target).default_schedule(dag, target.hardware)


def _zero_trial_programs(untuned, target, base_model, records_db) -> tuple[dict, ZeroTrial | None]:
    """The zero-trial program of each ``untuned`` workload (by workload key; their searches
    at once, over the cores; remembered in the records database ``records_db``) and the
    ``ZeroTrial`` that found them (None without a base model); a task whose search finds no
    program is left out, with a warning."""
    zero_trial = (ZeroTrial.from_spec(base_model, records_db=records_db, hardware=ir.Target.parse(target).hardware)
                  if untuned and base_model else None)
    if zero_trial is None:
        return {}, None
    found = zero_trial.programs([w.search_task(target=target) for w in untuned])
    for why in zero_trial.failures.values():
        warnings.warn(f"autosched: no zero-trial program ({why}); the task runs a default schedule",
                      RuntimeWarning, stacklevel=4)
    return {key: _Program(state, True, False, zero_trial=True) for key, state in found.items()}, zero_trial


class GraphExecutor:
    """A network ready to run: ``run(*inputs)``, ``benchmark()``, ``verify()``.

    ``target``: what the kernels are built for and run on (an ``ir.Target`` or its
    spelling; default this CPU). ``states``: the tuned program of each workload, by
    workload key (e.g. from ``NetworkTuneResult.best_states``); ``log_file``: a tuning log
    whose best records of ``target`` are used for workloads not in ``states``.
    ``kernel_cache``: a dict that keeps compiled kernels by workload and program, for
    executors made one after another while tuning goes on (only new programs compile).
    ``layout_rewrite``: how tuned ``states`` are built (as they were measured).
    ``base_model``: whose zero-trial programs untuned tasks run ("default": the shipped
    model, where the target's back end has one; None: the default schedule); their
    searches run at once over the cores, and each program is remembered in the records
    database ``records_db`` ("default", a path, or None: see
    ``autosched.history.database``), so that the next load replays it (``zero_trial.stats``
    counts the programs remembered and searched); the kernels' object code is kept in the
    compiled-kernel cache beside that database (``object_cache``, None without one: see
    ``autosched.history.object_cache``), so that the next load compiles nothing.
    ``emulate``: run the kernels on this CPU through the target's emulator (the cuda
    target's: slow, for checking programs without a GPU)."""

    def __init__(self, partitioned: PartitionedGraph, states: dict | None = None, log_file=None,
                 target=None, layout_rewrite: bool = True, warn_untuned: bool = True,
                 kernel_cache: dict | None = None, base_model="default", emulate: bool = False,
                 records_db="default"):
        self.partitioned = partitioned
        self.graph = partitioned.graph
        self.target = ir.Target.parse(target)
        if base_model not in (None, "default") and not self.target.backend.base_model:
            raise ValueError(f"base_model={base_model!r} does not apply to target {str(self.target)!r}: the base "
                             "model knows the programs of this CPU only")
        t0 = time.perf_counter()
        #: the ``ZeroTrial`` that gave untuned tasks their programs (None: none did), and the
        #: seconds it took (searching or replaying them; ``build_seconds`` adds compiling)
        self.zero_trial: ZeroTrial | None = None
        self.zero_trial_seconds = 0.0
        #: the compiled-kernel cache the kernels are loaded from and stored into (None: off)
        self.object_cache = object_cache(records_db)
        self.programs, self.untuned = self._build_programs(states, log_file, layout_rewrite, kernel_cache,
                                                           base_model if self.target.backend.base_model else None,
                                                           records_db)
        self.build_seconds = time.perf_counter() - t0
        if self.untuned and warn_untuned:
            names = ", ".join(w.desc for w in self.untuned[:5]) + (" ..." if len(self.untuned) > 5 else "")
            zero = sum(self.programs[w.workload_key].zero_trial for w in self.untuned)
            runs = (f"run the base cost model's zero-trial program (never measured; {len(self.untuned) - zero} "
                    "of them a default schedule)") if zero else "run a default schedule"
            warnings.warn(f"autosched: {len(self.untuned)} of {len(partitioned.tasks)} tasks of {partitioned.name} "
                          f"have no tuned program and {runs}: {names}", UntunedWorkloadWarning, stacklevel=2)
        self.memory = plan_memory([(sg.output, _runtime_inputs(sg), _is_alias(sg)) for sg in partitioned.subgraphs],
                                  self.graph)
        self._buffers = self._allocate(self.memory)
        #: (subgraph, kernel, arguments) of each kernel call, in run order (reshapes are views, not calls)
        self.calls = [(sg, self.programs[sg.workload.workload_key].kernel, self._arguments(sg))
                      for sg in partitioned.subgraphs if not _is_alias(sg)]
        self._driver = self.target.backend.sequence([(kernel, args) for _, kernel, args in self.calls],
                                                    [self._buffers[id(n)] for n in self.graph.inputs],
                                                    [self._buffers[id(n)] for n in self.graph.outputs], emulate)

    def _build_programs(self, states, log_file, layout_rewrite, kernel_cache, base_model,
                        records_db) -> tuple[dict, list]:
        """The compiled program of every workload that needs a kernel, and the tasks that
        had no tuned program."""
        states = dict(states or {})
        target = self.target
        layout_rewrite = layout_rewrite and target.backend.layout_rewrite
        history = None
        if log_file is not None:
            history = HistoryBest(log_file, str(target))
        chosen, untuned = {}, []
        for w in self.partitioned.workloads:
            if all(_is_alias(sg) for sg in w.subgraphs):
                continue
            prog = None
            if states.get(w.workload_key) is not None:
                prog = _Program(states[w.workload_key], layout_rewrite, True)
            elif history is not None and w.workload_key in history.best:
                rec = history.best[w.workload_key]
                try:
                    prog = _Program(rec.state(w.dag), rec.layout_rewrite, True)
                except Exception:  # a record that no longer replays: fall back, loudly
                    prog = None
            if prog is None and w in self.partitioned.tasks:
                untuned.append(w)
            chosen[w] = prog
        t0 = time.perf_counter()
        zero, self.zero_trial = _zero_trial_programs(untuned, target, base_model, records_db)
        self.zero_trial_seconds = time.perf_counter() - t0
        programs = {}
        for w, prog in chosen.items():
            prog = prog or zero.get(w.workload_key) or _Program(default_schedule(w.dag, target), False, False)
            key = (w.workload_key, str(prog.state), prog.layout_rewrite, str(target))
            prog.kernel = kernel_cache.get(key) if kernel_cache is not None else None
            if prog.kernel is None:
                prog.kernel = ir.build(w.dag, prog.state, layout_rewrite=prog.layout_rewrite, target=target,
                                       objects=self.object_cache)
                if kernel_cache is not None:
                    kernel_cache[key] = prog.kernel
            programs[w.workload_key] = prog
        return programs, untuned

    def _arguments(self, sg) -> tuple:
        """A subgraph's kernel arguments: weights (packed once for layout-rewritten kernels),
        the planned arrays of its inputs, then its output's."""
        kernel = self.programs[sg.workload.workload_key].kernel
        args = []
        for node, ph in zip(sg.inputs, sg.workload.dag.inputs):
            if node.is_const:
                value = node.value
                args.append(kernel.pack(ph.name, value) if ph.name in kernel.layouts else value)
            else:
                args.append(self._buffers[id(node)])
        return tuple(args) + (self._buffers[id(sg.output)],)

    def _allocate(self, plan: MemoryPlan) -> dict:
        """Every tensor's array: inputs and outputs their own, the rest views of one arena."""
        buffers = {id(n): _aligned_empty(nbytes(n)).view(n.dtype).reshape(n.shape) for n in plan.own}
        arena = _aligned_empty(plan.arena_bytes)
        for n in self.graph.nodes:
            if id(n) in plan.offsets:
                start = plan.offsets[id(n)]
                buffers[id(n)] = arena[start:start + nbytes(n)].view(n.dtype).reshape(n.shape)
        for n in self.graph.nodes:
            if id(n) in plan.aliases:
                buffers[id(n)] = buffers[id(plan.storage(n))].reshape(n.shape)
        return buffers

    @property
    def n_kernels(self) -> int:
        return len(self.calls)

    def _run(self) -> None:
        self._driver.run()

    def _set_inputs(self, inputs) -> None:
        if len(inputs) != len(self.graph.inputs):
            raise ValueError(f"{self.partitioned.name} takes {len(self.graph.inputs)} inputs, got {len(inputs)}")
        for node, x in zip(self.graph.inputs, inputs):
            x = np.asarray(x)
            if x.shape != node.shape:
                raise ValueError(f"input '{node.name}' has shape {x.shape}, the network expects {node.shape}")
            np.copyto(self._buffers[id(node)], x, casting="same_kind")
        self._driver.write_inputs()

    def run(self, *inputs) -> list[np.ndarray]:
        """The network's outputs on ``inputs`` (copies, in the original graph's output dtypes)."""
        self._set_inputs(inputs)
        self._run()
        self._driver.read_outputs()
        return [self._buffers[id(o)].astype(dtype) for o, dtype in
                zip(self.graph.outputs, self.partitioned.original.output_dtypes)]

    def benchmark(self, *inputs, repeat: int = 10, min_repeat_ms: float = 0.0) -> dict:
        """End-to-end seconds per run: median (and all) of ``repeat`` timed runs after one
        warm-up run; each repeat runs the network until ``min_repeat_ms`` has passed."""
        if not inputs:
            inputs = self.graph.random_inputs(0)
        self._set_inputs(inputs)
        times = time_repeats(self._run, repeat, min_repeat_ms)
        return {"median": statistics.median(times), "min": min(times), "times": times}

    def profile(self, *inputs, repeat: int = 3) -> list[dict]:
        """Seconds per call of each workload's kernel (over its first subgraph) and its share
        of the network (weight × seconds)."""
        if not inputs:
            inputs = self.graph.random_inputs(0)
        self._set_inputs(inputs)
        self._run()
        rows, first = [], {}
        for sg, kernel, args in self.calls:
            first.setdefault(sg.workload.workload_key, (kernel, args))
        for w in self.partitioned.workloads:
            if w.workload_key not in first:      # reshapes only: views, no kernel
                continue
            kernel, args = first[w.workload_key]
            t = kernel.time(*args, number=1, repeat=repeat, min_repeat_ms=10).median
            rows.append({"workload": w.desc, "weight": w.weight, "seconds": t, "total": t * w.weight,
                         "tuned": self.programs[w.workload_key].tuned, "task": w in self.partitioned.tasks})
        return rows

    def verify(self, *inputs, rtol: float = 1e-3) -> tuple[bool, float]:
        """Run the network and its numpy reference (of the original graph) on ``inputs``
        (default: random); (ok, max error relative to each output's largest magnitude)."""
        if not inputs:
            inputs = self.graph.random_inputs(0)
        self._set_inputs(inputs)
        self._run()
        self._driver.read_outputs()   # (a device's outputs come back to the host buffers)
        got = [self._buffers[id(o)] for o in self.graph.outputs]   # as computed (a float16 model's in float32)
        want = run_reference(self.partitioned.original, inputs)
        worst = 0.0
        for g, w in zip(got, want):
            scale = float(np.max(np.abs(w))) or 1.0
            err = float(np.max(np.abs(g.astype(np.float64) - w))) / scale if w.size else 0.0
            worst = max(worst, err if np.isfinite(err) else np.inf)
        return worst <= rtol, worst
