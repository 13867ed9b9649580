"""The import graph of the packages, walked from the source of every module: no module
imports itself back through others (also not from inside a function, the usual way to hide
a cycle), the dependency rule ``ir <- sketch_rules <- evolution <- task_scheduler <-
autosched`` holds, and each package imports on its own in a fresh interpreter."""
import ast
import os
import subprocess
import sys

import networkx as nx
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: the packages in dependency order: each may import only itself and those before it
PACKAGES = ("ir", "sketch_rules", "evolution", "task_scheduler", "autosched")


def _modules() -> dict[str, str]:
    """Every module of the packages: dotted name -> file."""
    out = {}
    for package in PACKAGES:
        for folder, _, files in os.walk(os.path.join(ROOT, package)):
            for name in files:
                if name.endswith(".py"):
                    rel = os.path.relpath(os.path.join(folder, name), ROOT)[:-3].replace(os.sep, ".")
                    out[rel[:-len(".__init__")] if rel.endswith(".__init__") else rel] = os.path.join(folder, name)
    return out


MODULES = _modules()


def _is_package(module: str) -> bool:
    return MODULES[module].endswith("__init__.py")


def _runtime_imports(tree: ast.AST):
    """Import nodes that run: all of them but those under ``if TYPE_CHECKING:``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", getattr(node.test, "attr", "")) == "TYPE_CHECKING":
            node.body = []
    return [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]


def _targets(module: str, node) -> list[str]:
    """The modules of the packages that an import statement in ``module`` loads."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        if node.level:
            base = module.split(".") if _is_package(module) else module.split(".")[:-1]
            base = base[:len(base) - (node.level - 1)]
            prefix = ".".join(base + ([node.module] if node.module else []))
        else:
            prefix = node.module
        names = [f"{prefix}.{alias.name}" if f"{prefix}.{alias.name}" in MODULES else prefix for alias in node.names]
    return [n for n in names if n in MODULES]


def _loaded(module: str, target: str) -> list[str]:
    """What importing ``target`` from ``module`` runs: ``target`` and the packages above it
    that are not already being imported around ``module`` (its own ancestors)."""
    parts = target.split(".")
    mine = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)
            if ".".join(parts[:i]) != ".".join(mine[:i]) or i > len(mine) - (0 if _is_package(module) else 1)]


def import_graph() -> nx.DiGraph:
    graph = nx.DiGraph()
    for module, path in MODULES.items():
        graph.add_node(module)
        with open(path) as f:
            tree = ast.parse(f.read(), path)
        for node in _runtime_imports(tree):
            for target in _targets(module, node):
                for loaded in _loaded(module, target):
                    if loaded != module and loaded in MODULES:
                        graph.add_edge(module, loaded, line=node.lineno)
    return graph


def test_no_module_imports_itself_back():
    graph = import_graph()
    cycles = list(nx.simple_cycles(graph))
    shown = [" -> ".join(c + [c[0]]) for c in sorted(cycles, key=len)[:5]]
    assert not cycles, f"{len(cycles)} import cycle(s), e.g. {shown}"


def test_the_dependency_rule_holds():
    rank = {p: i for i, p in enumerate(PACKAGES)}
    wrong = [f"{a} imports {b} (line {d['line']})" for a, b, d in import_graph().edges(data=True)
             if rank[b.split(".")[0]] > rank[a.split(".")[0]]]
    assert not wrong, wrong


def test_the_check_sees_cycles_and_imports_in_functions():
    """The checker itself: relative imports resolve, imports inside functions count, and
    importing a module of another subpackage runs that subpackage's ``__init__``."""
    tree = ast.parse("from . import expr as E\nfrom .steps import Step\ndef f():\n    from ..workers import pool\n")
    got = [t for n in _runtime_imports(tree) for t in _targets("ir.state", n)]
    assert got == ["ir.expr", "ir.steps"]
    tree = ast.parse("def f():\n    from ..workers import WorkerPool\n")
    assert [t for n in _runtime_imports(tree) for t in _targets("autosched.measure.builder", n)] == \
        ["autosched.workers"]
    assert _loaded("autosched.history.records", "autosched.measure.common") == \
        ["autosched.measure", "autosched.measure.common"]
    assert _loaded("ir.state", "ir.steps") == ["ir.steps"]
    assert _loaded("evolution.islands", "ir.steps") == ["ir", "ir.steps"]


@pytest.mark.parametrize("package", PACKAGES)
def test_each_package_imports_alone(package):
    """In a fresh interpreter, the package first (with what the static graph says it loads,
    a cycle the walk above missed would fail here)."""
    out = subprocess.run([sys.executable, "-c", f"import {package}"], capture_output=True, text=True, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")})
    assert out.returncode == 0, out.stderr


#: the back ends: the subpackages of ir with a ``backend`` module (one folder per target)
BACK_ENDS = sorted({m.rsplit(".", 1)[0] for m in MODULES if m.startswith("ir.") and m.endswith(".backend")
                    and m.count(".") == 2})


def _back_end(module: str) -> str | None:
    return next((b for b in BACK_ENDS if module == b or module.startswith(b + ".")), None)


def _private_imports():
    """(importing module, imported module, name, line) of every ``from M import _name``."""
    for module, path in MODULES.items():
        with open(path) as f:
            tree = ast.parse(f.read(), path)
        for node in _runtime_imports(tree):
            if not isinstance(node, ast.ImportFrom):
                continue
            for target in _targets(module, node):
                for alias in node.names:
                    if alias.name.startswith("_") and not alias.name.startswith("__"):
                        yield module, target, alias.name, node.lineno


def test_the_back_ends_are_folders_of_ir():
    assert {"ir.cpu", "ir.cuda"} <= set(BACK_ENDS), BACK_ENDS


def test_no_back_end_imports_another_or_a_private_name_from_outside():
    """A back end builds on what the back ends share (``ir.llvm_codegen``, ``ir.lower``...)
    and on nothing of another back end; the shared modules import no back end; nobody
    imports a private name across a back end's border."""
    wrong = []
    for a, b, d in import_graph().edges(data=True):
        mine, theirs = _back_end(a), _back_end(b)
        if theirs is not None and mine is not None and mine != theirs:
            wrong.append(f"{a} imports {b} (line {d['line']}), of another back end")
        if theirs is not None and mine is None and a.startswith("ir.") and a != "ir":
            wrong.append(f"{a} (shared by the back ends) imports {b} (line {d['line']})")
    for module, target, name, line in _private_imports():
        if _back_end(module) != _back_end(target) and (_back_end(module) or _back_end(target)):
            wrong.append(f"{module} imports the private {target}.{name} (line {line})")
    assert not wrong, wrong


def test_the_back_end_check_sees_a_private_import(tmp_path, monkeypatch):
    """The checker itself: a private name imported from another back end is found."""
    fake = tmp_path / "gpu_thing.py"
    fake.write_text("from ..cpu.codegen import _secret\n")
    monkeypatch.setitem(MODULES, "ir.cuda.gpu_thing", str(fake))
    found = [(m, t, n) for m, t, n, _ in _private_imports() if m == "ir.cuda.gpu_thing"]
    assert found == [("ir.cuda.gpu_thing", "ir.cpu.codegen", "_secret")]


def test_nobody_compares_target_names():
    """Callers ask a task's target (its back end, its search space), never its spelling:
    no module compares a value with a target's name."""
    import re
    compare = re.compile(r"""[=!]= *['"](gpu|cuda|cpu|llvm)['"]|['"](gpu|cuda|cpu|llvm)['"] *[=!]=""")
    found = [f"{module} line {n}: {line.strip()}" for module, path in MODULES.items()
             for n, line in enumerate(open(path).read().splitlines(), 1) if compare.search(line)]
    assert not found, found
