"""A memo keyed by the identity of immutable objects: what replays of one sketch would
otherwise make again and again (the stages cache steps add, inferred regions) is made once
and shared. Entries keep their key objects alive, so the ids in the keys stay theirs."""
from __future__ import annotations


class IdentityMemo:
    """``get(sources, extra, make)``: ``make()``, or what it made before for the same
    ``sources`` (by identity) and ``extra`` (by value). Holds at most ``limit`` entries
    (then starts again empty)."""

    def __init__(self, limit: int):
        self.limit = limit
        self.entries: dict = {}

    def get(self, sources, extra, make):
        sources = tuple(sources)
        key = (tuple(id(s) for s in sources), extra)
        hit = self.entries.get(key)
        if hit is not None and all(a is b for a, b in zip(hit[0], sources)):
            return hit[1]
        value = make()
        if len(self.entries) >= self.limit:
            self.entries.clear()
        self.entries[key] = (sources, value)
        return value
