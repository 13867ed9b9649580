"""A search task: one computation, the machine it is tuned for and how its programs build."""
from __future__ import annotations

import os
from dataclasses import dataclass, field

from .runtime import host_cpu


@dataclass(frozen=True)
class HardwareParams:
    """What the search space depends on: cores (parallel granularity), the widest float32
    vector (vectorisation), limits Ansor uses for tile sizes."""
    num_cores: int
    vector_lanes: int
    cache_line_bytes: int = 64
    max_innermost_split_factor: int = 64
    #: Ansor uses 16; our code generator emits a longer vector loop as unrolled 16-lane chunks,
    #: which is how a register tile wider than one vector gets vectorised
    max_vectorize_size: int = 64

    @classmethod
    def host(cls) -> "HardwareParams":
        _, features = host_cpu()
        lanes = 16 if "+avx512f" in features else 8 if "+avx" in features else 4
        return cls(num_cores=os.cpu_count() or 1, vector_lanes=lanes)


def host_target() -> str:
    name, _ = host_cpu()
    return f"llvm -mcpu={name}"


@dataclass(frozen=True, eq=False)
class SearchTask:
    """The unit of tuning: a ComputeDAG on a target. ``layout_rewrite`` lets programs store
    constant inputs in the order they are read (see ``ir.layout``)."""
    dag: object
    target: str = field(default_factory=host_target)
    hardware: HardwareParams = field(default_factory=HardwareParams.host)
    layout_rewrite: bool = True
    desc: str = ""

    @property
    def workload_key(self) -> str:
        return self.dag.workload_key()

    def __repr__(self) -> str:
        return f"SearchTask({self.desc or self.workload_key}, target={self.target!r})"
