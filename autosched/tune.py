"""``auto_schedule``: tune one computation end to end — search rounds, measurement,
records, resume, early stopping, a progress line — and return its best kernel."""
from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass, field

import ir
from evolution import RandomModel, SearchParams, SketchPolicy, XGBoostModel

from .measure import LocalBuilder, LocalRunner, ProgramMeasurer, WorkerPool
from .records import programs_of, read_records
from .space import as_task


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

    def __repr__(self) -> str:
        return (f"TuneResult({self.task.desc or self.task.workload_key}: {self.gflops:.2f} GFLOPS, "
                f"{1e3 * self.latency:.4f} ms, {self.trials} trials)")


def make_cost_model(cost_model, seed: int):
    if cost_model == "xgb":
        # the rank objective: on this machine's data it orders programs better than Ansor's
        # throughput-weighted pack-sum (held-out pairwise accuracy 0.81 vs 0.63, bench/cost_model.py)
        return XGBoostModel(objective="rank", seed=seed)
    if cost_model == "xgb-pack-sum":
        return XGBoostModel(objective="pack-sum", seed=seed)
    if cost_model == "random":
        return RandomModel(seed=seed)
    if isinstance(cost_model, str):
        raise ValueError(f"cost_model must be 'xgb', 'xgb-pack-sum', 'random' or a CostModel, got {cost_model!r}")
    return cost_model


def _progress(task, done: int, trials: int, best_gflops: float, elapsed: float, measurer) -> None:
    width = 24
    filled = int(width * done / max(trials, 1))
    bar = "#" * filled + "." * (width - filled)
    best = f"{best_gflops:.2f} GFLOPS" if best_gflops > 0 else "-"
    print(f"\r[{bar}] {done}/{trials} trials | best {best} | {elapsed:.0f}s | {measurer.summary()}",
          end="", file=sys.stderr, flush=True)


def auto_schedule(dag_or_task, trials: int = 1000, measure_batch: int = 64, log_file: str | None = None,
                  seed: int = 0, early_stopping: int | None = None, cost_model="xgb",
                  search_params: SearchParams | None = None, builder: LocalBuilder | None = None,
                  runner: LocalRunner | None = None, layout_rewrite: bool = True, custom_rules=None,
                  verbose: int = 1, target: str | None = None) -> TuneResult:
    """Search for a fast program of ``dag_or_task`` with at most ``trials`` measurements,
    ``measure_batch`` per round. With ``log_file``, every measurement is appended to it and
    a run resumes from it (programs measured before are not measured again; the cost
    model learns from them). ``early_stopping``: stop after that many trials without
    improvement. ``cost_model``: "xgb", "random" or a CostModel. Deterministic for a
    ``seed`` given the same measurements. ``target``: "cuda" tunes for the NVIDIA GPU of
    this machine (``ir.cuda_runtime.NoCudaDevice`` without one), default this CPU."""
    if trials < 0 or measure_batch < 1:
        raise ValueError(f"trials must be >= 0 and measure_batch >= 1, got {trials} and {measure_batch}")
    task = as_task(dag_or_task, layout_rewrite=layout_rewrite, target=target)
    if task.target_kind == "gpu" and runner is None and trials > 0:
        from ir.cuda_runtime import require_device_present
        require_device_present()
    model = make_cost_model(cost_model, seed)
    measurer = ProgramMeasurer(builder or LocalBuilder(), runner or LocalRunner(), log_file=log_file)
    search_params = search_params or SearchParams()
    search_pool = search_workers(search_params, task.hardware.num_cores)
    policy = SketchPolicy(task, model, search_params, seed=seed, custom_rules=custom_rules, executor=search_pool)
    flops = task.dag.flop_count()
    _resume(task, policy, log_file)
    history, done, since_best = [], 0, 0
    best_cost = measurer.best_cost(task)
    t_search = t_measure = t_build = t_run = 0.0
    start = time.perf_counter()
    try:
        while done < trials:
            t0 = time.perf_counter()
            states = policy.next_batch(min(measure_batch, trials - done))
            t1 = time.perf_counter()
            if not states:
                break
            results = measurer.measure(task, states)
            t2 = time.perf_counter()
            t_search, t_measure = t_search + (t1 - t0), t_measure + (t2 - t1)
            t_build += sum(r.build_time for r in results)
            t_run += sum(r.run_time for r in results)
            policy.update(states, [r.mean_cost if r.ok else None for r in results])
            done += len(states)
            new_best = measurer.best_cost(task)
            since_best = 0 if new_best < best_cost else since_best + len(states)
            best_cost = new_best
            gflops = flops / best_cost / 1e9 if math.isfinite(best_cost) and best_cost < 1e9 else 0.0
            history.append((done, gflops, time.perf_counter() - start))
            if verbose:
                _progress(task, done, trials, gflops, time.perf_counter() - start, measurer)
            if early_stopping is not None and since_best >= early_stopping:
                break
    finally:
        if verbose:
            print(file=sys.stderr)
        measurer.close()
        if search_pool is not None:
            search_pool.shutdown()
    result = _result(task, measurer, done, history, t_search, t_measure)
    result.time_build, result.time_run = t_build, t_run
    return result


def search_workers(params: SearchParams, num_cores: int) -> WorkerPool | None:
    """The worker processes the search's islands evolve in (None: one island, in this
    process); measurement does not run while the search does, so they use its cores."""
    n = params.n_islands(num_cores)
    return WorkerPool(n, name="autosched-search", preload=("numpy", "ir", "evolution")) if n > 1 else None


def _resume(task, policy: SketchPolicy, log_file: str | None) -> None:
    """Programs of this task in the log are known: never proposed again, and the model
    learns from them before the first round."""
    if not log_file:
        return
    try:
        states, costs = programs_of(read_records(log_file), task)
    except FileNotFoundError:
        return
    if states:
        policy.update(states, costs)


def _result(task, measurer, trials: int, history, t_search: float, t_measure: float) -> TuneResult:
    state = measurer.best_state(task)
    cost = measurer.best_cost(task)
    kernel = None
    gflops = 0.0
    if state is not None:
        kernel = ir.build(task.dag, state, layout_rewrite=task.layout_rewrite,
                          target=task.target if task.target_kind == "gpu" else None)
        gflops = task.dag.flop_count() / cost / 1e9
    return TuneResult(task, state, kernel, cost, gflops, trials, history, t_search, t_measure)
