"""Where the time of a real model goes: our zero-trial executor kernel by kernel, against
onnxruntime's per-node profile and OpenVINO's performance counters, by operator family.

    python bench/profile_model.py --model mobilenet_v3_large
    python bench/profile_model.py --model distilbert --probe-tasks 3 --probe-trials 32
    python bench/profile_model.py --model vit_b_16
    python bench/profile_model.py --model light_resnet50
    python bench/profile_model.py --smoke
    # the search niced outside the heavy lock, the timings under it:
    nice python bench/profile_model.py --model resnet50 --programs r50.json --search-only
    flock /tmp/autosched-heavy.lock python bench/profile_model.py --model resnet50 --programs r50.json
    # two branches' programs, A/B in one run: each branch's search, then the timings once
    PYTHONPATH=../main python bench/profile_model.py --model regnet_x_1_6gf --programs main.json --search-only
    python bench/profile_model.py --model regnet_x_1_6gf --programs ours.json --against main.json

The model is exported as users export it, as ``bench/model_coverage.py`` exports it: any
torchvision classifier (random weights, seeded) or one of the Hugging Face models of
``bench/torch_models.py`` (BERT, RoBERTa, DistilBERT, GPT-2, ViT; default config, sequence
128) through ``torch.onnx.export(..., opset_version=17, dynamo=False)`` at batch 1, or an ONNX
zoo architecture from the onnx wheel (``light_*``, random weights). It is imported with
``autosched.graph.from_onnx``, partitioned, and every task gets its zero-trial program (timed
per task; a cProfile of the searches that took longest says where the search time goes);
the rest of the kernels run default schedules. Printed, all from one run:

- every kernel call of our executor, timed alone with its own arguments: its family, where
  its program came from (zero-trial or default), its milliseconds (the fastest of its readings);
- per family: ours, onnxruntime's (``SessionOptions.enable_profiling``, the fastest reading
  per node over the profiled runs) and OpenVINO's (``PERF_COUNT``, likewise), and the milliseconds
  we lose to onnxruntime; a fused epilogue (bias, activation, residual add) counts with its
  anchor in every engine that fuses it;
- end to end, timed in turns (ours, onnxruntime 2 threads, OpenVINO 2 threads f32; our
  programs on one thread and on default schedules in turns of their own), and the
  executor's overhead: end to end against the sum of its kernels, and against that sum with
  each kernel's weights evicted from the caches before each call (a model whose weights
  exceed the last-level cache reads them from memory in a run: that part of the ratio is
  not the executor's); and each kernel timed inside a run (``in_run_ms``: the calls made in
  the run's order, a timestamp between them), its input as its producer left it and its
  weights where the other kernels' evicted them: the kernels that lose most there against
  their time alone are listed (ResNet-50's 1x1 convolution whose walk over image rows no
  prefetcher follows: 0.30 ms alone, 0.85 ms in a run);
- optionally (``--against OTHER.json``, another ``--programs`` file of the model, e.g. another
  branch's search) those programs timed in turns with these: end to end, and every kernel
  whose program differs (one process, one machine state: a fair A/B on a busy machine);
- optionally (``--probe-tasks``) the tasks that lose most (the slowest of the losing
  families, then of the others), each searched with a few dozen
  measured trials: a much faster measured program means the base model picked badly; none
  means the search space (or the default schedule) is what loses. Each probe also measures
  the 16 programs the base model ranks best after its zero-trial search (standalone, in
  turns): where its pick stands among them (``pick_place``, 1 the fastest) and the fastest
  of them. A pick far behind that fastest is a ranking the base model gets wrong; the 16
  no faster than the pick while the measured search finds better is the short zero-trial
  search not reaching it.

The last line is the bench JSON object (one row per family and one for the model).
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import cProfile
import ctypes
import json
import os
import pstats
import sys
import tempfile
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import Table, bench_args, emit_json, fastest_in_turns  # noqa: E402
import torch_models  # noqa: E402

import autosched  # noqa: E402
import ir  # noqa: E402
from ir.steps import steps_from_json, steps_to_json  # noqa: E402
from autosched import graph as G  # noqa: E402
from autosched.history.base_model import load_base_model  # noqa: E402
from autosched.history.program_library import load_program_library  # noqa: E402
from autosched.graph import onnx_baselines as B  # noqa: E402
from autosched.graph import onnx_zoo  # noqa: E402
from autosched.graph.executor import default_schedule  # noqa: E402
from autosched.history.zero_trial import CANDIDATES, ranked_programs, shared_in_family, zero_trial_program  # noqa: E402
from autosched.measure import ProgramMeasurer  # noqa: E402
from ir.cpu.runtime import can_evict, evict_from_caches, native_timer  # noqa: E402
from evolution import SearchParams  # noqa: E402

THREADS = 2
CACHE = os.path.join(os.path.dirname(os.path.abspath(__file__)), ".cache", "profile")
#: a few of the models (the help's examples)
EXAMPLE_MODELS = ("resnet50", "mobilenet_v3_large", "convnext_tiny", "vit_b_16")

# operator families: one vocabulary for the three engines ----------------------------------------------

SE = "squeeze-excitation"
LAYOUT = "layout transform"
MOVE = "data movement"
FAMILIES = ("conv 1x1", "conv 3x3", "conv kxk", "conv depthwise", "conv grouped", SE, "dense",
            "batch-matmul/attention", "layer norm", "softmax", "GELU", "hard-swish", "pooling", "global pooling",
            "elementwise", LAYOUT, MOVE, "other")


def conv_family(channels_in: int, groups: int, kernel: tuple, spatial_in: tuple) -> str:
    """The family of a convolution: a squeeze-excitation piece when it runs on one pixel
    (after a global pooling), depthwise, grouped, or dense by its kernel size."""
    if all(s == 1 for s in spatial_in):
        return SE
    if groups > 1:
        return "conv depthwise" if groups == channels_in else "conv grouped"
    if all(k == 1 for k in kernel):
        return "conv 1x1"
    return "conv 3x3" if all(k == 3 for k in kernel) else "conv kxk"


def matmul_family(b_shape: tuple, b_constant: bool) -> str:
    """A matrix product by a weight matrix is a dense layer; two activations multiplied
    (attention's QK^T and its product with V) are a batch-matmul."""
    return "dense" if b_constant or len(b_shape) == 2 else "batch-matmul/attention"


def _is_se_scale(shapes: list) -> bool:
    """A product of an image by one value per channel (the gate of a squeeze-excitation)."""
    four = [s for s in shapes if len(s) == 4]
    return len(four) == 2 and any(all(d == 1 for d in s[1:3]) or all(d == 1 for d in s[2:]) for s in four) \
        and any(not all(d == 1 for d in s[1:3]) and not all(d == 1 for d in s[2:]) for s in four)


_ELEMENTWISE_NAMES = {"gelu": "GELU", "gelu_tanh": "GELU", "erf": "GELU", "hard_swish": "hard-swish"}
_INJECTIVE = {"reshape", "concat", "strided_slice", "gather", "pad", "broadcast_to", "resize", "cast"}


def our_family(subgraph) -> str:
    """The family of one of our fused subgraphs: its anchor's, else its reduction's, else
    what its elementwise chain computes."""
    nodes = subgraph.nodes
    kinds = [n.kind for n in nodes]
    for n in nodes:
        if n.kind in ("conv", "conv2d_winograd", "depthwise_conv2d", "conv2d_transpose"):
            x, w = n.inputs[0], n.inputs[1]
            spatial, kernel = x.shape[1:-1], w.shape[:-2]     # channel-last data, HWIO weights
            if n.kind == "depthwise_conv2d":
                return SE if all(s == 1 for s in spatial) else "conv depthwise"
            if n.kind == "conv2d_winograd":
                return "conv 3x3"
            return conv_family(x.shape[-1], n.attrs.get("groups", 1), kernel, spatial)
        if n.kind == "dense":
            return "dense"
        if n.kind in ("matmul", "batch_matmul"):
            return matmul_family(n.inputs[1].shape, n.inputs[1].is_const)
    for n in nodes:
        if n.kind in ("softmax", "log_softmax"):
            return "softmax"
        if n.kind == "layer_norm":
            return "layer norm"
        if n.kind == "pool":
            return "pooling"
        if n.kind == "global_pool" or (n.kind == "reduce" and len(n.inputs[0].shape) == 4
                                       and sorted(n.attrs["axes"]) == [1, 2]):
            return "global pooling"
        if n.kind == "reduce":
            return "layer norm" if n.attrs["reducer"] == "mean" else "other"
    for kind in kinds:
        if kind in _ELEMENTWISE_NAMES:
            return _ELEMENTWISE_NAMES[kind]
    if "hard_sigmoid" in kinds or any(n.kind == "multiply" and _is_se_scale([p.shape for p in n.inputs])
                                      for n in nodes):
        return SE
    if set(kinds) == {"transpose"}:
        return LAYOUT
    if set(kinds) <= _INJECTIVE | {"transpose"}:
        return MOVE
    return "elementwise"


_ORT_FAMILIES = {"LayerNormalization": "layer norm", "SkipLayerNormalization": "layer norm",
                 "SimplifiedLayerNormalization": "layer norm", "Softmax": "softmax", "Gelu": "GELU",
                 "BiasGelu": "GELU", "FastGelu": "GELU", "Erf": "GELU", "HardSwish": "hard-swish",
                 "HardSigmoid": SE, "Attention": "batch-matmul/attention",
                 "MultiHeadAttention": "batch-matmul/attention", "MaxPool": "pooling", "AveragePool": "pooling",
                 "GlobalAveragePool": "global pooling", "GlobalMaxPool": "global pooling",
                 "ReorderInput": LAYOUT, "ReorderOutput": LAYOUT, "Transpose": LAYOUT}
_ORT_MOVES = {"Reshape", "Concat", "Slice", "Gather", "Split", "Expand", "Unsqueeze", "Squeeze", "Flatten", "Pad",
              "Shape", "Cast", "Identity", "Where", "ConstantOfShape", "Range"}


def ort_family(op: str, shapes: list) -> str:
    """The family of an onnxruntime node from its operator and its inputs' shapes
    (channel-first; NCHWc convolutions give their channels padded to the block)."""
    if op in ("Conv", "FusedConv") and len(shapes) >= 2 and len(shapes[1]) >= 3:
        x, w = shapes[0], shapes[1]
        groups = x[1] // w[1] if w[1] else 1
        if w[1] == 1 and w[0] == x[1]:      # NCHWc pads the channels of a depthwise filter too
            groups = x[1]
        return conv_family(x[1], groups, tuple(w[2:]), tuple(x[2:]))
    if op == "Gemm":
        return "dense"
    if op in ("MatMul", "FusedMatMul", "MatMulNBits") and len(shapes) >= 2:
        return matmul_family(shapes[1], False)
    if op in _ORT_FAMILIES:
        return _ORT_FAMILIES[op]
    if op == "ReduceMean":
        return "global pooling" if len(shapes[0]) == 4 else "layer norm"
    if op == "Mul" and _is_se_scale(shapes):
        return SE
    return MOVE if op in _ORT_MOVES else "elementwise"


_OV_FAMILIES = {"MVN": "layer norm", "Softmax": "softmax", "SoftMax": "softmax", "Gelu": "GELU",
                "HSwish": "hard-swish", "HSigmoid": SE, "HardSigmoid": SE, "Pooling": "pooling", "MaxPool": "pooling",
                "AvgPool": "pooling", "Reorder": LAYOUT, "Transpose": LAYOUT, "ScaledDotProductAttention":
                "batch-matmul/attention", "FullyConnected": "dense"}
_OV_MOVES = {"Reshape", "Concatenation", "Concat", "Gather", "Split", "StridedSlice", "Broadcast", "Squeeze",
             "Unsqueeze", "Pad", "ShapeOf", "Convert", "Select", "Range"}


def ov_family(node_type: str, shapes: list) -> str:
    """The family of an OpenVINO CPU-plugin node from its type and its inputs' shapes
    (a grouped convolution's filter is (groups, out/groups, in/groups, kh, kw))."""
    if node_type == "Convolution" and len(shapes) >= 2 and len(shapes[1]) == 4:
        return conv_family(shapes[0][1], 1, tuple(shapes[1][2:]), tuple(shapes[0][2:]))
    if node_type == "GroupConvolution" and len(shapes) >= 2 and len(shapes[1]) == 5:
        return conv_family(shapes[0][1], shapes[1][0], tuple(shapes[1][3:]), tuple(shapes[0][2:]))
    if node_type == "MatMul" and len(shapes) >= 2:
        return matmul_family(shapes[1], False)
    if node_type in _OV_FAMILIES:
        return _OV_FAMILIES[node_type]
    if node_type in ("ReduceMean", "Reduce"):
        return "global pooling" if shapes and len(shapes[0]) == 4 else "layer norm"
    if node_type in ("Multiply", "Eltwise", "Subgraph") and _is_se_scale(shapes):
        return SE
    return MOVE if node_type in _OV_MOVES else "elementwise"


# the models -----------------------------------------------------------------------------------------

def model_names() -> list[str]:
    """The models this bench exports: torchvision's classifiers and the transformers models of
    ``bench/torch_models.py`` (those of ``bench/model_coverage.py``), empty without torch."""
    try:
        return torch_models.torchvision_names() + list(torch_models.TRANSFORMERS)
    except ImportError:
        return []


def model_path(name: str, seed: int = 0) -> str:
    """The ONNX file of ``name`` (exported once into bench/.cache/profile, as
    ``bench/model_coverage.py`` exports it)."""
    path = os.path.join(CACHE, f"{name}_seed{seed}.onnx")
    if name.startswith("light_"):
        if not os.path.exists(path):
            import onnx
            os.makedirs(CACHE, exist_ok=True)
            onnx.save(onnx_zoo.with_random_weights(onnx_zoo.light_model(name[len("light_"):]), seed), path)
        return path
    if os.path.exists(path):
        return path
    if name not in model_names():
        raise ValueError(f"unknown model {name!r}; expected a torchvision classifier (e.g. "
                         f"{', '.join(EXAMPLE_MODELS)}), one of {', '.join(torch_models.TRANSFORMERS)}, "
                         f"or light_NAME with NAME in {', '.join(onnx_zoo.light_model_names())}")
    os.makedirs(CACHE, exist_ok=True)
    module, example = (torch_models.transformers_model(name, seed=seed) if name in torch_models.TRANSFORMERS
                       else torch_models.torchvision_model(name, seed))
    torch_models.export_onnx_file(module, example, path)
    return path


def smoke_model_path() -> str:
    """A small CNN written with onnx.helper: a 3x3 convolution, a depthwise one with a
    squeeze-excitation gate, a 1x1 convolution with hard-swish, global pooling, a dense
    classifier and softmax (every engine's main families, seconds to profile)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)

    def weight(name, *shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32), name)
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1], group=16),
             helper.make_node("GlobalAveragePool", ["c2"], ["p1"]),
             helper.make_node("Conv", ["p1", "w3"], ["s1"]),
             helper.make_node("HardSigmoid", ["s1"], ["g1"], alpha=1 / 6, beta=0.5),
             helper.make_node("Mul", ["c2", "g1"], ["m1"]),
             helper.make_node("Conv", ["m1", "w4"], ["c4"]),
             helper.make_node("HardSwish", ["c4"], ["h4"]),
             helper.make_node("GlobalAveragePool", ["h4"], ["p2"]),
             helper.make_node("Flatten", ["p2"], ["f"]),
             helper.make_node("Gemm", ["f", "wd", "bd"], ["d"], transB=1),
             helper.make_node("Softmax", ["d"], ["y"], axis=1)]
    inits = [weight("w1", 16, 3, 3, 3), weight("b1", 16), weight("w2", 16, 1, 3, 3), weight("w3", 16, 16, 1, 1),
             weight("w4", 32, 16, 1, 1), weight("wd", 10, 32), weight("bd", 10)]
    g = helper.make_graph(nodes, "smoke_cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    path = os.path.join(tempfile.mkdtemp(prefix="profile_model_"), "smoke_cnn.onnx")
    onnx.save(model, path)
    return path


# our executor ---------------------------------------------------------------------------------------

#: the zero-trial search of ``--smoke``: a tenth of ``ZERO_TRIAL_PARAMS``
SMOKE_SEARCH = SearchParams(population=24, generations=1, init_min_population=8, islands=1)


def zero_trial_states(part, model, seed: int, say, params=None) -> tuple[dict, dict]:
    """The zero-trial program of every task (by workload key), each search's, then shared in
    its operator family and against the shipped program library as ``ZeroTrial.programs``
    does (``shared_in_family``), and the seconds
    each search took (``params``: the search's, default each task's
    ``autosched.history.zero_trial.zero_trial_params``)."""
    states, seconds = {}, {}
    for k, w in enumerate(part.tasks):
        t0 = time.perf_counter()
        try:
            states[w.workload_key] = zero_trial_program(w.search_task(), model, seed,
                                                        candidates=[default_schedule(w.dag)], params=params)
        except ValueError as err:
            say(f"# task {k}: no zero-trial program ({err}); it runs a default schedule")
        seconds[w.workload_key] = time.perf_counter() - t0
    return shared_in_family([w.search_task() for w in part.tasks], states, model, load_program_library()), seconds


@contextlib.contextmanager
def openmp_threads(n: int):
    """Our kernels' parallel regions on ``n`` threads inside the block (libgomp's
    ``omp_set_num_threads`` for the calling thread, which runs every kernel), then ``THREADS``."""
    gomp = ctypes.CDLL("libgomp.so.1")      # the copy ``ir`` loaded (one per soname)
    gomp.omp_set_num_threads(n)
    try:
        yield
    finally:
        gomp.omp_set_num_threads(THREADS)


def _kernel_ms(kernel, args, repeat: int) -> float:
    """The fastest of ``repeat`` readings (on a shared machine a parallel region may wait a
    whole time slice for its second thread)."""
    return 1e3 * min(kernel.time(*args, number=1, repeat=repeat, min_repeat_ms=5).results)


def _cold_kernel_ms(kernel, args, constants: list, repeat: int) -> float | None:
    """The fastest of ``repeat`` single calls, each after its ``constants`` (the weights) were
    evicted from the caches, as they come in a run of a model whose weights exceed the
    last-level cache; None where arrays cannot be evicted (``ir.cpu.runtime.can_evict``)."""
    if not can_evict():
        return None
    timer = native_timer(kernel, *args)
    readings = []
    for _ in range(repeat):
        evict_from_caches(constants)
        readings.append(timer(1))
    return 1e3 * min(readings)


def kernel_rows(executor, zero_trial: set, repeat: int, defaults=None) -> list[dict]:
    """Every kernel call of ``executor`` timed alone with its own arguments, on 2 threads and
    on one (``one_thread_ms``: what its parallel regions gain or cost), and with its weights
    evicted before each call (``cold_ms``: what it costs when they come from memory); with ``defaults``
    (the same network on default schedules), a zero-trial kernel's default schedule too
    (``default_ms``: what the base model's pick gains or loses)."""
    executor.run(*executor.graph.random_inputs(0))
    if defaults is not None:
        defaults.run(*executor.graph.random_inputs(0))
    rows = []
    for k, (sg, kernel, args) in enumerate(executor.calls):
        key = sg.workload.workload_key
        origin = "tuned" if executor.programs[key].tuned else "zero-trial" if key in zero_trial else "default"
        ms = _kernel_ms(kernel, args, repeat)
        cold_ms = _cold_kernel_ms(kernel, args, [a for a, n in zip(args, sg.inputs) if n.is_const], repeat)
        with openmp_threads(1):
            one_thread_ms = _kernel_ms(kernel, args, repeat)
        default_ms = _kernel_ms(*defaults.calls[k][1:], repeat) if defaults is not None and origin != "default" \
            else ms
        steps = executor.programs[key].state.steps
        regions = sum(getattr(step, "annotation", None) == "parallel" for step in steps)
        rows.append({"kernel": sg.workload.desc, "family": our_family(sg), "origin": origin, "ms": ms,
                     "cold_ms": cold_ms, "parallel_loops": regions,
                     "one_thread_ms": one_thread_ms, "default_ms": default_ms, "workload_key": key,
                     "task": sg.workload in executor.partitioned.tasks})
    return rows


def in_run_ms(executor, runs: int) -> list[float]:
    """Each kernel call's milliseconds inside a run of ``executor``: the calls made in the
    run's order from Python (each a native call, a timestamp on either side), the median
    over ``runs`` runs."""
    signature = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p)
    calls = []
    for _, kernel, args in executor.calls:
        address, argv, check = kernel.native_call(*args)
        calls.append((signature(address), ctypes.addressof(argv), argv, check))
    readings = np.empty((runs, len(calls)))
    for run in range(runs):
        for k, (fn, argv_address, _, check) in enumerate(calls):
            t0 = time.perf_counter_ns()
            status = fn(argv_address)
            readings[run, k] = time.perf_counter_ns() - t0
            if status:
                check(status)
    return [float(ms) for ms in np.median(readings, axis=0) / 1e6]


#: cProfile's self time by where the code lives, in this order (the first match wins)
_PROFILE_GROUPS = (("XGBoost predict", ("xgboost", "cost_model")), ("features", ("evolution/features",)),
                   ("lowering", ("ir/lower", "ir/loops", "ir/bounds", "ir/padding", "ir/loop_ir", "ir/simplify",
                                 "ir/index_check", "ir/layout")),
                   ("replay (states, steps)", ("ir/state", "ir/steps", "ir/stage", "ir/memo", "ir/frozen")),
                   ("expressions", ("ir/expr", "ir/tensor", "ir/dag")),
                   ("sketches and sampling", ("sketch_rules/",)),
                   ("evolution (mutation, crossover)", ("evolution/",)))
#: entry points whose cumulative time is printed (they nest: lowering is part of features)
_ENTRY_POINTS = (("ir/lower.py", "lower"), ("evolution/features.py", "extract_features"),
                 ("ir/state.py", "from_steps"), ("ir/state.py", "replay"), ("xgb_model.py", "predict_rows"),
                 ("search_policy.py", "sample_initial"), ("search_policy.py", "evolve"))


def search_profile(part, model, keys: list, seed: int, params=None) -> tuple[dict, dict, float]:
    """cProfile of the zero-trial searches of the tasks ``keys``: seconds of self time per
    code group, cumulative seconds of the entry points, and the total."""
    tasks = [w for w in part.tasks if w.workload_key in keys]
    prof = cProfile.Profile()
    prof.enable()
    for w in tasks:
        try:
            zero_trial_program(w.search_task(), model, seed, candidates=[default_schedule(w.dag)], params=params)
        except ValueError:
            pass
    prof.disable()
    stats = pstats.Stats(prof).stats
    groups: dict = collections.Counter()
    entries: dict = collections.Counter()

    def group_of(path: str) -> str:
        path = path.replace(os.sep, "/")
        return next((g for g, parts in _PROFILE_GROUPS if any(p in path for p in parts)), "other")
    for (path, _line, func), (_cc, _nc, self_s, cum_s, callers) in stats.items():
        if path == "~" and callers:     # a builtin: its time goes to its callers' groups
            for (caller_path, _, _), caller in callers.items():
                groups[group_of(caller_path)] += caller[2]
        else:
            groups[group_of(path)] += self_s
        for suffix, name in _ENTRY_POINTS:
            if path.endswith(suffix) and func == name:
                entries[f"{suffix}:{name}"] = max(entries[f"{suffix}:{name}"], cum_s)
    return dict(groups), dict(entries), sum(groups.values())


def search_phase(part, args, say) -> dict:
    """The zero-trial search of every task, timed, and a cProfile of the slowest searches:
    ``{"steps": {workload key: steps JSON}, "search_s", "zero_trial_s", "cprofile", ...}``."""
    model = load_base_model("default")
    params = SMOKE_SEARCH if args.smoke else None
    t0 = time.perf_counter()
    states, search_s = zero_trial_states(part, model, args.seed, say, params) if model is not None else ({}, {})
    zero_s = time.perf_counter() - t0
    cprof = None
    if args.cprofile_tasks and search_s:
        slow = sorted(search_s, key=lambda k: -search_s[k])[:args.cprofile_tasks]
        groups, entries, total = search_profile(part, model, slow, args.seed, params)
        cprof = {"tasks": len(slow), "seconds": total, "seconds_unprofiled": sum(search_s[k] for k in slow),
                 "self_seconds": groups, "cumulative_seconds": entries}
    return {"model": part.name, "workloads": sorted(w.workload_key for w in part.tasks),
            "base_model": model is not None, "steps": {k: steps_to_json(st.steps) for k, st in states.items()},
            "search_s": search_s,
            "zero_trial_s": zero_s, "cprofile": cprof, "searched_now": True}


def load_search(path: str, part) -> dict | None:
    """What ``search_phase`` wrote to ``path`` for these tasks; None if there is no such file
    or it is another model's."""
    if not os.path.exists(path):
        return None
    with open(path) as f:
        search = json.load(f)
    if search.get("workloads") != sorted(w.workload_key for w in part.tasks):
        raise ValueError(f"{path} holds the zero-trial programs of another model; remove it or name another file")
    search["searched_now"] = False
    return search


def program_states(search: dict, part) -> dict:
    """The States of the programs of ``search`` (what ``search_phase`` wrote), by workload key."""
    return {w.workload_key: ir.State.from_steps(w.dag, steps_from_json(search["steps"][w.workload_key]))
            for w in part.tasks if w.workload_key in search["steps"]}


def against_kernels(part, executor, other, repeat: int) -> list[dict]:
    """Every task whose program differs between ``executor`` and ``other`` (executors of the
    same partition): its first kernel call timed alone in both, in turns."""
    rows = []
    for w in part.tasks:
        calls = [k for k, (sg, _, _) in enumerate(executor.calls) if sg.workload is w]
        if not calls or executor.programs[w.workload_key].state.key == other.programs[w.workload_key].state.key:
            continue
        best = fastest_in_turns({name: (lambda call=ex.calls[calls[0]]: _kernel_ms(call[1], call[2], repeat))
                                 for name, ex in (("ours", executor), ("against", other))})
        rows.append({"kernel": w.desc, "calls": len(calls), "ms": best["ours"], "against_ms": best["against"]})
    return rows


def print_search_profile(cprof: dict | None, say) -> None:
    if not cprof:
        return
    total = cprof["seconds"]
    say(f"\n# zero-trial search of the {cprof['tasks']} slowest tasks under cProfile ({total:.1f} s with the "
        f"profiler; {cprof['seconds_unprofiled']:.1f} s without): self time by code")
    for g, sec in sorted(cprof["self_seconds"].items(), key=lambda kv: -kv[1]):
        say(f"  {g:<34} {sec:7.2f} s {100 * sec / total:5.1f}%")
    say("# cumulative time of entry points (nested: features include lowering)")
    for e, sec in sorted(cprof["cumulative_seconds"].items(), key=lambda kv: -kv[1]):
        say(f"  {e:<42} {sec:7.2f} s {100 * sec / total:5.1f}%")


# the baselines --------------------------------------------------------------------------------------

def _input_feed(session, inputs) -> dict:
    return dict(zip([i.name for i in session.get_inputs()], inputs))


def onnxruntime_nodes(path: str, inputs, runs: int) -> list[dict]:
    """onnxruntime's nodes with their fastest milliseconds over ``runs`` profiled runs (after
    two warm-up runs; as our kernels), their operator and family."""
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.intra_op_num_threads = THREADS
    options.log_severity_level = 3
    options.enable_profiling = True
    options.profile_file_prefix = os.path.join(tempfile.mkdtemp(prefix="ort_profile_"), "ort")
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    feed = _input_feed(session, inputs)
    for _ in range(2 + runs):
        session.run(None, feed)
    profile_file = session.end_profiling()
    with open(profile_file) as f:
        events = json.load(f)
    os.remove(profile_file)
    durations, meta = collections.defaultdict(list), {}
    for e in events:
        if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time"):
            durations[e["name"]].append(e["dur"])
            meta[e["name"]] = e.get("args", {})
    rows = []
    for name, durs in durations.items():
        args = meta[name]
        shapes = [tuple(next(iter(s.values()))) for s in args.get("input_type_shape", [])]
        op = args.get("op_name", "?")
        rows.append({"node": name[:-len("_kernel_time")], "op": op, "family": ort_family(op, shapes),
                     "ms": min(durs[-runs:]) / 1e3})
    return rows


def openvino_nodes(path: str, inputs, runs: int) -> list[dict] | None:
    """OpenVINO's executed nodes with their fastest milliseconds over ``runs`` inferences
    (CPU, 2 threads, f32 precision, PERF_COUNT); None without openvino."""
    try:
        import openvino as ov
    except ImportError:
        return None
    core = ov.Core()
    compiled = core.compile_model(core.read_model(path), "CPU", {"INFERENCE_NUM_THREADS": THREADS,
                                                                 "INFERENCE_PRECISION_HINT": "f32",
                                                                 "PERF_COUNT": True})
    shapes = {op.get_friendly_name(): [tuple(op.get_input_partial_shape(i).to_shape())
                                       if op.get_input_partial_shape(i).is_static else ()
                                       for i in range(op.get_input_size())]
              for op in compiled.get_runtime_model().get_ordered_ops()}
    request = compiled.create_infer_request()
    for _ in range(2):
        request.infer(list(inputs))
    times, types = collections.defaultdict(list), {}
    for _ in range(runs):
        request.infer(list(inputs))
        for p in request.profiling_info:
            if p.status == p.Status.EXECUTED:
                times[p.node_name].append(p.real_time.total_seconds() * 1e3)
                types[p.node_name] = p.node_type
    return [{"node": name, "op": types[name], "family": ov_family(types[name], shapes.get(name, [])),
             "ms": min(ts)} for name, ts in times.items()]


def openvino_runner(path: str):
    """``run(*arrays)``: OpenVINO CPU, 2 threads, f32 (no counters); None without openvino."""
    try:
        import openvino as ov
    except ImportError:
        return None
    core = ov.Core()
    request = core.compile_model(core.read_model(path), "CPU", {"INFERENCE_NUM_THREADS": THREADS,
                                                                "INFERENCE_PRECISION_HINT": "f32"}
                                 ).create_infer_request()
    return lambda *arrays: request.infer(list(arrays))


# probing the losing tasks ---------------------------------------------------------------------------

def probe_task(part, workload, executor, kernels: dict, trials: int, seed: int) -> dict:
    """``trials`` measured programs of ``workload`` (the base model's search, then its
    retraining on what it measured): the best one's time in the model beside the zero-trial
    program's, both timed alone in turns with the same arguments."""
    task = workload.search_task()
    params = SearchParams(population=256, generations=2, init_min_population=64, islands=1)
    result = autosched.auto_schedule(task, trials=trials, measure_batch=min(16, trials), seed=seed,
                                     search_params=params, verbose=0, records_db=None, retime_best=4)
    row = {"kernel": workload.desc, "trials": result.trials, "zero_trial_ms": None, "best_measured_ms": None}
    if result.state is None:
        return row
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        probed = G.GraphExecutor(part, states={workload.workload_key: result.state}, warn_untuned=False,
                                 kernel_cache=kernels, base_model=None)
    first = next(k for k, (sg, _, _) in enumerate(executor.calls) if sg.workload is workload)
    timers = {name: (lambda call=ex.calls[first]: call[1].time(*call[2], number=1, repeat=5,
                                                               min_repeat_ms=5).median)
              for name, ex in (("zero_trial", executor), ("best", probed))}
    best = fastest_in_turns(timers)
    row.update(zero_trial_ms=1e3 * best["zero_trial"], best_measured_ms=1e3 * best["best"])
    return row


def ranked_candidates(workload, seed: int, params=None) -> dict:
    """The ``CANDIDATES`` programs of ``workload`` that the base model ranks best after its
    zero-trial search (its pick first), measured in turns as a task's programs are: where
    the pick stands among them. A pick far behind the fastest of them is the base model
    ranking the family badly; all of them slow while the measured search finds a faster
    program is the zero-trial search not reaching it."""
    task = workload.search_task()
    programs = ranked_programs(task, load_base_model("default"), seed, [default_schedule(workload.dag)], params,
                               top=CANDIDATES)
    ms = [1e3 * r.mean_cost if r.ok else None for r in ProgramMeasurer().retime(task, programs, turns=3)]
    ok = [m for m in ms if m is not None]
    pick = ms[0]
    return {"ranked_ms": ms, "fastest_ranked_ms": min(ok) if ok else None,
            "pick_place": None if pick is None else 1 + sum(m < pick for m in ok)}


# the report -----------------------------------------------------------------------------------------

def one_thread(fn):
    with openmp_threads(1):
        return fn()


def by_family(rows, column: str = "ms") -> dict:
    totals: dict = collections.Counter()
    for r in rows or []:
        totals[r["family"]] += r[column]
    return totals


def relative_error(got, want) -> float:
    return max(float(np.max(np.abs(np.asarray(g, np.float64) - w))) / (float(np.max(np.abs(w))) or 1.0)
               for g, w in zip(got, want))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0], parents=[bench_args()])
    parser.add_argument("--model", default=None,
                        help=f"a torchvision classifier ({', '.join(EXAMPLE_MODELS)}, ...), "
                             f"{', '.join(torch_models.TRANSFORMERS)} (Hugging Face, sequence 128) or light_NAME "
                             "(the onnx wheel's zoo models)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--runs", type=int, default=20, help="profiled runs of onnxruntime and OpenVINO")
    parser.add_argument("--repeat", type=int, default=5, help="timing repeats per kernel and end to end")
    parser.add_argument("--top", type=int, default=20, help="kernels listed (the slowest)")
    parser.add_argument("--cprofile-tasks", type=int, default=3,
                        help="zero-trial searches profiled with cProfile (the slowest ones)")
    parser.add_argument("--probe-tasks", type=int, default=0,
                        help="the slowest kernels of the losing families (then of the others) searched with "
                             "measured trials")
    parser.add_argument("--probe-trials", type=int, default=32)
    parser.add_argument("--programs", default=None,
                        help="a JSON file of the zero-trial programs (and the search's times): read if it exists "
                             "(for this model), else written after the search")
    parser.add_argument("--against", default=None, metavar="PROGRAMS",
                        help="another --programs file of this model (e.g. another branch's search): its programs "
                             "timed in turns with these, end to end and every kernel whose program differs")
    parser.add_argument("--search-only", action="store_true",
                        help="stop after the zero-trial search (with --programs: time the rest later, e.g. "
                             "the search niced outside the heavy lock, the timings under it)")
    args = parser.parse_args(argv)
    if args.smoke:
        args.runs, args.repeat, args.top = 3, 2, 5
        args.cprofile_tasks = min(args.cprofile_tasks, 1)
    if not args.model and not args.smoke:
        parser.error("--model is required (or --smoke)")
    try:
        path = smoke_model_path() if args.smoke and not args.model else model_path(args.model, args.seed)
    except ValueError as err:
        print(f"profile_model: {err}", file=sys.stderr)
        return 2
    name = args.model or "smoke_cnn"
    say = (lambda *a, **k: None) if args.json_only else (lambda *a, **k: print(*a, **k, flush=True))

    graph = G.from_onnx(path)
    part = G.partition(graph)
    inputs = graph.random_inputs(args.seed)
    say(f"# {name}: {path}\n# {graph.summary()}\n# {len(part.subgraphs)} subgraphs, {len(part.tasks)} tasks\n"
        f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average {os.getloadavg()[0]:.1f} "
        "(a busy machine slows parallel regions most)")
    try:
        search = load_search(args.programs, part) if args.programs else None
    except ValueError as err:
        print(f"profile_model: {err}", file=sys.stderr)
        return 2
    if search is None:
        search = search_phase(part, args, say)
        if args.programs:       # whole or not at all: another run may be waiting to read it
            with open(args.programs + ".part", "w") as f:
                json.dump(search, f)
            os.replace(args.programs + ".part", args.programs)
    elif not search["base_model"]:
        say("# (no base model when the programs were searched)")
    zero_s = search["zero_trial_s"]
    states = program_states(search, part)
    try:
        against = load_search(args.against, part) if args.against else None
    except ValueError as err:
        print(f"profile_model: {err}", file=sys.stderr)
        return 2
    if args.against and against is None:
        print(f"profile_model: --against {args.against}: no such file", file=sys.stderr)
        return 2
    if args.search_only:
        print_search_profile(search["cprofile"], say)
        emit_json("profile_model", [{"workload": name, "zero_trial_s": zero_s, "tasks": len(part.tasks),
                                     "search_profile": search["cprofile"]}])
        return 0
    kernels: dict = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # zero-trial programs built as the executor builds its own (layout-rewritten); not tuned
        executor = G.GraphExecutor(part, states=states, warn_untuned=False, kernel_cache=kernels, base_model=None)
        defaults = G.GraphExecutor(part, warn_untuned=False, kernel_cache=kernels, base_model=None)
        other = G.GraphExecutor(part, states=program_states(against, part), warn_untuned=False,
                                kernel_cache=kernels, base_model=None) if against else None
    for key in states:
        executor.programs[key].tuned = False
    build_s = executor.build_seconds
    say(f"# zero-trial programs: {zero_s:.1f} s of search for {len(part.tasks)} tasks ({len(states)} found"
        f"{'' if search['searched_now'] else ', searched earlier: ' + args.programs}); kernels compiled in "
        f"{build_s:.1f} s")

    ours_rows = kernel_rows(executor, set(states), args.repeat, defaults)
    for row, ms in zip(ours_rows, in_run_ms(executor, max(3, 3 * args.repeat))):
        row["in_run_ms"] = ms
    ort_rows = onnxruntime_nodes(path, inputs, args.runs)
    ov_rows = openvino_nodes(path, inputs, args.runs)
    ort_run = B.onnxruntime_runner(path, THREADS)
    ov_run = openvino_runner(path)
    err = relative_error(executor.run(*inputs), ort_run(*inputs))
    # the baselines in turns with our programs only: beside our programs on one thread and
    # every kernel on its default schedule, onnxruntime read SqueezeNet-1.1 at 2.16 ms where
    # it reads 1.63 ms alone or in turns with ours
    e2e = fastest_in_turns({
        "ours": lambda: executor.benchmark(*inputs, repeat=args.repeat, min_repeat_ms=50)["median"],
        "onnxruntime": lambda: B.seconds_per_call(lambda: ort_run(*inputs), repeat=args.repeat, min_repeat_ms=50),
        "openvino": (lambda: B.seconds_per_call(lambda: ov_run(*inputs), repeat=args.repeat, min_repeat_ms=50))
        if ov_run else lambda: None,
        "against": (lambda: other.benchmark(*inputs, repeat=args.repeat, min_repeat_ms=50)["median"])
        if other else lambda: None})
    e2e.update(fastest_in_turns({
        "default": lambda: defaults.benchmark(*inputs, repeat=args.repeat, min_repeat_ms=50)["median"],
        "one_thread": lambda: one_thread(lambda: executor.benchmark(*inputs, repeat=args.repeat,
                                                                    min_repeat_ms=50)["median"])}))
    against_rows = against_kernels(part, executor, other, args.repeat) if other else []

    say(f"\n# the {args.top} slowest of our {len(ours_rows)} kernel calls, each timed alone")
    table = Table(["kernel", "family", "origin", "parallel loops", "ms", "in run ms", "1 thread ms",
                   "default schedule ms"], floatfmt="{:.3f}")
    for r in sorted(ours_rows, key=lambda r: -r["ms"])[:args.top]:
        table.add(r["kernel"][:70], r["family"], r["origin"], r["parallel_loops"], r["ms"], r["in_run_ms"],
                  r["one_thread_ms"], r["default_ms"])
    say(table.render())
    say(f"\n# the {min(args.top, 10)} kernel calls that lose most inside a run (in the run's order, their inputs "
        "as their producers left them) against alone")
    table = Table(["kernel", "family", "ms alone", "weights evicted ms", "in run ms", "lost ms"], floatfmt="{:.3f}")
    for r in sorted(ours_rows, key=lambda r: r["ms"] - r["in_run_ms"])[:min(args.top, 10)]:
        table.add(r["kernel"][:70], r["family"], r["ms"], r["cold_ms"], r["in_run_ms"], r["in_run_ms"] - r["ms"])
    say(table.render())

    ours_f, ort_f, ov_f = by_family(ours_rows), by_family(ort_rows), by_family(ov_rows)
    default_f, one_f = by_family(ours_rows, "default_ms"), by_family(ours_rows, "one_thread_ms")
    origin_f = collections.defaultdict(collections.Counter)
    for r in ours_rows:
        origin_f[r["family"]][r["origin"]] += 1
    fam_rows = []
    for fam in FAMILIES:
        if not (ours_f.get(fam) or ort_f.get(fam) or ov_f.get(fam)):
            continue
        ours_ms, ort_ms, ov_ms = ours_f.get(fam, 0.0), ort_f.get(fam, 0.0), ov_f.get(fam, 0.0) if ov_rows else None
        fam_rows.append({"family": fam, "ours_ms": ours_ms, "one_thread_ms": one_f.get(fam, 0.0),
                         "default_ms": default_f.get(fam, 0.0),
                         "onnxruntime_ms": ort_ms, "openvino_ms": ov_ms,
                         "vs_onnxruntime": ort_ms / ours_ms if ours_ms else None, "lost_ms": ours_ms - ort_ms,
                         "kernels": sum(origin_f[fam].values()),
                         "origins": ", ".join(f"{n} {o}" for o, n in sorted(origin_f[fam].items()))})
    fam_rows.sort(key=lambda r: -r["lost_ms"])
    say("\n# per family (ms per run; a fused epilogue counts with its anchor); sorted by ms lost to onnxruntime")
    table = Table(["family", "ours ms", "1 thread", "default sched.", "onnxruntime ms", "OpenVINO ms", "ort/ours",
                   "lost ms", "our kernels"], floatfmt="{:.3f}")
    for r in fam_rows:
        table.add(r["family"], r["ours_ms"], r["one_thread_ms"], r["default_ms"], r["onnxruntime_ms"], r["openvino_ms"],
                  r["vs_onnxruntime"], r["lost_ms"], f"{r['kernels']} ({r['origins']})")
    kern_sum, ort_sum, ov_sum = sum(ours_f.values()), sum(ort_f.values()), sum(ov_f.values()) if ov_rows else None
    default_sum, one_sum = sum(default_f.values()), sum(one_f.values())
    table.add("sum", kern_sum, one_sum, default_sum, ort_sum, ov_sum, ort_sum / kern_sum if kern_sum else None,
              kern_sum - ort_sum, str(len(ours_rows)))
    say(table.render())

    ours_ms, ort_ms, default_ms = 1e3 * e2e["ours"], 1e3 * e2e["onnxruntime"], 1e3 * e2e["default"]
    one_ms = 1e3 * e2e["one_thread"]
    ov_ms = 1e3 * e2e["openvino"] if e2e["openvino"] is not None else None
    say(f"\n# end to end, timed in turns (fastest of 3): ours {ours_ms:.3f} ms, onnxruntime {ort_ms:.3f} ms "
        f"({ort_ms / ours_ms:.2f}x ours), OpenVINO {'-' if ov_ms is None else f'{ov_ms:.3f} ms'}"
        f"{'' if ov_ms is None else f' ({ov_ms / ours_ms:.2f}x ours)'}; outputs vs onnxruntime: "
        f"max relative error {err:.1e}; every kernel on its default schedule: {default_ms:.3f} ms; "
        f"ours on one thread: {one_ms:.3f} ms")
    slower = [r for r in ours_rows if r["one_thread_ms"] < r["ms"]]
    best_threads_sum = sum(min(r["ms"], r["one_thread_ms"]) for r in ours_rows)
    say(f"# parallel loops (each a parallel region per call): {sum(r['parallel_loops'] for r in ours_rows)} in "
        f"{len(ours_rows)} kernel calls; kernels faster on one thread than on {THREADS}: {len(slower)}, "
        f"{sum(r['ms'] - r['one_thread_ms'] for r in slower):.3f} ms lost in them (each kernel on its better "
        f"thread count: {best_threads_sum:.3f} ms)")
    cold_sum = None if any(r["cold_ms"] is None for r in ours_rows) else sum(r["cold_ms"] for r in ours_rows)
    say(f"# executor overhead: end to end {ours_ms:.3f} ms against the sum of its kernels {kern_sum:.3f} ms "
        f"({ours_ms / kern_sum:.3f}x)" + ("" if cold_sum is None else
                                          f", against their sum with their weights evicted before each call "
                                          f"{cold_sum:.3f} ms ({ours_ms / cold_sum:.3f}x: the rest is not weights "
                                          f"coming from memory)") +
        f"; their sum timed inside a run {sum(r['in_run_ms'] for r in ours_rows):.3f} ms"
        f"; onnxruntime end to end against its nodes' sum {ort_sum:.3f} ms "
        f"({ort_ms / ort_sum:.3f}x)")

    if other:
        against_ms = 1e3 * e2e["against"]
        say(f"\n# against {args.against}: {len(against_rows)} tasks with other programs; end to end, timed in turns "
            f"with the rest: ours {ours_ms:.3f} ms, against {against_ms:.3f} ms ({ort_ms / against_ms:.2f}x "
            f"onnxruntime, ours {ort_ms / ours_ms:.2f}x)")
        for r in against_rows:
            say(f"  {r['kernel'][:64]:<64} x{r['calls']}  ours {r['ms']:.3f} ms  against {r['against_ms']:.3f} ms")

    print_search_profile(search["cprofile"], say)

    probes = []
    if args.probe_tasks:
        losing = {r["family"] for r in fam_rows if r["lost_ms"] > 0}
        seen, order = set(), []
        # the slowest tasks of the losing families first, then (when none loses) the others
        for r in sorted(ours_rows, key=lambda r: (r["family"] not in losing, -r["ms"])):
            if r["task"] and r["workload_key"] not in seen:
                seen.add(r["workload_key"])
                order.append(r)
        by_key = {w.workload_key: w for w in part.tasks}
        say(f"\n# probing: {args.probe_trials} measured trials of each of the {args.probe_tasks} slowest tasks "
            "of the losing families (then of the others)")
        for r in order[:args.probe_tasks]:
            workload = by_key[r["workload_key"]]
            p = probe_task(part, workload, executor, kernels, args.probe_trials, args.seed)
            p["family"] = r["family"]
            p.update(ranked_candidates(workload, args.seed, SMOKE_SEARCH if args.smoke else None))
            probes.append(p)
            gain = (p["zero_trial_ms"] / p["best_measured_ms"]) if p["best_measured_ms"] else None
            say(f"  {p['kernel'][:64]:<64} zero-trial {p['zero_trial_ms'] or 0:.3f} ms, best of {p['trials']} "
                f"measured {p['best_measured_ms'] or 0:.3f} ms ({'-' if gain is None else f'{gain:.2f}x'})")
            if p["pick_place"] is not None:
                ranked = len([m for m in p["ranked_ms"] if m is not None])
                say(f"  {'':<64} the pick {p['ranked_ms'][0]:.3f} ms is number {p['pick_place']} of the "
                    f"{ranked} the base model ranks best; the fastest of them {p['fastest_ranked_ms']:.3f} ms")

    rows = [{"workload": f"{name}:{r['family']}", **r} for r in fam_rows]
    rows.append({"workload": name, "latency_ms": ours_ms, "onnxruntime_ms": ort_ms, "openvino_ms": ov_ms,
                 "vs_onnxruntime": ort_ms / ours_ms, "vs_openvino": ov_ms / ours_ms if ov_ms else None,
                 "kernels_sum_ms": kern_sum, "e2e_over_kernels": ours_ms / kern_sum,
                 "cold_kernels_sum_ms": cold_sum, "e2e_over_cold_kernels": ours_ms / cold_sum if cold_sum else None,
                 "in_run_kernels_sum_ms": sum(r["in_run_ms"] for r in ours_rows),
                 "default_schedules_ms": default_ms, "one_thread_ms": one_ms, "one_thread_kernels_sum_ms": one_sum,
                 "default_schedules_kernels_sum_ms": default_sum, "best_thread_count_kernels_sum_ms": best_threads_sum,
                 "onnxruntime_nodes_sum_ms": ort_sum, "openvino_nodes_sum_ms": ov_sum,
                 "zero_trial_s": zero_s, "compile_s": build_s, "tasks": len(part.tasks),
                 "kernels": len(ours_rows), "max_rel_error": err, "search_profile": search["cprofile"],
                 "probes": probes,
                 "against_ms": 1e3 * e2e["against"] if other else None, "against_kernels": against_rows})
    emit_json("profile_model", rows)
    return 0 if err <= 1e-3 else 1


if __name__ == "__main__":
    sys.exit(main())
