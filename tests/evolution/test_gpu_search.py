"""The search on a GPU task: features with thread bindings, the GPU mutations, and a
search policy that proposes only programs the device can run."""
import numpy as np
import pytest

import ir
import sketch_rules as SR
from autosched import ops
from evolution import Evolution, RandomModel, SearchParams, SketchPolicy, feature_dict, program_features
from evolution.genes import sketch_length
from evolution.mutation import mutations_for
from ir.cuda.lower import block_limits_violation
from sketch_rules.annotation import AUTO_UNROLL_CHOICES_GPU


@pytest.fixture(scope="module")
def gmm():
    task = ir.SearchTask(ir.ComputeDAG(ops.suite_workload("GMM-1x512x512x512").tensors), target="cuda",
                         hardware=ir.HardwareParams.cuda())
    sketches = SR.generate_sketches(task)
    return task, sketches, SR.sample_programs(task, sketches, 16, np.random.default_rng(0))


def test_gpu_features_give_the_thread_bindings(gmm):
    task, _, programs = gmm
    s = programs[0]
    root = s["batch_matmul"]
    blocks, vthreads, threads = (it.extent for it in root.iters[:3])
    rows = [feature_dict(r) for r in program_features(task, s)]
    assert rows and all(r["is_gpu"] == 1 for r in rows)
    update = max(rows, key=lambda r: r["float_mad"])  # the multiply-add of the register tile
    slog = lambda x: float(np.log2(x + 1))  # noqa: E731
    assert update["blockIdx_x_len"] == pytest.approx(slog(blocks))
    assert update["vthread_len"] == pytest.approx(slog(vthreads))
    assert update["threadIdx_x_len"] == pytest.approx(slog(threads))
    assert update["threadIdx_y_len"] == 0 and update["blockIdx_z_len"] == 0
    cpu = ir.SearchTask(task.dag)
    cpu_rows = program_features(cpu, cpu.dag.init_state())
    assert (cpu_rows[:, list(feature_dict(cpu_rows[0])).index("is_gpu")] == 0).all()


def test_a_program_over_the_limits_has_no_features(gmm):
    task, _, programs = gmm
    from dataclasses import replace
    tiny = replace(task.hardware, max_threads_per_block=16)
    small_task = ir.SearchTask(task.dag, target="cuda", hardware=tiny)
    assert program_features(small_task, programs[0]).shape[0] == 0  # scored lowest


def test_gpu_mutations_keep_programs_within_the_limits(gmm):
    task, sketches, programs = gmm
    assert [(m.name, m.weight) for m in mutations_for(task)] == [("tile_size", 0.90), ("auto_unroll", 0.10)]
    evolution = Evolution(task, RandomModel(), SearchParams(), sketches, np.random.default_rng(3))
    made = [evolution._mutate(p, sketch_length(p, sketches), 64) for p in programs * 4]
    children = [c for c in made if c is not None and evolution.runs_on_target(c)]
    assert len(children) > 20
    assert all(block_limits_violation(c, task.hardware) is None for c in children)
    unrolls = {s.auto_unroll_max_step for c in children for s in c.steps if type(s).__name__ == "PragmaStep"}
    assert unrolls <= set(AUTO_UNROLL_CHOICES_GPU) and 1024 in AUTO_UNROLL_CHOICES_GPU
    wrong = Evolution(task, RandomModel(), SearchParams(mutation_weights={"parallel": 1.0}), sketches,
                      np.random.default_rng(0))
    with pytest.raises(ValueError, match="name none of this search space's mutations"):
        wrong._mutate(programs[0], sketch_length(programs[0], sketches), 64)
    for weights, message in [({"tile_sizes": 1.0}, "unknown mutation 'tile_sizes'"),   # refused before any tuning
                             ({"tile_size": 0.0}, "positive sum")]:
        with pytest.raises(ValueError, match=message):
            SearchParams(mutation_weights=weights)


def test_the_policy_of_a_gpu_task_drops_children_the_device_cannot_run():
    task = ir.SearchTask(ir.ComputeDAG(ops.suite_workload("GMM-1x128x128x128").tensors), target="cuda",
                         hardware=ir.HardwareParams.cuda())
    policy = SketchPolicy(task, RandomModel(seed=0), SearchParams(population=64, generations=1, islands=1), seed=0)
    population = policy.sample_initial()
    over = task.dag.init_state().split("batch_matmul", "ax1", [32]).fuse("batch_matmul", ["ax1.1", "ax2"])
    over = over.apply(ir.steps.AnnotationStep(over.stage_index("batch_matmul"), 2, "threadIdx.x"))  # 4096 threads
    assert block_limits_violation(over, task.hardware) is not None
    assert not policy.evolution.runs_on_target(over)  # a child like it is dropped...
    assert all(policy.evolution.runs_on_target(s) for s in population)
    for state in policy.evolve(population, 16):  # ...so that evolution never proposes one
        assert block_limits_violation(state, task.hardware) is None
