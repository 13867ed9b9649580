"""Winograd against the direct convolution on ResNet-50's 3x3 stride-1 layers, tuned alike.

    python bench/winograd.py --trials 64               # 56x56x64, 28x28x128, 14x14x256, 7x7x512
    python bench/winograd.py --trials 64 --layers 14x256
    python bench/winograd.py --trials 64 --tile 4      # F(4x4, 3x3) instead of F(2x2, 3x3)

Each layer (NHWC, bias and ReLU fused, as the network's tasks are) is tuned twice with the
same trials and seed: once as ``ops.conv2d`` and once as ``ops.conv2d_winograd`` on the
transformed weight (F(m×m, 3×3), m = ``--tile``). Both winners are then checked against
numpy and re-timed in turns in this process with PyTorch's conv2d (one thread per core)
where installed: the fastest of ``--rounds`` turns each, weights warm. GFLOPS are the
direct convolution's for all three.
The JSON rows carry ``tile``, ``direct_gflops``, ``winograd_gflops``, ``speedup``,
``direct_tuning_s`` and ``winograd_tuning_s`` (null where a tuning found no valid program).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (Table, bench_args, emit_json, fastest_in_turns, gflops, json_row, ratio,  # noqa: E402
                    time_torch, torch_available)

import autosched  # noqa: E402
import ir  # noqa: E402
from autosched import ops  # noqa: E402
from autosched.ops import reference as R  # noqa: E402
from autosched.ops import winograd as W  # noqa: E402

#: ResNet-50's 3x3 stride-1 layers: (spatial size, channels)
LAYERS = ((56, 64), (28, 128), (14, 256), (7, 512))


def layer_dag(size: int, channels: int, winograd: bool, tile: int = 2) -> ir.ComputeDAG:
    """A 3x3 stride-1 convolution with bias and ReLU, direct or by Winograd's F(tile x tile, 3x3)."""
    x = ir.placeholder((1, size, size, channels), name="data")
    if winograd:
        w = ir.placeholder(((tile + 2) ** 2, channels, channels), name="weight", constant=True)
        y = W.conv2d_winograd(x, w, padding=1, tile=tile)
    else:
        w = ir.placeholder((3, 3, channels, channels), name="weight", constant=True)
        y = ops.conv2d(x, w, 1, 1)
    b = ir.placeholder((channels,), name="bias", constant=True)
    return ir.ComputeDAG([x, w, b, ops.relu(ops.bias_add(y, b))])


def reference(x, w, b) -> np.ndarray:
    """The layer in float64 numpy: the direct convolution, bias, ReLU."""
    return np.maximum(R.conv(x, w, (1, 1), (1, 1), (1, 1), 1, True) + b, 0.0)


def _timer(kernel, arrays, want):
    """Check ``kernel`` on ``arrays`` against ``want``, then a timer of one call."""
    args = [kernel.pack(name, a) if name in kernel.layouts else a for name, a in arrays]
    out = np.zeros(want.shape, np.float32)
    kernel(*args, out)
    np.testing.assert_allclose(out, want, rtol=1e-3, atol=1e-3 * np.abs(want).max())
    return lambda: kernel.time(*args, out, number=1, repeat=5, min_repeat_ms=50).median


def _torch_conv(x, w, b):
    """A timer of PyTorch's conv2d + ReLU on the same layer (NCHW), or None without PyTorch."""
    if not torch_available():
        return None
    import torch
    xt, wt = np.ascontiguousarray(x.transpose(0, 3, 1, 2)), np.ascontiguousarray(w.transpose(3, 2, 0, 1))
    return lambda: time_torch(lambda a, k, c: torch.relu(torch.nn.functional.conv2d(a, k, c, padding=1)), xt, wt, b)


def run(args) -> list[dict]:
    rng = np.random.default_rng(args.seed)
    rows, table = [], Table(["layer", "trials", "direct GFLOPS", "winograd GFLOPS", "speedup", "torch GFLOPS",
                             "direct s", "winograd s"])
    for size, channels in args.layers:
        name = f"{size}x{size}x{channels}"
        x = rng.standard_normal((1, size, size, channels)).astype(np.float32)
        w = (rng.standard_normal((3, 3, channels, channels)) / np.sqrt(9 * channels)).astype(np.float32)
        b = rng.standard_normal(channels).astype(np.float32)
        want = reference(x, w, b)
        flops = 2 * size * size * channels * channels * 9
        timers, seconds = {}, {}
        for kind in ("direct", "winograd"):
            dag = layer_dag(size, channels, kind == "winograd", args.tile)
            log = os.path.join(args.log_dir, f"{name}.{kind}.json") if args.log_dir else None
            t0 = time.perf_counter()
            result = autosched.auto_schedule(dag, trials=args.trials, measure_batch=args.measure_batch, log_file=log,
                                             seed=args.seed, verbose=0)
            seconds[kind] = time.perf_counter() - t0
            if result.kernel is None:
                print(f"# {name}: the {kind} tuning found no valid program", file=sys.stderr)
                timers[kind] = lambda: None
                continue
            weight = W.winograd_weight(w, args.tile) if kind == "winograd" else w
            timers[kind] = _timer(result.kernel, [("data", x), ("weight", weight), ("bias", b)], want)
        torch_timer = _torch_conv(x, w, b)
        if torch_timer is not None:
            timers["torch"] = torch_timer
        best = fastest_in_turns(timers, args.rounds)
        row = json_row(name, ours_gflops=gflops(flops, best["winograd"]), torch_gflops=gflops(flops, best.get("torch")),
                       trials=args.trials, tile=args.tile,
                       direct_gflops=gflops(flops, best["direct"]), winograd_gflops=gflops(flops, best["winograd"]),
                       speedup=ratio(best["direct"], best["winograd"]), direct_tuning_s=seconds["direct"],
                       winograd_tuning_s=seconds["winograd"])
        rows.append(row)
        table.add(name, args.trials, row["direct_gflops"], row["winograd_gflops"], row["speedup"],
                  row["torch_gflops"], seconds["direct"], seconds["winograd"])
        if not args.json_only and row["speedup"] is not None:
            print(f"# {name}: direct {row['direct_gflops']:.1f}, winograd {row['winograd_gflops']:.1f} GFLOPS "
                  f"({row['speedup']:.2f}x)", flush=True)
    if not args.json_only:
        table.print()
    return rows


def _layer(text: str) -> tuple[int, int]:
    try:
        size, channels = (int(v) for v in text.split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"a layer is SIZExCHANNELS, e.g. 14x256; got {text!r}") from None
    return size, channels


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0], parents=[bench_args()])
    parser.add_argument("--trials", type=int, default=64)
    parser.add_argument("--layers", type=_layer, nargs="+", default=list(LAYERS), metavar="SIZExCHANNELS")
    parser.add_argument("--tile", type=int, choices=W.TILE_SIZES, default=2,
                        help="Winograd's output tile m of F(m x m, 3x3) (default 2)")
    parser.add_argument("--measure-batch", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3, help="turns of re-timing; the fastest of each is kept")
    parser.add_argument("--log-dir", default=None, help="keep the tuning logs here (default: none)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.smoke:
        args.trials, args.layers, args.measure_batch, args.rounds = 4, [(6, 16)], 2, 1
    with tempfile.TemporaryDirectory() as tmp:
        args.log_dir = args.log_dir or tmp
        rows = run(args)
    emit_json("winograd", rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
