"""The base cost model: a small XGBoost rank model trained on tuning records of many
workloads, so that a task's programs can be ranked before any of them is measured.

Three ship inside the package, one per vector width and one for Intel's AVX-512 CPUs, all
built by ``autosched pretrain``
(see docs/history.md): records of the ``TRAINING_WORKLOADS`` below, which are other shapes
than those the benchmarks evaluate, measured on AVX2 and AVX-512 CPUs.
``data/base_model.json`` ranks programs for 8-lane (AVX2) targets; it learnt the logs in
``bench/data/training_records.tar.gz``, ``training_records_avx2.tar.gz`` (AVX2 tunings of the
``AVX512_ONLY_TRAINING`` workloads) and ``training_records_avx2_picks.tar.gz`` (a round of its
predecessor's own picks on the other model-family workloads, timed on Zen 3), as an ensemble
of four (see below). ``data/base_model_avx512.json`` ranks them for
16-lane (AVX-512) ones: it learnt those logs and ``bench/data/training_records_avx512.tar.gz``
(AVX-512 tunings of the ``AVX512_ONLY_TRAINING`` workloads, and two to six rounds of its
predecessors' own picks on every model-family workload), with its rank pairs weighted towards the fast
programs (``--top-weight 1``). On an AVX-512 CPU the AVX2 model's pick sat near the bottom
of its own best 16 (BENCHMARKS.md, 2026-11-28); on AVX2 the weighting had not paid. On Intel's
AVX-512 CPUs ``data/base_model_avx512_intel.json`` ranks them (``MAKER_MODELS``): the AVX-512
model with trees learnt from ``bench/data/training_records_intel_picks.tar.gz`` (three rounds of
its own picks, timed on an Intel VM; ``continued_model``). Each is
an ensemble of four models, each trained on a bootstrap resample of the programs
(``--members 4``), that ranks by their mean: every single model retrained on more records
moved its picks by up to 9x in families it had learnt nothing new of (BENCHMARKS.md,
2026-11-28 and 29).
``pretrain(records)`` trains one from the records of any tuning logs: each record's program
is replayed on its workload, rebuilt from the record's workload key (``rebuild_workload``);
``load_base_model`` gives the model a tuning starts from (``AUTOSCHED_BASE_MODEL`` chooses
another file, or ``off``).
"""
from __future__ import annotations

import dataclasses
import functools
import os
import warnings
from collections.abc import Iterable

import ir
from evolution import XGBoostEnsemble, XGBoostModel
from evolution.features import N_FEATURES

from .. import ops
from ..files import MAX_BASE_MODEL_BYTES, chosen_file, read_bounded
from .model_check import checked_members

_DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data")
#: the model file shipped with the package for AVX2 (8-lane) targets, and the default elsewhere
SHIPPED_MODEL = os.path.join(_DATA, "base_model.json")
#: the shipped model files by the target's float32 vector lanes (``HardwareParams.vector_lanes``)
SHIPPED_MODELS = {8: SHIPPED_MODEL, 16: os.path.join(_DATA, "base_model_avx512.json")}
#: shipped models for one maker's CPUs of a vector width (``cpu_maker``), chosen before
#: ``SHIPPED_MODELS``'; the AVX-512 model learnt AMD's CPUs, whose kernels rank otherwise
#: on Intel's (its picks there ran 1.4x the best of its own 16): the Intel one is that model
#: with trees learnt from its picks timed on an Intel CPU (``continued_model``)
MAKER_MODELS = {(16, "intel"): os.path.join(_DATA, "base_model_avx512_intel.json")}
#: LLVM's names of AMD's x86 CPUs begin with these
AMD_CPU_PREFIXES = ("znver", "bdver", "btver", "amdfam", "barcelona", "athlon", "opteron", "k8")
#: the environment variable that chooses the base model: a file, or "off"
ENV_VAR = "AUTOSCHED_BASE_MODEL"

#: the workloads the shipped model was trained on (suite-style names: any shape of a
#: family parses): every family of the suite at shapes that the suite (and ResNet-50's
#: tasks) do not hold; ``bench/training_records.py`` tunes them and checks that
TRAINING_SUITE_STYLE = (
    "GMM-1x256x256x256", "GMM-1x768x384x512", "GMM-1x64x1024x256", "GMM-4x128x128x64",
    "C1D-1x128x64x64-k3s1p1", "C1D-1x256x32x128-k5s2p2",
    "C2D-1x28x28x96x96-k3s1p1", "C2D-1x56x56x48x96-k3s2p1", "C2D-1x14x14x192x384-k1s1p0",
    "C2D-1x7x7x384x384-k3s1p1", "C2D-1x112x112x3x32-k3s2p1", "C2D-1x28x28x160x64-k1s1p0",
    "C3D-1x8x28x28x32x32-k3s1p1",
    "GRP-1x28x28x128x128-k3s1p1g8", "GRP-1x56x56x32x64-k3s2p1g2",
    "DIL-1x28x28x64x64-k3s1p1d2",
    "DEP-1x56x56x96-k3s1p1", "DEP-1x28x28x192-k3s2p1", "DEP-1x14x14x384-k3s1p1", "DEP-1x112x112x16-k3s1p1",
    "T2D-1x8x8x128x64-k4s2p1", "T2D-1x16x16x64x32-k4s2p1", "T2D-1x4x4x256x128-k4s2p1",
    "CAP-1x8x8x16x32-k3s1p1",
    "NRM-1x128x512", "NRM-1x2048x256",
    "CBR-1x28x28x64x96-k3s1p1", "CBR-1x14x14x128x256-k3s2p1",
    "TBS-1x64x8x64", "TBS-1x128x4x32",
)
#: the operator families of real models (the fused tasks that partitioning the models of
#: bench/model_coverage.py makes), at shapes none of those models has (48/24/12/6-pixel
#: maps, 100/160-token sequences, 640/1280/2560 widths; ``bench/training_records.py``
#: checks it): tuned as a network's tasks are (``NETWORK_TASK_TRAINING``); the shipped
#: models learnt those whose logs are in bench/data/training_records.tar.gz (both) and
#: bench/data/training_records_avx512.tar.gz (the AVX-512 one)
MODEL_FAMILY_OPERATORS = {
    "dense_chain-1x100x640x2560-add-gelu": ("dense_chain", ((1, 100), 640, 2560), {"epilogue": "add-gelu"}),
    "dense_chain-1x100x2560x640-add-residual": ("dense_chain", ((1, 100), 2560, 640), {"epilogue": "add-residual"}),
    "dense_chain-1x160x640x640-add": ("dense_chain", ((1, 160), 640, 640), {"epilogue": "add"}),
    "dense_chain-1x48x48x96x384-add-gelu": ("dense_chain", ((1, 48, 48), 96, 384), {"epilogue": "add-gelu"}),
    "dense_chain-1x24x24x768x192-add-scale-residual":
        ("dense_chain", ((1, 24, 24), 768, 192), {"epilogue": "add-scale-residual"}),
    "dense_chain-1x6x6x640x2560-add-gelu": ("dense_chain", ((1, 6, 6), 640, 2560), {"epilogue": "add-gelu"}),
    "dense_chain-1x1152x1000-bias": ("dense_chain", (1, 1152, 1000), {"epilogue": "bias"}),
    "dense_chain-1x576x1280-bias-hard_swish": ("dense_chain", (1, 576, 1280), {"epilogue": "bias-hard_swish"}),
    # MobileNet-V3 / EfficientNet blocks: 1x1 expansions and projections, depthwise 3x3 and
    # 5x5 (ConvNeXt's 7x7), squeeze-excitation's small convolutions and gates; grouped 3x3
    "conv2d_chain-1x48x48x24x96-k1-bias-relu": ("conv2d_chain", (1, 48, 48, 24, 96, 1), {"epilogue": "bias-relu"}),
    "conv2d_chain-1x24x24x40x240-k1-bias-hard_swish":
        ("conv2d_chain", (1, 24, 24, 40, 240, 1), {"epilogue": "bias-hard_swish"}),
    "conv2d_chain-1x12x12x320x96-k1-bias-residual":
        ("conv2d_chain", (1, 12, 12, 320, 96, 1), {"epilogue": "bias-residual"}),
    "conv2d_chain-1x6x6x160x960-k1-bias-hard_swish":
        ("conv2d_chain", (1, 6, 6, 160, 960, 1), {"epilogue": "bias-hard_swish"}),
    "conv2d_chain-1x24x24x48x192-k1-bias-silu": ("conv2d_chain", (1, 24, 24, 48, 192, 1), {"epilogue": "bias-silu"}),
    "conv2d_chain-1x1x1x240x64-k1-bias-relu": ("conv2d_chain", (1, 1, 1, 240, 64, 1), {"epilogue": "bias-relu"}),
    "depthwise_chain-1x48x48x32-k3s1-bias-relu":
        ("depthwise_chain", (1, 48, 48, 32, 3, 1, 1), {"epilogue": "bias-relu"}),
    "depthwise_chain-1x24x24x240-k3s2-bias-hard_swish":
        ("depthwise_chain", (1, 24, 24, 240, 3, 2, 1), {"epilogue": "bias-hard_swish"}),
    "depthwise_chain-1x12x12x480-k5s1-bias-hard_swish":
        ("depthwise_chain", (1, 12, 12, 480, 5, 1, 2), {"epilogue": "bias-hard_swish"}),
    "depthwise_chain-1x24x24x96-k5s2-bias-silu":
        ("depthwise_chain", (1, 24, 24, 96, 5, 2, 2), {"epilogue": "bias-silu"}),
    "depthwise_chain-1x24x24x192-k7s1-bias": ("depthwise_chain", (1, 24, 24, 192, 7, 1, 3), {"epilogue": "bias"}),
    # channel counts that 16 does not divide (8 x an odd number, as MobileNet-V3's 72, 120,
    # 184, 200 and 672): a vector of 16 lanes does not tile them, and the first base model,
    # which had seen none, picked long vectors of odd widths for them
    "depthwise_chain-1x20x20x88-k3s1-bias-hard_swish":
        ("depthwise_chain", (1, 20, 20, 88, 3, 1, 1), {"epilogue": "bias-hard_swish"}),
    "depthwise_chain-1x20x20x168-k5s1-bias-relu": ("depthwise_chain", (1, 20, 20, 168, 5, 1, 2), {"epilogue": "bias-relu"}),
    "depthwise_chain-1x10x10x552-k5s2-bias-hard_swish":
        ("depthwise_chain", (1, 10, 10, 552, 5, 2, 2), {"epilogue": "bias-hard_swish"}),
    "conv2d_chain-1x20x20x56x168-k1-bias-hard_swish":
        ("conv2d_chain", (1, 20, 20, 56, 168, 1), {"epilogue": "bias-hard_swish"}),
    "conv2d_chain-1x10x10x552x88-k1-bias-residual":
        ("conv2d_chain", (1, 10, 10, 552, 88, 1), {"epilogue": "bias-residual"}),
    "se_gate-24x24x40x160-hard_sigmoid": ("se_gate", (24, 24, 40, 160), {"gate": "hard_sigmoid"}),
    "se_gate-12x12x36x576-sigmoid": ("se_gate", (12, 12, 36, 576), {"gate": "sigmoid"}),
    "conv2d_chain-1x12x12x256x256-k3g16-bias-relu":
        ("conv2d_chain", (1, 12, 12, 256, 256, 3, 1, 1, 16), {"epilogue": "bias-relu"}),
    # 3x3 convolutions as ResNet's and RegNet's tasks have them (dense and in groups of 24
    # channels, stride 1 and 2), tuned on an AVX-512 CPU for its model: the first AVX-512
    # model had AVX2 records only of dense 3x3 convolutions and one grouped workload (16
    # groups of 16), and picked programs 2-3x slower than its predecessor's for both
    "conv2d_chain-1x24x24x160x160-k3-bias-relu": ("conv2d_chain", (1, 24, 24, 160, 160, 3, 1, 1), {"epilogue": "bias-relu"}),
    "conv2d_chain-1x20x20x320x320-k3s2-bias-relu":
        ("conv2d_chain", (1, 20, 20, 320, 320, 3, 2, 1), {"epilogue": "bias-relu"}),
    "conv2d_chain-1x20x20x192x192-k3g8-bias-relu":
        ("conv2d_chain", (1, 20, 20, 192, 192, 3, 1, 1, 8), {"epilogue": "bias-relu"}),
    "conv2d_chain-1x40x40x96x96-k3s2g4-bias-relu":
        ("conv2d_chain", (1, 40, 40, 96, 96, 3, 2, 1, 4), {"epilogue": "bias-relu"}),
    # ShuffleNet's families on an AVX-512 CPU: 1x1 and depthwise convolutions over 4 or 16 x an
    # odd number of channels (a vector of 16 lanes covers none of 4 x 11), depthwise layers on
    # large maps (stride 1 and 2), and 1x1 convolutions from many channels on 5x5 maps; the
    # second AVX-512 model picked unvectorised programs of such layers, 3-9x slower than the
    # fastest of its own 16 best (MobileNet-V3's 112x112 depthwise, ShuffleNet's 116 channels)
    "depthwise_chain-1x96x96x48-k3s2-bias-relu": ("depthwise_chain", (1, 96, 96, 48, 3, 2, 1), {"epilogue": "bias-relu"}),
    "depthwise_chain-1x80x80x24-k3s1-bias": ("depthwise_chain", (1, 80, 80, 24, 3, 1, 1), {"epilogue": "bias"}),
    "depthwise_chain-1x40x40x44-k3s2-bias": ("depthwise_chain", (1, 40, 40, 44, 3, 2, 1), {"epilogue": "bias"}),
    "depthwise_chain-1x20x20x92-k3s1-bias": ("depthwise_chain", (1, 20, 20, 92, 3, 1, 1), {"epilogue": "bias"}),
    "conv2d_chain-1x40x40x44x44-k1-bias-relu": ("conv2d_chain", (1, 40, 40, 44, 44, 1), {"epilogue": "bias-relu"}),
    "conv2d_chain-1x20x20x92x92-k1-bias-relu": ("conv2d_chain", (1, 20, 20, 92, 92, 1), {"epilogue": "bias-relu"}),
    "conv2d_chain-1x10x10x184x184-k1-bias-relu": ("conv2d_chain", (1, 10, 10, 184, 184, 1), {"epilogue": "bias-relu"}),
    "conv2d_chain-1x48x48x20x44-k1-bias-relu": ("conv2d_chain", (1, 48, 48, 20, 44, 1), {"epilogue": "bias-relu"}),
    "conv2d_chain-1x5x5x368x1024-k1-bias-relu": ("conv2d_chain", (1, 5, 5, 368, 1024, 1), {"epilogue": "bias-relu"}),
    "conv2d_chain-1x5x5x800x144-k1-bias-residual":
        ("conv2d_chain", (1, 5, 5, 800, 144, 1), {"epilogue": "bias-residual"}),
    "global_avg_pool2d-1x24x24x240": ("global_avg_pool2d", (1, 24, 24, 240), {}),
    "layer_norm-1x24x24x192": ("layer_norm", ((1, 24, 24, 192),), {}),
    "layer_norm-1x100x640": ("layer_norm", ((1, 100, 640),), {}),
    "batch_matmul-12x100x100x64-tb": ("batch_matmul", (12, 100, 100, 64), {"transpose_b": True}),
    "batch_matmul-12x100x64x100": ("batch_matmul", (12, 100, 64, 100), {}),
    # transformer dense layers over a token count with no small divisor (a prime: ViT's 197
    # and 257 tokens are such, a class token beside a square of patches): a row tile is 1 or
    # all the rows, and the first base models, which had seen only 100-token and square maps,
    # picked all of them (a 211 x 8 accumulator tile in memory) at a sixth of what 32 trials find
    "dense_chain-1x211x512x2048-add-gelu": ("dense_chain", ((1, 211), 512, 2048), {"epilogue": "add-gelu"}),
    "dense_chain-1x211x2048x512-add": ("dense_chain", ((1, 211), 2048, 512), {"epilogue": "add"}),
    "dense_chain-211x1x512x1536-add": ("dense_chain", ((211, 1), 512, 1536), {"epilogue": "add"}),
    "dense_chain-139x896x896-bias": ("dense_chain", ((139,), 896, 896), {"epilogue": "bias"}),
    "dense_chain-1x67x896x3584-add-gelu": ("dense_chain", ((1, 67), 896, 3584), {"epilogue": "add-gelu"}),
    "dense_chain-227x1x896x2688-add": ("dense_chain", ((227, 1), 896, 2688), {"epilogue": "add"}),
    "dense_chain-1x173x1152x4608-add-gelu": ("dense_chain", ((1, 173), 1152, 4608), {"epilogue": "add-gelu"}),
    "batch_matmul-16x211x211x64-tb": ("batch_matmul", (16, 211, 211, 64), {"transpose_b": True}),
    "batch_matmul-16x211x64x211": ("batch_matmul", (16, 211, 64, 211), {}),
    # GPT-2's Conv1D layers: two-dimensional rows, the bias alone fused (its GELU is a reshape away)
    "dense_chain-96x1024x4096-bias": ("dense_chain", ((96,), 1024, 4096), {"epilogue": "bias"}),
    "dense_chain-96x4096x1024-bias": ("dense_chain", ((96,), 4096, 1024), {"epilogue": "bias"}),
    # ResNets' 3x3 stride-1 layers as a network runs them (Winograd on the transformed weight,
    # its epilogue fused, the weight from memory), tuned on an AVX-512 CPU: the models before had
    # learnt Winograd from bare operators timed warm, and picked 1.5x slower than the best of
    # their own 16 for ResNet-50's 7x7x512 layers; and a convolution in groups of 4 channels
    # (ResNeXt's are of 4 to 32)
    "winograd_chain-1x48x48x64x64-bias-relu": ("winograd_chain", (1, 48, 48, 64, 64), {"epilogue": "bias-relu"}),
    "winograd_chain-1x32x32x96x96-bias-relu": ("winograd_chain", (1, 32, 32, 96, 96), {"epilogue": "bias-relu"}),
    "winograd_chain-1x24x24x112x112-bias-residual-relu":
        ("winograd_chain", (1, 24, 24, 112, 112), {"epilogue": "bias-residual-relu"}),
    "winograd_chain-1x12x12x224x224-bias-relu": ("winograd_chain", (1, 12, 12, 224, 224), {"epilogue": "bias-relu"}),
    "winograd_chain-1x10x10x176x352-bias-relu": ("winograd_chain", (1, 10, 10, 176, 352), {"epilogue": "bias-relu"}),
    "winograd_chain-1x7x7x640x640-bias-residual-relu":
        ("winograd_chain", (1, 7, 7, 640, 640), {"epilogue": "bias-residual-relu"}),
    "conv2d_chain-1x48x48x96x96-k3g24-bias-relu":
        ("conv2d_chain", (1, 48, 48, 96, 96, 3, 1, 1, 24), {"epilogue": "bias-relu"}),
}

#: operator workloads by label: (operator, args, kwargs)
TRAINING_OPERATORS = {
    "dense-64x768x3072-bias": ("dense", (64, 768, 3072), {"bias": True}),
    "dense-1x1024x1000": ("dense", (1, 1024, 1000), {}),
    "softmax-64x500": ("softmax", ((64, 500),), {}),
    "softmax-8x128x128": ("softmax", ((8, 128, 128),), {}),
    "layer_norm-128x768": ("layer_norm", ((128, 768),), {}),
    "layer_norm-256x512": ("layer_norm", ((256, 512),), {}),
    # Winograd F(2x2, 3x3) (the networks' 3x3 stride-1 layers; records measured on the Zen 4 VM)
    "winograd-1x28x28x96x96": ("conv2d_winograd", (1, 28, 28, 96, 96), {}),
    "winograd-1x14x14x192x192": ("conv2d_winograd", (1, 14, 14, 192, 192), {}),
    "winograd-1x7x7x384x384": ("conv2d_winograd", (1, 7, 7, 384, 384), {}),
    # a residual block's 1x1 convolution with its bias, shortcut and ReLU fused (ResNets' most
    # frequent task; 3/4 of ResNet-50's channel counts; records measured on the Zen 4 VM, as
    # in a network: COLD_WEIGHT_TRAINING)
    "conv_residual-1x56x56x48x192-k1": ("conv_residual", (1, 56, 56, 48, 192, 1), {}),
    "conv_residual-1x28x28x96x384-k1": ("conv_residual", (1, 28, 28, 96, 384, 1), {}),
    "conv_residual-1x14x14x192x768-k1": ("conv_residual", (1, 14, 14, 192, 768, 1), {}),
    **MODEL_FAMILY_OPERATORS,
}

#: model-family workloads first tuned on an AVX-512 CPU only (their logs in
#: bench/data/training_records_avx512.tar.gz, which the AVX-512 model learnt); their AVX2
#: tunings, bench/data/training_records_avx2.tar.gz, the AVX2 model learnt
AVX512_ONLY_TRAINING = frozenset(("conv2d_chain-1x24x24x160x160-k3-bias-relu", "conv2d_chain-1x20x20x320x320-k3s2-bias-relu",
                                  "conv2d_chain-1x20x20x192x192-k3g8-bias-relu",
                                  "conv2d_chain-1x40x40x96x96-k3s2g4-bias-relu",
                                  "depthwise_chain-1x96x96x48-k3s2-bias-relu", "depthwise_chain-1x80x80x24-k3s1-bias",
                                  "depthwise_chain-1x40x40x44-k3s2-bias", "depthwise_chain-1x20x20x92-k3s1-bias",
                                  "conv2d_chain-1x40x40x44x44-k1-bias-relu", "conv2d_chain-1x20x20x92x92-k1-bias-relu",
                                  "conv2d_chain-1x10x10x184x184-k1-bias-relu",
                                  "conv2d_chain-1x48x48x20x44-k1-bias-relu",
                                  "conv2d_chain-1x5x5x368x1024-k1-bias-relu",
                                  "conv2d_chain-1x5x5x800x144-k1-bias-residual",
                                  "conv2d_chain-1x48x48x96x96-k3g24-bias-relu",
                                  *(label for label in MODEL_FAMILY_OPERATORS if label.startswith("winograd_chain"))))
#: training workloads that are a network's fused tasks (``ops.subgraphs``' chains and gates):
#: tuned as ``tune_networks`` tunes a model's tasks, with the layout rewrite of their weights
NETWORK_TASK_TRAINING = frozenset(label for label, (op, _, _) in TRAINING_OPERATORS.items()
                                  if op in ("dense_chain", "conv2d_chain", "depthwise_chain", "se_gate",
                                            "winograd_chain"))
#: training workloads timed as a network's tasks are (``LocalRunner(cold_constants=True)``:
#: weights evicted before each call, as a network whose weights exceed the last-level
#: cache runs them), so that the model also learns which programs stream weights well:
#: the zero-trial programs of such networks run so
COLD_WEIGHT_TRAINING = frozenset(label for label in TRAINING_OPERATORS
                                 if label.startswith("conv_residual")) | NETWORK_TASK_TRAINING


def training_workloads() -> dict[str, ops.Workload]:
    """Label -> workload of every training workload (the shipped models learnt those whose
    logs are in bench/data/training_records*.tar.gz)."""
    out = {name: ops.suite_workload(name) for name in TRAINING_SUITE_STYLE}
    for label, (op, args, kwargs) in TRAINING_OPERATORS.items():
        out[label] = ops.workload(op, *args, label=label, **kwargs)
    return out


@functools.lru_cache(maxsize=1)
def _known_dags() -> dict[str, ir.ComputeDAG]:
    """Workload key -> DAG of every workload autosched can name: the training workloads
    and the operator suite (built once per process, when a key is not otherwise found)."""
    dags = {}
    for w in [*training_workloads().values(), *(ops.suite_workload(n) for n in ops.suite_names())]:
        dag = ir.ComputeDAG(w.tensors)
        dags.setdefault(dag.workload_key(), dag)
    return dags


def rebuild_workload(key: str, desc: str = "") -> ir.ComputeDAG | None:
    """The DAG of workload ``key``: from ``desc`` when it is a suite-style name of that
    workload (``autosched tune NAME`` records it), else from the workloads autosched can
    name (``_known_dags``); None when neither has it (e.g. a network's task)."""
    if desc:
        try:
            dag = ir.ComputeDAG(ops.suite_workload(desc).tensors)
        except ValueError:
            dag = None
        if dag is not None and dag.workload_key() == key:
            return dag
    return _known_dags().get(key)


def training_programs(records: Iterable, *, on_skip=None) -> list[tuple]:
    """(task, state, cost seconds or None) of every record whose workload can be rebuilt
    and whose steps replay on it, one task per (workload, target); ``on_skip(record,
    why)`` is told of every other record. Re-timings (``retimed`` records) repeat a
    program that is already a trial and are left out."""
    tasks: dict[tuple, ir.SearchTask | None] = {}
    out = []
    for rec in records:
        if rec.retimed:
            continue
        ident = (rec.workload_key, rec.target, rec.layout_rewrite)
        if ident not in tasks:
            dag = rebuild_workload(rec.workload_key, rec.desc)
            hardware = hardware_from_record(rec.hardware)
            tasks[ident] = None if dag is None else ir.SearchTask(dag, target=rec.target, hardware=hardware,
                                                                   layout_rewrite=rec.layout_rewrite, desc=rec.desc)
        task = tasks[ident]
        if task is None:
            if on_skip:
                on_skip(rec, "its workload cannot be rebuilt from its key")
            continue
        try:
            state = rec.state(task.dag)
        except ir.InvalidStep as err:
            if on_skip:
                on_skip(rec, f"its steps do not replay ({err})")
            continue
        out.append((task, state, rec.mean_cost if rec.ok else None))
    return out


def hardware_from_record(fields) -> ir.HardwareParams | None:
    """The ``HardwareParams`` a record names, ignoring fields this version does not know (a
    newer autosched sharing the records database writes them); None when the record has
    none, or not all the fields this version needs."""
    if not isinstance(fields, dict):
        return None
    known = {f.name for f in dataclasses.fields(ir.HardwareParams)}
    try:
        return ir.HardwareParams(**{k: v for k, v in fields.items() if k in known})
    except (TypeError, ValueError):
        return None


#: the size of the base model: trees of this depth, at most this many (the shipped one is
#: ~1 MB; Ansor's online model, depth 10 and up to 10000 rounds, is 30 MB on these records)
MAX_DEPTH, MAX_ROUNDS = 6, 200
#: the base model's rank pairs are not weighted towards the fast programs (``ranking_pairs``)
TOP_WEIGHT = 0.0


def rank_model(seed: int = 0, rounds: int = MAX_ROUNDS, max_depth: int = MAX_DEPTH,
               verbose: bool = False, top_weight: float = TOP_WEIGHT,
               members: int = 1) -> XGBoostModel | XGBoostEnsemble:
    """An untrained model of the base model's kind: the rank objective (its pairs weighted
    towards the fast programs by ``top_weight``), at most ``rounds`` trees of depth
    ``max_depth``, trained at its first update; ``members`` > 1: an ensemble of that many,
    each trained on a bootstrap resample of the programs, that ranks by their mean."""
    settings = dict(num_warmup_sample=1, params={"max_depth": max_depth}, max_rounds=rounds, verbose=verbose,
                    top_weight=top_weight)
    if members > 1:
        return XGBoostEnsemble(members, "rank", seed=seed, **settings)
    return XGBoostModel(objective="rank", seed=seed, **settings)


def continued_model(start, seed: int = 0, rounds: int = MAX_ROUNDS, max_depth: int = MAX_DEPTH,
                    verbose: bool = False, top_weight: float = TOP_WEIGHT) -> XGBoostModel | XGBoostEnsemble:
    """A rank model whose training continues the trees of the trained model ``start`` (one
    model or an ensemble, each member its own) with at most ``rounds`` more trees of depth
    ``max_depth``: the base model of one CPU adapted to another by what that CPU's records
    say, without the records it learnt first."""
    if start.objective != "rank":
        raise ValueError(f"only a rank model can be continued as a base model; it is a {start.objective!r} one")
    return start.continued(seed=seed, num_warmup_sample=1, params={"max_depth": max_depth}, max_rounds=rounds,
                           verbose=verbose, top_weight=top_weight)


def pretrain(records: Iterable, seed: int = 0, rounds: int = MAX_ROUNDS, max_depth: int = MAX_DEPTH,
             verbose: bool = False, top_weight: float = TOP_WEIGHT, members: int = 1,
             start=None) -> tuple[XGBoostModel | XGBoostEnsemble, dict]:
    """A rank model trained on tuning ``records`` (``autosched.TuningRecord``s, e.g. the
    ``read_records`` of some logs), of at most ``rounds`` trees of depth ``max_depth``, its
    pairs weighted towards the fast programs by ``top_weight``, an ensemble of ``members``
    when more than one (``rank_model``); or, given a trained base model ``start``, that
    model with at most ``rounds`` more trees learnt from the records (``continued_model``;
    ``members`` is then ``start``'s).
    Returns it and what it was trained on: {"records", "programs", "workloads", "skipped":
    {why: count}}. ``ValueError`` when no record can be used."""
    records = list(records)
    skipped: dict[str, int] = {}

    def skip(rec, why):
        why = why.split(" (")[0]
        skipped[why] = skipped.get(why, 0) + 1

    programs = training_programs(records, on_skip=skip)
    if not any(cost is not None for _, _, cost in programs):
        raise ValueError(f"no usable record among {len(records)} record(s): "
                         f"{skipped or 'none is a valid measurement'}")
    model = (rank_model(seed, rounds, max_depth, verbose, top_weight, members) if start is None
             else continued_model(start, seed, rounds, max_depth, verbose, top_weight))
    model.update(programs)
    info = {"records": len(records), "programs": len(programs),
            "workloads": len({task.workload_key for task, _, _ in programs}), "skipped": skipped}
    return model, info


@functools.lru_cache(maxsize=8)
def _load(path: str) -> XGBoostModel | XGBoostEnsemble:
    data = read_bounded(path, "base cost model", MAX_BASE_MODEL_BYTES)
    if path.endswith(".json"):   # (XGBoost trusts its indices: a damaged tree crashes the process)
        members = [XGBoostModel.from_file(raw, objective="rank") for raw in checked_members(data, N_FEATURES)]
    elif not _is_shipped(path):
        raise ValueError("a base model given must be XGBoost's JSON format (.json), whose trees autosched checks "
                         "before XGBoost reads them")
    else:
        members = [XGBoostModel.from_file(path, objective="rank")]
    for model in members:
        got = model.booster.num_features() if model.booster is not None else None
        if got != N_FEATURES:   # (a model of other features fails at the first prediction, deep in a search)
            raise ValueError(f"it ranks programs by {got} features; this autosched's have {N_FEATURES}")
    return members[0] if len(members) == 1 else XGBoostEnsemble.from_members(members)


def cpu_maker(cpu: str | None = None) -> str:
    """"amd", "intel" or "other": who made the CPU that LLVM names ``cpu`` (None: this one).
    A CPU target's programs run on the machine that builds them, so this machine's maker
    is its tasks' maker."""
    if cpu is None:
        cpu = ir.Target.host().device
    if cpu.startswith(AMD_CPU_PREFIXES):
        return "amd"
    import llvmlite.binding as llvm
    return "intel" if llvm.get_default_triple().startswith(("x86_64", "i386", "i686")) else "other"


def shipped_model_path(hardware=None, cpu: str | None = None) -> str:
    """The shipped model for ``hardware`` (``ir.HardwareParams``; None: this CPU's) on a CPU
    that LLVM names ``cpu`` (None: this one): its maker's of its vector width, else the one
    of its vector width, else the AVX2 one."""
    if hardware is None:
        hardware = ir.Target.host().hardware
    lanes = getattr(hardware, "vector_lanes", None)
    return MAKER_MODELS.get((lanes, cpu_maker(cpu))) or SHIPPED_MODELS.get(lanes, SHIPPED_MODEL)


def _is_shipped(path: str) -> bool:
    return path in SHIPPED_MODELS.values() or path in MAKER_MODELS.values()


def base_model_path(spec="default", hardware=None) -> str | None:
    """The file of the base model ``spec`` names: "default" (``$AUTOSCHED_BASE_MODEL``, else
    the shipped model for ``hardware``'s vector width and this CPU's maker, this CPU's width
    when None: ``shipped_model_path``), a path, or None/"off" (no base model)."""
    return chosen_file(spec, ENV_VAR, lambda: shipped_model_path(hardware), "base cost model",
                       "autosched pretrain LOG... -o FILE")


def load_base_model(spec="default", hardware=None) -> XGBoostModel | XGBoostEnsemble | None:
    """The base model ``spec`` names for programs of ``hardware`` (see ``base_model_path``),
    or an ``XGBoostModel`` or ``XGBoostEnsemble`` given as it is; None for no base model.
    Loaded once per process and file."""
    if isinstance(spec, (XGBoostModel, XGBoostEnsemble)):
        return spec
    path = base_model_path(spec, hardware)
    if path is None:
        return None
    try:
        return _load(os.path.abspath(path))
    except Exception as err:  # xgboost's own error types vary by version
        why = f"the base cost model {path!r} cannot be read ({type(err).__name__}: {str(err)[:200]})"
        if not _is_shipped(os.path.abspath(path)):
            raise ValueError(f"{why}; expected a model file written by `autosched pretrain`") from None
        warnings.warn(f"autosched: {why}; going on without it", RuntimeWarning, stacklevel=2)
        return None
