"""From kernels to one shared library: position-independent objects from llvmlite, the
driver in C, linked by the system's C compiler driver (``cc``).

Why ``cc``: a shared library that the system's dynamic loader (and so any C program, and
ctypes) opens needs a linker; writing ELF dynamic sections ourselves would be a linker of our
own. The compiler machine has the tuner installed and so, almost always, a C toolchain; the
machines that run the artifact need none. Where there is none, ``compile`` says so.
"""
from __future__ import annotations

import functools
import os
import shutil
import subprocess

import llvmlite.binding as llvm

from ir.cpu import runtime as ir_runtime
from ir.cpu.codegen import generate

LOADER_SOURCE = os.path.join(os.path.dirname(__file__), "loader.c")
INCLUDE_DIR = os.path.join(os.path.dirname(os.path.dirname(__file__)), "runtime", "include")


class NoCCompiler(RuntimeError):
    """No C compiler driver to link the artifact with."""


class LinkError(RuntimeError):
    """The C compiler driver failed to build the artifact's library (its message follows)."""


def c_compiler() -> str:
    """The C compiler driver: $CC, else cc, gcc or clang on the PATH."""
    for name in filter(None, (os.environ.get("CC"), "cc", "gcc", "clang")):
        path = shutil.which(name)
        if path:
            return path
    raise NoCCompiler("compiling a model into an artifact links a shared library with the system's C compiler "
                      "driver, and none was found (no $CC, cc, gcc or clang on the PATH); install one "
                      "(e.g. apt-get install gcc) on the machine that compiles: the machines that run the "
                      "artifact need none")


@functools.cache
def _pic_target_machine():
    """The host's target machine, as the JIT's (``ir.cpu.runtime``), but for position-independent
    code, which a shared library needs."""
    name, features = ir_runtime.host_cpu()
    return llvm.Target.from_default_triple().create_target_machine(cpu=name, features=features, opt=3,
                                                                    reloc="pic", codemodel="default")


def kernel_object(kernel, symbol: str) -> bytes:
    """The object code of a built kernel (``ir.build``) with its functions named ``symbol``,
    ``symbol.error`` and ``symbol.timer``: its lowered program generated again under that
    name, optimised as the JIT optimises it."""
    return _pic_target_machine().emit_object(ir_runtime.optimize(generate(kernel.lowered, symbol)))


def link(objects: dict, plan_h: str, folder: str) -> bytes:
    """The shared library of the ``objects`` ({file name: bytes}) and the driver (``loader.c``
    with ``plan_h``), built in ``folder``; its bytes."""
    for name, data in objects.items():
        with open(os.path.join(folder, name), "wb") as f:
            f.write(data)
    with open(os.path.join(folder, "plan.h"), "w") as f:
        f.write(plan_h)
    out = os.path.join(folder, "model.so")
    command = [c_compiler(), "-shared", "-fPIC", "-O2", "-fopenmp", f"-I{INCLUDE_DIR}", f"-I{folder}",
               LOADER_SOURCE, *[os.path.join(folder, n) for n in objects], "-o", out, "-lm"]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise LinkError(f"linking the artifact failed ({' '.join(command[:2])} ... exit {done.returncode}):\n"
                           f"{done.stderr.strip()[-4000:]}")
    with open(out, "rb") as f:
        return f.read()
