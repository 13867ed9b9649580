"""A tuned model leaves the tuner: compile an ONNX model into an artifact, load it in a fresh
interpreter with the runtime alone (numpy and ctypes), from C, and through InferenceSession;
outputs against onnxruntime; bad artifacts and bad inputs are clear errors, never a crash."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="compiling ONNX models needs the onnx package")
ort = pytest.importorskip("onnxruntime", reason="checking compiled models needs onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import autosched  # noqa: E402
from autosched.deploy import NoCCompiler, compile as compile_model  # noqa: E402
from autosched.graph.onnx_zoo import light_model, with_random_weights  # noqa: E402
from autosched.runtime import ArtifactError, Model, artifact, header_path, read_manifest, set_spin_policy  # noqa: E402

if shutil.which("cc") is None and shutil.which("gcc") is None:
    pytest.skip("compiling an artifact links it with the system's C compiler (cc)", allow_module_level=True)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
rng = np.random.default_rng(0)


def w(*shape, scale=0.3):
    return (scale * rng.standard_normal(shape)).astype(np.float32)


def save_model(path, nodes, inputs, outputs, initializers, opset=17):
    ins = [helper.make_tensor_value_info(k, TensorProto.FLOAT, list(s)) for k, s in inputs.items()]
    outs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs]
    inits = [numpy_helper.from_array(v, k) for k, v in initializers.items()]
    model = helper.make_model(helper.make_graph(nodes, os.path.basename(path)[:-5], ins, outs, inits),
                              opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = min(model.ir_version, 10)
    onnx.save(model, path)
    return path


def small_cnn(folder):
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Conv", ["p1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c2"], ["r2"]),
             helper.make_node("GlobalAveragePool", ["r2"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("Gemm", ["f", "fw", "fb"], ["logits"], transB=1)]
    inits = {"w1": w(8, 3, 3, 3), "b1": w(8), "w2": w(16, 8, 3, 3), "b2": w(16), "fw": w(10, 16), "fb": w(10)}
    return save_model(os.path.join(folder, "small_cnn.onnx"), nodes, {"x": (1, 3, 16, 16)}, ["logits"], inits)


def small_transformer(folder):
    """One encoder block: single-head attention, residual, layer norm, GELU feed-forward; two
    outputs (the block's and the attention probabilities)."""
    d, f = 16, 32
    nodes = [helper.make_node("MatMul", ["x", "wq"], ["q"]), helper.make_node("MatMul", ["x", "wk"], ["k"]),
             helper.make_node("MatMul", ["x", "wv"], ["v"]),
             helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
             helper.make_node("MatMul", ["q", "kt"], ["s"]), helper.make_node("Mul", ["s", "scale"], ["ss"]),
             helper.make_node("Softmax", ["ss"], ["probs"], axis=-1),
             helper.make_node("MatMul", ["probs", "v"], ["ctx"]),
             helper.make_node("MatMul", ["ctx", "wo"], ["o"]), helper.make_node("Add", ["o", "x"], ["res"]),
             helper.make_node("LayerNormalization", ["res", "gamma", "beta"], ["ln"], axis=-1, epsilon=1e-5),
             helper.make_node("MatMul", ["ln", "w1"], ["h"]), helper.make_node("Add", ["h", "b1"], ["hb"]),
             helper.make_node("Gelu", ["hb"], ["act"]), helper.make_node("MatMul", ["act", "w2"], ["y0"]),
             helper.make_node("Add", ["y0", "ln"], ["y"])]
    inits = {"wq": w(d, d), "wk": w(d, d), "wv": w(d, d), "wo": w(d, d), "scale": np.array(0.25, np.float32),
             "gamma": w(d) + 1, "beta": w(d), "w1": w(d, f), "b1": w(f), "w2": w(f, d)}
    return save_model(os.path.join(folder, "small_transformer.onnx"), nodes, {"x": (1, 8, d)}, ["y", "probs"],
                      inits, opset=20)


def light_squeezenet(folder):
    path = os.path.join(folder, "squeezenet.onnx")
    onnx.save(with_random_weights(light_model("squeezenet"), seed=0), path)
    return path


def random_feed(path, seed=1):
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    r = np.random.default_rng(seed)
    return {i.name: r.standard_normal(i.shape).astype(np.float32) for i in sess.get_inputs()}


def onnxruntime_outputs(path, feed):
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feed)))


def assert_close(got, want, rtol=2e-4):
    assert got.shape == want.shape, (got.shape, want.shape)
    scale = float(np.max(np.abs(want))) or 1.0
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * scale)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """{name: (onnx path, artifact path)}: default schedules (no base model), to stay fast."""
    folder = str(tmp_path_factory.mktemp("deploy"))
    out = {}
    for make in (small_cnn, small_transformer, light_squeezenet):
        path = make(folder)
        out[make.__name__] = (path, compile_model(path, output=path[:-5] + ".aso", base_model=None))
    return out


def test_fresh_interpreter_runs_artifacts_with_the_runtime_alone(models, tmp_path):
    """Each artifact loads and runs in a new interpreter that imports autosched.runtime only:
    no compiler is imported, and the outputs match onnxruntime's."""
    jobs = {}
    for name, (onnx_path, aso) in models.items():
        feed = random_feed(onnx_path)
        np.savez(tmp_path / f"{name}_in.npz", **feed)
        jobs[name] = (aso, str(tmp_path / f"{name}_in.npz"), str(tmp_path / f"{name}_out.npz"))
    script = textwrap.dedent(f"""
        import sys, numpy as np
        from autosched.runtime import Model
        for aso, inp, out in {list(jobs.values())!r}:
            model = Model(aso, num_threads=2)
            feed = dict(np.load(inp))
            outputs = model.run(feed)
            np.savez(out, **{{o.name: y for o, y in zip(model.outputs, outputs)}})
        heavy = [m for m in ("llvmlite", "xgboost", "networkx", "onnx", "onnxruntime", "ir", "autosched.graph")
                 if m in sys.modules]
        assert not heavy, heavy
    """)
    env = dict(os.environ, PYTHONPATH=ROOT)
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    for name, (onnx_path, _) in models.items():
        want = onnxruntime_outputs(onnx_path, dict(np.load(jobs[name][1])))
        got = dict(np.load(jobs[name][2]))
        assert sorted(got) == sorted(want)
        for k in want:
            assert_close(got[k], want[k])


def test_manifest_describes_the_model(models):
    onnx_path, aso = models["small_transformer"]
    m = read_manifest(aso)
    assert m["autosched_version"] == autosched.__version__
    assert [o["name"] for o in m["outputs"]] == ["y", "probs"]
    assert m["inputs"] == [{"name": "x", "shape": [1, 8, 16], "dtype": "float32", "layout": "row-major"}]
    assert m["arena"]["bytes"] <= m["arena"]["without_reuse_bytes"]
    assert m["cpu"]["flags"] and m["records"] == []
    assert {t["program"] for t in m["tasks"]} == {"default schedule"}   # compiled with base_model=None
    assert m["library"]["kernels"] <= m["library"]["calls"]


def _log_with_one_record(path, log):
    """A tuning log holding one record: the conv task's default schedule, as if measured."""
    from autosched.graph import default_schedule
    from autosched.measure import MeasureInput, MeasureResult
    from autosched.history.records import TuningRecord, save_records
    part, _ = autosched.deploy.import_model(path)
    task = part.tasks[0].search_task(layout_rewrite=False)   # the first conv's
    state = default_schedule(task.dag)
    conv = next(k for k, st in enumerate(state.stages) if st.name == "conv")
    state = state.split(conv, "ax3", [4])   # a program no other path picks
    record = TuningRecord.from_measure(MeasureInput(task, state), MeasureResult((1e-5,), 0, "", 1e-5, 0.0))
    save_records(log, [record])
    return part.tasks[0]


def test_zero_trial_programs_for_untuned_tasks_and_a_logs_records(tmp_path):
    """Without a log, tasks run their zero-trial programs; with one, the tuned task's record is
    in the manifest; both run right."""
    path = small_cnn(str(tmp_path))
    feed = random_feed(path)
    want = onnxruntime_outputs(path, feed)["logits"]
    shipped = os.path.join(os.path.dirname(autosched.__file__), "data", "base_model.json")   # tests turn it off
    zero = compile_model(path, output=str(tmp_path / "zero.aso"), base_model=shipped)
    m = read_manifest(zero)
    tasks = [t for t in m["tasks"] if t["task"]]
    assert {t["program"] for t in tasks} <= {"zero-trial", "default schedule"}
    assert any(t["program"] == "zero-trial" for t in tasks) and len(m["untuned_tasks"]) == len(tasks)
    assert_close(Model(zero).run(feed)[0], want)
    log = str(tmp_path / "log.json")
    tuned_task = _log_with_one_record(path, log)
    tuned = compile_model(path, log_file=log, output=str(tmp_path / "tuned.aso"), base_model=None)
    m = read_manifest(tuned)
    assert [r["workload_key"] for r in m["records"]] == [tuned_task.workload_key]
    assert [t["program"] for t in m["tasks"] if t["workload_key"] == tuned_task.workload_key] == ["tuned"]
    assert len(m["untuned_tasks"]) == len(tasks) - 1
    assert_close(Model(tuned).run(feed)[0], want)


def test_c_example_runs_an_artifact(models, tmp_path):
    onnx_path, aso = models["small_cnn"]
    exe = str(tmp_path / "run_model")
    cc = shutil.which("cc") or shutil.which("gcc")
    subprocess.run([cc, "-O2", "-Wall", "-Werror", f"-I{os.path.dirname(header_path())}",
                    os.path.join(ROOT, "examples", "run_model.c"), "-ldl", "-o", exe], check=True)
    feed = random_feed(onnx_path)
    feed["x"].tofile(tmp_path / "x.bin")
    done = subprocess.run([exe, aso, "x.bin"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("logits: float32 [1, 10] mean")
    got = np.fromfile(tmp_path / "logits.bin", np.float32).reshape(1, 10)
    assert_close(got, onnxruntime_outputs(onnx_path, feed)["logits"])
    bad = subprocess.run([exe, str(tmp_path / "x.bin")], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 1 and "not a complete autosched artifact" in bad.stderr


def test_inference_session_has_onnxruntimes_surface(models):
    onnx_path, aso = models["small_transformer"]
    feed = random_feed(onnx_path)
    want = onnxruntime_outputs(onnx_path, feed)
    theirs = ort.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])
    for source in (aso, onnx_path):
        sess = autosched.InferenceSession(source, num_threads=1)
        assert [(i.name, i.shape, i.type) for i in sess.get_inputs()] == \
               [(i.name, i.shape, i.type) for i in theirs.get_inputs()]
        assert [o.name for o in sess.get_outputs()] == ["y", "probs"]
        y, = sess.run(["y"], feed)
        assert_close(y, want["y"])
        probs, y2 = sess.run(["probs", "y"], feed)
        assert_close(probs, want["probs"])
        np.testing.assert_array_equal(y, y2)
        with pytest.raises(ValueError, match="unknown output names"):
            sess.run(["z"], feed)


def test_two_threads_run_two_sessions_at_once(models):
    cases = []
    for name in ("small_cnn", "small_transformer"):
        onnx_path, aso = models[name]
        feeds = [random_feed(onnx_path, seed) for seed in range(3)]
        cases.append((autosched.InferenceSession(aso), feeds, [onnxruntime_outputs(onnx_path, f) for f in feeds]))
    errors = []

    def work(sess, feeds, wants):
        try:
            for k in range(30):
                outs = sess.run(None, feeds[k % 3])
                for o, got in zip(sess.get_outputs(), outs):
                    assert_close(got, wants[k % 3][o.name])
        except Exception as err:   # reported below, with the thread's name
            errors.append(err)

    threads = [threading.Thread(target=work, args=case) for case in cases]
    threads += [threading.Thread(target=work, args=cases[0])]   # a second thread on one session: serialised
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


# bad artifacts -----------------------------------------------------------------------------------

def _rewrite(src, dst, edit_manifest=None, edit_library=None):
    """A copy of the artifact ``src`` at ``dst`` with its manifest or library bytes edited."""
    sections = artifact.read_sections(src)
    with open(src, "rb") as f:
        data = f.read()
    library = data[:sections.library_bytes]
    weights = data[sections.weights_offset:sections.weights_offset + sections.weights_bytes]
    manifest = read_manifest(src)
    if edit_manifest:
        edit_manifest(manifest)
    if edit_library:
        library = edit_library(library)
    artifact.write(str(dst), library, weights, manifest, sections.build_id)
    return str(dst)


def test_truncated_and_foreign_files_are_refused(models, tmp_path):
    _, aso = models["small_cnn"]
    data = open(aso, "rb").read()
    for n in (0, 100, len(data) // 2, len(data) - 1):
        (tmp_path / "cut.aso").write_bytes(data[:n])
        with pytest.raises(ArtifactError, match="truncated"):
            Model(str(tmp_path / "cut.aso"))
    (tmp_path / "foreign.aso").write_bytes(b"PK\x03\x04" + bytes(5000))
    with pytest.raises(ArtifactError, match="not an autosched artifact"):
        Model(str(tmp_path / "foreign.aso"))
    with pytest.raises(ArtifactError, match="cannot read"):
        Model(str(tmp_path / "missing.aso"))


def test_damaged_library_is_refused_before_it_is_loaded(models, tmp_path):
    _, aso = models["small_cnn"]

    def flip(lib):
        lib = bytearray(lib)
        lib[len(lib) // 2] ^= 0xFF
        return bytes(lib)
    with pytest.raises(ArtifactError, match="checksum"):
        Model(_rewrite(aso, tmp_path / "flip.aso", edit_library=flip))


def test_another_version_or_cpu_is_refused(models, tmp_path):
    _, aso = models["small_cnn"]
    other = _rewrite(aso, tmp_path / "v.aso", lambda m: m.update(autosched_version="0.0.1"))
    with pytest.raises(ArtifactError, match="compiled by autosched 0.0.1"):
        Model(other)
    lacking = _rewrite(aso, tmp_path / "cpu.aso", lambda m: m["cpu"]["flags"].extend(["amx_tile_x", "avx512_fp16x"]))
    with pytest.raises(ArtifactError, match="this CPU lacks what its code uses: amx_tile_x, avx512_fp16x"):
        Model(lacking)
    arm = _rewrite(aso, tmp_path / "arm.aso", lambda m: m["cpu"].update(arch="aarch64"))
    with pytest.raises(ArtifactError, match="a aarch64 processor"):
        Model(arm)


def test_the_c_loader_refuses_another_models_file(models):
    """The library of one artifact with the file of another: the build ids differ."""
    import ctypes
    lib = ctypes.CDLL(models["small_cnn"][1])
    lib.autosched_model_load.restype = ctypes.c_void_p
    lib.autosched_last_error.restype = ctypes.c_char_p
    assert not lib.autosched_model_load(models["small_transformer"][1].encode())
    assert b"another model's artifact" in lib.autosched_last_error()


def test_bad_inputs_and_outputs_are_clear_errors(models, monkeypatch):
    _, aso = models["small_cnn"]
    model = Model(aso)
    x = np.zeros((1, 3, 16, 16), np.float32)
    with pytest.raises(ValueError, match=r"inputs are \['x'\]; got \['image'\] \(missing \['x'\]\) \(unknown"):
        model.run({"image": x})
    with pytest.raises(ValueError, match=r"input 'x' has shape \(1, 3, 8, 8\), the model expects \(1, 3, 16, 16\)"):
        model.run([np.zeros((1, 3, 8, 8), np.float32)])
    with pytest.raises(TypeError, match="input 'x' has dtype float64, the model expects float32"):
        model.run([x.astype(np.float64)])
    with pytest.raises(TypeError, match="must be a numpy array"):
        model.run([x.tolist()])
    read_only = np.zeros((1, 10), np.float32)
    read_only.flags.writeable = False
    with pytest.raises(ValueError, match="output 'logits' is a read-only array"):
        model.run([x], outputs=[read_only])
    out = np.full((1, 10), np.nan, np.float32)
    x = np.random.default_rng(1).standard_normal(x.shape).astype(np.float32)
    strided = np.asfortranarray(x)                       # not C-contiguous: copied in, same result
    assert not strided.flags.c_contiguous or x.ndim < 2
    assert model.run([strided], outputs=[out])[0] is out
    np.testing.assert_array_equal(out, model.run([x])[0])
    with pytest.raises(ValueError, match="num_threads"):
        Model(aso, num_threads=0)
    monkeypatch.chdir(os.path.dirname(aso))   # a bare file name is the file here, not a library on the search path
    assert Model(os.path.basename(aso)).run([x])[0].shape == (1, 10)
    model.close()
    with pytest.raises(RuntimeError, match="closed"):
        model.run([x])


def test_spin_policy_is_checked(monkeypatch):
    with pytest.raises(ValueError, match="spin policy 'fast'"):
        set_spin_policy("fast")
    import ir.cpu.runtime   # noqa: F401 - loads libgomp with the tuner's policy ("short")
    ir.cpu.runtime.target_machine()
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.setenv("GOMP_SPINCOUNT", "1000")
    set_spin_policy("short")
    with pytest.raises(RuntimeError, match="loaded in this process already"):
        set_spin_policy("active")


def test_compiling_without_a_c_compiler_says_so(models, monkeypatch, tmp_path, capsys):
    from autosched.cli import main
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setenv("PATH", "")
    with pytest.raises(NoCCompiler, match="C compiler driver"):
        compile_model(models["small_cnn"][0], output="never.aso", base_model=None)
    out = str(tmp_path / "never.aso")
    assert main(["compile", models["small_cnn"][0], "-o", out, "--no-base-model"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no $CC, cc, gcc or clang on the PATH" in err
    monkeypatch.setenv("CC", shutil.which("false", path="/bin:/usr/bin"))   # a "compiler" that fails
    assert main(["compile", models["small_cnn"][0], "-o", out, "--no-base-model"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "linking the artifact failed" in err and not os.path.exists(out)


def test_command_line_compiles_and_runs_an_artifact(models, tmp_path, capsys):
    from autosched.cli import main
    onnx_path, _ = models["small_cnn"]
    aso = str(tmp_path / "cli.aso")
    assert main(["compile", onnx_path, "-o", aso, "--no-base-model"]) == 0
    assert "0 of 5 tasks tuned (5 default schedule)" in capsys.readouterr().out
    feed = random_feed(onnx_path)
    np.save(tmp_path / "x.npy", feed["x"])
    assert main(["run", aso, "--input", str(tmp_path / "x.npy"), "--output", str(tmp_path / "y.npy")]) == 0
    assert "output 'logits': shape (1, 10)" in capsys.readouterr().out
    assert_close(np.load(tmp_path / "y.npy"), onnxruntime_outputs(onnx_path, feed)["logits"])
    (tmp_path / "bad.aso").write_bytes(b"nothing")
    assert main(["run", str(tmp_path / "bad.aso")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not an autosched artifact" in err
    assert main(["run", aso, "--log-file", "x.json"]) == 2
    assert main(["run", onnx_path]) == 2
    assert "needs --log-file" in capsys.readouterr().err


def test_importing_autosched_is_lazy():
    script = ("import sys, autosched, autosched.runtime; assert 'llvmlite' not in sys.modules; "
              "f = autosched.auto_schedule; assert 'llvmlite' in sys.modules; print(autosched.__version__)")
    done = subprocess.run([sys.executable, "-c", script], env=dict(os.environ, PYTHONPATH=ROOT),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == autosched.__version__, done.stderr


def test_weights_mapped_from_the_file_give_the_same_outputs(models, monkeypatch):
    onnx_path, aso = models["small_cnn"]
    feed = random_feed(onnx_path)
    read = Model(aso).run(feed)[0]
    monkeypatch.setenv("AUTOSCHED_WEIGHTS", "map")   # the loader reads it at load
    np.testing.assert_array_equal(Model(aso).run(feed)[0], read)


def test_the_c_loader_checks_the_cpu_too(models, tmp_path, monkeypatch):
    """A C program has no Python check: the library refuses a CPU without the extensions it
    was compiled for (simulated: a flag this machine lacks added at compile time)."""
    import ctypes

    from autosched.runtime import cpu
    real = cpu.required_flags
    monkeypatch.setattr(cpu, "required_flags", lambda features: real(features) + ["amx_tile_simulated"])
    aso = compile_model(models["small_cnn"][0], output=str(tmp_path / "amx.aso"), base_model=None)
    with pytest.raises(ArtifactError, match="amx_tile_simulated"):
        Model(aso)
    lib = ctypes.CDLL(aso)
    lib.autosched_model_load.restype = ctypes.c_void_p
    lib.autosched_last_error.restype = ctypes.c_char_p
    assert not lib.autosched_model_load(aso.encode())
    assert b"lacks instruction-set extensions the model's code uses: amx_tile_simulated" in lib.autosched_last_error()


def test_the_header_and_the_driver_are_package_data():
    from tests.autosched.test_base_model import package_data
    assert {"runtime/include/autosched.h", "deploy/loader.c"} <= set(package_data())
    assert os.path.isfile(header_path())


def test_compile_never_replaces_a_file_it_did_not_write(models, tmp_path, capsys):
    """`compile -o` onto the model, or onto any file that is not an artifact, replaced it."""
    from autosched.cli import main
    onnx_path, _ = models["small_cnn"]
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    model_bytes = open(onnx_path, "rb").read()
    for output, message in ((onnx_path, "is the model or the tuning log"), (str(notes), "is not an autosched artifact")):
        assert main(["compile", onnx_path, "-o", output, "--no-base-model"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err
    assert notes.read_text() == "mine" and open(onnx_path, "rb").read() == model_bytes
    aso = str(tmp_path / "again.aso")
    assert main(["compile", onnx_path, "-o", aso, "--no-base-model"]) == 0
    assert main(["compile", onnx_path, "-o", aso, "--no-base-model"]) == 0   # an artifact is replaced


def test_a_float16_model_takes_and_returns_float16_as_onnxruntime_does(tmp_path):
    """A float16 model (computed in float32) through the artifact and both sessions: float16
    in its interface, float16 feeds taken, float16 outputs matching onnxruntime's."""
    from tests.autosched.test_half import mlp_with_cast_pairs
    path = str(tmp_path / "mlp16.onnx")
    open(path, "wb").write(mlp_with_cast_pairs())
    aso = compile_model(path, output=str(tmp_path / "mlp16.aso"), base_model=None)
    entry, = read_manifest(aso)["inputs"]
    assert (entry["dtype"], entry["model_dtype"]) == ("float32", "float16")   # the C API computes in float32
    x = np.random.default_rng(1).standard_normal((3, 16)).astype(np.float16)
    want, = onnxruntime_outputs(path, {"x": x}).values()
    theirs = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    for source in (aso, path):
        sess = autosched.InferenceSession(source)
        assert [(i.name, i.type) for i in sess.get_inputs()] == [(i.name, i.type) for i in theirs.get_inputs()]
        assert [o.type for o in sess.get_outputs()] == ["tensor(float16)"]
        y, = sess.run(None, {"x": x})
        assert y.dtype == np.float16
        np.testing.assert_allclose(y.astype(np.float32), want.astype(np.float32), rtol=1e-2,
                                   atol=1e-2 * float(np.abs(want).max()))
        with pytest.raises(TypeError, match="has dtype float32, the model expects float16"):
            sess.run(None, {"x": x.astype(np.float32)})
    model = Model(aso)
    into = np.zeros((3, 8), np.float16)
    assert model.run([x], [into])[0] is into and np.array_equal(into, model.run([x])[0])


def test_a_bfloat16_artifact_answers_in_bfloat16_in_a_fresh_interpreter(tmp_path):
    ml_dtypes = pytest.importorskip("ml_dtypes", reason="bfloat16 arrays need ml_dtypes (onnx depends on it)")
    from tests.autosched.test_half import mlp_with_cast_pairs
    path = str(tmp_path / "mlp_bf16.onnx")
    open(path, "wb").write(mlp_with_cast_pairs("bfloat16"))
    aso = compile_model(path, output=str(tmp_path / "mlp_bf16.aso"), base_model=None)
    x = np.random.default_rng(1).standard_normal((3, 16)).astype(ml_dtypes.bfloat16)
    want = autosched.InferenceSession(path).run(None, {"x": x})[0]
    np.save(tmp_path / "x.npy", x.view(np.uint16))
    script = textwrap.dedent(f"""
        import numpy as np
        from autosched.runtime import Model
        model = Model({aso!r})
        assert [str(i.type) for i in model.inputs] == ["tensor(bfloat16)"], model.inputs
        x = np.load({str(tmp_path / "x.npy")!r}).view(model.inputs[0].dtype)
        y, = model.run([x])
        assert y.dtype.name == "bfloat16"
        np.save({str(tmp_path / "y.npy")!r}, y.view(np.uint16))
    """)
    done = subprocess.run([sys.executable, "-c", script], env=dict(os.environ, PYTHONPATH=ROOT), capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), want.view(np.uint16))


def test_an_artifact_compiled_again_to_the_same_path_loads_the_new_one(tmp_path):
    """The dynamic loader hands back the library it loaded under a name it has seen: loading
    a recompiled artifact in the same process ran the old library (and checked it against
    the new manifest)."""
    onnx_path = str(tmp_path / "net.onnx")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"])]
    aso = str(tmp_path / "net.aso")
    x = rng.standard_normal((2, 4)).astype(np.float32)
    for scale in (1.0, -3.0):
        weight = (scale * np.arange(12, dtype=np.float32)).reshape(4, 3)
        save_model(onnx_path, nodes, {"x": (2, 4)}, ["y"], {"w": weight})
        compile_model(onnx_path, output=aso, base_model=None)
        got, = Model(aso).run([x])
        np.testing.assert_allclose(got, x @ weight, rtol=1e-5, atol=1e-5)
