"""Where the executor keeps a network's intermediate tensors: planned once, reused by liveness.

A tensor needs memory from the kernel that writes it until the last kernel that reads it.
``plan_memory`` walks the kernels in run order and places each output in one arena, at an
offset whose bytes are free for that span (best fit among the freed blocks, else the end of
the arena), as TVM's graph memory planner does. Reusing what was just freed keeps the
working set small, and warm in the cache. A subgraph that only reshapes writes nothing: its
output is a view of its input (``aliases``), which then lives as long as either is read.
Graph inputs and outputs get memory of their own (the caller writes and keeps them).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

#: offsets are multiples of this (a cache line, and the widest vector load)
ALIGNMENT = 64


def nbytes(node) -> int:
    return math.prod(node.shape) * np.dtype(node.dtype).itemsize


def _aligned(n: int) -> int:
    return -(-n // ALIGNMENT) * ALIGNMENT


@dataclass
class MemoryPlan:
    """``offsets[id(node)]``: where a planned tensor starts in the arena of ``arena_bytes``;
    ``aliases[id(node)]``: the node whose memory a reshape-only output views; ``own``: the
    nodes with memory of their own (graph inputs and outputs)."""
    arena_bytes: int
    offsets: dict
    aliases: dict
    own: list
    naive_bytes: int     # what one buffer per tensor would take

    def storage(self, node):
        """The node whose memory ``node`` uses (itself unless it is an alias)."""
        while id(node) in self.aliases:
            node = self.aliases[id(node)]
        return node


class _FreeList:
    """Free byte ranges of the arena: best fit, merged with their neighbours when freed."""

    def __init__(self):
        self.blocks: list[tuple[int, int]] = []   # (offset, size), sorted by offset
        self.end = 0

    def take(self, size: int) -> int:
        fits = [(s, k) for k, (o, s) in enumerate(self.blocks) if s >= size]
        if fits:
            s, k = min(fits)
            offset = self.blocks[k][0]
            if s == size:
                del self.blocks[k]
            else:
                self.blocks[k] = (offset + size, s - size)
            return offset
        if self.blocks and self.blocks[-1][0] + self.blocks[-1][1] == self.end:   # grow the last free block
            offset, _ = self.blocks.pop()
        else:
            offset = self.end
        self.end = offset + size
        return offset

    def give(self, offset: int, size: int) -> None:
        self.blocks.append((offset, size))
        self.blocks.sort()
        merged = []
        for o, s in self.blocks:
            if merged and merged[-1][0] + merged[-1][1] == o:
                merged[-1] = (merged[-1][0], merged[-1][1] + s)
            else:
                merged.append((o, s))
        self.blocks = merged


def plan_memory(steps, graph) -> MemoryPlan:
    """Plan the memory of ``steps`` (``(output node, input nodes, is_alias)`` in run order)
    for ``graph``: its inputs and outputs (and what an output views) get their own memory."""
    aliases = {id(out): ins[0] for out, ins, is_alias in steps if is_alias}

    def storage(node):
        while id(node) in aliases:
            node = aliases[id(node)]
        return node

    own: list = []
    for n in list(graph.inputs) + [storage(o) for o in graph.outputs]:
        if all(n is not m for m in own):
            own.append(n)
    pinned = {id(n) for n in own}
    last_use: dict[int, int] = {}
    for k, (out, ins, _) in enumerate(steps):
        for n in (*ins, out):
            last_use[id(storage(n))] = k

    free, offsets, live, naive = _FreeList(), {}, {}, 0
    for k, (out, ins, is_alias) in enumerate(steps):
        for sid, (offset, size) in list(live.items()):
            if last_use[sid] < k:       # its last reader ran: the bytes are free for this kernel's output
                free.give(offset, size)
                del live[sid]
        if is_alias:
            continue
        size = _aligned(nbytes(out))
        naive += size
        if id(out) not in pinned:
            offsets[id(out)] = free.take(size)
            live[id(out)] = (offsets[id(out)], size)
    return MemoryPlan(free.end, offsets, aliases, own, naive)
