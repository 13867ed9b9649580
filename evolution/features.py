"""Per-statement program features: Ansor's 164 features of every innermost statement, and
three that relate the program to its target's vector registers.

A program (a State) is lowered to the loop IR (``ir.lower``); every ``Store`` is one
statement and gets one row of ``N_FEATURES`` floats, computed in the context of the loops,
pragmas and allocations around it and of the other statements under the same loops.
The cost model scores a statement from its row and a program by the sum over its rows.

Memory access is analysed from the loop structure and the affine access maps alone, never
by simulation: the flat index of every load and store is split into affine terms
``coef * x`` where ``x`` is a loop variable or one digit of a fused loop variable
(``f % 128``, ``f // 128``...), and each term is given to the buffer dimension whose
stride divides its coefficient. The *footprint* of an access over the loops from level
``l`` inwards (outer loops fixed) is the product over dimensions of the number of distinct
values of that dimension's index, counted per dimension by adding its terms in order of
coefficient (exact when the terms nest or overlap a dense interval, as tiles and
convolution windows do; an upper bound otherwise).

Definitions (a statement with loops ``0..n-1`` from outer to inner, ``P`` the product of
their extents, ``L`` the cache line in bytes, ``F_b(l)`` the footprint of buffer ``b`` in
elements over loops ``l..n-1``):

- guards: a guard ``sum(q_i x_i) < c`` (q_i > 0; from splits that do not divide, or tiles
  larger than the region of a stage computed inside another) caps each x_i's *effective*
  extent at ``ceil(c / q_i)``; ``P_eff`` is their product. Work and memory features use
  effective extents; the loop structure (outer_prod, annotations, the guard's own ops)
  uses the real ones.
- op counts: per statement execution, times ``P_eff`` (vector lanes count, since vectorised
  loops are in it); ``x*y+z`` counts one multiply-add, not a multiply and an add; index
  arithmetic counts on its affine normal form; guard conditions count ``P`` times.
- bytes = accesses of ``b`` in the statement × ``P_eff`` × element size; unique bytes =
  ``F_b(0)`` × element size; stride = |coefficient| of the innermost loop that moves the
  access (in elements, 0 if none does); lines = cache lines fetched when a line stays
  cached while consecutive iterations touch it: with ``k`` that innermost moving loop and
  ``s`` its stride, ``prod(e_0..e_{k-1}) * ceil(e_k*s*size/L)`` if ``s*size < L`` else
  ``prod(e_0..e_k)``; unique lines = distinct lines of the footprint (rows × lines a row).
- reuse (TVM's ComputeReuse): walking loops from inner to outer (extent-1 loops skipped),
  a loop that does not move the access gives *loop multiple read* reuse, with count = its
  extent, distance = the product of the moving loops inside it (iterations) and the bytes
  all statements under the innermost of them touch; a loop under which several statements
  access the buffer gives *serial multiple read/write* reuse (count = statements − 1);
  otherwise *no reuse*.
- loop kinds are those the code generator emits: a serial loop under an
  ``auto_unroll_max_step`` pragma whose nest has at most that many iterations counts as
  unrolled. GPU programs (a task whose target is cuda) lower with ``ir.cuda.lower``'s
  lowering: ``is_gpu`` is 1, ``blockIdx_x_len`` and ``vthread_len`` the products of the
  loops around the statement bound to blocks and virtual threads, ``threadIdx_x_len`` the
  largest loop around it bound to threads (a shared-memory copy's threads are its
  consumer's); the y and z bindings stay 0 (bindings are on x only).
- buffers are sorted by (lines, bytes), largest first; the first five are kept.
- arithmetic intensity curve: at each loop level ``j`` (inner to outer) flops
  ``f*prod(e_j..e_{n-1})`` over bytes ``sum_b F_b(j)*size``, as a function of log2(flops),
  linearly interpolated at 10 evenly spaced points up to the statement's total log2 flops.
- the target's vector registers (not in Ansor: one model ranks programs for AVX2 and
  AVX-512 CPUs, whose best tiles differ): ``vector_bytes`` is the width of the target's
  float vector register (32 on AVX2, 64 on AVX-512, 0 on a GPU); ``vec_registers`` the
  registers one operation of the innermost vectorised loop spans, ``vec_len`` x element
  size / ``vector_bytes`` rounded up; ``alloc_register_share`` the statement's buffer when
  it is local (a cache stage's tile, ``alloc_size``) over the target's vector register
  file (16 registers of 32 bytes, or 32 of 64): above 1 an accumulator tile cannot stay
  in registers. The same tile is one register and a quarter of the file on one CPU, two
  and the whole file on the other, and these columns say so in terms both share.
- every value passes through ``slog(x) = sign(x) * log2(|x| + 1)``.

Extraction caches the rows of each root loop nest, keyed by what its stages are made of
(their loops, which replays of one sketch share, bodies and locations): evolution pays only
for the nests a mutation touched.
"""
from __future__ import annotations

import math
from collections import OrderedDict

import numpy as np

import ir
from ir import dtype as dt
from ir import expr as E
from ir.loop_ir import Allocate, For, IfThenElse, Load, Pragma, Seq, Store
from ir.lower import Lowering

# ------------------------------------------------------------------------------------------
# The layout: one (name, description) per column, in order.

_OP_KINDS = [
    ("mad", "multiply-adds x*y±z"),
    ("addsub", "additions and subtractions"),
    ("mul", "multiplications"),
    ("divmod", "divisions, floor divisions and modulos"),
    ("cmp", "comparisons, min and max"),
    ("math_func", "exp, log, sqrt, rsqrt, tanh, sigmoid, erf, pow"),
    ("other_func", "abs, floor, ceil and casts to this type"),
]
POSITIONS = ("InnerSpatial", "MiddleSpatial", "OuterSpatial", "InnerReduce", "MiddleReduce",
             "OuterReduce", "Mixed", "None")
_ANNOTATIONS = (("vec", "vectorize"), ("unroll", "unroll"), ("parallel", "parallel"))
ACCESS_TYPES = ("read", "write", "readwrite")
REUSE_TYPES = ("loop_multiple_read", "serial_multiple_read_write", "no_reuse")
N_BUFFERS = 5
N_CURVE = 10


def _layout() -> list[tuple[str, str]]:
    rows: list[tuple[str, str]] = []
    for kind in ("float", "int"):
        for name, what in _OP_KINDS:
            rows.append((f"{kind}_{name}", f"{kind} {what}, × outer loop product"))
    rows.append(("bool_op", "and/or/not, × outer loop product"))
    rows.append(("select_op", "selects, × outer loop product"))
    for short, kind in _ANNOTATIONS:
        rows.append((f"{short}_num", f"number of {kind} loops around the statement" +
                     (" (with those auto_unroll_max_step unrolls)" if kind == "unroll" else "")))
        rows.append((f"{short}_prod", f"product of the extents of the {kind} loops"))
        rows.append((f"{short}_len", f"extent of the innermost {kind} loop"))
        for pos in POSITIONS:
            rows.append((f"{short}_type.{pos}", f"one-hot: the innermost {kind} loop walks the {pos} axis "
                                                f"of the statement's stage (None: no such loop)"))
    rows.append(("is_gpu", "1 for a GPU program"))
    for name in ("blockIdx_x_len", "blockIdx_y_len", "blockIdx_z_len", "threadIdx_x_len",
                 "threadIdx_y_len", "threadIdx_z_len", "vthread_len"):
        rows.append((name, "GPU thread binding: extent bound to it around the statement (0 on CPU)"))
    for i in range(N_BUFFERS):
        p = f"B{i}."
        what = f"buffer {i} (by lines, bytes)"
        for t in ACCESS_TYPES:
            rows.append((p + f"acc_type.{t}", f"one-hot: {what} is accessed as {t}"))
        rows.append((p + "bytes", f"bytes of {what} accessed by all executions of the statement"))
        rows.append((p + "unique_bytes", f"distinct bytes of {what} accessed (footprint × element size)"))
        rows.append((p + "lines", f"cache lines of {what} fetched, a line kept while consecutive iterations touch it"))
        rows.append((p + "unique_lines", f"distinct cache lines of {what} touched"))
        for t in REUSE_TYPES:
            rows.append((p + f"reuse_type.{t}", f"one-hot: reuse type of {what}"))
        rows.append((p + "reuse_dis_iter", f"reuse distance of {what} in loop iterations"))
        rows.append((p + "reuse_dis_bytes", f"reuse distance of {what} in bytes touched in between"))
        rows.append((p + "reuse_ct", f"number of reuses of {what}"))
        for q in ("bytes", "unique_bytes", "lines", "unique_lines"):
            rows.append((p + f"{q}_d_reuse_ct", f"{q} of {what} / max(reuse count, 0.5)"))
        rows.append((p + "stride", f"stride (elements) of {what} along the innermost loop that moves it"))
    for i in range(N_CURVE):
        rows.append((f"ai_curve_{i}", f"arithmetic intensity (flops/byte) at {i + 1}/10 of log2 total flops"))
    rows.append(("alloc_size", "bytes of the statement's output buffer when it is allocated in the kernel"))
    rows.append(("alloc_prod", "its elements × number of times it is allocated"))
    rows.append(("alloc_outer_prod", "product of the loop extents around its allocation"))
    rows.append(("alloc_inner_prod", "outer loop product of the statement / alloc_outer_prod"))
    rows.append(("outer_prod", "product of the extents of all loops around the statement"))
    rows.append(("num_loops", "number of loops (extent > 1) around the statement"))
    rows.append(("auto_unroll_max_step", "auto_unroll_max_step pragma in effect (0: none)"))
    rows.append(("vector_bytes", "bytes of the target's float vector register (32 AVX2, 64 AVX-512, 0 GPU)"))
    rows.append(("vec_registers", "vector registers one operation of the innermost vectorised loop spans"))
    rows.append(("alloc_register_share", "alloc_size over the bytes of the target's vector register file"))
    return rows


FEATURES: tuple[tuple[str, str], ...] = tuple(_layout())
FEATURE_NAMES: tuple[str, ...] = tuple(n for n, _ in FEATURES)
N_FEATURES = len(FEATURES)
assert N_FEATURES == 167, N_FEATURES
_COL = {n: i for i, n in enumerate(FEATURE_NAMES)}
_ANN_COL = {kind: _COL[f"{short}_num"] for short, kind in _ANNOTATIONS}
GPU_BASE = _COL["is_gpu"]
BUFFER_BASE = _COL["B0.acc_type.read"]
BUFFER_WIDTH = 18
CURVE_BASE = _COL["ai_curve_0"]
ALLOC_BASE = _COL["alloc_size"]
OUTER_BASE = _COL["outer_prod"]
TARGET_BASE = _COL["vector_bytes"]

# op-count slots (float kinds 0..6, int kinds 7..13)
_MAD, _ADDSUB, _MUL, _DIVMOD, _CMP, _MATH, _OTHER = range(7)
_INT = 7
_BOOL, _SELECT = 14, 15


def slog(x):
    """sign(x) · log2(|x| + 1), elementwise."""
    x = np.asarray(x, dtype=np.float64)
    return np.sign(x) * np.log2(np.abs(x) + 1.0)


# ------------------------------------------------------------------------------------------
# Walking the loop IR

class _Loop:
    __slots__ = ("uid", "var", "extent", "kind")

    def __init__(self, uid, var, extent, kind):
        self.uid, self.var, self.extent, self.kind = uid, var, extent, kind


class _Statement:
    __slots__ = ("store", "loops", "real", "eff", "guards", "unroll", "alloc_outer", "counts", "guard_counts",
                 "loads", "accesses", "prod", "prod_eff")

    def __init__(self, store, loops, guards, unroll, alloc_outer):
        self.store, self.loops, self.guards = store, loops, guards
        self.unroll, self.alloc_outer = unroll, alloc_outer


def _collect(stmt, loops, guards, unroll, allocs, out, counter) -> int:
    """Every Store under ``stmt`` with its loops (outer to inner), guards, pragma and the
    outer loop product at its buffer's allocation; returns ``nest_trips(stmt)``. A serial
    loop under an ``auto_unroll_max_step`` pragma whose nest has at most that many
    iterations is taken as unrolled, since the code generator unrolls it (its kind is set
    once its body's trips are known: the statements below hold the same ``_Loop``)."""
    t = type(stmt)
    if t is For:
        counter[0] += 1
        loop = _Loop(counter[0], stmt.var, stmt.extent, stmt.kind)
        loops.append(loop)
        trips = stmt.extent * _collect(stmt.body, loops, guards, unroll, allocs, out, counter)
        loops.pop()
        if unroll and loop.kind == "serial" and trips <= unroll:
            loop.kind = "unroll"
        return trips
    if t is Seq:
        trips = 1
        for s in stmt.stmts:
            trips = max(trips, _collect(s, loops, guards, unroll, allocs, out, counter))
        return trips
    if t is Store:
        out.append(_Statement(stmt, tuple(loops), tuple(guards), unroll, allocs.get(stmt.buffer)))
    elif t is IfThenElse:
        guards.append(stmt.cond)
        trips = _collect(stmt.then, loops, guards, unroll, allocs, out, counter)
        if stmt.otherwise is not None:
            trips = max(trips, _collect(stmt.otherwise, loops, guards, unroll, allocs, out, counter))
        guards.pop()
        return max(trips, 1)
    elif t is Allocate:
        prod = 1
        for lp in loops:
            prod *= lp.extent
        allocs[stmt.buffer] = prod
        return _collect(stmt.body, loops, guards, unroll, allocs, out, counter)
    elif t is Pragma:
        value = stmt.value if stmt.key == "auto_unroll_max_step" else unroll
        return _collect(stmt.body, loops, guards, value, allocs, out, counter)
    return 1


def _affine(e: E.Expr, memo: dict):
    """(terms, constant) of ``e`` (see ``_linear``), memoised by node for one loop nest."""
    hit = memo.get(id(e))
    if hit is None:
        raw: dict = {}
        hit = memo[id(e)] = (raw, _linear(e, raw, 1))
    return hit


def _count_ops(root: E.Expr, counts: list, loads: list | None, memo: dict) -> None:
    """Add the operations of ``root`` to ``counts`` (16 slots); collect its loads."""
    stack = [root]
    Binary, Compare, Select, Call, Cast, Not = E.Binary, E.Compare, E.Select, E.Call, E.Cast, E.Not
    while stack:
        x = stack.pop()
        t = type(x)
        if t is Binary:
            op = x.op
            if op == "and" or op == "or":
                counts[_BOOL] += 1
                stack.append(x.a)
                stack.append(x.b)
                continue
            if x.dtype in dt.INT_TYPES:
                _count_affine(x, counts, stack, memo)
                continue
            base = 0
            a, b = x.a, x.b
            if op == "+" or op == "-":
                if type(a) is Binary and a.op == "*":
                    counts[base + _MAD] += 1
                    stack.extend((a.a, a.b, b))
                    continue
                if type(b) is Binary and b.op == "*":
                    counts[base + _MAD] += 1
                    stack.extend((b.a, b.b, a))
                    continue
                counts[base + _ADDSUB] += 1
            elif op == "*":
                counts[base + _MUL] += 1
            elif op == "min" or op == "max":
                counts[base + _CMP] += 1
            else:
                counts[base + _DIVMOD] += 1
            stack.append(a)
            stack.append(b)
        elif t is Load:
            if loads is not None:
                loads.append(x)
            stack.append(x.index)
        elif t is Compare:
            counts[(0 if x.a.dtype in dt.FLOAT_TYPES else _INT) + _CMP] += 1
            stack.append(x.a)
            stack.append(x.b)
        elif t is Select:
            counts[_SELECT] += 1
            stack.extend((x.cond, x.t, x.f))
        elif t is Call:
            base = 0 if x.dtype in dt.FLOAT_TYPES else _INT
            counts[base + (_MATH if x.func in E.TRANSCENDENTAL_FUNCS else _OTHER)] += 1
            stack.extend(x.args)
        elif t is Cast:
            if x.dtype == "bool":
                counts[_BOOL] += 1
            else:
                counts[(0 if x.dtype in dt.FLOAT_TYPES else _INT) + _OTHER] += 1
            stack.append(x.value)
        elif t is Not:
            counts[_BOOL] += 1
            stack.append(x.a)
        # Var, Const: nothing


def _bound_extents(cond: E.Expr, level_of: dict, eff: list, memo: dict) -> None:
    """Tighten ``eff`` (extents by level) with the upper bounds a guard puts on loops: in a
    conjunct ``sum(q_i x_i) + c < 0`` (or ``<= 0``) over loop variables with all q_i > 0,
    x_i < ceil(-c / q_i) since the others can be 0."""
    t = type(cond)
    if t is E.Binary and cond.op == "and":
        _bound_extents(cond.a, level_of, eff, memo)
        _bound_extents(cond.b, level_of, eff, memo)
        return
    if t is not E.Compare or cond.a.dtype not in dt.INT_TYPES:
        return
    op = cond.op
    if op in ("<", "<="):
        lhs, rhs = cond.a, cond.b
    elif op in (">", ">="):
        lhs, rhs = cond.b, cond.a
    else:
        return
    terms_a, ca = _affine(lhs, memo)
    terms_b, cb = _affine(rhs, memo)
    if any(coef for _, coef in terms_b.values()):
        return
    bound = cb - ca - (1 if op in ("<", ">") else 0)       # sum(q_i x_i) <= bound
    vars_ = []
    for atom, coef in terms_a.values():
        if coef == 0:
            continue
        if atom[0] != "v" or coef < 0:
            return
        lv = level_of.get(id(atom[1]))
        if lv is not None:          # otherwise a loop of extent 1: always 0
            vars_.append((lv, coef))
    if bound < 0:
        return                                              # never true: leave it to the code
    for lv, coef in vars_:
        eff[lv] = min(eff[lv], bound // coef + 1)


def _count_affine(x: E.Binary, counts: list, stack: list, memo: dict) -> None:
    """Integer arithmetic counted on its affine normal form ``sum(c_i * a_i) + c0``, so that
    the count does not depend on how the expression happens to be written: evaluated as
    ``a_1 + c_2*a_2 + ...`` starting from a term with |c| = 1 when there is one (else one
    multiply), a multiply-add per other term with |c| != 1, an add per other term with
    |c| = 1 and for the constant, one div/mod per ``//`` or ``%`` of a fused loop's digit;
    what is not affine is counted as it is written."""
    raw, const = _affine(x, memo)
    n_terms = n_unit = 0
    for atom, coef in raw.values():
        if coef == 0:
            continue
        n_terms += 1
        n_unit += coef == 1 or coef == -1
        kind = atom[0]
        if kind == "d":
            counts[_INT + _DIVMOD] += (atom[2] > 1) + (atom[3] is not None)
        elif kind == "o":
            e = atom[1]
            if type(e) is E.Binary and e.dtype in dt.INT_TYPES:
                op = e.op
                counts[_INT + (_MUL if op == "*" else _CMP if op in ("min", "max") else _DIVMOD)] += 1
                stack.append(e.a)
                stack.append(e.b)
            else:
                stack.append(e)
    if n_terms == 0:
        return
    if n_unit:
        counts[_INT + _ADDSUB] += n_unit - 1
        counts[_INT + _MAD] += n_terms - n_unit
    else:
        counts[_INT + _MUL] += 1
        counts[_INT + _MAD] += n_terms - 1
    if const:
        counts[_INT + _ADDSUB] += 1


# ------------------------------------------------------------------------------------------
# Affine access maps

def _linear(e: E.Expr, terms: dict, scale: int) -> int:
    """Add ``scale * e`` to ``terms`` (atom key -> [atom, coef]); return its constant part.
    Atoms: ("v", var) a loop variable, ("d", var, d, m) the digit ``(var // d) % m`` (m None:
    no modulo), ("o", expr) anything else."""
    t = type(e)
    if t is E.Const:
        return scale * e.value
    if t is E.Var or t is E.IterVar:
        key = id(e)
        hit = terms.get(key)
        if hit is None:
            terms[key] = [("v", e, 1, None), scale]
        else:
            hit[1] += scale
        return 0
    if t is E.Binary:
        op = e.op
        if op == "+":
            return _linear(e.a, terms, scale) + _linear(e.b, terms, scale)
        if op == "-":
            return _linear(e.a, terms, scale) + _linear(e.b, terms, -scale)
        if op == "*":
            if type(e.b) is E.Const:
                return _linear(e.a, terms, scale * e.b.value)
            if type(e.a) is E.Const:
                return _linear(e.b, terms, scale * e.a.value)
        elif (op == "//" or op == "%") and type(e.b) is E.Const and e.b.value > 0:
            digit = _digit(e)
            if digit is not None:
                key = (id(digit[0]), digit[1], digit[2])
                hit = terms.get(key)
                if hit is None:
                    terms[key] = [("d",) + digit, scale]
                else:
                    hit[1] += scale
                return 0
    key = ("o", id(e))
    hit = terms.get(key)
    if hit is None:
        terms[key] = [("o", e, 1, None), scale]
    else:
        hit[1] += scale
    return 0


def _digit(e: E.Binary):
    """(var, d, m) when ``e`` is ``(var // d) % m`` in one of its spellings, else None."""
    c = e.b.value
    a = e.a
    ta = type(a)
    if ta is E.Var or ta is E.IterVar:
        return (a, c, None) if e.op == "//" else (a, 1, c)
    if ta is E.Binary and type(a.b) is E.Const and a.b.value > 0 and type(a.a) in (E.Var, E.IterVar):
        inner = a.b.value
        if e.op == "%" and a.op == "//":
            return (a.a, inner, c)          # (v // d) % m
        if e.op == "//" and a.op == "//":
            return (a.a, inner * c, None)   # (v // d1) // d2
        if e.op == "//" and a.op == "%" and inner % c == 0:
            return (a.a, c, inner // c)     # (v % m) // d
    return None


class _Access:
    """One load or store of a statement: its terms by loop level and its footprints."""
    __slots__ = ("buffer", "is_write", "form", "moves", "first_coef", "dims")

    def __init__(self, buffer, is_write):
        self.buffer, self.is_write = buffer, is_write


def _analyse_access(buffer, index, is_write: bool, level_of: dict, extents, memo: dict) -> _Access:
    """Split the flat index of an access into (dimension, |per-dim coef|, extent, level) terms;
    ``extents`` are the (effective) extents of the statement's loops of extent > 1, which
    the levels index."""
    acc = _Access(buffer, is_write)
    raw, const = _affine(index, memo)
    n = len(extents)
    moves = [False] * n            # does loop l move the access?
    first_coef = [0] * n           # |flat coefficient| of loop l's innermost digit
    items = []                     # (level, |flat coef|, extent)
    opaque = []                    # (level, range width)
    by_var: dict = {}
    for atom, coef in raw.values():
        if coef == 0:
            continue
        kind = atom[0]
        if kind == "o":
            expr = atom[1]
            levels = [level_of[id(v)] for v in E.free_vars(expr) if id(v) in level_of]
            if not levels:
                continue
            width = 1
            for lv in set(levels):
                width *= extents[lv]
            opaque.append((max(levels), width))
            for lv in levels:
                moves[lv] = True
            continue
        var = atom[1]
        lv = level_of.get(id(var))
        if lv is None:
            continue
        by_var.setdefault(lv, []).append((atom[2], atom[3], coef))
    for lv, uses in by_var.items():
        extent = extents[lv]
        if extent <= 1:
            continue
        if len(uses) == 1 and uses[0][0] == 1 and uses[0][1] is None:
            coef = abs(uses[0][2])  # a plain loop variable (the common case): one term
            items.append((lv, coef, extent))
            moves[lv] = True
            first_coef[lv] = coef
            continue
        bps = {1}
        for d, m, _ in uses:
            bps.add(d)
            if m is not None:
                bps.add(d * m)
        bps = sorted(b for b in bps if b < extent)
        if any(bps[i + 1] % bps[i] for i in range(len(bps) - 1)):
            # digits that do not nest: take the whole loop as one opaque term
            opaque.append((lv, extent))
            moves[lv] = True
            first_coef[lv] = max(abs(c) for _, _, c in uses)
            continue
        for i, b in enumerate(bps):
            ext = bps[i + 1] // b if i + 1 < len(bps) else -(-extent // b)
            coef = 0
            for d, m, c in uses:
                if b >= d and (m is None or b < d * m):
                    coef += c * (b // d)
            if coef and ext > 1:
                items.append((lv, abs(coef), ext))
                moves[lv] = True
                if i == 0:
                    first_coef[lv] = abs(coef)
    acc.moves = moves
    acc.first_coef = first_coef
    acc.form = (tuple(sorted(items)), tuple(sorted(opaque)), const)
    # per-dimension terms
    strides = buffer.strides
    dims: dict = {}
    for lv, coef, ext in items:
        for d, s in enumerate(strides):
            if coef % s == 0:
                break
        dims.setdefault(d, []).append((coef // s, ext, lv))
    for k, (lv, width) in enumerate(opaque):
        dims[("o", k)] = [(1, width, lv)]
    acc.dims = dims
    return acc


def _dim_count(terms, level: int):
    """Distinct values and span of sum(q*x), x in [0, e), over terms of level >= ``level``."""
    count = span = 1
    for q, e, lv in terms:
        if lv < level:
            continue
        new_span = span + q * (e - 1)
        if q >= span:
            count *= e
        elif count == span:
            count = new_span
        else:
            count = min(count * e, new_span)
        span = new_span
    return count, span


def _footprints(acc: _Access, n: int) -> list:
    """F(l) for l in 0..n: distinct elements touched by loops l..n-1 (product over dims)."""
    out = [1] * (n + 1)
    size = acc.buffer.size
    shape = acc.buffer.shape
    for d, terms in acc.dims.items():
        terms.sort()
        levels = sorted({lv for _, _, lv in terms})
        cap = shape[d] if type(d) is int else size
        # the term set changes only at term levels: evaluate once per distinct level
        prev = 0
        for lv in levels:
            c = min(_dim_count(terms, lv)[0], cap)
            for l in range(prev, lv + 1):
                out[l] *= c
            prev = lv + 1
    return [min(x, size) for x in out]


def _unique_lines(acc: _Access, line_elems: float) -> float:
    """Distinct cache lines of the whole footprint: rows × lines per row, where a row is
    the innermost dimensions that are wholly covered plus the next one."""
    shape = acc.buffer.shape
    ndim = len(shape)
    info = {}
    for d, terms in acc.dims.items():
        c, span = _dim_count(terms, 0)
        info[d] = (min(c, shape[d]), min(span, shape[d])) if type(d) is int else (c, span)
    rows = 1
    for d, (c, _) in info.items():
        if not isinstance(d, int):
            rows *= c
    run = 1
    d = ndim - 1
    while d >= 0:
        c, span = info.get(d, (1, 1))
        if c == shape[d] and span == shape[d]:
            run *= c
            d -= 1
            continue
        per_row = min(c * math.ceil(run / line_elems), math.ceil(span * run / line_elems))
        for dd in range(d):
            rows *= info.get(dd, (1, 1))[0]
        return rows * max(per_row, 1)
    return rows * math.ceil(run / line_elems)


# ------------------------------------------------------------------------------------------
# Features of one loop nest

def _position(stage, var) -> int:
    """Index into POSITIONS of loop ``var`` for ``stage`` (the stage of the statement)."""
    if stage is None:
        return 6
    loops = stage.loops
    n_space = len(stage.axes)
    cache = _POSITION_CACHE.get(id(loops))
    if cache is None or cache[0] is not loops or cache[1] != n_space:
        owners: dict = {}
        for d, used in enumerate(loops.deps):  # the ids of the loop variables axis d's value uses
            for v in used:
                owners.setdefault(v, set()).add(d)
        cache = (loops, n_space, len(loops.axis_values) - n_space, owners)
        if len(_POSITION_CACHE) > 20000:
            _POSITION_CACHE.clear()
        _POSITION_CACHE[id(loops)] = cache
    _, n_space, n_reduce, owners = cache
    dims = owners.get(id(var))
    if not dims or len(dims) > 1:
        return 6
    (d,) = dims
    if d < n_space:
        return 0 if d == n_space - 1 else 2 if d == 0 else 1
    d -= n_space
    return 3 if d == n_reduce - 1 else 5 if d == 0 else 4


_POSITION_CACHE: dict = {}


def nest_features(body, stages_by_name: dict, line_bytes: int = 64, gpu: bool = False,
                  vector_bytes: int = 64) -> np.ndarray:
    """The (n_statements, N_FEATURES) raw (not yet slog'ed) rows of a loop-IR statement
    (``gpu``: of a GPU program, with its thread bindings; ``vector_bytes``: the CPU's float
    vector register, ``vector_register_bytes``)."""
    statements: list[_Statement] = []
    _collect(body, [], [], 0, {}, statements, [0])
    if not statements:
        return np.zeros((0, N_FEATURES), dtype=np.float64)
    loop_bytes: dict = {}     # loop uid -> bytes touched by all statements under one execution
    loop_entries: dict = {}   # (loop uid, buffer) -> footprints at that loop, one per statement
    memo: dict = {}           # affine forms of index expressions

    for st in statements:
        # memory features look at loops of extent > 1 only (the others change nothing)
        loops = st.real = [lp for lp in st.loops if lp.extent > 1]
        n = len(loops)
        prod = 1
        level_of = {}
        for lv, lp in enumerate(loops):
            prod *= lp.extent
            level_of[id(lp.var)] = lv
        st.prod = prod
        # guards (of splits that do not divide, of oversized tiles) bound the iterations
        # that do the work: effective extents
        eff = st.eff = [lp.extent for lp in loops]
        guard_counts = [0] * 16
        for g in st.guards:
            _count_ops(g, guard_counts, None, memo)
            _bound_extents(g, level_of, eff, memo)
        st.prod_eff = prod_eff = math.prod(eff)
        counts = [0] * 16
        loads: list = []
        store = st.store
        _count_ops(store.value, counts, loads, memo)
        _count_ops(store.index, counts, None, memo)
        st.counts = counts
        st.guard_counts = guard_counts
        # accesses grouped by buffer
        by_buffer: dict = {}
        for ld in loads:
            by_buffer.setdefault(ld.buffer, []).append(
                _analyse_access(ld.buffer, ld.index, False, level_of, eff, memo))
        by_buffer.setdefault(store.buffer, []).append(
            _analyse_access(store.buffer, store.index, True, level_of, eff, memo))
        accesses = []
        for buf, accs in by_buffer.items():
            forms = {}
            for a in accs:
                forms.setdefault(a.form, a)
            distinct = list(forms.values())
            fps = [_footprints(a, n) for a in distinct]
            if len(distinct) == 1:
                foot = fps[0]
            else:
                same_terms = len({a.form[:2] for a in distinct}) == 1
                consts = [a.form[2] for a in distinct]
                spread = max(consts) - min(consts)
                foot = []
                for l in range(n + 1):
                    total = sum(f[l] for f in fps)
                    if same_terms:
                        total = min(total, max(f[l] for f in fps) + spread)
                    foot.append(min(total, buf.size))
            accesses.append((buf, accs, distinct, foot))
            itemsize = dt.itemsize(buf.dtype)
            for lv, lp in enumerate(loops):
                loop_bytes[lp.uid] = loop_bytes.get(lp.uid, 0) + foot[lv] * itemsize
                loop_entries.setdefault((lp.uid, buf), []).append(foot[lv])
        st.accesses = accesses

    rows = []
    for st in statements:
        row = [0] * N_FEATURES  # a list, made an array once: numpy's item writes cost more
        _fill_row(row, st, stages_by_name, loop_bytes, loop_entries, line_bytes)
        if gpu:
            _fill_gpu(row, st)
        else:
            _fill_target(row, st, vector_bytes)
        rows.append(row)
    return np.array(rows, dtype=np.float64)


def _fill_gpu(row, st: _Statement) -> None:
    blocks = vthreads = 1
    threads = 0
    for lp in st.loops:
        if lp.kind == "blockIdx.x":
            blocks *= lp.extent
        elif lp.kind == "vthread":
            vthreads *= lp.extent
        elif lp.kind == "threadIdx.x":
            threads = max(threads, lp.extent)
    row[GPU_BASE] = 1
    row[GPU_BASE + 1] = blocks
    row[GPU_BASE + 4] = threads
    row[GPU_BASE + 7] = vthreads


def vector_register_bytes(hardware) -> int:
    """The width in bytes of the float vector register of a CPU target (``hardware``'s
    float32 lanes x 4: 32 on AVX2, 64 on AVX-512); 64 for a task-like object without
    hardware parameters."""
    lanes = getattr(hardware, "vector_lanes", 16)
    return 4 * max(int(lanes), 1)


def _register_file_bytes(vector_bytes: int) -> int:
    """x86-64's float vector register file: 32 zmm registers with AVX-512, else 16 (ymm/xmm)."""
    return vector_bytes * (32 if vector_bytes >= 64 else 16)


def _fill_target(row, st: _Statement, vector_bytes: int) -> None:
    itemsize = dt.itemsize(st.store.buffer.dtype)
    row[TARGET_BASE] = vector_bytes
    vec_len = row[_ANN_COL["vectorize"] + 2]
    if vec_len:
        row[TARGET_BASE + 1] = -(-vec_len * itemsize // vector_bytes)
    if st.store.buffer.scope == "local":
        row[TARGET_BASE + 2] = row[ALLOC_BASE] / _register_file_bytes(vector_bytes)


def _fill_row(row, st: _Statement, stages_by_name, loop_bytes, loop_entries, line_bytes) -> None:
    loops = st.real            # loops of extent > 1, outer to inner
    eff = st.eff               # their extents where the statement's guards hold
    n = len(loops)
    prod, prod_eff = st.prod, st.prod_eff
    counts = st.counts
    row[:16] = [c * prod_eff + g * prod for c, g in zip(counts, st.guard_counts)]
    # annotations
    stage = stages_by_name.get(st.store.buffer.name)
    annotated: dict = {}  # kind -> [number, product, innermost loop]
    for lp in st.loops:
        kind = lp.kind
        if kind in _ANN_COL:
            seen = annotated.get(kind)
            if seen is None:
                annotated[kind] = [1, lp.extent, lp]
            else:
                seen[0] += 1
                seen[1] *= lp.extent
                seen[2] = lp
    for kind, base in _ANN_COL.items():
        seen = annotated.get(kind)
        if seen is not None:
            num, aprod, innermost = seen
            row[base] = num
            row[base + 1] = aprod
            row[base + 2] = innermost.extent
            row[base + 3 + _position(stage, innermost.var)] = 1
        else:
            row[base + 3 + 7] = 1
    # buffer accesses
    feats = []
    for buf, accs, distinct, foot in st.accesses:
        itemsize = dt.itemsize(buf.dtype)
        line_elems = line_bytes / itemsize
        reads = any(not a.is_write for a in accs)
        writes = any(a.is_write for a in accs)
        acc_type = 2 if reads and writes else 1 if writes else 0
        main = distinct[0]
        nbytes = len(accs) * prod_eff * itemsize
        unique_bytes = foot[0] * itemsize
        # stride and lines
        stride, lines = 0, 1
        for k in range(n - 1, -1, -1):
            if main.moves[k]:
                stride = main.first_coef[k]
                outer = math.prod(eff[:k])
                ext = eff[k]
                if stride and stride < line_elems:
                    lines = outer * math.ceil(ext * stride / line_elems)
                else:
                    lines = outer * ext
                break
        lines *= len(distinct)
        unique_lines = min(sum(_unique_lines(a, line_elems) for a in distinct), math.ceil(unique_bytes / itemsize))
        unique_lines = max(unique_lines, 1)
        # reuse
        reuse_type, dis_iter, dis_bytes, reuse_ct = 2, 0.0, 0.0, 0.0
        it_acc, by_acc = 1.0, 0.0
        for k in range(n - 1, -1, -1):
            lp = loops[k]
            ext = eff[k]
            if ext <= 1:
                continue
            if any(a.moves[k] for a in distinct):
                it_acc *= ext
                by_acc = loop_bytes[lp.uid]
            else:
                reuse_type, dis_iter, dis_bytes, reuse_ct = 0, it_acc, by_acc, ext
                break
            entries = loop_entries[(lp.uid, buf)]
            if len(entries) > 1:
                reuse_type = 1
                dis_iter = min(entries) / ext
                dis_bytes = loop_bytes[lp.uid] / ext
                reuse_ct = len(entries) - 1
                break
        div = max(reuse_ct, 0.5)
        feats.append((-lines, -nbytes, -unique_bytes, -unique_lines, buf.name, acc_type, reuse_type, dis_iter,
                       dis_bytes, reuse_ct, div, stride))
    feats.sort()  # largest (lines, bytes) first; ties by unique bytes, unique lines, then name
    for i, f in enumerate(feats[:N_BUFFERS]):
        lines, nbytes, unique_bytes, unique_lines = -f[0], -f[1], -f[2], -f[3]
        acc_type, reuse_type, dis_iter, dis_bytes, reuse_ct, div, stride = f[5:]
        b = BUFFER_BASE + i * BUFFER_WIDTH
        row[b + acc_type] = 1
        row[b + 3:b + 7] = (nbytes, unique_bytes, lines, unique_lines)
        row[b + 7 + reuse_type] = 1
        row[b + 10:b + 18] = (dis_iter, dis_bytes, reuse_ct, nbytes / div, unique_bytes / div, lines / div,
                              unique_lines / div, stride)
    # arithmetic intensity curve
    flops = 2 * counts[_MAD] + sum(counts[1:7])
    if flops > 0:
        xs, ys = [], []
        ops = float(flops)
        for k in range(n, -1, -1):      # level n: one execution; level 0: the whole nest
            if k < n:
                if eff[k] == 1:
                    continue
                ops *= eff[k]
            mem = 0.0
            for buf, _, _, foot in st.accesses:
                mem += foot[k] * dt.itemsize(buf.dtype)
            xs.append(math.log2(ops))
            ys.append(ops / max(mem, 1.0))
        row[CURVE_BASE:CURVE_BASE + N_CURVE] = _sample_curve(xs, ys)
    # allocation
    buf = st.store.buffer
    if buf.scope != "arg":
        outer = st.alloc_outer if st.alloc_outer is not None else 1
        row[ALLOC_BASE:ALLOC_BASE + 4] = (buf.size * dt.itemsize(buf.dtype), buf.size * outer, outer, prod / outer)
    row[OUTER_BASE] = prod
    row[OUTER_BASE + 1] = n
    row[OUTER_BASE + 2] = st.unroll


def _sample_curve(xs, ys) -> list:
    """ys(x) linearly interpolated at x_max·(i+1)/10; below the first point, its value."""
    out = []
    x_max = xs[-1]
    pt = 0
    for i in range(N_CURVE):
        x = x_max * (i + 1) / N_CURVE
        while pt < len(xs) - 1 and xs[pt] < x - 1e-9:
            pt += 1
        if pt == 0 or xs[pt] <= xs[pt - 1]:
            out.append(ys[pt])
        else:
            slope = (ys[pt] - ys[pt - 1]) / (xs[pt] - xs[pt - 1])
            out.append(ys[pt - 1] + slope * (x - xs[pt - 1]))
    return out


# ------------------------------------------------------------------------------------------
# Programs

def _identity(e):
    return e


def feature_lowering(task, state, layout_rewrite: bool, simplify: bool):
    """The lowering the features read (public for the benches that look at what the features
    see): ``state`` lowered by ``task``'s back end (the cuda target's refuses a program
    over the device's limits; a task-like object without a target: the CPU's); without
    ``simplify`` the final simplification of index and value expressions is skipped (3-4x
    faster): the features normalise affine forms themselves, and only op counts of index
    arithmetic differ."""
    target = getattr(task, "target", None)
    lowering = (target.backend.lowering(state, task.hardware, layout_rewrite) if isinstance(target, ir.Target)
                else Lowering(state, layout_rewrite))
    lowering.cut_padding_loops = False  # a cut loop's pieces would read as several small statements
    if not simplify:
        lowering.simplify = _identity
    return lowering


def _made_of(index: int, st) -> tuple[tuple, tuple]:
    """(signature, objects) of stage ``index`` in a nest: everything its lowering reads.
    Its loops stand for its operation, axes and root region (derived loops are shared, see
    ``ir.stage``, and made for one operation, axes and root only); the objects (loops and
    body) are compared by identity, and kept alive with the cache entry."""
    return ((index, id(st.loops), id(st.body), st.compute_at, st.attach, st.auto_unroll_max_step, st.origin,
             st.region_guard_specs), (st.loops, st.body))


class FeatureExtractor:
    """Features of States, caching the rows of every root loop nest by what it is made of
    (the loops, bodies and locations of its stages, and the inlined stages it may read),
    so that programs replayed from steps share the rows of the nests they did not change.
    ``max_entries`` bounds the cache; ``stats`` counts hits and misses. ``simplify=True``
    lowers exactly as ``ir.lower`` (slower; for checking the fast path)."""

    def __init__(self, max_entries: int = 50000, simplify: bool = False):
        self.max_entries = max_entries
        self.simplify = simplify
        self._cache: OrderedDict = OrderedDict()
        self.stats = {"hits": 0, "misses": 0, "errors": 0}

    def clear(self) -> None:
        self._cache.clear()

    def __call__(self, task, states) -> list[np.ndarray]:
        return [self.program(task, s) for s in states]

    def program(self, task, state) -> np.ndarray:
        """The slog'ed (n_statements, N_FEATURES) float32 matrix of one program; empty
        (0 rows) when the program cannot be lowered."""
        try:
            raw = self._raw(task, state)
        except Exception:  # noqa: BLE001 - a program that does not lower scores lowest
            self.stats["errors"] += 1
            return np.zeros((0, N_FEATURES), dtype=np.float32)
        return slog(raw).astype(np.float32)

    def _raw(self, task, state) -> np.ndarray:
        hw = getattr(task, "hardware", None)
        line_bytes = getattr(hw, "cache_line_bytes", 64)
        layout = bool(getattr(task, "layout_rewrite", False))
        gpu = bool(getattr(hw, "is_gpu", False))
        stages = state.stages
        subtree: dict = {}
        roots = []
        inline_sig, inline_objs = [], []
        for idx, st in enumerate(stages):
            if st.is_placeholder:
                continue
            if st.compute_at == "root":
                roots.append(idx)
            elif st.compute_at == "inline":
                inline_sig.append((idx, id(st.op), id(st.body)))
                inline_objs += (st.op, st.body)
            else:
                subtree.setdefault(st.attach[0], []).append(idx)
        vector_bytes = vector_register_bytes(hw)
        context = (layout, line_bytes, vector_bytes, self.simplify, hw if gpu else None, tuple(inline_sig))
        parts = []
        lowering = None
        for idx in roots:
            sig, objs = _made_of(idx, stages[idx])
            signature, keep = [sig], list(objs)
            todo = [idx]
            while todo:
                for child in subtree.get(todo.pop(), ()):
                    sig, objs = _made_of(child, stages[child])
                    signature.append(sig)
                    keep += objs
                    todo.append(child)
            keep += inline_objs
            key = (context, tuple(signature))
            hit = self._cache.get(key)
            if hit is not None and len(hit[0]) == len(keep) and all(a is b for a, b in zip(hit[0], keep)):
                self.stats["hits"] += 1
                self._cache.move_to_end(key)
                parts.append(hit[1])
                continue
            self.stats["misses"] += 1
            if lowering is None:
                lowering = feature_lowering(task, state, layout, self.simplify)
                by_name = {st.name: st for st in stages if not st.is_placeholder}
            nest = lowering.stage_nest(idx)
            rows = nest_features(nest, by_name, line_bytes, gpu, vector_bytes)
            self._cache[key] = (tuple(keep), rows)
            if len(self._cache) > self.max_entries:
                self._cache.popitem(last=False)
            parts.append(rows)
        if not parts:
            return np.zeros((0, N_FEATURES))
        return parts[0] if len(parts) == 1 else np.concatenate(parts)


_DEFAULT = FeatureExtractor()


def extract_features(task, states, extractor: FeatureExtractor | None = None) -> list[np.ndarray]:
    """One (n_statements, N_FEATURES) float32 matrix per State, in order; a program that
    fails to lower gives a matrix with no rows (and is scored lowest)."""
    return (extractor or _DEFAULT)(task, states)


def program_features(task, state) -> np.ndarray:
    """The feature matrix of one State (see ``extract_features``)."""
    return _DEFAULT.program(task, state)


def feature_dict(row) -> dict:
    """A row as {feature name: value}, for reading and tests."""
    return dict(zip(FEATURE_NAMES, np.asarray(row).tolist()))
