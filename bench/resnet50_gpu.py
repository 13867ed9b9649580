"""ResNet-50 end to end on an NVIDIA GPU: autosched tuned for the cuda target beside PyTorch
CUDA (float32, TF32 off and on), all timed in this run.

    python bench/resnet50_gpu.py --trials 2000 [--log-file resnet50.cuda.jsonl]
    python bench/resnet50_gpu.py --minutes 4      # as many trials as 4 minutes allow
    python bench/resnet50_gpu.py --smoke          # 64x64 images, a few trials

The zoo's ResNet-50 (NHWC, random weights from ``--seed``) is partitioned and tuned with
``autosched.tune_networks(..., target="cuda")``; the tuned network runs from its kernels on
the device (``GraphExecutor(target="cuda")``: weights uploaded once, launches only in a
timed run), is checked against the numpy reference of the whole network and is timed end to
end (synchronised wall time per run, median of ``--repeat``). PyTorch runs torchvision's
ResNet-50 (same architecture, its own random weights: only its time counts) on the same
device with cuDNN choosing its algorithms, timed with CUDA events, once with TF32 off
(the same float32 arithmetic as ours) and once with TF32 on (tensor cores).

It needs a GPU: on a machine without one (or without cuda-python) it says so on stderr,
prints its JSON line with the reason and exits with status 2; nothing is tuned.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import bench_args, emit_json, gflops, json_row, time_cuda, torch_cuda, torch_cuda_events  # noqa: E402,E501
from torch_models import import_torchvision  # noqa: E402

import autosched  # noqa: E402
import ir  # noqa: E402
from autosched import graph as G  # noqa: E402
from evolution import SearchParams  # noqa: E402

BENCH = "resnet50_gpu"


def torchvision_resnet50():
    """torchvision's ResNet-50 (random weights); None without torchvision."""
    try:
        torchvision = import_torchvision()
    except ImportError:
        return None
    return torchvision.models.resnet50(weights=None)


def torch_cuda_seconds(batch: int, image_size: int, tf32: bool) -> float | None:
    """Seconds per ResNet-50 inference of PyTorch on the GPU (None without CUDA PyTorch)."""
    torch = torch_cuda(tf32)
    if torch is None:
        return None
    model = torchvision_resnet50()
    if model is None:
        return None
    model = model.cuda().eval()
    x = torch.randn(batch, 3, image_size, image_size, device="cuda")
    with torch.no_grad():
        return time_cuda(lambda: model(x), torch.cuda.synchronize, torch_cuda_events(torch))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0], parents=[bench_args()])
    parser.add_argument("--trials", type=int, default=None,
                        help="measurements in all (default: 20 per task; with --minutes: what the minutes allow)")
    parser.add_argument("--minutes", type=float, default=None,
                        help="tune for about this many minutes (the rounds that fit; a time on a lent GPU is short)")
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--population", type=int, default=1024, help="evolution population (Ansor: 2048)")
    parser.add_argument("--log-file", default=None, help="tuning log, resumed (default: a temporary file)")
    parser.add_argument("--repeat", type=int, default=10, help="end-to-end timing repeats")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.minutes is not None and not 0 < args.minutes < float("inf"):
        parser.error(f"--minutes must be a number > 0 (finite), got {args.minutes}")
    target = ir.Target.parse("cuda")
    try:
        target.backend.require_device(target)
    except ir.NoCudaDevice as err:
        print(f"{BENCH}: this benchmark runs on an NVIDIA GPU and this machine has none: {err}", file=sys.stderr)
        emit_json(BENCH, [json_row("resnet50", error=f"no GPU: {err}")])
        return 2
    image = 64 if args.smoke else args.image_size
    part = autosched.networks.as_partitioned(G.get_network("resnet50", batch=args.batch_size, seed=args.seed,
                                                           image_size=image))
    if args.trials is not None:
        trials = args.trials
    elif args.minutes is not None:
        trials = 1_000_000     # the time budget ends the tuning
    else:
        trials = len(part.tasks) if args.smoke else 20 * len(part.tasks)
    seconds = {}     # wall seconds of each stage: the row says where a run's time went
    started = time.perf_counter()

    def stage(name):
        nonlocal started
        seconds[f"{name}_s"] = round(time.perf_counter() - started, 2)
        started = time.perf_counter()
        if not args.json_only:
            print(f"# {name}: {seconds[f'{name}_s']} s", file=sys.stderr, flush=True)

    with tempfile.TemporaryDirectory() as scratch:
        log = args.log_file or os.path.join(scratch, "resnet50.cuda.jsonl")
        result = autosched.tune_networks(part, trials=trials, target=target, log_file=log, seed=args.seed,
                                         measure_batch=16, verbose=0 if args.json_only else 1,
                                         time_budget_s=None if args.minutes is None else 60 * args.minutes,
                                         search_params=SearchParams(population=64 if args.smoke else args.population))
    stage("tune")
    executor = result.executor(0, warn_untuned=False)
    stage("build")
    ok, err = executor.verify()
    stage("verify")
    ours = executor.benchmark(repeat=args.repeat, min_repeat_ms=50)["median"]
    stage("time")
    flops = sum(w.weight * w.flops for w in part.workloads)
    torch_fp32 = torch_cuda_seconds(args.batch_size, image, tf32=False)
    torch_tf32 = torch_cuda_seconds(args.batch_size, image, tf32=True)
    stage("torch")
    row = json_row("resnet50", gflops(flops, ours), None, gflops(flops, torch_fp32), target=str(target),
                   batch=args.batch_size, image_size=image, trials=result.trials, verified=ok, max_rel_error=err,
                   latency_ms=1e3 * ours, torch_fp32_ms=torch_fp32 and 1e3 * torch_fp32,
                   torch_tf32_ms=torch_tf32 and 1e3 * torch_tf32,
                   vs_torch_tf32=torch_tf32 / ours if torch_tf32 else None,
                   untuned_tasks=len(executor.untuned), **seconds)
    if not args.json_only:
        def ms(seconds):
            return f"{1e3 * seconds:.3f} ms" if seconds else "-"
        print(f"# ResNet-50 batch {args.batch_size}, {image}x{image}, {target}: autosched {ms(ours)} "
              f"(verified: {'OK' if ok else 'WRONG'}, {result.trials} trials); PyTorch CUDA fp32 {ms(torch_fp32)}, "
              f"TF32 {ms(torch_tf32)}")
    emit_json(BENCH, [row])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
