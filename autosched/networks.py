"""``tune_networks``: tune whole models, one or several, toward an objective.

Networks are partitioned into subgraph tasks (``autosched.graph``); the tasks of all
networks are deduplicated by workload key; one ``ProgramMeasurer`` (one log for all tasks),
one cost model shared by all tasks and one ``SketchPolicy`` per task (seed + task index)
are handed to the ``task_scheduler.TaskScheduler``, which decides which task gets each
round; the loop is ``tune.tune_tasks``, the same as single-task tuning's, and so is
resuming from the log (``records.resume``).
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field, replace

import numpy as np

import ir
from evolution import SearchParams, SketchPolicy
from task_scheduler import FirstRound, PrintTableInfo, TaskScheduler

from .graph import Graph, GraphExecutor, PartitionedGraph, get_network, partition
from .graph.dynamic import expand_open_models
from .measure import LocalRunner
from .measure.jobs import last_level_cache_bytes
from .history.records import RecordToFile
from .history.zero_trial import ZeroTrial
from .options import TuneOptions, check_counts
from .tune import prior_and_model, require_devices, search_workers, tune_tasks


def as_partitioned(network, batch: int = 1, fold_batch_norm: bool = True,
                   include_simple_tasks: bool = False, winograd: bool = True) -> PartitionedGraph:
    """A ``PartitionedGraph`` from a zoo name, a ``Graph`` or a ``PartitionedGraph``."""
    if isinstance(network, PartitionedGraph):
        return network
    if isinstance(network, str):
        network = get_network(network, batch=batch)
    if isinstance(network, Graph):
        return partition(network, fold_batch_norm=fold_batch_norm, include_simple_tasks=include_simple_tasks,
                         winograd=winograd)
    raise TypeError(f"expected a network name, an autosched.graph.Graph or a PartitionedGraph, "
                    f"got {type(network).__name__}")


@dataclass
class NetworkTuneResult:
    """What tuning networks found. ``tasks[i]`` (an ``ir.SearchTask``) has best latency
    ``best_costs[i]`` and program ``best_states[tasks[i].workload_key]``; ``weights[j, i]``
    counts task i in network j; ``curve``: after each round, trials so far, seconds,
    objective and the estimated latency of each network (the tuning curve)."""
    networks: list
    tasks: list
    weights: np.ndarray
    best_costs: list
    best_states: dict
    scheduler: TaskScheduler
    trials: int
    curve: list = field(default_factory=list)
    #: the ``ir.Target`` the tasks were tuned for
    target: object = None

    def estimated_latencies(self) -> dict:
        """Seconds per network: Σ_i w_ij · best latency of task i (the tuned tasks only)."""
        lat = self.weights @ np.asarray(self.best_costs, dtype=np.float64)
        return {p.name: float(v) for p, v in zip(self.networks, lat)}

    def executor(self, network=0, **kwargs) -> GraphExecutor:
        """A ``GraphExecutor`` of network ``network`` (an index or a name) with the tuned programs."""
        if isinstance(network, str):
            network = [p.name for p in self.networks].index(network)
        kwargs.setdefault("target", self.target)
        return GraphExecutor(self.networks[network], states=self.best_states, **kwargs)

    def table(self) -> str:
        return self.scheduler.table()

    def __repr__(self) -> str:
        est = ", ".join(f"{k}: {1e3 * v:.3f} ms" if v < 1e9 else f"{k}: -" for k, v in
                        self.estimated_latencies().items())
        return f"NetworkTuneResult({len(self.tasks)} tasks, {self.trials} trials; estimated {est})"


class _NoPrograms:
    """The policy of a task whose search space could not be built: proposes nothing, so
    the scheduler retires the task at its first round (it runs a default schedule)."""

    def next_batch(self, n, params=None):
        return []

    def remember(self, states, costs):
        return []

    def update(self, states, costs):
        pass


def _make_policy(task, model, search_params, seed, executor=None):
    try:
        return SketchPolicy(task, model, search_params, seed=seed, executor=executor)
    except (ValueError, ir.InvalidStep) as err:
        warnings.warn(f"autosched: no search space for task {task.desc} ({type(err).__name__}: {err}); it is not "
                      "tuned and runs a default schedule", RuntimeWarning, stacklevel=3)
        return _NoPrograms()


#: programs a task's first round asks of its zero-trial search's runners-up, or of its short
#: search (the probe rule measures half of them), besides its zero-trial program
FIRST_ROUND_BATCH = 8
#: the first round's search (in this process) of a task whose zero-trial program the records
#: database remembered (no runners-up): a few programs ranked by the model that has learnt
#: from the tasks measured so far
FIRST_ROUND_SEARCH = SearchParams(population=64, generations=2, init_min_population=32, islands=1)
#: first rounds between two trainings of the cost model in the warm-up pass
FIRST_ROUND_TRAIN_EVERY = 8


def cheap_first_round(tasks, options: TuneOptions) -> FirstRound:
    """Every task's first round: its zero-trial program (ranked against its default
    schedule, as an untuned task would run it; with the base model, for CPU tasks) and the
    best of that search's runners-up by the model learnt so far (where the records database
    remembered the program: of a short search, ``FIRST_ROUND_SEARCH``, or the options' search
    parameters where they are smaller); the model learns from them every
    ``FIRST_ROUND_TRAIN_EVERY`` tasks."""
    cost_model = options.cost_model
    zero_trial = None
    if isinstance(cost_model, str) and cost_model.startswith("xgb") and options.base_model is not None \
            and all(t.target.backend.base_model for t in tasks):
        zero_trial = ZeroTrial.from_spec(options.base_model, options.seed, options.records_db,
                                         hardware=tasks[0].hardware if tasks else None)
    program = None if zero_trial is None else _ZeroTrialPrograms(zero_trial, tasks)
    own, short = options.search_params, FIRST_ROUND_SEARCH
    params = replace(own, population=min(own.population, short.population),
                     generations=min(own.generations, short.generations),
                     init_min_population=min(own.init_min_population, short.init_min_population), islands=1)
    return FirstRound(params, FIRST_ROUND_BATCH, program, FIRST_ROUND_TRAIN_EVERY,
                      runners_up=None if program is None else program.runners_up)


class _ZeroTrialPrograms:
    """task -> its zero-trial program: those of all the tasks made at the first call, at
    once (over the cores; remembered in, or replayed from, the records database), so
    that the warm-up pass waits for one parallel search, not one search per task.
    ``runners_up(task)``: the programs that search ranked after the pick."""

    def __init__(self, zero_trial: ZeroTrial, tasks):
        self.zero_trial, self.tasks, self.found = zero_trial, list(tasks), None

    def runners_up(self, task) -> list:
        self._find()
        return self.zero_trial.runners_up(task)

    def _find(self) -> None:
        if self.found is None:
            self.found = self.zero_trial.programs(self.tasks)

    def __call__(self, task) -> ir.State:
        self._find()
        if task.workload_key not in self.found:
            raise ValueError(self.zero_trial.failures.get(task.workload_key, "the search found no program"))
        return self.found[task.workload_key]


def weights_exceed_cache(parts) -> bool:
    """Whether the constants (weights) of the partitioned networks ``parts`` together exceed
    this CPU's last-level cache: then a run of them finds every kernel's weights out of the
    caches (the other kernels' weights have evicted them), and a kernel is to be timed so."""
    return sum(p.constant_bytes for p in parts) > last_level_cache_bytes()


def tune_networks(networks, options: TuneOptions | None = None, *, objective="latency", strategy: str = "gradient",
                  latency_requirements=None, reference_latencies=None, patience: int = 5,
                  early_stopping_per_task: int | None = None, alpha: float = 0.2, beta: float = 2.0,
                  backward_window: int = 3, eps_greedy: float = 0.05, layout_rewrite: bool = True, batch: int = 1,
                  fold_batch_norm: bool = True, include_simple_tasks: bool = False, winograd: bool = True,
                  callbacks=None, target=None, hardware: ir.HardwareParams | None = None, input_shapes=None,
                  first_round: bool = True, transfer_seeds: int = 2, **tuning) -> NetworkTuneResult:
    """Tune the subgraph tasks of ``networks`` (a zoo name, a ``graph.Graph``, a
    ``PartitionedGraph``, a ``graph.DynamicModel`` (a model with open axes), or a list of
    them) for ``target`` (an ``ir.Target`` or its
    spelling, default this CPU; ``hardware`` overrides its parameters) as ``options`` (a
    ``TuneOptions``, shared with ``auto_schedule``) say; its fields may also be given as
    keyword arguments, which replace the options' values: ``trials`` measurements in all
    (default 1000 × the number of tasks, as the paper), ``measure_batch`` per round,
    ``log_file`` (one log for all tasks, appended to and resumed from), ``early_stopping``
    (stop once the objective has not improved for that many trials), ``time_budget_s``
    (tune for at most about this many wall seconds, whatever ``trials`` allows),
    ``retime_best`` (each task measured in this run has its fastest programs re-timed in
    turns at the end: a few seconds a task, after the budget), ``base_model``,
    ``records_db``... as ``auto_schedule``'s. Deterministic for a ``seed`` given the same
    measurements (a time budget is not).

    ``objective``: "latency" (f1: the summed latency of the networks, default),
    "requirement" (f2, with ``latency_requirements``: seconds per network), "speedup" (f3,
    with ``reference_latencies``), "early_stopping" (f4, ``patience`` rounds), a
    ``task_scheduler.Objective``, or any callable of the vector of task latencies.
    ``strategy``: "gradient" (Ansor's scheduler) or "round-robin".
    ``early_stopping_per_task``: retire a task after that many trials without improvement.
    ``fold_batch_norm``, ``winograd``: as ``graph.partition``'s, for networks not partitioned yet.
    ``input_shapes``: the shapes to tune each ``DynamicModel`` for (a dict {input: shape} or a list
    of them; each set of shapes is one network of the result).
    ``first_round``: every task's first round is cheap (``cheap_first_round``: its zero-trial
    program and the best of that search's runners-up), so that the warm-up pass over a model of many
    tasks takes a minute or two, not the budget; False: a full round like the others.
    ``transfer_seeds``: the best that many measured programs of each task seed the search of
    the other tasks of its operator family, adapted to their shapes (0: none; see
    ``task_scheduler.TaskScheduler``).

    The default ``runner`` times programs as they run in the model: on a CPU, with their
    weights evicted from the caches when the networks' weights exceed the last-level cache
    (``weights_exceed_cache``; ``LocalRunner(cold_constants=True)``), else warm."""
    check_counts(early_stopping_per_task=early_stopping_per_task)
    options = TuneOptions.of(options, **tuning)
    log = RecordToFile(options.log_file) if options.log_file else None
    nets = expand_open_models(networks if isinstance(networks, (list, tuple)) else [networks], input_shapes)
    parts = [as_partitioned(n, batch, fold_batch_norm, include_simple_tasks, winograd) for n in nets]
    if not parts:
        raise ValueError("tune_networks needs at least one network")
    index: dict[str, int] = {}
    workloads = []
    for p in parts:
        for w in p.tasks:
            if w.workload_key not in index:
                index[w.workload_key] = len(workloads)
                workloads.append(w)
    if not workloads:
        raise ValueError("the networks have no task to tune (no conv, dense, matmul or reduction)")
    weights = np.zeros((len(parts), len(workloads)))
    for j, p in enumerate(parts):
        for w in p.tasks:
            weights[j, index[w.workload_key]] += w.weight
    target = ir.Target.parse(target, hardware)
    tasks = [w.search_task(layout_rewrite, target) for w in workloads]
    trials = options.trials_for(len(tasks))
    require_devices(tasks, options.runner, trials)
    if options.runner is None:
        options = replace(options, runner=LocalRunner(cold_constants=target.backend.host_memory
                                                      and weights_exceed_cache(parts)))
    db, prior, model = prior_and_model(tasks, options)
    search_pool = search_workers(options.search_params, max(t.hardware.num_cores for t in tasks))
    policies = [_make_policy(t, model, options.search_params, options.seed + i, search_pool)
                for i, t in enumerate(tasks)]
    cbs = list(callbacks) if callbacks is not None else []
    if options.verbose and not any(isinstance(c, PrintTableInfo) for c in cbs):
        cbs.append(PrintTableInfo(progress=options.verbose > 1))
    scheduler = TaskScheduler(tasks, objective, weights=weights, network_names=[p.name for p in parts],
                              flops=[w.flops for w in workloads], names=[w.desc for w in workloads],
                              strategy=strategy, alpha=alpha, beta=beta, backward_window=backward_window,
                              eps_greedy=eps_greedy, early_stopping_per_task=early_stopping_per_task,
                              seed=options.seed, callbacks=cbs, latency_requirements=latency_requirements,
                              reference_latencies=reference_latencies, patience=patience,
                              first_round=cheap_first_round(tasks, options) if first_round else None,
                              transfer_seeds=transfer_seeds)
    try:
        measurer = tune_tasks(scheduler, policies, model, options, trials, log=log, db=db, prior=prior)
    finally:
        if search_pool is not None:
            search_pool.shutdown()
    best_states = {t.workload_key: measurer.best_state(t) for t in tasks}
    best_costs = [float(measurer.best_cost(t)) for t in tasks]
    best_states = {k: v for k, v in best_states.items() if v is not None}
    return NetworkTuneResult(parts, tasks, weights, best_costs, best_states, scheduler, scheduler.total_trials,
                             list(scheduler.curve), target)


__all__ = ["tune_networks", "NetworkTuneResult", "as_partitioned", "weights_exceed_cache"]
