"""What the LLVM back ends share: an LLVM IR (text, opaque pointers) builder of scalar and
vector values, loads and stores (masked, gathered), conditionals, local buffers and serial
or unrolled loops over the loop IR.

Neither back end owns it: the CPU's (``ir.cpu.codegen``: vector loops, libgomp parallel
loops, the kernel entry and timer) and the GPU's (``ir.cuda.codegen``: threads, shared
memory, cross-thread reductions) subclass ``FunctionBuilder`` and say in ``loop`` which
loop kinds they run. Integer division and modulo by zero give 0, as numpy's do.
"""
from __future__ import annotations

import re
import struct
from dataclasses import dataclass

import llvmlite.binding as llvm
import numpy as np

from . import dtype as dt
from . import expr as E
from .loop_ir import Allocate, Buffer, For, IfThenElse, Load, Pragma, Seq, Stmt, Store
from .padding import identity_select
from .simplify import Simplifier, structural_key
from .vecmath import math_function

#: local buffers of one function (the kernel's body, or one thread's share of a parallel
#: loop) live on its stack up to this many bytes in all; larger ones come from the heap
#: (once per call and thread), so that no thread overflows its stack
STACK_BYTES = 1 << 20
#: a request this large fails on any machine (and stays an i64): the failure is reported
MAX_ALLOCATION = 1 << 62

#: LLVM's instruction schedulers (before and after register allocation) compare each memory
#: operation of a scheduling region with every earlier one it may alias, up to this many
#: (LLVM's ``-dag-maps-huge-region``, 1000 by default) before they chain them: quadratic in
#: an unrolled block's loads and stores. A zero-trial Winograd kernel of ResNet-50 (an
#: unrolled product into a 784 kB tile on the stack) spent 33 s in those two passes, 2 s
#: with 100; of 133 other programs (zero-trial and tuned), 112 compiled to the same bytes
#: and the rest ran as fast, timed in turns (BENCHMARKS.md, 2026-12-01).
SCHEDULER_ALIAS_WINDOW = 100


def set_llvm_options() -> None:
    """Set the LLVM command-line options of ``ir`` (global to the process: both back ends call
    it before they make a target machine)."""
    llvm.set_option("autosched", f"-dag-maps-huge-region={SCHEDULER_ALIAS_WINDOW}")


FLOAT_FLAGS = "contract"
REDUCE_FLAGS = "reassoc contract"


@dataclass(frozen=True)
class Value:
    ref: str
    ty: str  # scalar LLVM type
    lanes: int = 1

    @property
    def full(self) -> str:
        return self.ty if self.lanes == 1 else f"<{self.lanes} x {self.ty}>"


def float_literal(value: float, dtype: str) -> str:
    """LLVM wants float constants as the hex of the double with the same value."""
    if dtype == "float32":
        value = float(np.float32(value))
    return "0x%016X" % struct.unpack("<Q", struct.pack("<d", value))[0]


class ModuleBuilder:
    """Collects functions, declarations and math helpers of one LLVM module."""

    def __init__(self):
        self.declarations: dict[str, str] = {}
        self.functions: list[str] = []
        self.math_defs: dict[str, str] = {}
        #: messages of the kernel's status codes (code i + 1 is errors[i])
        self.errors: list[str] = []
        self._counter = 0

    def error_code(self, message: str) -> int:
        """The status code of ``message`` ("MemoryError: ..." or "IndexError: ...")."""
        if message not in self.errors:
            self.errors.append(message)
        return self.errors.index(message) + 1

    def fresh(self, base: str) -> str:
        self._counter += 1
        return f"{base}.{self._counter}"

    def declare(self, line: str) -> None:
        self.declarations.setdefault(line, line)

    def math(self, func: str, dtype: str, lanes: int) -> str:
        symbol, definition = math_function(func, dtype, lanes)
        if symbol not in self.math_defs:
            body = []
            for line in definition.splitlines():
                if line.startswith("declare"):
                    self.declare(line)
                else:
                    body.append(line)
            self.math_defs[symbol] = "\n".join(body)
        return symbol

    def text(self) -> str:
        parts = list(self.declarations.values()) + list(self.math_defs.values()) + self.functions
        return "\n".join(parts) + "\n"


def vector_type(ty: str, lanes: int) -> str:
    return ty if lanes == 1 else f"<{lanes} x {ty}>"


def intrinsic_suffix(ty: str, lanes: int) -> str:
    base = {"float": "f32", "double": "f64"}.get(ty, ty)
    return base if lanes == 1 else f"v{lanes}{base}"


class VectorUnsupported(Exception):
    """Raised by the pre-check when a loop body cannot be emitted as vector code."""


class FunctionBuilder:
    def __init__(self, module: ModuleBuilder, name: str, params: list[tuple[str, str]], attrs: str = ""):
        self.module = module
        self.name = name
        self.params = params
        self.attrs = attrs
        self.lines: list[str] = []
        self.entry_allocas: list[str] = []
        #: local buffers too large for the stack: (ref, bytes, status code), by buffer id
        self.heap_locals: dict[int, tuple[str, int, int]] = {}
        self.stack_bytes = 0
        #: the i32 the kernel's status is written to (error paths only)
        self.status = "%status"
        self.block = "start"
        self._tmp = 0
        self.env: dict[int, Value] = {}
        self.buffers: dict[int, str] = {}
        self.lanes = 1
        self.vec_var: E.Var | None = None
        self.vec_base: Value | None = None
        self.mask: Value | None = None
        self.unroll_limit = 0
        self.bounds: dict = {}
        self._broadcasts: dict[tuple, Value] = {}

    # basics --------------------------------------------------------------------------
    def tmp(self, base: str = "t") -> str:
        self._tmp += 1
        return f"%{base}{self._tmp}"

    def label(self, base: str) -> str:
        self._tmp += 1
        return f"{base}{self._tmp}"

    def emit(self, line: str) -> None:
        self.lines.append("  " + line)

    def start_block(self, label: str) -> None:
        self.lines.append(f"{label}:")
        self.block = label
        self._broadcasts = {}

    def branch(self, target: str) -> None:
        self.emit(f"br label %{target}")

    def finish(self, ret: str = "ret void") -> str:
        frees = [f"  call void @free(ptr {ref})" for ref, _, _ in self.heap_locals.values()]
        self.lines.extend(frees)
        self.emit(ret)
        params = ", ".join(f"{ty} {name}" for ty, name in self.params)
        body = ["entry:"] + self.entry_allocas + self._heap_prologue(frees, ret) + ["start:"] + self.lines
        return f"define {self.attrs.format(params=params)} {{\n" + "\n".join(body) + "\n}\n"

    def _heap_prologue(self, frees: list[str], ret: str) -> list[str]:
        """Allocate the heap locals on entry; if any allocation fails, free the others,
        report the first failure's code and return."""
        if not self.heap_locals:
            return ["  br label %start"]
        lines, code = [], "0"
        for n, (ref, nbytes, err) in enumerate(self.heap_locals.values()):
            lines.append(f"  {ref} = call noalias ptr @aligned_alloc(i64 64, i64 {nbytes})")
            lines.append(f"  %heap.null.{n} = icmp eq ptr {ref}, null")
            lines.append(f"  %heap.code.{n} = select i1 %heap.null.{n}, i32 {err}, i32 {code}")
            code = f"%heap.code.{n}"
        lines += [f"  %heap.failed = icmp ne i32 {code}, 0",
                  "  br i1 %heap.failed, label %heap.fail, label %start", "heap.fail:"] + frees
        lines += [f"  store atomic i32 {code}, ptr {self.status} monotonic, align 4", "  " + ret]
        return lines

    def flag(self, code: int) -> None:
        """Report status ``code`` (threads may race to report: any one of them wins)."""
        self.emit(f"store atomic i32 {code}, ptr {self.status} monotonic, align 4")

    # values ----------------------------------------------------------------------------
    def const(self, value, dtype: str) -> Value:
        ty = dt.llvm_type(dtype)
        if dt.is_float(dtype):
            return Value(float_literal(value, dtype), ty)
        if dtype == "bool":
            return Value("true" if value else "false", ty)
        return Value(str(int(value)), ty)

    def broadcast(self, v: Value, lanes: int) -> Value:
        if v.lanes == lanes:
            return v
        if v.lanes != 1:
            raise AssertionError(f"cannot broadcast a {v.lanes}-lane value to {lanes} lanes")
        key = (v.ref, v.ty, lanes)
        hit = self._broadcasts.get(key)
        if hit is not None:
            return hit
        one = self.tmp()
        self.emit(f"{one} = insertelement <{lanes} x {v.ty}> poison, {v.ty} {v.ref}, i64 0")
        out = self.tmp()
        self.emit(f"{out} = shufflevector <{lanes} x {v.ty}> {one}, <{lanes} x {v.ty}> poison, "
                  f"<{lanes} x i32> zeroinitializer")
        res = Value(out, v.ty, lanes)
        self._broadcasts[key] = res
        return res

    def unify(self, a: Value, b: Value) -> tuple[Value, Value]:
        lanes = a.lanes if a.lanes != 1 else b.lanes
        return self.broadcast(a, lanes), self.broadcast(b, lanes)

    def instr(self, text: str, ty: str, lanes: int) -> Value:
        out = self.tmp()
        self.emit(f"{out} = {text}")
        return Value(out, ty, lanes)

    def intrinsic(self, name: str, args: list[Value], ty: str, lanes: int) -> Value:
        full = vector_type(ty, lanes)
        sym = f"@llvm.{name}.{intrinsic_suffix(ty, lanes)}"
        self.module.declare(f"declare {full} {sym}({', '.join(a.full for a in args)})")
        return self.instr(f"call {full} {sym}({', '.join(f'{a.full} {a.ref}' for a in args)})", ty, lanes)

    # expressions -------------------------------------------------------------------------
    def ev(self, e: E.Expr) -> Value:
        if isinstance(e, E.Const):
            return self.const(e.value, e.dtype)
        if isinstance(e, E.Var):
            return self.env[id(e)]
        if isinstance(e, Load):
            return self.load(e)
        if isinstance(e, E.Binary):
            return self.binary(e)
        if isinstance(e, E.Compare):
            return self.compare(e)
        if isinstance(e, E.Not):
            a = self.ev(e.a)
            return self.instr(f"xor {a.full} {a.ref}, {self.broadcast(Value('true', 'i1'), a.lanes).ref}"
                              if a.lanes > 1 else f"xor i1 {a.ref}, true", "i1", a.lanes)
        if isinstance(e, E.Select):
            return self.select(e)
        if isinstance(e, E.Cast):
            return self.cast(e)
        if isinstance(e, E.Call):
            args = [self.ev(a) for a in e.args]
            if len(args) == 2:
                args = list(self.unify(*args))
            lanes = args[0].lanes
            sym = self.module.math(e.func, e.dtype, lanes)
            ty = dt.llvm_type(e.dtype)
            return self.instr(f"call {vector_type(ty, lanes)} {sym}({', '.join(f'{a.full} {a.ref}' for a in args)})",
                              ty, lanes)
        raise TypeError(f"cannot generate code for {type(e).__name__}: {e}")

    def binary(self, e: E.Binary, flags: str = FLOAT_FLAGS) -> Value:
        a, b = self.unify(self.ev(e.a), self.ev(e.b))
        ty, lanes, full = a.ty, a.lanes, a.full
        op = e.op
        if op in ("and", "or"):
            return self.instr(f"{op} {full} {a.ref}, {b.ref}", ty, lanes)
        if dt.is_float(e.dtype):
            if op in ("min", "max"):
                return self.float_minmax(op, a, b)
            name = {"+": "fadd", "-": "fsub", "*": "fmul", "/": "fdiv"}[op]
            return self.instr(f"{name} {flags} {full} {a.ref}, {b.ref}", ty, lanes)
        signed = not dt.is_unsigned(e.dtype)
        if op in ("+", "-", "*"):
            name = {"+": "add", "-": "sub", "*": "mul"}[op]
            return self.instr(f"{name} {'nsw ' if signed else ''}{full} {a.ref}, {b.ref}", ty, lanes)
        if op in ("min", "max"):
            pred = ("s" if signed else "u") + ("lt" if op == "min" else "gt")
            c = self.instr(f"icmp {pred} {full} {a.ref}, {b.ref}", "i1", lanes)
            return self.instr(f"select {c.full} {c.ref}, {full} {a.ref}, {full} {b.ref}", ty, lanes)
        if op in ("//", "%"):
            return self.floor_divmod(op, e, a, b, signed)
        raise TypeError(f"unknown binary op {op}")

    def float_minmax(self, op: str, a: Value, b: Value) -> Value:
        """``a < b ? a : b`` (or ``>``): one vminps/vmaxps, unlike llvm.minnum's NaN fix-ups
        that lengthen a max-reduction's dependency chain."""
        c = self.instr(f"fcmp {'olt' if op == 'min' else 'ogt'} {a.full} {a.ref}, {b.ref}", "i1", a.lanes)
        return self.instr(f"select {c.full} {c.ref}, {a.full} {a.ref}, {a.full} {b.ref}", a.ty, a.lanes)

    def floor_divmod(self, op: str, e: E.Binary, a: Value, b: Value, signed: bool) -> Value:
        """Floor division / modulo. A divisor that may be 0 (or -1, whose quotient of the
        most negative number traps as well) gives numpy's results: 0 for both by 0;
        ``-a`` (wrapping) and 0 by -1."""
        simplify = Simplifier(self.bounds)
        lo_a = simplify.affine(e.a).interval(self.bounds)[0]
        lo_b, hi_b = simplify.affine(e.b).interval(self.bounds)
        risky = [d for d in ((0, -1) if signed else (0,)) if lo_b <= d <= hi_b]
        if risky:
            return self.divmod_by_any(op, a, b, signed, risky)
        if not signed or (lo_a >= 0 and lo_b > 0):
            name = ("u" if not signed else "s") + ("div" if op == "//" else "rem")
            return self.instr(f"{name} {a.full} {a.ref}, {b.ref}", a.ty, a.lanes)
        return self.floor_fixup(op, a, b)

    def divmod_by_any(self, op: str, a: Value, b: Value, signed: bool, risky: list) -> Value:
        """``floor_divmod`` with the divisors in ``risky`` (0, -1) replaced by 1 for the
        division itself and their results selected afterwards."""
        full, ty, lanes = a.full, a.ty, a.lanes
        is_risky = {d: self.instr(f"icmp eq {full} {b.ref}, {self.broadcast(Value(str(d), ty), lanes).ref}",
                                  "i1", lanes) for d in risky}
        safe = b
        for cond in is_risky.values():
            one = self.broadcast(Value("1", ty), lanes)
            safe = self.instr(f"select {cond.full} {cond.ref}, {full} {one.ref}, {full} {safe.ref}", ty, lanes)
        if signed:
            out = self.floor_fixup(op, a, safe)
        else:
            out = self.instr(f"{'udiv' if op == '//' else 'urem'} {full} {a.ref}, {safe.ref}", ty, lanes)
        zero = self.broadcast(Value("0", ty), lanes)
        if -1 in is_risky and op == "//":  # a // -1 == -a, wrapping like numpy's
            neg = self.instr(f"sub {full} {zero.ref}, {a.ref}", ty, lanes)
            c = is_risky[-1]
            out = self.instr(f"select {c.full} {c.ref}, {full} {neg.ref}, {full} {out.ref}", ty, lanes)
        if 0 in is_risky:  # (by 1 the remainder is already 0, as it should be by -1)
            c = is_risky[0]
            out = self.instr(f"select {c.full} {c.ref}, {full} {zero.ref}, {full} {out.ref}", ty, lanes)
        return out

    def floor_fixup(self, op: str, a: Value, b: Value) -> Value:
        """Signed floor division / modulo from LLVM's truncating ``sdiv``/``srem``."""
        full, ty, lanes = a.full, a.ty, a.lanes
        q = self.instr(f"sdiv {full} {a.ref}, {b.ref}", ty, lanes)
        r = self.instr(f"srem {full} {a.ref}, {b.ref}", ty, lanes)
        zero = self.broadcast(Value("0", ty), lanes)
        nz = self.instr(f"icmp ne {full} {r.ref}, {zero.ref}", "i1", lanes)
        rneg = self.instr(f"icmp slt {full} {r.ref}, {zero.ref}", "i1", lanes)
        bneg = self.instr(f"icmp slt {full} {b.ref}, {zero.ref}", "i1", lanes)
        diff = self.instr(f"xor {vector_type('i1', lanes)} {rneg.ref}, {bneg.ref}", "i1", lanes)
        fix = self.instr(f"and {vector_type('i1', lanes)} {nz.ref}, {diff.ref}", "i1", lanes)
        if op == "//":
            one = self.instr(f"zext {vector_type('i1', lanes)} {fix.ref} to {full}", ty, lanes)
            return self.instr(f"sub {full} {q.ref}, {one.ref}", ty, lanes)
        plus = self.instr(f"add {full} {r.ref}, {b.ref}", ty, lanes)
        return self.instr(f"select {vector_type('i1', lanes)} {fix.ref}, {full} {plus.ref}, {full} {r.ref}", ty, lanes)

    def compare(self, e: E.Compare) -> Value:
        a, b = self.unify(self.ev(e.a), self.ev(e.b))
        if dt.is_float(e.a.dtype):
            pred = {"<": "olt", "<=": "ole", ">": "ogt", ">=": "oge", "==": "oeq", "!=": "une"}[e.op]
            return self.instr(f"fcmp {pred} {a.full} {a.ref}, {b.ref}", "i1", a.lanes)
        s = "u" if dt.is_unsigned(e.a.dtype) or e.a.dtype == "bool" else "s"
        pred = {"<": s + "lt", "<=": s + "le", ">": s + "gt", ">=": s + "ge", "==": "eq", "!=": "ne"}[e.op]
        return self.instr(f"icmp {pred} {a.full} {a.ref}, {b.ref}", "i1", a.lanes)

    def cast(self, e: E.Cast) -> Value:
        v = self.ev(e.value)
        src, dst = e.value.dtype, e.dtype
        to = vector_type(dt.llvm_type(dst), v.lanes)
        ty = dt.llvm_type(dst)
        if dst == "bool":
            zero = self.broadcast(self.const(0, src), v.lanes)
            cmp = "fcmp une" if dt.is_float(src) else "icmp ne"
            return self.instr(f"{cmp} {v.full} {v.ref}, {zero.ref}", "i1", v.lanes)
        if dt.is_float(src) and dt.is_float(dst):
            op = "fpext" if dt.itemsize(dst) > dt.itemsize(src) else "fptrunc"
        elif dt.is_float(src):
            op = "fptoui" if dt.is_unsigned(dst) else "fptosi"
        elif dt.is_float(dst):
            op = "uitofp" if dt.is_unsigned(src) or src == "bool" else "sitofp"
        elif dt.itemsize(dst) > dt.itemsize(src) or src == "bool":
            op = "zext" if dt.is_unsigned(src) or src == "bool" else "sext"
        elif dt.itemsize(dst) < dt.itemsize(src):
            op = "trunc"
        else:
            return Value(v.ref, ty, v.lanes)
        return self.instr(f"{op} {v.full} {v.ref} to {to}", ty, v.lanes)

    def select(self, e: E.Select) -> Value:
        cond = self.ev(e.cond)
        lazy = any(isinstance(n, Load) for branch in (e.t, e.f) for n in E.walk(branch))
        if not lazy:
            t, f = self.unify(self.ev(e.t), self.ev(e.f))
            cond = self.broadcast(cond, t.lanes) if t.lanes > 1 else cond
            if cond.lanes > t.lanes:
                t, f = self.broadcast(t, cond.lanes), self.broadcast(f, cond.lanes)
            return self.instr(f"select {cond.full} {cond.ref}, {t.full} {t.ref}, {t.full} {f.ref}", t.ty, t.lanes)
        if cond.lanes > 1:
            return self.masked_select(cond, e)
        then_l, else_l, end_l = self.label("sel.t"), self.label("sel.f"), self.label("sel.end")
        self.emit(f"br i1 {cond.ref}, label %{then_l}, label %{else_l}")
        self.start_block(then_l)
        t = self.broadcast(self.ev(e.t), self.lanes)
        t_end = self.block
        self.branch(end_l)
        self.start_block(else_l)
        f = self.broadcast(self.ev(e.f), self.lanes)
        f_end = self.block
        self.branch(end_l)
        self.start_block(end_l)
        return self.instr(f"phi {t.full} [{t.ref}, %{t_end}], [{f.ref}, %{f_end}]", t.ty, t.lanes)

    def masked_select(self, cond: Value, e: E.Select) -> Value:
        outer = self.mask
        true_mask = cond if outer is None else self.instr(f"and {cond.full} {cond.ref}, {outer.ref}", "i1", cond.lanes)
        inv = self.instr(f"xor {cond.full} {cond.ref}, {self.broadcast(Value('true', 'i1'), cond.lanes).ref}",
                         "i1", cond.lanes)
        false_mask = inv if outer is None else self.instr(f"and {inv.full} {inv.ref}, {outer.ref}", "i1", cond.lanes)
        t = self.masked_branch(true_mask, e.t)
        f = self.masked_branch(false_mask, e.f)
        self.mask = outer
        return self.instr(f"select {cond.full} {cond.ref}, {t.full} {t.ref}, {t.full} {f.ref}", t.ty, t.lanes)

    def masked_branch(self, mask: Value, branch: E.Expr) -> Value:
        """``branch`` evaluated under ``mask`` as a vector of its lanes; a branch that loads
        runs only when a lane of ``mask`` is set (else zeros, which no lane uses). A
        concatenation of n tensors is a tree of selects on the joined axis, and a vector
        usually lies within one of them: evaluating every side made each vector load from
        all n inputs (DenseNet-121's 25-input concatenations ran at 9 GB/s against 107 for one)."""
        self.mask = mask
        if not any(isinstance(n, Load) for n in E.walk(branch)):
            return self.broadcast(self.ev(branch), mask.lanes)
        run_l, end_l = self.label("msel.run"), self.label("msel.end")
        before = self.block
        self.emit(f"br i1 {self.any_lane(mask).ref}, label %{run_l}, label %{end_l}")
        self.start_block(run_l)
        value = self.broadcast(self.ev(branch), mask.lanes)
        ran = self.block
        self.branch(end_l)
        self.start_block(end_l)
        return self.instr(f"phi {value.full} [{value.ref}, %{ran}], [zeroinitializer, %{before}]",
                          value.ty, value.lanes)

    # memory ------------------------------------------------------------------------------
    def address(self, buf: Buffer, index: Value) -> Value:
        ptr = self.buffers[id(buf)]
        sty = dt.storage_llvm_type(buf.dtype)
        # under a mask the index may be out of bounds for lanes (or iterations) that never
        # access memory: no ``inbounds`` then, or LLVM may treat the address as dereferenceable
        inbounds = "" if self.mask is not None else "inbounds "
        return self.instr(f"getelementptr {inbounds}{sty}, ptr {ptr}, {index.full} {index.ref}", "ptr", index.lanes)

    def vector_access(self, index: E.Expr):
        """Classify an index inside a vector loop: ("scalar", None), ("contiguous", base)
        or ("gather", None)."""
        if self.vec_var is None or not depends_on(index, self.vec_var):
            return "scalar", None
        form = Simplifier(self.bounds).affine(index)
        key = structural_key(self.vec_var)
        entry = form.terms.get(key)
        rest_ok = all(not depends_on(atom, self.vec_var) for k, (atom, _) in form.terms.items() if k != key)
        if entry is not None and entry[1] == 1 and rest_ok:
            form.terms.pop(key)
            return "contiguous", form.to_expr(index.dtype)
        return "gather", None

    def _vector_index_base(self, rest: E.Expr) -> Value:
        base = self.ev(rest)
        if self.vec_base is None:
            return base
        return self.instr(f"add nsw i64 {base.ref}, {self.vec_base.ref}", "i64", 1)

    def load(self, e: Load) -> Value:
        if e.in_range is not None:
            return self.checked_load(e)
        sty = dt.storage_llvm_type(e.buffer.dtype)
        kind, rest = self.vector_access(e.index)
        lanes = self.lanes
        align = dt.itemsize(e.buffer.dtype)
        if kind == "scalar" and (self.mask is None or self.lanes == 1):
            ptr = self.address(e.buffer, self.ev(e.index))
            raw = self.instr(f"load {sty}, ptr {ptr.ref}, align {align}", sty, 1)
        elif kind == "contiguous" or kind == "scalar":
            if kind == "scalar":
                # a masked-off lane-invariant load: load through lane 0's address with the mask
                base = self.ev(e.index)
                ptrs = self.broadcast(self.address(e.buffer, base), lanes)
                raw = self._gather(ptrs, sty, lanes, align)
            else:
                ptr = self.address(e.buffer, self._vector_index_base(rest))
                vt = vector_type(sty, lanes)
                if self.mask is None:
                    raw = self.instr(f"load {vt}, ptr {ptr.ref}, align {align}", sty, lanes)
                else:
                    sym = f"@llvm.masked.load.{intrinsic_suffix(sty, lanes)}.p0"
                    self.module.declare(f"declare {vt} {sym}(ptr, i32, <{lanes} x i1>, {vt})")
                    raw = self.instr(f"call {vt} {sym}(ptr {ptr.ref}, i32 {align}, {self.mask.full} "
                                     f"{self.mask.ref}, {vt} zeroinitializer)", sty, lanes)
        else:
            windows = self.window_offsets(e.index) if self.mask is None else None
            if windows is not None:
                raw = self._window_load(e.buffer, windows, sty, align)
            else:
                idx = self.broadcast(self.ev(e.index), lanes)
                ptrs = self.address(e.buffer, idx)
                raw = self._gather(ptrs, sty, lanes, align)
        if e.buffer.dtype == "bool":
            return self.instr(f"trunc {raw.full} {raw.ref} to {vector_type('i1', raw.lanes)}", "i1", raw.lanes)
        return raw

    def window_offsets(self, index: E.Expr) -> list[tuple[E.Expr, dict[int, int]]] | None:
        """The windows a vector loop's lanes read from where that is a gather: at most two,
        each (its first lane's index, lane -> offset from it) with every offset known when the
        kernel is built and under ``lanes``; None where the lanes need more (a gather). A
        grouped convolution of 4 channels a group, vectorised over 16 output channels, reads
        input channel ``(c // 4) * 4 + rc``: one window, offsets 0, 0, 0, 0, 4, ... 12, one
        load of 13 floats and a shuffle where a gather loaded each lane alone (17 GFLOPS in
        ResNeXt-50's first stage). A channel shuffle in channels-last order reads
        ``(c % 2) * 64 + c // 2``: two windows, 64 channels apart."""
        if self.vec_base is not None or self.vec_var is None:
            return None
        simplify = Simplifier(self.bounds)
        var = self.vec_var
        windows: list[tuple[E.Expr, dict[int, int]]] = []
        for lane in range(self.lanes):
            at = simplify(E.substitute(index, {var: E.Const(lane, var.dtype)}))
            for base, offsets in windows:
                off = simplify(E.Binary("-", at, base))
                if isinstance(off, E.Const) and 0 <= off.value < self.lanes:
                    offsets[lane] = int(off.value)
                    break
            else:
                if len(windows) == 2:
                    return None
                windows.append((at, {lane: 0}))
        return windows

    def _window_load(self, buf: Buffer, windows: list, sty: str, align: int) -> Value:
        """The lanes of a ``window_offsets`` read: each window's elements from its first lane's
        to the last one read (all inside the buffer: they lie between two addresses that are
        read), then each lane's picked out by a shuffle."""
        lanes = self.lanes
        if len(windows) == 1 and max(windows[0][1].values()) == 0:      # every lane reads one element
            ptr = self.address(buf, self.ev(windows[0][0]))
            return self.broadcast(self.instr(f"load {sty}, ptr {ptr.ref}, align {align}", sty, 1), lanes)
        loaded = []
        for base, offsets in windows:
            width = max(offsets.values()) + 1
            ptr = self.address(buf, self.ev(base))
            loaded.append((self.instr(f"load <{width} x {sty}>, ptr {ptr.ref}, align {align}", sty, width), width))
        width = max(w for _, w in loaded)
        parts = []
        for value, w in loaded:          # both shuffle operands of one width (<1 x float> too)
            if w < width:
                mask = ", ".join(f"i32 {min(i, w - 1)}" for i in range(width))
                value = self.instr(f"shufflevector <{w} x {sty}> {value.ref}, <{w} x {sty}> poison, "
                                   f"<{width} x i32> <{mask}>", sty, width)
            parts.append(value)
        second = parts[1].ref if len(parts) > 1 else "poison"
        picks = [next(k * width + off[lane] for k, (_, off) in enumerate(windows) if lane in off) for lane in range(lanes)]
        wt = f"<{width} x {sty}>"
        mask = ", ".join(f"i32 {p}" for p in picks)
        return self.instr(f"shufflevector {wt} {parts[0].ref}, {wt} {second}, <{lanes} x i32> <{mask}>", sty, lanes)

    def checked_load(self, e: Load) -> Value:
        """A read whose index is checked at run time: where ``e.in_range`` fails (in a
        lane that is active), element 0 is read instead and an IndexError reported."""
        ok, index = self.unify(self.ev(e.in_range), self.ev(e.index))
        lanes = ok.lanes
        bad = self.instr(f"xor {ok.full} {ok.ref}, {self.broadcast(Value('true', 'i1'), lanes).ref}", "i1", lanes)
        if self.mask is not None:
            active = self.mask if lanes > 1 else self.any_lane(self.mask)
            bad = self.instr(f"and {bad.full} {bad.ref}, {active.ref}", "i1", lanes)
        code = self.module.error_code(f"IndexError: the kernel read '{e.buffer.name}' at an index outside it (an "
                                      "index that could not be proven in range when the kernel was built, e.g. "
                                      "one read from data); element 0 was read instead")
        flag_l, go_l = self.label("oob"), self.label("oob.end")
        self.emit(f"br i1 {self.any_lane(bad).ref}, label %{flag_l}, label %{go_l}")
        self.start_block(flag_l)
        self.flag(code)
        self.branch(go_l)
        self.start_block(go_l)
        zero = self.broadcast(Value("0", index.ty), lanes)
        safe = self.instr(f"select {ok.full} {ok.ref}, {index.full} {index.ref}, {index.full} {zero.ref}",
                          index.ty, lanes)
        sty, align = dt.storage_llvm_type(e.buffer.dtype), dt.itemsize(e.buffer.dtype)
        mask, self.mask = self.mask, None  # every address is inside the buffer now
        ptr = self.address(e.buffer, safe)
        self.mask = mask
        if lanes == 1:
            raw = self.instr(f"load {sty}, ptr {ptr.ref}, align {align}", sty, 1)
        else:
            raw = self._gather(ptr, sty, lanes, align)
        if e.buffer.dtype == "bool":
            return self.instr(f"trunc {raw.full} {raw.ref} to {vector_type('i1', lanes)}", "i1", lanes)
        return raw

    def any_lane(self, v: Value) -> Value:
        """Whether any lane of the i1 vector ``v`` is set (``v`` itself for a scalar)."""
        if v.lanes == 1:
            return v
        sym = f"@llvm.vector.reduce.or.v{v.lanes}i1"
        self.module.declare(f"declare i1 {sym}({v.full})")
        return self.instr(f"call i1 {sym}({v.full} {v.ref})", "i1", 1)

    def _gather(self, ptrs: Value, sty: str, lanes: int, align: int) -> Value:
        vt = vector_type(sty, lanes)
        sym = f"@llvm.masked.gather.{intrinsic_suffix(sty, lanes)}.v{lanes}p0"
        self.module.declare(f"declare {vt} {sym}(<{lanes} x ptr>, i32, <{lanes} x i1>, {vt})")
        mask = self.mask if self.mask is not None else self.broadcast(Value("true", "i1"), lanes)
        return self.instr(f"call {vt} {sym}(<{lanes} x ptr> {ptrs.ref}, i32 {align}, {mask.full} {mask.ref}, "
                          f"{vt} zeroinitializer)", sty, lanes)

    def store(self, s: Store) -> None:
        s = self.without_padding_term(s)
        if s is None:
            return
        kind, rest = self.vector_access(s.index)
        if kind == "scalar" and self.lanes > 1 and depends_on(s.value, self.vec_var):
            return self.horizontal_update(s)
        value = self.binary(s.value, REDUCE_FLAGS) if is_float_sum_update(s) else self.ev(s.value)
        sty = dt.storage_llvm_type(s.buffer.dtype)
        if s.buffer.dtype == "bool":
            value = self.instr(f"zext {value.full} {value.ref} to {vector_type('i8', value.lanes)}", "i8", value.lanes)
        align = dt.itemsize(s.buffer.dtype)
        if kind == "scalar":
            ptr = self.address(s.buffer, self.ev(s.index))
            if self.mask is not None and self.lanes > 1:
                # every active lane stores the same value at the same place: store it once
                # if any lane is active
                m = self.mask
                anyl = self.any_lane(m)
                if value.lanes > 1:  # take it from the first active lane (inactive ones read zeros)
                    bits = self.instr(f"bitcast {m.full} {m.ref} to i{m.lanes}", f"i{m.lanes}", 1)
                    self.module.declare(f"declare i{m.lanes} @llvm.cttz.i{m.lanes}(i{m.lanes}, i1)")
                    lane = self.instr(f"call i{m.lanes} @llvm.cttz.i{m.lanes}(i{m.lanes} {bits.ref}, i1 false)",
                                      f"i{m.lanes}", 1)
                    value = self.instr(f"extractelement {value.full} {value.ref}, i{m.lanes} {lane.ref}", value.ty, 1)
                do_l, end_l = self.label("mstore"), self.label("mstore.end")
                self.emit(f"br i1 {anyl.ref}, label %{do_l}, label %{end_l}")
                self.start_block(do_l)
                self.emit(f"store {sty} {value.ref}, ptr {ptr.ref}, align {align}")
                self.branch(end_l)
                self.start_block(end_l)
                return
            self.emit(f"store {sty} {value.ref}, ptr {ptr.ref}, align {align}")
            return
        value = self.broadcast(value, self.lanes)
        lanes = self.lanes
        vt = vector_type(sty, lanes)
        if kind == "contiguous":
            ptr = self.address(s.buffer, self._vector_index_base(rest))
            if self.mask is None:
                self.emit(f"store {vt} {value.ref}, ptr {ptr.ref}, align {align}")
            else:
                sym = f"@llvm.masked.store.{intrinsic_suffix(sty, lanes)}.p0"
                self.module.declare(f"declare void {sym}({vt}, ptr, i32, <{lanes} x i1>)")
                self.emit(f"call void {sym}({vt} {value.ref}, ptr {ptr.ref}, i32 {align}, "
                          f"{self.mask.full} {self.mask.ref})")
            return
        ptrs = self.address(s.buffer, self.broadcast(self.ev(s.index), lanes))
        sym = f"@llvm.masked.scatter.{intrinsic_suffix(sty, lanes)}.v{lanes}p0"
        self.module.declare(f"declare void {sym}({vt}, <{lanes} x ptr>, i32, <{lanes} x i1>)")
        mask = self.mask if self.mask is not None else self.broadcast(Value("true", "i1"), lanes)
        self.emit(f"call void {sym}({vt} {value.ref}, <{lanes} x ptr> {ptrs.ref}, i32 {align}, "
                  f"{mask.full} {mask.ref})")

    def without_padding_term(self, s: Store) -> Store | None:
        """A reduction update whose term is the combiner's identity where a select fails
        (padding, ``ir.padding``), where unrolled loops make that condition constant: None
        (nothing to do) where it fails, the update without the select where it holds."""
        found = identity_select(s.value, s)
        if found is None:
            return s
        select, rebuild = found
        if not any(self.bounds.get(v, (0, 1))[0] == self.bounds.get(v, (0, 1))[1] for v in E.free_vars(select.cond)):
            return s
        cond = Simplifier(self.bounds)(select.cond)
        if not isinstance(cond, E.Const):
            return s
        return Store(s.buffer, s.index, rebuild(select.t)) if cond.value else None

    def horizontal_update(self, s: Store) -> None:
        """``buf[i] = buf[i] (+|max|min) f(v)`` with ``i`` independent of the vector lane:
        reduce the lanes of f(v) first, then update once."""
        v = s.value
        if not (isinstance(v, E.Binary) and v.op in ("+", "max", "min") and isinstance(v.a, Load)
                and v.a.buffer is s.buffer and structural_key(v.a.index) == structural_key(s.index)):
            raise VectorUnsupported(f"store to {s.buffer.name} does not depend on the vector lane")
        part = self.broadcast(self.ev(v.b), self.lanes)
        ty = part.ty
        if self.mask is not None:  # lanes outside the guard contribute the combiner's identity
            identity = {"+": 0.0 if dt.is_float(v.dtype) else 0, "max": E.min_value(v.dtype),
                        "min": E.max_value(v.dtype)}[v.op]
            ident = self.broadcast(self.const(identity, v.dtype), self.lanes)
            part = self.instr(f"select {self.mask.full} {self.mask.ref}, {part.full} {part.ref}, "
                              f"{part.full} {ident.ref}", ty, self.lanes)
        if dt.is_float(v.dtype):
            name = {"+": "fadd", "max": "fmax", "min": "fmin"}[v.op]
        else:
            name = {"+": "add", "max": "smax", "min": "smin"}[v.op]
        sym = f"@llvm.vector.reduce.{name}.{intrinsic_suffix(ty, self.lanes)}"
        # the accumulator's address does not depend on the lane and is real: load it plainly
        mask, self.mask = self.mask, None
        acc = self.ev(v.a)
        self.mask = mask
        if name == "fadd":
            self.module.declare(f"declare {ty} {sym}({ty}, {part.full})")
            total = self.instr(f"call {REDUCE_FLAGS} {ty} {sym}({ty} {acc.ref}, {part.full} {part.ref})", ty, 1)
        else:
            self.module.declare(f"declare {ty} {sym}({part.full})")
            red = self.instr(f"call {ty} {sym}({part.full} {part.ref})", ty, 1)
            total = self.binary_values(v.op, v.dtype, acc, red)
        ptr = self.address(s.buffer, self.ev(s.index))
        self.emit(f"store {ty} {total.ref}, ptr {ptr.ref}, align {dt.itemsize(s.buffer.dtype)}")

    def binary_values(self, op: str, dtype: str, a: Value, b: Value) -> Value:
        if dt.is_float(dtype):
            return self.float_minmax(op, a, b)
        pred = "slt" if op == "min" else "sgt"
        c = self.instr(f"icmp {pred} {a.full} {a.ref}, {b.ref}", "i1", a.lanes)
        return self.instr(f"select {c.full} {c.ref}, {a.full} {a.ref}, {a.full} {b.ref}", a.ty, a.lanes)

    # statements ----------------------------------------------------------------------------
    def stmt(self, s: Stmt) -> None:
        if isinstance(s, Seq):
            for x in s.stmts:
                self.stmt(x)
        elif isinstance(s, Store):
            self.store(s)
        elif isinstance(s, For):
            self.loop(s)
        elif isinstance(s, IfThenElse):
            self.if_stmt(s)
        elif isinstance(s, Allocate):
            self.allocate(s)
        elif isinstance(s, Pragma):
            saved = self.unroll_limit
            self.unroll_limit = s.value if s.key == "auto_unroll_max_step" else saved
            self.stmt(s.body)
            self.unroll_limit = saved
        else:
            raise TypeError(f"cannot generate code for statement {type(s).__name__}")

    def if_stmt(self, s: IfThenElse) -> None:
        cond = self.ev(s.cond)
        if cond.lanes > 1:
            outer = self.mask
            self.mask = cond if outer is None else self.instr(f"and {cond.full} {cond.ref}, {outer.ref}", "i1",
                                                             cond.lanes)
            self.stmt(s.then)
            if s.otherwise is not None:
                inv = self.instr(f"xor {cond.full} {cond.ref}, "
                                 f"{self.broadcast(Value('true', 'i1'), cond.lanes).ref}", "i1", cond.lanes)
                self.mask = inv if outer is None else self.instr(f"and {inv.full} {inv.ref}, {outer.ref}", "i1",
                                                                cond.lanes)
                self.stmt(s.otherwise)
            self.mask = outer
            return
        then_l, else_l, end_l = self.label("if.t"), self.label("if.f"), self.label("if.end")
        self.emit(f"br i1 {cond.ref}, label %{then_l}, label %{else_l if s.otherwise else end_l}")
        self.start_block(then_l)
        self.stmt(s.then)
        self.branch(end_l)
        if s.otherwise is not None:
            self.start_block(else_l)
            self.stmt(s.otherwise)
            self.branch(end_l)
        self.start_block(end_l)

    def allocate(self, s: Allocate) -> None:
        """Local buffers: stack arrays in the function's entry (so that SROA keeps small
        ones in registers), or heap blocks allocated on entry once the stack share is
        spent. Intermediates of the whole kernel: heap blocks around their users; a failed
        allocation skips them and reports a MemoryError."""
        buf = s.buffer
        nbytes = buf.capacity * dt.itemsize(buf.dtype)
        if buf.scope == "local":
            if self.stack_bytes + nbytes <= STACK_BYTES:
                ref = f"%buf.{buf.name}.{self._tmp}"
                self._tmp += 1
                self.stack_bytes += nbytes
                self.entry_allocas.append(f"  {ref} = alloca {dt.storage_llvm_type(buf.dtype)}, i64 {buf.capacity}, "
                                          "align 64")
            else:
                ref = self.heap_local(buf, nbytes)
            self.buffers[id(buf)] = ref
            self.stmt(s.body)
            return
        self.declare_heap()
        code = self.module.error_code(f"MemoryError: the kernel could not allocate {nbytes} bytes for its "
                                      f"intermediate '{buf.name}' (shape {buf.shape}, {buf.dtype})")
        ptr = self.instr(f"call noalias ptr @aligned_alloc(i64 64, i64 {heap_bytes(nbytes)})", "ptr", 1)
        null = self.instr(f"icmp eq ptr {ptr.ref}, null", "i1", 1)
        ok_l, fail_l, end_l = self.label("alloc.ok"), self.label("alloc.fail"), self.label("alloc.end")
        self.emit(f"br i1 {null.ref}, label %{fail_l}, label %{ok_l}")
        self.start_block(ok_l)
        self.buffers[id(buf)] = ptr.ref
        self.stmt(s.body)
        self.emit(f"call void @free(ptr {ptr.ref})")
        self.branch(end_l)
        self.start_block(fail_l)
        self.flag(code)
        self.branch(end_l)
        self.start_block(end_l)

    def heap_local(self, buf: Buffer, nbytes: int) -> str:
        """The heap block of local buffer ``buf`` in this function (one per buffer, even
        when its loop is unrolled: its uses follow each other)."""
        hit = self.heap_locals.get(id(buf))
        if hit is None:
            self.declare_heap()
            code = self.module.error_code(f"MemoryError: the kernel could not allocate {nbytes} bytes per thread "
                                          f"for its local buffer '{buf.name}' (shape {buf.shape}, {buf.dtype})")
            hit = (f"%heap.{buf.name}.{len(self.heap_locals)}", heap_bytes(nbytes), code)
            self.heap_locals[id(buf)] = hit
        return hit[0]

    def declare_heap(self) -> None:
        self.module.declare("declare noalias ptr @aligned_alloc(i64, i64)")
        self.module.declare("declare void @free(ptr)")

    # loops -------------------------------------------------------------------------------------
    def loop(self, s: For) -> None:
        """A loop of ``s.kind``: each back end says which kinds it runs, and how."""
        raise NotImplementedError(f"{type(self).__name__} does not generate loops")

    def serial_loop(self, var: E.Var, extent: int, body_fn, start: Value | None = None) -> None:
        """A rotated loop ``for var in range(start, start + extent)``; ``extent`` >= 1."""
        head, exit_l = self.label("loop"), self.label("loop.end")
        pre = self.block
        self.branch(head)
        self.start_block(head)
        phi = self.tmp(re.sub(r"[^A-Za-z0-9_]", "_", var.name) + "_")
        next_ref = self.tmp("next")
        latch_holder: list[str] = []
        phi_index = len(self.lines)
        self.lines.append(None)  # patched once the latch block is known
        self.env[id(var)] = Value(phi, "i64")
        saved_bounds = self.bounds.get(var)
        self.bounds[var] = (0, extent - 1)
        body_fn()
        latch_holder.append(self.block)
        self.emit(f"{next_ref} = add nuw nsw i64 {phi}, 1")
        cond = self.tmp()
        self.emit(f"{cond} = icmp ult i64 {next_ref}, {extent}")
        self.emit(f"br i1 {cond}, label %{head}, label %{exit_l}")
        self.lines[phi_index] = f"  {phi} = phi i64 [0, %{pre}], [{next_ref}, %{latch_holder[0]}]"
        self.start_block(exit_l)
        if saved_bounds is None:
            self.bounds.pop(var, None)
        del self.env[id(var)]

    def unrolled(self, s: For) -> None:
        for i in range(s.extent):
            self.env[id(s.var)] = Value(str(i), "i64")
            self.bounds[s.var] = (i, i)
            self.stmt(s.body)
        self.bounds.pop(s.var, None)
        del self.env[id(s.var)]

def heap_bytes(nbytes: int) -> int:
    """What to ask ``aligned_alloc`` for: a multiple of the 64-byte alignment (capped,
    so that an impossible size stays an i64 and fails like any other)."""
    return min((nbytes + 63) // 64 * 64, MAX_ALLOCATION)


def depends_on(e: E.Expr, var: E.Var | None) -> bool:
    return var is not None and any(n is var for n in E.walk(e))


def is_float_sum_update(s: Store) -> bool:
    """``buf[i] = buf[i] + x`` on floats: a reduction update that LLVM may reassociate."""
    v = s.value
    return (isinstance(v, E.Binary) and v.op == "+" and dt.is_float(v.dtype) and isinstance(v.a, Load)
            and v.a.buffer is s.buffer)


