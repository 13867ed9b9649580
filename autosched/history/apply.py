"""``apply_history_best``: within a block, ``ir.build`` builds the best recorded program of
each workload (``records.HistoryBest``), or the zero-trial program of one without a record
(``zero_trial.ZeroTrial``). Its own module: the zero-trial programs read the records
database, which reads records, so ``records`` cannot import them."""
from __future__ import annotations

import contextlib

import ir
from ir.build import build_with

from .records import HistoryBest
from .zero_trial import ZeroTrial


@contextlib.contextmanager
def apply_history_best(source, target: str | None = None, base_model="default", records_db="default"):
    """Within the block, ``ir.build(dag)`` (no state given) builds the best recorded program
    of ``dag``'s workload from ``source`` (a log path, a list of paths, or loaded records),
    with the layout rewrite it was measured with: a rewritten constant is then passed in its
    packed form, ``kernel.pack(name, array)``. A workload without a record builds, with an
    ``UntunedWorkloadWarning`` naming it, the zero-trial program of ``base_model``
    (``autosched.history.zero_trial``: "default" is the shipped model; layout-rewritten) or, with
    ``base_model=None``, the naive program; zero-trial programs are remembered in the
    records database ``records_db`` ("default", a path, or None: see ``history.database``).

    ``target``: only records of this target count (default: this host's, ``ir.host_target()``;
    ``"any"``: all). Yields the ``HistoryBest`` (``.best``, ``.applied``, ``.fallbacks``)."""
    if target is None:
        target = ir.host_target()
    zero_trial = ZeroTrial.from_spec(base_model, records_db=records_db,
                                     hardware=None if target == "any" else ir.Target.parse(target).hardware)
    history = HistoryBest(source, None if target == "any" else target, zero_trial)
    with build_with(history):
        yield history
