"""Which instruction-set extensions compiled code needs, and whether this CPU has them.

The compiler records LLVM's feature names (``+avx2,+fma,...``); Linux names the same
extensions in ``/proc/cpuinfo``'s flags, mostly alike (``sse4.1`` is ``sse4_1``, ``bmi`` is
``bmi1``). Only extensions that change which instructions the code may contain are mapped:
LLVM features that are tuning hints or always present on x86-64 (``+64bit``, ``+cx8``,
``+prfchw``...) have no flag to check and are left out.
"""
from __future__ import annotations

import platform

#: LLVM feature -> /proc/cpuinfo flag, for the extensions that add instructions
_LLVM_TO_CPUINFO = {
    "sse": "sse", "sse2": "sse2", "sse3": "pni", "ssse3": "ssse3", "sse4.1": "sse4_1", "sse4.2": "sse4_2",
    "sse4a": "sse4a", "popcnt": "popcnt", "lzcnt": "abm", "bmi": "bmi1", "bmi2": "bmi2", "movbe": "movbe",
    "adx": "adx", "aes": "aes", "pclmul": "pclmulqdq", "sha": "sha_ni", "gfni": "gfni", "vaes": "vaes",
    "vpclmulqdq": "vpclmulqdq", "f16c": "f16c", "fma": "fma", "avx": "avx", "avx2": "avx2",
    "avxvnni": "avx_vnni", "avx512f": "avx512f", "avx512cd": "avx512cd", "avx512bw": "avx512bw",
    "avx512dq": "avx512dq", "avx512vl": "avx512vl", "avx512ifma": "avx512ifma", "avx512vbmi": "avx512vbmi",
    "avx512vbmi2": "avx512_vbmi2", "avx512vnni": "avx512_vnni", "avx512bitalg": "avx512_bitalg",
    "avx512vpopcntdq": "avx512_vpopcntdq", "avx512bf16": "avx512_bf16", "avx512fp16": "avx512_fp16",
    "avx512vp2intersect": "avx512_vp2intersect", "amx-tile": "amx_tile", "amx-int8": "amx_int8",
    "amx-bf16": "amx_bf16",
}


def required_flags(llvm_features: list[str]) -> list[str]:
    """The cpuinfo flags of the enabled LLVM features (``"+avx2"``) that add instructions,
    among those this machine's kernel reports (what LLVM reads from the CPU and what the
    operating system enables may differ under a hypervisor: the compiling machine must pass
    its own check)."""
    names = (f[1:] for f in llvm_features if f.startswith("+"))
    flags = {_LLVM_TO_CPUINFO[n] for n in names if n in _LLVM_TO_CPUINFO}
    have = host_flags()
    return sorted(flags if have is None else flags & have)


def machine() -> str:
    """This machine's architecture as the manifest names it (``x86_64``, ``aarch64``)."""
    return platform.machine().lower().replace("amd64", "x86_64")


def host_flags() -> set[str] | None:
    """This CPU's flags from /proc/cpuinfo; None where there is no such file (not Linux)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.partition(":")[2].split())
    except OSError:
        return None
    return None


def missing(cpu: dict) -> list[str]:
    """What this machine lacks of a manifest's ``cpu`` entry: its architecture, or the
    extensions (cpuinfo names) the code uses; [] when it can run the code."""
    arch = cpu.get("arch")
    if arch and arch != machine():
        return [f"a {arch} processor (this is {machine()})"]
    have = host_flags()
    if have is None:
        return []
    return [f for f in cpu.get("flags", []) if f not in have]
