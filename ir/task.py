"""A search task: one computation, the machine it is tuned for and how its programs build.

A task carries its target ("llvm -mcpu=NAME" for the host CPU, "cuda -arch=sm_XX" for an
NVIDIA GPU) and that target's hardware parameters; sketch rules, features, mutations and
runners ask the task, never a global.
"""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field

from .runtime import host_cpu

#: what a cuda task assumes when no GPU is present (an NVIDIA H100: compute capability 9.0,
#: 132 SMs; 48 KiB is the static shared memory a block may declare on every CUDA GPU)
CUDA_DEFAULTS = {"compute_capability": "sm_90", "max_threads_per_block": 1024,
                 "max_shared_memory_per_block": 48 * 1024, "warp_size": 32, "num_sms": 132}


@dataclass(frozen=True)
class HardwareParams:
    """What the search space depends on: cores (parallel granularity; on a GPU task, the
    host's cores, which run the search), the widest float32 vector (vectorisation), limits
    Ansor uses for tile sizes, and for a GPU the limits of a thread block (0 on a CPU)."""
    num_cores: int
    vector_lanes: int
    cache_line_bytes: int = 64
    max_innermost_split_factor: int = 64
    #: Ansor uses 16; our code generator emits a longer vector loop as unrolled 16-lane chunks,
    #: which is how a register tile wider than one vector gets vectorised
    max_vectorize_size: int = 64
    # GPU (cuda target)
    max_threads_per_block: int = 0
    max_shared_memory_per_block: int = 0
    warp_size: int = 0
    #: the largest virtual-thread tile (Ansor's default 8)
    max_vthread_extent: int = 0
    num_sms: int = 0
    #: "sm_90": the PTX target of generated code
    compute_capability: str = ""

    @classmethod
    def host(cls) -> "HardwareParams":
        _, features = host_cpu()
        lanes = 16 if "+avx512f" in features else 8 if "+avx" in features else 4
        return cls(num_cores=os.cpu_count() or 1, vector_lanes=lanes)

    @classmethod
    def cuda(cls, device: int = 0) -> "HardwareParams":
        """The parameters of CUDA device ``device``, read from it when one is present
        (cuda-python and a driver), else ``CUDA_DEFAULTS`` (an H100)."""
        return _cuda_params(device)

    @property
    def is_gpu(self) -> bool:
        return self.max_threads_per_block > 0


@functools.lru_cache(maxsize=8)
def _cuda_params(device: int) -> HardwareParams:
    from .cuda_runtime import device_attributes
    got = device_attributes(device) or {}
    values = {key: got.get(key, default) for key, default in CUDA_DEFAULTS.items()}
    # the search runs on the host: its islands use the host's cores
    return HardwareParams(num_cores=os.cpu_count() or 1, vector_lanes=1, max_vthread_extent=8, **values)


def host_target() -> str:
    name, _ = host_cpu()
    return f"llvm -mcpu={name}"


def target_kind(target: str) -> str:
    """"gpu" for a cuda target ("cuda", "cuda -arch=sm_90"), "cpu" for the host ("llvm
    -mcpu=...", "llvm", "cpu")."""
    head = str(target).split()[0] if str(target).strip() else ""
    if head == "cuda":
        return "gpu"
    if head in ("llvm", "cpu"):
        return "cpu"
    raise ValueError(f"unknown target {target!r}; expected 'cuda' (an NVIDIA GPU) or 'llvm'/'cpu' (this CPU)")


@dataclass(frozen=True, eq=False)
class SearchTask:
    """The unit of tuning: a ComputeDAG on a target (default: this CPU; ``target="cuda"``:
    an NVIDIA GPU, with ``HardwareParams.cuda()``). ``layout_rewrite`` lets programs store
    constant inputs in the order they are read (see ``ir.layout``; CPU only: a cuda task
    keeps its inputs as given)."""
    dag: object
    target: str = field(default=None)
    hardware: HardwareParams = field(default=None)
    layout_rewrite: bool = True
    desc: str = ""

    def __post_init__(self):
        target = self.target if self.target is not None else host_target()
        kind = target_kind(target)
        hardware = self.hardware
        if hardware is None:
            hardware = HardwareParams.cuda() if kind == "gpu" else HardwareParams.host()
        if kind == "gpu":
            if not hardware.is_gpu:
                raise ValueError(f"target {target!r} needs GPU hardware parameters (HardwareParams.cuda()), "
                                 f"got {hardware}")
            target = f"cuda -arch={hardware.compute_capability}"
        object.__setattr__(self, "target", target)
        object.__setattr__(self, "hardware", hardware)
        object.__setattr__(self, "layout_rewrite", bool(self.layout_rewrite) and kind == "cpu")

    @property
    def target_kind(self) -> str:
        """"cpu" or "gpu": which sketch rules, annotation rules and code generator apply."""
        return target_kind(self.target)

    @property
    def workload_key(self) -> str:
        return self.dag.workload_key()

    def __repr__(self) -> str:
        return f"SearchTask({self.desc or self.workload_key}, target={self.target!r})"
