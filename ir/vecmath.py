"""Vector math functions emitted as LLVM IR text.

Generated loops must call vector code for exp/log/tanh/... rather than one
libm call per lane (scalar ``expf`` per element is what makes a naive
softmax slow).  For float32 every function is a branch-free polynomial or
rational approximation written in LLVM vector IR (``fmul contract``/``fadd
contract`` so the backend fuses them into FMAs where the target has FMA; the
algorithms stay accurate without FMA), with exponent manipulation through
``bitcast`` to integer vectors and ``select`` for special values.  Measured
max error is below 3 ulp over the whole float32 range (see
tests/ir/test_vecmath.py).  For float64 the libm function is called per lane
(accuracy matters more than speed there and libm resolves in the JIT process).

No intrinsic used here lowers to a libm call on any x86-64 CPU (no
``llvm.fma``/``llvm.rint``: rounding to integers uses the 1.5*2^23 "magic
number" trick), so the code stays vector code even for a generic target.
Only ``floor``/``ceil`` themselves use ``llvm.floor``/``llvm.ceil``, which
need SSE4.1 (or AVX) to avoid a libm call.
"""

from __future__ import annotations

import struct

from .expr import MATH_FUNCS

__all__ = ["SUPPORTED", "math_function"]

#: every math function of the language has a vector implementation
SUPPORTED = MATH_FUNCS

_DTYPES = {"float32": "f32", "float64": "f64"}
_LANES = (1, 2, 4, 8, 16)
_SCALAR = {"f32": "float", "f64": "double", "i32": "i32", "i64": "i64", "i1": "i1"}

_INF = float("inf")
_NAN = float("nan")
_LN2 = 0.6931471805599453
_LOG2E = 1.4426950408889634

# float32 exp: SLEEF xexpf (u10) coefficients; ln2 split so that q*_L2U is exact for |q| < 2^9.
_EXPF_L2U = 0.693145751953125
_EXPF_L2L = 1.428606765330187045e-06
_EXPF_POLY = (0.000198527617612853646278381, 0.00139304355252534151077271, 0.00833336077630519866943359,
              0.0416664853692054748535156, 0.166666671633720397949219, 0.5)
# float32 log: Cephes logf coefficients; ln2 = _LOGF_C1 + _LOGF_C2 with q*_LOGF_C1 exact.
_LOGF_POLY = (7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1, 1.4249322787e-1,
              -1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1, 3.3333331174e-1)
_LOGF_C1 = 0.693359375
_LOGF_C2 = -2.12194440e-4
# float32 tanh for |x| < 0.625: Cephes tanhf odd polynomial.
_TANHF_POLY = (-5.70498872745e-3, 2.06390887954e-2, -5.37397155531e-2, 1.33314422036e-1, -3.33332819422e-1)
# float32 erf: N. Juffa's faithfully-rounded erff minimax split at 475/512 (stackoverflow.com/a/35148199).
_ERFF_SPLIT = 0.927734375
def _hex(text: str) -> tuple[float, ...]:
    return tuple(map(float.fromhex, text.split()))


_ERFF_SMALL = _hex("-0x1.38ep-11 0x1.471a58p-8 -0x1.b691b2p-6 0x1.ce1c44p-4 -0x1.8127p-2 0x1.06eba8p-3")
_ERFF_LARGE_A = _hex("-0x1.22p-16 0x1.91cfb2p-12")
_ERFF_LARGE_B = _hex("-0x1.fd1438p-9 0x1.8d6342p-6")
_ERFF_LARGE_C = _hex("-0x1.b55cb8p-4 -0x1.450aa0p-1 -0x1.079d0cp-3")


class _V:
    """An SSA value (or argument) together with its element kind."""

    __slots__ = ("name", "kind")

    def __init__(self, name: str, kind: str):
        self.name, self.kind = name, kind


def _fconst(value: float, kind: str) -> str:
    """LLVM float literal: the hex of the double holding the (float32-rounded) value."""
    if value == value and abs(value) != _INF and kind == "f32":
        value = struct.unpack("<f", struct.pack("<f", value))[0]
    return "0x%016X" % struct.unpack("<Q", struct.pack("<d", value))[0]


class _Emitter:
    """Accumulates the body of one function; every helper works for any lane count."""

    def __init__(self, lanes: int):
        self.lanes = lanes
        self.body: list[str] = []
        self.decls: list[str] = []
        self.count = 0

    # -- types and operands -------------------------------------------------
    def ty(self, kind: str) -> str:
        s = _SCALAR[kind]
        return s if self.lanes == 1 else f"<{self.lanes} x {s}>"

    def suffix(self, kind: str) -> str:
        return kind if self.lanes == 1 else f"v{self.lanes}{kind}"

    def const(self, value, kind: str) -> str:
        if kind in ("f32", "f64"):
            lit = _fconst(float(value), kind)
        elif kind == "i1":
            lit = "true" if value else "false"
        else:
            lit = str(int(value))
        return lit if self.lanes == 1 else f"splat ({_SCALAR[kind]} {lit})"

    def opnd(self, x, kind: str) -> str:
        return x.name if isinstance(x, _V) else self.const(x, kind)

    def emit(self, rhs: str, kind: str) -> _V:
        v = _V(f"%t{self.count}", kind)
        self.count += 1
        self.body.append(f"  {v.name} = {rhs}")
        return v

    def declare(self, ret: str, name: str, args: list[str]) -> None:
        line = f"declare {ret} @{name}({', '.join(args)})"
        if line not in self.decls:
            self.decls.append(line)

    # -- instructions ---------------------------------------------------------
    def binop(self, op: str, a, b, kind: str | None = None) -> _V:
        kind = kind or (a.kind if isinstance(a, _V) else b.kind)
        flags = " contract" if op[0] == "f" else ""
        return self.emit(f"{op}{flags} {self.ty(kind)} {self.opnd(a, kind)}, {self.opnd(b, kind)}", kind)

    def fadd(self, a, b): return self.binop("fadd", a, b)
    def fsub(self, a, b): return self.binop("fsub", a, b)
    def fmul(self, a, b): return self.binop("fmul", a, b)
    def fdiv(self, a, b): return self.binop("fdiv", a, b)
    def add(self, a, b): return self.binop("add", a, b)
    def sub(self, a, b): return self.binop("sub", a, b)
    def shl(self, a, b): return self.binop("shl", a, b)
    def ashr(self, a, b): return self.binop("ashr", a, b)
    def and_(self, a, b): return self.binop("and", a, b)
    def or_(self, a, b): return self.binop("or", a, b)
    def xor(self, a, b): return self.binop("xor", a, b)

    def madd(self, a, b, c) -> _V:
        """a*b + c; `contract` lets the backend fuse it into an FMA."""
        return self.fadd(self.fmul(a, b), c)

    def poly(self, x: _V, coeffs) -> _V:
        """Horner evaluation, coefficients from the highest degree down."""
        r = coeffs[0]
        for c in coeffs[1:]:
            r = self.madd(r, x, c)
        return r

    def fneg(self, a: _V) -> _V:
        return self.emit(f"fneg {self.ty(a.kind)} {a.name}", a.kind)

    def fcmp(self, pred: str, a, b) -> _V:
        kind = a.kind if isinstance(a, _V) else b.kind
        return self.emit(f"fcmp {pred} {self.ty(kind)} {self.opnd(a, kind)}, {self.opnd(b, kind)}", "i1")

    def icmp(self, pred: str, a, b) -> _V:
        kind = a.kind if isinstance(a, _V) else b.kind
        return self.emit(f"icmp {pred} {self.ty(kind)} {self.opnd(a, kind)}, {self.opnd(b, kind)}", "i1")

    def select(self, c: _V, a, b, kind: str | None = None) -> _V:
        kind = kind or (a.kind if isinstance(a, _V) else b.kind)
        return self.emit(f"select {self.ty('i1')} {c.name}, {self.ty(kind)} {self.opnd(a, kind)}, "
                         f"{self.ty(kind)} {self.opnd(b, kind)}", kind)

    def cast(self, op: str, a: _V, kind: str) -> _V:
        return self.emit(f"{op} {self.ty(a.kind)} {a.name} to {self.ty(kind)}", kind)

    def intrinsic(self, name: str, *args: _V) -> _V:
        kind = args[0].kind
        fn = f"llvm.{name}.{self.suffix(kind)}"
        t = self.ty(kind)
        self.declare(t, fn, [t] * len(args))
        ops = ", ".join(f"{t} {a.name}" for a in args)
        return self.emit(f"call {t} @{fn}({ops})", kind)

    def libm(self, name: str, *args: _V) -> _V:
        """Call the scalar libm double function `name` once per lane."""
        self.declare("double", name, ["double"] * len(args))
        if self.lanes == 1:
            ops = ", ".join(f"double {a.name}" for a in args)
            return self.emit(f"call double @{name}({ops})", "f64")
        acc = "poison"
        for i in range(self.lanes):
            lane = [self.emit(f"extractelement {self.ty('f64')} {a.name}, i32 {i}", "f64") for a in args]
            ops = ", ".join(f"double {a.name}" for a in lane)
            r = self.emit(f"call double @{name}({ops})", "f64")
            acc = self.emit(f"insertelement {self.ty('f64')} {acc}, double {r.name}, i32 {i}", "f64").name
        return _V(acc, "f64")

    # -- small compound helpers ------------------------------------------------
    def clamp(self, x: _V, lo: float, hi: float) -> _V:
        """Clamp with ordered compares so that NaN passes through unchanged."""
        x = self.select(self.fcmp("olt", x, lo), lo, x)
        return self.select(self.fcmp("ogt", x, hi), hi, x)

    def pow2i(self, n: _V, kind: str) -> _V:
        """2**n for integer n in the normal exponent range, by building the exponent bits."""
        bits, bias = (23, 127) if kind == "f32" else (52, 1023)
        return self.cast("bitcast", self.shl(self.add(n, bias), bits), kind)


# -- float32 kernels ------------------------------------------------------------------------

def _exp_f32(e: _Emitter, x: _V) -> _V:
    # exp: Cody-Waite reduction x = q*ln2 + s, |s| <= ln2/2, SLEEF minimax for e^s, scale by 2^q in two steps.
    x = e.clamp(x, -104.0, 88.8)                   # beyond: exact 0 / inf after scaling
    magic = 12582912.0                             # 1.5*2^23: adding it rounds to an integer
    k = e.madd(x, _LOG2E, magic)
    q = e.fsub(k, magic)
    n = e.sub(e.cast("bitcast", k, "i32"), 0x4B400000)
    s = e.madd(q, -_EXPF_L2U, x)
    s = e.madd(q, -_EXPF_L2L, s)
    u = e.poly(s, _EXPF_POLY)
    u = e.fadd(e.madd(e.fmul(s, s), u, s), 1.0)
    n1 = e.ashr(n, 1)                              # 2^q = 2^n1 * 2^(q-n1): both factors normal for q in [-150, 128],
    n2 = e.sub(n, n1)                              # so overflow and (denormal) underflow round once, correctly
    return e.fmul(e.fmul(u, e.pow2i(n1, "f32")), e.pow2i(n2, "f32"))


def _log_f32(e: _Emitter, x: _V) -> _V:
    # log: x = 2^q * m with m in [sqrt(1/2), sqrt(2)), Cephes logf polynomial in m-1, q*ln2 added in two parts.
    tiny = e.fcmp("olt", x, 1.1754943508222875e-38)     # denormals: scale by 2^23 first
    xs = e.select(tiny, e.fmul(x, 8388608.0), x)
    bits = e.cast("bitcast", xs, "i32")
    q = e.add(e.ashr(bits, 23), e.select(tiny, -149, -126, "i32"))
    m = e.cast("bitcast", e.or_(e.and_(bits, 0x007FFFFF), 0x3F000000), "f32")   # m in [0.5, 1)
    low = e.fcmp("olt", m, 0.707106781186547524)
    q = e.cast("sitofp", e.select(low, e.sub(q, 1), q), "f32")
    f = e.fsub(e.select(low, e.fadd(m, m), m), 1.0)                             # exact
    z = e.fmul(f, f)
    y = e.fmul(e.fmul(e.poly(f, _LOGF_POLY), f), z)
    y = e.madd(q, _LOGF_C2, y)
    y = e.madd(z, -0.5, y)
    r = e.madd(q, _LOGF_C1, e.fadd(f, y))
    r = e.select(e.fcmp("ult", x, 0.0), _NAN, r)        # negative or NaN
    r = e.select(e.fcmp("oeq", x, 0.0), -_INF, r)
    return e.select(e.fcmp("oeq", x, _INF), _INF, r)


def _tanh_f32(e: _Emitter, x: _V) -> _V:
    # tanh: |x| < 0.625 Cephes odd polynomial (no cancellation); else 1 - 2/(exp(2|x|)+1) with the sign of x.
    a = e.intrinsic("fabs", x)
    z = e.fmul(x, x)
    small = e.madd(e.fmul(e.poly(z, _TANHF_POLY), z), x, x)
    s = _exp_f32(e, e.fadd(a, a))                       # inf for large |x| -> exactly 1
    big = e.fsub(1.0, e.fdiv(2.0, e.fadd(s, 1.0)))
    r = e.select(e.fcmp("ogt", a, 0.625), big, small)  # NaN takes the polynomial path and stays NaN
    return e.intrinsic("copysign", r, x)                # odd function: also gives tanh(-0) = -0


def _erf_f32(e: _Emitter, x: _V) -> _V:
    # erf: |x| <= 475/512 odd minimax x + x*P(x^2); else 1 - exp(-|x|*Q(|x|)) (Juffa), |x| clamped at 4.
    a = e.intrinsic("fabs", x)
    small = e.madd(e.poly(e.fmul(x, x), _ERFF_SMALL), x, x)
    t = e.select(e.fcmp("ogt", a, 4.0), 4.0, a)         # erf(4) rounds to 1; avoids inf-inf in the polynomial
    s = e.fmul(t, t)
    r = e.madd(e.poly(t, _ERFF_LARGE_A), s, e.poly(t, _ERFF_LARGE_B))
    for c in _ERFF_LARGE_C:
        r = e.madd(r, t, c)
    r = e.fsub(e.fmul(r, t), t)
    big = e.fsub(1.0, _exp_f32(e, r))
    r = e.select(e.fcmp("ogt", a, _ERFF_SPLIT), big, small)
    return e.intrinsic("copysign", r, x)


def _exp_f64_core(e: _Emitter, t: _V) -> _V:
    # exp (double, ~1e-12 relative, for float32 pow): t = n*ln2 + r, degree-10 Taylor for e^r, |r| <= ln2/2.
    t = e.clamp(t, -110.0, 90.0)
    magic = 6755399441055744.0                     # 1.5*2^52
    k = e.madd(t, _LOG2E, magic)
    q = e.fsub(k, magic)
    n = e.sub(e.cast("bitcast", k, "i64"), 0x4338000000000000)
    r = e.madd(q, -_LN2, t)
    fact = [1.0]
    for i in range(1, 11):
        fact.append(fact[-1] * i)
    p = e.poly(r, [1.0 / f for f in reversed(fact)])
    return e.fmul(p, e.pow2i(n, "f64"))


def _log_f64_core(e: _Emitter, x: _V) -> _V:
    # log (double, ~1e-12 relative, positive normal x): x = 2^q*m, m in [sqrt(1/2), sqrt(2)),
    # log m = 2*atanh((m-1)/(m+1)) by its Taylor series.
    bits = e.cast("bitcast", x, "i64")
    q = e.cast("trunc", e.sub(e.ashr(bits, 52), 1023), "i32")
    m = e.cast("bitcast", e.or_(e.and_(bits, 0x000FFFFFFFFFFFFF), 0x3FF0000000000000), "f64")  # [1, 2)
    hi = e.fcmp("ogt", m, 1.4142135623730951)
    m = e.select(hi, e.fmul(m, 0.5), m)
    q = e.cast("sitofp", e.select(hi, e.add(q, 1), q), "f64")
    s = e.fdiv(e.fsub(m, 1.0), e.fadd(m, 1.0))
    z = e.fmul(s, s)
    s2 = e.fadd(s, s)
    p = e.poly(z, [1.0 / k for k in (13, 11, 9, 7, 5, 3)])
    return e.madd(q, _LN2, e.madd(e.fmul(s2, z), p, s2))


def _pow_f32(e: _Emitter, x: _V, y: _V) -> _V:
    # pow: exp(y*log|x|) evaluated in double internally (so ~0.5 ulp), then IEEE special cases and x < 0 with integer y.
    a = e.intrinsic("fabs", x)
    ad, yd = e.cast("fpext", a, "f64"), e.cast("fpext", y, "f64")
    lg = _log_f64_core(e, ad)
    lg = e.select(e.fcmp("oeq", ad, 0.0), -_INF, lg)
    lg = e.select(e.fcmp("ueq", ad, _INF), ad, lg)      # inf or NaN
    r = e.cast("fptrunc", _exp_f64_core(e, e.fmul(yd, lg)), "f32")
    r = e.select(e.fcmp("oeq", a, 1.0), 1.0, r)         # pow(+-1, inf or nan) = 1 (sign fixed below)
    # Integer / odd tests on y via the 2^52 rounding trick (no llvm.rint, which may become a libm call).
    ya = e.intrinsic("fabs", yd)
    huge = e.fcmp("oge", ya, 16777216.0)                # |y| >= 2^24 (or inf): an even integer
    is_int = e.fcmp("oeq", e.fsub(e.fadd(ya, 4503599627370496.0), 4503599627370496.0), ya)
    half = e.fmul(ya, 0.5)
    half_frac = e.fcmp("une", e.fsub(e.fadd(half, 4503599627370496.0), 4503599627370496.0), half)
    y_int = e.or_(huge, is_int)
    y_odd = e.and_(e.and_(is_int, half_frac), e.xor(huge, True))
    neg = e.icmp("slt", e.cast("bitcast", x, "i32"), 0)  # sign bit, so that pow(-0, odd) = -0 / -inf
    r = e.select(e.and_(neg, y_odd), e.fneg(r), r)
    finite_neg = e.and_(e.fcmp("olt", x, 0.0), e.fcmp("ogt", x, -_INF))
    r = e.select(e.and_(finite_neg, e.xor(y_int, True)), _NAN, r)
    return e.select(e.fcmp("oeq", y, 0.0), 1.0, r)      # pow(anything, 0) = 1, even NaN


def _sigmoid(e: _Emitter, x: _V, exp) -> _V:
    # sigmoid: e = exp(-|x|) never overflows; 1/(1+e) for x >= 0, e/(1+e) for x < 0 (keeps tiny results accurate).
    ex = exp(e, e.fneg(e.intrinsic("fabs", x)))
    num = e.select(e.fcmp("olt", x, 0.0), ex, 1.0)
    return e.fdiv(num, e.fadd(ex, 1.0))


def _libm(name):
    return lambda e, *args: e.libm(name, *args)


_F32 = {
    "exp": _exp_f32,
    "log": _log_f32,
    "tanh": _tanh_f32,
    "sigmoid": lambda e, x: _sigmoid(e, x, _exp_f32),
    "erf": _erf_f32,
    "pow": _pow_f32,
}
_F64 = {
    "exp": _libm("exp"),
    "log": _libm("log"),
    "tanh": _libm("tanh"),
    "sigmoid": lambda e, x: _sigmoid(e, x, _libm("exp")),
    "erf": _libm("erf"),
    "pow": _libm("pow"),
}
_COMMON = {
    "sqrt": lambda e, x: e.intrinsic("sqrt", x),
    "rsqrt": lambda e, x: e.fdiv(1.0, e.intrinsic("sqrt", x)),
    "floor": lambda e, x: e.intrinsic("floor", x),
    "ceil": lambda e, x: e.intrinsic("ceil", x),
    "abs": lambda e, x: e.intrinsic("fabs", x),
}


def math_function(name: str, dtype: str, lanes: int) -> tuple[str, str]:
    """Return ``(symbol, definition)`` for math function `name` on `dtype` with `lanes` lanes.

    `dtype` is "float32" or "float64"; `lanes` is 1 (scalar) or 2, 4, 8, 16.
    `symbol` is the LLVM function name including the ``@``, e.g.
    ``"@autosched.exp.v8f32"`` (scalar: ``"@autosched.exp.f32"``), unique per
    (name, dtype, lanes).  The function takes one argument (``pow``: base,
    exponent) of type ``float``/``double`` or ``<N x float>``/``<N x double>``
    and returns that type.

    `definition` is module-level LLVM IR text: zero or more ``declare`` lines
    followed by exactly one ``define internal ... alwaysinline nounwind``
    function (attributes written inline, no ``#N`` attribute groups, no other
    globals), so definitions of different functions can be concatenated into
    one module.  Declarations contract: each ``declare`` is on its own line
    in the canonical form ``declare <ret> @<name>(<argtypes>)`` with no
    attributes -- LLVM intrinsics (``@llvm.fabs.v8f32`` ...) and, for float64
    only, libm functions (``declare double @exp(double)``, likewise ``log``,
    ``tanh``, ``erf``, ``pow(double, double)``).  Several definitions may
    declare the same function, so the caller must keep only the first of
    identical lines starting with ``declare`` (a module may not declare a
    function twice); a caller that declares these functions itself must use
    the same text or de-duplicate by symbol.  float32 functions never call
    libm.

    Raises ValueError for an unknown name, dtype or lane count.
    """
    if name not in SUPPORTED:
        raise ValueError(f"unknown math function {name!r}; supported: {', '.join(SUPPORTED)}")
    if dtype not in _DTYPES:
        raise ValueError(f"unsupported dtype {dtype!r} for math function {name!r}; supported: float32, float64")
    if isinstance(lanes, bool) or not isinstance(lanes, int) or lanes not in _LANES:
        raise ValueError(f"unsupported lane count {lanes!r} for math function {name!r}; "
                         f"supported: {', '.join(map(str, _LANES))}")
    kind = _DTYPES[dtype]
    e = _Emitter(lanes)
    args = [_V("%x", kind), _V("%y", kind)][: 2 if name == "pow" else 1]
    impl = _COMMON.get(name) or (_F32 if kind == "f32" else _F64)[name]
    result = impl(e, *args)
    symbol = f"@autosched.{name}.{e.suffix(kind)}"
    t = e.ty(kind)
    params = ", ".join(f"{t} {a.name}" for a in args)
    lines = e.decls + [f"define internal {t} {symbol}({params}) alwaysinline nounwind {{", "entry:"]
    lines += e.body + [f"  ret {t} {result.name}", "}"]
    return symbol, "\n".join(lines) + "\n"
