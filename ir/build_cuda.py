"""``ir.build(..., target="cuda")``: lower a State for the GPU, generate NVPTX LLVM IR and
PTX (llvmlite), and wrap it in a ``CudaKernel`` that runs on the device when called."""
from __future__ import annotations

from .codegen import nvptx
from .cuda_runtime import CudaKernel, LaunchPlan
from .lower_gpu import lower_gpu
from .task import HardwareParams

EMITS = ("kernel", "ptx", "llvm")


def cuda_arch(target: str, hardware: HardwareParams) -> str:
    """The compute capability of a cuda target string ("cuda -arch=sm_80"), else the
    hardware's (the device's, or the documented default)."""
    for part in str(target).split()[1:]:
        if part.startswith("-arch="):
            return part[len("-arch="):]
    return hardware.compute_capability


def build_cuda(dag, state, name: str, target: str = "cuda", emit: str = "kernel",
               hardware: HardwareParams | None = None):
    """The program ``state`` of ``dag`` (default: the naive one, one thread per kernel)
    for the cuda target: a ``CudaKernel``, or with ``emit="ptx"``/``"llvm"`` the PTX or
    NVPTX LLVM IR text (no GPU needed for those)."""
    if emit not in EMITS:
        raise ValueError(f"emit must be one of {EMITS}, got {emit!r}")
    hardware = hardware or HardwareParams.cuda()
    state = dag.init_state() if state is None else state
    program = lower_gpu(state, name, hardware, f"cuda -arch={cuda_arch(target, hardware)}")
    text = nvptx.generate(program)
    if emit == "llvm":
        return text
    ptx = nvptx.compile_ptx(text, cuda_arch(target, hardware))
    if emit == "ptx":
        return ptx
    return CudaKernel(dag, state, LaunchPlan.of(program), ptx, text, program)
