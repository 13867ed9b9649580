"""``ir.build``: from a ComputeDAG (and optionally a State) to a callable native Kernel."""
from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar

from .codegen import generate
from .lower import lower
from .runtime import CompiledModule, Kernel
from .task import target_kind


def build(dag, state=None, name: str = "autosched_kernel", layout_rewrite: bool | None = None,
          target: str | None = None, emit: str = "kernel"):
    """Lower ``state`` (default: the naive program of ``dag``), generate LLVM IR, optimise it
    at O3 for the host CPU and JIT-compile it.

    ``target="cuda"`` builds for an NVIDIA GPU instead (``ir.build_cuda``): a
    ``CudaKernel``, or the PTX with ``emit="ptx"`` (no GPU needed) or the NVPTX LLVM IR
    with ``emit="llvm"``; layout rewrite and schedule providers are CPU-only.

    With ``layout_rewrite``, constant inputs (``placeholder(..., constant=True)``) are stored
    in the order the program reads them: the kernel then takes the packed array, made once
    with ``kernel.pack(name, array)``, in that argument's place.

    With no ``state``, a schedule provider installed by ``build_with`` (e.g. under
    ``autosched.apply_history_best``) may supply the program and its ``layout_rewrite``."""
    from .dag import ComputeDAG
    if not isinstance(dag, ComputeDAG):
        raise TypeError(f"build expects an ir.ComputeDAG, got {type(dag).__name__}")
    if state is not None and state.dag is not dag:
        raise ValueError("the state was made from another ComputeDAG than the one given to build")
    if target is not None and target_kind(target) == "gpu":
        from .build_cuda import build_cuda
        return build_cuda(dag, state, name, target, emit)
    if emit != "kernel":
        raise ValueError(f"emit={emit!r} is for target='cuda'; a CPU build returns a Kernel")
    if state is None:
        state, provided_rewrite = _provided_program(dag)
        layout_rewrite = provided_rewrite if layout_rewrite is None else layout_rewrite
    lowered = lower(state, name, bool(layout_rewrite))
    text = generate(lowered, name)
    return Kernel(dag, state, lowered, text, CompiledModule(text, name))


# Schedule providers (e.g. autosched.apply_history_best): consulted by ``build`` when no
# state is given. ``ir`` cannot import ``autosched``; the provider is handed in instead.

_providers: ContextVar[tuple] = ContextVar("ir_build_providers", default=())


@contextmanager
def build_with(provider):
    """Within the block, ``ir.build(dag)`` without a state asks ``provider(dag)`` for the
    program: it returns ``(state, layout_rewrite)`` (a State of ``dag``), or None to leave
    the choice to an outer provider and finally to the naive program. Blocks nest; the
    innermost provider is asked first."""
    if not callable(provider):
        raise TypeError(f"build_with expects a callable provider(dag), got {type(provider).__name__}")
    token = _providers.set(_providers.get() + (provider,))
    try:
        yield provider
    finally:
        _providers.reset(token)


def _provided_program(dag):
    """``(state, layout_rewrite)`` from the innermost provider that answers, else naive."""
    for provider in reversed(_providers.get()):
        got = provider(dag)
        if got is not None:
            state, rewrite = got
            if state.dag is not dag:
                raise ValueError(f"schedule provider {provider!r} returned a state of another ComputeDAG")
            return state, bool(rewrite)
    return dag.init_state(), False
