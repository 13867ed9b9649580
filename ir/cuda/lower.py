"""Lowering for the cuda target: a State becomes a ``GPUProgram``, one CUDA kernel per
root stage, run in order.

What changes from the CPU lowering (``ir.lower``), which this extends:

- loops bound to ``blockIdx.x``, ``vthread`` and ``threadIdx.x`` become the grid, virtual
  threads and the threads of a block (``ir.cuda.passes``);
- a cache_read stage named ``NAME.shared`` lives in shared memory, one copy per block
  covering what all its threads read (bound inference relaxes thread loops for it), with
  a barrier before its load (the previous tile is read by everyone) and one after (the
  new tile is written by everyone); every other attached stage is private to a thread
  (registers, once its loops are unrolled);
- a reduction whose reduce loop is bound to ``threadIdx.x`` reduces across threads: each
  thread accumulates its share in a register, an ``AllReduce`` combines them (warp
  shuffles, or shared memory between warps), one thread stores the result;
- root stages other than the DAG's tensors are global buffers the host allocates.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .. import dtype as dt
from .. import expr as E
from ..bounds import SHARED_SCOPE, storage_scope
from .passes import bind_threads, buffers_accessed, check_barriers_uniform, inject_virtual_threads, walk
from ..loop_ir import Allocate, AllReduce, Barrier, Buffer, IfThenElse, Load, Stmt, Store, seq, stmt_str
from ..lower import LOOP_KIND, Lowering, LoweringError, guarded

#: the thread-private buffers of one thread (virtual threads' copies included) beyond
#: this cannot be registers (a thread has at most 255) and spill to slow local memory:
#: not a program worth compiling (their unrolled code takes minutes to optimise)
MAX_THREAD_LOCAL_BYTES = 4096
GPU_BINDINGS = ("blockIdx.x", "vthread", "threadIdx.x")


@dataclass
class DeviceKernel:
    """One CUDA kernel: its body over ``gpu_passes.THREAD_IDX``/``BLOCK_IDX``, the buffers it
    takes (in parameter order), its launch shape and its static shared memory."""
    name: str
    body: Stmt
    params: list[Buffer]
    grid: int
    block: int
    shared_bytes: int

    def __str__(self) -> str:
        head = ", ".join(f"{b.name}: {b.dtype}[{b.capacity}]" for b in self.params)
        return (f"kernel {self.name}({head}) grid={self.grid} block={self.block} shared={self.shared_bytes}B:\n"
                f"{stmt_str(self.body, 1)}")


@dataclass
class GPUProgram:
    """What ``ir.cuda.lower`` makes of a State: kernels run in order on the arguments (the
    DAG's tensors in order) and global buffers between them (``temporaries``)."""
    name: str
    target: str
    args: list[Buffer]
    temporaries: list[Buffer]
    kernels: list[DeviceKernel]
    layouts: dict = field(default_factory=dict)

    def __str__(self) -> str:
        temps = "".join(f"global {b.name}: {b.dtype}[{b.capacity}]\n" for b in self.temporaries)
        return temps + "\n".join(str(k) for k in self.kernels)


def block_limits_violation(state, hardware) -> str | None:
    """Why ``state`` cannot run on a GPU with ``hardware``'s limits (threads or virtual
    threads of a block, shared memory), or None. Cheap: read off the stages, not lowered."""
    threads: dict[int, int] = {}
    shared: dict[int, int] = {}
    private: dict[int, int] = {}
    vthreads: dict[int, int] = {}
    stages = state.stages
    for st in stages:
        if st.is_placeholder or st.compute_at == "inline":
            continue
        root = st
        while root.compute_at == "iter":
            root = stages[root.attach[0]]
        key = id(root)
        for it in st.iters:
            if it.annotation == "threadIdx.x":
                threads[key] = max(threads.get(key, 1), it.extent)
            elif it.annotation == "vthread":
                if it.extent > hardware.max_vthread_extent:
                    return f"'{st.name}' has {it.extent} virtual threads (at most {hardware.max_vthread_extent})"
                vthreads[key] = vthreads.get(key, 1) * it.extent
        if st.compute_at == "iter":
            size = dt.itemsize(st.op.dtype)
            for n in st.root_extents[:len(st.axes)]:
                size *= n
            scope = shared if storage_scope(st) == SHARED_SCOPE else private
            scope[key] = scope.get(key, 0) + size
    for key, n in threads.items():
        if n > hardware.max_threads_per_block:
            return f"a kernel has {n} threads per block (at most {hardware.max_threads_per_block})"
    for key, n in shared.items():
        if n > hardware.max_shared_memory_per_block:
            return f"a kernel needs {n} bytes of shared memory (at most {hardware.max_shared_memory_per_block})"
    for key, n in private.items():
        n *= vthreads.get(key, 1)  # each virtual thread has its copy
        if n > MAX_THREAD_LOCAL_BYTES:
            return f"a thread needs {n} bytes of private buffers (at most {MAX_THREAD_LOCAL_BYTES})"
    return None


class GPULowering(Lowering):
    """The CPU lowering with GPU thread bindings, shared memory and cross-thread reduction."""
    loop_kinds = {**LOOP_KIND, **{b: b for b in GPU_BINDINGS}}
    #: a branch around a block of a thread-bound loop would split the threads at a barrier
    partition_padding = False
    #: a thread's tile keeps its guards (what runs past its region is untested on a GPU)
    pad_local_tiles = False

    def __init__(self, state, hardware=None):
        if hardware is not None:
            why = block_limits_violation(state, hardware)
            if why is not None:
                raise LoweringError(f"over the device's limits: {why}")
        super().__init__(state, layout_rewrite=False)
        self.hardware = hardware
        for idx, st in enumerate(state.stages):
            if st.compute_at != "iter":
                continue
            self.buffers[id(st.op)].scope = storage_scope(st)
            for it in st.iters:
                if it.annotation == "blockIdx.x":
                    raise LoweringError(f"stage '{st.name}' is computed inside another but binds '{it.name}' to "
                                        "blockIdx.x: only root stages choose blocks")
        for idx, st in enumerate(state.stages):
            first = next((p for p, it in enumerate(st.iters) if it.kind == "reduce"), len(st.iters))
            for it in st.iters[first:]:
                if it.kind == "space" and it.annotation in GPU_BINDINGS:
                    raise LoweringError(f"stage '{st.name}' binds '{it.name}' to {it.annotation} inside its "
                                        "reduction loops; bind only space loops outside them")

    # shared memory: barriers around the loads -----------------------------------------------
    def attached_nests(self, children) -> list[Stmt]:
        nests = super().attached_nests(children)
        shared = [i for i, c in enumerate(children)
                  if self.buffers[id(self.state.stages[c].op)].scope == SHARED_SCOPE]
        if not shared:
            return nests
        last = shared[-1]
        return [Barrier()] + nests[:last + 1] + [Barrier()] + nests[last + 1:]

    # cross-thread reduction -------------------------------------------------------------------
    def _reduction_nest(self, idx: int, st, update: Stmt, init: Store, guards) -> Stmt:
        if not any(it.kind == "reduce" and it.annotation == "threadIdx.x" for it in st.iters):
            return super()._reduction_nest(idx, st, update, init, guards)
        first = next(p for p, it in enumerate(st.iters) if it.kind == "reduce")
        inner_space = [it.name for it in st.iters[first:] if it.kind == "space"]
        if inner_space:
            raise LoweringError(f"cross-thread reduction of '{st.name}': space loops {inner_space} are inside "
                                "its reduce loops; they must be outside")
        buf, index = init.buffer, init.index
        partial = Buffer(f"{st.name}.partial", buf.dtype, (1,), "local")
        zero = E.Const(0, "int64")

        def to_partial(e):
            return Load(partial, zero) if isinstance(e, Load) and e.buffer is buf else None

        def retarget(s: Stmt) -> Stmt:
            if isinstance(s, IfThenElse):
                return IfThenElse(s.cond, retarget(s.then))
            return Store(partial, zero, E.transform(s.value, to_partial))

        space_vars = {id(it.var) for it in st.iters[:first]}
        final_guards = [g for g in guards if all(id(v) in space_vars for v in E.free_vars(g))]
        body = seq([Store(partial, zero, init.value),
                    self._loops(idx, st.iters[first:], first, retarget(update)),
                    AllReduce(partial, zero, st.body.combiner),
                    guarded(Store(buf, index, Load(partial, zero)), final_guards)])
        return self._loops(idx, st.iters[:first], 0, Allocate(partial, body))

    # the program --------------------------------------------------------------------------------
    def program(self, name: str, target: str) -> GPUProgram:
        kernels = []
        order = {id(b): i for i, b in enumerate(self.args + self.allocations)}
        for idx, st in enumerate(self.state.stages):
            if st.is_placeholder or st.compute_at != "root":
                continue
            body = inject_virtual_threads(self.stage_nest(idx))
            private = {id(x.buffer): x.buffer for x in walk(body)
                       if isinstance(x, Allocate) and x.buffer.scope == "local"}
            private_bytes = sum(b.capacity * dt.itemsize(b.dtype) for b in private.values())
            if private_bytes > MAX_THREAD_LOCAL_BYTES:
                raise LoweringError(f"stage '{st.name}': each thread needs {private_bytes} bytes of private buffers "
                                    f"(at most {MAX_THREAD_LOCAL_BYTES} on the cuda target)")
            body, grid, block = bind_threads(body)
            check_barriers_uniform(body)
            params = sorted((b for b in buffers_accessed(body) if b.scope in ("arg", "global")),
                            key=lambda b: order[id(b)])
            shared = {id(x.buffer): x.buffer for x in walk(body)
                      if isinstance(x, Allocate) and x.buffer.scope == SHARED_SCOPE}
            shared_bytes = sum(b.capacity * dt.itemsize(b.dtype) for b in shared.values())
            # a cross-thread reduction exchanges values in shared memory (at most one per thread)
            shared_bytes += max((block * dt.itemsize(x.buffer.dtype) for x in walk(body) if isinstance(x, AllReduce)),
                                default=0)
            kernels.append(DeviceKernel(f"{name}_kernel{len(kernels)}", body, params, grid, block, shared_bytes))
        self.check_limits(kernels)
        return GPUProgram(name, target, list(self.args), list(self.allocations), kernels)

    def check_limits(self, kernels) -> None:
        hw = self.hardware
        if hw is None:
            return
        for k in kernels:
            if k.block > hw.max_threads_per_block:
                raise LoweringError(f"kernel {k.name} needs {k.block} threads per block; the device allows "
                                    f"{hw.max_threads_per_block}")
            if k.shared_bytes > hw.max_shared_memory_per_block:
                raise LoweringError(f"kernel {k.name} needs {k.shared_bytes} bytes of shared memory per block; "
                                    f"the device allows {hw.max_shared_memory_per_block}")
            if k.grid >= 1 << 31:
                raise LoweringError(f"kernel {k.name} needs {k.grid} blocks (at most 2^31 - 1)")


def lower_gpu(state, name: str = "main", hardware=None, target: str = "cuda") -> GPUProgram:
    """Lower ``state`` (a State, or a ComputeDAG for its naive program: one thread) for
    the cuda target; ``hardware`` (``HardwareParams``) checks the limits of a block."""
    if not hasattr(state, "stages"):
        state = state.init_state()
    return GPULowering(state, hardware).program(name, target)
