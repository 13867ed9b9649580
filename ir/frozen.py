"""``replace`` for the frozen dataclasses a replay copies thousands of times a second
(``State``, ``Stage``, steps): the same result as ``dataclasses.replace`` for classes
without ``__post_init__`` or ``__slots__``, without its per-call walk over the fields."""
from __future__ import annotations

import dataclasses

_LAYOUT: dict = {}  # class -> (names of its fields, {name: default} of those not in __init__)


def _layout(cls):
    found = _LAYOUT.get(cls)
    if found is None:
        fields = dataclasses.fields(cls)
        assert not hasattr(cls, "__post_init__") and not hasattr(cls, "__slots__"), cls
        found = _LAYOUT[cls] = (frozenset(f.name for f in fields),
                                {f.name: f.default for f in fields if not f.init})
    return found


def replace(obj, **changes):
    """A copy of the dataclass instance ``obj`` with ``changes``; fields that are not
    arguments of ``__init__`` (a cached key) start again from their defaults."""
    cls = type(obj)
    names, derived = _LAYOUT.get(cls) or _layout(cls)
    for name in changes:
        if name not in names or name in derived:
            unknown = changes.keys() - names
            raise TypeError(f"replace: {cls.__name__} has no init field(s) {sorted(unknown or derived)}")
    new = object.__new__(cls)
    attrs = new.__dict__
    attrs.update(obj.__dict__)
    if derived:
        attrs.update(derived)
    attrs.update(changes)
    return new
