"""Accuracy, special-value and code-shape tests for ir/vecmath.py.

Every function is JIT-compiled with llvmlite (all functions of one dtype/lane
count share a module, which also exercises the `declare` de-duplication
contract) and compared with a float64 numpy reference.
"""

import ctypes
import functools
import importlib.util
import math
import pathlib
import re
import zlib

import numpy as np
import pytest
import llvmlite.binding as llvm

try:
    from ir import vecmath
except ImportError:  # the ir package may not exist yet: load the module by path
    _path = pathlib.Path(__file__).resolve().parents[2] / "ir" / "vecmath.py"
    _spec = importlib.util.spec_from_file_location("vecmath", _path)
    vecmath = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(vecmath)

llvm.initialize_native_target()
llvm.initialize_native_asmprinter()

NAMES = vecmath.SUPPORTED
TRANSCENDENTAL = ("exp", "log", "tanh", "sigmoid", "erf", "pow")
FLT_MIN = 2.0 ** -126

_erf64 = np.frompyfunc(math.erf, 1, 1)
REF = {
    "exp": np.exp,
    "log": np.log,
    "tanh": np.tanh,
    "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)),
    "erf": lambda x: _erf64(x).astype(np.float64),
    "sqrt": np.sqrt,
    "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "pow": np.power,
    "floor": np.floor,
    "ceil": np.ceil,
    "abs": np.abs,
}
# Max error in float32 ulps over the sweeps (design target 3; the kernels measure 1-2).
ULP_BOUND = {"exp": 3, "log": 3, "tanh": 3, "sigmoid": 3, "erf": 3, "pow": 3,
             "sqrt": 0.5, "rsqrt": 1.5, "floor": 0, "ceil": 0, "abs": 0}


# -- harness ---------------------------------------------------------------------------------

def _target_machine():
    return llvm.Target.from_default_triple().create_target_machine(
        cpu=llvm.get_host_cpu_name(), features=llvm.get_host_cpu_features().flatten(), opt=3)


def _driver(name, symbol, elem, lanes, nargs):
    """`void @run_<name>(ptr in0[, ptr in1], ptr out, i64 n)`: out[i] = f(in[i]) in chunks of `lanes`."""
    ty = elem if lanes == 1 else f"<{lanes} x {elem}>"
    ins = [f"%in{k}" for k in range(nargs)]
    lines = [f"define void @run_{name}({', '.join('ptr ' + p for p in ins)}, ptr %out, i64 %n) {{",
             "entry:", "  br label %loop", "loop:",
             "  %i = phi i64 [ 0, %entry ], [ %next, %loop ]"]
    for k, p in enumerate(ins):
        lines += [f"  %p{k} = getelementptr inbounds {elem}, ptr {p}, i64 %i",
                  f"  %a{k} = load {ty}, ptr %p{k}, align 4"]
    args = ", ".join(f"{ty} %a{k}" for k in range(nargs))
    lines += [f"  %r = call {ty} {symbol}({args})",
              f"  %po = getelementptr inbounds {elem}, ptr %out, i64 %i",
              f"  store {ty} %r, ptr %po, align 4",
              f"  %next = add i64 %i, {lanes}",
              "  %c = icmp ult i64 %next, %n",
              "  br i1 %c, label %loop, label %exit", "exit:", "  ret void", "}"]
    return "\n".join(lines)


def _module_text(names, dtype, lanes):
    """Concatenate definitions the way the caller does: keep the first of identical `declare` lines."""
    elem = "float" if dtype == "float32" else "double"
    seen, out, drivers = set(), [], []
    for name in names:
        symbol, definition = vecmath.math_function(name, dtype, lanes)
        for line in definition.splitlines():
            if line.startswith("declare"):
                if line in seen:
                    continue
                seen.add(line)
            out.append(line)
        drivers.append(_driver(name, symbol, elem, lanes, 2 if name == "pow" else 1))
    return "\n".join(out + drivers) + "\n"


def _compile(text):
    tm = _target_machine()
    mod = llvm.parse_assembly(text)
    mod.verify()
    pb = llvm.create_pass_builder(tm, llvm.create_pipeline_tuning_options(speed_level=3))
    pb.getModulePassManager().run(mod, pb)
    engine = llvm.create_mcjit_compiler(mod, tm)
    engine.finalize_object()
    return tm, mod, engine


class Lib:
    """All math functions for one (dtype, lanes), callable on numpy arrays."""

    def __init__(self, dtype, lanes):
        self.dtype, self.lanes = np.dtype(dtype), lanes
        self.tm, self.mod, self.engine = _compile(_module_text(NAMES, dtype, lanes))

    def __call__(self, name, *arrays):
        arrays = [np.ascontiguousarray(a, dtype=self.dtype).ravel() for a in arrays]
        n = arrays[0].size
        padded = -(-max(n, 1) // self.lanes) * self.lanes
        bufs = [np.ones(padded, self.dtype) for _ in arrays]
        for b, a in zip(bufs, arrays):
            b[:n] = a
        out = np.empty(padded, self.dtype)
        proto = ctypes.CFUNCTYPE(None, *([ctypes.c_void_p] * (len(arrays) + 1)), ctypes.c_int64)
        fn = proto(self.engine.get_function_address(f"run_{name}"))
        fn(*[b.ctypes.data for b in bufs], out.ctypes.data, padded)
        return out[:n]


@functools.lru_cache(maxsize=None)
def lib(dtype, lanes):
    return Lib(dtype, lanes)


def ulp_error(got, ref, bits=24, emin=-126):
    """|got - ref| in units of the last place of `ref` (float32 by default; float64 with bits=53, emin=-1022).

    Infinities count as the next power of two past the largest finite value so
    that overflowing just above/below the threshold costs about one ulp; a NaN
    mismatch and a wrong zero flush cost infinity, but a result that flushes a
    denormal-range reference to zero is accepted (denormals may flush).
    """
    top = math.ldexp(1.0, 2 - emin) if emin > -1000 else math.inf  # 2^128 for float32
    got = np.asarray(got, np.float64)
    ref = np.asarray(ref, np.float64)
    with np.errstate(all="ignore"):
        if np.isfinite(top):
            got = np.where(np.isinf(got), np.copysign(top, got), got)
            ref = np.clip(ref, -top, top)
        exp = np.frexp(ref)[1]
        ulp = np.ldexp(1.0, np.maximum(exp - bits, emin - bits + 1))
        ulp = np.where(ref == 0, 2.0 ** (emin - bits + 1), ulp)
        err = np.where(got == ref, 0.0, np.abs(got - ref) / ulp)
    nan_got, nan_ref = np.isnan(got), np.isnan(ref)
    err = np.where(nan_got | nan_ref, np.where(nan_got == nan_ref, 0.0, np.inf), err)
    flushed = (got == 0) & (np.abs(ref) < 2.0 ** emin)
    return np.where(flushed, 0.0, err)


def _rng(tag):
    return np.random.default_rng(zlib.crc32(tag.encode()))


def _all_floats(rng, n, dtype=np.float32, positive=False):
    """Finite values with uniformly random bit patterns: every binade, denormals included."""
    if dtype == np.float32:
        v = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32).view(np.float32)
    else:
        v = rng.integers(0, 2**64, n, dtype=np.uint64).view(np.float64)
    v = v[np.isfinite(v)]
    return np.abs(v) if positive else v


def sweep(name, n=200_000):
    """Float32 inputs for `name`: random bit patterns over the whole range plus a dense linspace where it matters."""
    rng = _rng(name)
    dense = {"exp": (-104.0, 89.0), "log": (0.25, 4.0), "tanh": (-10.0, 10.0), "sigmoid": (-105.0, 20.0),
             "erf": (-4.5, 4.5), "sqrt": (0.0, 100.0), "rsqrt": (1e-3, 100.0)}.get(name, (-100.0, 100.0))
    if name == "pow":
        x = np.concatenate([_all_floats(rng, n // 2, positive=True), rng.uniform(1e-3, 1e3, n // 2)])
        y = np.concatenate([rng.uniform(-3, 3, x.size - n // 2), rng.uniform(-40, 40, n // 2)])
        return x.astype(np.float32), y.astype(np.float32)
    x = np.concatenate([_all_floats(rng, n // 2, positive=name in ("log", "sqrt", "rsqrt")),
                        np.linspace(*dense, n // 2, dtype=np.float32)])
    return (x,)


# -- float32 accuracy --------------------------------------------------------------------------

@pytest.mark.parametrize("name", NAMES)
def test_float32_accuracy_sweep(name):
    args = sweep(name)
    got = lib("float32", 8)(name, *args)
    with np.errstate(all="ignore"):
        ref = REF[name](*[a.astype(np.float64) for a in args])
    err = ulp_error(got, ref)
    worst = int(np.argmax(err))
    assert err[worst] <= ULP_BOUND[name], (name, [a[worst] for a in args], got[worst], ref[worst], err[worst])


@pytest.mark.parametrize("lanes", [1, 2, 4, 16])
@pytest.mark.parametrize("name", NAMES)
def test_float32_other_lane_counts(name, lanes):
    args = [a[::10].copy() for a in sweep(name)]  # 20k values, a ragged tail is padded by the harness
    got = lib("float32", lanes)(name, *args)
    with np.errstate(all="ignore"):
        ref = REF[name](*[a.astype(np.float64) for a in args])
    assert ulp_error(got, ref).max() <= ULP_BOUND[name]
    np.testing.assert_array_equal(got, lib("float32", 8)(name, *args))  # same code whatever the width


def test_pow_negative_base_integer_exponent():
    rng = _rng("pow-neg")
    x = -rng.uniform(1e-2, 1e2, 50_000).astype(np.float32)
    y = rng.integers(-12, 13, 50_000).astype(np.float32)
    got = lib("float32", 8)("pow", x, y)
    assert ulp_error(got, np.power(x.astype(np.float64), y.astype(np.float64))).max() <= ULP_BOUND["pow"]


def test_pow_moderate_relative_error():
    rng = _rng("pow-mod")
    x = rng.uniform(1e-3, 1e3, 100_000).astype(np.float32)
    y = rng.uniform(-4, 4, 100_000).astype(np.float32)
    got = lib("float32", 8)("pow", x, y).astype(np.float64)
    ref = np.power(x.astype(np.float64), y.astype(np.float64))
    assert np.max(np.abs(got - ref) / ref) <= 1.2e-7


SPECIAL_F = [0.0, -0.0, 1.0, -1.0, 0.5, 2.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1e-38, 3e38, -3e38,
             88.72, 88.73, 89.0, -87.0, -103.0, -104.0, -110.0, 4.0, -4.0, 10.0, -10.0, 100.0, -100.0, 1e30, -1e30]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("lanes", [1, 8])
@pytest.mark.parametrize("name", [n for n in NAMES if n != "pow"])
def test_special_values(name, dtype, lanes):
    x = np.array(SPECIAL_F, dtype)
    got = lib(dtype, lanes)(name, x)
    with np.errstate(all="ignore"):
        ref = REF[name](x.astype(np.float64))
    if dtype == "float32":
        err = ulp_error(got, ref)
    else:
        err = ulp_error(got, ref, bits=53, emin=-1022)
    assert err.max() <= max(ULP_BOUND[name], 3), list(zip(x, got, ref, err))
    exact = {"exp": {-np.inf: 0.0, np.inf: np.inf, 0.0: 1.0, -0.0: 1.0},
             "log": {0.0: -np.inf, -0.0: -np.inf, np.inf: np.inf, 1.0: 0.0},
             "tanh": {np.inf: 1.0, -np.inf: -1.0, 100.0: 1.0, -100.0: -1.0, 1e30: 1.0},
             "sigmoid": {np.inf: 1.0, -np.inf: 0.0, 100.0: 1.0, 0.0: 0.5},
             "erf": {np.inf: 1.0, -np.inf: -1.0, 10.0: 1.0, -10.0: -1.0, 1e30: 1.0}}.get(name, {})
    if dtype == "float32":  # float32-only consequences of rounding
        exact.update({"exp": {89.0: np.inf, -104.0: 0.0}, "erf": {4.0: 1.0, -4.0: -1.0},
                      "tanh": {10.0: 1.0}, "sigmoid": {20.0: 1.0} if 20.0 in SPECIAL_F else {}}.get(name, {}))
    for xv, want in exact.items():
        assert got[SPECIAL_F.index(xv)] == want, (name, xv)
    assert np.all(np.isnan(got) == np.isnan(ref))
    if name in ("log", "sqrt"):
        assert np.isnan(got[SPECIAL_F.index(-1.0)]) and np.isnan(got[SPECIAL_F.index(-np.inf)])
    if name in ("tanh", "erf", "abs", "floor", "ceil", "sqrt"):
        np.testing.assert_array_equal(np.signbit(got), np.signbit(ref.astype(dtype)))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("lanes", [1, 8])
def test_pow_special_values(dtype, lanes):
    vals = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0, 3.0, -3.0, 0.25, np.inf, -np.inf, np.nan,
            128.0, -149.0, -150.0, 1e-45, 1e30]
    x, y = (a.ravel().astype(dtype) for a in np.meshgrid(vals, vals))
    got = lib(dtype, lanes)("pow", x, y)
    with np.errstate(all="ignore"):
        want = np.power(x.astype(np.float64), y.astype(np.float64)).astype(dtype)
    assert np.all(np.isnan(got) == np.isnan(want)), [(a, b, g, w) for a, b, g, w in zip(x, y, got, want)
                                                     if np.isnan(g) != np.isnan(w)]
    ok = ~np.isnan(want)
    if dtype == "float32":
        err = ulp_error(got[ok], want[ok].astype(np.float64))
    else:
        err = ulp_error(got[ok], want[ok], bits=53, emin=-1022)
    assert err.max() <= 1, [(a, b, g, w) for a, b, g, w, e in zip(x[ok], y[ok], got[ok], want[ok], err) if e > 1]
    # IEEE special cases (zero or infinite operand / result) and small integer results: bit-exact, sign included.
    w, special = want[ok], (x == 0) | np.isinf(x) | np.isinf(y) | (np.abs(x) == 1) | (y == 0)
    exact = np.isinf(w) | special[ok] | ((w == np.round(w)) & (np.abs(w) <= 2.0**20) & (w != 0))
    np.testing.assert_array_equal(got[ok][exact], want[ok][exact])
    np.testing.assert_array_equal(np.signbit(got[ok][exact]), np.signbit(want[ok][exact]))


# -- float64 -----------------------------------------------------------------------------------

@pytest.mark.parametrize("lanes", [1, 4])
@pytest.mark.parametrize("name", NAMES)
def test_float64_accuracy(name, lanes):
    rng = _rng("f64" + name)
    x = np.concatenate([_all_floats(rng, 5000, np.float64), rng.uniform(-30, 30, 5000)])
    if name in ("log", "sqrt", "rsqrt"):
        x = np.abs(x)
    args = (np.abs(x), rng.uniform(-5, 5, x.size)) if name == "pow" else (x,)
    got = lib("float64", lanes)(name, *args)
    with np.errstate(all="ignore"):
        ref = REF[name](*args)
    bound = {"sigmoid": 3, "exp": 1, "log": 1, "tanh": 2, "erf": 1, "pow": 1, "rsqrt": 1.5}.get(name, 0.5)
    assert ulp_error(got, ref, bits=53, emin=-1022).max() <= bound


# -- interface and code shape ------------------------------------------------------------------

def test_exp_v8f32_is_vector_code():
    symbol, definition = vecmath.math_function("exp", "float32", 8)
    assert symbol == "@autosched.exp.v8f32"
    assert "call" not in definition and "expf" not in definition
    tm, mod, engine = _compile(_module_text(["exp"], "float32", 8))
    asm = tm.emit_assembly(mod)
    assert re.search(r"^\s*call", asm, re.M) is None, asm
    assert "run_exp" in asm


def test_generic_cpu_without_fma():
    # Baseline CPU of the host triple (x86-64: SSE2, no FMA, no SSE4.1): still call-free and within bounds.
    names = ["exp", "log", "tanh", "sigmoid", "erf", "pow", "rsqrt"]
    tm = llvm.Target.from_default_triple().create_target_machine(cpu="", features="", opt=3)
    mod = llvm.parse_assembly(_module_text(names, "float32", 8))
    pb = llvm.create_pass_builder(tm, llvm.create_pipeline_tuning_options(speed_level=3))
    pb.getModulePassManager().run(mod, pb)
    assert re.search(r"^\s*(call|bl|jalr)\b", tm.emit_assembly(mod), re.M) is None
    engine = llvm.create_mcjit_compiler(mod, tm)
    engine.finalize_object()
    for name in names:
        n = sweep(name)[0][::5].size // 8 * 8
        args = [np.ascontiguousarray(a[::5][:n]) for a in sweep(name)]
        out = np.empty(n, np.float32)
        proto = ctypes.CFUNCTYPE(None, *([ctypes.c_void_p] * (len(args) + 1)), ctypes.c_int64)
        proto(engine.get_function_address(f"run_{name}"))(*[a.ctypes.data for a in args], out.ctypes.data, n)
        with np.errstate(all="ignore"):
            ref = REF[name](*[a.astype(np.float64) for a in args])
        assert ulp_error(out, ref).max() <= ULP_BOUND[name], name


def test_float32_transcendentals_never_call_libm():
    for name in TRANSCENDENTAL:
        for lanes in (1, 4, 8, 16):
            _, definition = vecmath.math_function(name, "float32", lanes)
            calls = re.findall(r"call \S+ @([\w.]+)", definition)
            assert all(c.startswith("llvm.") for c in calls), (name, lanes, calls)
            assert not any(c.startswith(("llvm.fma", "llvm.rint", "llvm.exp", "llvm.log")) for c in calls)


def test_definitions_shape_and_unique_symbols():
    symbols = set()
    for name in NAMES:
        for dtype in ("float32", "float64"):
            for lanes in (1, 2, 4, 8, 16):
                symbol, definition = vecmath.math_function(name, dtype, lanes)
                assert symbol.startswith("@autosched.") and symbol not in symbols
                symbols.add(symbol)
                assert (symbol, definition) == vecmath.math_function(name, dtype, lanes)  # deterministic
                defines = [l for l in definition.splitlines() if l.startswith("define")]
                assert len(defines) == 1 and defines[0].startswith(f"define internal ")
                assert f" {symbol}(" in defines[0] and "alwaysinline" in defines[0]
                assert "#" not in definition  # no attribute groups that could clash across definitions
                for line in definition.splitlines():
                    assert not line.startswith(("@", "!", "attributes", "declare ")) or re.fullmatch(
                        r"declare .+ @[\w.]+\([^)]*\)", line)
    assert "@autosched.exp.f32" in symbols and "@autosched.pow.v16f64" in symbols


def test_mixed_module_with_shared_declares():
    # Every function at several widths in one module: the declare de-dup contract is all it takes.
    text = "\n".join(_module_text(NAMES, dtype, lanes).replace("@run_", f"@run{dtype}{lanes}_")
                     for dtype in ("float32", "float64") for lanes in (1, 8))
    seen, lines = set(), []
    for line in text.splitlines():
        if line.startswith("declare"):
            if line in seen:
                continue
            seen.add(line)
        lines.append(line)
    llvm.parse_assembly("\n".join(lines)).verify()


@pytest.mark.parametrize("args, what", [
    (("cosh", "float32", 8), "cosh"), (("exp", "float16", 8), "float16"), (("exp", "float32", 3), "3"),
    (("exp", "float32", 32), "32"), (("exp", "float32", 0), "0"), (("exp", "float32", "8"), "'8'"),
])
def test_invalid_arguments(args, what):
    with pytest.raises(ValueError, match="supported") as info:
        vecmath.math_function(*args)
    assert what in str(info.value)
