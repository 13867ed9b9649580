"""The local records database: one tuning-record file that every tuning appends to and
every new tuning learns from (as MetaSchedule's database), shared by all processes.

Where: ``~/.cache/autosched/records.jsonl``, or ``$AUTOSCHED_RECORDS_DB``, or the
``records_db`` argument of the tuning functions (``--records-db``); ``off`` (``None``,
``--no-records-db``) disables it. Its lines are tuning records (``history.records``;
read with ``read_records``). Writers take an exclusive ``flock`` and append a whole batch
with one ``write``, so that concurrent tunings never interleave or lose lines; readers
take a shared lock. A truncated last line (a process killed mid-write) is skipped with a
warning by every reader and cut by the next writer, as in a tuning log
(``records.end_last_line``).

What a tuning learns from it (``prior_knowledge``): the records of its own workloads and
target are taken in as a resumed log is (not measured again, their best is the best so
far); records of other workloads that can be rebuilt (``base_model.rebuild_workload``)
train a model the tuning's cost model starts from. A tuning with a log first adds to the
database the log's records of its tasks that the database lacks (``reconcile``: a batch
logged but cut by a kill before it reached the database).

It also remembers every zero-trial program (``history.zero_trial``), in lines of their own
kind that readers of measurements skip (``records.KIND``; ``read_entries`` reads them).

It is a cache, shared across versions: unknown fields are ignored, a newer version's lines
skipped, and any failure to read or write it costs one warning, never the tuning.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import warnings
from collections.abc import Iterable

from ..files import MAX_RECORDS_FILE_BYTES, checked_size
from ..measure.common import MeasureInput, MeasureResult
from .records import (NotATuningLog, TuningRecord, append_records, check_log_file, is_tuning_log, read_entries,
                      read_records)

#: the environment variable that moves (a path) or disables ("off") the database
ENV_VAR = "AUTOSCHED_RECORDS_DB"
OFF = ("off", "none", "0", "")


def default_path() -> str:
    return os.path.join(os.path.expanduser("~"), ".cache", "autosched", "records.jsonl")


def records_db_path(spec="default") -> str | None:
    """The file ``spec`` names: "default" (``$AUTOSCHED_RECORDS_DB``, else
    ``~/.cache/autosched/records.jsonl``), a path, or None/"off" (no database)."""
    if spec == "default":
        spec = os.environ.get(ENV_VAR, default_path())
    if spec is None or (isinstance(spec, str) and spec.strip().lower() in OFF):
        return None
    return os.fspath(spec)


class RecordsDB:
    """The records file at ``path`` (its folder is made at the first write).

    It is a cache: any failure to read or write it (permissions, a full disk, a file that
    is not a records file, a device, lines of a foreign version) costs one warning, then
    the database is left alone for the rest of the process's use of this object, and the
    tuning goes on without it. ``failed`` says why, once it has."""

    def __init__(self, path):
        self.path = os.fspath(path)
        self.failed: str | None = None
        self._told_of_skipped_lines = False

    def __repr__(self) -> str:
        return f"RecordsDB({self.path!r})"

    def _give_up(self, doing: str, err: Exception) -> None:
        self.failed = f"{type(err).__name__}: {err}"
        warnings.warn(f"autosched: the records database {self.path!r} cannot be {doing} ({str(err)[:300]}); "
                      f"tuning goes on without it (--no-records-db, or {ENV_VAR}=off, to say so)",
                      RuntimeWarning, stacklevel=3)

    @contextlib.contextmanager
    def _locked(self, exclusive: bool):
        flags = os.O_RDWR | os.O_APPEND | os.O_CREAT if exclusive else os.O_RDONLY
        fd = os.open(self.path, flags, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            yield fd
        finally:
            os.close(fd)   # closing releases the lock

    def read(self, workload_keys: Iterable[str] | None = None, target: str | None = None) -> list[TuningRecord]:
        """The records (of these workloads and this target, when given), in file order;
        lines that are not records are skipped with one warning for all of them (lines of
        another kind, ``records.KIND``, silently)."""
        keys = None if workload_keys is None else tuple(workload_keys)
        records = self._read(lambda: read_records(self.path, keys))
        return [r for r in records if target is None or r.target == target]

    def read_entries(self, kind: str, parse, workload_keys: Iterable[str] | None = None) -> list:
        """The entries of ``kind`` (``records.read_entries``: not measurements), in file
        order, read as ``read`` reads records."""
        keys = None if workload_keys is None else tuple(workload_keys)
        return self._read(lambda: read_entries(self.path, kind, parse, keys))

    def _read(self, reader) -> list:
        if self.failed is not None or not os.path.lexists(self.path):
            return []
        try:
            checked_size(self.path, "records database", MAX_RECORDS_FILE_BYTES)  # (before open: a FIFO blocks)
            if not is_tuning_log(self.path):
                raise NotATuningLog("its first line is neither a record nor a '#' comment")
            with warnings.catch_warnings(record=True) as skipped:
                warnings.simplefilter("always")
                with self._locked(exclusive=False):
                    items = reader()
        except (OSError, ValueError) as err:
            self._give_up("read", err)
            return []
        if skipped and not self._told_of_skipped_lines:
            self._told_of_skipped_lines = True
            warnings.warn(f"autosched: the records database {self.path!r}: skipped {len(skipped)} line(s) that "
                          f"are not records of this version, e.g. {str(skipped[0].message)[:200]}",
                          RuntimeWarning, stacklevel=3)
        return items

    def append(self, records: Iterable) -> int:
        """Append records (or other entries: a zero-trial program), all in one ``write``
        under the exclusive lock (``records.append_records``); returns how many (0 once the
        database failed)."""
        records = list(records)
        if not records or self.failed is not None:
            return 0
        try:
            folder = os.path.dirname(self.path)
            if folder:
                os.makedirs(folder, exist_ok=True)
            check_log_file(self.path)   # never append to a file that is not a tuning log
            with self._locked(exclusive=True) as fd:
                return append_records(fd, self.path, records)
        except (OSError, ValueError) as err:
            self._give_up("written", err)
            return 0

    def add_missing(self, records: Iterable[TuningRecord], known: Iterable[TuningRecord]) -> int:
        """Append those of ``records`` (a tuning log's) that are not among ``known`` (the
        database's): a batch that reached the log but not the database, cut by a kill
        between the two, is added by the next run. Returns how many."""
        have = {_identity(r) for r in known}
        return self.append(r for r in records if _identity(r) not in have)

    def writer(self) -> "RecordToDB":
        return RecordToDB(self)


class RecordToDB:
    """A measure callback that collects each batch's records and appends them to the
    database when the measurer flushes (after each batch) or closes."""

    def __init__(self, db: RecordsDB):
        self.db = db
        self._pending: list[TuningRecord] = []

    def __call__(self, inp: MeasureInput, res: MeasureResult) -> None:
        self._pending.append(TuningRecord.from_measure(inp, res))

    def flush(self) -> None:
        pending, self._pending = self._pending, []
        self.db.append(pending)

    def close(self) -> None:
        self.flush()


def _identity(rec: TuningRecord) -> tuple:
    """What tells one measurement from another, in a log and in the database alike."""
    return rec.workload_key, rec.target, rec.layout_rewrite, rec.program, rec.timestamp, rec.retimed


def _task_ids(tasks) -> set[tuple]:
    return {(t.workload_key, str(t.target), t.layout_rewrite) for t in tasks}


def reconcile(db: RecordsDB, log_records, tasks) -> int:
    """Add to ``db`` the records of ``tasks`` that the tuning log has (``log_records``) and
    the database lacks; returns how many."""
    ids = _task_ids(tasks)
    mine = [r for r in log_records if (r.workload_key, r.target, r.layout_rewrite) in ids]
    return db.add_missing(mine, db.read({r.workload_key for r in mine})) if mine else 0


def open_records_db(spec="default") -> RecordsDB | None:
    """The database ``spec`` names (see ``records_db_path``; a ``RecordsDB`` as it is)."""
    if isinstance(spec, RecordsDB):
        return spec
    path = records_db_path(spec)
    return RecordsDB(path) if path is not None else None


#: at most this many records of other workloads (the newest) train the database's model,
#: with trees as small as the base model's and this many of them: a few seconds at the
#: start of a tuning
OTHER_WORKLOAD_RECORDS, OTHER_WORKLOAD_ROUNDS = 1024, 50


def prior_knowledge(db: RecordsDB, tasks, base=None, seed: int = 0) -> tuple[list[TuningRecord], object]:
    """What the database knows for tuning ``tasks``: (the records of their own workloads,
    targets and layout rewrite, the model their cost model starts from). The latter is ``base`` (a base model
    or None), refined on the newest records of other workloads of the same targets that
    can be rebuilt (``base_model.rebuild_workload``), when there are any."""
    from evolution import XGBoostModel
    from .base_model import MAX_DEPTH, training_programs
    own_ids = _task_ids(tasks)
    own_keys = {t.workload_key for t in tasks}
    targets = {str(t.target) for t in tasks}
    own, others = [], []
    for rec in db.read():
        if (rec.workload_key, rec.target, rec.layout_rewrite) in own_ids:
            own.append(rec)
        elif rec.target in targets and rec.workload_key not in own_keys:
            others.append(rec)
    programs = training_programs(others[-OTHER_WORKLOAD_RECORDS:])
    if not any(cost is not None for _, _, cost in programs):
        return own, base
    model = XGBoostModel(objective="rank", seed=seed, num_warmup_sample=1, base_model=base,
                         params={"max_depth": MAX_DEPTH}, max_rounds=OTHER_WORKLOAD_ROUNDS)
    model.update(programs)
    return own, model
