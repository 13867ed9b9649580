"""Every test is hermetic: tunings append to and learn from a records database of their
own (a fresh temporary file), never the user's ``~/.cache/autosched/records.jsonl``; and
the base cost model is off unless a test asks for it (``base_model=...``), so that tests
of the search keep their small, model-free first rounds and untuned executors their
default schedules (a zero-trial search costs seconds a task)."""
import pytest


@pytest.fixture(autouse=True)
def _private_records_db(tmp_path_factory, monkeypatch):
    path = tmp_path_factory.mktemp("records_db") / "records.jsonl"
    monkeypatch.setenv("AUTOSCHED_RECORDS_DB", str(path))
    monkeypatch.setenv("AUTOSCHED_BASE_MODEL", "off")
    yield path
