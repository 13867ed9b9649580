"""``ir.build``: from a ComputeDAG (and optionally a State) to a callable native Kernel."""
from __future__ import annotations

from .codegen import generate
from .lower import lower
from .runtime import CompiledModule, Kernel


def build(dag, state=None, name: str = "autosched_kernel", layout_rewrite: bool = False) -> Kernel:
    """Lower ``state`` (default: the naive program of ``dag``), generate LLVM IR, optimise it
    at O3 for the host CPU and JIT-compile it.

    With ``layout_rewrite``, constant inputs (``placeholder(..., constant=True)``) are stored
    in the order the program reads them: the kernel then takes the packed array, made once
    with ``kernel.pack(name, array)``, in that argument's place."""
    from .dag import ComputeDAG
    if not isinstance(dag, ComputeDAG):
        raise TypeError(f"build expects an ir.ComputeDAG, got {type(dag).__name__}")
    if state is None:
        state = dag.init_state()
    elif state.dag is not dag:
        raise ValueError("the state was made from another ComputeDAG than the one given to build")
    lowered = lower(state, name, layout_rewrite)
    text = generate(lowered, name)
    return Kernel(dag, state, lowered, text, CompiledModule(text, name))
