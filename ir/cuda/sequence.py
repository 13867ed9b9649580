"""Kernels of a network run in order on the GPU (``Backend.sequence`` of the cuda target).

Every distinct host array of the calls (by address and size: a reshape is the same array)
gets one device buffer, and every kernel its own device buffers between its stages; the
arrays are copied to the device once when the sequence is made (the weights), the inputs
at ``write_inputs``, the outputs back at ``read_outputs``: a ``run`` is launches only.
``EmulatedSequence`` runs the same kernels on the CPU (``ir.cuda.emulator``) instead.
"""
from __future__ import annotations

import numpy as np

from ..backend import KernelSequence
from .runtime import DeviceBuffer


def _key(array: np.ndarray) -> tuple[int, int]:
    return array.ctypes.data, array.nbytes


class DeviceSequence(KernelSequence):
    def __init__(self, calls, inputs, outputs):
        self._device: dict[tuple, tuple[np.ndarray, DeviceBuffer]] = {}
        self._launches = []
        for kernel, args in calls:
            kernel.load()
            buffers = {t.name: self._buffer(a) for t, a in zip(kernel.dag.tensors, args)}
            for name, dtype, n in kernel.plan.buffers[len(args):]:  # the program's own global buffers
                buffers[name] = DeviceBuffer(n * np.dtype(dtype).itemsize)
            self._launches.append((kernel, buffers))
        for array, buffer in self._device.values():
            buffer.upload(array)
        self._inputs = [(a, self._buffer(a)) for a in inputs]
        self._outputs = [(a, self._buffer(a)) for a in outputs]

    def _buffer(self, array: np.ndarray) -> DeviceBuffer:
        key = _key(array)
        if key not in self._device:
            self._device[key] = (array, DeviceBuffer(array.nbytes))
        return self._device[key][1]

    def write_inputs(self) -> None:
        for array, buffer in self._inputs:
            buffer.upload(array)

    def run(self) -> None:
        for kernel, buffers in self._launches:
            kernel.launch(buffers)
        if self._launches:
            self._launches[-1][0].synchronize()

    def read_outputs(self) -> None:
        for array, buffer in self._outputs:
            buffer.download(array)


class EmulatedSequence(KernelSequence):
    """The kernels emulated one after another on the host arrays themselves."""

    def __init__(self, calls):
        self._calls = [(kernel, args) for kernel, args in calls]

    def run(self) -> None:
        for kernel, args in self._calls:
            kernel.emulate(*args)
