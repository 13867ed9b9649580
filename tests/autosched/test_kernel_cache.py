"""The compiled-kernel cache: the second load of a model compiles nothing (LLVM is counted)
and computes what numpy says; any change to what decides the machine code misses; a
damaged, truncated or foreign entry is a miss that gets replaced, never a crash; the cap
evicts the least recently used; no records database, no cache; concurrent writers and a
killed writer never leave a bad entry; a model of cached kernels still compiles into an
artifact (its kernels' code is generated again from their programs)."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import warnings

import numpy as np
import pytest

import ir
from autosched import graph as G
from autosched.history import object_cache as oc
from autosched.history.object_cache import ObjectCache, object_cache
from ir.cpu import object_key as ok
from ir.cpu import runtime

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def llvm_compiles(monkeypatch):
    """How many modules LLVM optimises (every compile of a kernel does, once)."""
    count = [0]
    optimize = runtime.optimize

    def counted(text):
        count[0] += 1
        return optimize(text)

    monkeypatch.setattr(runtime, "optimize", counted)
    return count


def tiny_model():
    b = G.GraphBuilder("tiny", seed=0)
    x = b.input((1, 6, 6, 5))
    y = b.relu(b.conv(x, 7, 3, padding=1))
    return G.partition(b.graph([b.add(y, b.relu(b.conv(y, 7, 1)))]))


def tiled(dag) -> ir.State:
    """The conv stage's output channels (7) split by 4: a padded tile, so the packed weight
    has zeros past its edge."""
    state = dag.init_state()
    conv = next(i for i, st in enumerate(state.stages) if getattr(st.op, "reduce_axis", ()))
    return state.split(conv, 3, [4])


def executor(part, db, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return G.GraphExecutor(part, records_db=db, base_model=None, **kwargs)


def test_a_second_load_compiles_nothing_and_computes_the_same(tmp_path, llvm_compiles):
    part = tiny_model()
    states = {w.workload_key: tiled(w.dag) for w in part.tasks}   # layout-rewritten, padded weights
    db = tmp_path / "records.jsonl"
    first = executor(part, db, states=states)
    compiled = llvm_compiles[0]
    assert compiled >= len(first.programs) and first.object_cache.stats["stored"] == len(first.programs)
    layouts = [plan for p in first.programs.values() for plan in p.kernel.layouts.values()]
    assert any(np.prod(plan.shape) > np.prod(plan.original_shape) for plan in layouts)   # padded tiles
    again = executor(part, db, states=states)
    assert llvm_compiles[0] == compiled, "the second load compiled kernels"
    assert again.object_cache.stats["hits"] == len(again.programs) and not again.object_cache.stats["misses"]
    inputs = part.graph.random_inputs(3)
    matches, err = again.verify(*inputs, rtol=1e-4)
    assert matches, err
    np.testing.assert_array_equal(again.run(*inputs)[0], first.run(*inputs)[0])
    folder = tmp_path / oc.FOLDER_NAME
    assert len(list(folder.glob("*.o"))) == len(first.programs)


def test_another_compiler_or_cpu_compiles_again(tmp_path, llvm_compiles, monkeypatch):
    part = tiny_model()
    db = tmp_path / "records.jsonl"
    n = len(executor(part, db).programs)
    monkeypatch.setattr(ok, "compiler_version", lambda: "an edited compiler")
    compiled = llvm_compiles[0]
    edited = executor(part, db)
    assert edited.object_cache.stats["misses"] == n and llvm_compiles[0] - compiled == n
    assert executor(part, db).object_cache.stats["hits"] == n   # (its own kernels, stored beside the others)
    monkeypatch.setattr(runtime, "host_cpu", lambda: ("znver3", "+avx2,+fma"))
    assert executor(part, db).object_cache.stats["misses"] == n
    assert len(list((tmp_path / oc.FOLDER_NAME).glob("*.o"))) == 3 * n


def test_a_cached_kernel_lowers_again_when_asked(tmp_path):
    part = tiny_model()
    w = part.tasks[0]
    cache = ObjectCache(tmp_path / "kernels")
    built = ir.build(w.dag, tiled(w.dag), layout_rewrite=True, objects=cache)
    loaded = ir.build(w.dag, tiled(w.dag), layout_rewrite=True, objects=cache)
    assert cache.stats["hits"] == 1 and loaded.llvm_ir is None
    assert str(loaded.lowered) == str(built.lowered) and loaded.layouts.keys() == built.layouts.keys()
    with pytest.raises(NotImplementedError, match="no module to print"):
        loaded.assembly()


def test_what_decides_the_code_is_in_the_key(monkeypatch):
    dag = tiny_model().tasks[0].dag
    naive, split = dag.init_state(), tiled(dag)
    key = ok.object_key(dag, split, "k", True)
    assert key == ok.object_key(dag, tiled(dag), "k", True) and len(key) == 64
    assert len({key, ok.object_key(dag, naive, "k", True), ok.object_key(dag, split, "k", False),
                ok.object_key(dag, split, "other", True)}) == 4
    other = tiny_model().tasks[1].dag
    assert ok.object_key(other, other.init_state(), "k", True) != ok.object_key(dag, naive, "k", True)
    monkeypatch.setattr(runtime, "host_cpu", lambda: ("znver3", "+avx2,+fma"))
    assert ok.object_key(dag, split, "k", True) != key            # another CPU
    monkeypatch.undo()
    monkeypatch.setattr(runtime, "SLP_VECTORIZATION", not runtime.SLP_VECTORIZATION)
    assert ok.object_key(dag, split, "k", True) != key            # other LLVM passes
    monkeypatch.undo()
    monkeypatch.setattr(ok, "compiler_version", lambda: "another compiler")
    assert ok.object_key(dag, split, "k", True) != key            # another version of the compiler
    monkeypatch.setattr(ok, "compiler_version", lambda: None)
    assert ok.object_key(dag, split, "k", True) is None          # unknown: no caching


def test_an_edit_to_the_compiler_changes_its_version(tmp_path, monkeypatch):
    copy = tmp_path / "ir"
    shutil.copytree(ok._IR_PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(ok, "_IR_PACKAGE", str(copy))
    before = ok.compiler_version.__wrapped__()
    assert before == ok.compiler_version()   # (the installed package, read once per process)
    with open(copy / "cpu" / "codegen.py", "a") as f:
        f.write("\n# a change to code generation\n")
    assert ok.compiler_version.__wrapped__() != before
    for path in copy.rglob("*.py"):
        path.unlink()
    assert ok.compiler_version.__wrapped__() is None


def _one_kernel(cache):
    dag = tiny_model().tasks[0].dag
    state = tiled(dag)
    return dag, state, ok.object_key(dag, state, "autosched_kernel", True), \
        lambda: ir.build(dag, state, layout_rewrite=True, objects=cache)


def _check(kernel, dag):
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(t.shape).astype(t.dtype) for t in dag.tensors]
    args = [kernel.pack(t.name, a) if t.name in kernel.layouts else a for t, a in zip(dag.tensors, arrays)]
    kernel(*args)
    reference = ir.build(dag)
    reference(*arrays[:-1], want := np.empty_like(arrays[-1]))
    np.testing.assert_allclose(args[-1], want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("damage", ["truncated", "flipped payload", "flipped header", "foreign", "other key",
                                    "empty", "directory"])
def test_a_damaged_entry_is_a_miss_and_is_replaced(tmp_path, damage):
    cache = ObjectCache(tmp_path / "kernels")
    dag, state, key, build = _one_kernel(cache)
    build()
    path = tmp_path / "kernels" / f"{key}.o"
    good = path.read_bytes()
    if damage == "truncated":
        path.write_bytes(good[:len(good) // 2])
    elif damage == "flipped payload":
        path.write_bytes(good[:-100] + bytes([good[-100] ^ 1]) + good[-99:])
    elif damage == "flipped header":
        path.write_bytes(good[:30] + bytes([good[30] ^ 1]) + good[31:])
    elif damage == "foreign":
        path.write_bytes(b"\x7fELF" + bytes(range(256)) * 8)   # not ours: LLVM would abort on it
    elif damage == "other key":
        other = ObjectCache(tmp_path / "other")
        other.put("0" * 64, good[oc._HEADER.size:])
        path.write_bytes((tmp_path / "other" / ("0" * 64 + ".o")).read_bytes())
    elif damage == "empty":
        path.write_bytes(b"")
    else:
        path.unlink()
        path.mkdir()
    cache = ObjectCache(tmp_path / "kernels")
    dag, state, key, build = _one_kernel(cache)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        kernel = build()
    _check(kernel, dag)
    assert cache.stats["misses"] == 1 and cache.stats["damaged"] == 1
    if damage == "directory":   # not a file of ours to replace: compiled, said once
        assert path.is_dir() and cache.failed and len(said) == 1
        return
    assert not said and cache.stats["stored"] == 1 and path.read_bytes() == good
    assert ObjectCache(tmp_path / "kernels").get(key) == good[oc._HEADER.size:]


def test_the_cap_evicts_the_least_recently_used(tmp_path):
    folder = tmp_path / "kernels"
    cache = ObjectCache(folder, max_bytes=3 * (oc._HEADER.size + 1000))
    keys = [f"{k:064x}" for k in range(5)]
    for n, key in enumerate(keys[:3]):
        cache.put(key, bytes([n]) * 1000)
        os.utime(folder / f"{key}.o", (1000 + n, 1000 + n))   # written in this order
    assert cache.get(keys[0]) == bytes([0]) * 1000             # used again: now the most recent
    (folder / "notes.txt").write_text("not ours")              # never counted, never removed
    cache.put(keys[3], b"\3" * 1000)
    assert cache.stats["evicted"] == 1 and cache.get(keys[1]) is None
    assert [cache.get(k) is not None for k in keys[:4]] == [True, False, True, True]
    cache.put(keys[4], b"\4" * 5000)                            # bigger than the cap on its own
    assert not list(folder.glob("*.o")) and (folder / "notes.txt").read_text() == "not ours"


def test_no_records_database_no_cache(tmp_path, monkeypatch):
    part = tiny_model()
    assert executor(part, None).object_cache is None
    monkeypatch.setenv("AUTOSCHED_RECORDS_DB", "off")
    assert executor(part, "default").object_cache is None and object_cache() is None
    monkeypatch.setenv("AUTOSCHED_RECORDS_DB", str(tmp_path / "db" / "records.jsonl"))
    assert object_cache().folder == str(tmp_path / "db" / oc.FOLDER_NAME)
    monkeypatch.setenv(oc.ENV_VAR, "0")
    assert object_cache() is None
    monkeypatch.setenv(oc.ENV_VAR, "1.5")
    assert object_cache().max_bytes == 3 << 19
    monkeypatch.setenv(oc.ENV_VAR, "lots")
    with pytest.raises(ValueError, match="AUTOSCHED_KERNEL_CACHE_MB='lots'.*MiB"):
        object_cache()
    assert not (tmp_path / "db").exists()


WRITER = '''
import hashlib, sys
from autosched.history.object_cache import ObjectCache
cache = ObjectCache(sys.argv[1])
for n in range(int(sys.argv[2])):
    key = hashlib.sha256(str(n % 8).encode()).hexdigest()
    cache.put(key, hashlib.sha256(key.encode()).digest() * 20000)   # 640 kB: many writes a file
    if n == 0:
        print("writing", flush=True)
'''


def _expected(key: str) -> bytes:
    import hashlib
    return hashlib.sha256(key.encode()).digest() * 20000


def test_concurrent_and_killed_writers_never_leave_a_bad_entry(tmp_path):
    folder = tmp_path / "kernels"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    run = [sys.executable, "-c", textwrap.dedent(WRITER), str(folder)]
    writers = [subprocess.Popen(run + ["40"], env=env, stdout=subprocess.PIPE) for _ in range(2)]
    reader, seen = ObjectCache(folder), 0
    while any(w.poll() is None for w in writers):
        for entry in folder.glob("*.o") if folder.exists() else ():
            data = reader.get(entry.name[:-2])
            assert data is None or data == _expected(entry.name[:-2])   # a whole entry or a miss
            seen += data is not None
    assert all(w.wait() == 0 for w in writers)
    assert not reader.stats["damaged"]
    victim = subprocess.Popen(run + ["1000000"], env=env, stdout=subprocess.PIPE)
    assert victim.stdout.readline() == b"writing\n"
    time.sleep(0.3)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    entries = list(folder.glob("*.o"))
    assert len(entries) == 8
    for entry in entries:
        assert ObjectCache(folder).get(entry.name[:-2]) == _expected(entry.name[:-2])


def test_a_model_of_cached_kernels_compiles_into_an_artifact(tmp_path, llvm_compiles):
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("compiling an artifact links it with the system's C compiler (cc)")
    from autosched.deploy import compile_executor
    from autosched.runtime import Model
    part = tiny_model()
    states = {w.workload_key: tiled(w.dag) for w in part.tasks}
    executor(part, tmp_path / "records.jsonl", states=states)
    cached = executor(part, tmp_path / "records.jsonl", states=states)
    assert cached.object_cache.stats["hits"] == len(cached.programs)
    assert all(p.kernel.llvm_ir is None for p in cached.programs.values())   # (loaded: no IR of their own)
    before = llvm_compiles[0]
    aso = compile_executor(cached, tmp_path / "tiny.aso")
    assert llvm_compiles[0] - before == len(cached.programs)   # each kernel's code generated again, once
    inputs = part.graph.random_inputs(1)
    model = Model(aso)
    np.testing.assert_allclose(model.run({n.name: x for n, x in zip(part.graph.inputs, inputs)})[0],
                               cached.run(*inputs)[0], rtol=1e-5, atol=1e-5)
