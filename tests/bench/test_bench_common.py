"""The benchmark helpers: the JSON contract of the benchmarks (``common.ROW_KEYS``), the FMA peak, timing, and
that ``bench/compile_time.py --smoke`` (what CI runs) keeps that contract."""
from __future__ import annotations

import importlib.util
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load(name: str):
    """bench/ is scripts, not a package: load a module of it by path."""
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


common = _load("common")


def _last_json(text: str) -> dict:
    return json.loads(text.strip().splitlines()[-1])


def test_json_line_has_the_required_keys_and_ratios(capsys):
    rows = [common.json_row("gemm", ours_gflops=150.0, numpy_gflops=100.0, torch_gflops=200.0, trials=64),
            {"workload": "partial", "ours_gflops": float("nan")}]
    common.emit_json("demo", rows)
    out = _last_json(capsys.readouterr().out)
    assert out["bench"] == "demo"
    assert {"cpu", "cores", "avx2", "avx512f", "numpy", "llvmlite", "torch"} <= set(out["machine"])
    first, second = out["rows"]
    assert set(common.ROW_KEYS) <= set(first) and set(common.ROW_KEYS) <= set(second)
    assert first["vs_numpy"] == pytest.approx(1.5) and first["vs_torch"] == pytest.approx(0.75)
    assert first["trials"] == 64
    assert second["ours_gflops"] is None and second["vs_numpy"] is None  # NaN and missing: null


def test_torch_columns_are_null_without_torch(monkeypatch, capsys):
    monkeypatch.setattr(common, "torch_available", lambda: False)
    a = np.ones((32, 32), np.float32)
    assert common.time_torch(lambda x: x @ x, a) is None
    seconds = common.time_numpy(np.dot, a, a, min_time=0.002, repeat=3)
    ours = common.gflops(2 * 32**3, seconds)
    torch_g = common.gflops(2 * 32**3, common.time_torch(lambda x: x @ x, a))
    common.emit_json("no_torch", [common.json_row("gemm32", ours, ours, torch_g)])
    row = _last_json(capsys.readouterr().out)["rows"][0]
    assert row["torch_gflops"] is None and row["vs_torch"] is None
    assert row["vs_numpy"] == pytest.approx(1.0) and row["ours_gflops"] > 0


def test_time_numpy_measures_the_call():
    slow = common.time_numpy(lambda: sum(range(20000)), min_time=0.005, repeat=3)
    fast = common.time_numpy(lambda: None, min_time=0.005, repeat=3)
    assert 0 < fast < slow < 0.1


def test_timers_are_read_in_turns_and_the_fastest_reading_of_each_is_kept():
    order, readings = [], {"a": iter([3.0, 1.0, 2.0]), "b": iter([0.5, 0.7, 0.6])}

    def timer(label):
        def read():
            order.append(label)
            return next(readings[label])
        return read
    best = common.fastest_in_turns({"a": timer("a"), "b": timer("b"), "none": lambda: None}, rounds=3)
    assert best == {"a": 1.0, "b": 0.5, "none": None}
    assert order == ["a", "b"] * 3  # one reading of each per round, in turn
    with pytest.raises(ValueError, match="rounds"):
        common.fastest_in_turns({"a": timer("a")}, rounds=0)


def test_fp32_peak_is_positive_and_physically_possible():
    cores = common.machine_info()["cores"]
    bound = 64 * 5.0  # GFLOPS per core: 64 FLOP/cycle (2 AVX-512 FMA pipes) at 5 GHz
    one = common.fp32_peak_gflops(1, seconds=0.01, runs=2)
    assert 0 < one < bound  # a loaded machine can read far below the peak, never above it
    assert 0 < common.fp32_peak_gflops(cores, seconds=0.01, runs=2) < bound * cores


@pytest.mark.parametrize("lanes, accumulators", [(8, 12), (16, 16)])
def test_fma_kernel_keeps_every_chain(lanes, accumulators):
    """LLVM must neither merge the independent chains nor fold the FMAs away."""
    from ir.cpu.runtime import optimize, target_machine
    asm = target_machine().emit_assembly(optimize(common._fma_peak_ir(lanes, accumulators, unroll=2)))
    assert len(re.findall(r"\bvfmadd\w*", asm)) >= accumulators * 2


def test_table_aligns_columns():
    table = common.Table(["workload", "ours", "torch"])
    table.add("gemm-1024", 150.123, None)
    table.add("dep", 2.5, 53.0)
    lines = table.render().splitlines()
    assert len({len(line) for line in lines}) == 1
    assert lines[2].split() == ["gemm-1024", "150.12", "-"]
    with pytest.raises(ValueError, match="expected 3"):
        table.add("too", "short")


def test_bench_args_parent_parser():
    import argparse
    parser = argparse.ArgumentParser(parents=[common.bench_args()])
    args = parser.parse_args(["--smoke", "--json-only"])
    assert args.smoke and args.json_only
    assert not parser.parse_args([]).smoke


def test_compile_time_smoke_keeps_the_json_contract():
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "compile_time.py"), "--smoke"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "Dominant phase" in proc.stdout
    out = _last_json(proc.stdout)
    assert out["bench"] == "compile_time"
    assert [r["operator"] for r in out["rows"]] == ["matmul", "conv2d"]
    for row in out["rows"]:
        assert all(row[k] is None for k in ("ours_gflops", "numpy_gflops", "torch_gflops", "vs_numpy", "vs_torch"))
        phases = [row[f"{p}_ms"] for p in ("lower", "codegen", "optimize", "jit")]
        assert all(math.isfinite(t) and t > 0 for t in phases) and row["build_ms"] > 0
