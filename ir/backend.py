"""The interface of a target's back end: what the search, measurement and the graph
executor ask of a target, so that none of them knows which target it is.

A back end lives in its own folder (``ir/cpu``, ``ir/cuda``) and registers one instance
with ``ir.target.register_backend``; ``Target.parse`` then accepts its name. It lowers,
generates code, compiles, loads, checks a program against the hardware's limits and
times it. What the LLVM back ends share is in ``ir.llvm_codegen`` and ``ir.lower``; a back
end never imports another back end's modules.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass


@dataclass
class TimeResult:
    """Per-call seconds: the median over repeats, and every repeat's mean."""
    median: float
    results: list[float]
    number: int

    @property
    def mean(self) -> float:
        return statistics.fmean(self.results)


class KernelSequence:
    """Kernels run in order on their arguments (a network): what ``Backend.sequence``
    returns. The caller writes the input arrays, ``write_inputs()``, ``run()`` (as often as
    it likes: what a benchmark times), ``read_outputs()``, then reads the output arrays.
    Where kernels run in host memory the arrays are theirs and the copies are no-ops."""

    def write_inputs(self) -> None:
        pass

    def run(self) -> None:
        raise NotImplementedError

    def read_outputs(self) -> None:
        pass


class Backend:
    """One target's compiler and runtime. Subclasses set the class attributes and
    implement the methods that raise ``NotImplementedError``."""

    #: the first word of the target's spelling ("llvm", "cuda")
    name: str = ""
    #: other first words accepted for it ("cpu" for "llvm", "gpu" for "cuda")
    aliases: tuple[str, ...] = ()
    #: the search configuration that tunes its programs (``sketch_rules.search_config``):
    #: "cpu" (multi-level tiling for caches and vector units) or "gpu" (thread binding,
    #: shared memory); a new target may reuse one or register its own
    search_space: str = ""
    #: whether programs may store constant inputs in the order they read them (``ir.layout``)
    layout_rewrite: bool = False
    #: whether the pre-trained base cost model (trained on this back end's programs) applies
    base_model: bool = False
    #: what ``build(..., emit=...)`` returns besides the callable kernel ("kernel")
    emits: tuple[str, ...] = ("kernel",)
    #: whether the runner may evict a program's constants from the CPU's caches before a
    #: timing (``RunOptions.cold_constants``): the data it reads lives in host memory
    host_memory: bool = False

    # targets ----------------------------------------------------------------------------
    def parse(self, options: dict[str, str], hardware):
        """The ``Target`` of this back end with ``options`` (``{"mcpu": "znver4"}`` from
        "-mcpu=znver4") on ``hardware`` (None: this machine's, or the documented default)."""
        raise NotImplementedError

    def spelling(self, target) -> str:
        """The canonical target string of ``target`` (what records store)."""
        raise NotImplementedError

    def foreign(self, target) -> str | None:
        """Why this machine cannot build or time ``target``'s programs, or None."""
        return None

    def require_device(self, target) -> None:
        """Raise (clearly) when this machine has no device to run ``target``'s programs."""

    # programs ---------------------------------------------------------------------------
    def limits_violation(self, state, hardware) -> str | None:
        """Why ``state`` cannot run within ``hardware``'s limits, or None (cheap: the
        search rejects candidates with it before measuring them)."""
        return None

    def lowering(self, state, hardware, layout_rewrite: bool):
        """The ``ir.lower.Lowering`` of ``state`` for this back end (what program features
        read), before code generation."""
        raise NotImplementedError

    def build(self, dag, state, name: str, target, emit: str, layout_rewrite: bool, objects=None):
        """``state`` of ``dag`` compiled for ``target``: a callable kernel, or what ``emit``
        names (see ``emits``). ``objects``: a store of compiled object code
        (``ir.cpu.object_key.ObjectStore``) that a back end compiling to object code loads
        from instead of compiling, and stores into; others do not consult it."""
        raise NotImplementedError

    def compile(self, target, state, name: str, layout_rewrite: bool) -> tuple[bytes, dict]:
        """The build artefact a measurement worker ships to the runner: (bytes, the layout
        plans of rewritten constants)."""
        raise NotImplementedError

    def load(self, dag, artefact: bytes, name: str, layouts: dict):
        """The kernel of a ``compile`` artefact, ready to call."""
        raise NotImplementedError

    def timer(self, kernel, *arrays):
        """``run(n) -> seconds`` for ``n`` back-to-back calls of ``kernel`` on ``arrays``."""
        raise NotImplementedError

    def breaks_process(self, exc: BaseException) -> bool:
        """Whether ``exc``, raised by a kernel, leaves this process unable to run further
        programs (a measurement worker then ends itself, and is replaced)."""
        return False

    def sequence(self, calls, inputs, outputs, emulate: bool = False) -> KernelSequence:
        """``calls`` (``(kernel, arrays)`` pairs) as one ``KernelSequence``; ``inputs``: the
        arrays written before a run, ``outputs``: those read after it. ``emulate``: run on
        this CPU instead of the device (for back ends with an emulator)."""
        raise NotImplementedError
