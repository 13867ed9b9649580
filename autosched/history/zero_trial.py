"""Zero-trial programs: for a task that was never measured, the program the base cost model
ranks best after a short search without any measurement (its default schedule ranked
with the search's programs), instead of the naive or default schedule. ``GraphExecutor``
and ``apply_history_best`` use it for untuned tasks (still with a loud
``UntunedWorkloadWarning``: nothing was measured).

Every program the search proposes is a chain of transform steps applied to the task's
DAG, so it computes what the DAG says; what the model may get wrong is its speed.

The searches of many tasks (a model's untuned tasks) run at once, one worker process per
core (``autosched.workers``: fresh interpreters, never forks of a process that has run
XGBoost's or LLVM's threads), the largest tasks first; each task's search is seeded alone,
so the programs are the same whatever the number of workers. Each program found is
remembered in the records database (``ZeroTrialEntry``, a line of kind ``zero_trial``)
under its workload, target, base model (a digest of its trees) and search
(``search_identity``): the next load of the model replays the steps, no search. It never
counts as a measurement: every reader of measured records skips it (``records.KIND``).
Then a model's tasks of one operator family share their picks, and are offered the
programs of the shipped library (``shared_in_family``, ``program_library``).
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import time
from collections import Counter
from collections.abc import Mapping
from concurrent.futures import as_completed
from dataclasses import dataclass

import ir
from evolution import SearchParams, SketchPolicy
from evolution.cold_reads import prefer_prefetched
from evolution.transfer import adapt_programs
from sketch_rules import search_space
from sketch_rules.analysis import parallel_region_starts
from task_scheduler import similarity_tag

from .. import __version__
from .base_model import load_base_model
from .database import RecordsDB, open_records_db
from .program_library import load_program_library
from .records import KIND, RECORD_VERSION, nested_tuples, replay_checked, steps_field

#: the short search: small population, few generations, one process a task
ZERO_TRIAL_PARAMS = SearchParams(population=256, generations=3, init_min_population=64, islands=1)
#: tasks of fewer floating-point operations than this (a squeeze-excitation block's layers on
#: pooled vectors, the classifier of a small model, poolings) get the shorter search below:
#: on MobileNet-V3 such tasks are 19 of 53 and 8 % of the kernels' time, and took as long to
#: search as the others
SMALL_TASK_FLOPS = 1e6
#: the search of a small task: a quarter of the population, two generations
SMALL_TASK_PARAMS = SearchParams(population=64, generations=2, init_min_population=32, islands=1)
#: the version of the zero-trial search: raise it when the search, or the choice within a
#: family (``shared_in_family``), picks other programs for the same model, seed and
#: ``ZERO_TRIAL_PARAMS`` (remembered programs are then searched or chosen again);
#: 2: the shipped base model learnt the measured picks of its predecessor; 3: vector loops
#: of channel tiles on the lane grid (``sketch_rules.annotation.good_vector_length``), and a
#: base model that learnt transformer dense layers over prime token counts; 4: off-grid draws
#: redrawn, on-grid ones kept (the schemes' own distribution of vector lengths); 5: vector
#: loops within a grouped convolution's group (``sketch_rules.annotation.lane_span``), and
#: programs that start a parallel region more than once a call ranked last; 6: a convolution or
#: dense layer computed inside its residual, SiLU or GELU epilogue (``sketch_rules.analysis``:
#: a batch of one read at index 0 is elementwise; expensive math read once is inlined); 7: a
#: reduction that the vector-inside-reduction sketch fits (NHWC global pooling over at least
#: a vector of channels) gets that sketch alone (``sketch_rules.cpu_rules.VectorInsideReduction``);
#: 8: padded vector tiles (16 or 32 lanes of 408 channels; ``sketch_rules.annotation.paddable``);
#: 9: sampling stops once its samples only repeat (``sketch_rules.sampling.exhausted_after``);
#: 10: an axis with padded vector tiles but no exact one (a prime: 197 tokens) draws them
#: (``sketch_rules.annotation.FillTileSize``), and a run-time tensor padded past the axis
#: makes it ``paddable``; 11: a favourite whose first reads of data that come from memory in a
#: network no prefetcher follows gives way to the next best that waits less (``evolution.cold_reads``);
#: 12: padded vector tiles only in a stage computed into a local tile (``sketch_rules.annotation.pads_locally``);
#: 13: a program carried over from a DAG of fewer operations has the extra ones annotated as the default
#: schedule annotates them, not left naive, and none from a DAG of more (``evolution.transfer.adapt_program``)
SEARCH_VERSION = 13
#: how many of the search's best predicted programs the zero-trial choice ranks
CANDIDATES = 16
#: how many other tasks of a model's operator family offer their picks to a task
#: (``shared_in_family``): the nearest in flop count
FAMILY_SOURCES = 8
#: the kind of the records database's lines that remember zero-trial programs
ENTRY_KIND = "zero_trial"


def zero_trial_params(task: ir.SearchTask) -> SearchParams:
    """The zero-trial search of ``task``: ``SMALL_TASK_PARAMS`` under ``SMALL_TASK_FLOPS``,
    else ``ZERO_TRIAL_PARAMS``."""
    return SMALL_TASK_PARAMS if task.dag.flop_count() < SMALL_TASK_FLOPS else ZERO_TRIAL_PARAMS


def zero_trial_program(task: ir.SearchTask, model, seed: int = 0, candidates=(),
                       params: SearchParams | None = None) -> ir.State:
    """The program of ``task`` that ``model`` ranks best among a short evolutionary search's
    and the given ``candidates`` (States of ``task.dag``, e.g. a default schedule)."""
    return ranked_programs(task, model, seed, candidates, params, top=1)[0]


def ranked_programs(task: ir.SearchTask, model, seed: int = 0, candidates=(),
                    params: SearchParams | None = None, top: int = 1) -> list[ir.State]:
    """The ``top`` distinct programs of ``task`` that ``model`` ranks best among a short
    evolutionary search's best ``CANDIDATES`` and the given ``candidates``, best first: the
    zero-trial program and those the model nearly chose (``bench/training_records.py
    --picks`` measures them, so that the base model learns where its own choices go wrong).
    Programs that start a parallel region more than once a call
    (``sketch_rules.analysis.parallel_region_starts``) come after all others: the base
    model has no feature that counts regions and ranked such a program first, 6x slower
    than its runners-up. The first is the pick: the model's favourite, unless in a network it
    would wait for memory on reads no prefetcher follows (``evolution.cold_reads.prefer_prefetched``:
    the base model learnt from programs timed with their inputs in the caches)."""
    policy = SketchPolicy(task, model, params or zero_trial_params(task), seed=seed)
    found = policy.evolve(policy.sample_initial(), max(CANDIDATES, top))
    distinct: dict[str, ir.State] = {}
    for state in found + [c for c in candidates if c is not None]:
        distinct.setdefault(state.key, state)
    options = list(distinct.values())
    if not options:
        raise ValueError(f"the search found no program of {task}")
    return [options[i] for i in best_first(task, model, options)[:top]]


def best_first(task: ir.SearchTask, model, options: list) -> list[int]:
    """The positions of ``options`` (distinct programs of ``task``), the pick first, then
    the others by ``model``'s score, those that restart parallel regions last (see
    ``ranked_programs``)."""
    scores = model.predict(task, options)
    restarts = [parallel_region_starts(s) > 1 for s in options]
    order = sorted(range(len(options)), key=lambda i: (restarts[i], -scores[i]))
    alike = [i for i in order if restarts[i] == restarts[order[0]]]
    pick = alike[prefer_prefetched(task, [options[i] for i in alike], [scores[i] for i in alike])]
    order.remove(pick)
    return [pick] + order


def shared_in_family(tasks, picks: dict, model, library=None, keys=None) -> dict:
    """Workload key -> zero-trial program of each of ``tasks`` (``ir.SearchTask``s of one
    model) that ``picks`` holds: its own search's pick, or the pick of another of the tasks
    of its operator family (``task_scheduler.similarity_tag``; the ``FAMILY_SOURCES``
    nearest in flop count), or a program of ``library`` (a ``ProgramLibrary``: measured
    programs of the ``FAMILY_SOURCES`` training workloads of its family nearest in flop
    count), its tile lengths fitted to this task (``evolution.transfer``), where ``model``
    ranks that first (``best_first``). A short search does not find every program the
    model ranks best: for a dense layer of GPT-2 and one of ConvNeXt the shipped model
    ranked the program an earlier model's search had found above its own search's by 20 %;
    a sibling's search, or a tuning of a workload like it, may have found it. Each task's
    options are the other tasks' own picks, so the result does not depend on the tasks'
    order. ``keys``: only these tasks choose (the others keep their own picks)."""
    out = dict(picks)
    for key, (task, family) in _families(tasks, picks).items():
        if keys is not None and key not in keys or not _chooses(task, family, library):
            continue
        sources = [picks[k] for k in family]
        if library is not None:
            sources += library.sources(task, FAMILY_SOURCES)
        options = {picks[key].key: picks[key]}
        for state in adapt_programs(sources, task):
            options.setdefault(state.key, state)
        if len(options) > 1:
            options = list(options.values())
            out[key] = options[best_first(task, model, options)[0]]
    return out


def _families(tasks, picks: dict) -> dict:
    """Workload key -> (task, the keys of the ``FAMILY_SOURCES`` other tasks of its operator
    family nearest in flop count) of each of ``tasks`` that ``picks`` holds."""
    by_key = {key: t for t in tasks if (key := t.workload_key) in picks}   # (a key is a hash of the DAG)
    family_of = {key: (similarity_tag(t.dag), str(t.target)) for key, t in by_key.items()}
    log_flops = {key: math.log(max(t.dag.flop_count(), 1.0)) for key, t in by_key.items()}
    out = {}
    for key, task in by_key.items():
        family = [k for k in by_key if k != key and family_of[key][0] and family_of[k] == family_of[key]]
        family.sort(key=lambda k: abs(log_flops[k] - log_flops[key]))
        out[key] = task, family[:FAMILY_SOURCES]
    return out


def sharing_identities(tasks, picks: dict, base_model: str, library=None) -> dict:
    """Workload key -> what decides ``shared_in_family``'s choice for each of ``tasks`` that
    ``picks`` holds and that has anything to choose from (its pick and its family's, the base
    model, the library): the records database remembers the choice under it, so that a warm
    load does not choose again."""
    steps = {key: json.dumps(_lists_of(state), separators=(",", ":")) for key, state in picks.items()}
    lib = getattr(library, "identity", "none")
    out = {}
    for key, (task, family) in _families(tasks, picks).items():
        if not _chooses(task, family, library):
            continue
        spec = "\n".join([f"autosched {__version__} shared {SEARCH_VERSION} {base_model} {lib} {task.target}", steps[key],
                          *(f"{k} {steps[k]}" for k in family)])
        out[key] = f"shared-{hashlib.sha256(spec.encode()).hexdigest()[:24]}"
    return out


def _chooses(task, family: list, library) -> bool:
    """Whether a task has anything to be offered: a sibling, or a library and an operator family."""
    return bool(family) or (library is not None and bool(similarity_tag(task.dag)))


def _lists_of(state: ir.State) -> list:
    return [list(step.record()) for step in state.steps]


def search_steps(task: ir.SearchTask, model, seed: int, params: SearchParams | None = None,
                 single_threaded: bool = False) -> tuple:
    """The step records of ``task``'s ``CANDIDATES`` best ranked programs (``ranked_programs``,
    its default schedule ranked with the search's): the zero-trial program first, then the
    runners-up, best first (what a worker runs: plain arguments, the model's predictor;
    ``single_threaded``: XGBoost predicts on one thread, one worker per core)."""
    if single_threaded:
        _one_thread(model)
    default = search_space(task.target).default_schedule(task.dag, task.hardware)
    ranked = ranked_programs(task, model, seed, [default], params, top=CANDIDATES)
    return tuple(nested_tuples([step.record() for step in state.steps]) for state in ranked)


def _one_thread(model) -> None:
    for booster in getattr(model, "boosters", list)():
        booster.set_param({"nthread": 1})


def model_identity(model) -> str | None:
    """A digest of ``model``'s trees (its base model's and an ensemble's members' too): what
    tells one base model from another wherever its file lies; None for a model without trees."""
    boosters = getattr(model, "boosters", list)()
    if not boosters:
        return None
    digest = hashlib.sha256()
    for booster in boosters:
        digest.update(bytes(booster.save_raw("ubj")))
    return digest.hexdigest()[:32]


def search_identity(seed: int, params: SearchParams = ZERO_TRIAL_PARAMS) -> str:
    """What tells one zero-trial search from another: autosched's version, the search's
    version, its parameters and seed."""
    spec = f"autosched {__version__} search {SEARCH_VERSION} {params!r} seed {seed}"
    return f"{SEARCH_VERSION}-{hashlib.sha256(spec.encode()).hexdigest()[:16]}"


@dataclass(frozen=True)
class ZeroTrialEntry:
    """A remembered zero-trial program: the step records that the search ``search`` under
    the base model ``base_model`` (``model_identity``) picked for a workload on a target.
    Never a measurement (no costs)."""
    workload_key: str
    target: str
    base_model: str
    search: str
    steps: tuple
    desc: str = ""
    timestamp: float = 0.0

    @property
    def ident(self) -> tuple:
        return self.workload_key, self.target, self.base_model, self.search

    def to_json(self) -> str:
        return json.dumps({"v": RECORD_VERSION, KIND: ENTRY_KIND, "workload_key": self.workload_key,
                           "desc": self.desc, "target": self.target, "base_model": self.base_model,
                           "search": self.search, "steps": self.steps, "timestamp": self.timestamp},
                          separators=(",", ":"))

    @classmethod
    def from_dict(cls, d) -> "ZeroTrialEntry":
        """The entry of a parsed line; ``ValueError`` saying why for anything else."""
        if not isinstance(d, Mapping):
            raise ValueError(f"the line is a JSON {type(d).__name__}, not an entry object")
        if d.get("v") != RECORD_VERSION:
            raise ValueError(f"entry format version {d.get('v')!r}; this autosched reads version {RECORD_VERSION}")
        try:
            return cls(workload_key=str(d["workload_key"]), target=str(d["target"]), base_model=str(d["base_model"]),
                       search=str(d["search"]), steps=steps_field(d), desc=str(d.get("desc", "")),
                       timestamp=float(d.get("timestamp", 0.0)))
        except KeyError as err:
            raise ValueError(f"the zero-trial entry has no {err.args[0]!r} field") from None
        except TypeError as err:
            raise ValueError(f"a field has the wrong type: {err}") from None


class ZeroTrial:
    """Zero-trial programs from one base model (``load_base_model``'s ``spec``), remembered
    per workload and target as their steps (replayed on the DAG asked for): in this object,
    and in the records database ``records_db`` (a ``RecordsDB``, "default", a path, or
    None: see ``database.open_records_db``). ``workers``: processes the searches of many
    tasks run in (None: one per core); ``params``: the search's (default: each task's
    ``zero_trial_params``). ``stats`` counts the programs ``remembered`` (the
    database's, replayed), ``searched`` and ``failed``. ``library``: a ``ProgramLibrary``
    whose programs the tasks' own picks are ranked against (``shared_in_family``), or None."""

    def __init__(self, model, seed: int = 0, records_db="default", workers: int | None = None,
                 params: SearchParams | None = None, library=None):
        self.model = model
        self.library = library
        self.seed = seed
        self.params = params
        self.workers = workers or os.cpu_count() or 1
        self.db: RecordsDB | None = open_records_db(records_db)
        self._base_model = model_identity(model) if self.db is not None else None
        self._steps: dict[tuple, tuple] = {}
        self._runners_up: dict[tuple, tuple] = {}
        self.stats: Counter = Counter(remembered=0, searched=0, failed=0)
        #: workload key -> why its search failed (such tasks have no zero-trial program)
        self.failures: dict[str, str] = {}

    @classmethod
    def from_spec(cls, base_model="default", seed: int = 0, records_db="default",
                  workers: int | None = None, hardware=None, library="default") -> "ZeroTrial | None":
        """One from the base model ``base_model`` names for programs of ``hardware`` (the
        shipped model of its vector width; None: this CPU's), with the program library
        ``library`` names (``program_library.load_program_library``); None when there is no
        base model."""
        model = load_base_model(base_model, hardware)
        if model is None:
            return None
        return cls(model, seed, records_db, workers, library=load_program_library(library, hardware))

    def program(self, dag: ir.ComputeDAG, target=None) -> ir.State:
        """The zero-trial program of ``dag`` (layout-rewritten: build it with
        ``layout_rewrite=True``); ``ValueError`` if the search finds none."""
        task = ir.SearchTask(dag, target=target)
        got = self.programs([task])
        if task.workload_key not in got:
            raise ValueError(self.failures[task.workload_key])
        return got[task.workload_key]

    def programs(self, tasks) -> dict[str, ir.State]:
        """Workload key -> zero-trial program of each of ``tasks`` (``ir.SearchTask``s;
        one per workload key and target), replayed from what is remembered, the others
        searched at once over ``workers`` processes, largest first; then shared within
        their operator families (``shared_in_family``: what is remembered is each task's
        own pick). A task whose search fails is left out (``failures`` says why)."""
        tasks = list({(t.workload_key, str(t.target)): t for t in tasks}.values())
        steps = {self._ident(t): self._steps[self._ident(t)] for t in tasks if self._ident(t) in self._steps}
        missing = [t for t in tasks if self._ident(t) not in steps]
        steps.update(self._remembered(missing))
        unknown = [t for t in missing if self._ident(t) not in steps]
        if unknown:
            steps.update(self._searched(unknown))
        out = {}
        for task in tasks:
            ident = self._ident(task)
            if ident in steps:
                self._steps[ident] = steps[ident]
                out[task.workload_key] = ir.State.from_steps(task.dag, steps[ident])
        return self._shared(tasks, out)

    def runners_up(self, task) -> list[ir.State]:
        """The programs that ``task``'s zero-trial search ranked after its pick, best first:
        those of the searches this object ran (none for a program the records database
        remembered). A tuning's first round measures the best of them
        (``autosched.networks.cheap_first_round``) instead of searching again."""
        return [ir.State.from_steps(task.dag, steps) for steps in self._runners_up.get(self._ident(task), ())]

    def _shared(self, tasks, picks: dict) -> dict:
        """``shared_in_family``'s choices for ``picks``: those the records database remembers
        (under ``sharing_identities``), the others chosen and remembered."""
        if self.db is None or self._base_model is None:
            return shared_in_family(tasks, picks, self.model, self.library)
        identities = sharing_identities(tasks, picks, self._base_model, self.library)
        by_key = {t.workload_key: t for t in tasks}
        remembered = {}
        for entry in self.db.read_entries(ENTRY_KIND, ZeroTrialEntry.from_dict, identities):
            if entry.search == identities.get(entry.workload_key) and entry.target == str(by_key[entry.workload_key].target):
                try:
                    remembered[entry.workload_key] = replay_checked(by_key[entry.workload_key].dag, entry.steps)
                except ir.InvalidStep:
                    continue
        out = shared_in_family(tasks, picks, self.model, self.library, keys=set(identities) - set(remembered))
        self.db.append([ZeroTrialEntry(key, str(by_key[key].target), self._base_model, identity,
                                       nested_tuples(_lists_of(out[key])), by_key[key].desc, time.time())
                        for key, identity in identities.items() if key not in remembered])
        out.update(remembered)
        return out

    @staticmethod
    def _ident(task) -> tuple:
        return task.workload_key, str(task.target)

    def _search(self, task) -> str:
        """The identity of ``task``'s search (``search_identity``)."""
        return search_identity(self.seed, self.params or zero_trial_params(task))

    def _remembered(self, tasks) -> dict[tuple, tuple]:
        """The database's steps of ``tasks`` (the newest entry of each) that replay."""
        if self.db is None or self._base_model is None or not tasks:
            return {}
        by_ident = {self._ident(t): t for t in tasks}
        newest = {}
        for entry in self.db.read_entries(ENTRY_KIND, ZeroTrialEntry.from_dict, {t.workload_key for t in tasks}):
            ident = (entry.workload_key, entry.target)
            if ident in by_ident and entry.base_model == self._base_model and \
                    entry.search == self._search(by_ident[ident]):
                newest[ident] = entry.steps
        out = {}
        for ident, steps in newest.items():
            try:
                replay_checked(by_ident[ident].dag, steps)
            except ir.InvalidStep:
                continue   # (an entry of an older search space: searched again)
            out[ident] = steps
            self.stats["remembered"] += 1
        return out

    def _searched(self, tasks) -> dict[tuple, tuple]:
        """The searched steps of ``tasks``' picks, each remembered in the database as it
        comes (their runners-up in this object)."""
        tasks = sorted(tasks, key=lambda t: -t.dag.flop_count())
        out = {}
        for task, result in _search_all(tasks, self.model, self.seed, self.params, min(self.workers, len(tasks))):
            if isinstance(result, Exception):
                self.stats["failed"] += 1
                self.failures[task.workload_key] = f"the zero-trial search of {task.desc or task} failed: " \
                                                   f"{type(result).__name__}: {str(result)[:300]}"
                continue
            self.stats["searched"] += 1
            pick, self._runners_up[self._ident(task)] = result[0], result[1:]
            out[self._ident(task)] = pick
            if self._base_model is not None:
                self.db.append([ZeroTrialEntry(task.workload_key, str(task.target), self._base_model,
                                               self._search(task), pick, task.desc, time.time())])
        return out


def _search_all(tasks, model, seed: int, params: SearchParams | None, workers: int):
    """(task, ``search_steps``' answer or the exception its search raised) of each of ``tasks``, in the
    order they finish: in this process for one worker, else in a ``WorkerPool``."""
    if workers <= 1:
        for task in tasks:
            yield task, _try(search_steps, task, model, seed, params)
        return
    from ..workers import WorkerPool
    predictor = model.predictor()
    pool = WorkerPool(workers, name="autosched-zero-trial", preload=("numpy", "xgboost", "ir", "evolution"))
    try:
        futures = {pool.submit(search_steps, task, predictor, seed, params, True): task for task in tasks}
        for future in as_completed(futures):
            task = futures[future]
            err = future.exception()
            if err is None or isinstance(err, ValueError):   # (ir.InvalidStep is one)
                yield task, err or future.result()
            else:   # a worker that crashed or could not start: this process searches
                yield task, _try(search_steps, task, model, seed, params)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _try(fn, *args):
    try:
        return fn(*args)
    except ValueError as err:   # (ir.InvalidStep is one)
        return err
