"""Targets: what a program is tuned and compiled for, parsed once from a string.

A ``Target`` is a back end (``ir.backend.Backend``, registered by name), the device it
names (a CPU name such as "znver4", a GPU architecture such as "sm_90"; "" for the
back end's default) and the ``HardwareParams`` the search space depends on. Spellings:

- "llvm -mcpu=NAME", "llvm" or "cpu": this CPU (``ir.cpu``);
- "cuda -arch=sm_XX", "cuda" or "gpu": an NVIDIA GPU (``ir.cuda``).

Callers ask the target (``target.backend``, ``target.hardware``) what to do; nobody
compares target strings. A new target is a folder with a ``Backend`` and one call of
``register_backend``.
"""
from __future__ import annotations

import importlib
import os
from dataclasses import dataclass, replace


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
    #: loop iterations (of a stage, with the stages computed inside it) below which a CPU
    #: program runs the stage on one thread: waking the threads of a parallel region (a few
    #: microseconds) costs more than sharing so little work saves (``sketch_rules``' Parallel
    #: init rule and default schedules; the default schedules' earlier constant, not yet
    #: swept per kernel family)
    min_parallel_work: int = 1 << 16
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
        """This CPU's parameters (``Target.parse("llvm").hardware``)."""
        return Target.parse("llvm").hardware

    @classmethod
    def cuda(cls) -> "HardwareParams":
        """The first CUDA device's parameters, or the documented defaults without one
        (``Target.parse("cuda").hardware``)."""
        return Target.parse("cuda").hardware

    @property
    def is_gpu(self) -> bool:
        return self.max_threads_per_block > 0

    def with_host_cores(self) -> "HardwareParams":
        return replace(self, num_cores=os.cpu_count() or 1)


_BACKENDS: dict[str, object] = {}


def register_backend(backend) -> None:
    """Make ``backend`` (an ``ir.backend.Backend``) a target: its ``name`` and ``aliases``
    become spellings ``Target.parse`` accepts."""
    for word in (backend.name, *backend.aliases):
        if word in _BACKENDS and _BACKENDS[word] is not backend:
            raise ValueError(f"target name {word!r} is taken by {type(_BACKENDS[word]).__name__}")
        _BACKENDS[word] = backend


def target_names() -> list[str]:
    """Every first word ``Target.parse`` accepts."""
    return list(_BACKENDS)


@dataclass(frozen=True)
class Target:
    """A back end, the device it names and its hardware parameters (see the module)."""
    kind: str
    hardware: HardwareParams
    device: str = ""

    @classmethod
    def parse(cls, spec: "str | Target | None" = None, hardware: HardwareParams | None = None) -> "Target":
        """The target a string spells (None: this CPU); a Target is returned as it is
        (with ``hardware`` where given). Unknown names and options are errors that list
        what is accepted."""
        if isinstance(spec, Target):   # (new hardware goes through its back end's checks, as a string's)
            return spec if hardware is None else cls.parse(str(spec), hardware)
        if spec is None:
            spec = "llvm"
        if not isinstance(spec, str):
            raise TypeError(f"a target is a string such as 'llvm' or 'cuda' or an ir.Target, got {type(spec).__name__}")
        words = spec.split()
        backend = _BACKENDS.get(words[0]) if words else None
        if backend is None:
            raise ValueError(f"unknown target {spec!r}; expected one of {', '.join(map(repr, target_names()))} "
                             "(e.g. 'llvm -mcpu=znver4', 'cuda -arch=sm_90')")
        options = {}
        for word in words[1:]:
            key, eq, value = word.lstrip("-").partition("=")
            if not word.startswith("-") or not eq or not value:
                raise ValueError(f"target {spec!r}: option {word!r} is not of the form -key=value")
            options[key] = value
        return backend.parse(options, hardware)

    @classmethod
    def host(cls) -> "Target":
        """This machine's CPU."""
        return cls.parse("llvm")

    @property
    def backend(self):
        """The ``ir.backend.Backend`` that compiles and runs this target's programs."""
        backend = _BACKENDS.get(self.kind)
        if backend is None:
            raise ValueError(f"target kind {self.kind!r} has no back end in this process; expected one of "
                             f"{', '.join(map(repr, target_names()))} (import the module that registers it)")
        return backend

    def __str__(self) -> str:
        return self.backend.spelling(self)

    def __reduce__(self):
        """A pickled target names the module of its back end's class, so that a process
        that unpickles it (a measurement worker: a fresh interpreter) imports the back end
        first: a target registered outside ``ir`` measures as the built-in ones do."""
        return _unpickle_target, (self.kind, self.hardware, self.device, type(self.backend).__module__)

    def __repr__(self) -> str:
        return f"Target({str(self)!r})"


def _unpickle_target(kind: str, hardware: HardwareParams, device: str, module: str) -> Target:
    """``Target.__reduce__``'s inverse: the back end's module imported where it is missing
    (it, or its package, calls ``register_backend``)."""
    if kind not in _BACKENDS:
        importlib.import_module(module)
    return Target(kind, hardware, device)
