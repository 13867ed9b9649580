"""Fuzzing the files autosched reads that a user may have received: tuning logs, the records
database, base cost models and ONNX models. Valid files are mutated (bit flips, truncation,
field deletion and insertion, huge values, type swaps, duplicated and reordered lines and
nodes, dangling names) and fed to the command line (``cli.main``, as ``python -m autosched``
runs it) and to the Python API, each case in a child process forked for it under a memory
limit (``RLIMIT_AS``) and a time limit. ONNX results are compared with onnxruntime's on the
same inputs (computed in a child of their own).

    python bench/fuzz_inputs.py --seconds 300
    python bench/fuzz_inputs.py --smoke            # one case of each surface, a few seconds each

Prints per surface: cases, clear errors (one line ``autosched: error:``, or on the API an
error of the documented kinds), correct results, tracebacks (any other error, or the CLI's
"internal error"), crashes (the child killed by a signal), hangs (over the time limit),
memory-limit hits, silent mismatches (a result that differs from onnxruntime's or numpy's),
and models accepted that onnxruntime refuses. The goal is 0 in every column but the first
three (and the last, which is not necessarily wrong). The last line is one JSON object:
{"surfaces": {name: {column: count}}, "examples": {name: [case, outcome, detail]...}, ...}.

Children are forked from this process, which imports autosched once and never runs a
kernel, XGBoost or onnxruntime itself (none of them is fork-safe once started).
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import json
import os
import random
import resource
import signal
import sys
import tempfile
import time
import traceback
import warnings

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import ir  # noqa: E402
from ir.cpu.runtime import host_cpu  # noqa: E402
from autosched import cli, ops  # noqa: E402
from autosched.history.records import TuningRecord  # noqa: E402

COLUMNS = ("cases", "clear_error", "correct", "traceback", "crash", "hang", "memory_limit", "mismatch",
           "accepted_ort_refused")
#: the columns that must stay 0
BAD = ("traceback", "crash", "hang", "memory_limit", "mismatch")
MEMORY_LIMIT = 6 << 30
WORKLOAD = "GMM-1x128x128x128"


# running a case in a child -------------------------------------------------------------------

def in_child(fn, args: tuple, timeout: float) -> tuple[str, str]:
    """(outcome, detail) of ``fn(*args)`` in a forked child under the memory limit: what
    it returns, "traceback" for what it raises, "crash" when a signal ends it, "hang" past
    ``timeout`` seconds, "memory_limit" on ``MemoryError``."""
    with tempfile.TemporaryFile() as out:
        pid = os.fork()
        if pid == 0:   # the child: never returns
            code = 0
            try:
                resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
                os.setsid()
                warnings.simplefilter("ignore")
                result = fn(*args)
            except MemoryError as err:
                result = ("memory_limit", f"MemoryError: {err}")
            except BaseException:  # noqa: BLE001 - the point is to see it
                result = ("traceback", traceback.format_exc()[-1500:])
            try:
                out.write(json.dumps(list(result)).encode())
                out.flush()
            except BaseException:  # noqa: BLE001
                code = 3
            os._exit(code)
        deadline = time.monotonic() + timeout
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                return "hang", f"over {timeout:g} s"
            time.sleep(0.02)
        if os.WIFSIGNALED(status):
            return "crash", f"killed by signal {os.WTERMSIG(status)}"
        out.seek(0)
        data = out.read()
    try:
        outcome, detail = json.loads(data)
    except ValueError:
        return "crash", f"the child exited with status {os.WEXITSTATUS(status)} and no result"
    return outcome, detail


def cli_case(argv: list[str], check=None) -> tuple[str, str]:
    """Run the command line in this (child) process, its output in a file: a clear error
    is one ``autosched: error:`` line (not an internal error); ``check(stdout)`` judges a
    success (None: correct)."""
    with tempfile.TemporaryFile() as out:
        os.dup2(out.fileno(), 1)
        os.dup2(out.fileno(), 2)
        try:
            code = cli.main(argv)
        except SystemExit as exit_:
            code = exit_.code
        sys.stdout.flush()
        sys.stderr.flush()
        out.seek(0)
        text = out.read().decode(errors="replace")
    lines = [line for line in text.splitlines() if line.startswith("autosched: error:")]
    if code == 0:
        return ("correct", "") if check is None else check(text)
    if "Traceback" in text or not lines:
        return "traceback", text[-1500:]
    if "internal error" in lines[-1]:
        return "traceback", lines[-1]
    if "out of memory" in lines[-1]:
        return "memory_limit", lines[-1]
    return "clear_error", lines[-1][:300]


#: what the Python API raises for a file it refuses (anything else is a traceback)
API_ERRORS = (ValueError, OSError)


def api_case(fn, *args) -> tuple[str, str]:
    try:
        return fn(*args)
    except MemoryError as err:
        return "memory_limit", f"MemoryError: {err}"
    except API_ERRORS as err:
        return "clear_error", f"{type(err).__name__}: {str(err)[:300]}"
    except Exception as err:  # noqa: BLE001
        if type(err).__name__ in ("DecodeError", "ValidationError", "InferenceError"):   # protobuf's, onnx's
            return "clear_error", f"{type(err).__name__}: {str(err)[:300]}"
        return "traceback", traceback.format_exc()[-1500:]


# mutations ---------------------------------------------------------------------------------------

HUGE = (10 ** 9, -10 ** 9, 2 ** 63, 10 ** 40, 1e308, float("inf"), -1, 0)
SWAPS = (None, True, "x", "", [], {}, [1, 2], {"a": 1}, 3, 2.5)


def _paths(obj, prefix=()):
    """Every path to a value inside a JSON-like object."""
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _paths(v, prefix + (i,))


def _get(obj, path):
    for p in path:
        obj = obj[p]
    return obj


def mutate_json(obj, rng: random.Random):
    """One structural mutation of a JSON value: a field deleted or inserted, a value made
    huge or of another type, a list entry duplicated or the list reordered."""
    obj = copy.deepcopy(obj)
    paths = [p for p in _paths(obj) if p]
    if not paths:
        return rng.choice(SWAPS)
    path = rng.choice(paths)
    parent, key = _get(obj, path[:-1]), path[-1]
    kind = rng.choice(("delete", "insert", "huge", "swap", "duplicate", "reorder"))
    value = parent[key]
    if kind == "delete":
        del parent[key]
    elif kind == "insert" and isinstance(parent, dict):
        parent[f"field_{rng.randrange(100)}"] = rng.choice(SWAPS)
    elif kind == "insert":
        parent.insert(key, rng.choice(SWAPS))
    elif kind == "huge" or (isinstance(value, (int, float)) and not isinstance(value, bool) and rng.random() < 0.5):
        parent[key] = rng.choice(HUGE)
    elif kind == "duplicate" and isinstance(value, list) and value:
        value.extend(value[:rng.randrange(1, len(value) + 1)] * rng.choice((1, 10, 1000)))
    elif kind == "reorder" and isinstance(value, list):
        rng.shuffle(value)
    else:
        parent[key] = rng.choice(SWAPS)
    return obj


def mutate_bytes(data: bytes, rng: random.Random) -> bytes:
    """Bit flips or a truncation of raw bytes."""
    if not data or rng.random() < 0.4:
        return data[:rng.randrange(len(data) + 1)]
    data = bytearray(data)
    for _ in range(rng.choice((1, 2, 8, 64))):
        i = rng.randrange(len(data))
        data[i] ^= 1 << rng.randrange(8)
    return bytes(data)


def mutate_lines(text: str, rng: random.Random) -> str:
    """A JSON-lines file mutated: bytes, one record's structure, lines duplicated,
    reordered or inserted (a junk line, a newer version's line)."""
    lines = text.splitlines(keepends=True)
    kind = rng.choice(("bytes", "record", "record", "record", "duplicate", "reorder", "junk", "version"))
    if kind == "bytes":
        return mutate_bytes(text.encode(), rng).decode("utf-8", errors="replace")
    i = rng.randrange(len(lines))
    if kind == "record":
        try:
            lines[i] = json.dumps(mutate_json(json.loads(lines[i]), rng)) + "\n"
        except ValueError:
            pass
    elif kind == "duplicate":
        lines[i:i] = lines[i:i + rng.randrange(1, 4)] * rng.choice((1, 5))
    elif kind == "reorder":
        rng.shuffle(lines)
    elif kind == "junk":
        lines.insert(i, rng.choice(("garbage\n", "{}\n", "[1, 2]\n", "null\n", "{\"v\":1\n", "\x00\x01\n")))
    else:
        rec = json.loads(lines[i]) if lines[i].startswith("{") else {}
        lines.insert(i, json.dumps({**rec, "v": 2, "new_field": [1]}) + "\n")
    return "".join(lines)


# seeds -----------------------------------------------------------------------------------------

def seed_log(folder: str) -> str:
    """A valid tuning log of ``WORKLOAD``: programs the search samples (not measured: their
    costs are made up, which is all replay needs)."""
    from evolution import SearchParams, SketchPolicy, RandomModel
    w = ops.suite_workload(WORKLOAD)
    task = ir.SearchTask(ir.ComputeDAG(w.tensors), desc=WORKLOAD)
    policy = SketchPolicy(task, RandomModel(seed=0), SearchParams(population=16, init_min_population=8, islands=1),
                          seed=0)
    states = policy.sample_initial()[:6]
    from autosched import MeasureInput, MeasureResult
    records = [TuningRecord.from_measure(MeasureInput(task, s), MeasureResult((1e-4 * (i + 1),), timestamp=1.0 + i))
               for i, s in enumerate(states)]
    path = os.path.join(folder, "seed_log.json")
    with open(path, "w") as f:
        f.writelines(r.to_json() + "\n" for r in records)
    return path


def seed_models(folder: str) -> list[str]:
    """Small valid ONNX models: a dense layer, a convolution, a softmax over a matmul."""
    import onnx
    from onnx import TensorProto as T, helper as h, numpy_helper as nh
    rng = np.random.default_rng(0)

    def const(name, *shape):
        return nh.from_array(rng.standard_normal(shape).astype(np.float32), name)

    def info(name, *shape):
        return h.make_tensor_value_info(name, T.FLOAT, list(shape))

    graphs = {
        "dense": h.make_graph([h.make_node("MatMul", ["x", "w"], ["m"]), h.make_node("Add", ["m", "b"], ["a"]),
                               h.make_node("Relu", ["a"], ["y"])], "dense", [info("x", 1, 8)], [info("y", 1, 16)],
                              [const("w", 8, 16), const("b", 16)]),
        "conv": h.make_graph([h.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
                              h.make_node("Relu", ["c"], ["r"]), h.make_node("GlobalAveragePool", ["r"], ["p"]),
                              h.make_node("Flatten", ["p"], ["y"])], "conv", [info("x", 1, 3, 6, 6)],
                             [info("y", 1, 4)], [const("w", 4, 3, 3, 3)]),
        "softmax": h.make_graph([h.make_node("MatMul", ["x", "w"], ["m"]), h.make_node("Softmax", ["m"], ["y"]),
                                 h.make_node("Sigmoid", ["m"], ["z"])], "softmax", [info("x", 2, 8)],
                                [info("y", 2, 8), info("z", 2, 8)], [const("w", 8, 8)]),
    }
    paths = []
    for name, graph in graphs.items():
        path = os.path.join(folder, f"seed_{name}.onnx")
        onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]), path)
        paths.append(path)
    return paths


def mutate_model(data: bytes, rng: random.Random) -> bytes:
    """An ONNX model mutated: raw bytes, or its graph: a node duplicated, deleted or moved,
    nodes reordered, an attribute deleted, inserted or made huge, a name dangling or
    repeated, an initializer's or an input's shape or type changed."""
    import onnx
    kind = rng.choice(("bytes", "duplicate", "delete", "reorder", "attribute", "huge", "name", "initializer",
                       "input", "output"))
    if kind == "bytes":
        return mutate_bytes(data, rng)
    model = onnx.load_from_string(data)
    g = model.graph
    nodes = list(g.node)
    node = rng.choice(nodes)
    if kind == "duplicate":
        g.node.insert(rng.randrange(len(nodes) + 1), copy.deepcopy(node))
    elif kind == "delete":
        g.node.remove(node)
    elif kind == "reorder":
        rng.shuffle(nodes)
        del g.node[:]
        g.node.extend(nodes)
    elif kind == "attribute":
        if node.attribute and rng.random() < 0.5:
            node.attribute.remove(rng.choice(list(node.attribute)))
        else:
            node.attribute.append(onnx.helper.make_attribute(rng.choice(("axis", "pads", "strides", "foo")),
                                                             rng.choice((1, -5, [1, 2], 2.5, "x"))))
    elif kind == "huge":
        for a in node.attribute:
            if a.ints:
                a.ints[rng.randrange(len(a.ints))] = rng.choice((10 ** 9, -10 ** 9, 0))
            elif a.type == onnx.AttributeProto.INT:
                a.i = rng.choice((10 ** 9, -10 ** 9))
        if not node.attribute:
            node.attribute.append(onnx.helper.make_attribute("axis", 10 ** 9))
    elif kind == "name":
        names = [n for x in nodes for n in list(x.input) + list(x.output)]
        which = node.input if node.input and rng.random() < 0.6 else node.output
        which[rng.randrange(len(which))] = rng.choice(names + ["nowhere"])
    elif kind == "initializer" and g.initializer:
        init = rng.choice(list(g.initializer))
        if rng.random() < 0.5 and init.dims:
            init.dims[rng.randrange(len(init.dims))] = rng.choice((0, 1, 3, 10 ** 6))
        else:
            init.data_type = rng.choice((onnx.TensorProto.INT64, onnx.TensorProto.DOUBLE, onnx.TensorProto.INT32,
                                         onnx.TensorProto.BOOL))
    elif kind == "input":
        dims = g.input[0].type.tensor_type.shape.dim
        if dims and rng.random() < 0.6:
            dims[rng.randrange(len(dims))].dim_value = rng.choice((0, 2, 7, 10 ** 6))
        else:
            g.input[0].type.tensor_type.elem_type = rng.choice((onnx.TensorProto.INT64, onnx.TensorProto.DOUBLE))
    else:
        out = g.output[rng.randrange(len(g.output))]
        if rng.random() < 0.5:
            g.output.append(copy.deepcopy(out))
        else:
            out.name = "dangling"
    return model.SerializeToString()


# the surfaces -------------------------------------------------------------------------------------

def _check_tune_output(text: str) -> tuple[str, str]:
    if "verified against numpy: OK" in text:
        return "correct", ""
    return "mismatch", text[-500:]


def log_cli(path: str, folder: str):
    return cli_case(["tune", WORKLOAD, "--trials", "0", "--log-file", path, "--no-records-db", "--no-base-model",
                     "--retime-best", "0"], _check_tune_output)


def db_cli(path: str, folder: str):
    return cli_case(["tune", WORKLOAD, "--trials", "0", "--records-db", path, "--no-base-model", "--retime-best", "0"],
                    _check_tune_output)


def base_model_cli(path: str, folder: str):
    """``autosched run`` of a model without records: its programs are the base model's
    zero-trial picks (``tune --trials 0`` would only load it)."""
    model = os.path.join(os.path.dirname(folder), "seed_dense.onnx")
    if not os.path.exists(model):
        return cli_case(["tune", WORKLOAD, "--trials", "0", "--base-model", path, "--no-records-db",
                         "--log-file", os.path.join(os.path.dirname(folder), "seed_log.json"), "--retime-best", "0"],
                        _check_tune_output)
    return cli_case(["run", model, "--log-file", os.path.join(folder, "empty_log.json"), "--base-model", path,
                     "--verify"], lambda text: ("correct", "") if "match onnxruntime's: OK" in text
                    else ("mismatch", text[-500:]))


def _built_correctly(kernel, w, dag) -> tuple[str, str]:
    inputs = w.random_inputs(np.random.default_rng(0))
    args = [kernel.pack(t.name, a) if t.name in kernel.layouts else a for t, a in zip(dag.inputs, inputs)]
    outputs = w.output_buffers()
    kernel(*args, *outputs)
    ok = all(np.allclose(o, e, rtol=1e-3, atol=1e-3) for o, e in zip(outputs, w.reference(inputs)))
    return ("correct", "") if ok else ("mismatch", "the built program differs from numpy's reference")


def log_api(path: str, folder: str):
    """``apply_history_best`` of the log, and the program it builds checked against numpy."""
    from autosched import apply_history_best

    def go():
        w = ops.suite_workload(WORKLOAD)
        dag = ir.ComputeDAG(w.tensors)
        with apply_history_best(path, target="any", base_model=None):
            kernel = ir.build(dag)
        return _built_correctly(kernel, w, dag)
    return api_case(go)


def db_api(path: str, folder: str):
    """What a tuning reads from the database: its records, and the model it starts from."""
    from autosched.history.database import RecordsDB, prior_knowledge

    def go():
        task = ir.SearchTask(ir.ComputeDAG(ops.suite_workload(WORKLOAD).tensors), desc=WORKLOAD)
        db = RecordsDB(path)
        own, _ = prior_knowledge(db, [task])
        for rec in own:
            try:
                rec.state(task.dag)
            except ir.InvalidStep:
                pass
        return "correct", f"{len(own)} records"
    return api_case(go)


def base_model_api(path: str, folder: str):
    """The base model loaded and ranking a few programs: finite scores, or a clear refusal."""
    from autosched.history.base_model import load_base_model
    from evolution import SearchParams, SketchPolicy

    def go():
        model = load_base_model(path)
        task = ir.SearchTask(ir.ComputeDAG(ops.suite_workload(WORKLOAD).tensors))
        states = SketchPolicy(task, model, SearchParams(population=8, init_min_population=4, islands=1),
                              seed=0).sample_initial()[:4]
        scores = np.asarray(model.predict(task, states))
        return ("correct", "") if np.all(np.isfinite(scores)) else ("mismatch", f"scores {scores}")
    return api_case(go)


def ort_reference(path: str, folder: str):
    """onnxruntime's outputs of the model at ``path`` on random inputs (saved beside it), or
    its refusal."""
    import onnxruntime as ort
    try:
        session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        rng = np.random.default_rng(0)
        feeds = {}
        for i in session.get_inputs():
            shape = [d if isinstance(d, int) and d > 0 else 1 for d in i.shape]
            dtype = {"tensor(float)": np.float32, "tensor(double)": np.float64, "tensor(int64)": np.int64,
                     "tensor(int32)": np.int32, "tensor(bool)": np.bool_}.get(i.type, np.float32)
            feeds[i.name] = (rng.standard_normal(shape) if np.issubdtype(dtype, np.floating)
                             else rng.integers(0, 2, shape)).astype(dtype)
        outputs = session.run(None, feeds)
    except Exception as err:  # noqa: BLE001 - a refusal is an answer
        return "refused", f"{type(err).__name__}: {str(err)[:200]}"
    np.savez(os.path.join(folder, "ort.npz"), **{f"in{i}": v for i, v in enumerate(feeds.values())},
             **{f"out{i}": v for i, v in enumerate(outputs)})
    return "ok", f"{len(feeds)} inputs, {len(outputs)} outputs"


def _compare(got: list, folder: str, ort_ok: bool) -> tuple[str, str]:
    if not ort_ok:
        return "accepted_ort_refused", "a result where onnxruntime refuses the model"
    ref = np.load(os.path.join(folder, "ort.npz"))
    want = [ref[k] for k in sorted((k for k in ref.files if k.startswith("out")), key=lambda k: int(k[3:]))]
    if len(got) != len(want):
        return "mismatch", f"{len(got)} outputs, onnxruntime {len(want)}"
    for g, w in zip(got, want):
        g = np.asarray(g)
        if g.shape != w.shape:
            return "mismatch", f"an output of shape {g.shape}, onnxruntime's {w.shape}"
        scale = float(np.max(np.abs(w))) if w.size else 1.0
        if not np.allclose(g.astype(np.float64), w.astype(np.float64), rtol=1e-3, atol=1e-4 * (scale or 1.0),
                           equal_nan=True):
            return "mismatch", f"max abs difference {float(np.max(np.abs(g - w))):.3g} from onnxruntime's"
    return "correct", ""


def _ort_inputs(folder: str, ort_ok: bool) -> list:
    if not ort_ok:
        return []
    ref = np.load(os.path.join(folder, "ort.npz"))
    return [ref[k] for k in sorted((k for k in ref.files if k.startswith("in")), key=lambda k: int(k[2:]))]


def onnx_api(path: str, folder: str, ort_ok: bool):
    """``from_onnx``, partition, run (untuned: default schedules), against onnxruntime."""
    from autosched import graph

    def go():
        model = graph.from_onnx(path)
        executor = graph.GraphExecutor(graph.partition(model), base_model=None, warn_untuned=False)
        inputs = _ort_inputs(folder, ort_ok) or model.random_inputs(0)
        return _compare(executor.run(*inputs), folder, ort_ok)
    return api_case(go)


def onnx_cli(path: str, folder: str, ort_ok: bool):
    """``autosched run model.onnx --input ... --output ...``, the written outputs against
    onnxruntime's."""
    log = os.path.join(folder, "empty_log.json")
    argv = ["run", path, "--log-file", log, "--no-base-model"]
    for i, x in enumerate(_ort_inputs(folder, ort_ok)):
        np.save(os.path.join(folder, f"in{i}.npy"), x)
        argv += ["--input", os.path.join(folder, f"in{i}.npy")]
    if not ort_ok:   # (how many outputs to write is not known)
        return cli_case(argv, lambda text: ("accepted_ort_refused", "a result where onnxruntime refuses the model"))
    n_out = len([k for k in np.load(os.path.join(folder, "ort.npz")).files if k.startswith("out")])
    out = os.path.join(folder, "out.npy" if n_out == 1 else "out.npz")

    def check(text):
        if not os.path.exists(out):
            return "mismatch", f"no output written at {out}"
        got = np.load(out)
        return _compare([got] if n_out == 1 else [got[k] for k in got.files], folder, ort_ok)
    return cli_case(argv + ["--output", out], check)


# the run --------------------------------------------------------------------------------------

def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=300.0, help="fuzz for about this long (default 300)")
    parser.add_argument("--smoke", action="store_true", help="one case of each surface")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--case-timeout", type=float, default=60.0, help="a case's time limit in seconds")
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    folder = tempfile.mkdtemp(prefix="autosched-fuzz-")
    log_text = open(seed_log(folder)).read()
    from autosched.history.base_model import SHIPPED_MODEL
    model_text = open(SHIPPED_MODEL).read()
    try:
        models = [open(p, "rb").read() for p in seed_models(folder)]
    except ImportError:
        models = []   # (no onnx: the ONNX surfaces are skipped)
    surfaces = {"log/cli": log_cli, "log/api": log_api, "records-db/cli": db_cli, "records-db/api": db_api,
                "base-model/cli": base_model_cli, "base-model/api": base_model_api}
    if models:
        surfaces.update({"onnx/cli": onnx_cli, "onnx/api": onnx_api})
    table = {name: dict.fromkeys(COLUMNS, 0) for name in surfaces}
    examples: dict[str, list] = {}
    start, n = time.monotonic(), 0
    while True:
        name = list(surfaces)[n % len(surfaces)]
        if (args.smoke and n >= len(surfaces)) or (not args.smoke and time.monotonic() - start > args.seconds):
            break
        n += 1
        kind = name.split("/")[0]
        case_dir = tempfile.mkdtemp(dir=folder)
        open(os.path.join(case_dir, "empty_log.json"), "w").close()
        path = os.path.join(case_dir, {"log": "log.json", "records-db": "db.jsonl", "base-model": "model.json",
                                       "onnx": "model.onnx"}[kind])
        extra = ()
        if kind == "onnx":
            data = mutate_model(rng.choice(models), rng)
            with open(path, "wb") as f:
                f.write(data)
            ort_outcome, _ = in_child(ort_reference, (path, case_dir), args.case_timeout)
            extra = (ort_outcome == "ok",)
        else:
            if kind == "base-model":
                text = json.dumps(mutate_json(json.loads(model_text), rng)) if rng.random() < 0.7 else \
                    mutate_bytes(model_text.encode(), rng).decode("utf-8", errors="replace")
            else:
                text = mutate_lines(log_text, rng)
            with open(path, "w") as f:
                f.write(text)
        outcome, detail = in_child(surfaces[name], (path, case_dir, *extra), args.case_timeout)
        row = table[name]
        row["cases"] += 1
        row[outcome] = row.get(outcome, 0) + 1
        if outcome in BAD or outcome == "accepted_ort_refused":
            examples.setdefault(name, []).append([n, outcome, detail[-600:]])
            if outcome in BAD:
                keep = os.path.join(folder, f"case{n}-{name.replace('/', '-')}{os.path.splitext(path)[1]}")
                os.replace(path, keep)
        print(f"[{time.monotonic() - start:6.1f} s] {name:15s} case {n}: {outcome}"
              f"{': ' + detail.splitlines()[-1][:120] if detail and outcome != 'correct' else ''}", flush=True)
    print(f"\n{'surface':16s}" + "".join(f"{c:>{len(c) + 2}s}" for c in COLUMNS))
    for name, row in table.items():
        print(f"{name:16s}" + "".join(f"{row[c]:{len(c) + 2}d}" for c in COLUMNS))
    bad = {c: sum(row[c] for row in table.values()) for c in BAD}
    print(f"\nfiles of failing cases kept in {folder}" if any(bad.values()) else "")
    print(json.dumps({"surfaces": table, "bad": bad, "examples": examples, "seconds": round(time.monotonic() - start),
                      "seed": args.seed, "cpu": host_cpu()[0], "folder": folder}))
    return 1 if any(bad.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
