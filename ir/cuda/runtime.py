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
from dataclasses import dataclass

import numpy as np

from ..backend import TimeResult

_lock = threading.Lock()
_context: dict = {}  # device ordinal -> primary context, made current in this process


class NoCudaDevice(RuntimeError):
    """The cuda target needs an NVIDIA GPU (and cuda-python) to run programs."""


class CudaError(RuntimeError):
    """A CUDA driver call failed; the message names the call and the driver's error
    (``name``, e.g. "CUDA_ERROR_ILLEGAL_ADDRESS")."""

    def __init__(self, message: str, name: str = ""):
        super().__init__(message)
        self.name = name


#: errors after which the context is unusable: the process must end (a kernel faulted)
RECOVERABLE_ERRORS = ("CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", "CUDA_ERROR_INVALID_VALUE", "CUDA_ERROR_OUT_OF_MEMORY")


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
        raise CudaError(f"{what} failed: {name} ({text})", name)
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


def require_device_present(ordinal: int = 0) -> None:
    """NoCudaDevice (saying why) unless cuda-python, a driver and device ``ordinal`` are
    there; makes no context (a measurement worker makes its own)."""
    count = _init()
    if not 0 <= ordinal < count:
        raise NoCudaDevice(f"target 'cuda': no CUDA device {ordinal} (the driver reports {count})")


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


def _release(function: str, handle) -> None:
    """Free a driver object from a finaliser (at interpreter exit the driver may be gone)."""
    if handle is None:
        return
    try:
        getattr(driver(), function)(handle)
    except Exception:  # noqa: BLE001
        pass


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
        call("cuMemcpyHtoD", driver().cuMemcpyHtoD(self.ptr, array.ctypes.data, array.nbytes))

    def download(self, out: np.ndarray) -> None:
        if not out.flags.c_contiguous:
            raise ValueError("download needs a C-contiguous array")
        call("cuMemcpyDtoH", driver().cuMemcpyDtoH(out.ctypes.data, self.ptr, out.nbytes))

    def __del__(self):
        _release("cuMemFree", getattr(self, "ptr", None))


@dataclass(frozen=True)
class LaunchPlan:
    """What the host needs to run a program (small and plain: it travels from a builder
    process to a runner process): every buffer as (name, dtype, elements), the DAG's
    tensors first, and every kernel as (name, grid size, block size, parameter names)."""
    buffers: tuple
    kernels: tuple

    @classmethod
    def of(cls, program) -> "LaunchPlan":
        """The plan of an ``ir.cuda.lower.GPUProgram``."""
        buffers = tuple((b.name, b.dtype, b.capacity) for b in list(program.args) + list(program.temporaries))
        kernels = tuple((k.name, k.grid, k.block, tuple(b.name for b in k.params)) for k in program.kernels)
        return cls(buffers, kernels)


class CudaKernel:
    """A program compiled for the cuda target: its PTX (and the device code ``ptxas`` made
    of it, when it was at hand) and its ``LaunchPlan``. Call it with numpy arrays for all of
    the DAG's tensors in the order given to ``ComputeDAG``, as a CPU ``Kernel``: they are
    copied to the device, the kernels run one after another, outputs are copied back in
    place. The module is loaded on the device at the first call (NoCudaDevice without
    one); ``emulate`` runs it on the CPU instead."""

    def __init__(self, dag, state, plan: LaunchPlan, ptx: str, llvm_ir: str = "", program=None,
                 cubin: bytes | None = None):
        self.dag = dag
        self.state = state
        self.plan = plan
        self.ptx = ptx
        self.cubin = cubin
        self.llvm_ir = llvm_ir
        self.program = program
        self.layouts: dict = {}
        self._functions = None
        self._module = None

    # the device side ---------------------------------------------------------------------
    def load(self) -> None:
        """Load the module on the device (the driver JIT-compiles PTX; a cubin is ready) and
        look up its kernels."""
        if self._functions is not None:
            return
        require_device()
        cu = driver()
        image = self.cubin if self.cubin else self.ptx.encode() + b"\0"
        self._module = call("cuModuleLoadData", cu.cuModuleLoadData(image))
        functions = [call(f"cuModuleGetFunction({name})", cu.cuModuleGetFunction(self._module, name.encode()))
                     for name, _, _, _ in self.plan.kernels]
        attr = cu.CUfunction_attribute
        for (name, _, block, _), function in zip(self.plan.kernels, functions):
            most = call("cuFuncGetAttribute", cu.cuFuncGetAttribute(attr.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
                                                                    function))
            if block > most:
                regs = call("cuFuncGetAttribute", cu.cuFuncGetAttribute(attr.CU_FUNC_ATTRIBUTE_NUM_REGS, function))
                raise CudaError(f"kernel {name} uses {regs} registers per thread: the device runs at most "
                                f"{most} of its threads in a block, it has {block}", "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES")
        self._functions = functions

    def __del__(self):
        _release("cuModuleUnload", getattr(self, "_module", None))

    def device_buffers(self) -> dict:
        """Fresh device memory for every buffer of the program (arguments and the global
        buffers between its kernels), by buffer name."""
        return {name: DeviceBuffer(n * np.dtype(dtype).itemsize) for name, dtype, n in self.plan.buffers}

    def launch(self, buffers: dict, stream=0) -> None:
        """Launch every kernel of the program, in order, on ``stream`` (not synchronised)."""
        self.load()
        cu = driver()
        for (name, grid, block, params), function in zip(self.plan.kernels, self._functions):
            addresses = np.array([buffers[p].address for p in params], dtype=np.uint64)
            pointers = np.array([addresses.ctypes.data + 8 * i for i in range(len(addresses))], dtype=np.uint64)
            call(f"cuLaunchKernel({name})",
                 cu.cuLaunchKernel(function, grid, 1, 1, block, 1, 1, 0, stream,
                                   pointers.ctypes.data if len(pointers) else 0, 0))

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
        """Run the program on the CPU instead (``ir.cuda.emulator``: slow, no GPU needed),
        checking bounds and races; outputs are written in place as by a call."""
        if self.program is None:
            raise ValueError("this kernel was loaded from a build artefact without its loop IR; "
                             "build it with ir.build(..., target='cuda') to emulate it")
        from .emulator import Emulator
        Emulator(self.program).run(self._check(arrays))

    def timer(self, *arrays):
        """``run(n) -> seconds`` for ``n`` back-to-back runs on ``arrays`` (copied to the
        device once, here), timed with CUDA events: what runners time with."""
        buffers = self.upload(arrays)

        def run(n: int) -> float:
            if n < 1:
                raise ValueError(f"n must be >= 1, got {n}")
            return self.time_launches(buffers, n)

        return run

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
        return f"CudaKernel({', '.join(name for name, _, _, _ in self.plan.kernels)})"
