"""``ir.build``: from a ComputeDAG (and optionally a State) to a callable native Kernel."""
from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar

from .target import Target


def build(dag, state=None, name: str = "autosched_kernel", layout_rewrite: bool | None = None,
          target=None, emit: str = "kernel", objects=None):
    """Lower ``state`` (default: the naive program of ``dag``) and compile it for ``target``
    (an ``ir.Target`` or its spelling; default this CPU: LLVM IR optimised at O3 for the
    host CPU and JIT-compiled into a ``Kernel``).

    ``target="cuda"`` builds for an NVIDIA GPU (``ir.cuda``): a ``CudaKernel``, or the PTX
    with ``emit="ptx"`` (no GPU needed) or the NVPTX LLVM IR with ``emit="llvm"``. Layout
    rewrite applies where the target's back end supports it (the CPU's).

    With ``layout_rewrite``, constant inputs (``placeholder(..., constant=True)``) are stored
    in the order the program reads them: the kernel then takes the packed array, made once
    with ``kernel.pack(name, array)``, in that argument's place.

    ``objects``: a store of compiled kernels (``get(key)``/``put(key, bytes)``, e.g. the
    records database's ``autosched.history.object_cache.ObjectCache``): the CPU back end
    loads the kernel's object code from it when it has it (no lowering, no LLVM) and
    stores what it compiles, under a key of everything that decides the code
    (``ir.cpu.object_key``).

    With no ``state`` and the host CPU's target, a schedule provider installed by ``build_with`` (e.g. under
    ``autosched.apply_history_best``) may supply the program and its ``layout_rewrite``."""
    from .dag import ComputeDAG
    if not isinstance(dag, ComputeDAG):
        raise TypeError(f"build expects an ir.ComputeDAG, got {type(dag).__name__}")
    if state is not None and state.dag is not dag:
        raise ValueError("the state was made from another ComputeDAG than the one given to build")
    target = Target.parse(target)
    backend = target.backend
    if state is None and target == Target.host():  # (providers answer with this CPU's programs)
        state, provided_rewrite = _provided_program(dag)
        layout_rewrite = provided_rewrite if layout_rewrite is None else layout_rewrite
    elif state is None:
        state = dag.init_state()
    if layout_rewrite and not backend.layout_rewrite:
        raise ValueError(f"layout_rewrite=True does not apply to target {str(target)!r}: its kernels take the "
                         "inputs as given")
    return backend.build(dag, state, name, target, emit, bool(layout_rewrite), objects)


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
