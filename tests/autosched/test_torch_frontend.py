"""PyTorch directly: ``from_torch`` through both ONNX exporters and the ``torch.compile``
backend ("autosched") on a small CNN and a small transformer, outputs against PyTorch's;
the backend's eager fallback, its tuned programs from a log, its shape cache, and its entry
point. Skipped without torch (and onnx)."""
from __future__ import annotations

import importlib.metadata
import pathlib
import tomllib
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the PyTorch front door needs torch (pip install 'autosched[torch]')")
pytest.importorskip("onnx", reason="PyTorch models enter through ONNX (pip install 'autosched[onnx]')")

import autosched  # noqa: E402
from autosched import graph as G  # noqa: E402
from autosched import torch_backend  # noqa: E402

from . import small_torch  # noqa: E402
from .test_networks import HW, SMALL_SEARCH, measuring, pools  # noqa: E402,F401 - pools is a fixture

MODELS = ["cnn", "transformer"]
#: default schedules keep these tests fast; zero-trial programs are the executor's own tests
FAST = {"base_model": None, "warn_untuned": False}


def assert_close(ours, theirs, rtol=1e-4):
    ours, theirs = np.asarray(ours), np.asarray(theirs)
    assert ours.shape == theirs.shape and ours.dtype == theirs.dtype
    np.testing.assert_allclose(ours, theirs, rtol=rtol, atol=rtol * float(np.max(np.abs(theirs))))


def eager(model, x):
    with torch.no_grad():
        return model(x).numpy()


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """Each test compiles anew (Dynamo caches compiled frames per code object)."""
    torch._dynamo.reset()
    torch_backend.register()          # the string works without the installed entry point
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize("which", MODELS)
@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
def test_from_torch_matches_pytorch(which, exporter):
    if exporter == "dynamo":
        pytest.importorskip("onnxscript", reason="torch.onnx.export(dynamo=True) needs onnxscript")
    model, x = getattr(small_torch, which)()
    graph = autosched.from_torch(model, x, exporter=exporter)
    assert isinstance(graph, G.Graph) and [i.name for i in graph.inputs] == ["x"]
    out = G.GraphExecutor(G.partition(graph), base_model=None).run(x.numpy())[0]
    assert_close(out, eager(model, x))


def test_from_torch_with_an_open_batch_axis():
    model, x = small_torch.cnn()
    dynamic = autosched.from_torch(model, x, dynamic_axes={"x": {0: "batch"}})
    assert isinstance(dynamic, G.DynamicModel) and dynamic.open_axes == {"x": {0: "batch"}}
    run = dynamic.executor(**FAST)
    for batch in (1, 3):
        xb = torch.randn(batch, 3, 8, 8)
        assert_close(run(xb.numpy())[0], eager(model, xb))


def test_from_torch_arguments():
    model, x = small_torch.cnn()
    with pytest.raises(TypeError, match="expects a torch.nn.Module"):
        autosched.from_torch(lambda t: t, x)
    with pytest.raises(TypeError, match="must be tensors"):
        autosched.from_torch(model, (x.numpy(),))
    with pytest.raises(ValueError, match="exporter='onnx'"):
        autosched.from_torch(model, x, exporter="onnx")


def compiled_graphs(monkeypatch) -> list:
    """Every CompiledGraph the backend returns from now on."""
    made = []
    real = torch_backend.CompiledGraph

    def spy(*args):
        made.append(real(*args))
        return made[-1]
    monkeypatch.setattr(torch_backend, "CompiledGraph", spy)
    return made


@pytest.mark.parametrize("which", MODELS)
def test_torch_compile_backend_matches_pytorch(which, monkeypatch):
    model, x = getattr(small_torch, which)()
    made = compiled_graphs(monkeypatch)
    compiled = torch.compile(model, backend="autosched", options=FAST)
    with warnings.catch_warnings():
        warnings.simplefilter("error", torch_backend.EagerFallbackWarning)
        with torch.no_grad():
            for batch in (1, 2):                 # a second shape: its own executor
                xb = torch.randn((batch,) + tuple(x.shape[1:]))
                y = compiled(xb)
                assert isinstance(y, torch.Tensor)
                assert_close(y.numpy(), eager(model, xb))
    assert made and all(m.executor is not None for m in made)
    assert sum(m.executors.builds for m in made) == 2


class Flatten(torch.nn.Module):
    """Reads its batch axis (x.shape[0]): once Dynamo makes it dynamic, a graph input."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(12, 3)

    def forward(self, x):
        return torch.relu(self.fc(x.reshape(x.shape[0], -1)))


def test_a_dynamic_axis_gets_an_executor_per_shape(monkeypatch):
    torch.manual_seed(0)
    model = Flatten().eval()
    made = compiled_graphs(monkeypatch)
    compiled = torch.compile(model, backend="autosched", options=FAST)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error", torch_backend.EagerFallbackWarning)
        for batch in (2, 3, 5, 3):
            x = torch.randn(batch, 3, 4)
            assert_close(compiled(x).numpy(), eager(model, x))
    assert len(made) == 2                                 # static at batch 2, then batch made dynamic
    assert [m.executors.builds for m in made] == [1, 2]   # 3 and 5 built once each
    shapes = [[e[0] for e in k if isinstance(e, tuple) and isinstance(e[1], str)] for k in made[1].executors.keys()]
    assert shapes == [[(5, 3, 4)], [(3, 3, 4)]]                               # most recent last


def test_torch_compile_of_a_half_model_returns_float16(monkeypatch):
    model, x = small_torch.transformer()
    model, x = model.half(), x.half()
    made = compiled_graphs(monkeypatch)
    with torch.no_grad():
        y = torch.compile(model, backend="autosched", options=FAST)(x)
    assert made and made[-1].executor is not None           # ours, not PyTorch's fallback
    assert y.dtype == torch.float16
    assert_close(y.numpy(), eager(model, x), rtol=1e-2)     # float16 tolerance; computed in float32


def test_weights_changed_in_place_are_used(monkeypatch):
    """The backend folded the weights it saw first and kept them after an in-place change
    (Dynamo does not recompile for it): outputs went stale."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 4)).eval()
    made = compiled_graphs(monkeypatch)
    compiled = torch.compile(model, backend="autosched", options=FAST)
    x = torch.randn(2, 6)
    with torch.no_grad():
        assert_close(compiled(x).numpy(), eager(model, x))
        model[0].weight.mul_(3.0)
        assert_close(compiled(x).numpy(), eager(model, x))
    assert made and made[-1].executors.builds == 2


def test_a_graph_that_needs_gradients_or_cannot_import_runs_eagerly(monkeypatch):
    monkeypatch.setattr(torch_backend, "_said", set())
    model, x = small_torch.cnn()
    with pytest.warns(torch_backend.EagerFallbackWarning, match="needs gradients"):
        y = torch.compile(model, backend="autosched", options=FAST)(x)
    assert y.requires_grad and torch.allclose(y, model(x))

    class Unsupported(torch.nn.Module):         # Det: an operator the importer has no converter for
        def forward(self, a):
            return torch.linalg.det(a) * 2.0

    a = torch.randn(2, 3, 3)
    compiled = torch.compile(Unsupported(), backend="autosched", options=FAST)
    with torch.no_grad():
        with pytest.warns(torch_backend.EagerFallbackWarning, match="runs eagerly.*cannot import.*Det"):
            y = compiled(a)
        with warnings.catch_warnings():
            warnings.simplefilter("error", torch_backend.EagerFallbackWarning)     # said once
            torch._dynamo.reset()
            y2 = torch.compile(Unsupported(), backend="autosched", options=FAST)(a)
    assert torch.allclose(y, torch.linalg.det(a) * 2.0) and torch.allclose(y2, y)


def test_a_graph_whose_outputs_differ_from_pytorchs_runs_eagerly(monkeypatch):
    monkeypatch.setattr(torch_backend, "_said", set())

    class Wrong(G.GraphExecutor):        # an importer bug, as the backend would see one
        def run(self, *inputs):
            return [2 * y for y in super().run(*inputs)]
    monkeypatch.setattr(torch_backend, "GraphExecutor", Wrong)
    model, x = small_torch.cnn()
    with torch.no_grad(), pytest.warns(torch_backend.EagerFallbackWarning, match="differ from PyTorch's"):
        y = torch.compile(model, backend="autosched", options=FAST)(x)
    assert_close(y.numpy(), eager(model, x))


def test_unknown_options_are_refused():
    model, x = small_torch.cnn()
    with pytest.raises(Exception, match="unknown options \\['log'\\]"):
        with torch.no_grad():
            torch.compile(model, backend="autosched", options={"log": "x.json"})(x)


def test_tuned_programs_from_the_log_option(tmp_path, pools, monkeypatch):
    model, x = small_torch.cnn()
    made = compiled_graphs(monkeypatch)
    with torch.no_grad():
        torch.compile(model, backend="autosched", options=FAST)(x)
    first = made[-1].executor
    log = str(tmp_path / "cnn.jsonl")
    tasks = len(first.partitioned.tasks)
    autosched.tune_networks(first.partitioned, trials=2 * tasks, measure_batch=2, log_file=log,
                            cost_model="random", search_params=SMALL_SEARCH, hardware=HW, verbose=0, retime_best=0,
                            **measuring(pools))
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="autosched", options={**FAST, "log_file": log})
    with torch.no_grad():
        y = compiled(x)
    tuned = made[-1].executor
    assert not tuned.untuned and all(tuned.programs[w.workload_key].tuned for w in tuned.partitioned.tasks)
    assert_close(y.numpy(), eager(model, x))


def test_the_package_declares_the_backend_entry_point():
    root = pathlib.Path(__file__).resolve().parents[2]
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    assert project["entry-points"]["torch_dynamo_backends"] == {"autosched": "autosched.torch_backend:autosched_backend"}
    assert any(dep.startswith("torch") for dep in project["optional-dependencies"]["torch"])


def test_the_installed_entry_point_names_the_backend():
    points = [e for e in importlib.metadata.entry_points(group="torch_dynamo_backends") if e.name == "autosched"]
    if not points:
        pytest.skip("the installed autosched predates its torch_dynamo_backends entry point (reinstall it)")
    assert points[0].load() is torch_backend.autosched_backend
