"""Compiling LLVM IR for the host and calling the result with numpy arrays."""
from __future__ import annotations

import ctypes
import os
import statistics
import threading

import llvmlite.binding as llvm
import numpy as np

from ..backend import TimeResult
from ..llvm_codegen import set_llvm_options
from .spin import spin_count

_lock = threading.Lock()
_target_machine = None


def _new_target_machine():
    target = llvm.Target.from_default_triple()
    return target.create_target_machine(cpu=_host[0], features=_host[1], opt=3, reloc="default",
                                        codemodel="jitdefault")


_host: tuple[str, str] = ("", "")


def host_cpu() -> tuple[str, str]:
    """The host CPU's LLVM name and feature string (e.g. "znver4", "+avx2,+fma,...")."""
    target_machine()
    return _host


def target_machine():
    """The host's target machine (CPU name and features), at O3; made once per process and
    used for optimisation and assembly (a JIT engine owns, and frees, a machine of its own)."""
    global _target_machine, _host
    with _lock:
        if _target_machine is None:
            set_llvm_options()
            llvm.initialize_native_target()
            llvm.initialize_native_asmprinter()
            llvm.load_library_permanently(_libgomp_path())
            _host = (llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten())
            _target_machine = _new_target_machine()
        return _target_machine


#: How long an OpenMP thread spins waiting for work before it sleeps (libgomp's
#: GOMP_SPINCOUNT): the count that spins ``spin.SPIN_SECONDS`` on this CPU. With libgomp's
#: default (300000, milliseconds) a parallel region on a machine with one other busy
#: process costs a whole spin: 8 ms for a 30 µs copy, 450 ms for MobileNet-V2 instead of 27.
#: libgomp reads it once, when it loads (ours, or PyTorch's copy, whose name is the same and
#: which a process that imports PyTorch after ``ir`` loads first), so it goes into the
#: environment when ``ir`` is imported, unless OMP_WAIT_POLICY or GOMP_SPINCOUNT is set.
if "OMP_WAIT_POLICY" not in os.environ and "GOMP_SPINCOUNT" not in os.environ:
    os.environ["GOMP_SPINCOUNT"] = str(spin_count())


def _libgomp_path() -> str:
    import ctypes.util
    for name in ("libgomp.so.1", ctypes.util.find_library("gomp")):
        if not name:
            continue
        try:
            ctypes.CDLL(name, mode=ctypes.RTLD_GLOBAL)
            return name
        except OSError:
            continue
    raise RuntimeError("libgomp (GNU OpenMP runtime) was not found; install it (e.g. apt-get install libgomp1)")


#: LLVM 22's SLP vectoriser miscompiles some unrolled reductions followed by guarded
#: loads (masked loads of odd widths reading the wrong lanes; tests/ir/test_steps.py
#: ``repro_slp_miscompile``). Our vector loops are explicit, so it is off: correctness first.
SLP_VECTORIZATION = False


def optimize(ir_text: str):
    """Parse and optimise a module at O3 for the host CPU; returns the llvmlite module."""
    tm = target_machine()
    mod = llvm.parse_assembly(ir_text)
    mod.verify()
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pto.loop_vectorization = True
    pto.slp_vectorization = SLP_VECTORIZATION
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)
    return mod


class _KernelFunctions:
    """The functions of a compiled kernel (``ir.cpu.codegen``): ``entry(argv) -> status``,
    ``timer(argv, n) -> ns or -status`` and ``error(status) -> message``."""

    def _bind(self, name: str) -> None:
        addresses = [self.engine.get_function_address(n) for n in (name, name + ".timer", name + ".error")]
        if not all(addresses):
            raise ValueError(f"the object holds no function '{name}' (and '{name}.timer', '{name}.error'); "
                             "was it compiled under another name, or by another version?")
        entry, timer, error = addresses
        self.name = name
        self.entry = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p)(entry)
        self.timer = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64)(timer)
        self.error = ctypes.CFUNCTYPE(ctypes.c_char_p, ctypes.c_int32)(error)

    def check(self, status: int) -> None:
        """Raise the error a call reported (MemoryError, IndexError); nothing for 0."""
        if status == 0:
            return
        message = self.error(status)
        kind, _, text = (message or b"").decode().partition(": ")
        raise {"MemoryError": MemoryError, "IndexError": IndexError}.get(kind, RuntimeError)(
            text or f"the kernel failed with status {status}")


class CompiledModule(_KernelFunctions):
    """A JIT-compiled module; keeps the engine (and so the code) alive."""

    def __init__(self, ir_text: str, name: str):
        self.module = optimize(ir_text)
        self.engine = llvm.create_mcjit_compiler(self.module, _new_target_machine())
        self.engine.finalize_object()
        self._bind(name)

    def assembly(self) -> str:
        return target_machine().emit_assembly(self.module)


class Kernel:
    """A compiled program. Call it with numpy arrays for all of the DAG's tensors in the
    order given to ``ComputeDAG``; outputs are written in place.

    ``compiled``: its functions (``CompiledModule``, or ``ObjectModule`` for object code);
    ``layouts``: the plans of its layout-rewritten constants (``LoweredFunc.layouts``);
    ``lowered``: its loop IR, or None for a kernel loaded from object code, whose
    ``lowered`` then lowers ``state`` again, as it was (``layout_rewrite``), when asked
    (``autosched.compile`` generates its code again from it); ``ir_text``: its LLVM IR where
    it was generated here."""

    def __init__(self, dag, state, compiled, layouts=None, lowered=None, ir_text: str | None = None,
                 layout_rewrite: bool = False):
        self.dag = dag
        self.state = state
        self._lowered = lowered
        self.layout_rewrite = layout_rewrite
        self.llvm_ir = ir_text
        self._compiled = compiled
        self.layouts = dict(layouts or {})
        self._specs = [(t.name, tuple(self.layouts[t.name].shape if t.name in self.layouts else t.shape),
                        np.dtype(t.dtype)) for t in dag.tensors]
        self._outputs = {t.name for t in dag.outputs}
        self._argv_type = ctypes.c_void_p * len(self._specs)

    @property
    def lowered(self):
        """The kernel's loop IR (``ir.lower.LoweredFunc``)."""
        if self._lowered is None:
            if self.state is None:
                raise ValueError("this kernel was loaded from object code without its program (state), so its "
                                 "loop IR cannot be made again; build it with ir.build")
            from ..lower import lower
            self._lowered = lower(self.state, self._compiled.name, self.layout_rewrite)
        return self._lowered

    def _pack(self, arrays) -> ctypes.Array:
        specs = self._specs
        if len(arrays) != len(specs):
            names = ", ".join(n for n, _, _ in specs)
            raise TypeError(f"kernel takes {len(specs)} arrays ({names}), got {len(arrays)}")
        argv = self._argv_type()
        for i, (arr, (name, shape, dtype)) in enumerate(zip(arrays, specs)):
            if not isinstance(arr, np.ndarray):
                raise TypeError(f"argument {i} ('{name}') must be a numpy array, got {type(arr).__name__}")
            if arr.dtype != dtype:
                raise TypeError(f"input '{name}' has dtype {arr.dtype}, the kernel expects {dtype}")
            if arr.shape != shape:
                if name in self.layouts and arr.shape == self.layouts[name].original_shape:
                    raise ValueError(f"input '{name}' is a layout-rewritten constant: the kernel expects its "
                                     f"packed form of shape {shape}; make it once with kernel.pack('{name}', array)")
                raise ValueError(f"input '{name}' has shape {arr.shape}, the kernel expects {shape}")
            if not arr.flags.c_contiguous:
                raise ValueError(f"input '{name}' is not C-contiguous; pass np.ascontiguousarray({name})")
            if name in self._outputs and not arr.flags.writeable:
                raise ValueError(f"output '{name}' is a read-only array (e.g. a view of bytes, or np.load with "
                                 f"mmap_mode='r'); the kernel writes its outputs: pass a writeable array such "
                                 f"as np.empty({shape}, '{dtype}')")
            argv[i] = arr.ctypes.data
        return argv

    def __call__(self, *arrays) -> None:
        """Run the kernel; MemoryError when an intermediate could not be allocated,
        IndexError when a read checked at run time left its tensor."""
        argv = self._pack(arrays)
        self._compiled.check(self._compiled.entry(argv))

    def native_call(self, *arrays) -> tuple[int, ctypes.Array, object]:
        """The compiled function's address, its argument vector for ``arrays`` (checked
        once, here) and ``check(status)``, which raises the error a call's non-zero status
        reports: for callers that run the kernel many times from native code (a graph
        executor's driver). The arrays must stay alive while the vector is used."""
        return ctypes.cast(self._compiled.entry, ctypes.c_void_p).value, self._pack(arrays), self._compiled.check

    def time(self, *arrays, number: int = 10, repeat: int = 3, min_repeat_ms: float = 0) -> TimeResult:
        """Seconds per call. Each of ``repeat`` measurements runs ``number`` back-to-back calls
        in native code; ``number`` grows until one measurement lasts ``min_repeat_ms``."""
        if number < 1 or repeat < 1:
            raise ValueError(f"number and repeat must be >= 1, got number={number}, repeat={repeat}")
        timer = native_timer(self, *arrays)
        if min_repeat_ms > 0:
            while True:
                seconds = timer(number)
                if seconds >= min_repeat_ms * 1e-3 or number >= 1 << 30:
                    break
                number = max(number * 2, int(number * min_repeat_ms * 1e-3 / max(seconds, 1e-9) * 1.1))
        results = [timer(number) / number for _ in range(repeat)]
        return TimeResult(statistics.median(results), results, number)

    def pack(self, name: str, array: np.ndarray) -> np.ndarray:
        """The packed form of constant input ``name`` that this kernel takes in its place
        (pay it once per weight, not per call)."""
        layout = self.layouts.get(name)
        if layout is None:
            raise KeyError(f"'{name}' is not a layout-rewritten input of this kernel "
                           f"(rewritten: {sorted(self.layouts) or 'none'})")
        array = np.asarray(array)
        if array.shape != layout.original_shape:
            raise ValueError(f"pack('{name}'): got shape {array.shape}, expected {layout.original_shape}")
        return layout.pack(array)

    def assembly(self) -> str:
        return self._compiled.assembly()

    def __repr__(self) -> str:
        return f"Kernel({', '.join(f'{n}{list(s)}:{d}' for n, s, d in self._specs)})"


# Evicting arrays from the caches (timing a kernel as it runs inside a model whose weights
# do not fit the last-level cache: its weights come from memory, its activations do not).

_EVICT_IR = """
declare void @llvm.x86.sse2.clflush(ptr)
declare void @llvm.x86.sse2.mfence()
define void @autosched_evict(i64 %start, i64 %end) {
entry:
  %empty = icmp uge i64 %start, %end
  br i1 %empty, label %done, label %loop
loop:
  %a = phi i64 [%start, %entry], [%next, %loop]
  %p = inttoptr i64 %a to ptr
  call void @llvm.x86.sse2.clflush(ptr %p)
  %next = add i64 %a, 64
  %more = icmp ult i64 %next, %end
  br i1 %more, label %loop, label %done
done:
  call void @llvm.x86.sse2.mfence()
  ret void
}
"""
_evict = None


def can_evict() -> bool:
    """Whether ``evict_from_caches`` can evict single arrays on this CPU (x86: clflush)."""
    return llvm.get_process_triple().split("-")[0] in ("x86_64", "i686", "i386")


def evict_from_caches(arrays) -> None:
    """Write back and drop every cache line of the numpy ``arrays`` from every cache level
    (clflush, then a fence), leaving the rest of the caches as they are; ``RuntimeError``
    where ``can_evict()`` is False."""
    global _evict
    if _evict is None:
        if not can_evict():
            raise RuntimeError(f"evicting single arrays needs an x86 CPU (clflush), this is "
                               f"{llvm.get_process_triple()}")
        target_machine()
        engine = llvm.create_mcjit_compiler(llvm.parse_assembly(_EVICT_IR), _new_target_machine())
        engine.finalize_object()
        fn = ctypes.CFUNCTYPE(None, ctypes.c_uint64, ctypes.c_uint64)(engine.get_function_address("autosched_evict"))
        _evict = (engine, fn)  # the engine owns the code: keep it
    for a in arrays:
        start = a.ctypes.data
        _evict[1](start & ~63, start + a.nbytes)


# Build artefacts that cross processes (measurement: compiled in a builder process, run in a
# runner process). Appended for issue 4; the JIT path above is unchanged.

def compile_object(ir_text: str) -> bytes:
    """Optimise LLVM IR at O3 for the host CPU and compile it to the bytes of a native object
    file: a build artefact that another process loads with ``ObjectModule``/``load_kernel``."""
    return target_machine().emit_object(optimize(ir_text))


class ObjectModule(_KernelFunctions):
    """A native object made by ``compile_object``, loaded with MCJIT: the same functions
    as ``CompiledModule`` (libgomp and libc symbols resolve in this process)."""

    def __init__(self, data: bytes, name: str):
        target_machine()  # initialises LLVM and loads libgomp permanently
        self.engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), _new_target_machine())
        self.engine.add_object_file(llvm.ObjectFileRef.from_data(bytes(data)))
        self.engine.finalize_object()
        self._bind(name)

    def assembly(self) -> str:
        raise NotImplementedError("a kernel loaded from an object file has no module to print; "
                                  "build it with ir.build to read its assembly")


def load_kernel(dag, data: bytes, name: str, layouts=None, state=None, layout_rewrite: bool = False) -> Kernel:
    """A ``Kernel`` of ``dag`` from object bytes (``compile_object``); ``layouts`` are the
    lowered function's layout plans (``LoweredFunc.layouts``) when constants were rewritten,
    so that arguments are checked and ``kernel.pack`` works as for ``ir.build``; ``state``
    and ``layout_rewrite``: the program it was compiled from, and how (its ``lowered``)."""
    return Kernel(dag, state, ObjectModule(data, name), layouts, layout_rewrite=layout_rewrite)


def native_timer(kernel: Kernel, *arrays):
    """``run(n) -> seconds`` for ``n`` back-to-back calls of ``kernel`` on ``arrays``, timed
    in native code (the arguments are checked once, here): the building block of runners
    that choose their own repeat policy."""
    argv = kernel._pack(arrays)
    compiled = kernel._compiled

    def run(n: int) -> float:
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        ns = compiled.timer(argv, n)
        if ns < 0:
            compiled.check(-ns)
        return ns * 1e-9

    run.arrays = arrays  # the addresses in argv stay valid while the closure lives
    return run
