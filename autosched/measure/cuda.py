"""Measurement on the cuda target: what ``jobs.build_job`` and ``jobs.run_job`` do for a
task whose target is an NVIDIA GPU.

The builder (a CPU worker process) lowers the program, generates PTX (llvmlite) and, when
``ptxas`` is on the PATH, assembles it, so that the single runner does not spend its time
on the driver's JIT; the artefact is the PTX, the cubin and the launch plan. The runner
(a worker process with a CUDA context) loads it through the driver API, copies the
verification inputs to the device, runs the program once and checks its outputs against
the CPU reference, then times it with CUDA events. A kernel that faults leaves the
context unusable: the worker then ends itself after saying why, and the pool records the
program as a runtime error and starts a fresh worker.
"""
from __future__ import annotations

import os
import pickle
import sys

from ir.build_cuda import cuda_arch
from ir.codegen import nvptx
from ir.cuda_runtime import RECOVERABLE_ERRORS, CudaError, CudaKernel, LaunchPlan
from ir.lower_gpu import lower_gpu

#: the exit status of a runner worker that ended itself after a kernel fault
FAULT_EXIT_STATUS = 70


def build_cuda_object(task, state, name: str) -> bytes:
    """The build artefact of ``state`` for ``task``: pickled (PTX, cubin or None, plan)."""
    arch = cuda_arch(task.target, task.hardware)
    program = lower_gpu(state, name, task.hardware, task.target)
    ptx = nvptx.compile_ptx(nvptx.generate(program), arch)
    cubin = nvptx.assemble(ptx, arch)
    return pickle.dumps((ptx, cubin, LaunchPlan.of(program)), protocol=pickle.HIGHEST_PROTOCOL)


class MeasuredCudaKernel(CudaKernel):
    """A ``CudaKernel`` in a runner worker: a driver error that breaks the context ends
    the process (see the module docstring) instead of failing every later program."""

    def __call__(self, *arrays):
        return self._guard(super().__call__, *arrays)

    def timer(self, *arrays):
        run = self._guard(super().timer, *arrays)
        return lambda n: self._guard(run, n)

    @staticmethod
    def _guard(fn, *args):
        try:
            return fn(*args)
        except CudaError as err:
            if err.name in RECOVERABLE_ERRORS:
                raise
            print(f"autosched: the program broke the CUDA context ({err}); this runner process ends",
                  file=sys.stderr, flush=True)
            os._exit(FAULT_EXIT_STATUS)


def load_cuda_kernel(dag, obj: bytes) -> CudaKernel:
    """The kernel of a build artefact, loaded on the device (a faulty module fails here)."""
    ptx, cubin, plan = pickle.loads(obj)
    kernel = MeasuredCudaKernel(dag, None, plan, ptx, cubin=cubin)
    kernel.load()
    return kernel
