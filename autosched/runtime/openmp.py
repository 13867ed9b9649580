"""How idle OpenMP threads wait for the next parallel region: a process-wide setting.

libgomp reads it from the environment once, when it is loaded (by the first model, or by
anything else: ``ir``, PyTorch). ``"short"`` spins 1000 times (GOMP_SPINCOUNT=1000: about
50 µs on AMD EPYC, 11 µs on an Intel Xeon whose PAUSE is shorter, where the tuner's executor
spins 50 µs by the clock, ``ir.cpu.spin``, which needs the compiler): long enough to go from
one kernel to the next without a wake-up, short enough not to steal a core from another
process. ``"active"`` spins without end (OMP_WAIT_POLICY=active: the lowest latency on a
machine of one's own), ``"passive"`` sleeps at once (OMP_WAIT_POLICY=passive: for a server
whose cores do other work between requests).
"""
from __future__ import annotations

import os

SPIN_POLICIES = {
    "short": {"GOMP_SPINCOUNT": "1000", "OMP_WAIT_POLICY": None},
    "active": {"OMP_WAIT_POLICY": "active", "GOMP_SPINCOUNT": None},
    "passive": {"OMP_WAIT_POLICY": "passive", "GOMP_SPINCOUNT": None},
}


def libgomp_loaded() -> bool:
    """Whether libgomp is mapped into this process already."""
    try:
        with open("/proc/self/maps") as f:
            return any("libgomp" in line for line in f)
    except OSError:
        return False


def _current_policy() -> str | None:
    for name, env in SPIN_POLICIES.items():
        if all(os.environ.get(k) == v for k, v in env.items()):
            return name
    return None


def set_spin_policy(policy: str | None) -> None:
    """Choose the policy before libgomp loads; None keeps the environment's (and where it
    says nothing, "short"). Asking for another policy once libgomp is loaded is an error,
    since it would not take effect."""
    if policy is not None and policy not in SPIN_POLICIES:
        raise ValueError(f"spin policy {policy!r}: expected one of {sorted(SPIN_POLICIES)} or None")
    loaded = libgomp_loaded()
    if policy is None:
        if not loaded and "OMP_WAIT_POLICY" not in os.environ:
            os.environ.setdefault("GOMP_SPINCOUNT", SPIN_POLICIES["short"]["GOMP_SPINCOUNT"])
        return
    if loaded:
        current = _current_policy()
        if current != policy:
            raise RuntimeError(f"spin policy {policy!r}: OpenMP (libgomp) is loaded in this process already with "
                               f"{current or 'the policy of its environment'!r}, which it keeps; choose the policy "
                               "before the first model (or torch, or the tuner) is loaded, or set OMP_WAIT_POLICY")
        return
    for key, value in SPIN_POLICIES[policy].items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
