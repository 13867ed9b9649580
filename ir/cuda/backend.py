"""The NVIDIA GPU back end ("cuda -arch=sm_XX"): GPU lowering (``ir.cuda.lower``), NVPTX
LLVM IR and PTX from llvmlite (``ir.cuda.codegen``), a cubin from ``ptxas`` where it is
installed, and a ``CudaKernel`` run through the driver API (``ir.cuda.runtime``).

Without a GPU, PTX is still generated (``ir.build(..., target="cuda", emit="ptx")``) and
the hardware parameters are an H100's (``CUDA_DEFAULTS``)."""
from __future__ import annotations

import functools
import pickle
import re
from dataclasses import replace

from ..backend import Backend
from ..target import HardwareParams, Target
from . import codegen
from .lower import GPULowering, block_limits_violation, lower_gpu
from .sequence import DeviceSequence, EmulatedSequence
from .runtime import RECOVERABLE_ERRORS, CudaError, CudaKernel, LaunchPlan, device_attributes, require_device_present

#: what a cuda target assumes when no GPU is present (an NVIDIA H100: compute capability 9.0,
#: 132 SMs; 48 KiB is the static shared memory a block may declare on every CUDA GPU)
CUDA_DEFAULTS = {"compute_capability": "sm_90", "max_threads_per_block": 1024,
                 "max_shared_memory_per_block": 48 * 1024, "warp_size": 32, "num_sms": 132}


@functools.lru_cache(maxsize=8)
def device_hardware(device: int = 0) -> HardwareParams:
    """The parameters of CUDA device ``device``, read from it when one is present
    (cuda-python and a driver), else ``CUDA_DEFAULTS`` (an H100)."""
    got = device_attributes(device) or {}
    values = {key: got.get(key, default) for key, default in CUDA_DEFAULTS.items()}
    # the search runs on the host: its islands use the host's cores
    return HardwareParams(num_cores=1, vector_lanes=1, max_vthread_extent=8, **values).with_host_cores()


class CudaBackend(Backend):
    name = "cuda"
    aliases = ("gpu",)
    search_space = "gpu"
    emits = ("kernel", "ptx", "llvm")

    def parse(self, options: dict[str, str], hardware) -> Target:
        unknown = set(options) - {"arch"}
        if unknown:
            raise ValueError(f"target 'cuda' takes -arch=sm_XX only, got -{sorted(unknown)[0]}")
        hardware = hardware or device_hardware()
        if not hardware.is_gpu:
            raise ValueError(f"target 'cuda' needs GPU hardware parameters (ir.Target.parse('cuda').hardware), "
                             f"got {hardware}")
        arch = options.get("arch") or hardware.compute_capability
        if not re.fullmatch(r"sm_\d+a?", arch):
            raise ValueError(f"target 'cuda': -arch={arch} is not a compute capability such as sm_80 or sm_90a")
        return Target(self.name, replace(hardware, compute_capability=arch), arch)

    def spelling(self, target: Target) -> str:
        return f"cuda -arch={target.device}"

    def require_device(self, target) -> None:
        require_device_present()

    def limits_violation(self, state, hardware) -> str | None:
        return block_limits_violation(state, hardware)

    def lowering(self, state, hardware, layout_rewrite: bool) -> GPULowering:
        """Refuses (``LoweringError``) a program over ``hardware``'s limits of a block."""
        return GPULowering(state, hardware)

    def build(self, dag, state, name: str, target, emit: str, layout_rewrite: bool, objects=None):
        # (``objects`` is not consulted: the CUDA driver compiles the PTX when it loads it)
        if emit not in self.emits:
            raise ValueError(f"emit must be one of {self.emits}, got {emit!r}")
        program = lower_gpu(state, name, target.hardware, str(target))
        text = codegen.generate(program)
        if emit not in ("kernel", "ptx"):  # the NVPTX LLVM IR
            return text
        ptx = codegen.compile_ptx(text, target.device)
        if emit != "kernel":
            return ptx
        return CudaKernel(dag, state, LaunchPlan.of(program), ptx, text, program)

    def compile(self, target, state, name: str, layout_rewrite: bool) -> tuple[bytes, dict]:
        """Pickled (PTX, cubin or None, launch plan): a builder (a CPU worker) assembles the
        PTX where ``ptxas`` is installed, so that the single runner does not spend its time
        on the driver's JIT."""
        program = lower_gpu(state, name, target.hardware, str(target))
        ptx = codegen.compile_ptx(codegen.generate(program), target.device)
        cubin = codegen.assemble(ptx, target.device)
        return pickle.dumps((ptx, cubin, LaunchPlan.of(program)), protocol=pickle.HIGHEST_PROTOCOL), {}

    def load(self, dag, artefact: bytes, name: str, layouts: dict) -> CudaKernel:
        """Loaded on the device (a faulty module fails here)."""
        ptx, cubin, plan = pickle.loads(artefact)
        kernel = CudaKernel(dag, None, plan, ptx, cubin=cubin)
        kernel.load()
        return kernel

    def timer(self, kernel, *arrays):
        return kernel.timer(*arrays)

    def sequence(self, calls, inputs, outputs, emulate: bool = False):
        if emulate:
            return EmulatedSequence(calls)
        return DeviceSequence(calls, inputs, outputs)

    def breaks_process(self, exc: BaseException) -> bool:
        """A kernel fault leaves the CUDA context unusable: the process must end."""
        return isinstance(exc, CudaError) and exc.name not in RECOVERABLE_ERRORS


CUDA = CudaBackend()
