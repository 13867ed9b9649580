"""What decides a kernel's machine code, as one key: the key of the compiled-kernel cache
(``ObjectStore``), so that a kernel compiled once is loaded, not compiled, the next time.

The key covers the computation (``ComputeDAG.canonical_text`` and the names of its tensors
and loops, which appear in the code's error messages), the program (its transform steps,
which replay to it exactly, and ``State.key``, its printed loop nest), the layout rewrite, the kernel's name, this CPU (LLVM's name,
features and triple), LLVM's version and pass settings, and the compiler itself: a digest
of the source of every module of the ``ir`` package, read once per process, so that any
change to lowering or code generation misses and no stale kernel is ever loaded.
"""
from __future__ import annotations

import functools
import hashlib
import os
import sys
from typing import Protocol

import llvmlite
import llvmlite.binding as llvm

from ..steps import steps_to_json
from . import runtime

_IR_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class ObjectStore(Protocol):
    """Where compiled kernels' object code is kept between processes
    (``autosched.history.object_cache.ObjectCache``); a miss is ``None``."""

    def get(self, key: str) -> bytes | None: ...

    def put(self, key: str, data: bytes) -> None: ...


@functools.cache
def compiler_version() -> str | None:
    """A digest of the ``ir`` package's source files, llvmlite's and LLVM's versions and
    Python's: what compiled the code. None where the sources are not there to read (an
    install of bytecode only): then nothing is cached, as no change could be seen."""
    digest = hashlib.sha256()
    sources = sorted(os.path.join(folder, name) for folder, _, names in os.walk(_IR_PACKAGE)
                     for name in names if name.endswith(".py"))
    if not sources:
        return None
    for path in sources:
        with open(path, "rb") as f:
            source = f.read()
        digest.update(f"{os.path.relpath(path, _IR_PACKAGE)}\0{len(source)}\0".encode() + source)
    digest.update(f"llvmlite {llvmlite.__version__} llvm {llvm.llvm_version_info} "
                  f"python {sys.version_info[:2]}".encode())
    return digest.hexdigest()


def object_key(dag, state, name: str, layout_rewrite: bool) -> str | None:
    """The cache key (64 hex digits) of ``state`` of ``dag`` compiled under ``name`` for this
    CPU, or None where the compiler's version cannot be told (``compiler_version``)."""
    version = compiler_version()
    if version is None:
        return None
    cpu, features = runtime.host_cpu()
    names = [(op.name, [ax.name for ax in getattr(op, "axis", ())], [ax.name for ax in getattr(op, "reduce_axis", ())])
             for op in dag.ops]
    material = "\n".join([
        version, llvm.get_process_triple(), cpu, features, f"slp={runtime.SLP_VECTORIZATION}",
        name, f"layout_rewrite={bool(layout_rewrite)}", dag.canonical_text(), repr(names), steps_to_json(state.steps),
        state.key,
    ])
    return hashlib.sha256(material.encode()).hexdigest()
