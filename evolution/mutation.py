"""The mutations of Ansor's evolutionary search (5.1), each rewriting one kind of decision
of a program and rebuilding it from its steps; None when the edit is not valid. Each kind
is a ``Mutation`` class with a weight, as sketch rules are rule classes; a search space
has its list (``cpu_mutations``, ``gpu_mutations``; ``register_mutations`` for a new one).

- tile size: move a factor from one tile level of a split to another (product kept);
- parallel granularity: fuse more or fewer outer loops into the parallel loop;
- pragma: another ``auto_unroll_max_step``;
- compute location: another valid place for a stage that is not multi-level tiled;
- (option, OpEvo) tile size by a q-random walk: move along the topology of factorisations,
  one prime factor at a time, several steps with probability q each.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

import ir
from ir.steps import (AnnotationStep, ComputeAtStep, ComputeInlineStep, ComputeRootStep, FuseStep, PragmaStep,
                      SplitStep, stage_names_along)
from sketch_rules import analysis as A
from sketch_rules import search_space
from sketch_rules.annotation import VECTOR_LANE_GROUP, compute_location_choices, divisors, off_grid_vector_loops

from .draw import Draw
from .genes import lengths_from_parts, replay, split_parts, with_step


def _divisors(n: int) -> tuple[int, ...]:
    """The divisors of ``n`` above 1 (a fused reduction can be a million long: not by trial)."""
    return tuple(d for d in divisors(n) if d > 1)


def _prime_factors(n: int) -> list[int]:
    out, p = [], 2
    while p * p <= n:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    if n > 1:
        out.append(n)
    return out


def _tunable_splits(state: ir.State) -> list[int]:
    return [i for i, s in enumerate(state.steps)
            if isinstance(s, SplitStep) and split_parts(s) is not None and len(split_parts(s)) > 1]


def mutate_tile_size(state: ir.State, rng: np.random.Generator, max_innermost: int = 64,
                     vector_lane_group: int | None = None) -> ir.State | None:
    """Divide one tile level of a random split by a random divisor and multiply another
    level by it (Ansor's tile size mutation): the product, so validity, is kept. With a
    ``vector_lane_group`` (the CPU's), a child with more vector loops of lengths the space
    does not allow than its parent is no child (``_keeps_vector_lengths``)."""
    candidates = _tunable_splits(state)
    if not candidates:
        return None
    for _ in range(8):
        index = candidates[int(rng.integers(len(candidates)))]
        step = state.steps[index]
        parts = split_parts(step)
        src_choices = [i for i, p in enumerate(parts) if p > 1]
        if not src_choices:
            continue
        src = src_choices[int(rng.integers(len(src_choices)))]
        dst = int(rng.integers(len(parts) - 1))
        dst = dst if dst < src else dst + 1
        choices = _divisors(parts[src])
        factor = choices[int(rng.integers(len(choices)))]
        new = list(parts)
        new[src] //= factor
        new[dst] *= factor
        if new[-1] > max_innermost:
            continue
        child = with_step(state, index, replace(step, lengths=lengths_from_parts(step, new)))
        if child is None or _keeps_vector_lengths(state, child, vector_lane_group) and _tiles_cleanly(child, index):
            return child
    return None


def _tiles_cleanly(child: ir.State, index: int) -> bool:
    """Whether split ``index`` of ``child`` is exact or a padded vector tile (``split_parts``):
    moving a factor out of a padded tile's 16 lanes (408 as 52 x 8) leaves a split that
    tiles neither way."""
    return split_parts(child.steps[index]) is not None


def _keeps_vector_lengths(parent: ir.State, child: ir.State, group: int | None) -> bool:
    """Whether ``child`` has no more vector loops off the lane grid
    (``sketch_rules.annotation.good_vector_length``) than ``parent``; always without a ``group``."""
    return not group or off_grid_vector_loops(child, group) <= off_grid_vector_loops(parent, group)


def mutate_tile_size_random_walk(state: ir.State, rng: np.random.Generator, q: float = 0.5,
                                 max_innermost: int = 64, vector_lane_group: int | None = None) -> ir.State | None:
    """OpEvo's q-random walk on the topology of factorisations: neighbours differ by one
    prime factor moved between two levels; keep walking with probability ``q``, so that
    near factorisations are likelier than far ones. ``vector_lane_group``: as
    ``mutate_tile_size``'s."""
    candidates = _tunable_splits(state)
    if not candidates:
        return None
    index = candidates[int(rng.integers(len(candidates)))]
    step = state.steps[index]
    parts = split_parts(step)
    moved = False
    while True:
        movable = [i for i, p in enumerate(parts) if p > 1]
        if not movable:
            break
        src = movable[int(rng.integers(len(movable)))]
        primes = _prime_factors(parts[src])
        prime = primes[int(rng.integers(len(primes)))]
        dst = int(rng.integers(len(parts) - 1))
        dst = dst if dst < src else dst + 1
        if dst == len(parts) - 1 and parts[dst] * prime > max_innermost:
            break
        parts = list(parts)
        parts[src] //= prime
        parts[dst] *= prime
        moved = True
        if rng.random() >= q:
            break
    if not moved:
        return None
    child = with_step(state, index, replace(step, lengths=lengths_from_parts(step, parts)))
    if child is None or _keeps_vector_lengths(state, child, vector_lane_group) and _tiles_cleanly(child, index):
        return child
    return None


def mutate_auto_unroll(state: ir.State, rng: np.random.Generator, choices) -> ir.State | None:
    """Another ``auto_unroll_max_step`` for a random stage that has one."""
    candidates = [i for i, s in enumerate(state.steps) if isinstance(s, PragmaStep)]
    if not candidates:
        return None
    index = candidates[int(rng.integers(len(candidates)))]
    step = state.steps[index]
    others = [c for c in choices if c != step.auto_unroll_max_step]
    return with_step(state, index, replace(step, auto_unroll_max_step=others[int(rng.integers(len(others)))]))


def mutate_parallel(state: ir.State, rng: np.random.Generator) -> ir.State | None:
    """Change how many outer loops are fused into a parallel loop; later steps on that
    stage are renumbered for the new loop count (where Ansor's release gave up)."""
    annotations = [i for i, s in enumerate(state.steps)
                   if isinstance(s, AnnotationStep) and s.annotation == "parallel"]
    if not annotations:
        return None
    at = annotations[int(rng.integers(len(annotations)))]
    ann = state.steps[at]
    fuse_at = at - 1 if at > 0 and isinstance(state.steps[at - 1], FuseStep) and \
        state.steps[at - 1].stage_id == ann.stage_id and state.steps[at - 1].iter_ids[0] == ann.iter_id else None
    old_n = len(state.steps[fuse_at].iter_ids) if fuse_at is not None else 1
    before = replay(state.dag, state.steps[:fuse_at if fuse_at is not None else at])
    if before is None:
        return None
    st = before.stages[ann.stage_id]
    limit = 0
    attach_points = {before.stages[c].attach[1] for c in before.attached_to(ann.stage_id)}
    for pos in range(ann.iter_id, len(st.iters)):
        if st.iters[pos].kind != "space" or st.iters[pos].annotation != "none":
            break
        limit += 1
        if pos in attach_points:
            break
    options = [n for n in range(1, limit + 1) if n != old_n]
    if not options:
        return None
    new_n = options[int(rng.integers(len(options)))]
    steps = list(state.steps[:fuse_at if fuse_at is not None else at])
    if new_n > 1:
        steps.append(FuseStep(ann.stage_id, tuple(range(ann.iter_id, ann.iter_id + new_n))))
    steps.append(ann)
    shift = old_n - new_n  # loops of this stage after the parallel one move by this
    for later in state.steps[at + 1:]:
        steps.append(_shift_iters(later, ann.stage_id, ann.iter_id + 1, shift))
    return replay(state.dag, steps)


def _shift_iters(step, stage_id: int, first: int, shift: int):
    """A step on ``stage_id`` naming loops at index >= ``first`` renumbered by ``shift``."""
    if shift == 0:
        return step

    def move(i: int) -> int:
        return i + shift if i >= first else i

    if isinstance(step, (SplitStep, AnnotationStep)) and step.stage_id == stage_id:
        return replace(step, iter_id=move(step.iter_id))
    if isinstance(step, FuseStep) and step.stage_id == stage_id:
        return replace(step, iter_ids=tuple(move(i) for i in step.iter_ids))
    if isinstance(step, ComputeAtStep) and step.target_stage_id == stage_id:
        return replace(step, target_iter_id=move(step.target_iter_id))
    return step


def mutate_compute_location(state: ir.State, rng: np.random.Generator, decisions_from: int = 0) -> ir.State | None:
    """Move a stage that is not multi-level tiled (padding, an rfactor stage...) to another
    valid location: root, inline (no reduction) or a loop of its consumer. Only location
    steps from index ``decisions_from`` on (the length of the program's sketch: those
    random annotation chose) are candidates; the sketch's own (an inlined pad, a fused
    consumer) stay."""
    steps = state.steps
    names = stage_names_along(state.dag, steps)  # a step's stage id counts the stages of its time
    candidates = [i for i, s in enumerate(steps)
                  if i >= decisions_from and isinstance(s, (ComputeAtStep, ComputeRootStep, ComputeInlineStep))
                  and _movable(state, state.stage_index(names[i]))]
    if not candidates:
        return None
    index = candidates[int(rng.integers(len(candidates)))]
    step = steps[index]
    before = replay(state.dag, steps[:index])
    if before is None:
        return None
    sid = step.stage_id
    steps_of = {"root": ComputeRootStep(sid), "inline": ComputeInlineStep(sid)}
    options = [steps_of[c] if isinstance(c, str) else ComputeAtStep(sid, *c)
               for c in compute_location_choices(before, sid)]
    options = [o for o in options if o != step]
    if not options:
        return None
    return with_step(state, index, options[int(rng.integers(len(options)))])


def _movable(state: ir.State, stage_id: int) -> bool:
    """Whether random annotation chose this stage's location (see ChangeComputeLocation)."""
    return not A.is_tiled(state, stage_id) and state.raw_stages[stage_id].origin != "cache_write"


# mutations as classes, one list per search space ----------------------------------------------

@dataclass(frozen=True)
class MutationContext:
    """What a mutation may ask besides the program: the unroll steps of the task's search
    space, OpEvo's random-walk ``q`` (None: Ansor's tile-size mutation), the largest
    innermost tile, and where the program's own decisions start (its sketch's length)."""
    auto_unroll_choices: tuple
    random_walk_q: float | None = None
    max_innermost: int = 64
    decisions_from: int = 0


class Mutation:
    """One kind of edit of a program's decisions (Ansor 5.1), drawn with probability in
    proportion to ``weight`` among its search space's mutations; ``apply`` returns the
    child, or None when the edit does not apply to this program."""
    name = "mutation"

    def __init__(self, weight: float):
        self.weight = float(weight)

    def apply(self, state: ir.State, rng: np.random.Generator, ctx: MutationContext) -> ir.State | None:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.weight})"


class TileSizeMutation(Mutation):
    """Another tile size (Ansor's, or OpEvo's random walk when ``ctx.random_walk_q`` is set);
    ``vector_lane_group``: the CPU's, whose vector loops keep the lengths sampling allows."""
    name = "tile_size"

    def __init__(self, weight: float, vector_lane_group: int | None = None):
        super().__init__(weight)
        self.vector_lane_group = vector_lane_group

    def apply(self, state, rng, ctx):
        if ctx.random_walk_q is not None:
            return mutate_tile_size_random_walk(state, rng, ctx.random_walk_q, ctx.max_innermost,
                                                self.vector_lane_group)
        return mutate_tile_size(state, rng, ctx.max_innermost, self.vector_lane_group)


class AutoUnrollMutation(Mutation):
    name = "auto_unroll"

    def apply(self, state, rng, ctx):
        return mutate_auto_unroll(state, rng, ctx.auto_unroll_choices)


class ComputeLocationMutation(Mutation):
    name = "compute_location"

    def apply(self, state, rng, ctx):
        return mutate_compute_location(state, rng, ctx.decisions_from)


class ParallelMutation(Mutation):
    name = "parallel"

    def apply(self, state, rng, ctx):
        return mutate_parallel(state, rng)


def cpu_mutations() -> list[Mutation]:
    """Ansor's CPU mutations and weights (TVM auto_scheduler's SketchPolicy defaults)."""
    return [TileSizeMutation(0.90, VECTOR_LANE_GROUP), AutoUnrollMutation(0.04), ComputeLocationMutation(0.05),
            ParallelMutation(0.01)]


def gpu_mutations() -> list[Mutation]:
    """Ansor's GPU mutations: tile sizes (the block, virtual-thread, thread and register
    tiles, a cooperative fetch's vector length, a simple stage's threads per block) and
    the unroll step. Thread bindings follow the tile sizes on replay, so a child can break
    a block's limits: the evolution drops it (``Backend.limits_violation``)."""
    return [TileSizeMutation(0.90), AutoUnrollMutation(0.10)]


_MUTATIONS = {"cpu": cpu_mutations, "gpu": gpu_mutations}


def register_mutations(space: str, make) -> None:
    """The mutations of search space ``space`` (``sketch_rules.register_search_space``):
    ``make()`` returns a fresh list of ``Mutation``s."""
    if space in _MUTATIONS:
        raise ValueError(f"search space {space!r} has its mutations already")
    _MUTATIONS[space] = make


def mutations_for(task) -> list[Mutation]:
    """The mutations of ``task``'s search space."""
    space = search_space(task).name
    if space not in _MUTATIONS:
        raise ValueError(f"search space {space!r} has no mutations (evolution.mutation.register_mutations)")
    return _MUTATIONS[space]()


def vector_lane_group(task) -> int | None:
    """The lane group whose grid the vector loops of ``task``'s programs keep: its search
    space's tile-size mutation's (None where the space has no such rule, e.g. the GPU's)."""
    return next((m.vector_lane_group for m in mutations_for(task) if isinstance(m, TileSizeMutation)), None)


def mutation_names() -> set[str]:
    """The names of the mutations of every search space."""
    return {m.name for make in _MUTATIONS.values() for m in make()}


def draw_mutation(rng: np.random.Generator, mutations: list[Mutation], weights: dict | None = None) -> Mutation:
    """One of ``mutations`` drawn by their weights, or by ``weights`` ({name: weight}, e.g.
    ``SearchParams.mutation_weights``, whose names ``SearchParams`` checks: a mutation it does
    not name is not drawn); ``weights`` must name some of these. The same draw as
    ``rng.choice`` with those probabilities, its distribution made once per list and weights
    (a round draws thousands of mutations from one)."""
    key = (tuple(id(m) for m in mutations), None if weights is None else tuple(weights.items()))
    hit = _DRAWS.get(key)
    if hit is None or any(a is not b for a, b in zip(hit[0], mutations)):
        if weights is not None:
            drawn = [m for m in mutations if m.name in weights]
            if not drawn:
                raise ValueError(f"mutation weights {weights} name none of this search space's mutations")
        else:
            drawn = list(mutations)
        p = np.array([m.weight if weights is None else weights[m.name] for m in drawn], dtype=float)
        if len(_DRAWS) >= 64:
            _DRAWS.clear()
        hit = _DRAWS[key] = (tuple(mutations), drawn, Draw(p / p.sum()))
    return hit[1][hit[2](rng)]


#: the draws of ``draw_mutation`` by (ids of the mutations, weights), with the mutations kept alive
_DRAWS: dict = {}
