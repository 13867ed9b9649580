"""Every test is hermetic: tunings append to and learn from a records database of their
own (a fresh temporary file), never the user's ``~/.cache/autosched/records.jsonl``."""
import pytest


@pytest.fixture(autouse=True)
def _private_records_db(tmp_path_factory, monkeypatch):
    path = tmp_path_factory.mktemp("records_db") / "records.jsonl"
    monkeypatch.setenv("AUTOSCHED_RECORDS_DB", str(path))
    yield path
