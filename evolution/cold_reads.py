"""Reads that no prefetcher follows: what a kernel pays when its data comes from memory.

A cost model trained on programs timed alone, called back to back, sees every input in the
caches. In a network the input of a kernel is the output its producer just wrote, in the
caches only when it fits the core's L2, and the weights come from memory (the other
kernels' weights have evicted them). There the order in which a program first touches the
cache lines of such a tensor decides what it pays: lines touched in ascending runs, or at
a constant stride, are fetched ahead by the hardware's prefetchers; a line whose neighbour
was touched long ago (a walk over 28 image rows, 57 KB apart, coming back for the next 32
channels of each) waits for memory. ResNet-50's 1x1 convolution of 56x56x256 pixels ranked
first with such a walk: 0.30 ms alone, 1.1 ms with its input from memory, against 0.26 ms
for the fourth of its ranking.

``first_read_misses`` enumerates one thread's share of a program's loop nest (the lowered
loop IR, its index expressions evaluated with numpy), orders each such tensor's cache
lines by first touch and counts the lines that neither follow a neighbour touched within
``LOOKBACK`` new lines nor continue a constant stride: a simple model of the stream and
stride prefetchers, checked against timings with the inputs evicted (docs/history.md,
zero-trial version 11). ViT's 3072 -> 768 dense layer walks its input down 197 rows at a
12 KB stride, one line a row, and pays nothing for it; ResNet-50's walk above alternates
two lines a row with the 57 KB jump to the next, and pays.
"""
from __future__ import annotations

import functools
import math

import networkx as nx
import numpy as np

import ir
from ir import dtype as dt
from ir import expr as E
from ir.index_check import DependsOnData, evaluate_at
from ir.loop_ir import Allocate, For, IfThenElse, Load, Pragma, Seq, Store

#: a line counts as prefetched when the line before it (or the one before that) was first
#: touched at most this many new lines earlier
LOOKBACK = 32
#: loop iterations enumerated per access at most (outer loops are cut to fit, and the
#: misses scaled back up): a few tens of milliseconds
MAX_POINTS = 1 << 21
#: seconds one such miss costs a thread (ResNet-50's 1x1 convolutions on the Zen 5 VM: the
#: extra time of their inputs from memory over the misses counted, 40-90 ns)
MISS_SECONDS = 50e-9
#: how many times a task's ``warm_seconds`` its misses may cost before the pick moves on.
#: ResNet-50's walk above: 2.3, and 0.85 ms in a run against 0.30 alone. Picks of
#: DenseNet-121, ResNeXt-50 and MNASNet at 1.2-1.6 ran as fast in a run as alone (their
#: inputs came from L3: those models' weights leave it room), and the programs that would
#: replace them were no faster there
MISS_BUDGET = 2.0
#: ...and how many times its replacement's may cost (the first that does; else the first
#: within ``MISS_BUDGET``): ResNet-50's second-ranked program costs 0.58 times the guess and
#: 0.51 ms with its input evicted, its third 0.07 times and 0.32 ms
REPLACEMENT_BUDGET = 0.5


@functools.cache
def l2_bytes() -> int:
    """One core's L2 cache (sysfs; 512 KiB when it does not say): an input smaller than
    this is still there when its consumer runs."""
    try:
        with open("/sys/devices/system/cpu/cpu0/cache/index2/size") as f:
            text = f.read().strip()
        scale = {"K": 1 << 10, "M": 1 << 20}.get(text[-1:].upper(), 1)
        return int(text.rstrip("KMkm")) * scale
    except (OSError, ValueError):
        return 512 << 10


def _loads(e: E.Expr, out: list) -> None:
    if type(e) is Load:
        out.append(e)
    for child in e.children():
        _loads(child, out)


def _first_reads(stmt, loops: list, names: set, out: dict) -> None:
    """For each buffer of ``names``, the loops and indices of the first statement (in
    program order) that reads it."""
    t = type(stmt)
    if t is For:
        loops.append(stmt)
        _first_reads(stmt.body, loops, names, out)
        loops.pop()
    elif t is Seq:
        for s in stmt.stmts:
            _first_reads(s, loops, names, out)
    elif t is IfThenElse:
        _first_reads(stmt.then, loops, names, out)
        if stmt.otherwise is not None:
            _first_reads(stmt.otherwise, loops, names, out)
    elif t is Allocate or t is Pragma:
        _first_reads(stmt.body, loops, names, out)
    elif t is Store:
        found: list = []
        _loads(stmt.value, found)
        mine: dict = {}
        for load in found:
            if load.buffer.name in names and load.buffer.name not in out:
                mine.setdefault(load.buffer.name, (load.buffer, []))[1].append(load.index)
        for name, (buffer, indices) in mine.items():
            out[name] = (tuple(loops), buffer, indices)


def _line_sequence(loops, buffer, indices, threads: int):
    """The cache lines one thread reads, in order (the first ``1/scale`` of them), and ``scale``."""
    free = set()
    for index in indices:
        free |= {id(v) for v in E.free_vars(index)}
    moving = [lp for lp in loops if id(lp.var) in free]
    extents = [-(-lp.extent // threads) if lp.kind == "parallel" else lp.extent for lp in moving]
    total, scale = math.prod(extents) * len(indices), 1.0
    for k in range(len(extents)):
        if total <= MAX_POINTS:
            break
        keep = max(1, extents[k] * MAX_POINTS // total)
        scale *= extents[k] / keep
        total = total // extents[k] * keep
        extents[k] = keep
    # each loop's values along its own axis: the index arithmetic broadcasts, and only its
    # result has an element per iteration
    points = {lp.var: np.arange(e, dtype=np.int64).reshape([e if i == k else 1 for i in range(len(extents))])
              for k, (lp, e) in enumerate(zip(moving, extents))}
    element = dt.itemsize(buffer.dtype)
    columns = [np.broadcast_to(evaluate_at(index, points), extents).ravel() for index in indices]
    flat = np.stack(columns, axis=1).ravel() if len(columns) > 1 else columns[0]
    return flat * element // 64, scale


def _unprefetched(lines: np.ndarray) -> int:
    """Lines, in first-touch order, that no prefetcher of the model fetches ahead."""
    unique, first = np.unique(lines, return_index=True)
    seq = unique[np.argsort(first, kind="stable")]
    if len(seq) < 3:
        return len(seq)
    low = int(seq.min())
    order = np.full(int(seq.max()) - low + 3, -(1 << 40), dtype=np.int64)
    here = np.arange(len(seq))
    order[seq - low + 2] = here
    near = np.zeros(len(seq), dtype=bool)
    for back in (1, 2):
        before = order[seq - low + 2 - back]
        near |= (before < here) & (here - before <= LOOKBACK)
    step = np.diff(seq)
    near[2:] |= step[1:] == step[:-1]
    return int(len(seq) - near.sum())


def cold_tensors(dag: ir.ComputeDAG, cache_bytes: int | None = None) -> set[str]:
    """The operands of ``dag``'s reductions that come from memory in a network: its
    constants (weights) and run-time inputs larger than one core's L2 (``cache_bytes``).
    An epilogue's operands (a residual, a bias) are left out: read in the order of the
    output's tiles, they stream, and counting their lines let a program twice as slow
    warm win ResNet-50's residual 1x1 convolutions."""
    limit = l2_bytes() if cache_bytes is None else cache_bytes
    reduced = [t for t in dag.inputs
               if any(getattr(op, "reduce_axis", ()) for op in nx.descendants(dag.graph, t.op))]
    return {t.name for t in reduced if t.op.constant or math.prod(t.shape) * dt.itemsize(t.dtype) > limit}


def first_read_misses(state: ir.State, names, threads: int, layout_rewrite: bool = False) -> float:
    """Cache lines of the tensors ``names`` that one of ``threads`` threads waits for
    (``_unprefetched``) in one call of ``state``; reads whose index depends on data are
    left out."""
    names = set(names)
    if not names:
        return 0.0
    body = ir.lower(state, layout_rewrite=layout_rewrite).body
    reads: dict = {}
    _first_reads(body, [], names, reads)
    misses = 0.0
    for loops, buffer, indices in reads.values():
        try:
            lines, scale = _line_sequence(loops, buffer, indices, threads)
        except DependsOnData:
            continue
        misses += _unprefetched(lines) * scale
    return misses


#: float32 flops a vector lane completes a cycle (two FMA pipes, two flops each), and the clock
#: assumed, for the warm time of the model's favourite (``warm_seconds``)
_FLOPS_PER_LANE_CYCLE, _CLOCK_HZ = 4, 3e9
#: bytes a second the kernel's inputs and output stream at when they miss the caches
_STREAM_BYTES_PER_S = 20e9


def roofline_seconds(dag: ir.ComputeDAG, hardware) -> tuple[float, float]:
    """(arithmetic, memory): ``dag``'s flops at the CPU's peak, and its tensors streamed
    once from memory."""
    peak = hardware.num_cores * hardware.vector_lanes * _FLOPS_PER_LANE_CYCLE * _CLOCK_HZ
    tensors = list(dag.inputs) + list(dag.outputs)
    moved = sum(math.prod(t.shape) * dt.itemsize(t.dtype) for t in tensors)
    return dag.flop_count() / peak, moved / _STREAM_BYTES_PER_S


def warm_seconds(dag: ir.ComputeDAG, hardware) -> float:
    """A roofline guess of a good program's time (the longer of ``roofline_seconds``). It
    only sets how many misses a program may wait for before ``prefer_prefetched`` looks
    past it."""
    return max(roofline_seconds(dag, hardware))


def prefer_prefetched(task, states: list, scores) -> int:
    """The position in ``states`` (ranked best first by the cost model, with ``scores``)
    of the program to run in a network. The first, unless its ``first_read_misses`` of the
    tensors that come from memory there (``cold_tensors``) cost more than ``MISS_BUDGET``
    times the task's ``warm_seconds`` at ``MISS_SECONDS`` each; then the best ranked whose
    misses cost at most ``REPLACEMENT_BUDGET`` times that, else the best ranked within
    ``MISS_BUDGET``, else the first. A guard against walks no prefetcher follows, not a
    trade-off: the model's scores do not say how much slower its second is (ViT's P·V
    product: 8 % lower score, 2.4x slower), so a saving of a few misses must never buy a
    lower-ranked program. Only the first is lowered unless it is over budget. A task whose
    tensors take longer to stream than its arithmetic keeps its first: it streams them at
    the memory's bandwidth whatever the order (MobileNet-V3's and EfficientNet-B0's
    112x112 depthwise layers took as long in a run with either program)."""
    hardware = task.hardware
    names = cold_tensors(task.dag)
    if hardware.is_gpu or not names or not states:
        return 0
    arithmetic, memory = roofline_seconds(task.dag, hardware)
    if arithmetic < memory:
        return 0
    layout_rewrite = bool(getattr(task, "layout_rewrite", False))
    warm = arithmetic           # (the task's warm_seconds: arithmetic is the longer)

    def cost(state) -> float:
        """The misses' share of ``warm``; infinite for a program that does not lower (it is
        never the replacement, and a first that does not lower stays the pick)."""
        try:
            return MISS_SECONDS * first_read_misses(state, names, hardware.num_cores, layout_rewrite) / warm
        except ValueError:          # (ir.lower's LoweringError, a step's InvalidStep)
            return math.inf

    first = cost(states[0])
    if first <= MISS_BUDGET or first == math.inf:
        return 0
    within = None
    for k in range(1, len(states)):
        if scores[k] <= 0:
            break
        share = cost(states[k])
        if share <= REPLACEMENT_BUDGET:
            return k
        if within is None and share <= MISS_BUDGET:
            within = k
    return within or 0
