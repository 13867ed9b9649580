"""Cold first reads (``evolution.cold_reads``): which programs wait for memory in a network."""
import numpy as np
import pytest

import ir
from evolution import cold_reads as C


def test_streams_and_strides_are_prefetched():
    ascending = np.arange(1000)
    assert C._unprefetched(ascending) <= 1
    descending = ascending[::-1].copy()
    assert C._unprefetched(descending) <= 2
    strided = np.arange(0, 192 * 500, 192)        # one line every 12 KB (ViT's dense input walk)
    assert C._unprefetched(strided) <= 2


def test_interleaved_walk_that_comes_back_late_waits():
    # 64 rows 4 KB apart, two lines of each (no constant stride), then the next two lines of
    # every row: each row's next line comes 128 new lines after its neighbour, past the lookback
    rows, passes = 64, 8
    lines = np.array([r * 64 + p * 2 + j for p in range(passes) for r in range(rows) for j in range(2)])
    misses = C._unprefetched(lines)
    assert misses >= rows * passes - 1
    # the same lines row by row are one stream per row
    assert C._unprefetched(np.sort(lines)) <= rows


def test_repeated_lines_count_once():
    lines = np.repeat(np.arange(100), 5)
    assert C._unprefetched(lines) == C._unprefetched(np.arange(100))


def matmul(n, m, k):
    A = ir.placeholder((n, k), name="A")
    B = ir.placeholder((k, m), name="B", constant=True)
    r = ir.reduce_axis(k, name="k")
    Cm = ir.compute((n, m), lambda i, j: ir.sum(A[i, r] * B[r, j], axis=r), name="C")
    return ir.ComputeDAG([A, B, Cm])


def row_walk(dag):
    """i, j, k: A read along its rows, one stream."""
    return dag.init_state().vectorize("C", "j")


def two_line_walk(dag):
    """For each 32 columns of A (two lines), every row: ResNet-50's walk."""
    return dag.init_state().split("C", "k", [32]).reorder("C", ["j", "k.0", "i", "k.1"])


def test_walk_that_returns_to_each_row_misses_row_walk_does_not():
    dag = matmul(512, 16, 1024)                   # A: 2 MB, rows of 4 KB
    by_rows = C.first_read_misses(row_walk(dag), {"A"}, threads=1)
    by_pairs = C.first_read_misses(two_line_walk(dag), {"A"}, threads=1)
    assert by_rows <= 512
    assert by_pairs >= 20 * by_rows
    assert C.first_read_misses(row_walk(dag), set(), threads=1) == 0


def test_parallel_threads_count_their_own_share():
    dag = matmul(512, 16, 1024)
    by_rows = two_line_walk(dag).parallel("C", "j")      # j does not move A: each thread walks all of it
    one = C.first_read_misses(by_rows, {"A"}, threads=1)
    assert C.first_read_misses(by_rows, {"A"}, threads=2) == pytest.approx(one)
    split = dag.init_state().split("C", "k", [32]).reorder("C", ["i", "j", "k.0", "k.1"]).parallel("C", "i")
    assert C.first_read_misses(split, {"A"}, threads=2) <= C.first_read_misses(split, {"A"}, threads=1) / 2 + 1


def test_cold_tensors_are_weights_and_large_inputs_of_reductions():
    data = ir.placeholder((1, 64, 64, 64), name="data")        # 1 MB
    weight = ir.placeholder((64, 64), name="weight", constant=True)
    residual = ir.placeholder((1, 64, 64, 64), name="residual")
    r = ir.reduce_axis(64, name="rc")
    conv = ir.compute((1, 64, 64, 64), lambda n, h, w, c: ir.sum(data[n, h, w, r] * weight[r, c], axis=r),
                      name="conv")
    out = ir.compute((1, 64, 64, 64), lambda n, h, w, c: conv[n, h, w, c] + residual[n, h, w, c], name="add")
    dag = ir.ComputeDAG([data, weight, residual, conv, out])
    assert C.cold_tensors(dag, cache_bytes=512 << 10) == {"data", "weight"}
    assert C.cold_tensors(dag, cache_bytes=2 << 20) == {"weight"}


def cold_task():
    dag = matmul(512, 48, 1024)         # its arithmetic outlasts streaming its 2.3 MB
    task = ir.SearchTask(dag, layout_rewrite=False)
    if "A" not in C.cold_tensors(dag):
        pytest.skip(f"this CPU's L2 ({C.l2_bytes()} bytes) holds the 2 MB input: none of it comes from memory")
    return dag, task


def middling_walk(dag, task):
    """A walk whose misses cost between the two budgets: ``two_line_walk`` with more lines
    of each row a visit (fewer returns to a row, so fewer misses)."""
    warm = C.warm_seconds(dag, task.hardware)
    for columns in (64, 96, 128, 256, 512):
        state = dag.init_state().split("C", "k", [columns]).reorder("C", ["j", "k.0", "i", "k.1"])
        share = C.MISS_SECONDS * C.first_read_misses(state, {"A"}, task.hardware.num_cores) / warm
        if C.REPLACEMENT_BUDGET < share <= C.MISS_BUDGET:
            return state
    pytest.skip("no visit length puts the walk between the budgets on this CPU")


def test_prefer_prefetched_looks_past_a_walk_over_budget():
    dag, task = cold_task()
    walks, streams = two_line_walk(dag), row_walk(dag)
    warm = C.warm_seconds(dag, task.hardware)
    cores = task.hardware.num_cores
    assert C.MISS_SECONDS * C.first_read_misses(walks, {"A"}, cores) > C.MISS_BUDGET * warm
    assert C.MISS_SECONDS * C.first_read_misses(streams, {"A"}, cores) <= C.REPLACEMENT_BUDGET * warm
    assert C.prefer_prefetched(task, [walks, streams], [1.0, 0.5]) == 1
    assert C.prefer_prefetched(task, [walks, walks, streams], [1.0, 0.9, 0.8]) == 2
    # a replacement within the trigger but over the replacement's budget gives way to a cheaper one
    middling = middling_walk(dag, task)
    assert C.prefer_prefetched(task, [walks, middling, streams], [1.0, 0.9, 0.8]) == 2
    assert C.prefer_prefetched(task, [walks, middling, walks], [1.0, 0.9, 0.8]) == 1
    # the model's first is kept when it is within budget, whatever the others save
    assert C.prefer_prefetched(task, [streams, walks], [1.0, 0.99]) == 0
    # and when nothing is within budget
    assert C.prefer_prefetched(task, [walks, walks], [1.0, 0.99]) == 0
    # a program the model scores at zero or below is never the pick
    assert C.prefer_prefetched(task, [walks, streams], [1.0, -0.1]) == 0


def test_prefer_prefetched_keeps_the_first_of_a_task_bound_by_memory():
    dag = matmul(512, 16, 1024)         # 2.2 MB streamed for 17 Mflop
    task = ir.SearchTask(dag, layout_rewrite=False)
    arithmetic, memory = C.roofline_seconds(dag, task.hardware)
    assert arithmetic < memory
    assert C.prefer_prefetched(task, [two_line_walk(dag), row_walk(dag)], [1.0, 0.9]) == 0


def test_prefer_prefetched_leaves_gpu_tasks_and_warm_tasks_alone():
    dag = matmul(512, 16, 1024)
    gpu = ir.SearchTask(dag, target="cuda", layout_rewrite=False)     # (the documented device without one)
    assert C.prefer_prefetched(gpu, [two_line_walk(dag), row_walk(dag)], [1.0, 0.9]) == 0
    small = matmul(8, 16, 32)
    assert C.prefer_prefetched(ir.SearchTask(small, layout_rewrite=False), [small.init_state()], [1.0]) == 0


def test_a_program_that_does_not_lower_is_never_the_replacement(monkeypatch):
    from ir.lower import LoweringError
    dag, task = cold_task()
    walks, streams, broken = two_line_walk(dag), row_walk(dag), row_walk(dag)
    counted = C.first_read_misses

    def misses(state, *args, **kwargs):
        if state is broken:
            raise LoweringError("cannot lower this one")
        return counted(state, *args, **kwargs)

    monkeypatch.setattr(C, "first_read_misses", misses)
    assert C.prefer_prefetched(task, [walks, broken, streams], [1.0, 0.9, 0.8]) == 2
    assert C.prefer_prefetched(task, [broken, streams], [1.0, 0.9]) == 0
