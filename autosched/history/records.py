"""Tuning records: one measured program a line, JSON, versioned.

A line holds the task (workload key, description, target, hardware, layout rewrite), the
program as its step records (``Step.record()``; replaying them on the task's DAG rebuilds
it), the measurement (costs in seconds, error code and message, times) and a timestamp::

    {"v": 1, "workload_key": "3f1c...", "desc": "GMM-1x512x512x512", "target": "llvm -mcpu=znver4",
     "hardware": {...}, "layout_rewrite": true, "program": "a41b...", "steps": [["SP",2,0,[4],true], ...],
     "costs": [0.00131, 0.00129, 0.00130], "error_no": 0, "error_msg": "", "all_cost": 0.41,
     "build_time": 0.12, "run_time": 0.29, "repeats": 3, "saved_repeats": 7, "timestamp": 1717171717.0}

Lines starting with ``#`` are comments; lines with a ``"kind"`` (``KIND``: a zero-trial
program the records database remembers, ``history.zero_trial``) are not measurements, and
every reader of records skips them without a word. A run killed mid-write leaves a truncated last
line: reading skips it with a warning, and the next append cuts it (``end_last_line``:
the one treatment of a truncated line, for the log and the records database alike).
``RecordToFile`` writes each record with a single ``write`` as soon as it is measured,
and ``fsync``s after every batch; ``append_records`` is the one appender.

A log may come from someone else: it is read only if it is a regular file of bounded size
(``autosched.files``), unknown fields are ignored, and a record's steps are checked against
``ir.step_limits``'s caps before they are replayed (``TuningRecord.state``).

This module is the log of a tuning's history (``autosched.history``): reading, appending,
distilling, the one ranking of a workload's programs (``_ranked``, by ``HasCosts.rank``),
resuming a tuning (``resume``) and the best programs to re-apply (``HistoryBest``; see
``history.apply.apply_history_best``).
It sits above measurement: the measurer hands it results through a callback
(``RecordToFile``) and takes earlier ones as preloaded records; it never imports this module.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import time
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass

import ir
from ir.step_limits import check_state_limits, check_step_records

from ..files import MAX_RECORD_LINE_BYTES, MAX_RECORDS_FILE_BYTES, read_bounded
from ..measure.common import HasCosts, MeasureInput, MeasureResult

#: the version of the record format written here (readers skip newer lines with a warning)
RECORD_VERSION = 1


class UntunedWorkloadWarning(UserWarning):
    """A DAG built under ``apply_history_best`` has no usable record: it gets the naive,
    untuned program. Loud on purpose (silent fallbacks cost users days)."""


@dataclass(frozen=True)
class TuningRecord(HasCosts):
    """One measured program. ``steps`` are step records (JSON lists); ``state(dag)``
    replays them on the task's DAG."""
    workload_key: str
    target: str
    steps: tuple
    costs: tuple
    error_no: int = 0
    error_msg: str = ""
    all_cost: float = 0.0
    timestamp: float = 0.0
    desc: str = ""
    layout_rewrite: bool = False
    program: str = ""
    hardware: dict | None = None
    build_time: float = 0.0
    run_time: float = 0.0
    repeats: int = 0
    saved_repeats: int = 0
    #: a re-timing in turns of a program measured before (``ProgramMeasurer.retime``): not
    #: a trial; a workload's programs with a re-timing rank before the others
    retimed: bool = False

    def state(self, dag) -> ir.State:
        """The recorded program, replayed on ``dag`` (which must be the recorded workload);
        raises ``ir.InvalidStep`` if its steps do not replay or are over the caps on a
        program read from a file (``ir.step_limits``: checked before replay and before any
        lowering, so that replaying and building a record costs bounded time and memory)."""
        key = dag.workload_key()
        if key != self.workload_key:
            raise ValueError(f"the record is of workload {self.workload_key}, the DAG given is {key}")
        return replay_checked(dag, self.steps)

    def result(self) -> MeasureResult:
        return MeasureResult(tuple(self.costs), self.error_no, self.error_msg, self.all_cost, self.timestamp,
                             self.build_time, self.run_time, self.repeats, self.saved_repeats, retimed=self.retimed)

    # JSON ---------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        d = {"v": RECORD_VERSION, "workload_key": self.workload_key, "desc": self.desc, "target": self.target,
             "hardware": self.hardware, "layout_rewrite": self.layout_rewrite, "program": self.program,
             "steps": _lists(self.steps), "costs": list(self.costs), "error_no": int(self.error_no),
             "error_msg": self.error_msg, "all_cost": self.all_cost, "build_time": self.build_time,
             "run_time": self.run_time, "repeats": self.repeats, "saved_repeats": self.saved_repeats,
             "timestamp": self.timestamp}
        if self.retimed:  # (only then: the lines of trials stay as they were)
            d["retimed"] = True
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), separators=(",", ":"))

    @classmethod
    def from_dict(cls, d: Mapping) -> "TuningRecord":
        """The record of a parsed line; ``ValueError`` saying why for anything that is not a
        well-formed record (not an object, malformed steps, a valid result without a finite
        positive cost)."""
        if not isinstance(d, Mapping):
            raise ValueError(f"the line is a JSON {type(d).__name__}, not a record object")
        version = d.get("v")
        if version != RECORD_VERSION:
            raise ValueError(f"record format version {version!r}; this autosched reads version {RECORD_VERSION}")
        try:
            steps, costs = steps_field(d), d["costs"]
            if not isinstance(costs, list) or not costs:
                raise ValueError(f"its costs are not a list of seconds: {str(costs)[:80]}")
            costs = tuple(float(c) for c in costs)
            if int(d["error_no"]) == 0 and not all(math.isfinite(c) and c > 0 for c in costs):
                raise ValueError(f"a valid result with costs {list(costs)}: seconds must be finite and positive")
            return cls(workload_key=str(d["workload_key"]), target=str(d["target"]), steps=steps,
                       costs=costs, error_no=int(d["error_no"]),
                       error_msg=str(d.get("error_msg", "")), all_cost=float(d.get("all_cost", 0.0)),
                       timestamp=float(d.get("timestamp", 0.0)), desc=str(d.get("desc", "")),
                       layout_rewrite=bool(d.get("layout_rewrite", False)), program=str(d.get("program", "")),
                       hardware=d.get("hardware"), build_time=float(d.get("build_time", 0.0)),
                       run_time=float(d.get("run_time", 0.0)), repeats=int(d.get("repeats", 0)),
                       saved_repeats=int(d.get("saved_repeats", 0)), retimed=bool(d.get("retimed", False)))
        except KeyError as err:
            raise ValueError(f"the record has no {err.args[0]!r} field") from None
        except TypeError as err:
            raise ValueError(f"a field has the wrong type: {err}") from None

    @classmethod
    def from_json(cls, line: str) -> "TuningRecord":
        return cls.from_dict(json.loads(line))

    @classmethod
    def from_measure(cls, inp: MeasureInput, res: MeasureResult) -> "TuningRecord":
        task = inp.task
        hardware = getattr(task, "hardware", None)
        return cls(workload_key=task.workload_key, target=str(task.target), steps=nested_tuples(inp.step_records()),
                   costs=tuple(float(c) for c in res.costs), error_no=int(res.error_no), error_msg=res.error_msg,
                   all_cost=float(res.all_cost), timestamp=float(res.timestamp), desc=str(getattr(task, "desc", "")),
                   layout_rewrite=bool(task.layout_rewrite), program=inp.key,
                   hardware=asdict(hardware) if hardware is not None else None,
                   build_time=float(res.build_time), run_time=float(res.run_time), repeats=int(res.repeats),
                   saved_repeats=int(res.saved_repeats), retimed=bool(res.retimed))


def replay_checked(dag, steps) -> ir.State:
    """``steps`` (step records read from a file) replayed on ``dag``, within the caps of
    ``ir.step_limits`` (checked before replay and before any lowering); ``ir.InvalidStep``
    otherwise."""
    check_step_records(steps)
    state = ir.State.from_steps(dag, steps)
    check_state_limits(state)
    return state


def steps_field(d: Mapping) -> tuple:
    """The ``steps`` of a parsed line, as tuples; ``ValueError`` unless a list of step records."""
    steps = d["steps"]
    if not isinstance(steps, list) or not all(isinstance(s, list) and s and isinstance(s[0], str) for s in steps):
        raise ValueError(f"its steps are not a list of step records: {str(steps)[:80]}")
    return nested_tuples(steps)


def nested_tuples(v):
    return tuple(nested_tuples(x) for x in v) if isinstance(v, (list, tuple)) else v


def _lists(v):
    return [_lists(x) for x in v] if isinstance(v, (list, tuple)) else v


# reading -------------------------------------------------------------------------------

#: the field that marks a line that is not a measurement (``"kind": "zero_trial"``: a
#: zero-trial program the records database remembers): every reader of measurements skips
#: such lines without a word; ``read_entries`` reads the lines of one kind
KIND = "kind"


def read_records(path, workload_keys=None) -> list[TuningRecord]:
    """Every record of a file (a regular file of at most ``MAX_RECORDS_FILE_BYTES``, else
    ``files.UnreadableFile``), in file order. Comments, blank lines and lines of another
    kind (``KIND``) are skipped; so is, with one warning each, every line that is not a
    record this version reads: a truncated last line (a run killed while writing), a newer
    format's line, anything else. ``workload_keys``: only the records of these workloads
    (other lines are not parsed)."""
    return _read_lines(path, workload_keys, None, TuningRecord.from_dict)


def read_entries(path, kind: str, parse, workload_keys=None) -> list:
    """``parse(line's object)`` of every line of ``kind`` (see ``KIND``) of a file, read as
    ``read_records`` reads (bounded, a line ``parse`` refuses with ``ValueError`` skipped
    with a warning)."""
    return _read_lines(path, workload_keys, kind, parse)


def _read_lines(path, workload_keys, kind: str | None, parse) -> list:
    path = os.fspath(path)
    text = read_bounded(path, "tuning log", MAX_RECORDS_FILE_BYTES).decode("utf-8", errors="replace")
    lines = text.split("\n")
    complete = text.endswith("\n") or text == ""
    out: list = []
    for number, line in enumerate(lines, 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        last_incomplete = number == len(lines) and not complete
        if len(stripped) > MAX_RECORD_LINE_BYTES:
            warnings.warn(f"autosched: {path}: line {number} has {len(stripped)} characters, over the "
                          f"{MAX_RECORD_LINE_BYTES} a record may have; skipped it", RuntimeWarning, stacklevel=3)
            continue
        if workload_keys is not None and not last_incomplete and not any(k in stripped for k in workload_keys):
            continue
        try:
            obj = json.loads(stripped)
            if isinstance(obj, Mapping) and obj.get(KIND) != kind:
                continue   # (a line of another kind)
            item = parse(obj)
        except ValueError as err:  # json's errors are ValueErrors too
            if last_incomplete:
                why = f"the last line is truncated (a run killed while writing?), {len(line)} characters"
            else:
                why = f"line {number} is not a record ({str(err)[:160]})"
            warnings.warn(f"autosched: {path}: {why}; skipped it", RuntimeWarning, stacklevel=3)
            continue
        if workload_keys is None or item.workload_key in workload_keys:   # (the line test above is a prefilter)
            out.append(item)
    return out


def _iter_records(source) -> list[TuningRecord]:
    if isinstance(source, (str, os.PathLike)):
        return read_records(source)
    if isinstance(source, Mapping):
        return [r for recs in source.values() for r in recs]
    out: list[TuningRecord] = []
    for item in source:
        if isinstance(item, TuningRecord):
            out.append(item)
        else:  # a list of paths
            out.extend(_iter_records(item))
    return out


def load_records(source) -> dict[str, list[TuningRecord]]:
    """The records of a log file (or of several: a list of paths), keyed by workload key,
    in file order within each workload."""
    by_key: dict[str, list[TuningRecord]] = {}
    for rec in _iter_records(source):
        by_key.setdefault(rec.workload_key, []).append(rec)
    return by_key


def _ranked(records: Iterable[TuningRecord], target: str | None) -> dict[str, list[TuningRecord]]:
    """The successful records of each workload, fastest first, of ``target`` only when one
    is given; a program measured more than once counts once (its best measurement).
    Programs re-timed in turns (``retimed`` records, see ``ProgramMeasurer.retime``) rank
    first, each by its latest re-timing: on a noisy machine the fastest single trial is
    often only the luckiest, and the re-timing in turns is what tells the best programs
    apart (a tuning re-times every program re-timed before, so its last turns decide)."""
    def ident(r):
        return r.target, r.program or json.dumps(_lists(r.steps))

    out: dict[str, list[TuningRecord]] = {}
    for key, recs in load_records(records).items():
        ok = [r for r in recs if r.ok and (target is None or r.target == target)]
        latest = {ident(r): r for r in ok if r.retimed}  # (in log order: the last one stays)
        seen, ranked = set(), []
        for r in sorted(list(latest.values()) + [r for r in ok if not r.retimed],
                        key=lambda r: r.rank):
            if ident(r) not in seen:
                seen.add(ident(r))
                ranked.append(r)
        if ranked:
            out[key] = ranked
    return out


def best_records(source, target: str | None = None, top: int = 1) -> dict[str, list[TuningRecord]]:
    """The ``top`` fastest successful records of each workload (fastest first), counting
    only records of ``target`` when one is given. Programs measured more than once count
    once (their best measurement)."""
    if top < 1:
        raise ValueError(f"top must be >= 1, got {top}")
    return {key: recs[:top] for key, recs in _ranked(_iter_records(source), target).items()}


def best_record(source, workload, target: str | None = None) -> TuningRecord | None:
    """The fastest successful record of ``workload`` (a workload key or a ComputeDAG)."""
    key = workload if isinstance(workload, str) else workload.workload_key()
    got = best_records(source, target).get(key)
    return got[0] if got else None


# writing -------------------------------------------------------------------------------

def save_records(path, records: Iterable[TuningRecord], header: str = "") -> int:
    """Write records to a new file (replacing it atomically, if it is a tuning log: any
    other file is refused, see ``check_log_file``); returns how many."""
    path = check_log_file(path)
    tmp = f"{path}.tmp{os.getpid()}"
    n = 0
    try:
        with open(tmp, "w") as f:
            for line in header.splitlines():
                f.write(f"# {line}\n")
            for rec in records:
                f.write(rec.to_json() + "\n")
                n += 1
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:   # (a full disk: no half-written temporary file left behind)
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return n


def distill_records(src, dst, top: int = 1, target: str | None = None) -> int:
    """Keep the ``top`` best successful records of each workload of ``src`` (a path or a
    list of paths) in ``dst``; returns how many were written."""
    records = _iter_records(src)
    best = best_records(records, target, top)
    kept = [r for recs in best.values() for r in recs]
    header = (f"distilled by autosched: the best {top} record(s) of each of {len(best)} workload(s), "
              f"from {len(records)} record(s) at {time.strftime('%Y-%m-%d %H:%M:%S')}")
    return save_records(dst, kept, header)


#: how every line this module writes begins (what tells our own truncated line from a
#: line someone else wrote)
_RECORD_PREFIX = b'{"v":'


def is_tuning_log(path) -> bool:
    """Whether ``path`` is a file this module may append to: missing, empty, or a file whose
    first non-blank line is a ``#`` comment or a record (any version of the format)."""
    path = os.fspath(path)
    if not os.path.exists(path):
        return True
    if not os.path.isfile(path):
        return False   # (a device reads forever, a FIFO blocks)
    with open(path, "rb") as f:
        head = f.read(1 << 20)
    for line in head.split(b"\n"):
        line = line.strip()
        if not line:
            continue
        if line.startswith(b"#"):
            return True
        try:
            obj = json.loads(line)
        except ValueError:
            return line.startswith(_RECORD_PREFIX)  # a first record cut by a kill
        return isinstance(obj, dict) and "v" in obj and "workload_key" in obj
    return True


class NotATuningLog(ValueError):
    """A file given as a tuning log is something else: autosched refuses to write to it."""


def check_log_file(path) -> str:
    """``path`` as a string, if autosched may append tuning records to it: it must be a
    tuning log (see ``is_tuning_log``) that this process can write. Raises
    ``NotATuningLog`` or ``OSError`` saying why, before anything is measured."""
    path = os.fspath(path)
    if os.path.isdir(path):
        raise NotATuningLog(f"the tuning log {path!r} is a directory; expected a file path")
    if os.path.exists(path) and not os.path.isfile(path):
        raise NotATuningLog(f"the tuning log {path!r} is not a regular file (a device, a FIFO?); expected a file path")
    if not is_tuning_log(path):
        raise NotATuningLog(f"{path!r} is not a tuning log (its first line is neither a record nor a '#' comment); "
                            "autosched does not write to files it did not write: give a new or empty file")
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644))
    except OSError as err:
        raise OSError(err.errno, f"cannot append to the tuning log {path!r}: {err.strerror}") from None
    return path


class RecordToFile:
    """A measure callback that appends each measured program to a tuning log as soon as it
    is measured (one ``write`` per line; ``flush()``, called after each batch, fsyncs).
    The file is checked when the object is made (``check_log_file``): a file that is not a
    tuning log, or that cannot be written, fails then, before anything is measured. The
    first write ends the file's last line as ``end_last_line`` does."""

    def __init__(self, path):
        self.path = check_log_file(path)
        self._fd: int | None = None

    def _open(self) -> int:
        if self._fd is None:
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
            end_last_line(fd, self.path)
            self._fd = fd
        return self._fd

    def read(self) -> list[TuningRecord]:
        """The records in the log now (``read_records``): what a measurer is preloaded
        with to resume."""
        return read_records(self.path)

    def __call__(self, inp: MeasureInput, res: MeasureResult) -> None:
        self.write(TuningRecord.from_measure(inp, res))

    def write(self, record: TuningRecord) -> None:
        write_all(self._open(), (record.to_json() + "\n").encode())

    def flush(self) -> None:
        if self._fd is not None:
            os.fsync(self._fd)

    def close(self) -> None:
        if self._fd is not None:
            os.fsync(self._fd)
            os.close(self._fd)
            self._fd = None

    def __del__(self):
        with contextlib.suppress(Exception):
            self.close()


def append_records(fd: int, path: str, records: Iterable) -> int:
    """The one appender of the history: ``records`` (``TuningRecord``s, or other entries
    with a ``to_json``: a zero-trial program) as whole lines at the end of the log open
    (read-write, ``O_APPEND``) at ``fd``, after ``end_last_line``; returns how many."""
    lines = [r.to_json() + "\n" for r in records]
    if lines:
        end_last_line(fd, path)
        write_all(fd, "".join(lines).encode())
    return len(lines)


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def end_last_line(fd: int, path: str) -> None:
    """End the file open at ``fd`` (read-write) with a newline before appending: a last line
    without one is kept and terminated (a record, a comment, a user's note), except a
    truncated record of ours (it starts like our lines and does not parse: a run killed
    while writing), which is cut with a warning. The one treatment of a truncated line."""
    size = os.fstat(fd).st_size
    if size == 0:
        return
    start = max(0, size - (1 << 20))
    tail = os.pread(fd, size - start, start)
    if tail.endswith(b"\n"):
        return
    cut = tail.rfind(b"\n") + 1
    last = tail[cut:]
    if last.lstrip().startswith(_RECORD_PREFIX):
        try:
            json.loads(last)
        except ValueError:
            warnings.warn(f"autosched: {path}: cut a truncated record at the end (a run killed while "
                          "writing?) before appending", RuntimeWarning, stacklevel=4)
            os.ftruncate(fd, start + cut)
            return
    write_all(fd, b"\n")


# re-applying the best programs -----------------------------------------------------------

class HistoryBest:
    """The best records of each workload, answering ``ir.build`` (see ``apply_history_best``):
    ``best`` maps a workload key to its fastest record; ``program(dag)`` gives the fastest
    one that replays. A workload without one gets ``zero_trial``'s program (a
    ``zero_trial.ZeroTrial``), or with None the naive program; both with a warning."""

    def __init__(self, source, target: str | None, zero_trial=None):
        self.target = target
        self.zero_trial = zero_trial
        records = _iter_records(source)
        self._ranked = _ranked(records, target)
        self.best = {k: v[0] for k, v in self._ranked.items()}
        self._other_targets = {r.workload_key: r.target for r in records
                               if r.ok and target is not None and r.target != target}
        self.applied: list[str] = []
        self.fallbacks: list[str] = []

    def program(self, dag) -> tuple[ir.State, bool] | None:
        """(State, layout_rewrite) of the fastest record of ``dag``'s workload whose steps
        replay on it (faster ones that do not are skipped with a warning each), or None."""
        for rec in self._ranked.get(dag.workload_key(), ()):
            try:
                return rec.state(dag), rec.layout_rewrite
            except ir.InvalidStep as err:
                warnings.warn(f"autosched: a record of workload {rec.workload_key} ({1e3 * rec.mean_cost:.4f} ms) "
                              f"does not replay on its DAG and is skipped: {err}", RuntimeWarning, stacklevel=3)
        return None

    def __call__(self, dag):
        key = dag.workload_key()
        if key in self._ranked:
            got = self.program(dag)
            if got is None:
                return self._fallback(dag, key, "none of its records replays on this DAG")
            self.applied.append(key)
            return got
        why = "no tuning record"
        if key in self._other_targets:
            why += f" for target {self.target!r} (there are records for {self._other_targets[key]!r})"
        return self._fallback(dag, key, why)

    def _fallback(self, dag, key: str, why: str):
        """The zero-trial program, or None (the naive one), with the warning that says so."""
        self.fallbacks.append(key)
        outputs = ", ".join(f"{t.name}{list(t.shape)}" for t in dag.outputs)
        got, what = None, "the naive, UNTUNED program, which may be orders of magnitude slower"
        if self.zero_trial is not None:
            got = (self.zero_trial.program(dag), True)
            what = ("the UNTUNED zero-trial program the base cost model ranks best (never measured; tune it for "
                    "speed)")
        warnings.warn(f"autosched: {why} for workload {key} (outputs {outputs}); building {what}",
                      UntunedWorkloadWarning, stacklevel=5)
        return got


# resuming a tuning ------------------------------------------------------------------------

def trials_of(records: Iterable[TuningRecord]) -> list[TuningRecord]:
    """The records that are trials: measurements of programs the search proposed, not
    re-timings of programs measured before (which repeat a program already in the list)."""
    return [r for r in records if not r.retimed]


def resume(records: Iterable[TuningRecord], tasks, policies, model, measurer) -> list[int]:
    """Continue a tuning of ``tasks`` from ``records`` (earlier measurements, e.g. a log's
    ``read_records``): for each task, the records of its workload that replay on its DAG
    are preloaded into the ``measurer`` (not measured again; their best is the best so
    far), remembered by the task's policy (``policies[i].remember``: never proposed again)
    and learned by the shared cost ``model`` in one update for all tasks. Records that do
    not replay (an edited log, an older version's steps) are skipped with a warning each.
    Re-timings (``retimed`` records) are not trials: only the measurer takes them in (its
    best is then the fastest re-timed program, as the log's). Only records of the task's
    own target are taken: a log copied from another machine holds its timings, not this
    one's (one warning says how many were left out). Returns how many trials each task has."""
    by_key: dict[str, list[TuningRecord]] = {}
    for rec in records:
        by_key.setdefault(rec.workload_key, []).append(rec)
    counts, training, elsewhere = [], [], {}
    for task, policy in zip(tasks, policies):
        valid, states, costs, retimings = [], [], [], {}
        target = str(task.target)
        for rec in by_key.get(task.workload_key, ()):
            if rec.target != target:
                elsewhere[rec.target] = elsewhere.get(rec.target, 0) + 1
                continue
            try:
                state = rec.state(task.dag)
            except ir.InvalidStep as err:
                warnings.warn(f"autosched: a record of task {task.desc or task.workload_key} does not replay on "
                              f"its DAG and is skipped: {err}", RuntimeWarning, stacklevel=2)
                continue
            if rec.retimed:
                retimings[rec.program] = rec  # (its latest re-timing stays)
                continue
            valid.append(rec)
            states.append(state)
            costs.append(rec.mean_cost if rec.ok else None)
        measurer.load(valid + list(retimings.values()))
        training += policy.remember(states, costs)
        counts.append(len(valid))
    if elsewhere:
        got = ", ".join(f"{n} of {t!r}" for t, n in elsewhere.items())
        mine = ", ".join(repr(t) for t in dict.fromkeys(str(task.target) for task in tasks))
        warnings.warn(f"autosched: records timed for another target are not resumed ({got}); the tasks' "
                      f"target: {mine}", RuntimeWarning, stacklevel=2)
    if training:
        model.update(training)
    return counts
