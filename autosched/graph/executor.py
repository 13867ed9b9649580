"""Run a partitioned network from its kernels, and the numpy reference of the whole network.

``GraphExecutor`` compiles one kernel per workload (identical subgraphs share it): the
tuned program where there is one (``states`` by workload key, or the best records of a
tuning log), else a default schedule, with a loud ``UntunedWorkloadWarning`` for a tuning
task. Constant weights are packed for layout-rewritten kernels once, when the executor is
built; buffers are allocated once; ``run`` calls the kernels in topological order.

``run_reference`` is independent numpy code per node type (float64, ``opdefs``) run over the
original graph (before batch-norm folding), so it checks the passes as well as the kernels.
"""
from __future__ import annotations

import statistics
import time
import warnings
from dataclasses import dataclass

import numpy as np

import ir
import sketch_rules.analysis as A
from ..records import HistoryBest, UntunedWorkloadWarning
from .graph import Graph
from .opdefs import opdef
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


#: loop iterations below which the default schedule stays on one thread
_MIN_PARALLEL_WORK = 1 << 16


def _vector_lanes(extent: int) -> int:
    for lanes in (16, 8):
        if extent % lanes == 0 and extent > lanes:
            return lanes
    return 0


def _annotate_stage(state: ir.State, sid: int) -> ir.State:
    """Parallel outer loops and a vectorised innermost space loop (moved inside the
    reduction loops, so that each vector lane accumulates its own output)."""
    st = state.stages[sid]
    spaces = [it.name for it in st.iters if it.kind == "space"]
    reduces = [it.name for it in st.iters if it.kind == "reduce"]
    if not spaces:
        return state
    last = state.stages[sid].iters[len(spaces) - 1]
    outer, inner = spaces[:-1], None
    lanes = _vector_lanes(last.extent)
    if lanes:
        state = state.split(sid, last.name, [lanes])
        outer, inner = spaces[:-1] + [f"{last.name}.0"], f"{last.name}.1"
    elif last.extent in (2, 4, 8, 16) and not reduces:
        inner = last.name
    else:
        outer = spaces
    if reduces and inner is not None:
        state = state.reorder(sid, outer + reduces + [inner])
    if len(outer) > 1:
        state = state.fuse(sid, outer)
        outer = ["@".join(outer) + "@"]
    work = 1
    for it in state.stages[sid].iters:
        work *= it.extent
    if outer and work >= _MIN_PARALLEL_WORK:   # a parallel region costs a wake-up of the threads
        state = state.parallel(sid, outer[0])
    if inner is not None:
        state = state.vectorize(sid, inner)
    return state


def default_schedule(dag: ir.ComputeDAG) -> ir.State:
    """The program an untuned workload runs: cheap elementwise stages inlined (as Ansor's
    AlwaysInline), each remaining stage's outer space loops fused and parallel and its
    innermost space loop vectorised when its extent allows; a stage where that does not
    apply keeps its naive loops."""
    state = dag.init_state()
    for sid in reversed(range(len(state.stages))):
        if A.should_always_inline(state, sid):
            state = state.compute_inline(sid)
    for sid in range(len(state.stages)):
        st = state.stages[sid]
        if st.is_placeholder or st.compute_at != "root":
            continue
        try:
            state = _annotate_stage(state, sid)
        except ir.InvalidStep:
            pass
    return state


@dataclass
class _Program:
    state: ir.State
    layout_rewrite: bool
    tuned: bool
    kernel: ir.Kernel = None


class GraphExecutor:
    """A network ready to run: ``run(*inputs)``, ``benchmark()``, ``verify()``.

    ``states``: the tuned program of each workload, by workload key (e.g. from
    ``NetworkTuneResult.best_states``); ``log_file``: a tuning log whose best records are
    used for workloads not in ``states`` (records of ``target``, default this host's).
    ``layout_rewrite``: how tuned ``states`` are built (as they were measured)."""

    def __init__(self, partitioned: PartitionedGraph, states: dict | None = None, log_file=None,
                 target: str | None = None, layout_rewrite: bool = True, warn_untuned: bool = True):
        self.partitioned = partitioned
        self.graph = partitioned.graph
        states = dict(states or {})
        history = None
        if log_file is not None:
            history = HistoryBest(log_file, target if target is not None else ir.host_target())
        self.programs: dict[str, _Program] = {}
        untuned = []
        t0 = time.perf_counter()
        for w in partitioned.workloads:
            prog = None
            if states.get(w.workload_key) is not None:
                prog = _Program(states[w.workload_key], layout_rewrite, True)
            elif history is not None and w.workload_key in history.best:
                rec = history.best[w.workload_key]
                try:
                    prog = _Program(rec.state(w.dag), rec.layout_rewrite, True)
                except Exception:  # a record that no longer replays: fall back, loudly
                    prog = None
            if prog is None:
                prog = _Program(default_schedule(w.dag), False, False)
                if w in partitioned.tasks:
                    untuned.append(w)
            prog.kernel = ir.build(w.dag, prog.state, layout_rewrite=prog.layout_rewrite)
            self.programs[w.workload_key] = prog
        self.build_seconds = time.perf_counter() - t0
        if untuned and warn_untuned:
            names = ", ".join(w.desc for w in untuned[:5]) + (" ..." if len(untuned) > 5 else "")
            warnings.warn(f"autosched: {len(untuned)} of {len(partitioned.tasks)} tasks of {partitioned.name} have "
                          f"no tuned program and run a default schedule: {names}", UntunedWorkloadWarning,
                          stacklevel=2)
        self.untuned = untuned
        self._buffers: dict[int, np.ndarray] = {}
        for node in self.graph.inputs:
            self._buffers[id(node)] = np.zeros(node.shape, node.dtype)
        self._calls = []
        for sg in partitioned.subgraphs:
            prog = self.programs[sg.workload.workload_key]
            kernel, placeholders = prog.kernel, sg.workload.dag.inputs
            args = []
            for node, ph in zip(sg.inputs, placeholders):
                if node.is_const:
                    value = node.value
                    args.append(kernel.pack(ph.name, value) if ph.name in kernel.layouts else value)
                else:
                    args.append(self._buffers[id(node)])
            out = self._buffers[id(sg.output)] = np.zeros(sg.output.shape, sg.output.dtype)
            self._calls.append((kernel, tuple(args) + (out,)))

    @property
    def n_kernels(self) -> int:
        return len(self._calls)

    def _run(self) -> None:
        for kernel, args in self._calls:
            kernel(*args)

    def _set_inputs(self, inputs) -> None:
        if len(inputs) != len(self.graph.inputs):
            raise ValueError(f"{self.partitioned.name} takes {len(self.graph.inputs)} inputs, got {len(inputs)}")
        for node, x in zip(self.graph.inputs, inputs):
            x = np.asarray(x)
            if x.shape != node.shape:
                raise ValueError(f"input '{node.name}' has shape {x.shape}, the network expects {node.shape}")
            np.copyto(self._buffers[id(node)], x, casting="same_kind")

    def run(self, *inputs) -> list[np.ndarray]:
        """The network's outputs on ``inputs`` (copies)."""
        self._set_inputs(inputs)
        self._run()
        return [self._buffers[id(o)].copy() for o in self.graph.outputs]

    def benchmark(self, *inputs, repeat: int = 10, min_repeat_ms: float = 0.0) -> dict:
        """End-to-end seconds per run: median (and all) of ``repeat`` timed runs after one
        warm-up run; each repeat runs the network until ``min_repeat_ms`` has passed."""
        if not inputs:
            inputs = self.graph.random_inputs(0)
        self._set_inputs(inputs)
        self._run()
        times = []
        for _ in range(repeat):
            n, t0 = 0, time.perf_counter()
            while True:
                self._run()
                n += 1
                elapsed = time.perf_counter() - t0
                if elapsed * 1e3 >= min_repeat_ms:
                    break
            times.append(elapsed / n)
        return {"median": statistics.median(times), "min": min(times), "times": times}

    def profile(self, *inputs, repeat: int = 3) -> list[dict]:
        """Seconds per call of each workload's kernel (over its first subgraph) and its share
        of the network (weight × seconds)."""
        if not inputs:
            inputs = self.graph.random_inputs(0)
        self._set_inputs(inputs)
        self._run()
        rows = []
        first = {}
        for sg, call in zip(self.partitioned.subgraphs, self._calls):
            first.setdefault(sg.workload.workload_key, call)
        for w in self.partitioned.workloads:
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
        got = self.run(*inputs)
        want = run_reference(self.partitioned.original, inputs)
        worst = 0.0
        for g, w in zip(got, want):
            scale = float(np.max(np.abs(w))) or 1.0
            err = float(np.max(np.abs(g.astype(np.float64) - w))) / scale if w.size else 0.0
            worst = max(worst, err if np.isfinite(err) else np.inf)
        return worst <= rtol, worst
