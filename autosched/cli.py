"""The ``autosched`` command line.

Each subcommand is a ``cmd_NAME(args)`` function with an ``add_NAME(subparsers)`` that
declares its arguments. Values are checked while parsing, by the shared argument types
below (``count``, ``log_file``, ``workload_name``, ``network_name``), so that every user
error is one line (``autosched: error: --trials must be >= 0, got -1``) with exit code 2,
never a traceback. Ctrl-C during tuning says how many records the log kept and prints the
command that resumes the run, with exit code 130; a failure of the system (a full disk)
is one line too, with exit code 1.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import re
import shlex
import sys
import time
import warnings

import numpy as np

import ir
from . import graph, networks, ops
from .graph import onnx_baselines as B
from .history.base_model import ENV_VAR as BASE_MODEL_ENV, MAX_ROUNDS as BASE_MODEL_ROUNDS, load_base_model, pretrain
from .history.base_model import TOP_WEIGHT as BASE_MODEL_TOP_WEIGHT
from .history.model_check import MAX_MEMBERS
from .history.program_library import ENV_VAR as LIBRARY_ENV, PER_WORKLOAD as LIBRARY_PER_WORKLOAD, \
    build_library, save_library
from .graph.zoo import ALIASES, NETWORKS
from .options import TuneOptions
from .history.records import KIND, is_tuning_log, read_records
from .history.database import ENV_VAR as RECORDS_DB_ENV
from .files import MAX_BASE_MODEL_BYTES, MAX_INPUT_BYTES, MAX_MODEL_BYTES, MAX_RECORDS_FILE_BYTES, \
    UnreadableFile, checked_size
from .measure.common import MeasurementLost

PROG = "autosched"
#: exit codes: a failure of the system (a full disk...), a user error (as argparse's), an
#: interrupted run (128 + SIGINT)
SYSTEM_ERROR, USAGE_ERROR, INTERRUPTED = 1, 2, 130
DEFAULT_TRIALS = 200
#: the trials of a run given --minutes and no --trials: as many as the minutes allow
TRIALS_WITHIN_MINUTES = 1_000_000


class UsageError(Exception):
    """A bad combination of arguments found after parsing; reported like a parse error."""


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line, ``autosched: error: ...``, exit code 2;
    options are never abbreviated (a resumed command repeats them as given)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        # the argument types below say which option they check: drop argparse's "argument X: "
        head, _, rest = message.partition(": ")
        if head.startswith("argument ") and rest.startswith(("--", "unknown ")):
            message = rest
        self.exit(USAGE_ERROR, f"{PROG}: error: {message}\n")


# argument types shared by the subcommands ----------------------------------------------------

def target_spec(text: str) -> ir.Target:
    """--target: a target's spelling ("llvm", "cpu", "cuda", "cuda -arch=sm_80"...), parsed once."""
    try:
        return ir.Target.parse(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"--target {text!r}: {err}") from None


def _add_target(parser, what: str) -> None:
    parser.add_argument("--target", type=target_spec, default=ir.Target.host(), metavar="TARGET",
                        help=f"{what} for this CPU (default: llvm, also spelled cpu) or an NVIDIA GPU (cuda, also "
                             "spelled gpu; cuda -arch=sm_80 names its architecture)")


def positive_number(option: str, zero: bool = False):
    """A finite float option that must be above 0 (or at least 0, with ``zero``)."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{option} must be a number, got {text!r}") from None
        if not (0 <= value if zero else 0 < value) or value == float("inf"):
            raise argparse.ArgumentTypeError(f"{option} must be a number {'>=' if zero else '>'} 0 (finite), "
                                             f"got {text}")
        return value
    return parse


def count(option: str, minimum: int):
    """An int option that must be at least ``minimum``."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{option} must be an integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{option} must be >= {minimum}, got {value}")
        return value
    return parse


def log_file(text: str) -> str:
    """A tuning log path that can be appended to: not a folder nor a device, in a folder
    that exists, writable (checked before anything is tuned, so that no measurement is
    lost), of a size we read."""
    folder = os.path.dirname(text) or "."
    if os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"--log-file {text!r} is a directory; give a file (a new one, or a tuning "
                                         "log to resume)")
    if os.path.exists(text):
        _bounded("--log-file", text, "tuning log", MAX_RECORDS_FILE_BYTES)
        if not is_tuning_log(text):
            raise argparse.ArgumentTypeError(f"--log-file {text!r} is not a tuning log (its first line is neither a "
                                             "record nor a '#' comment); autosched writes only to its own logs: "
                                             "give a new file")
    if not os.path.isdir(folder):
        raise argparse.ArgumentTypeError(f"--log-file {text!r}: the folder {folder!r} does not exist")
    if not os.access(text if os.path.exists(text) else folder, os.W_OK):
        raise argparse.ArgumentTypeError(f"--log-file {text!r} is not writable")
    return text


def workload_name(text: str) -> str:
    if text not in ops.suite_names():
        raise argparse.ArgumentTypeError(f"unknown workload {text!r}; `{PROG} list` prints the suite's names")
    return text


def workload_or_model(text: str) -> str:
    """A suite workload's name, or the path of an ONNX model file."""
    if text.endswith(".onnx"):
        return model_file(text)
    return workload_name(text)


def model_file(text: str) -> str:
    if not os.path.exists(text):
        raise argparse.ArgumentTypeError(f"no ONNX model file at {text!r}")
    return _bounded("the model", text, "ONNX model", MAX_MODEL_BYTES)


def _bounded(option: str, path: str, what: str, limit: int) -> str:
    """``path`` if it is a regular file of at most ``limit`` bytes (``files.checked_size``)."""
    try:
        checked_size(path, what, limit)
    except (UnreadableFile, OSError) as err:
        raise argparse.ArgumentTypeError(f"{option}: {err}") from None
    return path


def input_shape(text: str) -> tuple[str, tuple[int, ...]]:
    """``NAME=DIMS`` (``input_ids=1x128``): an ONNX model's input shape the model leaves open."""
    name, sep, dims = text.rpartition("=")
    try:
        shape = tuple(int(d) for d in dims.split("x"))
    except ValueError:
        shape = ()
    if not sep or not name or not shape or min(shape) < 1:
        raise argparse.ArgumentTypeError(f"--input-shape {text!r}: expected NAME=DIMS such as input=1x3x224x224")
    return name, shape


def shape_sets(pairs: list) -> list[dict]:
    """The sets of input shapes that ``--input-shape`` options give, in order: the k-th
    value of each name is in the k-th set (``x=1x8 --input-shape x=4x8``: two sets); a
    name given once is in every set. [] when none is given."""
    values: dict[str, list] = {}
    for name, shape in pairs:
        values.setdefault(name, []).append(shape)
    n = max((len(v) for v in values.values()), default=0)
    uneven = {k: len(v) for k, v in values.items() if len(v) not in (1, n)}
    if uneven:
        raise UsageError(f"--input-shape gives {n} shapes of some inputs and {uneven} of others: give each input "
                         f"once (for every set) or {n} times (one per set)")
    return [{k: v[min(i, len(v) - 1)] for k, v in values.items()} for i in range(n)]


def network_name(text: str) -> str:
    if ALIASES.get(text.lower(), text.lower()) not in NETWORKS:
        raise argparse.ArgumentTypeError(f"unknown network {text!r} (--network); expected one of "
                                         f"{', '.join(graph.network_names())}")
    return text


def dask_address(text: str) -> str:
    """A Dask scheduler's address: ``tcp://host:port`` (another protocol, or ``host:port``)."""
    if not re.fullmatch(r"([a-z][a-z0-9+.-]*://)?(\[[0-9A-Fa-f:.]+\]|[\w.\-]+)(:\d{1,5})?", text):
        raise argparse.ArgumentTypeError(f"--dask {text!r}: expected a Dask scheduler address such as "
                                         "tcp://host:8786")
    return text


def _add_seed(parser) -> None:
    parser.add_argument("--seed", type=count("--seed", 0), default=0, help="random seed (default 0)")


def existing_file(option: str, what: str, limit: int):
    """A regular file of at most ``limit`` bytes that exists."""
    def parse(text: str) -> str:
        if not os.path.exists(text):
            raise argparse.ArgumentTypeError(f"{option}: no file at {text!r}")
        return _bounded(option, text, what, limit)
    return parse


def tuning_log(text: str) -> str:
    """An existing tuning log (read only)."""
    if not os.path.exists(text):
        raise argparse.ArgumentTypeError(f"no tuning log at {text!r}")
    _bounded("LOG", text, "tuning log", MAX_RECORDS_FILE_BYTES)
    if not is_tuning_log(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a tuning log (its first line is neither a record nor "
                                         "a '#' comment)")
    return text


def records_db_file(text: str) -> str:
    """The records database's path: a file (made with its folder at the first write)."""
    if os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"--records-db {text!r} is a directory; give a file path")
    if os.path.exists(text):
        _bounded("--records-db", text, "records database", MAX_RECORDS_FILE_BYTES)
    return text


def _add_base_model(parser) -> None:
    group = parser.add_mutually_exclusive_group()
    # the defaults are set on the parser: argparse would check a string default as a file
    parser.set_defaults(base_model="default")
    group.add_argument("--base-model", type=existing_file("--base-model", "base cost model", MAX_BASE_MODEL_BYTES), default=argparse.SUPPRESS, metavar="FILE",
                       help=f"the base cost model (default: ${BASE_MODEL_ENV}, else the one shipped for the target's "
                            f"vector width; "
                            f"`{PROG} pretrain` makes one)")
    group.add_argument("--no-base-model", dest="base_model", action="store_const", const=None,
                       default=argparse.SUPPRESS,
                       help="no base cost model: random programs until the model has learnt, naive or default "
                            "schedules for untuned tasks")


def _add_history(parser) -> None:
    """The base model's and the records database's options of the commands that tune or
    find zero-trial programs."""
    _add_base_model(parser)
    group = parser.add_mutually_exclusive_group()
    parser.set_defaults(records_db="default")
    group.add_argument("--records-db", type=records_db_file, default=argparse.SUPPRESS, metavar="FILE",
                       help=f"the local records database every tuning appends to and learns from, and where "
                            f"zero-trial programs are remembered (default: "
                            f"${RECORDS_DB_ENV}, else ~/.cache/autosched/records.jsonl)")
    group.add_argument("--no-records-db", dest="records_db", action="store_const", const=None,
                       default=argparse.SUPPRESS,
                       help="neither read nor write the records database")


# list, build, sketches ---------------------------------------------------------------------

def add_list(sub) -> None:
    sub.add_parser("list", help="list the benchmark suite's workloads and the operators").set_defaults(fn=cmd_list)


def cmd_list(args) -> int:
    for name in ops.suite_names():
        print(name)
    print(f"\noperators: {', '.join(sorted(ops.OPERATORS))}")
    return 0


def add_build(sub) -> None:
    build = sub.add_parser("build", help="compile a workload's naive program, verify it, time it beside numpy")
    build.add_argument("workload", type=workload_name, help="a suite name such as GMM-1x512x512x512 "
                                                            f"(see `{PROG} list`)")
    _add_seed(build)
    _add_target(build, "build and run it")
    build.set_defaults(fn=cmd_build)


def cmd_build(args) -> int:
    """Compile a workload's naive program, verify it against numpy, time it beside numpy."""
    args.target.backend.require_device(args.target)
    w = ops.suite_workload(args.workload)
    dag = ir.ComputeDAG(w.tensors)
    print(f"# {args.workload}: {w.flops / 1e9:.3f} GFLOP, workload key {dag.workload_key()}\n{dag}\n")
    state = dag.init_state()
    print(f"# program\n{state}\n")
    t0 = time.perf_counter()
    kernel = ir.build(dag, state, target=args.target)
    print(f"# built in {1e3 * (time.perf_counter() - t0):.1f} ms")
    inputs = w.random_inputs(np.random.default_rng(args.seed))
    outputs = w.output_buffers()
    kernel(*inputs, *outputs)
    expected = w.reference(inputs)
    for got, want, t in zip(outputs, expected, dag.outputs):
        err = float(np.max(np.abs(got.astype(np.float64) - want))) if got.size else 0.0
        scale = float(np.max(np.abs(want))) or 1.0
        ok = np.allclose(got, want, rtol=1e-3, atol=1e-4 * scale)
        print(f"# output '{t.name}' vs numpy reference: max abs error {err:.3g} -> {'OK' if ok else 'WRONG'}")
        if not ok:
            return 1
    ours = kernel.time(*inputs, *outputs, number=1, repeat=3, min_repeat_ms=50).median
    ref = _best_seconds(lambda: w.reference(inputs))
    print(f"# naive kernel: {1e3 * ours:.3f} ms ({w.flops / ours / 1e9:.2f} GFLOPS); "
          f"numpy reference: {1e3 * ref:.3f} ms ({w.flops / ref / 1e9:.2f} GFLOPS)")
    return 0


def add_sketches(sub) -> None:
    sketches = sub.add_parser("sketches", help="print a workload's sketches and a few sampled programs")
    sketches.add_argument("workload", type=workload_name, help="a suite name such as C2D-1x56x56x64x64-k1s1p0")
    sketches.add_argument("--samples", type=count("--samples", 0), default=3,
                          help="random programs to print (default 3)")
    _add_seed(sketches)
    _add_target(sketches, "the sketch rules")
    sketches.set_defaults(fn=cmd_sketches)


def cmd_sketches(args) -> int:
    """Print a workload's sketches and a few sampled programs."""
    from .space import generate_sketches
    w = ops.suite_workload(args.workload)
    print(f"# {args.workload}\n{ir.ComputeDAG(w.tensors)}\n")
    generate_sketches(ir.ComputeDAG(w.tensors), samples=args.samples, seed=args.seed, target=args.target)
    return 0


# tune ------------------------------------------------------------------------------------------

#: options of ``tune --network`` only (None when not given), with their defaults
NETWORK_OPTIONS = {"batch_size": 1, "strategy": "gradient", "objective": "latency", "early_stopping_per_task": None}


def _seconds(minutes: float | None) -> float | None:
    return None if minutes is None else 60.0 * minutes


def tune_options(args, measurement: dict) -> TuneOptions:
    """The options of every tuning ``tune`` runs (a workload's, a network's, a model's),
    built once from the command line and ``measurement``'s builder and runner."""
    retime = {} if args.retime_best is None else {"retime_best": args.retime_best}
    return TuneOptions(trials=args.trials, measure_batch=args.batch, log_file=args.log_file, seed=args.seed,
                       early_stopping=args.early_stopping, time_budget_s=_seconds(args.minutes),
                       base_model=args.base_model, records_db=args.records_db, **retime, **measurement)


def add_tune(sub) -> None:
    tune = sub.add_parser("tune", help="tune a workload, a network (--network) or an ONNX model (model.onnx)")
    tune.add_argument("workload", nargs="?", type=workload_or_model, default=None,
                      help=f"a suite name such as GMM-1x512x512x512 (see `{PROG} list`), or a .onnx file")
    tune.add_argument("--trials", type=count("--trials", 0), default=None,
                      help=f"programs to measure in this run (default {DEFAULT_TRIALS}; with --minutes, as many "
                           "as the minutes allow)")
    tune.add_argument("--batch", type=count("--batch", 1), default=64,
                      help="programs measured per search round (default 64); not the network's batch size, "
                           "which is --batch-size")
    tune.add_argument("--log-file", type=log_file, default=None,
                      help="JSON-lines tuning log: appended to, and resumed from")
    tune.add_argument("--early-stopping", type=count("--early-stopping", 1), default=None,
                      help="stop after N trials without improvement")
    tune.add_argument("--minutes", type=positive_number("--minutes"), default=None,
                      help="stop within about M minutes of tuning (no round starts that would end after them), "
                           "whatever --trials allows")
    tune.add_argument("--retime-best", type=count("--retime-best", 0), default=None, metavar="K",
                      help="at the end, re-time the K fastest programs of each task in turns and keep the "
                           "fastest (default 4; 0: keep the fastest single trial)")
    _add_seed(tune)
    _add_history(tune)
    _add_target(tune, "tune a workload, a network or an ONNX model")
    tune.add_argument("--input-shape", type=input_shape, action="append", default=[], metavar="NAME=DIMS",
                      help="an ONNX model's input shape where the model leaves it open, e.g. input_ids=1x128; "
                           "give a name again to tune several sets of shapes in one run (input_ids=1x128 "
                           "--input-shape input_ids=1x256: one log serves both)")
    tune.add_argument("--dask", metavar="ADDRESS", type=dask_address, default=None,
                      help="measure on a Dask cluster (its scheduler's address, e.g. tcp://host:8786): builds on "
                           "any worker, runs on the workers started with --resources runner=1")
    net = tune.add_argument_group("networks")
    net.add_argument("--network", type=network_name, default=None,
                     help=f"tune a whole network instead: {', '.join(graph.network_names())}")
    net.add_argument("--batch-size", type=count("--batch-size", 1), default=None,
                     help="the network's batch size, the N of its input tensors (default 1)")
    net.add_argument("--strategy", choices=["gradient", "round-robin"], default=None,
                     help="task scheduling (default: Ansor's gradient scheduler)")
    net.add_argument("--objective", choices=["latency", "early_stopping"], default=None,
                     help="task scheduler objective (default: the network's latency)")
    net.add_argument("--early-stopping-per-task", type=count("--early-stopping-per-task", 1), default=None,
                     help="retire a task after N trials without improvement")
    _add_winograd(net)
    tune.set_defaults(fn=cmd_tune)


def _add_winograd(parser) -> None:
    parser.add_argument("--no-winograd", dest="winograd", action="store_false",
                        help="networks and models: compute 3x3 stride-1 convolutions directly, not by Winograd's "
                             "algorithm (a log tuned one way does not fit the other's tasks)")


@contextlib.contextmanager
def measurement(address: str | None):
    """The ``builder``/``runner`` arguments of the tuning functions: local measurement
    (none given), or Dask's on the cluster at ``address`` (connected for the block)."""
    if address is None:
        yield {}
        return
    from .measure.dask import DaskBuilder, DaskRunner, connect
    try:
        client, _ = connect(address)
    except ImportError as err:
        raise UsageError(f"--dask: {err}") from None
    except (OSError, TimeoutError, ValueError) as err:
        raise UsageError(f"--dask {address}: cannot connect to a Dask scheduler there ({err})") from None
    try:
        yield {"builder": DaskBuilder(client), "runner": DaskRunner(client)}
    finally:
        client.close()


def cmd_tune(args) -> int:
    """``autosched tune``: a workload, a network or an ONNX model, measured here or on a
    Dask cluster (``--dask``)."""
    if args.trials is None:
        args.trials = DEFAULT_TRIALS if args.minutes is None else TRIALS_WITHIN_MINUTES
    check_tune_arguments(args)   # (a mistake is said before any cluster is connected to)
    with measurement(args.dask) as measured_by:
        args.options = tune_options(args, measured_by)
        return _tune(args)


def check_tune_arguments(args) -> None:
    """The usage errors of ``tune`` that its arguments alone show; a network's unset options
    get their defaults."""
    if args.base_model not in (None, "default") and not args.target.backend.base_model:
        raise UsageError(f"--base-model does not apply to --target {args.target}: the base model knows CPU programs "
                         "only")
    given = [f"--{k.replace('_', '-')}" for k in NETWORK_OPTIONS if getattr(args, k) is not None]
    if args.network is not None:
        if args.workload is not None:
            raise UsageError(f"tune takes a workload or --network, not both (got {args.workload!r} and "
                             f"--network {args.network})")
        for key, default in NETWORK_OPTIONS.items():
            if getattr(args, key) is None:
                setattr(args, key, default)
        return
    if args.workload is None:
        raise UsageError(f"tune needs a workload (see `{PROG} list`) or --network NAME")
    if not args.winograd and not args.workload.endswith(".onnx"):
        given.append("--no-winograd")
    if given:
        raise UsageError(f"{', '.join(given)} {'applies' if len(given) == 1 else 'apply'} only to --network")
    if args.workload.endswith(".onnx"):   # (its path was checked when parsed)
        args.shape_sets = shape_sets(args.input_shape)
        return
    if args.input_shape:
        raise UsageError("--input-shape applies only to an ONNX model")
    ops.suite_workload(args.workload)   # an unknown name is a ValueError naming the known ones


def _tune(args) -> int:
    """Tune a workload, a network or an ONNX model (``check_tune_arguments`` passed); for a
    workload, print the winner's loop nest and its speed beside numpy."""
    if args.dask is None and args.trials > 0:  # (before anything is built: this machine must run the programs)
        args.target.backend.require_device(args.target)
    if args.network is not None:
        return cmd_tune_network(args)
    if args.workload.endswith(".onnx"):
        return cmd_tune_model(args)
    from .tune import auto_schedule
    w = ops.suite_workload(args.workload)
    dag = ir.ComputeDAG(w.tensors)
    print(f"# tuning {args.workload} ({w.flops / 1e9:.3f} GFLOP) for {args.trials} trials", flush=True)
    result = auto_schedule(ir.SearchTask(dag, target=args.target, desc=args.workload), args.options)
    if result.kernel is None:
        return _error(f"no valid program of {args.workload} was found ({result.trials} trials in this run"
                      f"{', none valid in ' + args.log_file if args.log_file else ''})", SYSTEM_ERROR)
    if not args.target.backend.host_memory:  # a device's kernel: checked and timed on the device
        return _report_device(args.workload, w, result, args.seed)
    inputs = w.random_inputs(np.random.default_rng(args.seed))
    outputs = w.output_buffers()
    args_in = [result.kernel.pack(t.name, a) if t.name in result.kernel.layouts else a
               for t, a in zip(dag.inputs, inputs)]
    result.kernel(*args_in, *outputs)
    ok = all(np.allclose(o, e, rtol=1e-3, atol=1e-3) for o, e in zip(outputs, w.reference(inputs)))
    ours = result.kernel.time(*args_in, *outputs, number=1, repeat=5, min_repeat_ms=50).median
    routine = ops.numpy_routine(w, inputs)
    ref = _best_seconds(routine or (lambda: w.reference(inputs)))
    what = "numpy float32" if routine is not None else "numpy float64 reference"
    print(f"# best program\n{result.state}\n")
    print(f"# {args.workload}: {w.flops / ours / 1e9:.2f} GFLOPS ({1e3 * ours:.3f} ms), "
          f"{what} {w.flops / ref / 1e9:.2f} GFLOPS ({1e3 * ref:.3f} ms): {ref / ours:.2f}x numpy; "
          f"verified against numpy: {'OK' if ok else 'WRONG'}")
    print(f"# tuning time: search {result.time_search:.1f} s, measurement {result.time_measure:.1f} s")
    return 0 if ok else 1


def _report_device(name: str, w, result, seed: int) -> int:
    """The tuned program of a device (a GPU): checked against numpy and timed on the device."""
    inputs = w.random_inputs(np.random.default_rng(seed))
    outputs = w.output_buffers()
    result.kernel(*inputs, *outputs)
    ok = all(np.allclose(o, e, rtol=1e-3, atol=1e-3) for o, e in zip(outputs, w.reference(inputs)))
    ours = result.kernel.time(*inputs, *outputs, number=1, repeat=5, min_repeat_ms=50).median
    print(f"# best program\n{result.state}\n")
    print(f"# {name} on {result.task.target}: {w.flops / ours / 1e9:.2f} GFLOPS ({1e3 * ours:.4f} ms); "
          f"verified against numpy: {'OK' if ok else 'WRONG'}")
    print(f"# tuning time: search {result.time_search:.1f} s, measurement {result.time_measure:.1f} s")
    return 0 if ok else 1


def cmd_tune_network(args) -> int:
    """``autosched tune --network NAME``: partition, tune, then run the whole network from
    its tuned kernels, check it against numpy and print its end-to-end latency."""
    net = graph.get_network(args.network, batch=args.batch_size, seed=args.seed)
    part = networks.as_partitioned(net, winograd=args.winograd)
    print(f"# {net.summary()}\n# {part.summary()}", flush=True)
    result = networks.tune_networks(part, args.options, strategy=args.strategy, objective=args.objective,
                                    early_stopping_per_task=args.early_stopping_per_task, target=args.target)
    executor = result.executor(0, base_model=args.base_model)
    ok, err = executor.verify()
    latency = executor.benchmark(repeat=5)["median"]
    est = result.estimated_latencies()[part.name]
    print(f"# {part.name}: end-to-end {1e3 * latency:.3f} ms ({len(executor.untuned)} of {len(part.tasks)} tasks "
          f"untuned); estimated from the tasks {1e3 * est:.3f} ms; verified against numpy: "
          f"{'OK' if ok else 'WRONG'} (max relative error {err:.2e})")
    if not ok:
        print("# the network's output does not match the numpy reference", file=sys.stderr)
    return 0 if ok else 1


# models from ONNX files -------------------------------------------------------------------

def _from_onnx(path: str, shapes: dict):
    """``graph.from_onnx(path, shapes)``. A model we cannot read or convert is a one-line
    error that names the file (exit code 2: it is about the file given, even where the
    importer's own check is what failed; ``--debug`` shows where)."""
    try:
        return graph.from_onnx(path, shapes)
    except ImportError as err:
        raise UsageError(str(err)) from err
    except Exception as err:  # noqa: BLE001 - onnx's, protobuf's and the importer's errors alike
        why = _explain(err)[0] if _is_about_the_input(err) else f"{type(err).__name__}: {str(err)[:300]}"
        raise UsageError(f"cannot import the ONNX model {path!r}: {why}") from err   # (--debug shows both)


def _import_model(path: str, shapes):
    """The model at ``path`` as a graph, its open axes fixed by ``shapes``."""
    model = _from_onnx(path, dict(shapes))
    if isinstance(model, graph.DynamicModel):
        raise UsageError(f"the model's inputs {model.describe_open_axes()} have no static shape; give them with "
                         "--input-shape NAME=DIMS")
    return model


def _import_models(path: str, sets: list[dict]) -> list:
    """The model at ``path`` as one graph per set of input shapes (``shape_sets``; one graph
    for none), each named by its shapes when there are several."""
    if len(sets) <= 1:
        return [_import_model(path, sets[0] if sets else {})]
    model = _from_onnx(path, {})
    if not isinstance(model, graph.DynamicModel):
        raise UsageError(f"--input-shape gives {len(sets)} sets of shapes, but {path!r} has no open axes: its "
                         "shapes are fixed")
    return [model.graph(shapes) for shapes in sets]


def _compare_with_baselines(path, shapes, executor, inputs, ours) -> bool:
    """Check ``ours`` against onnxruntime (the numpy reference without it) and print the
    latency of the model beside onnxruntime and PyTorch, all timed now."""
    threads = os.cpu_count() or 1
    latency = executor.benchmark(*inputs, repeat=10, min_repeat_ms=100)["median"]
    lines = [f"# autosched: {1e3 * latency:.3f} ms end to end"]
    try:
        ort_run = B.onnxruntime_runner(path, threads)
    except Exception as why:  # noqa: BLE001 - not installed, or its kernels lack an operator or type (bfloat16)
        ok, err = executor.verify(*inputs)
        reason = "onnxruntime not installed" if isinstance(why, ImportError) else \
            f"onnxruntime cannot run this model ({str(why).strip()[:120]})"
        lines.append(f"# {reason}; checked against the numpy reference: {'OK' if ok else 'WRONG'} "
                     f"(max relative error {err:.2e})")
    else:
        want = ort_run(*inputs)
        err = max(float(np.max(np.abs(g.astype(np.float64) - w))) / (float(np.max(np.abs(w))) or 1.0)
                  for g, w in zip(ours, want))
        ok = err <= (1e-2 if any(w.dtype == np.float16 for w in want) else 1e-3)   # a float16 model: its precision
        t = B.seconds_per_call(lambda: ort_run(*inputs), repeat=10)
        lines.append(f"# onnxruntime {threads} threads: {1e3 * t:.3f} ms -> autosched {t / latency:.2f}x; outputs "
                     f"match onnxruntime's: {'OK' if ok else 'WRONG'} (max relative error {err:.2e})")
    try:
        torch_run = B.torch_runner(path, dict(shapes), threads)
    except ImportError:
        lines.append("# PyTorch not installed: no comparison")
    except B.Unsupported as err:
        lines.append(f"# PyTorch: cannot run this model ({err})")
    else:
        t = B.seconds_per_call(lambda: torch_run(*inputs), repeat=10)
        lines.append(f"# PyTorch {threads} threads (TorchScript): {1e3 * t:.3f} ms -> autosched {t / latency:.2f}x")
    print("\n".join(lines))
    return ok


def cmd_tune_model(args) -> int:
    """``autosched tune model.onnx``: import the model (once per set of input shapes), tune
    every task of all of them together, then run the tuned model of each set, check it and
    time it beside onnxruntime and PyTorch."""
    sets = args.shape_sets or [{}]
    models = _import_models(args.workload, sets)
    parts = [graph.partition(model, winograd=args.winograd) for model in models]
    for model, part in zip(models, parts):
        print(f"# {model.summary()}\n# {part.summary()}", flush=True)
    result = networks.tune_networks(parts if len(parts) > 1 else parts[0], args.options, target=args.target)
    estimates = result.estimated_latencies()
    ok = True
    for i, (model, part, shapes) in enumerate(zip(models, parts, sets)):
        executor = result.executor(i, warn_untuned=False, base_model=args.base_model)
        estimate = estimates[part.name]
        estimate = f"{1e3 * estimate:.3f} ms" if estimate < 1e9 else "- (a task has no valid program yet)"
        shown = f" ({graph.dynamic.shape_text(shapes)})" if len(sets) > 1 else ""
        print(f"# tuned {result.trials} trials; {len(executor.untuned)} of {len(part.tasks)} tasks untuned{shown}; "
              f"estimated from the tasks {estimate}")
        inputs = model.random_inputs(args.seed)
        ok &= _compare_with_baselines(args.workload, shapes.items(), executor, inputs, executor.run(*inputs))
    return 0 if ok else 1


def add_run(sub) -> None:
    run = sub.add_parser("run", help="run an ONNX model with its tuned programs (from a tuning log), or a "
                                     "compiled artifact (`autosched compile`)")
    run.add_argument("model", type=model_or_artifact, help="the .onnx file, or an artifact (model.aso)")
    run.add_argument("--log-file", default=None,
                     help="the tuning log of `autosched tune model.onnx --log-file` (read, never written); "
                          "required for an .onnx model, not for an artifact")
    run.add_argument("--input", action="append", default=[], type=existing_file("--input", ".npy input", MAX_INPUT_BYTES),
                     help=".npy file of an input (one per input, in order)")
    run.add_argument("--output", default=None, type=output_file,
                     help="write the output to this .npy file (a .npz file for a model of several outputs)")
    run.add_argument("--input-shape", type=input_shape, action="append", default=[], metavar="NAME=DIMS",
                     help="an input shape the model leaves open, e.g. input_ids=1x128")
    run.add_argument("--verify", action="store_true", help="check against onnxruntime and time both and PyTorch")
    run.add_argument("--num-threads", type=count("--num-threads", 1), default=None,
                     help="an artifact's OpenMP threads (default: one per core)")
    _add_winograd(run)
    _add_seed(run)
    _add_history(run)
    _add_target(run, "run the kernels tuned")
    run.set_defaults(fn=cmd_run)


def _check_run_log(path: str, model: str) -> None:
    """``run``'s tuning log (read, never written): a tuning log that exists."""
    if not os.path.exists(path):
        raise UsageError(f"no tuning log at {path!r}; make one with `{PROG} tune {model} --log-file {path}`")
    try:
        tuning_log(path)
    except argparse.ArgumentTypeError as err:
        raise UsageError(f"--log-file: {err}") from None


def output_file(text: str) -> str:
    """Where ``run`` writes the outputs: a file path (the extension is checked against the
    model's outputs once it is read: ``.npy`` for one, ``.npz`` for several)."""
    folder = os.path.dirname(text) or "."
    if not text.endswith((".npy", ".npz")):
        raise argparse.ArgumentTypeError(f"--output {text!r}: expected a .npy file (a model of one output) or a .npz "
                                         "file (several outputs)")
    if not os.path.isdir(folder):
        raise argparse.ArgumentTypeError(f"--output {text!r}: the folder {folder!r} does not exist")
    if os.path.exists(text) and not os.path.isfile(text):
        raise argparse.ArgumentTypeError(f"--output {text!r} is not a regular file")
    return text


def _load_input(path: str, spec) -> np.ndarray:
    """The ``.npy`` file at ``path`` as the model input ``spec`` (its shape and dtype checked
    from the header, before the data is read; never unpickled)."""
    try:
        header = np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError, EOFError) as err:
        raise UsageError(f"--input {path!r} is not a .npy array file ({str(err)[:200]})") from None
    shape, dtype = tuple(spec.shape), np.dtype(spec.dtype)
    if not isinstance(header, np.ndarray) or tuple(header.shape) != shape or header.dtype != dtype:
        raise UsageError(f"--input {path!r} holds a {getattr(header, 'dtype', '?')} array of shape "
                         f"{list(getattr(header, 'shape', ()))}; the model's input '{spec.name}' is {dtype} "
                         f"{list(shape)}")
    return np.array(header)


def _check_output(path: str | None, n_outputs: int) -> None:
    """``--output`` must be a .npy file for a model of one output, a .npz file for several."""
    want = ".npy" if n_outputs == 1 else ".npz"
    if path and not path.endswith(want):
        raise UsageError(f"--output {path!r}: the model has {n_outputs} output(s), which go to a {want} file")


def _write_outputs(path: str, names: list[str], outputs) -> None:
    """Write exactly ``path`` (file objects: numpy adds no extension): one output as that
    .npy, several as that .npz."""
    with open(path, "wb") as f:
        if len(outputs) == 1:
            np.save(f, outputs[0], allow_pickle=False)
        else:   # (a model may list an output twice: each gets its array)
            keys = [name if names.index(name) == i else f"{name}_{i}" for i, name in enumerate(names)]
            np.savez(f, **dict(zip(keys, outputs)))


def model_or_artifact(text: str) -> str:
    """``run``'s model: an .onnx file or an artifact of ``compile`` (regular, bounded)."""
    if not os.path.exists(text):
        raise argparse.ArgumentTypeError(f"no model file at {text!r} (an .onnx file, or an artifact of "
                                         f"`{PROG} compile`)")
    return _bounded("the model", text, "model", MAX_MODEL_BYTES)


def _read_inputs(paths: list[str], specs, random_inputs) -> list[np.ndarray]:
    """The arrays of the ``--input`` files (one per input of ``specs``, in order, each checked
    against its input), else ``random_inputs()``."""
    if not paths:
        return random_inputs()
    if len(paths) != len(specs):
        raise UsageError(f"the model takes {len(specs)} inputs ({', '.join(s.name for s in specs)}), got "
                         f"{len(paths)} --input files")
    return [_load_input(f, spec) for f, spec in zip(paths, specs)]


def _report_outputs(path: str | None, names: list[str], outputs) -> None:
    for name, out in zip(names, outputs):
        print(f"# output '{name}': shape {out.shape}, mean {float(out.mean()):.6g}")
    if path:
        _write_outputs(path, names, outputs)
        print(f"# written to {path}")


def cmd_run(args) -> int:
    """``autosched run model.onnx --log-file F``: run a model with its tuned programs;
    ``autosched run model.aso``: run a compiled artifact."""
    if not args.model.endswith(".onnx"):
        return _run_artifact(args)
    if args.log_file is None:
        raise UsageError(f"running an .onnx model needs --log-file (the log of `{PROG} tune {args.model} "
                         f"--log-file F`), or compile it first with `{PROG} compile`")
    _check_run_log(args.log_file, args.model)
    model = _import_model(args.model, args.input_shape)
    args.target.backend.require_device(args.target)
    _check_output(args.output, len(model.outputs))
    executor = graph.GraphExecutor(graph.partition(model, winograd=args.winograd), log_file=args.log_file,
                                   base_model=args.base_model, target=args.target, records_db=args.records_db)
    inputs = _read_inputs(args.input, model.inputs, lambda: model.random_inputs(args.seed))
    if not args.input:
        print(f"# no --input: random inputs (seed {args.seed})")
    try:
        outputs = executor.run(*inputs)
    except ValueError as err:
        raise UsageError(str(err)) from None
    _report_outputs(args.output, [n.name for n in model.outputs], outputs)
    latency = executor.benchmark(*inputs, repeat=5, min_repeat_ms=50)["median"]
    print(f"# {1e3 * latency:.3f} ms end to end ({len(executor.untuned)} of {len(executor.partitioned.tasks)} "
          "tasks untuned)")
    if args.verify:
        return 0 if _compare_with_baselines(args.model, args.input_shape, executor, inputs, outputs) else 1
    return 0


def _run_artifact(args) -> int:
    """``autosched run model.aso``: load a compiled artifact with the runtime and run it."""
    from .runtime import ArtifactError, Model
    if args.log_file or args.input_shape or args.verify:
        raise UsageError(f"{args.model!r} is a compiled artifact: its programs and shapes are in it "
                         "(--log-file, --input-shape and --verify are for .onnx models)")
    t0 = time.perf_counter()
    try:
        model = Model(args.model, num_threads=args.num_threads)
    except ArtifactError as err:
        raise UsageError(str(err)) from None
    load = time.perf_counter() - t0

    def random_inputs():
        rng = np.random.default_rng(args.seed)
        print(f"# no --input: random inputs (seed {args.seed})")
        return [rng.standard_normal(i.shape).astype(i.dtype) if i.dtype.kind == "f"
                else rng.integers(0, 2, size=i.shape).astype(i.dtype) for i in model.inputs]

    _check_output(args.output, len(model.outputs))
    inputs = _read_inputs(args.input, model.inputs, random_inputs)
    try:
        outputs = model.run(inputs)
    except (TypeError, ValueError) as err:
        raise UsageError(str(err)) from None
    _report_outputs(args.output, [o.name for o in model.outputs], outputs)
    latency = _best_seconds(lambda: model.run(inputs), min_time=0.2)
    print(f"# loaded in {1e3 * load:.1f} ms; {1e3 * latency:.3f} ms end to end")
    return 0


# compile ---------------------------------------------------------------------------------------

def add_compile(sub) -> None:
    comp = sub.add_parser("compile", help="compile an ONNX model with its tuned programs into one artifact "
                                          "(a shared library, the weights, a manifest) for autosched.runtime or C")
    comp.add_argument("model", type=model_file, help="the .onnx file")
    comp.add_argument("--log-file", type=tuning_log, default=None,
                      help="the tuning log (read, never written); without one every task runs its zero-trial "
                           "program")
    comp.add_argument("-o", "--output", default=None, help="the artifact to write (default: MODEL.aso beside it)")
    comp.add_argument("--input-shape", type=input_shape, action="append", default=[], metavar="NAME=DIMS",
                      help="an input shape the model leaves open, e.g. input_ids=1x128")
    _add_winograd(comp)
    _add_history(comp)
    comp.set_defaults(fn=cmd_compile)


def _check_artifact_output(output: str, inputs: list) -> None:
    """``compile -o``: a new file, or an artifact to replace; never the model, its log, or a
    file of anything else (we did not write it)."""
    from .runtime import ArtifactError
    from .runtime.artifact import read_sections
    if not os.path.exists(output):
        return
    if any(path and os.path.exists(path) and os.path.samefile(output, path) for path in inputs):
        raise UsageError(f"-o {output!r} is the model or the tuning log compile reads; give the artifact another name")
    try:
        read_sections(output)
    except (ArtifactError, OSError):
        raise UsageError(f"-o {output!r} exists and is not an autosched artifact: not replaced; give another "
                         "name, or remove it first") from None


def cmd_compile(args) -> int:
    from .deploy import LinkError, NoCCompiler, compile as compile_model
    from .runtime import read_manifest
    output = args.output or os.path.splitext(args.model)[0] + ".aso"
    if not os.path.isdir(os.path.dirname(os.path.abspath(output))):
        raise UsageError(f"-o {output!r}: the folder {os.path.dirname(output)!r} does not exist")
    _check_artifact_output(output, [args.model, args.log_file])
    t0 = time.perf_counter()
    try:
        compile_model(args.model, log_file=args.log_file, output=output, input_shapes=dict(args.input_shape),
                      base_model=args.base_model, winograd=args.winograd, records_db=args.records_db)
    except (graph.UnsupportedModelError, ValueError) as err:
        raise UsageError(str(err)) from None
    except (NoCCompiler, LinkError) as err:   # the machine's toolchain: one line (the linker's first)
        print(f"{PROG}: error: {str(err).splitlines()[0]}" + "".join(f" {line}" for line in str(err).splitlines()[1:2]),
              file=sys.stderr)
        return SYSTEM_ERROR
    manifest = read_manifest(output)
    tasks = [t for t in manifest["tasks"] if t["task"]]
    kinds = {k: sum(t["program"] == k for t in tasks) for k in ("tuned", "zero-trial", "default schedule")}
    untuned = ", ".join(f"{n} {k}" for k, n in kinds.items() if n and k != "tuned")
    print(f"# {output}: {os.path.getsize(output) / 2**20:.2f} MiB ({manifest['library']['kernels']} kernels, "
          f"{manifest['weights']['bytes'] / 2**20:.2f} MiB of weights) in {time.perf_counter() - t0:.1f} s; "
          f"{kinds['tuned']} of {len(tasks)} tasks tuned{f' ({untuned})' if untuned else ''}; "
          f"for {manifest['cpu']['name']}")
    return 0


# pretrain ---------------------------------------------------------------------------------------

def model_output(text: str) -> str:
    if not text.endswith(".json"):
        raise argparse.ArgumentTypeError(f"-o {text!r}: the model file must end in .json (XGBoost's JSON format, "
                                         "which autosched checks before reading it back)")
    return _writable(text, "model file")


def library_output(text: str) -> str:
    if not text.endswith(".json"):
        raise argparse.ArgumentTypeError(f"-o {text!r}: the program library must end in .json")
    return _writable(text, "program library")


def _writable(text: str, what: str) -> str:
    """``text``, the path of a regular file (``what``) that can be written in a folder that exists."""
    folder = os.path.dirname(text) or "."
    if not os.path.isdir(folder):
        raise argparse.ArgumentTypeError(f"-o {text!r}: the folder {folder!r} does not exist")
    if os.path.isdir(text) or (os.path.exists(text) and not os.path.isfile(text)):
        raise argparse.ArgumentTypeError(f"-o {text!r} is not a regular file; give the path of the {what} to write")
    if not os.access(folder, os.W_OK) or (os.path.exists(text) and not os.access(text, os.W_OK)):
        raise argparse.ArgumentTypeError(f"-o {text!r} cannot be written (no permission in {folder!r})")
    return text


def _add_logs(parser, output, what: str) -> None:
    """The logs a command learns from, and the file it writes (``output`` checks it)."""
    parser.add_argument("logs", nargs="+", type=tuning_log, metavar="LOG",
                        help="tuning logs (or the records database); records whose workload cannot be rebuilt "
                             "from its key are skipped")
    parser.add_argument("-o", "--output", required=True, type=output, help=f"{what} to write (.json)")


def _read_logs(paths) -> list:
    """The records of the logs ``paths``; the lines that are not records told of in one line."""
    with warnings.catch_warnings(record=True) as caught:   # one line for all, not one per line
        warnings.simplefilter("always")
        records = [r for path in paths for r in read_records(path)]
    if caught:
        print(f"# skipped {len(caught)} line(s) that are not records, e.g. {str(caught[0].message)[:160]}",
              file=sys.stderr)
    return records


def add_pretrain(sub) -> None:
    pre = sub.add_parser("pretrain", help="train a base cost model from tuning logs (what --base-model takes)")
    _add_logs(pre, model_output, "the model file")
    pre.add_argument("--rounds", type=count("--rounds", 1), default=BASE_MODEL_ROUNDS,
                     help=f"at most this many trees (default {BASE_MODEL_ROUNDS})")
    pre.add_argument("--top-weight", type=positive_number("--top-weight", zero=True),
                     default=BASE_MODEL_TOP_WEIGHT,
                     help="weight the ranking towards the order of the fast programs: a pair of programs counts "
                          "by the faster one's throughput (over the workload's best) to this power "
                          f"(default {BASE_MODEL_TOP_WEIGHT:g}: every pair alike)")
    pre.add_argument("--members", type=count("--members", 1), default=1,
                     help="train this many models, each on a bootstrap resample of the programs, into one file "
                          "that ranks by their mean: steadier picks on workloads unlike the logs' "
                          "(default 1: one model)")
    pre.add_argument("--start", type=existing_file("--start", "base cost model", MAX_BASE_MODEL_BYTES), metavar="FILE",
                     help="continue this base model's trees instead of starting anew (each member its own; "
                          "--rounds more at most): a model of one CPU adapted to another by that CPU's logs")
    _add_seed(pre)
    pre.set_defaults(fn=cmd_pretrain)


def cmd_pretrain(args) -> int:
    """``autosched pretrain LOG... -o model.json``: train a base cost model on the records."""
    records = _read_logs(args.logs)
    if args.members > MAX_MEMBERS:
        raise UsageError(f"--members {args.members}: a base model holds at most {MAX_MEMBERS} members")
    if args.start and args.members != 1:
        raise UsageError(f"--members {args.members} with --start: the continued model keeps the members of "
                         f"{args.start}")
    t0 = time.perf_counter()
    try:
        start = load_base_model(args.start) if args.start else None
        model, info = pretrain(records, seed=args.seed, rounds=args.rounds, top_weight=args.top_weight,
                               members=args.members, start=start)
    except ValueError as err:
        raise UsageError(str(err)) from None
    model.save(args.output)
    skipped = "".join(f"; skipped {n} ({why})" for why, n in info["skipped"].items())
    trees = " + ".join(str(m.rounds) for m in getattr(model, "members", [model]))
    print(f"# {args.output}: {trees} trees trained on {info['programs']} programs of {info['workloads']} "
          f"workload(s) from {len(args.logs)} log(s){skipped}; {time.perf_counter() - t0:.0f} s\n"
          f"# use it: {PROG} tune ... --base-model {args.output}  (or {BASE_MODEL_ENV}={args.output})")
    return 0


def add_library(sub) -> None:
    lib = sub.add_parser("library", help="keep the fastest measured programs of tuning logs' workloads: a program "
                                         "library, whose programs similar tasks' zero-trial programs are ranked against")
    _add_logs(lib, library_output, "the library file")
    lib.add_argument("--per-workload", type=count("--per-workload", 1), default=LIBRARY_PER_WORKLOAD,
                     help=f"the fastest distinct programs kept of each workload (default {LIBRARY_PER_WORKLOAD})")
    lib.add_argument("--lanes", type=count("--lanes", 1), default=None,
                     help="only programs measured on CPUs of this many float32 vector lanes (8: AVX2, 16: AVX-512; "
                          "default: any)")
    lib.set_defaults(fn=cmd_library)


def cmd_library(args) -> int:
    """``autosched library LOG... -o library.json``: the fastest programs of the logs' workloads."""
    records = _read_logs(args.logs)
    library, info = build_library(records, args.per_workload, args.lanes)
    if not info["workloads"]:
        lanes = "" if args.lanes is None else f" on CPUs of {args.lanes} vector lanes"
        raise UsageError(f"no valid measurement{lanes} of a workload autosched can rebuild among "
                         f"{len(records)} record(s) of {len(args.logs)} log(s)")
    save_library(library, args.output)
    skipped = "".join(f"; skipped {n} ({why})" for why, n in info["skipped"].items())
    print(f"# {args.output}: {info['programs']} programs of {info['workloads']} workload(s) from "
          f"{info['records']} valid measurement(s){skipped}\n"
          f"# use it: {LIBRARY_ENV}={args.output} {PROG} run ...  (the zero-trial programs of similar tasks)")
    return 0


def _best_seconds(fn, min_time: float = 0.2) -> float:
    fn()
    runs, start = [], time.perf_counter()
    while time.perf_counter() - start < min_time or len(runs) < 3:
        t0 = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - t0)
    return min(runs)


# interrupted runs -------------------------------------------------------------------------------

def count_trials(path: str | None) -> int:
    """Complete lines of a tuning log that hold trials (not comments, nor the re-timings a
    tuning ends with: ``"retimed":true``, as ``TuningRecord.to_json`` writes it, nor lines
    of another kind: ``records.KIND``), 0 if there is none."""
    if not path or not os.path.isfile(path):
        return 0
    with open(path, encoding="utf-8", errors="replace") as f:
        return sum(1 for line in f if line.endswith("\n") and line.strip() and not line.lstrip().startswith("#")
                   and '"retimed":true' not in line and f'"{KIND}":' not in line)


def resume_command(argv: list[str], trials: int) -> str:
    """``argv`` as a shell command that runs the remaining ``trials``."""
    words, skip = [], False
    for word in argv:
        if skip:
            skip = False
        elif word == "--trials":
            skip = True
        elif not word.startswith("--trials="):
            words.append(word)
    script = os.path.basename(sys.argv[0])
    prog = [sys.executable, "-m", "autosched"] if script in ("__main__.py", "-m") else [PROG]
    return shlex.join(prog + words + ["--trials", str(trials)])


def report_interrupt(args, argv: list[str], trials_before: int) -> None:
    """What Ctrl-C leaves behind: the records saved, and how to go on from them."""
    path = getattr(args, "log_file", None)
    if not hasattr(args, "trials"):
        print(f"{PROG}: interrupted", file=sys.stderr)
        return
    if not path:
        print(f"{PROG}: interrupted; nothing was saved (no --log-file); give --log-file FILE to make a run "
              "resumable", file=sys.stderr)
        return
    total = count_trials(path)
    saved = max(total - trials_before, 0)
    print(f"{PROG}: interrupted; {saved} new trials saved in {path} ({total} in all)\n"
          f"resume with: {resume_command(argv, max(args.trials - saved, 0))}", file=sys.stderr)


def report_lost_cluster(args, argv: list[str], trials_before: int, err: Exception) -> None:
    """What a lost Dask cluster leaves behind: the programs saved, and how to go on."""
    path = getattr(args, "log_file", None)
    if not path:
        print(f"{PROG}: error: {err}; the Dask cluster is gone and nothing was saved (no --log-file)", file=sys.stderr)
        return
    total = count_trials(path)
    saved = max(total - trials_before, 0)
    print(f"{PROG}: error: {err}; the Dask cluster is gone: {saved} new programs were saved in {path} ({total} in "
          f"all); resume with: {resume_command(argv, max(args.trials - saved, 0))}", file=sys.stderr)


# entry point ----------------------------------------------------------------------------------

def make_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, description="A template-free auto-scheduler for tensor programs.")
    parser.add_argument("--debug", action="store_true", default=False,
                        help=f"show the traceback of an error (also: {DEBUG_ENV}=1)")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for add in (add_list, add_build, add_tune, add_run, add_compile, add_sketches, add_pretrain, add_library):
        add(sub)
    for command in sub.choices.values():   # (also after the subcommand: `autosched tune ... --debug`)
        command.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    return parser


#: the environment variable that shows tracebacks (as ``--debug``), and the values that do not
DEBUG_ENV, OFF_VALUES = "AUTOSCHED_DEBUG", ("", "0", "off", "no", "false")


def _debugging(args) -> bool:
    return bool(getattr(args, "debug", False)) or os.environ.get(DEBUG_ENV, "").strip().lower() not in OFF_VALUES


def _error(message: str, code: int) -> int:
    print(f"{PROG}: error: {' '.join(str(message).split())}", file=sys.stderr)
    return code


def main(argv=None) -> int:
    """Run one subcommand. Every error is one line, ``autosched: error: ...``: exit code 2
    for what the user gave (a bad value, a file that is not what it should be), 1 for the
    machine's (a full disk, no GPU) and for our own bugs, which also say how to see the
    traceback (``--debug``, or ``AUTOSCHED_DEBUG=1``: then the traceback is shown)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = make_parser().parse_args(argv)
    trials_before = count_trials(args.log_file) if args.fn is cmd_tune else 0   # (only tune resumes)
    try:
        return args.fn(args)
    except KeyboardInterrupt:
        report_interrupt(args, argv, trials_before)
        return INTERRUPTED
    except BrokenPipeError:   # (`autosched list | head`: the reader has what it wanted)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except MeasurementLost as err:
        if _debugging(args):
            raise
        report_lost_cluster(args, argv, trials_before, err)
        return SYSTEM_ERROR
    except Exception as err:  # noqa: BLE001 - one line for every error, the traceback on request
        if _debugging(args):
            raise
        return _error(*_explain(err))


#: what onnx and protobuf raise for a file that is not a valid model (their types vary by version)
ONNX_FILE_ERRORS = ("DecodeError", "ValidationError", "InferenceError")


def _is_about_the_input(err: Exception) -> bool:
    """Whether ``err`` says what is wrong with what the user gave (see ``_explain``)."""
    return isinstance(err, (UsageError, ValueError, MemoryError, RecursionError)) or \
        type(err).__name__ in ONNX_FILE_ERRORS


def _explain(err: Exception) -> tuple[str, int]:
    """The one line that reports ``err`` and the exit code."""
    if isinstance(err, (UsageError, ValueError)):   # (NotATuningLog, UnreadableFile, UnsupportedModelError...)
        return str(err), USAGE_ERROR
    if isinstance(err, MemoryError):
        return (f"out of memory ({str(err)[:200] or 'MemoryError'}): the model or workload needs more memory than "
                "this machine has"), USAGE_ERROR
    if isinstance(err, RecursionError):
        return f"the input is nested too deeply to process ({err})", USAGE_ERROR
    if isinstance(err, (OSError, ir.NoCudaDevice)):   # the machine's, not ours: a full disk, no GPU
        return str(err), SYSTEM_ERROR
    if type(err).__name__ in ONNX_FILE_ERRORS:
        return f"not a valid ONNX model ({type(err).__name__}: {str(err)[:300]})", USAGE_ERROR
    return (f"internal error, {type(err).__name__}: {str(err)[:300]} (a bug of autosched: run with --debug for the "
            "traceback, and report it)"), SYSTEM_ERROR


if __name__ == "__main__":
    sys.exit(main())
