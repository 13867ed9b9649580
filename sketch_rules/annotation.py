"""Random annotation (Ansor 4.2): turn a sketch into a complete program. Each rule is a
separate step of sampling; every "random" is uniform over the valid values and drawn from
the generator the caller passes (seeded from the task's seed)."""
from __future__ import annotations

import functools
import math
from dataclasses import replace

import numpy as np

import ir
from ir import expr as E
from ir.bounds import expand_reads
from ir.lower import padded_row_lengths
from ir.steps import SplitStep

from . import analysis as A
from .rule import SketchContext

AUTO_UNROLL_CHOICES_CPU = (0, 16, 64, 512)
AUTO_UNROLL_CHOICES_GPU = (0, 16, 64, 512, 1024)


@functools.lru_cache(maxsize=4096)
def factorizations(extent: int, n: int, max_innermost: int,
                   innermost: tuple[int, ...] | None = None) -> tuple[tuple[int, ...], ...]:
    """Every choice of ``n`` inner tile lengths whose product divides ``extent`` and whose
    innermost length is at most ``max_innermost`` (and one of ``innermost`` when given, e.g.
    ``vector_lengths``); the outer length is the quotient. An ``innermost`` length that
    does not divide ``extent`` (a padded vector tile, ``padded_vector_length``) takes the
    other levels from the factorisations of the number of its tiles: 16 lanes of 408 make
    26 tiles, so (13, 16), (2, 16), (26, 16)..., the last tile running 8 lanes past the end."""
    out = list(_exact_factorizations(extent, n, max_innermost, innermost))
    for length in innermost or ():
        if n >= 1 and extent % length and length <= max_innermost:
            tiles = -(-extent // length)
            out += [rest + (length,) for rest in _exact_factorizations(tiles, n - 1, tiles, None)]
    return tuple(out)


@functools.lru_cache(maxsize=4096)
def _exact_factorizations(extent: int, n: int, max_innermost: int,
                          innermost: tuple[int, ...] | None) -> tuple[tuple[int, ...], ...]:
    if n == 0:
        return ((),)
    out = []
    for first in divisors(extent):
        if n == 1 and (first > max_innermost or (innermost is not None and first not in innermost)):
            continue
        for rest in _exact_factorizations(extent // first, n - 1, max_innermost, innermost):
            out.append((first,) + rest)
    return tuple(out)


#: float32 lanes of a 32-byte (ymm) register: a vector loop whose length is a multiple of it
#: splits into whole registers on AVX2 (8 lanes) and AVX-512 (24 lanes: a zmm and a ymm)
VECTOR_LANE_GROUP = 8


#: float32 lanes of the widest vector register (AVX-512's zmm): an axis of a multiple of
#: it has exact vector tiles of every width, and no padded ones
WIDEST_LANES = 16
#: a padded vector tile: at most this many lanes (two zmm, four ymm registers) ...
MAX_PADDED_LANES = 32
#: ... running past the end of its axis by at most this share of the axis (16 lanes of 408
#: channels: 416, 2 %; 16 of 116: 128, 10 %): the lanes past the end are computed and dropped
MAX_PADDED_SHARE = 1 / 8


def padded_vector_length(length: int, extent: int, group: int = VECTOR_LANE_GROUP) -> bool:
    """Whether ``length`` lanes make a padded vector tile of an axis of ``extent``: a
    multiple of the lane ``group`` up to ``MAX_PADDED_LANES`` that does not divide the axis
    and pads it by at most ``MAX_PADDED_SHARE``, on an axis of no multiple of
    ``WIDEST_LANES``. RegNet's 408 channels allow only 8 or 24 exact lanes, 24 being a zmm
    and a ymm, so a third of AVX-512's multiply-adds run at half width; ShuffleNet's 116
    allow 4. Where the stage reads only weights along the axis
    (``paddable``), 16 or 32 lanes run past it for 2 % more work (``ir.lower`` drops the
    tile's guards)."""
    if length % group or length > MAX_PADDED_LANES or extent % length == 0 or extent % WIDEST_LANES == 0:
        return False
    return -(-extent // length) * length - extent <= MAX_PADDED_SHARE * extent


def good_vector_length(length: int, extent: int, group: int = VECTOR_LANE_GROUP, padded: bool = False) -> bool:
    """Whether a vectorised loop of ``length`` lanes over an axis of ``extent`` is one the CPU
    search space allows: 1 (no vector: LLVM may still vectorise another loop), a multiple
    of the lane ``group`` that divides the extent where ``group`` divides it, else a divisor
    of ``group`` (a part of a register: 116 = 4 x 29 gets 1, 2 or 4 lanes). ``extent`` is
    the axis's ``lane_span``: a grouped convolution's 24 channels a group get 8 or 24 lanes.
    Odd widths (17 or 51 lanes of 408 = 8 x 51, 29 of 116) are left out: LLVM splits such
    a vector into whole registers and a scalar remainder, and the base model, which saw few,
    ranked them first (RegNet's 408-channel convolutions at 9-15 GFLOPS, 24 lanes of the
    same space at 220). With ``padded`` (the axis is ``paddable``), also a
    ``padded_vector_length``."""
    if length == 1:
        return True
    if padded and padded_vector_length(length, extent, group):
        return True
    return length % group == 0 and extent % length == 0 if extent % group == 0 else group % length == 0


@functools.lru_cache(maxsize=4096)
def vector_lengths(extent: int, max_innermost: int, group: int = VECTOR_LANE_GROUP,
                   padded: bool = False) -> tuple[int, ...]:
    """The innermost tile lengths (at most ``max_innermost``) that a vectorised split of
    ``extent`` may take (``good_vector_length``), ascending: 408 -> (1, 8, 24),
    116 -> (1, 2, 4), 256 -> (1, 8, 16, 32, 64); with ``padded``, the padded ones too:
    408 -> (1, 8, 16, 24, 32), 116 -> (1, 2, 4, 8, 16, 24, 32). What sampling
    (``FillTileSize``) and the tile-size mutation obey."""
    exact = [d for d in divisors(extent) if d <= max_innermost and good_vector_length(d, extent, group)]
    pads = [n for n in range(group, min(max_innermost, MAX_PADDED_LANES) + 1, group)
            if padded and padded_vector_length(n, extent, group)] if group > 1 else []
    return tuple(sorted(exact + pads))


def padded_extent(extent: int, group: int = VECTOR_LANE_GROUP) -> int:
    """How far the widest padded vector tile of an axis of ``extent`` runs
    (``padded_vector_length``): 197 tokens -> 216 (9 tiles of 24 lanes); ``extent`` where
    the axis has no padded tile. A run-time tensor this wide along the axis may be read by a
    padded tile (``paddable``): ``autosched.graph.passes`` makes a key matrix's transposed
    copy so."""
    lengths = [n for n in range(group, MAX_PADDED_LANES + 1, group) if padded_vector_length(n, extent, group)]
    return max((-(-extent // n) * n for n in lengths), default=extent)


def paddable(stage, axis: str) -> bool:
    """Whether a vector tile of space axis ``axis`` of ``stage`` may run past the axis's end
    (``padded_vector_length``): every tensor the stage reads along the axis is a constant
    input (a weight, which layout rewrite packs with zeros past its end) or a tensor that
    the axis indexes alone in a dimension ``padded_extent`` long (a key matrix's padded
    transposed copy), so the padded lanes read no other data and ``ir.lower`` computes them
    in the stage's local tile without masks. A 1x1 convolution's output channels read only
    its weights; a depthwise one's read the image too."""
    if stage.is_placeholder or stage.body is None:
        return False
    found = next(((d, v) for d, v in enumerate(stage.axes) if v.name == axis), None)
    if found is None:
        return False
    d, var = found
    key = (id(stage.body), id(var))
    hit = _PADDABLE.get(key)
    if hit is not None and hit[0] is stage.body:
        return hit[1]
    wide = padded_extent(int(stage.op.shape[d]))
    ok = True
    for node in E.walk(stage.body):
        if isinstance(node, E.TensorRead) and any(v is var for i in node.indices for v in E.free_vars(i)):
            if not _reads_padded(node, var, wide):
                ok = False
                break
    if len(_PADDABLE) >= 4096:
        _PADDABLE.clear()
    _PADDABLE[key] = (stage.body, ok)
    return ok


def _reads_padded(read: E.TensorRead, var, wide: int) -> bool:
    """Whether ``read`` stays in its tensor when ``var`` runs to ``wide``: a constant input
    (packed with zeros past its end), or ``var`` alone indexing a dimension that long."""
    op = read.tensor.op
    if isinstance(op, ir.PlaceholderOp) and op.constant:
        return True
    moved = [d for d, i in enumerate(read.indices) if any(v is var for v in E.free_vars(i))]
    return len(moved) == 1 and read.indices[moved[0]] is var and int(read.tensor.shape[moved[0]]) >= wide


def rows_paddable(stage, axis: str) -> bool:
    """Whether a row tile (no vector) of space axis ``axis`` of ``stage`` may run past the
    axis's end (``padded_row_lengths``): every tensor the stage reads along the axis is a
    constant input (packed with zeros past its end) or indexed in one dimension by the
    axis alone, a read that ``ir.lower`` clamps to the last row. Q's rows in Q·Kᵀ, x's in
    a dense layer; not a convolution's image rows (``h * stride + rh``)."""
    if stage.is_placeholder or stage.body is None:
        return False
    var = next((v for v in stage.axes if v.name == axis), None)
    if var is None:
        return False
    return all(_reads_padded(node, var, 0) for node in E.walk(stage.body)
               if isinstance(node, E.TensorRead) and any(v is var for i in node.indices for v in E.free_vars(i)))


#: (id(body), id(var)) -> (body, paddable): bodies are shared by the States of a task
_PADDABLE: dict = {}


def vector_axis_extent(stage, group: int = VECTOR_LANE_GROUP) -> int | None:
    """The span that a vector loop over ``stage``'s last loop tiles, when that loop is the
    innermost tile of a space axis (a loop named ``AXIS.k``: the last part of a split of
    ``AXIS``): the axis's ``lane_span``; None when its last loop is no such tile (fused,
    reduce, unsplit)."""
    found = vector_axis(stage, group)
    return None if found is None else found[1]


def vector_axis(stage, group: int = VECTOR_LANE_GROUP) -> tuple[str, int] | None:
    """(axis name, ``lane_span``) of the space axis whose innermost tile is ``stage``'s last
    loop (see ``vector_axis_extent``), or None."""
    if stage.is_placeholder or not stage.iters:
        return None
    last = stage.iters[-1]
    axis, _, part = last.name.rpartition(".")
    if last.kind != "space" or not part.isdigit():
        return None
    span = lane_span(stage, axis, group)
    return None if span is None else (axis, span)


def on_grid(stage, group: int = VECTOR_LANE_GROUP) -> bool:
    """Whether ``stage``'s last loop, vectorised, has a length the CPU space allows
    (``good_vector_length``, padded lengths where the axis is ``paddable``); True where the
    last loop tiles no single space axis."""
    found = vector_axis(stage, group)
    if found is None:
        return True
    axis, span = found
    length = stage.iters[-1].extent
    if good_vector_length(length, span, group):
        return True
    return _padded_tile(stage, axis, span, length, group)


def _padded_tile(stage, axis: str, span: int, length: int, group: int) -> bool:
    """Whether a last loop of ``length`` lanes is a padded tile of ``axis`` the space allows:
    over the whole axis (not a grouped convolution's span), of a ``paddable`` stage computed
    into a local tile (``pads_locally``)."""
    extent = next(int(stage.op.shape[d]) for d, v in enumerate(stage.axes) if v.name == axis)
    return (span == extent and padded_vector_length(length, extent, group) and pads_locally(stage)
            and paddable(stage, axis))


def pads_locally(stage) -> bool:
    """Whether ``stage`` computes into a local tile (it is attached inside another stage's
    loops: a cache_write stage, or an anchor fused into its epilogue), the only place where
    ``ir.lower`` computes a padded tile's lanes without a guard. A stage at root writes a
    global buffer of the axis's true extent, where every padded lane would land on the next
    row: there each multiply-add is guarded, and a 1x1 convolution of ShuffleNet-V2 over 232
    channels with 24-lane tiles ran 15x slower than with exact 8-lane ones (AVX2, Zen 3)."""
    return stage.compute_at == "iter"


def lane_span(stage, axis: str, group: int = VECTOR_LANE_GROUP) -> int | None:
    """The extent of space axis ``axis`` of ``stage`` (None if it has none) or, where the
    stage reads through a floor division or modulo of the axis by constants that the lane
    ``group`` divides, their greatest common divisor: a grouped convolution reads input
    channel (c // 24) * 24 + rc, one value for the 24 output channels of a group, so a
    vector of 8 or 24 of them loads one scalar where 16 (crossing groups) gathers. Vector
    lengths are then on the grid of that span (``good_vector_length``)."""
    for d, var in enumerate(stage.axes):
        if var.name == axis:
            extent = int(stage.op.shape[d])
            blocks = _division_blocks(stage.body, var) if stage.body is not None else ()
            span = math.gcd(*blocks) if blocks else extent
            return span if span % group == 0 and extent % span == 0 else extent
    return None


#: (id(body), id(var)) -> (body, var, blocks): bodies are shared by the States of a task
_BLOCKS: dict = {}


def _division_blocks(body: E.Expr, var) -> set[int]:
    """The constant divisors of the floor divisions and modulos in ``body`` whose dividend
    depends on ``var`` (remembered by identity: sampling and mutation ask it per program)."""
    hit = _BLOCKS.get((id(body), id(var)))
    if hit is not None and hit[0] is body and hit[1] is var:
        return hit[2]
    out = set()
    for node in E.walk(body):
        if isinstance(node, E.Binary) and node.op in ("//", "%") and isinstance(node.b, E.Const) \
                and isinstance(node.b.value, int) and node.b.value > 0 and any(v is var for v in E.free_vars(node.a)):
            out.add(int(node.b.value))
    if len(_BLOCKS) >= 4096:
        _BLOCKS.clear()
    _BLOCKS[(id(body), id(var))] = (body, var, out)
    return out


def off_grid_vector_loops(state: ir.State, group: int = VECTOR_LANE_GROUP) -> int:
    """How many vectorised loops of ``state`` tile an axis with a length the CPU space does
    not allow (``on_grid``: ``good_vector_length``, or a padded tile of a ``paddable``
    axis); the tile-size mutation makes no program with more of them than its parent."""
    return sum(1 for st in state.stages
               if not st.is_placeholder and st.iters and st.iters[-1].annotation == "vectorize"
               and not on_grid(st, group))


@functools.lru_cache(maxsize=4096)
def divisors(n: int) -> tuple[int, ...]:
    """All divisors of ``n``, ascending."""
    small = [d for d in range(1, int(n ** 0.5) + 1) if n % d == 0]
    return tuple(sorted(set(small + [n // d for d in small])))


class InitRule:
    """One random-annotation step: ``apply(ctx, state, rng) -> State`` (may raise
    ir.InvalidStep, which rejects the sample)."""
    name = "init_rule"

    def apply(self, ctx: SketchContext, state: ir.State, rng: np.random.Generator) -> ir.State:
        raise NotImplementedError


class FillTileSize(InitRule):
    """Choose every unchosen split's lengths uniformly among the exact factorisations of
    the loop's extent (innermost length at most ``max_innermost_split_factor``); splits
    that follow them take their lengths from them on replay. With a ``vector_lane_group``
    (the CPU's), a split whose innermost part is its stage's last loop (what ``Vectorize``
    vectorises) takes an innermost length of ``vector_lengths`` only: a draw off that grid,
    or any draw over a ``paddable`` axis with no exact vector (a prime), is drawn again, the
    vector length first, padded lengths among them where the stage is ``paddable`` along
    the axis."""
    name = "fill_tile_size"

    def __init__(self, vector_lane_group: int | None = None):
        self.vector_lane_group = vector_lane_group

    def apply(self, ctx, state, rng):
        limit = ctx.hardware.max_innermost_split_factor
        vector_loops = self._vector_loops(state)
        local = {st.name for st in state.stages if pads_locally(st)}   # where the sketch attaches them
        current = ir.State.initial(state.dag)
        for step in state.steps:
            if isinstance(step, SplitStep) and any(x is None for x in step.lengths):
                stage = current.stages[step.stage_id]
                it = stage.iters[step.iter_id]
                schemes = factorizations(it.extent, len(step.lengths), limit)
                lengths = schemes[int(rng.integers(len(schemes)))]
                vectorised = (stage.name, f"{it.name}.{len(step.lengths)}") in vector_loops and step.inner_to_outer
                span = lane_span(stage, it.name, self.vector_lane_group) if vectorised else None
                pads = vectorised and stage.name in local and span in (None, it.extent) and paddable(stage, it.name)
                if vectorised and (not good_vector_length(lengths[-1], span or it.extent, self.vector_lane_group)
                                   or pads and self._only_padded_vectors(it, limit)):
                    # an odd width drawn (17 lanes of 408), or an axis whose only vectors are
                    # padded (197 tokens): the vector length again, uniformly on the grid (by
                    # scheme, 1 lane would dominate: 408 = 8 x 51 has 45 schemes ending in 1
                    # and 4 ending in 24); on-grid draws keep the schemes' own distribution,
                    # which the base model's picks were tuned on
                    grid = vector_lengths(span or it.extent, limit, self.vector_lane_group, pads)
                    schemes = factorizations(it.extent, len(step.lengths), limit, (grid[int(rng.integers(len(grid)))],))
                    lengths = schemes[int(rng.integers(len(schemes)))]
                elif not vectorised and lengths[-1] == 1 and self._padded_rows(stage, it):
                    # a register tile over a prime axis (197 tokens) is 1 row: its rows again,
                    # uniformly, padded ones among them
                    rows = (1,) + padded_row_lengths(it.extent)
                    schemes = factorizations(it.extent, len(step.lengths), limit, (rows[int(rng.integers(len(rows)))],))
                    lengths = schemes[int(rng.integers(len(schemes)))]
                step = replace(step, lengths=lengths)
            current = current.apply(step)
        return current

    def _padded_rows(self, stage, it) -> bool:
        """Whether loop ``it`` (a space axis, not vectorised) may take a padded row tile:
        on the CPU (a lane group), in a cache_write stage (its register tile, whose guards
        ``ir.lower`` drops: in the output itself every multiply-add would be masked), over
        an axis ``padded_row_lengths`` allows, ``rows_paddable``."""
        return (self.vector_lane_group is not None and stage.origin == "cache_write" and it.kind == "space"
                and bool(padded_row_lengths(it.extent)) and rows_paddable(stage, it.name))

    def _only_padded_vectors(self, it, limit: int) -> bool:
        """Whether the axis of loop ``it`` (one that may take padded tiles) has no exact
        vector tile but padded ones (a prime extent): there a draw of 1 lane is drawn again
        on the padded grid."""
        return (vector_lengths(it.extent, limit, self.vector_lane_group) == (1,)
                and len(vector_lengths(it.extent, limit, self.vector_lane_group, True)) > 1)

    def _vector_loops(self, sketch: ir.State) -> set[tuple[str, str]]:
        """(stage, loop) names of the sketch's last loops that tile a space axis and that
        ``Vectorize`` will vectorise (not unrolled): none without a lane group."""
        if not self.vector_lane_group:
            return set()
        return {(st.name, st.iters[-1].name) for st in sketch.stages
                if vector_axis_extent(st) is not None and st.iters[-1].annotation == "none"}


class ChangeComputeLocation(InitRule):
    """For each stage that is not multi-level tiled (e.g. padding, a reduction's rfactor
    stage), choose uniformly where it is computed: at root, inlined (if it has no
    reduction), or inside a loop of its consumer (or of the stage that consumer is
    computed in, up to its attach point); a cache_read copy only inside those loops."""
    name = "change_compute_location"

    def apply(self, ctx, state, rng):
        for stage_id in range(len(state.stages) - 1, -1, -1):
            st = state.stages[stage_id]
            if (st.is_placeholder or st.compute_at == "inline" or A.is_output(state, stage_id)
                    or A.is_tiled(state, stage_id) or A.needs_multi_level_tiling(state, stage_id)
                    or st.origin == "cache_write"):
                continue
            choices = compute_location_choices(state, stage_id)
            # every choice is a step (even "stay at root"): the decision is recorded and mutable
            choice = choices[int(rng.integers(len(choices)))]
            if choice == "root":
                state = state.compute_root(stage_id)
            elif choice == "inline":
                state = state.compute_inline(stage_id)
            else:
                state = state.compute_at(stage_id, choice[0], choice[1])
        return state


def compute_location_choices(state: ir.State, stage_id: int) -> list:
    """Where a stage that is not multi-level tiled may be computed: "root", "inline" (no
    reduction, nothing attached to it) or a (stage, loop) of its consumer. A cache_read
    copy is only worth making inside its consumer's tiles (at root it copies the whole
    tensor unchanged, inlined it is gone), so it gets only those when there are any."""
    st = state.stages[stage_id]
    loops = compute_location_candidates(state, stage_id)
    if st.origin == "cache_read" and loops:
        return loops
    choices: list = ["root"]
    if not st.reduce_axes and A.is_strict_inlinable(state, stage_id) and not state.attached_to(stage_id):
        choices.append("inline")
    return choices + loops


def compute_location_candidates(state: ir.State, stage_id: int) -> list[tuple[int, int]]:
    """Loops of the single consumer before its first reduce loop (none vectorised), and
    the loops of the stage that consumer is computed in, up to its attach point. A
    reduction stops at the first consumer loop its values do not depend on (softmax's
    row sum inside the loop over a row's elements): inside it, it would be recomputed on
    every iteration for the same values, a cost of that loop's extent times the reduction."""
    consumers = state.consumers(stage_id)
    if len(consumers) != 1:
        return []
    target = consumers[0]
    reading = _reading_loop_vars(state, stage_id, target) if state.stages[stage_id].reduce_axes else None
    out = []
    for pos, it in enumerate(state.stages[target].iters):
        if it.kind == "reduce" or it.annotation == "vectorize":
            break
        if reading is not None and id(it.var) not in reading:
            break
        out.append((target, pos))
    tst = state.stages[target]
    if tst.compute_at == "iter":
        out.extend((tst.attach[0], p) for p in range(tst.attach[1] + 1))
    return out


def _reading_loop_vars(state: ir.State, stage_id: int, target: int) -> set[int]:
    """Ids of the loop variables of ``target`` on which the part of stage ``stage_id``
    that ``target`` reads depends (through inlined stages)."""
    tst = state.stages[target]
    reads = expand_reads(state, tst.body, state.stages[stage_id].op.output)
    used_axes = {id(v) for indices in reads for i in indices for v in E.free_vars(i)}
    out: set[int] = set()
    for axis, value in zip(tst.all_axes, tst.axis_values):
        if id(axis) in used_axes:
            out |= {id(v) for v in E.free_vars(value)}
    return out


#: a root stage with up to this many times ``HardwareParams.min_parallel_work`` iterations
#: is parallel or serial at random (half each), so that the search and its cost model
#: choose; below it runs serial, above it parallel
PARALLEL_OPTIONAL_FACTOR = 4


class Parallel(InitRule):
    """Fuse the outermost space loops of each root stage until there are more than
    cores x 16 iterations, a loop with stages computed inside it, or an annotated or
    reduce loop; mark the fused loop parallel. If the first loop already holds stages,
    recurse into them (Ansor's InitParallel). Unlike Ansor, a stage with little work
    (``HardwareParams.min_parallel_work``) stays serial: waking the threads would cost
    more than it saves; a mid-sized one is parallel or not at random."""
    name = "parallel"

    def apply(self, ctx, state, rng):
        least = ctx.hardware.min_parallel_work
        for stage_id in range(len(state.stages)):
            st = state.stages[stage_id]
            if st.is_placeholder or st.compute_at != "root":
                continue
            work = A.stage_work(state, stage_id)
            if work < least or (work < least * PARALLEL_OPTIONAL_FACTOR and rng.integers(2)):
                continue
            state = self._annotate(ctx, state, stage_id, 0)
        return state

    def _annotate(self, ctx, state, stage_id, offset):
        st = state.stages[stage_id]
        attach_points = {c_st.attach[1] for c_st in (state.stages[c] for c in state.attached_to(stage_id))}
        fuse, degree, pos = [], 1, offset
        while pos < len(st.iters):
            it = st.iters[pos]
            if it.kind == "reduce" or it.annotation != "none":
                break
            fuse.append(pos)
            degree *= it.extent
            if degree > ctx.hardware.num_cores * 16 or pos in attach_points:
                break
            pos += 1
        if degree == 1:
            if pos < len(st.iters) and pos in attach_points:
                for child in state.attached_to(stage_id):
                    if state.stages[child].attach[1] == pos:
                        state = self._annotate(ctx, state, child, 0)
                return self._annotate(ctx, state, stage_id, pos + 1)
            return state
        if len(fuse) > 1:
            state = state.fuse(stage_id, fuse)
        return state.parallel(stage_id, fuse[0])


class Unroll(InitRule):
    """Give each stage with a reduction a random ``auto_unroll_max_step`` from {0, 16, 64,
    512} (GPU adds 1024): the inner loop nests of at most that many iterations unroll."""
    name = "unroll"

    def apply(self, ctx, state, rng):
        choices = ctx.space.auto_unroll_choices
        for stage_id, st in enumerate(state.stages):
            if st.is_placeholder or st.compute_at == "inline" or not any(it.kind == "reduce" for it in st.iters):
                continue
            # recorded even when 0, so that the decision is in the log and mutation can change it
            state = state.pragma_auto_unroll(stage_id, choices[int(rng.integers(len(choices)))])
        return state


class Vectorize(InitRule):
    """Fuse the innermost space loops while their product stays within
    ``max_vectorize_size`` (not across an attach point, an annotated or reduce loop, and
    only one loop in a tiled stage, whose inner two loops are not contiguous together);
    vectorise a random number of them, from one to all, never a vector of one lane where
    more loops would give a longer one. With a ``vector_lane_group`` (the CPU's), a tile of
    a length ``good_vector_length`` rejects (a consumer tiled like its producer: 2 x 17 lanes
    of 408 channels) stays a plain loop, for LLVM to vectorise or not."""
    name = "vectorize"

    def __init__(self, vector_lane_group: int | None = None):
        self.vector_lane_group = vector_lane_group

    def apply(self, ctx, state, rng):
        limit = ctx.hardware.max_vectorize_size
        for stage_id in range(len(state.stages)):
            st = state.stages[stage_id]
            if st.is_placeholder or st.compute_at == "inline":
                continue
            attach_points = {state.stages[c].attach[1] for c in state.attached_to(stage_id)}
            tiled = A.is_tiled(state, stage_id)
            n, prod = 0, 1
            while n < len(st.iters):
                pos = len(st.iters) - 1 - n
                it = st.iters[pos]
                if pos in attach_points or it.kind == "reduce" or it.annotation != "none":
                    break
                if tiled and n:
                    break
                prod *= it.extent
                if prod > limit:
                    break
                n += 1
            if n == 0 or (tiled and not self._good_length(st)):
                continue
            if n > 1:   # how many: any, except those of one lane (scalar code) where more are possible
                lanes = [k for k in range(1, n + 1)
                         if math.prod(it.extent for it in st.iters[len(st.iters) - k:]) > 1] or list(range(1, n + 1))
                n = lanes[int(rng.integers(len(lanes)))]
            positions = list(range(len(st.iters) - n, len(st.iters)))
            if n > 1:
                state = state.fuse(stage_id, positions)
            state = state.vectorize(stage_id, positions[0])
        return state

    def _good_length(self, stage) -> bool:
        return not self.vector_lane_group or on_grid(stage, self.vector_lane_group)


def cpu_init_rules() -> list[InitRule]:
    """Ansor's initial-population rules for CPU, in order."""
    return [FillTileSize(VECTOR_LANE_GROUP), ChangeComputeLocation(), Parallel(), Unroll(),
            Vectorize(VECTOR_LANE_GROUP)]
