"""The README's Python examples run as written (the tuning example excepted: tuning takes
minutes, and tests/evolution/test_search.py runs auto_schedule end to end; the ONNX example
needs the onnx extra)."""
import importlib.util
import pathlib
import re

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"


def test_readme_python_blocks_run(tmp_path, monkeypatch):
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    has_onnx = importlib.util.find_spec("onnx") is not None
    runnable = [b for b in blocks if "auto_schedule(" not in b and (has_onnx or "from_onnx" not in b)]
    assert len(runnable) >= 3 and len(runnable) < len(blocks)
    monkeypatch.chdir(tmp_path)  # examples may write logs
    namespace: dict = {}
    exec(compile("\n".join(runnable), str(README), "exec"), namespace)
    assert namespace["c"].shape == (512, 512)
