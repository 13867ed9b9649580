"""The program library: the fastest measured programs of the base model's training
workloads, which a model's tasks of the same operator family are offered, their tile
lengths fitted to their own extents (``evolution.transfer``), when their zero-trial
programs are chosen (``zero_trial.shared_in_family``).

A short zero-trial search does not reach every program the base model ranks best: for a
GPT-2 dense layer with its GELU and for ResNet-50's Winograd layers, programs measured fast
on training workloads of another shape, once fitted, ranked above the search's own pick and
ran 10 to 27 % faster (BENCHMARKS.md, 2026-11-29). The base model stays the judge: a library
program is taken only where it ranks first. One ships per vector width, beside the base
model of that width, built by ``autosched library`` from the same logs (docs/history.md).

A library file is JSON: ``{"autosched_program_library": 1, "kind": target kind, "lanes":
vector lanes, "programs": [{"label", "workload_key", "layout_rewrite", "steps": [[...]...]}]}``,
each program a workload's (rebuilt from its key and label: ``base_model.rebuild_workload``)
with its step records. It may come from someone else: bounded, checked field by field, and
an entry whose workload cannot be rebuilt or whose steps do not replay is left out.
"""
from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import warnings
from collections.abc import Iterable
from dataclasses import dataclass

import ir
from task_scheduler import similarity_tag

from ..files import MAX_LIBRARY_BYTES, chosen_file, read_bounded
from .base_model import _DATA, rebuild_workload, training_programs
from .records import _lists, replay_checked, steps_field

#: the key that marks a program library file, and its format's version
LIBRARY_KEY, LIBRARY_VERSION = "autosched_program_library", 1
#: the fastest distinct programs kept of each workload (and target)
PER_WORKLOAD = 4
#: the shipped libraries by the target's float32 vector lanes (``HardwareParams.vector_lanes``),
#: each from every measurement of that many lanes in the base models' logs
SHIPPED_LIBRARIES = {8: os.path.join(_DATA, "program_library_avx2.json"),
                     16: os.path.join(_DATA, "program_library_avx512.json")}
#: the environment variable that chooses the program library: a file, or "off"
ENV_VAR = "AUTOSCHED_PROGRAM_LIBRARY"


def build_library(records: Iterable, per_workload: int = PER_WORKLOAD, lanes: int | None = None,
                  kind: str = "llvm") -> tuple[dict, dict]:
    """The library of ``records`` (``autosched.TuningRecord``s): the ``per_workload``
    fastest distinct valid programs of each workload that can be rebuilt
    (``base_model.rebuild_workload``), measured on targets of ``kind`` whose hardware has
    ``lanes`` vector lanes (None: any); a workload measured on several CPUs takes each one's
    fastest in turn (their times do not compare). Returns the library's JSON object and
    what went in: {"records", "workloads", "programs", "skipped": {why: count}}."""
    records = [r for r in records if not r.retimed and r.ok and r.target.split()[:1] == [kind]
               and (lanes is None or (isinstance(r.hardware, dict) and r.hardware.get("vector_lanes") == lanes))]
    skipped: dict[str, int] = {}

    def skip(rec, why):
        why = why.split(" (")[0]
        skipped[why] = skipped.get(why, 0) + 1

    measured: dict[tuple, dict[str, list]] = {}
    for task, state, cost in training_programs(records, on_skip=skip):
        ident = (task.workload_key, task.layout_rewrite, task.desc)
        measured.setdefault(ident, {}).setdefault(str(task.target), []).append((cost, state.key, state))
    entries = []
    for (key, rewrite, label), by_target in sorted(measured.items()):
        ranked = [sorted(programs, key=lambda p: p[:2]) for _, programs in sorted(by_target.items())]
        kept: dict[str, ir.State] = {}
        for rank in range(max(map(len, ranked))):
            for programs in ranked:
                if rank < len(programs) and len(kept) < per_workload:
                    kept.setdefault(programs[rank][1], programs[rank][2])
        entries.append({"label": label, "workload_key": key, "layout_rewrite": rewrite,
                        "steps": [_lists([step.record() for step in state.steps]) for state in kept.values()]})
    library = {LIBRARY_KEY: LIBRARY_VERSION, "kind": kind, "lanes": lanes, "programs": entries}
    info = {"records": len(records), "workloads": len(entries), "programs": sum(len(e["steps"]) for e in entries),
            "skipped": skipped}
    return library, info


def save_library(library: dict, path) -> None:
    """Write ``library`` (``build_library``'s) to ``path``, one program a line."""
    head = {k: v for k, v in library.items() if k != "programs"}
    lines = ",\n".join(json.dumps(entry, separators=(",", ":")) for entry in library["programs"])
    with open(path, "w") as f:
        f.write(json.dumps(head, separators=(",", ":"))[:-1] + ',"programs":[\n' + lines + "\n]}\n")


@dataclass(frozen=True)
class LibraryEntry:
    """One workload of a library: what rebuilds it and its programs' step records, fastest
    first."""
    label: str
    workload_key: str
    layout_rewrite: bool
    programs: tuple

    @classmethod
    def from_dict(cls, d) -> "LibraryEntry":
        if not isinstance(d, dict):
            raise ValueError(f"a program is a JSON {type(d).__name__}, not an object")
        try:
            label, key, rewrite, steps = d["label"], d["workload_key"], d["layout_rewrite"], d["steps"]
        except KeyError as err:
            raise ValueError(f"a program has no {err.args[0]!r} field") from None
        if not (isinstance(label, str) and isinstance(key, str) and isinstance(rewrite, bool)
                and isinstance(steps, list)):
            raise ValueError("a program's label and workload_key must be strings, layout_rewrite true or false, "
                             "and steps a list")
        return cls(label, key, rewrite, tuple(steps_field({"steps": s}) for s in steps))


class ProgramLibrary:
    """The programs of a library file's workloads, for tasks of one target kind; every
    workload rebuilt at the first task that asks (``sources``), and its programs replayed
    when a task is first offered them."""

    def __init__(self, entries, kind: str = "llvm", identity: str | None = None):
        self.entries = list(entries)
        self.kind = kind
        #: what tells this library from another (a digest of its file): a zero-trial choice
        #: remembered under one library is made again under another
        self.identity = identity or hashlib.sha256(repr((kind, self.entries)).encode()).hexdigest()[:16]
        self._families: dict[str, list] | None = None
        self._states: dict[int, list[ir.State]] = {}

    @classmethod
    def from_json(cls, data: bytes | str, what: str = "program library") -> "ProgramLibrary":
        """The library of a file's contents; ``ValueError`` saying what is wrong."""
        try:
            d = json.loads(data)
        except (ValueError, UnicodeDecodeError) as err:
            raise ValueError(f"the {what} is not JSON ({err})") from None
        if not isinstance(d, dict) or d.get(LIBRARY_KEY) != LIBRARY_VERSION:
            raise ValueError(f"the {what} is not an autosched program library of version {LIBRARY_VERSION} "
                             f"(expected a JSON object with \"{LIBRARY_KEY}\": {LIBRARY_VERSION}; "
                             "`autosched library` writes one)")
        programs, kind = d.get("programs"), d.get("kind")
        if not isinstance(programs, list) or not isinstance(kind, str):
            raise ValueError(f"the {what} has no list of programs or no target kind")
        raw = data.encode() if isinstance(data, str) else data
        return cls([LibraryEntry.from_dict(e) for e in programs], kind, hashlib.sha256(raw).hexdigest()[:16])

    def sources(self, task: ir.SearchTask, workloads: int) -> list[ir.State]:
        """The programs of the ``workloads`` library workloads of ``task``'s operator family
        (``similarity_tag``) nearest to it in flop count, fastest first within each (none
        for another target kind, or a task without a reduction). Only those workloads'
        programs are replayed (once each per library): replaying a whole library costs a
        second or more, and a model's tasks ask for a few families."""
        tag = similarity_tag(task.dag)
        if task.target.kind != self.kind or not tag or workloads < 1:
            return []
        log_flops = math.log(max(task.dag.flop_count(), 1.0))
        family = sorted(self._by_family().get(tag, ()), key=lambda w: (abs(w[0] - log_flops), w[1]))
        out: list[ir.State] = []
        for _, _, index, dag in family:
            replayed = self._replayed(index, dag)
            if replayed:
                out += replayed
                workloads -= 1
                if workloads == 0:
                    break
        return out

    def _by_family(self) -> dict[str, list]:
        """Tag -> (log flops, workload key, entry index, DAG) of every workload that is
        rebuilt (cheap: no program replayed)."""
        if self._families is None:
            self._families = {}
            for index, entry in enumerate(self.entries):
                dag = rebuild_workload(entry.workload_key, entry.label)
                if dag is not None and entry.programs:
                    self._families.setdefault(similarity_tag(dag), []).append(
                        (math.log(max(dag.flop_count(), 1.0)), entry.workload_key, index, dag))
        return self._families

    def _replayed(self, index: int, dag) -> list[ir.State]:
        """The programs of entry ``index`` that replay on its ``dag`` (a workload none of
        whose programs replays offers none)."""
        if index not in self._states:
            states = []
            for steps in self.entries[index].programs:
                try:   # (within the caps of a record's steps: a library may come from someone else)
                    states.append(replay_checked(dag, steps))
                except ir.InvalidStep:
                    continue   # (a program of an older search space)
            self._states[index] = states
        return self._states[index]


def library_path(spec="default", hardware=None) -> str | None:
    """The file of the library ``spec`` names: "default" (``$AUTOSCHED_PROGRAM_LIBRARY``,
    else the shipped one for ``hardware``'s vector width, this CPU's when None; None when
    none ships for it), a path, or None/"off"."""
    def shipped():
        return SHIPPED_LIBRARIES.get(getattr(hardware or ir.Target.host().hardware, "vector_lanes", None))
    return chosen_file(spec, ENV_VAR, shipped, "program library", "autosched library LOG... -o FILE")


def load_program_library(spec="default", hardware=None) -> ProgramLibrary | None:
    """The library ``spec`` names for programs of ``hardware`` (see ``library_path``), a
    ``ProgramLibrary`` given as it is, or None. Loaded once per process and file."""
    if isinstance(spec, ProgramLibrary):
        return spec
    path = library_path(spec, hardware)
    if path is None:
        return None
    try:
        return _load(os.path.abspath(path))
    except ValueError as err:
        if os.path.abspath(path) not in SHIPPED_LIBRARIES.values():
            raise
        warnings.warn(f"autosched: {err}; going on without it", RuntimeWarning, stacklevel=2)
        return None


@functools.lru_cache(maxsize=4)
def _load(path: str) -> ProgramLibrary:
    return ProgramLibrary.from_json(read_bounded(path, "program library", MAX_LIBRARY_BYTES),
                                    f"program library {path!r}")
