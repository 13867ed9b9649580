"""``torch.compile(model, backend="autosched")`` against eager PyTorch, in one run.

For each model (bench/onnx_models.py's MobileNet-V2 and BERT-base, written in PyTorch) this
compiles the module with the autosched backend (zero-trial programs, or default schedules
with ``--base-model none``) and reports the seconds the first call took (capture, export,
import, programs, kernels), the latency of later calls beside eager PyTorch's (both on every
core), the largest error relative to PyTorch's output, how many graphs Dynamo handed over
and how many of them fell back to eager. With ``--second-batch N`` it then calls the model
at batch N as well and reports what that new shape cost.

    python bench/torch_compile.py [--models mobilenet_v2,bert] [--base-model none] [--smoke]
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import onnx_models  # noqa: E402

MODELS = ("mobilenet_v2", "bert")


def _batch(example: tuple, batch: int, torch) -> tuple:
    """The example inputs at batch ``batch`` (the same values repeated)."""
    return tuple(torch.cat([x] * batch) for x in example)


def bench_model(name: str, smoke: bool, base_model, second_batch: int | None) -> dict:
    import torch
    from autosched import torch_backend
    src = onnx_models.load(name, smoke=smoke)
    module, example = src.torch_module.eval(), src.example
    made = []

    def backend(gm, example_inputs, **kwargs):
        compiled = torch_backend.autosched_backend(gm, example_inputs, **kwargs)
        made.append(isinstance(compiled, torch_backend.CompiledGraph))
        return compiled

    torch._dynamo.reset()
    compiled = torch.compile(module, backend=backend, options={"base_model": base_model, "warn_untuned": False})
    with torch.no_grad():
        want = module(*example)
        t0 = time.perf_counter()
        got = compiled(*example)
        compile_s = time.perf_counter() - t0
    err = float((got - want).abs().max() / want.abs().max())
    ours = common.time_torch(compiled, *example)
    eager = common.time_torch(module, *example)
    row = common.json_row(name, compile_s=compile_s, autosched_ms=1e3 * ours, torch_ms=1e3 * eager,
                          vs_torch=eager / ours, max_rel_error=err, graphs=len(made),
                          eager_fallbacks=made.count(False))
    if second_batch:
        bigger = _batch(example, second_batch, torch)
        with torch.no_grad():
            t0 = time.perf_counter()
            got = compiled(*bigger)
            row["second_shape_s"] = time.perf_counter() - t0
            want = module(*bigger)
        row["second_shape_rel_error"] = float((got - want).abs().max() / want.abs().max())
        row["second_batch"] = second_batch
    return row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], parents=[common.bench_args()])
    parser.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, from {', '.join(MODELS)}")
    parser.add_argument("--base-model", default="default", choices=["default", "none"],
                        help="untuned tasks run the base model's zero-trial programs (default) or default schedules")
    parser.add_argument("--second-batch", type=int, default=4, help="then run at this batch too (0: do not)")
    args = parser.parse_args(argv)
    if not common.torch_available():
        print("bench/torch_compile.py needs PyTorch", file=sys.stderr)
        return 2
    names = [m for m in args.models.split(",") if m]
    unknown = [m for m in names if m not in MODELS]
    if unknown:
        parser.error(f"unknown models {unknown}; expected some of {', '.join(MODELS)}")
    rows = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")           # the exporters' deprecation and tracer warnings
        for name in names:
            rows.append(bench_model(name, args.smoke, None if args.base_model == "none" else "default",
                                    args.second_batch or None))
    if not args.json_only:
        table = common.Table(["model", "first call s", "autosched ms", "PyTorch ms", "vs PyTorch", "rel error",
                              "graphs", "eager", "new shape s"])
        for r in rows:
            table.add(r["workload"], r["compile_s"], r["autosched_ms"], r["torch_ms"], r["vs_torch"],
                      f"{r['max_rel_error']:.1e}", r["graphs"], r["eager_fallbacks"], r.get("second_shape_s"))
        print(table.render())
    common.emit_json("torch_compile", rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
