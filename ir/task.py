"""A search task: one computation, the machine it is tuned for and how its programs build.

A task carries its ``ir.Target`` (the host CPU, an NVIDIA GPU...) and that target's
hardware parameters; sketch rules, features, mutations and runners ask the task's
target, never a global and never its spelling.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .target import HardwareParams, Target


def host_target() -> str:
    """This CPU's target string ("llvm -mcpu=znver4")."""
    return str(Target.host())


@dataclass(frozen=True, eq=False)
class SearchTask:
    """The unit of tuning: a ComputeDAG on a target (an ``ir.Target`` or its spelling,
    parsed; default: this CPU; ``target="cuda"``: an NVIDIA GPU). ``hardware`` overrides the
    target's parameters. ``layout_rewrite`` lets programs store constant inputs in the
    order they are read (see ``ir.layout``; where the back end supports it: a cuda task
    keeps its inputs as given)."""
    dag: object
    target: Target = field(default=None)
    hardware: HardwareParams = field(default=None)
    layout_rewrite: bool = True
    desc: str = ""

    def __post_init__(self):
        target = Target.parse(self.target, self.hardware)
        object.__setattr__(self, "target", target)
        object.__setattr__(self, "hardware", target.hardware)
        object.__setattr__(self, "layout_rewrite", bool(self.layout_rewrite) and target.backend.layout_rewrite)

    @property
    def workload_key(self) -> str:
        return self.dag.workload_key()

    def __repr__(self) -> str:
        return f"SearchTask({self.desc or self.workload_key}, target={self.target!r})"
