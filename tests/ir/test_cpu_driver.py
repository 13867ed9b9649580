"""The graph executor's native driver: kernels run in order in one call, and a kernel
that fails stops the run with its own error."""
import numpy as np
import pytest

import ir
from ir.cpu.driver import NativeDriver


def _gather_kernel():
    data = ir.placeholder((10, 6), name="D")
    index = ir.placeholder((4,), "int64", name="I")
    out = ir.compute((4, 6), lambda i, j: data[index[i], j], name="O")
    return ir.build(ir.ComputeDAG([data, index, out]))


def test_the_driver_runs_every_kernel_in_order():
    kernel = _gather_kernel()
    data = np.arange(60, dtype="float32").reshape(10, 6)
    mid, out = np.zeros((4, 6), "float32"), np.zeros((4, 6), "float32")
    index_a, index_b = np.array([9, 0, 3, 3]), np.array([1, 1, 2, 0])
    driver = NativeDriver([kernel.native_call(data, index_a, mid), kernel.native_call(data, index_b, out)])
    driver.run()
    np.testing.assert_array_equal(mid, data[index_a])
    np.testing.assert_array_equal(out, data[index_b])
    assert driver.seconds_per_run(3) > 0


def test_a_failing_kernel_stops_the_run_with_its_error():
    kernel = _gather_kernel()
    data = np.ones((10, 6), "float32")
    first, second = np.zeros((4, 6), "float32"), np.zeros((4, 6), "float32")
    driver = NativeDriver([kernel.native_call(data, np.array([0, 1, 2, 3]), first),
                           kernel.native_call(data, np.array([0, 1, 99, 3]), second)])  # 99: outside D
    with pytest.raises(IndexError, match="D"):
        driver.run()
    assert first.sum() == 24  # the first kernel ran
    with pytest.raises(IndexError, match="D"):
        driver.seconds_per_run(2)
