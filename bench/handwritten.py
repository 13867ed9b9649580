"""Hand-written schedules, written with transform steps the way a TVM user would, beside
numpy and PyTorch measured in the same run.

Shows what the code generator reaches when the schedule is good (the search then has to
find such schedules): GMM-1024 with and without the layout rewrite of its constant
operand, the ResNet-50 3x3 conv2d layer (NHWC, with a packed weight) and a softmax over a
256x4096 matrix; also the fp32 peak of this machine and the time to lower and compile
one tiled, annotated GMM program.

    python bench/handwritten.py [--smoke] [--json-only]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

import ir  # noqa: E402
from autosched import ops  # noqa: E402


def gemm_schedule(dag, mi: int, mj: int, kb: int):
    """Register tile of mi x mj outputs (C.local, accumulated over k in registers), B read
    as panels of mj columns, tiles spread over the threads."""
    s = dag.init_state().cache_write("C")
    s = s.split("C", "i", [mi]).split("C", "j", [mj])
    s = s.reorder("C", ["j.0", "i.0", "i.1", "j.1"])
    s = s.compute_at("C.local", "C", "i.0")
    s = s.split("C.local", "k", [kb])
    s = s.reorder("C.local", ["k.0", "k.1", "i", "j"])
    s = s.unroll("C.local", "i").vectorize("C.local", "j")
    s = s.fuse("C", ["j.0", "i.0"]).parallel("C", "j.0@i.0@")
    return s.vectorize("C", "j.1")


def gemm_dag(n: int, constant_b: bool):
    a = ir.placeholder((n, n), name="A")
    b = ir.placeholder((n, n), name="B", constant=constant_b)
    k = ir.reduce_axis(n, name="k")
    c = ir.compute((n, n), lambda i, j: ir.sum(a[i, k] * b[k, j], axis=k), name="C")
    return ir.ComputeDAG([a, b, c])


def conv_schedule(dag, wi: int, ci: int):
    """NHWC conv2d: a register tile of wi output pixels x ci output channels accumulated
    over (rh, rw, rc); the padded input computed once at root."""
    conv, local = "conv2d_nhwc", "conv2d_nhwc.local"
    s = dag.init_state().cache_write(conv)
    s = s.split(conv, "ax2", [wi]).split(conv, "ax3", [ci])
    s = s.reorder(conv, ["ax0", "ax1", "ax3.0", "ax2.0", "ax2.1", "ax3.1"])
    s = s.compute_at(local, conv, "ax2.0")
    s = s.reorder(local, ["ax0", "ax1", "rh", "rw", "rc", "ax2", "ax3"])
    s = s.unroll(local, "ax2").vectorize(local, "ax3")
    s = s.fuse(conv, ["ax0", "ax1", "ax3.0"]).parallel(conv, "ax0@ax1@ax3.0@").vectorize(conv, "ax3.1")
    return s.fuse("pad", ["ax0", "ax1"]).parallel("pad", "ax0@ax1@").vectorize("pad", "ax3")


def softmax_schedule(dag, lanes: int = 16):
    """One row per thread iteration: max and sum as vector partial reductions (rfactor)
    computed inside the row loop, exp computed once per element into a row buffer."""
    s = dag.init_state()
    for red in ("softmax_maxelem", "softmax_expsum"):
        s = s.split(red, "k", [lanes]).rfactor(red, "k.1", 1)
        s = s.reorder(red + ".rf", ["ax0", "k_0", "k_1"]).vectorize(red + ".rf", "k_1")
    s = s.compute_at("softmax_expsum", "softmax", "ax0")
    s = s.compute_at("softmax_expsum.rf", "softmax_expsum", "ax0")
    s = s.compute_at("softmax_exp", "softmax", "ax0")
    s = s.compute_at("softmax_maxelem", "softmax_exp", "ax0")
    s = s.compute_at("softmax_maxelem.rf", "softmax_maxelem", "ax0")
    s = s.vectorize("softmax_exp", "ax1")
    return s.parallel("softmax", "ax0").vectorize("softmax", "ax1")


def measure(kernel, arrays, check, min_ms: float) -> float:
    """Verify once, then the median seconds per call (native timing loop)."""
    kernel(*arrays)
    check()
    return kernel.time(*arrays, number=1, repeat=7, min_repeat_ms=min_ms).median


def best_variant(build_and_time, variants):
    """The fastest of a few tile shapes (a user tries a handful; the tuner tries thousands)."""
    results = [(build_and_time(*v), v) for v in variants]
    return min(results)


def bench_gemm(n: int, rng, min_ms: float, variants, table: common.Table, rows: list):
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    expect = a @ b
    flops = 2 * n ** 3
    numpy_s = common.time_numpy(np.matmul, a, b)
    torch_s = common.time_torch(lambda x, y: x @ y, a, b)
    peak = common.fp32_peak_gflops(os.cpu_count() or 1)
    for rewrite in (True, False):
        dag = gemm_dag(n, rewrite)

        def run(mi, mj, kb):
            kernel = ir.build(dag, gemm_schedule(dag, mi, mj, kb), layout_rewrite=rewrite)
            b_arg = kernel.pack("B", b) if rewrite else b  # packed once, as a user does per weight
            c = np.zeros((n, n), np.float32)
            return measure(kernel, [a, b_arg, c],
                           lambda: np.testing.assert_allclose(c, expect, rtol=1e-3, atol=1e-3 * np.sqrt(n)), min_ms)

        secs, (mi, mj, kb) = best_variant(run, variants)
        ours = common.gflops(flops, secs)
        name = f"GMM-{n} ({'B packed' if rewrite else 'B row-major'})"
        nf, tf = common.gflops(flops, numpy_s), common.gflops(flops, torch_s)
        table.add(name, f"{mi}x{mj} k{kb}", ours, nf, tf, common.ratio(ours, nf), common.ratio(ours, tf),
                  100 * ours / peak)
        rows.append(common.json_row(name, ours, nf, tf, tile=f"{mi}x{mj}x{kb}", pct_peak=100 * ours / peak,
                                    layout_rewrite=rewrite))


def bench_conv(shape, rng, min_ms: float, variants, table: common.Table, rows: list):
    n, h, w, ci, co, k, stride, pad = shape
    wl = ops.workload("conv2d", n, h, w, ci, co, k, stride=stride, padding=pad, layout="NHWC")
    dag = ir.ComputeDAG(wl.tensors)
    inputs = wl.random_inputs(rng)
    expect = wl.reference(inputs)[0]
    peak = common.fp32_peak_gflops(os.cpu_count() or 1)

    def run(wi, cb):
        kernel = ir.build(dag, conv_schedule(dag, wi, cb), layout_rewrite=True)
        out = wl.output_buffers()[0]
        packed = kernel.pack("weight", inputs[1])
        return measure(kernel, [inputs[0], packed, out],
                       lambda: np.testing.assert_allclose(out, expect, rtol=1e-3, atol=1e-3), min_ms)

    secs, (wi, cb) = best_variant(run, variants)
    torch_s = None
    if common.torch_available():
        import torch
        data = torch.from_numpy(inputs[0]).permute(0, 3, 1, 2).contiguous(memory_format=torch.channels_last)
        weight = torch.from_numpy(inputs[1]).permute(3, 2, 0, 1).contiguous(memory_format=torch.channels_last)
        torch_s = common.time_torch(lambda x, y: torch.nn.functional.conv2d(x, y, stride=stride, padding=pad),
                                    data, weight)
    ours, tf = common.gflops(wl.flops, secs), common.gflops(wl.flops, torch_s)
    name = f"conv2d NHWC {h}x{w} {ci}->{co} k{k}"
    table.add(name, f"{wi}x{cb}", ours, None, tf, None, common.ratio(ours, tf), 100 * ours / peak)
    rows.append(common.json_row(name, ours, None, tf, tile=f"{wi}x{cb}", pct_peak=100 * ours / peak))


def bench_softmax(rows_n: int, cols: int, rng, min_ms: float, table: common.Table, rows: list):
    wl = ops.workload("softmax", (rows_n, cols))
    dag = ir.ComputeDAG(wl.tensors)
    kernel = ir.build(dag, softmax_schedule(dag))
    inputs = wl.random_inputs(rng)
    out = wl.output_buffers()[0]
    expect = wl.reference(inputs)[0]
    secs = measure(kernel, [inputs[0], out],
                   lambda: np.testing.assert_allclose(out, expect, rtol=1e-5, atol=1e-7), min_ms)
    x = inputs[0]

    def np_softmax(v):
        e = np.exp(v - v.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    numpy_s = common.time_numpy(np_softmax, x)
    torch_s = None
    if common.torch_available():
        import torch
        torch_s = common.time_torch(lambda v: torch.softmax(v, dim=-1), x)
    flops = wl.flops
    ours, nf, tf = (common.gflops(flops, s) for s in (secs, numpy_s, torch_s))
    name = f"softmax {rows_n}x{cols}"
    table.add(name, "-", ours, nf, tf, common.ratio(ours, nf), common.ratio(ours, tf), None)
    rows.append(common.json_row(name, ours, nf, tf, ms=secs * 1e3, torch_ms=None if torch_s is None else torch_s * 1e3))


def compile_time_of_tiled_gemm(n: int, repeats: int) -> dict:
    """Median seconds of each phase of building one tiled, annotated GMM program."""
    dag = gemm_dag(n, True)
    phases = {"schedule": [], "lower": [], "codegen": [], "llvm_O3_and_jit": []}
    for _ in range(repeats):
        t0 = time.perf_counter()
        state = gemm_schedule(dag, 4, 64, 256)
        t1 = time.perf_counter()
        lowered = ir.lower(state, "gemm", layout_rewrite=True)
        t2 = time.perf_counter()
        text = ir.cpu.codegen.generate(lowered, "gemm")
        t3 = time.perf_counter()
        ir.cpu.runtime.CompiledModule(text, "gemm")
        t4 = time.perf_counter()
        for key, dt in zip(phases, (t1 - t0, t2 - t1, t3 - t2, t4 - t3)):
            phases[key].append(dt)
    return {k: statistics.median(v) for k, v in phases.items()}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, parents=[common.bench_args()],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    rows: list[dict] = []
    table = common.Table(["workload", "tile", "ours GFLOPS", "numpy", "torch", "vs numpy", "vs torch", "% peak"])
    if args.smoke:
        min_ms = 5
        bench_gemm(128, rng, min_ms, [(4, 32, 32)], table, rows)
        bench_conv((1, 14, 14, 16, 32, 3, 1, 1), rng, min_ms, [(7, 32)], table, rows)
        bench_softmax(16, 256, rng, min_ms, table, rows)
        compile_s = compile_time_of_tiled_gemm(128, 2)
    else:
        min_ms = 100
        bench_gemm(1024, rng, min_ms, [(4, 64, 256), (8, 32, 256), (6, 64, 256), (4, 48, 256)], table, rows)
        bench_conv((1, 56, 56, 64, 64, 3, 1, 1), rng, min_ms, [(4, 64), (7, 32), (8, 32), (14, 16)], table, rows)
        bench_softmax(256, 4096, rng, min_ms, table, rows)
        compile_s = compile_time_of_tiled_gemm(1024, 7)
    peak = common.fp32_peak_gflops(os.cpu_count() or 1)
    total_ms = 1e3 * sum(compile_s.values())
    if not args.json_only:
        table.print()
        print(f"\nfp32 peak of this machine ({os.cpu_count()} threads, own FMA microkernel): {peak:.0f} GFLOPS")
        print("lower+compile one tiled, annotated GMM program (median): "
              + ", ".join(f"{k} {1e3 * v:.1f} ms" for k, v in compile_s.items()) + f"; total {total_ms:.1f} ms")
    rows.append(common.json_row("compile tiled GMM", compile_ms=total_ms,
                                **{f"{k}_ms": 1e3 * v for k, v in compile_s.items()}))
    common.emit_json("handwritten", rows)


if __name__ == "__main__":
    main()
