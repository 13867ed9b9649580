"""bench/tune_ops.py's bookkeeping: a tuning's curve read back from its log and the best
after n trials (bench/vs_metaschedule.py compares checkpoints with MetaSchedule by them)."""
from __future__ import annotations

import collections

import pytest

import ir
from autosched import ops
from autosched.history.records import TuningRecord, save_records

from .test_bench_common import _load

tune_ops = _load("tune_ops")


def _task():
    a, b = ir.placeholder((8, 8), name="A"), ir.placeholder((8, 8), name="B")
    return ir.SearchTask(ir.ComputeDAG([a, b, ops.matmul(a, b)]))


def test_history_and_curve_from_a_log(tmp_path):
    task = _task()
    flops = task.dag.flop_count()
    costs = [4e-6, None, 2e-6, 3e-6, 1e-6]  # None: a failed measurement
    records = [TuningRecord(task.workload_key, "llvm", (), (c,) if c else (1e10,), error_no=0 if c else 7,
                            all_cost=0.5, timestamp=100.0 + i) for i, c in enumerate(costs)]
    records.insert(2, TuningRecord("another-workload", "llvm", (), (1e-9,), all_cost=0.5, timestamp=101.5))
    log = tmp_path / "log.json"
    save_records(log, records)
    history = tune_ops.history_from_log(str(log), task)
    assert [n for n, _, _ in history] == [1, 2, 3, 4, 5]  # the other workload is not counted
    assert [g for _, g, _ in history] == pytest.approx([flops / c / 1e9 for c in (4e-6, 4e-6, 2e-6, 2e-6, 1e-6)])
    assert [t for _, _, t in history] == pytest.approx([0.5, 1.5, 2.5, 3.5, 4.5])  # from the first start
    assert tune_ops.curve_from_log(str(log), task, trials=4, batch=2) == \
        [(2, pytest.approx(flops / 4e-6 / 1e9)), (4, pytest.approx(flops / 2e-6 / 1e9))]
    assert tune_ops.at_trials(history, 3) == (pytest.approx(flops / 2e-6 / 1e9), pytest.approx(2.5))
    assert tune_ops.at_trials(history, 6) == (None, None)  # tuning stopped before
    assert tune_ops.best_record_at(str(log), task, 2).mean_cost == pytest.approx(4e-6)
    assert tune_ops.best_record_at(str(log), task, 4).mean_cost == pytest.approx(2e-6)
    assert tune_ops.best_record_at(str(log), task, 6) is None


#: when the AVX2 picks rounds of the training logs began (2026-11-27 00:00 UTC)
AVX2_PICKS_FROM = 1795737600.0
#: when the AVX2 tunings of the model-family workloads began (2026-11-27 10:00 UTC)
AVX2_TUNINGS_FROM = 1795773600.0
#: the workloads outside the model families that were tuned on AVX2 then too
AVX2_TUNED_TOO = ("conv_residual-1x14x14x192x768-k1", "conv_residual-1x28x28x96x384-k1",
                  "conv_residual-1x56x56x48x192-k1", "winograd-1x14x14x192x192", "winograd-1x28x28x96x96",
                  "winograd-1x7x7x384x384", "T2D-1x16x16x64x32-k4s2p1", "T2D-1x4x4x256x128-k4s2p1",
                  "T2D-1x8x8x128x64-k4s2p1")


def test_the_ablations_records_database_holds_the_training_logs(tmp_path):
    from autosched.history.base_model import AVX512_ONLY_TRAINING, MODEL_FAMILY_OPERATORS, training_workloads
    from autosched.history.database import RecordsDB
    path = tune_ops.training_records_db(str(tmp_path))
    records = RecordsDB(path).read()
    workloads = training_workloads()
    assert AVX512_ONLY_TRAINING <= set(MODEL_FAMILY_OPERATORS)   # (their logs: the AVX-512 archive's test)
    keys = {ir.ComputeDAG(w.tensors).workload_key() for label, w in workloads.items()
            if label not in AVX512_ONLY_TRAINING}
    family_keys = {ir.ComputeDAG(workloads[label].tensors).workload_key() for label in MODEL_FAMILY_OPERATORS
                   if label not in AVX512_ONLY_TRAINING}
    logged = {r.workload_key for r in records}
    programs = [r for r in records if not r.retimed]
    # from 2026-11-27 on, the Zen 3 VM (AVX2): rounds of the base models' picks (16 and the
    # default schedule a round, less those measured before), two of every training workload
    # and a third of the convolution families of mobile models; then a tuning from scratch
    # (128 trials) of every model-family workload and of nine others
    avx2_picks = [r for r in programs if AVX2_PICKS_FROM <= r.timestamp < AVX2_TUNINGS_FROM]
    assert {r.target for r in avx2_picks} == {"llvm -mcpu=znver3"}
    per_workload = collections.Counter(r.workload_key for r in avx2_picks)
    assert set(per_workload) == keys and max(per_workload.values()) <= 3 * 17
    avx2_tunings = [r for r in programs if r.timestamp >= AVX2_TUNINGS_FROM]
    assert {r.target for r in avx2_tunings} == {"llvm -mcpu=znver3"}
    tuned = collections.Counter(r.workload_key for r in avx2_tunings)
    tuned_too = {ir.ComputeDAG(workloads[label].tensors).workload_key() for label in AVX2_TUNED_TOO}
    assert set(tuned) == family_keys | tuned_too and set(tuned.values()) == {128}
    # before: 256 programs of each of 33 training workloads (384 of GRP-1x28x28x128x128:
    # tuned once more) and 384 of each of the three Winograd, three T2D and three
    # conv_residual ones (whose logs also hold re-timings); of each model-family workload, 128
    # of its tuning (192 of the five with channel counts 16 does not divide and of the eleven
    # transformer layers over prime token counts) and then rounds of the base models' picks
    # (three rounds, two of the eleven)
    programs = [r for r in programs if r.timestamp < AVX2_PICKS_FROM]
    family = collections.Counter(r.workload_key for r in programs if r.workload_key in family_keys)
    assert len(programs) - sum(family.values()) == 33 * 256 + 128 + 9 * 384
    assert set(family) == family_keys and 128 + 3 * 8 < min(family.values()) <= max(family.values()) <= 192 + 3 * 17
    assert logged <= keys and keys - logged <= family_keys
    ablation_key = ir.ComputeDAG(ops.suite_workload(tune_ops.ABLATION_WORKLOAD).tensors).workload_key()
    assert ablation_key not in keys      # the ablation's workload is in neither's training data
