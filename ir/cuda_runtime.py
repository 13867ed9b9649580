"""Running generated PTX on an NVIDIA GPU through the CUDA driver API (cuda-python's
``cuda.bindings.driver``): no nvcc and no CUDA toolkit at run time, only the driver.

``cuModuleLoadData`` JIT-compiles the PTX for the device, ``cuLaunchKernel`` runs each
kernel of a program in order on one stream, CUDA events time them. cuda-python is an
optional dependency (``pip install 'autosched[cuda]'``), imported here on first use; on
a machine without it, without a driver or without a device, the functions that need
the device raise ``NoCudaDevice`` (PTX generation works everywhere).
"""
from __future__ import annotations

import statistics
import threading

import numpy as np

from .runtime import TimeResult

_lock = threading.Lock()
_context: dict = {}  # device ordinal -> primary context, made current in this process


class NoCudaDevice(RuntimeError):
    """The cuda target needs an NVIDIA GPU (and cuda-python) to run programs."""


class CudaError(RuntimeError):
    """A CUDA driver call failed; the message names the call and the driver's error."""


def driver():
    """The ``cuda.bindings.driver`` module (NoCudaDevice when cuda-python is missing)."""
    try:
        from cuda.bindings import driver as cu
    except ImportError as err:
        raise NoCudaDevice("target 'cuda': cuda-python is not installed (pip install 'autosched[cuda]'); "
                           f"PTX can still be generated: ir.build(dag, state, target='cuda', emit='ptx') ({err})") \
            from None
    return cu


def call(what: str, result):
    """Check a driver call's result tuple ``(CUresult, values...)``; return the values (one
    value alone, None for none)."""
    cu = driver()
    err, *values = result if isinstance(result, tuple) else (result,)
    if err != cu.CUresult.CUDA_SUCCESS:
        _, name = cu.cuGetErrorName(err)
        _, text = cu.cuGetErrorString(err)
        name = name.decode() if isinstance(name, bytes) else name
        text = text.decode() if isinstance(text, bytes) else text
        raise CudaError(f"{what} failed: {name} ({text})")
    return values[0] if len(values) == 1 else (tuple(values) if values else None)


def _init() -> int:
    """cuInit and the number of devices (NoCudaDevice if there is no driver or device)."""
    cu = driver()
    try:
        err, = cu.cuInit(0)
    except Exception as exc:  # noqa: BLE001 - the driver library itself is missing
        raise NoCudaDevice(f"target 'cuda': no CUDA device found (the NVIDIA driver could not be loaded: "
                           f"{type(exc).__name__}: {exc}); PTX can still be generated with "
                           "ir.build(dag, state, target='cuda', emit='ptx')") from None
    if err != cu.CUresult.CUDA_SUCCESS:
        raise NoCudaDevice(f"target 'cuda': no CUDA device found (cuInit: {err.name}); PTX can still be "
                           "generated with ir.build(dag, state, target='cuda', emit='ptx')")
    count = call("cuDeviceGetCount", cu.cuDeviceGetCount())
    if count < 1:
        raise NoCudaDevice("target 'cuda': no CUDA device found (the driver reports 0 devices)")
    return count


def require_device(ordinal: int = 0):
    """Make device ``ordinal``'s primary context current in this thread (once per process)
    and return it; NoCudaDevice when there is none."""
    with _lock:
        ctx = _context.get(ordinal)
        if ctx is None:
            count = _init()
            if not 0 <= ordinal < count:
                raise NoCudaDevice(f"target 'cuda': no CUDA device {ordinal} (the driver reports {count})")
            cu = driver()
            dev = call("cuDeviceGet", cu.cuDeviceGet(ordinal))
            ctx = _context[ordinal] = call("cuDevicePrimaryCtxRetain", cu.cuDevicePrimaryCtxRetain(dev))
        call("cuCtxSetCurrent", driver().cuCtxSetCurrent(ctx))
        return ctx


def device_attributes(ordinal: int = 0) -> dict | None:
    """The limits the search needs of device ``ordinal`` (compute capability, threads and
    shared memory per block, warp size, SM count), or None without cuda-python, driver or
    device."""
    try:
        _init()
        cu = driver()
        dev = call("cuDeviceGet", cu.cuDeviceGet(ordinal))
    except (NoCudaDevice, CudaError):
        return None
    A = cu.CUdevice_attribute

    def attr(name):
        return int(call("cuDeviceGetAttribute", cu.cuDeviceGetAttribute(getattr(A, name), dev)))

    major, minor = attr("CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR"), attr("CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR")
    name = call("cuDeviceGetName", cu.cuDeviceGetName(256, dev))
    return {"name": name.split(b"\0")[0].decode() if isinstance(name, bytes) else str(name),
            "compute_capability": f"sm_{major}{minor}",
            "max_threads_per_block": attr("CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK"),
            "max_shared_memory_per_block": attr("CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK"),
            "warp_size": attr("CU_DEVICE_ATTRIBUTE_WARP_SIZE"),
            "num_sms": attr("CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT")}


class DeviceBuffer:
    """``nbytes`` of device memory (freed with the object)."""

    def __init__(self, nbytes: int):
        self.nbytes = max(int(nbytes), 4)
        self.ptr = call("cuMemAlloc", driver().cuMemAlloc(self.nbytes))

    @property
    def address(self) -> int:
        return int(self.ptr)

    def upload(self, array: np.ndarray) -> None:
        array = np.ascontiguousarray(array)
        call("cuMemcpyHtoD", driver().cuMemcpyHtoD(self.ptr, array, array.nbytes))

    def download(self, out: np.ndarray) -> None:
        call("cuMemcpyDtoH", driver().cuMemcpyDtoH(out, self.ptr, out.nbytes))

    def __del__(self):
        ptr, self.ptr = getattr(self, "ptr", None), None
        if ptr is not None:
            try:
                driver().cuMemFree(ptr)
            except Exception:  # noqa: BLE001 - at interpreter exit the driver may be gone
                pass


class CudaKernel:
    """A program compiled for the cuda target: its PTX and launch plan
    (``ir.lower_gpu.GPUProgram``). Call it with numpy arrays for all of the DAG's tensors
    in the order given to ``ComputeDAG``, as a CPU ``Kernel``: inputs are copied to the
    device, the kernels run one after another, outputs are copied back in place. The
    module is loaded on the device at the first call (NoCudaDevice without one)."""

    def __init__(self, dag, state, program, ptx: str, llvm_ir: str = ""):
        self.dag = dag
        self.state = state
        self.program = program
        self.ptx = ptx
        self.llvm_ir = llvm_ir
        self.layouts: dict = {}
        self._functions = None
        self._module = None

    # the device side ---------------------------------------------------------------------
    def load(self) -> None:
        """Load the PTX on the device (the driver JIT-compiles it) and look up its kernels."""
        if self._functions is not None:
            return
        require_device()
        cu = driver()
        self._module = call("cuModuleLoadData", cu.cuModuleLoadData(self.ptx.encode() + b"\0"))
        self._functions = [call(f"cuModuleGetFunction({k.name})", cu.cuModuleGetFunction(self._module, k.name.encode()))
                           for k in self.program.kernels]

    def device_buffers(self) -> dict:
        """Fresh device memory for every buffer of the program (arguments and the global
        buffers between its kernels), by buffer name."""
        bufs = list(self.program.args) + list(self.program.temporaries)
        return {b.name: DeviceBuffer(b.capacity * np.dtype(b.dtype).itemsize) for b in bufs}

    def launch(self, buffers: dict, stream=0) -> None:
        """Launch every kernel of the program, in order, on ``stream`` (not synchronised)."""
        self.load()
        cu = driver()
        for kernel, function in zip(self.program.kernels, self._functions):
            addresses = np.array([buffers[b.name].address for b in kernel.params], dtype=np.uint64)
            params = np.array([addresses.ctypes.data + 8 * i for i in range(len(addresses))], dtype=np.uint64)
            call(f"cuLaunchKernel({kernel.name})",
                 cu.cuLaunchKernel(function, kernel.grid, 1, 1, kernel.block, 1, 1, 0, stream,
                                   params.ctypes.data if len(params) else 0, 0))

    def synchronize(self) -> None:
        call("cuCtxSynchronize", driver().cuCtxSynchronize())

    def time_launches(self, buffers: dict, number: int) -> float:
        """Seconds for ``number`` back-to-back runs of the program, timed with CUDA events."""
        cu = driver()
        start = call("cuEventCreate", cu.cuEventCreate(0))
        end = call("cuEventCreate", cu.cuEventCreate(0))
        try:
            call("cuEventRecord", cu.cuEventRecord(start, 0))
            for _ in range(number):
                self.launch(buffers)
            call("cuEventRecord", cu.cuEventRecord(end, 0))
            call("cuEventSynchronize", cu.cuEventSynchronize(end))
            return float(call("cuEventElapsedTime", cu.cuEventElapsedTime(start, end))) * 1e-3
        finally:
            cu.cuEventDestroy(start)
            cu.cuEventDestroy(end)

    # the numpy side ----------------------------------------------------------------------
    def _check(self, arrays) -> list:
        tensors = self.dag.tensors
        if len(arrays) != len(tensors):
            raise TypeError(f"kernel takes {len(tensors)} arrays ({', '.join(t.name for t in tensors)}), "
                            f"got {len(arrays)}")
        for i, (arr, t) in enumerate(zip(arrays, tensors)):
            if not isinstance(arr, np.ndarray):
                raise TypeError(f"argument {i} ('{t.name}') must be a numpy array, got {type(arr).__name__}")
            if arr.dtype != np.dtype(t.dtype) or arr.shape != tuple(t.shape):
                raise ValueError(f"input '{t.name}' is {arr.dtype}{list(arr.shape)}, the kernel expects "
                                 f"{t.dtype}{list(t.shape)}")
        return list(arrays)

    def upload(self, arrays) -> dict:
        """Device buffers holding ``arrays`` (all of the DAG's tensors, outputs included)."""
        arrays = self._check(arrays)
        self.load()
        buffers = self.device_buffers()
        for t, arr in zip(self.dag.tensors, arrays):
            buffers[t.name].upload(arr)
        return buffers

    def __call__(self, *arrays) -> None:
        buffers = self.upload(arrays)
        self.launch(buffers)
        self.synchronize()
        for t, arr in zip(self.dag.tensors, arrays):
            if not any(t.op is o.op for o in self.dag.inputs):
                buffers[t.name].download(arr)

    def emulate(self, *arrays) -> None:
        """Run the program on the CPU instead (``ir.gpu_emulator``: slow, no GPU needed),
        checking bounds and races; outputs are written in place as by a call."""
        from .gpu_emulator import Emulator
        Emulator(self.program).run(self._check(arrays))

    def time(self, *arrays, number: int = 10, repeat: int = 3, min_repeat_ms: float = 0) -> TimeResult:
        """Seconds per run of the whole program (device time, CUDA events): ``repeat``
        measurements of ``number`` back-to-back runs, ``number`` grown until one
        measurement lasts ``min_repeat_ms``."""
        if number < 1 or repeat < 1:
            raise ValueError(f"number and repeat must be >= 1, got number={number}, repeat={repeat}")
        buffers = self.upload(arrays)
        self.time_launches(buffers, 1)  # warm up (and JIT)
        if min_repeat_ms > 0:
            while True:
                seconds = self.time_launches(buffers, number)
                if seconds * 1e3 >= min_repeat_ms or number >= 1 << 20:
                    break
                number = max(number * 2, int(number * min_repeat_ms * 1e-3 / max(seconds, 1e-9) * 1.1))
        results = [self.time_launches(buffers, number) / number for _ in range(repeat)]
        return TimeResult(statistics.median(results), results, number)

    def __repr__(self) -> str:
        return f"CudaKernel({len(self.program.kernels)} kernels, {self.program.target})"
