"""Running a ``GPUProgram`` on the CPU with numpy: the cuda target's semantics, checked
where no GPU is present (tests, CI).

Blocks run one after another; the threads of a block run in lockstep, every statement for
all of them at once (numpy arrays over the thread index). Beyond computing the outputs,
the emulator checks what a GPU would not tell: every access is inside its buffer, and
shared and global memory are free of races, i.e. no element is written by one thread and
read or written by another, or read by one thread and then written by another, between
the same two barriers (across blocks: within the whole launch). Lockstep execution would
hide a missing barrier; this check is what finds it. It is slow (a few million scalar
operations a second): for small workloads.
"""
from __future__ import annotations

import numpy as np

from .. import expr as E
from .passes import BLOCK_IDX, THREAD_IDX
from ..loop_ir import Allocate, AllReduce, Barrier, For, IfThenElse, Load, Pragma, Seq, Store

_NUMPY_CALLS = {"exp": np.exp, "log": np.log, "sqrt": np.sqrt, "tanh": np.tanh, "abs": np.abs,
                "floor": np.floor, "ceil": np.ceil, "rsqrt": lambda x: 1 / np.sqrt(x),
                "sigmoid": lambda x: 1 / (1 + np.exp(-x)), "pow": np.power}


class EmulationError(AssertionError):
    """The program does something a GPU would do wrong: an access out of bounds, a race,
    a barrier that not every thread reaches."""


class _Tracked:
    """A buffer in memory shared by threads, with who last wrote and read each element:
    (block, barrier epoch) and the thread's key across the launch."""

    def __init__(self, name: str, data: np.ndarray):
        self.name, self.data = name, data
        self.new_launch()

    def new_launch(self) -> None:
        """A kernel launch orders everything before it."""
        n = self.data.size
        self.write_block = np.full(n, -1, np.int64)
        self.writer = np.full(n, -1, np.int64)
        self.write_epoch = np.full(n, -1, np.int64)
        self.reader = np.full(n, -1, np.int64)      # -2: several threads
        self.read_epoch = np.full(n, -1, np.int64)

    def _fail(self, idx, clash, what: str):
        raise EmulationError(f"race on '{self.name}': element {int(idx[clash][0])} is {what} "
                             "without a barrier between them")

    def check_read(self, idx, who, block: int, epoch: int) -> None:
        other_block = (self.write_block[idx] != -1) & (self.write_block[idx] != block)
        if other_block.any():
            self._fail(idx, other_block, "read by one block and written by another in the same launch")
        clash = (self.write_epoch[idx] == epoch) & (self.writer[idx] != who)
        if clash.any():
            self._fail(idx, clash, "read by one thread and written by another")
        same = self.read_epoch[idx] == epoch
        self.reader[idx] = np.where(same & (self.reader[idx] != who), -2, who)
        uniq, counts = np.unique(idx, return_counts=True)
        self.reader[uniq[counts > 1]] = -2
        self.read_epoch[idx] = epoch

    def check_write(self, idx, who, block: int, epoch: int) -> None:
        if len(np.unique(idx)) != len(idx):
            raise EmulationError(f"race on '{self.name}': several threads store to one element in one statement")
        other_block = (self.write_block[idx] != -1) & (self.write_block[idx] != block)
        if other_block.any():
            self._fail(idx, other_block, "written by two blocks in the same launch")
        clash = ((self.write_epoch[idx] == epoch) & (self.writer[idx] != who)) | \
                ((self.read_epoch[idx] == epoch) & (self.reader[idx] != who) & (self.reader[idx] != -1))
        if clash.any():
            self._fail(idx, clash, "written by one thread and read or written by another")
        self.write_block[idx] = block
        self.writer[idx] = who
        self.write_epoch[idx] = epoch


class Emulator:
    """Runs a ``GPUProgram`` (see the module docstring)."""

    def __init__(self, program):
        self.program = program

    def run(self, arrays) -> None:
        """``arrays``: the DAG's tensors in argument order (outputs written in place)."""
        memory = {}
        for buf, arr in zip(self.program.args, arrays):
            memory[id(buf)] = _Tracked(buf.name, arr.reshape(-1))
        for buf in self.program.temporaries:
            memory[id(buf)] = _Tracked(buf.name, _garbage(buf.dtype, buf.capacity))
        for kernel in self.program.kernels:
            for t in memory.values():
                t.new_launch()
            for block in range(kernel.grid):
                _Block(kernel, block, memory).run()


def _garbage(dtype: str, n: int) -> np.ndarray:
    """Uninitialised memory: NaN for floats (so that reading it shows), a sentinel otherwise."""
    npd = np.dtype(_np(dtype))
    if np.issubdtype(npd, np.floating):
        return np.full(n, np.nan, npd)
    return np.full(n, True if npd == np.bool_ else 7, npd)


class _Block:
    def __init__(self, kernel, block: int, memory: dict):
        self.kernel, self.block, self.memory = kernel, block, memory
        self.n = kernel.block
        self.lanes = np.arange(self.n)
        self.who = block * kernel.block + self.lanes     # a thread's key across the launch
        self.env = {id(THREAD_IDX): self.lanes, id(BLOCK_IDX): block}
        self.local: dict = {}
        self.epoch = 0

    def run(self) -> None:
        self.stmt(self.kernel.body, np.ones(self.n, bool))

    # statements ---------------------------------------------------------------------------
    def stmt(self, s, mask) -> None:
        if isinstance(s, Seq):
            for x in s.stmts:
                self.stmt(x, mask)
        elif isinstance(s, For):
            for i in range(s.extent):
                self.env[id(s.var)] = i
                self.stmt(s.body, mask)
            del self.env[id(s.var)]
        elif isinstance(s, IfThenElse):
            cond = np.broadcast_to(self.ev(s.cond, mask), (self.n,)).astype(bool)
            if (mask & cond).any():
                self.stmt(s.then, mask & cond)
            if s.otherwise is not None and (mask & ~cond).any():
                self.stmt(s.otherwise, mask & ~cond)
        elif isinstance(s, Allocate):
            buf = s.buffer
            if buf.scope == "shared":
                self.memory[id(buf)] = _Tracked(buf.name, _garbage(buf.dtype, buf.capacity))
            else:
                self.local[id(buf)] = np.stack([_garbage(buf.dtype, buf.capacity)] * self.n)
            self.stmt(s.body, mask)
        elif isinstance(s, Pragma):
            self.stmt(s.body, mask)
        elif isinstance(s, Barrier):
            self.uniform(mask, "a barrier")
            self.epoch += 1
        elif isinstance(s, AllReduce):
            self.uniform(mask, "a cross-thread reduction")
            idx = self.index(s.buffer, s.index, mask)
            values = self.local[id(s.buffer)][self.lanes, idx]
            total = {"sum": np.sum, "max": np.max, "min": np.min}[s.combiner](values)
            self.local[id(s.buffer)][self.lanes, idx] = total
        elif isinstance(s, Store):
            self.store(s, mask)
        else:
            raise TypeError(f"cannot emulate {type(s).__name__}")

    def uniform(self, mask, what: str) -> None:
        if not mask.all():
            raise EmulationError(f"{what} is reached by {int(mask.sum())} of the block's {self.n} threads")

    def index(self, buf, index, mask) -> np.ndarray:
        idx = np.broadcast_to(np.asarray(self.ev(index, mask), np.int64), (self.n,))
        bad = mask & ((idx < 0) | (idx >= buf.capacity))
        if bad.any():
            t = int(np.argmax(bad))
            raise EmulationError(f"thread {t} of block {self.block} accesses '{buf.name}'[{int(idx[t])}] "
                                 f"(it has {buf.capacity} elements)")
        return np.where(mask, idx, 0)

    def store(self, s: Store, mask) -> None:
        idx = self.index(s.buffer, s.index, mask)
        value = np.broadcast_to(self.ev(s.value, mask), (self.n,))
        if s.buffer.scope == "local":
            arr = self.local[id(s.buffer)]
            arr[self.lanes[mask], idx[mask]] = value[mask]
            return
        t = self.memory[id(s.buffer)]
        t.check_write(idx[mask], self.who[mask], self.block, self.epoch_key())
        t.data[idx[mask]] = value[mask]

    def epoch_key(self) -> int:
        return self.block * 1_000_000 + self.epoch

    # expressions --------------------------------------------------------------------------
    def ev(self, e: E.Expr, mask):
        if isinstance(e, E.Const):
            return np.array(e.value, dtype=_np(e.dtype))
        if isinstance(e, E.Var):
            return self.env[id(e)]
        if isinstance(e, Load):
            return self.load(e, mask)
        if isinstance(e, E.Binary):
            a, b = self.ev(e.a, mask), self.ev(e.b, mask)
            return _binary(e.op, a, b, e.dtype)
        if isinstance(e, E.Compare):
            a, b = self.ev(e.a, mask), self.ev(e.b, mask)
            return {"<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal,
                    "==": np.equal, "!=": np.not_equal}[e.op](a, b)
        if isinstance(e, E.Not):
            return np.logical_not(self.ev(e.a, mask))
        if isinstance(e, E.Select):
            cond = np.broadcast_to(self.ev(e.cond, mask), (self.n,)).astype(bool)
            t = self.ev(e.t, mask & cond) if (mask & cond).any() else 0
            f = self.ev(e.f, mask & ~cond) if (mask & ~cond).any() else 0
            return np.where(cond, t, f).astype(_np(e.dtype))
        if isinstance(e, E.Cast):
            return np.asarray(self.ev(e.value, mask)).astype(_np(e.dtype))
        if isinstance(e, E.Call):
            args = [np.asarray(self.ev(a, mask)) for a in e.args]
            with np.errstate(all="ignore"):
                if e.func == "erf":
                    from math import erf
                    return np.vectorize(erf)(args[0]).astype(_np(e.dtype))
                return np.asarray(_NUMPY_CALLS[e.func](*args)).astype(_np(e.dtype))
        raise TypeError(f"cannot emulate {type(e).__name__}: {e}")

    def load(self, e: Load, mask):
        idx = self.index(e.buffer, e.index, mask)
        if e.buffer.scope == "local":
            return self.local[id(e.buffer)][self.lanes, idx]
        t = self.memory[id(e.buffer)]
        t.check_read(idx[mask], self.who[mask], self.block, self.epoch_key())
        return t.data[idx]


def _np(dtype: str):
    return np.bool_ if dtype == "bool" else np.dtype(dtype)


_BINARY = {"+": np.add, "-": np.subtract, "*": np.multiply, "/": np.divide, "//": np.floor_divide,
           "%": np.mod, "min": np.minimum, "max": np.maximum, "and": np.logical_and, "or": np.logical_or}


def _binary(op: str, a, b, dtype: str):
    fn = _BINARY.get(op)
    if fn is None:
        raise TypeError(f"unknown binary op {op}")
    with np.errstate(all="ignore"):
        return np.asarray(fn(a, b)).astype(_np(dtype), copy=False)
