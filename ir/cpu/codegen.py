"""The CPU's LLVM IR from the loop IR (text IR, opaque pointers), on the builder the LLVM
back ends share (``ir.llvm_codegen``: values, loads, stores, conditionals, local buffers).

The kernel ``@NAME(ptr %args)`` takes an array of pointers (one per DAG tensor) and calls an
always-inlined body whose buffer parameters are ``noalias``, so that LLVM may keep
accumulators in registers. Loops are emitted as rotated loops (every extent is >= 1):

- ``vectorize``: the body is emitted once per chunk of W lanes with explicit vector values:
  contiguous accesses become vector loads/stores, loop-invariant ones scalars broadcast on
  use, others gathers/scatters; a reduction into a lane-invariant location becomes a
  horizontal reduction. Loops that cannot be vectorised fall back to scalar code.
- ``unroll`` and loop nests under ``auto_unroll_max_step`` are unrolled in the emitted IR.
- ``parallel``: the loop is outlined and run by libgomp's ``GOMP_parallel``, each thread
  taking one contiguous block of iterations.

``@NAME`` returns a status: 0, or the code of what went wrong (an allocation that failed,
a read outside its tensor at an index checked at run time); ``@NAME.error(code)`` returns
its message as a C string ("MemoryError: ..." / "IndexError: ..."), so that a kernel
loaded from an object file explains itself. Integer division and modulo by zero give 0,
as numpy's do, instead of a signal.
"""
from __future__ import annotations

from .. import dtype as dt
from .. import expr as E
from ..llvm_codegen import FunctionBuilder, ModuleBuilder, Value, depends_on
from ..loop_ir import Allocate, Buffer, For, IfThenElse, Load, Prefetch, Stmt, Store, children, nest_trips
from ..simplify import Simplifier, structural_key

MAX_VECTOR_LANES = 16
#: vector loops of at most this many chunks of MAX_VECTOR_LANES are unrolled
MAX_UNROLLED_CHUNKS = 8


class CPUFunctionBuilder(FunctionBuilder):
    """The shared builder with the CPU's loops: explicit vector code, libgomp threads."""
    #: whether this function is the body of an outlined parallel loop (no nested regions)
    in_parallel = False

    def stmt(self, s: Stmt) -> None:
        if isinstance(s, Prefetch):
            return self.prefetch(s)
        super().stmt(s)

    def prefetch(self, s: Prefetch) -> None:
        """``llvm.prefetch`` of the line of ``buffer[index]`` (read, keep in all levels); the
        address is computed without ``inbounds``: a prefetch past the end is a valid hint."""
        index = self.ev(s.index)
        ptr = self.instr(f"getelementptr {dt.storage_llvm_type(s.buffer.dtype)}, ptr {self.buffers[id(s.buffer)]}, "
                         f"{index.full} {index.ref}", "ptr", 1)
        self.module.declare("declare void @llvm.prefetch.p0(ptr nocapture readonly, i32 immarg, i32 immarg, "
                            "i32 immarg)")
        self.emit(f"call void @llvm.prefetch.p0(ptr {ptr.ref}, i32 0, i32 3, i32 1)")

    def loop(self, s: For) -> None:
        if s.kind == "unroll" or (self.unroll_limit and s.kind == "serial" and nest_trips(s) <= self.unroll_limit):
            return self.unrolled(s)
        if s.kind == "vectorize" and self.lanes == 1:
            return self.vector_loop(s)
        if s.kind == "parallel" and not self.in_parallel:
            return self.parallel_loop(s)
        self.serial_loop(s.var, s.extent, lambda: self.stmt(s.body))

    def vector_loop(self, s: For) -> None:
        width = _vector_width(s.extent)
        if width == 1 or not _vectorizable(s):
            return self.serial_loop(s.var, s.extent, lambda: self.stmt(s.body))
        chunks = s.extent // width
        lanes_const = Value("<" + ", ".join(f"i64 {i}" for i in range(width)) + ">", "i64", width)

        def body(chunk: Value | None):
            saved = (self.lanes, self.vec_var, self.vec_base)
            self.lanes, self.vec_var = width, s.var
            if chunk is None:
                self.vec_base = None
                self.env[id(s.var)] = lanes_const
            else:
                base = (Value(str(int(chunk.ref) * width), "i64") if chunk.ref.isdigit() else
                        self.instr(f"mul nuw nsw i64 {chunk.ref}, {width}", "i64", 1))
                self.vec_base = base
                vb = self.broadcast(base, width)
                self.env[id(s.var)] = self.instr(f"add nuw nsw <{width} x i64> {vb.ref}, {lanes_const.ref}",
                                                 "i64", width)
            self.bounds[s.var] = (0, s.extent - 1)
            self.stmt(s.body)
            self.bounds.pop(s.var, None)
            del self.env[id(s.var)]
            self.lanes, self.vec_var, self.vec_base = saved

        if chunks == 1:
            body(None)
        elif chunks <= MAX_UNROLLED_CHUNKS:
            # a short vector loop is unrolled, so its chunks' accumulators can stay in registers
            for c in range(chunks):
                body(Value(str(c), "i64"))
        else:
            chunk_var = E.Var(s.var.name + ".chunk")
            self.serial_loop(chunk_var, chunks, lambda: body(self.env[id(chunk_var)]))

    def parallel_loop(self, s: For) -> None:
        """Outline the loop into a function run by every libgomp thread on its own block."""
        free = _free_values(s, self.env)
        buffers = [b for b in _used_buffers(s) if id(b) in self.buffers]
        name = self.module.fresh(f"{self.name}.par")
        # closure slots: the status, the buffers, the free values
        params = [("ptr noalias", "%status")] + [("ptr noalias", f"%p{i}") for i in range(len(buffers))] + \
                 [("i64", f"%v{i}") for i in range(len(free))] + [("i64", "%lo"), ("i64", "%hi")]
        body_fn = CPUFunctionBuilder(self.module, name + ".body", params,
                                  attrs="internal void @" + name + ".body({params}) alwaysinline nounwind")
        body_fn.in_parallel = True
        body_fn.unroll_limit = self.unroll_limit
        body_fn.bounds = dict(self.bounds)
        for i, b in enumerate(buffers):
            body_fn.buffers[id(b)] = f"%p{i}"
        for i, (var_id, val) in enumerate(free):
            body_fn.env[var_id] = Value(f"%v{i}", "i64")
        body_fn.chunked_loop(s)
        self.module.functions.append(body_fn.finish())
        # the trampoline unpacks the closure and picks this thread's block
        n_pointers = 1 + len(buffers)
        n_slots = n_pointers + len(free)
        tramp = CPUFunctionBuilder(self.module, name, [("ptr", "%data")], attrs="internal void @" + name + "({params}) nounwind")
        self.module.declare("declare i32 @omp_get_thread_num()")
        self.module.declare("declare i32 @omp_get_num_threads()")
        args = []
        for i in range(n_slots):
            slot = tramp.instr(f"getelementptr inbounds i64, ptr %data, i64 {i}", "ptr", 1)
            if i < n_pointers:
                args.append("ptr " + tramp.instr(f"load ptr, ptr {slot.ref}, align 8", "ptr", 1).ref)
            else:
                args.append("i64 " + tramp.instr(f"load i64, ptr {slot.ref}, align 8", "i64", 1).ref)
        tid = tramp.instr("call i32 @omp_get_thread_num()", "i32", 1)
        nth = tramp.instr("call i32 @omp_get_num_threads()", "i32", 1)
        tid64 = tramp.instr(f"sext i32 {tid.ref} to i64", "i64", 1)
        nth64 = tramp.instr(f"sext i32 {nth.ref} to i64", "i64", 1)
        t1 = tramp.instr(f"add i64 {s.extent}, {nth64.ref}", "i64", 1)
        t2 = tramp.instr(f"sub i64 {t1.ref}, 1", "i64", 1)
        chunk = tramp.instr(f"sdiv i64 {t2.ref}, {nth64.ref}", "i64", 1)
        lo = tramp.instr(f"mul i64 {chunk.ref}, {tid64.ref}", "i64", 1)
        hi0 = tramp.instr(f"add i64 {lo.ref}, {chunk.ref}", "i64", 1)
        over = tramp.instr(f"icmp sgt i64 {hi0.ref}, {s.extent}", "i1", 1)
        hi = tramp.instr(f"select i1 {over.ref}, i64 {s.extent}, i64 {hi0.ref}", "i64", 1)
        empty = tramp.instr(f"icmp sge i64 {lo.ref}, {hi.ref}", "i1", 1)
        run_l, done_l = tramp.label("run"), tramp.label("done")
        tramp.emit(f"br i1 {empty.ref}, label %{done_l}, label %{run_l}")
        tramp.start_block(run_l)
        tramp.emit(f"call void @{name}.body({', '.join(args)}, i64 {lo.ref}, i64 {hi.ref})")
        tramp.branch(done_l)
        tramp.start_block(done_l)
        self.module.functions.append(tramp.finish())
        # the caller fills the closure and calls GOMP_parallel
        self.module.declare("declare void @GOMP_parallel(ptr, ptr, i32, i32)")
        closure = f"%closure.{self._tmp}"
        self._tmp += 1
        self.entry_allocas.append(f"  {closure} = alloca i64, i64 {max(n_slots, 1)}, align 8")
        for i, ref in enumerate([self.status] + [self.buffers[id(b)] for b in buffers]):
            slot = self.instr(f"getelementptr inbounds i64, ptr {closure}, i64 {i}", "ptr", 1)
            self.emit(f"store ptr {ref}, ptr {slot.ref}, align 8")
        for i, (var_id, val) in enumerate(free):
            slot = self.instr(f"getelementptr inbounds i64, ptr {closure}, i64 {n_pointers + i}", "ptr", 1)
            self.emit(f"store i64 {val.ref}, ptr {slot.ref}, align 8")
        self.emit(f"call void @GOMP_parallel(ptr @{name}, ptr {closure}, i32 0, i32 0)")

    def chunked_loop(self, s: For) -> None:
        """The body of an outlined parallel loop: iterations [%lo, %hi) (at least one)."""
        head, exit_l = self.label("ploop"), self.label("ploop.end")
        pre = self.block
        self.branch(head)
        self.start_block(head)
        phi, next_ref = self.tmp("pv"), self.tmp("next")
        idx = len(self.lines)
        self.lines.append(None)
        self.env[id(s.var)] = Value(phi, "i64")
        self.bounds[s.var] = (0, s.extent - 1)
        self.stmt(s.body)
        latch = self.block
        self.emit(f"{next_ref} = add nuw nsw i64 {phi}, 1")
        cond = self.tmp()
        self.emit(f"{cond} = icmp slt i64 {next_ref}, %hi")
        self.emit(f"br i1 {cond}, label %{head}, label %{exit_l}")
        self.lines[idx] = f"  {phi} = phi i64 [%lo, %{pre}], [{next_ref}, %{latch}]"
        self.start_block(exit_l)


def _vector_width(extent: int) -> int:
    """Lanes per chunk: the largest power of two (at most 16) dividing the extent, so that
    every vector type is a native width (and has vectorised math); 1 means scalar code."""
    for w in (16, 8, 4, 2):
        if w <= MAX_VECTOR_LANES and extent % w == 0:
            return w
    return 1


def _stmt_exprs(s: Stmt):
    if isinstance(s, Store):
        yield s.index
        yield s.value
    elif isinstance(s, IfThenElse):
        yield s.cond
    for child in children(s):
        yield from _stmt_exprs(child)


def _vectorizable(s: For) -> bool:
    """Vector code needs every store to be lane-contiguous/injective or a reduction into a
    lane-invariant location, no nested parallel/vector loops and no local allocations."""
    var = s.var

    def check(x: Stmt) -> bool:
        if isinstance(x, For) and x.kind in ("parallel", "vectorize"):
            return False
        if isinstance(x, Allocate):
            return False
        if isinstance(x, Store):
            if depends_on(x.index, var):
                form = Simplifier().affine(x.index)
                key = structural_key(var)
                coef = form.terms.get(key, [None, 0])[1]
                others = any(depends_on(a, var) for k, (a, _) in form.terms.items() if k != key)
                return coef != 0 and not others
            if depends_on(x.value, var):
                v = x.value
                return (isinstance(v, E.Binary) and v.op in ("+", "max", "min") and isinstance(v.a, Load)
                        and v.a.buffer is x.buffer and not depends_on(v.a.index, var))
        return all(check(c) for c in children(x))

    return check(s.body)


def _used_buffers(s: Stmt) -> list[Buffer]:
    seen: dict[int, Buffer] = {}

    def visit(x: Stmt):
        for e in _stmt_exprs_local(x):
            for n in E.walk(e):
                if isinstance(n, Load):
                    seen.setdefault(id(n.buffer), n.buffer)
        if isinstance(x, Store):
            seen.setdefault(id(x.buffer), x.buffer)
        for c in children(x):
            visit(c)

    visit(s)
    return list(seen.values())


def _stmt_exprs_local(s: Stmt):
    if isinstance(s, Store):
        return (s.index, s.value)
    if isinstance(s, IfThenElse):
        return (s.cond,)
    return ()


def _free_values(s: For, env: dict[int, Value]) -> list[tuple[int, Value]]:
    """Variables bound outside the loop that its body uses, with their current values."""
    used: set[int] = set()
    for e in _stmt_exprs(s):
        for n in E.walk(e):
            if isinstance(n, E.Var):
                used.add(id(n))
    return [(vid, val) for vid, val in env.items() if vid in used and val.lanes == 1]


def generate(func, name: str | None = None) -> str:
    """LLVM IR text of a lowered function: ``@NAME(ptr %args)`` and ``@NAME.timer``."""
    name = name or func.name
    module = ModuleBuilder()
    params = [("ptr noalias nocapture", f"%a{i}") for i in range(len(func.args))] + \
        [("ptr noalias nocapture", "%status")]
    body = CPUFunctionBuilder(module, name + ".body", params,
                           attrs="internal void @" + name + ".body({params}) alwaysinline nounwind")
    for i, buf in enumerate(func.args):
        body.buffers[id(buf)] = f"%a{i}"
    body.stmt(func.body)
    module.functions.append(body.finish())

    entry = CPUFunctionBuilder(module, name, [("ptr", "%args")], attrs="i32 @" + name + "({params}) nounwind")
    entry.entry_allocas.append("  %status = alloca i32, align 4")
    entry.emit("store i32 0, ptr %status, align 4")
    ptrs = []
    for i in range(len(func.args)):
        slot = entry.instr(f"getelementptr inbounds ptr, ptr %args, i64 {i}", "ptr", 1)
        ptrs.append("ptr " + entry.instr(f"load ptr, ptr {slot.ref}, align 8", "ptr", 1).ref)
    entry.emit(f"call void @{name}.body({', '.join(ptrs)}, ptr %status)")
    status = entry.instr("load i32, ptr %status, align 4", "i32", 1)
    module.functions.append(entry.finish(f"ret i32 {status.ref}"))
    module.functions.append(timer_function(name))
    module.functions.append(_error_messages(name, module.errors))
    return module.text()


def _error_messages(name: str, messages: list[str]) -> str:
    """``ptr @NAME.error(i32 %code)``: the message of status ``code`` (null if unknown)."""
    if not messages:
        return f"define ptr @{name}.error(i32 %code) {{\n  ret ptr null\n}}\n"
    lines = []
    for i, text in enumerate(messages):
        data = text.encode() + b"\0"
        escaped = "".join(chr(c) if 32 <= c < 127 and c not in (34, 92) else f"\\{c:02X}" for c in data)
        lines.append(f'@"{name}.msg.{i}" = private unnamed_addr constant [{len(data)} x i8] c"{escaped}"')
    n = len(messages)
    table = ", ".join(f'ptr @"{name}.msg.{i}"' for i in range(n))
    lines.append(f'@"{name}.msgs" = private constant [{n} x ptr] [{table}]')
    lines.append(f"""define ptr @{name}.error(i32 %code) {{
entry:
  %i = sub i32 %code, 1
  %known = icmp ult i32 %i, {n}
  br i1 %known, label %hit, label %miss
hit:
  %i64 = zext i32 %i to i64
  %slot = getelementptr inbounds [{n} x ptr], ptr @"{name}.msgs", i64 0, i64 %i64
  %msg = load ptr, ptr %slot, align 8
  ret ptr %msg
miss:
  ret ptr null
}}
""")
    return "\n".join(lines)


def timer_function(name: str) -> str:
    """``i64 @NAME.timer(ptr %args, i64 %n)``: nanoseconds for n back-to-back calls, so that
    timing small kernels does not measure Python's call overhead; ``-status`` as soon as a
    call fails."""
    return f"""declare i32 @clock_gettime(i32, ptr)
define i64 @{name}.timer(ptr %args, i64 %n) {{
entry:
  %ts = alloca [2 x i64], align 8
  %c0 = call i32 @clock_gettime(i32 1, ptr %ts)
  %s0 = load i64, ptr %ts, align 8
  %ns.p = getelementptr inbounds i64, ptr %ts, i64 1
  %n0 = load i64, ptr %ns.p, align 8
  br label %loop
loop:
  %i = phi i64 [0, %entry], [%i.next, %next]
  %status = call i32 @{name}(ptr %args)
  %failed = icmp ne i32 %status, 0
  br i1 %failed, label %fail, label %next
next:
  %i.next = add i64 %i, 1
  %more = icmp slt i64 %i.next, %n
  br i1 %more, label %loop, label %done
fail:
  %s64 = zext i32 %status to i64
  %neg = sub i64 0, %s64
  ret i64 %neg
done:
  %c1 = call i32 @clock_gettime(i32 1, ptr %ts)
  %s1 = load i64, ptr %ts, align 8
  %n1 = load i64, ptr %ns.p, align 8
  %ds = sub i64 %s1, %s0
  %dn = sub i64 %n1, %n0
  %dsn = mul i64 %ds, 1000000000
  %total = add i64 %dsn, %dn
  ret i64 %total
}}
"""
