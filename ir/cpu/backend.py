"""The host CPU back end ("llvm -mcpu=NAME"): lowering with layout rewrite, LLVM IR with
explicit vector code and libgomp threads (``ir.cpu.codegen``), O3 for this CPU's name
and features, JIT or object code (``ir.cpu.runtime``), timed in native code. Given an
object store (``build(..., objects=)``), a build loads the kernel's object code when the
store has it under its key (``ir.cpu.object_key``) and stores what it compiles."""
from __future__ import annotations

from ..backend import Backend
from ..layout import plan_all
from ..lower import Lowering, lower
from ..target import HardwareParams, Target
from .codegen import generate
from .driver import NativeDriver
from .object_key import object_key
from .prefetch import add_prefetches
from .runtime import CompiledModule, Kernel, ObjectModule, compile_object, host_cpu, load_kernel, native_timer


def host_hardware() -> HardwareParams:
    _, features = host_cpu()
    lanes = 16 if "+avx512f" in features else 8 if "+avx" in features else 4
    return HardwareParams(num_cores=1, vector_lanes=lanes).with_host_cores()


class CPUBackend(Backend):
    name = "llvm"
    aliases = ("cpu",)
    search_space = "cpu"
    layout_rewrite = True
    base_model = True
    host_memory = True

    def parse(self, options: dict[str, str], hardware) -> Target:
        unknown = set(options) - {"mcpu"}
        if unknown:
            raise ValueError(f"target 'llvm' takes -mcpu=NAME only, got -{sorted(unknown)[0]}")
        if hardware is not None and hardware.is_gpu:
            raise ValueError(f"target 'llvm' needs CPU hardware parameters, got GPU ones ({hardware})")
        return Target(self.name, hardware or host_hardware(), options.get("mcpu") or host_cpu()[0])

    def spelling(self, target: Target) -> str:
        return f"llvm -mcpu={target.device}"

    def foreign(self, target: Target) -> str | None:
        here = host_cpu()[0]
        if target.device == here:
            return None
        return (f"this machine is 'llvm -mcpu={here}' but the task targets {str(target)!r}: its programs must be "
                "built and run on machines of the target's CPU")

    def limits_violation(self, state, hardware) -> str | None:
        """A vectorised loop longer than ``hardware.max_vectorize_size``: sampling never makes
        one, but a tile-size mutation or a crossover can lengthen a loop vectorised before
        (a consumer's loop that follows its producer's tiles), into a program no log could
        give back (``ir.step_limits`` caps what a record may vectorise)."""
        for st in state.stages:
            if st.is_placeholder or st.compute_at == "inline":
                continue
            for it in st.iters:
                if it.annotation == "vectorize" and it.extent > hardware.max_vectorize_size:
                    return (f"'{st.name}' vectorises a loop of {it.extent} lanes "
                            f"(at most {hardware.max_vectorize_size})")
        return None

    def lowering(self, state, hardware, layout_rewrite: bool) -> Lowering:
        return Lowering(state, layout_rewrite)

    def build(self, dag, state, name: str, target, emit: str, layout_rewrite: bool, objects=None) -> Kernel:
        if emit != "kernel":
            raise ValueError(f"emit={emit!r} is for target 'cuda'; a CPU build returns a Kernel")
        key = object_key(dag, state, name, layout_rewrite) if objects is not None else None
        if key is not None:
            data = objects.get(key)
            if data is not None:   # no lowering, no LLVM: only the layouts that calling it needs
                layouts = {p.tensor_name: p for p in plan_all(state).values()} if layout_rewrite else {}
                return load_kernel(dag, data, name, layouts, state, layout_rewrite)
        lowered = lower(state, name, layout_rewrite)
        text = generate(add_prefetches(lowered), name)
        if key is None:
            compiled = CompiledModule(text, name)
        else:
            data = compile_object(text)
            objects.put(key, data)
            compiled = ObjectModule(data, name)
        return Kernel(dag, state, compiled, lowered.layouts, lowered, text, layout_rewrite)

    def compile(self, target, state, name: str, layout_rewrite: bool) -> tuple[bytes, dict]:
        lowered = lower(state, name, layout_rewrite)
        return compile_object(generate(add_prefetches(lowered), name)), dict(lowered.layouts or {})

    def load(self, dag, artefact: bytes, name: str, layouts: dict) -> Kernel:
        return load_kernel(dag, artefact, name, layouts)

    def timer(self, kernel, *arrays):
        return native_timer(kernel, *arrays)

    def sequence(self, calls, inputs, outputs, emulate: bool = False) -> NativeDriver:
        if emulate:
            raise ValueError("emulate=True does not apply to target 'llvm': its kernels run on this CPU already")
        return NativeDriver([kernel.native_call(*args) for kernel, args in calls])


CPU = CPUBackend()
