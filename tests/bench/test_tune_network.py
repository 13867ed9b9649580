"""bench/tune_network.py --trials 0: the zero-trial network is verified and timed in turns
beside its default schedules and the tuned network of a log, and keeps the JSON contract."""
from __future__ import annotations

import json

import pytest

from autosched.history.base_model import SHIPPED_MODEL

from .test_bench_common import _load

tune_network = _load("tune_network")


def test_zero_trial_run_times_the_zero_trial_default_and_tuned_networks(tmp_path, monkeypatch, capsys):
    log = str(tmp_path / "dcgan.jsonl")
    assert tune_network.main(["--smoke", "--json-only", "--network", "dcgan", "--trials", "4",
                              "--log-file", log]) == 0
    capsys.readouterr()
    monkeypatch.setenv("AUTOSCHED_BASE_MODEL", SHIPPED_MODEL)
    assert tune_network.main(["--smoke", "--json-only", "--network", "dcgan", "--trials", "0",
                              "--log-file", log]) == 0
    row = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["rows"][0]
    assert row["verified"] and row["trials"] == 0 and row["zero_trial_search_s"] > 0
    assert row["latency_ms"] > 0 and row["default_ms"] > 0 and row["tuned_ms"] > 0
    assert row["zero_over_tuned"] == pytest.approx(row["latency_ms"] / row["tuned_ms"])
    assert row["vs_tuned"] == pytest.approx(row["tuned_ms"] / row["latency_ms"])


def test_zero_trial_run_needs_a_base_model(capsys):
    with pytest.raises(SystemExit, match="no base cost model"):  # the test session turns it off
        tune_network.main(["--smoke", "--json-only", "--network", "dcgan", "--trials", "0"])
