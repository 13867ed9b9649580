"""The cuda target's network run (``ir.cuda.sequence.DeviceSequence``) without a GPU: the
device buffers are stood in for by host arrays, the kernels by a doubling, so that what is
checked is the wiring: one device buffer per host array (a reshaped view shares its
array's), every kernel's own global buffers, the weights uploaded once when the sequence
is made, the inputs at ``write_inputs`` and the outputs back at ``read_outputs`` only."""
from types import SimpleNamespace

import numpy as np

from ir.cuda import sequence


class FakeBuffer:
    """Device memory as a host array, counting the copies."""
    uploads = 0

    def __init__(self, nbytes):
        self.data = np.full(nbytes // 4, np.nan, np.float32)

    def upload(self, array):
        FakeBuffer.uploads += 1
        self.data[:] = np.asarray(array, np.float32).reshape(-1)

    def download(self, out):
        out.reshape(-1)[:] = self.data


class Doubler:
    """A program of two kernels: tmp = 2 * x (its own global buffer), out = tmp + w."""

    def __init__(self, n):
        self.dag = SimpleNamespace(tensors=[SimpleNamespace(name="x"), SimpleNamespace(name="w"),
                                            SimpleNamespace(name="out")])
        self.plan = SimpleNamespace(buffers=(("x", "float32", n), ("w", "float32", n), ("out", "float32", n),
                                             ("tmp", "float32", n)))
        self.loaded = self.launched = 0

    def load(self):
        self.loaded += 1

    def launch(self, buffers):
        self.launched += 1
        buffers["tmp"].data[:] = 2 * buffers["x"].data
        buffers["out"].data[:] = buffers["tmp"].data + buffers["w"].data

    def synchronize(self):
        pass


def test_a_device_sequence_wires_buffers_and_copies_only_at_its_ends(monkeypatch):
    monkeypatch.setattr(sequence, "DeviceBuffer", FakeBuffer)
    FakeBuffer.uploads = 0
    x, w, mid, out = (np.zeros(4, np.float32) for _ in range(4))
    w[:] = [1, 2, 3, 4]
    first, second = Doubler(4), Doubler(4)
    calls = [(first, (x, w, mid)), (second, (mid.reshape(2, 2).reshape(-1), w, out))]  # a view of mid: the same
    seq = sequence.DeviceSequence(calls, [x], [out])
    made = FakeBuffer.uploads
    assert made == 4 and first.loaded == second.loaded == 1  # x, w, mid, out once each (the weights among them)
    x[:] = [1, 1, 2, 2]
    seq.write_inputs()
    seq.run()
    seq.run()
    assert not out.any()  # nothing comes back before read_outputs
    seq.read_outputs()
    np.testing.assert_array_equal(out, 2 * (2 * x + w) + w)
    assert FakeBuffer.uploads == made + 1 and first.launched == second.launched == 2
