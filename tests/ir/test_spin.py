"""The OpenMP spin count: the count that spins about SPIN_SECONDS on this CPU (ir.cpu.spin)."""
import pytest

from ir.cpu import spin


@pytest.mark.parametrize("pause, count", [(50e-9, 1000), (11e-9, 4545), (1e-12, spin.MAX_SPIN_COUNT),
                                          (1e-6, spin.MIN_SPIN_COUNT), (None, spin.DEFAULT_SPIN_COUNT)])
def test_the_count_spins_spin_seconds_within_bounds(monkeypatch, pause, count):
    monkeypatch.setattr(spin, "pause_seconds", lambda: pause)
    assert spin.spin_count() == count


def test_a_pause_is_timed_on_x86_as_nanoseconds():
    import llvmlite.binding as llvm
    pause = spin.pause_seconds()
    if not llvm.get_default_triple().startswith("x86_64"):
        assert pause is None
    else:
        assert 1e-10 < pause < 1e-6      # PAUSE: a few to a few hundred cycles
