"""NVPTX code generation: the kernels of a ``GPUProgram`` (``ir.cuda.lower``) as LLVM IR for
``nvptx64-nvidia-cuda``, and PTX from llvmlite's own NVPTX back end.

Expressions and stores are generated as for the CPU (``ir.llvm_codegen.FunctionBuilder``, scalar:
one thread computes one lane); what differs is the memory and the threads:

- address spaces: buffer parameters are ``ptr addrspace(1)`` (global; ``noalias``, and
  ``readonly`` for inputs, which lets loads go through the read-only cache), shared
  buffers module-level ``addrspace(3)`` arrays, thread-private buffers ``alloca``s (the
  back end puts them in local memory, addrspace 5, when they are not promoted to
  registers); loads and stores address global and shared memory in their own address
  space, which lets LLVM's load/store vectoriser merge a thread's neighbouring accesses
  into ``ld.shared.v4``/``ld.global.nc.v4``;
- ``llvm.nvvm.*`` intrinsics: ``read.ptx.sreg.tid.x``/``ctaid.x`` for the thread and
  block index, ``barrier0`` for a barrier, ``shfl.sync.bfly`` for warp reductions;
- loops are serial or unrolled (``unroll``, ``vectorize`` and nests within
  ``auto_unroll_max_step`` are unrolled, so that a register tile has constant indices);
- a cross-thread reduction (``AllReduce``) is a butterfly of warp shuffles; in a block
  of several warps each warp's result then meets in shared memory and one more
  butterfly; a block that is neither a power of two up to 32 nor whole warps reduces
  as a tree in shared memory.

Kernels are ``ptx_kernel`` functions with ``"nvvm.maxntid"`` set to their block size.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import threading

import llvmlite.binding as llvm

from .. import dtype as dt
from .. import expr as E
from .passes import BLOCK_IDX, THREAD_IDX, walk
from ..loop_ir import Allocate, AllReduce, Barrier, For, Load, Stmt, Store, nest_trips
from ..lower import LoweringError
from ..llvm_codegen import FunctionBuilder, ModuleBuilder, Value, set_llvm_options

TRIPLE = "nvptx64-nvidia-cuda"
WARP = 32
_lock = threading.Lock()
_machines: dict = {}


def ptx_features(arch: str) -> str:
    """The PTX ISA version to emit for ``arch`` ("sm_90"): 8.0 from Hopper on (sm_90
    needs it), 7.0 before (understood by every driver of the last years)."""
    return "+ptx80" if int(arch.split("_")[1].rstrip("a")) >= 90 else "+ptx70"


def target_machine(arch: str):
    """An NVPTX target machine for ``arch``, made once per process."""
    with _lock:
        tm = _machines.get(arch)
        if tm is None:
            set_llvm_options()
            llvm.initialize_all_targets()
            llvm.initialize_all_asmprinters()
            tm = _machines[arch] = llvm.Target.from_triple(TRIPLE).create_target_machine(
                cpu=arch, features=ptx_features(arch), opt=3)
        return tm


class KernelBuilder(FunctionBuilder):
    """One kernel's body: the CPU builder's expressions with GPU memory, loops and threads."""

    def __init__(self, module: ModuleBuilder, kernel, stored: set):
        params = []
        for i, b in enumerate(kernel.params):
            attrs = "noalias" if id(b) in stored else "noalias readonly"
            params.append((f"ptr addrspace(1) {attrs}", f"%p{i}"))
        super().__init__(module, kernel.name, params,
                         attrs=f'ptx_kernel void @{kernel.name}({{params}}) "nvvm.maxntid"="{kernel.block}"')
        self.kernel = kernel
        self.block_size = kernel.block
        self._scratch: dict = {}
        #: buffer id -> the address space its pointer is in ("addrspace(1) "), "" for generic
        self.spaces: dict[int, str] = {}
        for i, b in enumerate(kernel.params):
            self.buffers[id(b)] = f"%p{i}"
            self.spaces[id(b)] = "addrspace(1) "
        self.env[id(THREAD_IDX)] = self._special("tid.x")
        self.env[id(BLOCK_IDX)] = self._special("ctaid.x")
        self.bounds[THREAD_IDX] = (0, kernel.block - 1)
        self.bounds[BLOCK_IDX] = (0, kernel.grid - 1)

    def _special(self, register: str) -> Value:
        sym = f"@llvm.nvvm.read.ptx.sreg.{register}"
        self.module.declare(f"declare i32 {sym}()")
        v = self.instr(f"call i32 {sym}()", "i32", 1)
        return self.instr(f"zext i32 {v.ref} to i64", "i64", 1)

    def address(self, buf, index: Value) -> Value:
        """A pointer into ``buf`` in the buffer's own address space (its ``ref`` carries the
        ``addrspace(N)`` of its type, so that ``load T, ptr REF`` reads right)."""
        space = self.spaces.get(id(buf), "")
        out = self.tmp()
        self.emit(f"{out} = getelementptr inbounds {dt.storage_llvm_type(buf.dtype)}, "
                  f"ptr {space}{self.buffers[id(buf)]}, {index.full} {index.ref}")
        return Value(space + out, "ptr", index.lanes)

    def ev(self, e: E.Expr) -> Value:
        if isinstance(e, E.Call) and e.dtype == "float64" and e.func not in ("abs", "floor", "ceil", "sqrt"):
            raise LoweringError(f"{e.func} on float64 is not available on the cuda target (the CPU calls libm "
                                "for it); compute it in float32")
        return super().ev(e)

    # statements -----------------------------------------------------------------------------
    def stmt(self, s: Stmt) -> None:
        if isinstance(s, Barrier):
            self.barrier()
        elif isinstance(s, AllReduce):
            self.all_reduce(s)
        else:
            super().stmt(s)

    def barrier(self) -> None:
        self.module.declare("declare void @llvm.nvvm.barrier0()")
        self.emit("call void @llvm.nvvm.barrier0()")

    def loop(self, s: For) -> None:
        if s.kind not in ("serial", "unroll", "vectorize"):
            raise LoweringError(f"loop '{s.name}' is {s.kind}: not a loop a GPU thread can run")
        if s.kind != "serial" or s.extent == 1 or (self.unroll_limit and nest_trips(s) <= self.unroll_limit):
            return self.unrolled(s)
        self.serial_loop(s.var, s.extent, lambda: self.stmt(s.body))

    def allocate(self, s: Allocate) -> None:
        buf = s.buffer
        if buf.scope == "shared":
            # one array per buffer, however often an unrolled loop repeats its allocation
            if id(buf) not in self.buffers:
                self.buffers[id(buf)] = self.shared_array(buf.name, buf.dtype, buf.capacity)
                self.spaces[id(buf)] = "addrspace(3) "
            self.stmt(s.body)
            return
        if buf.scope != "local":
            raise LoweringError(f"buffer '{buf.name}' ({buf.scope}) cannot be allocated inside a kernel")
        super().allocate(s)

    def shared_array(self, name: str, dtype: str, count: int) -> str:
        """The symbol of a new ``addrspace(3)`` array of the module."""
        sym = "@" + self.module.fresh(f"{self.name}.{name}").replace("@", "_")
        ty = dt.storage_llvm_type(dtype)
        self.module.declare(f"{sym} = internal addrspace(3) global [{count} x {ty}] undef, align 16")
        return sym

    def shared_slot(self, array: str, dtype: str, index: Value) -> Value:
        """A pointer to element ``index`` of shared ``array`` (see ``address``)."""
        out = self.instr(f"getelementptr inbounds {dt.storage_llvm_type(dtype)}, ptr addrspace(3) {array}, "
                         f"i64 {index.ref}", "ptr", 1)
        return Value("addrspace(3) " + out.ref, "ptr", 1)

    def scratch(self, dtype: str, count: int) -> str:
        """The shared array cross-thread reductions of this kernel exchange values in (one
        for all: each reduction ends with a barrier before the next may write it)."""
        key = ("allreduce", dtype, count)
        if key not in self._scratch:
            self._scratch[key] = self.shared_array("allreduce", dtype, count)
        return self._scratch[key]

    # cross-thread reduction -------------------------------------------------------------------
    def all_reduce(self, s: AllReduce) -> None:
        dtype = s.buffer.dtype
        ty = dt.llvm_type(dtype)
        value = self.load(Load(s.buffer, s.index))
        n = self.block_size
        if n == 1:
            return
        if n <= WARP and n & (n - 1) == 0 and ty in ("float", "i32"):
            total = self.warp_reduce(value, s.combiner, dtype, n)
        elif n % WARP == 0 and n // WARP <= WARP and ty in ("float", "i32"):
            total = self.block_reduce(value, s.combiner, dtype, n)
        else:
            total = self.tree_reduce(value, s.combiner, dtype, n)
        ptr = self.address(s.buffer, self.ev(s.index))
        self.emit(f"store {dt.storage_llvm_type(dtype)} {total.ref}, ptr {ptr.ref}, "
                  f"align {dt.itemsize(dtype)}")

    def combine(self, combiner: str, dtype: str, a: Value, b: Value) -> Value:
        if combiner == "sum":
            op = "fadd reassoc contract" if dt.is_float(dtype) else "add"
            return self.instr(f"{op} {a.ty} {a.ref}, {b.ref}", a.ty, 1)
        return self.binary_values(combiner, dtype, a, b)

    def warp_reduce(self, value: Value, combiner: str, dtype: str, width: int) -> Value:
        """Butterfly over the ``width`` lanes of each group (``width`` a power of two up to
        32): every lane ends with its group's result."""
        suffix = "f32" if value.ty == "float" else "i32"
        sym = f"@llvm.nvvm.shfl.sync.bfly.{suffix}"
        self.module.declare(f"declare {value.ty} {sym}(i32, {value.ty}, i32, i32)")
        mask = -1 if width == WARP else (1 << width) - 1
        offset = width // 2
        while offset:
            other = self.instr(f"call {value.ty} {sym}(i32 {mask}, {value.ty} {value.ref}, i32 {offset}, i32 31)",
                               value.ty, 1)
            value = self.combine(combiner, dtype, value, other)
            offset //= 2
        return value

    def block_reduce(self, value: Value, combiner: str, dtype: str, n: int) -> Value:
        """Whole warps: each warp reduces, lane 0 writes its result to shared memory, then
        every warp reduces those (as many as there are warps) again."""
        warps = n // WARP
        scratch = self.scratch(dtype, warps)
        sty = dt.storage_llvm_type(dtype)
        tid = self.env[id(THREAD_IDX)]
        lane = self.instr(f"and i64 {tid.ref}, 31", "i64", 1)
        warp = self.instr(f"lshr i64 {tid.ref}, 5", "i64", 1)
        value = self.warp_reduce(value, combiner, dtype, WARP)
        first = self.instr(f"icmp eq i64 {lane.ref}, 0", "i1", 1)
        write, done = self.label("ar.write"), self.label("ar.written")
        self.emit(f"br i1 {first.ref}, label %{write}, label %{done}")
        self.start_block(write)
        slot = self.shared_slot(scratch, dtype, warp)
        self.emit(f"store {sty} {value.ref}, ptr {slot.ref}, align 4")
        self.branch(done)
        self.start_block(done)
        self.barrier()
        ident = self.const(_identity(combiner, dtype), dtype)
        inside = self.instr(f"icmp ult i64 {lane.ref}, {warps}", "i1", 1)
        safe = self.instr(f"select i1 {inside.ref}, i64 {lane.ref}, i64 0", "i64", 1)
        slot = self.shared_slot(scratch, dtype, safe)
        got = self.instr(f"load {sty}, ptr {slot.ref}, align 4", value.ty, 1)
        part = self.instr(f"select i1 {inside.ref}, {value.ty} {got.ref}, {value.ty} {ident.ref}", value.ty, 1)
        total = self.warp_reduce(part, combiner, dtype, WARP)
        self.barrier()  # the scratch may be written again (a reduction inside a loop)
        return total

    def tree_reduce(self, value: Value, combiner: str, dtype: str, n: int) -> Value:
        """Any block: halve the live part of a shared array until element 0 holds the result."""
        scratch = self.scratch(dtype, n)
        sty = dt.storage_llvm_type(dtype)
        tid = self.env[id(THREAD_IDX)]
        align = dt.itemsize(dtype)
        mine = self.shared_slot(scratch, dtype, tid)
        self.emit(f"store {sty} {value.ref}, ptr {mine.ref}, align {align}")
        self.barrier()
        half = 1
        while half * 2 < n:
            half *= 2
        while half:
            # threads t < half with a partner t + half < n combine it into their slot
            partner = self.instr(f"add i64 {tid.ref}, {half}", "i64", 1)
            low = self.instr(f"icmp ult i64 {tid.ref}, {half}", "i1", 1)
            real = self.instr(f"icmp ult i64 {partner.ref}, {n}", "i1", 1)
            both = self.instr(f"and i1 {low.ref}, {real.ref}", "i1", 1)
            step, done = self.label("tree.step"), self.label("tree.done")
            self.emit(f"br i1 {both.ref}, label %{step}, label %{done}")
            self.start_block(step)
            theirs = self.shared_slot(scratch, dtype, partner)
            a = self.instr(f"load {sty}, ptr {mine.ref}, align {align}", value.ty, 1)
            b = self.instr(f"load {sty}, ptr {theirs.ref}, align {align}", value.ty, 1)
            c = self.combine(combiner, dtype, a, b)
            self.emit(f"store {sty} {c.ref}, ptr {mine.ref}, align {align}")
            self.branch(done)
            self.start_block(done)
            self.barrier()
            half //= 2
        first = self.shared_slot(scratch, dtype, Value("0", "i64"))
        total = self.instr(f"load {sty}, ptr {first.ref}, align {align}", value.ty, 1)
        self.barrier()
        return total


def _identity(combiner: str, dtype: str):
    if combiner == "sum":
        return 0.0 if dt.is_float(dtype) else 0
    return E.min_value(dtype) if combiner == "max" else E.max_value(dtype)


def generate(program) -> str:
    """LLVM IR text (NVPTX) of every kernel of a ``GPUProgram``."""
    module = ModuleBuilder()
    for kernel in program.kernels:
        stored = {id(x.buffer) for x in walk(kernel.body) if isinstance(x, Store)}
        builder = KernelBuilder(module, kernel, stored)
        builder.stmt(kernel.body)
        module.functions.append(builder.finish())
    return module.text()


def compile_ptx(llvm_ir: str, arch: str) -> str:
    """PTX for ``arch`` ("sm_90") from NVPTX LLVM IR, optimised at O3 by llvmlite."""
    tm = target_machine(arch)
    mod = llvm.parse_assembly(llvm_ir)
    mod.triple = TRIPLE
    mod.data_layout = str(tm.target_data)
    mod.verify()
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)
    return tm.emit_assembly(mod)


def assemble(ptx: str, arch: str, timeout: float | None = None) -> bytes | None:
    """Device code (a cubin) for ``arch`` from PTX with NVIDIA's ``ptxas`` when it is on
    the PATH, else None (the driver then JIT-compiles the PTX when it loads it). A
    builder that assembles saves the one runner that JIT time; a ptxas error is raised
    as a ``RuntimeError`` with its message."""
    exe = shutil.which("ptxas")
    if exe is None:
        return None
    with tempfile.TemporaryDirectory(prefix="autosched-ptx-") as tmp:
        src, out = os.path.join(tmp, "kernel.ptx"), os.path.join(tmp, "kernel.cubin")
        with open(src, "w") as f:
            f.write(ptx)
        got = subprocess.run([exe, f"-arch={arch}", src, "-o", out], capture_output=True, text=True, timeout=timeout)
        if got.returncode != 0:
            raise RuntimeError(f"ptxas rejected the PTX: {got.stderr.strip()[-2000:]}")
        with open(out, "rb") as f:
            return f.read()
