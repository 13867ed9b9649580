"""``ir.build``: from a ComputeDAG (and optionally a State) to a callable native Kernel."""
from __future__ import annotations

from .codegen import generate
from .lower import lower
from .runtime import CompiledModule, Kernel


def build(dag, state=None, name: str = "autosched_kernel") -> Kernel:
    """Lower ``state`` (default: the naive program of ``dag``), generate LLVM IR, optimise it
    at O3 for the host CPU and JIT-compile it."""
    from .dag import ComputeDAG
    if not isinstance(dag, ComputeDAG):
        raise TypeError(f"build expects an ir.ComputeDAG, got {type(dag).__name__}")
    if state is None:
        state = dag.init_state()
    elif state.dag is not dag:
        raise ValueError("the state was made from another ComputeDAG than the one given to build")
    lowered = lower(state, name)
    text = generate(lowered, name)
    return Kernel(dag, state, lowered, text, CompiledModule(text, name))
