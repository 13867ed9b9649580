"""``auto_schedule``: tune one computation end to end — search rounds, measurement,
records, resume, early stopping, a progress line — and return its best kernel; and
``tune_tasks``, the tuning loop it shares with ``tune_networks``."""
from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass, field

import ir
from evolution import RandomModel, SearchParams, SketchPolicy, XGBoostModel
from task_scheduler import TaskScheduler

from .measure import LocalBuilder, LocalRunner, ProgramMeasurer
from .options import RETIME_TURNS, TuneOptions
from .history.base_model import load_base_model
from .history.records import RecordToFile, resume, trials_of
from .history.database import RecordsDB, open_records_db, prior_knowledge, reconcile
from .space import as_task
from .workers import WorkerPool


@dataclass
class TuneResult:
    """What tuning found: the compiled ``kernel`` of the best ``state``, its measured
    ``latency`` (seconds per call) and ``gflops``, and the tuning ``history``: one
    (trials so far, best GFLOPS so far, seconds elapsed) entry per measured batch."""
    task: ir.SearchTask
    state: ir.State | None
    kernel: ir.Kernel | None
    latency: float
    gflops: float
    trials: int
    history: list = field(default_factory=list)
    time_search: float = 0.0
    time_measure: float = 0.0
    #: of the measurement time: seconds spent compiling and running programs (summed over workers)
    time_build: float = 0.0
    time_run: float = 0.0
    #: measured programs that failed, by kind ("compile error", "wrong answer", ...)
    measure_errors: dict = field(default_factory=dict)
    #: candidates the search left out because making them raised, by kind (should be none)
    search_rejected: dict = field(default_factory=dict)

    def __repr__(self) -> str:
        return (f"TuneResult({self.task.desc or self.task.workload_key}: {self.gflops:.2f} GFLOPS, "
                f"{1e3 * self.latency:.4f} ms, {self.trials} trials)")


#: programs the XGBoost model must have seen before it ranks, when it starts from nothing
WARMUP_SAMPLES = 100


def make_cost_model(cost_model, seed: int, start=None, n_prior: int = 0):
    """The tuning's cost model: "xgb" (rank objective), "xgb-pack-sum", "random" or a
    CostModel as it is. An XGBoost model starts from ``start`` (a base model: it ranks
    from the first batch, and learns from the task's measurements from the first round on:
    its scores are the starting margin, what the task's programs teach is added) and, with
    ``n_prior`` earlier valid measurements of the task (the records database's), trains on
    them at once; from nothing it waits for ``WARMUP_SAMPLES``. (``bench/base_model_picks.py``
    on the programs of 19 tunings of workloads no base model saw: the previous base model
    alone picked one at 0.43 of the best in geometric mean, after 16 of the task's own
    measurements at 0.69; the shipped one at 0.63 alone, 0.68 after them.)"""
    warmup = min(WARMUP_SAMPLES, n_prior) if n_prior else (1 if start is not None else WARMUP_SAMPLES)
    if cost_model == "xgb":
        # the rank objective: on this machine's data it orders programs better than Ansor's
        # throughput-weighted pack-sum (held-out pairwise accuracy 0.81 vs 0.63, bench/cost_model.py)
        return XGBoostModel(objective="rank", seed=seed, base_model=start, num_warmup_sample=warmup)
    if cost_model == "xgb-pack-sum":
        return XGBoostModel(objective="pack-sum", seed=seed, base_model=start, num_warmup_sample=warmup)
    if cost_model == "random":
        return RandomModel(seed=seed)
    if isinstance(cost_model, str):
        raise ValueError(f"cost_model must be 'xgb', 'xgb-pack-sum', 'random' or a CostModel, got {cost_model!r}")
    return cost_model


class _Progress:
    """The progress line of tuning one task (a scheduler callback): trials, the best
    GFLOPS so far, seconds, and the measurer's summary (programs measured, errors by kind)."""

    def __init__(self, flops: float, trials: int):
        self.flops, self.trials = flops, trials

    def on_round(self, scheduler, i: int) -> None:
        done, width = scheduler.total_trials, 24
        filled = int(width * done / max(self.trials, 1))
        gflops = _gflops(self.flops, scheduler.best_costs[i])
        best = f"{gflops:.2f} GFLOPS" if gflops > 0 else "-"
        summary = scheduler.measurer.summary() if scheduler.measurer is not None else ""
        print(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{self.trials} trials | best {best} | "
              f"{time.perf_counter() - scheduler._start:.0f}s | {summary}", end="", file=sys.stderr, flush=True)

    def on_end(self, scheduler) -> None:
        print(file=sys.stderr)


def _gflops(flops: float, cost: float) -> float:
    return flops / cost / 1e9 if math.isfinite(cost) and cost < 1e9 else 0.0


def auto_schedule(dag_or_task, options: TuneOptions | None = None, *, target=None, layout_rewrite: bool = True,
                  custom_rules=None, **tuning) -> TuneResult:
    """Search for a fast program of ``dag_or_task`` (a ComputeDAG, or a SearchTask as it is)
    as ``options`` (a ``TuneOptions``) say; its fields may also be given as keyword
    arguments, which replace the options' values: ``trials`` (default 1000) measurements,
    ``measure_batch`` per round. With ``log_file``, every measurement is appended to it and
    a run resumes from it (programs measured before are not measured again; the cost
    model learns from them); a file that is not a tuning log, or cannot be written, is
    refused before anything is measured. ``early_stopping``: stop after that many trials
    without improvement; ``time_budget_s``: start no round that would end after this many
    wall seconds, judged by the rounds so far (whatever ``trials`` allows). ``retime_best``:
    at the end, the fastest programs re-timed in turns (``retime_best_programs``; 0: none)
    pick the result, not the fastest single trial. ``cost_model``: "xgb", "random" or a
    CostModel. Deterministic for a ``seed`` given the same measurements.

    ``target``: an ``ir.Target`` or its spelling, default this CPU; "cuda" tunes for the
    NVIDIA GPU of this machine (``ir.NoCudaDevice`` without one, unless a ``runner``
    measures elsewhere). ``custom_rules``: sketch rules tried before the built-in ones.

    ``base_model`` (the XGBoost cost models' starting point; "default": the shipped one or
    ``$AUTOSCHED_BASE_MODEL``, a path, or None) and ``records_db`` (the local records
    database, ``autosched.history.database``; "default", a path, or None): with either, the first
    batch is already chosen by the cost model, no random warm-up.

    Tuning one computation is tuning a network of one task: ``tune_tasks`` with a
    round-robin ``TaskScheduler``."""
    options = TuneOptions.of(options, **tuning)
    trials = options.trials_for(1)
    log = RecordToFile(options.log_file) if options.log_file else None
    task = as_task(dag_or_task, layout_rewrite=layout_rewrite, target=target)
    require_devices([task], options.runner, trials)
    db, prior, model = prior_and_model([task], options)
    search_pool = search_workers(options.search_params, task.hardware.num_cores)
    try:
        policy = SketchPolicy(task, model, options.search_params, seed=options.seed, custom_rules=custom_rules,
                              executor=search_pool)
        flops = task.dag.flop_count()
        scheduler = TaskScheduler([task], "latency", flops=[flops], strategy="round-robin", seed=options.seed,
                                  callbacks=[_Progress(flops, trials)] if options.verbose else [])
        measurer = tune_tasks(scheduler, [policy], model, options, trials, log=log, db=db, prior=prior)
    finally:
        if search_pool is not None:
            search_pool.shutdown()
    history = [(p["trials"], _gflops(flops, p["objective"]), p["seconds"]) for p in scheduler.curve]
    seconds = scheduler.seconds[0]
    state, cost = measurer.best_state(task), measurer.best_cost(task)
    kernel = ir.build(task.dag, state, layout_rewrite=task.layout_rewrite,
                      target=task.target) if state is not None else None
    return TuneResult(task, state, kernel, cost, _gflops(flops, cost) if state is not None else 0.0,
                      scheduler.total_trials, history, seconds["search"], seconds["measure"], seconds["build"],
                      seconds["run"], {e.label: n for e, n in measurer.error_counts.items()},
                      dict(policy.evolution.rejected.counts))


def require_devices(tasks, runner, trials: int) -> None:
    """Raise (the back end's error) unless this machine has the device of every task's
    target, when programs are to be measured here (no ``runner`` of another machine)."""
    if runner is None and trials > 0:
        for target in dict.fromkeys(t.target for t in tasks):
            target.backend.require_device(target)


def prior_and_model(tasks, options: TuneOptions):
    """(the records database or None, its records of ``tasks``, the cost model): what a
    tuning starts from (see ``auto_schedule``'s ``base_model`` and ``records_db``)."""
    cost_model, seed, base_model = options.cost_model, options.seed, options.base_model
    xgb = isinstance(cost_model, str) and cost_model.startswith("xgb")
    # the base model knows the programs of the back end it was trained on (the CPU's)
    without = [str(t.target) for t in tasks if not t.target.backend.base_model]
    if without and base_model not in (None, "default"):
        raise ValueError(f"base_model={base_model!r} does not apply to target {without[0]!r}: the base model knows "
                         "CPU programs only")
    base = load_base_model(base_model, tasks[0].hardware if tasks else None) if xgb and not without else None
    db = open_records_db(options.records_db)
    prior, start = prior_knowledge(db, tasks, base, seed) if db is not None and xgb else ([], base)
    valid = sum(r.ok for r in trials_of(prior))  # (what resume trains the model on)
    return db, prior, make_cost_model(cost_model, seed, start, valid if valid >= 2 else 0)


def tune_tasks(scheduler: TaskScheduler, policies, model, options: TuneOptions, trials: int, *,
               log: RecordToFile | None, db: RecordsDB | None = None, prior=()) -> ProgramMeasurer:
    """The tuning loop of ``auto_schedule`` and ``tune_networks``: one measurer for all of
    ``scheduler``'s tasks (appending to ``log`` and the records ``db``), resumed from the
    log's records and the ``prior`` ones of the database (see ``records.resume``: the
    measurer, the policies and the shared ``model`` take them in; the scheduler starts from
    the rounds and latencies they reached), then the scheduler spends ``trials``
    measurements in rounds of ``options.measure_batch`` (``TaskScheduler.tune``; within
    ``options.time_budget_s`` wall seconds where given). Last, ``retime_best_programs``
    re-times the ``options.retime_best`` fastest programs of each task in turns (0: not),
    measured by ``options.builder`` and ``options.runner``. Returns the
    measurer (closed), which knows the best program of each task."""
    callbacks = [cb for cb in (log, db.writer() if db is not None else None) if cb is not None]
    measurer = ProgramMeasurer(options.builder or LocalBuilder(), options.runner or LocalRunner(), callbacks=callbacks)
    try:
        earlier = log.read() if log is not None else []
        if db is not None:
            reconcile(db, earlier, scheduler.tasks)
        seen = {(r.workload_key, r.target, r.program) for r in earlier}
        earlier += [r for r in prior if (r.workload_key, r.target, r.program) not in seen]
        if earlier:
            counts = resume(earlier, scheduler.tasks, policies, model, measurer)
            for i, (task, n) in enumerate(zip(scheduler.tasks, counts)):
                scheduler.restore(i, measurer.best_cost(task), n, options.measure_batch)
        scheduler.tune(policies, measurer, trials, options.measure_batch, options.early_stopping,
                       options.time_budget_s)
        if options.retime_best and trials:
            retime_best_programs(scheduler, policies, measurer, earlier, options.retime_best)
    finally:
        measurer.close()
    return measurer


def retime_best_programs(scheduler: TaskScheduler, policies, measurer: ProgramMeasurer, earlier, top: int) -> None:
    """Re-time the ``top`` fastest programs of every task (and those re-timed before) in turns (``ProgramMeasurer.retime``): the program a tuning returns is the
    fastest of them timed side by side, not the one timed in the machine's quietest
    moment. Tasks not measured in this run whose log already holds a re-timing keep it."""
    retimed_before: dict[str, list] = {}  # workload key -> its programs re-timed before
    for rec in earlier:
        if rec.retimed:
            retimed_before.setdefault(rec.workload_key, []).append(rec)
    measured_now = set(scheduler.choices)
    for i, (task, policy) in enumerate(zip(scheduler.tasks, policies)):
        before = retimed_before.get(task.workload_key, [])
        if before and i not in measured_now:
            continue
        states = policy.best_measured(top)
        for rec in before:  # all of them: each is judged by its latest re-timing
            try:
                states.append(rec.state(task.dag))
            except ir.InvalidStep:
                pass  # (resume warned of it)
        if len({s.key for s in states}) >= 2:
            measurer.retime(task, states, RETIME_TURNS)


def search_workers(params: SearchParams, num_cores: int) -> WorkerPool | None:
    """The worker processes the search's islands evolve in (None: one island, in this
    process); measurement does not run while the search does, so they use its cores."""
    n = params.n_islands(num_cores)
    return WorkerPool(n, name="autosched-search", preload=("numpy", "ir", "evolution")) if n > 1 else None
