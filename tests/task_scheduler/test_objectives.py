"""The objective functions of Table 2: values, gradients (against finite differences) and
the preference each one gives the scheduler."""
import numpy as np
import pytest

from task_scheduler import (FunctionObjective, GeometricMeanSpeedup, LatencyRequirement, PerTaskEarlyStopping,
                            WeightedSum, make_objective)

# two networks: A uses tasks 0 (x2) and 1; B uses tasks 1 and 2 (x3)
W = np.array([[2.0, 1.0, 0.0],
              [0.0, 1.0, 3.0]])
G = np.array([1e-3, 2e-3, 0.5e-3])        # task latencies: A = 4 ms, B = 3.5 ms


def numeric_gradient(obj, g, histories=None, h=1e-9):
    out = np.zeros_like(g)
    for i in range(len(g)):
        up, down = g.copy(), g.copy()
        up[i] += h
        down[i] -= h
        out[i] = (obj.value(up, histories) - obj.value(down, histories)) / (2 * h)
    return out


def test_f1_weighted_sum():
    f = WeightedSum(W)
    np.testing.assert_allclose(f.network_latencies(G), [4e-3, 3.5e-3])
    assert f(G) == pytest.approx(7.5e-3)
    np.testing.assert_allclose(f.gradient(G), [2, 2, 3])
    np.testing.assert_allclose(f.gradient(G), numeric_gradient(f, G), rtol=1e-6)


def test_f2_stops_spending_on_a_network_that_met_its_requirement():
    f = LatencyRequirement(W, requirements=[5e-3, 1e-3])       # A (4 ms) meets 5 ms, B (3.5 ms) misses 1 ms
    assert f(G) == pytest.approx(5e-3 + 3.5e-3)
    np.testing.assert_allclose(f.gradient(G), [0, 1, 3])          # task 0 is A's alone: no more time for it
    np.testing.assert_allclose(f.gradient(G), numeric_gradient(f, G), rtol=1e-6)
    met = LatencyRequirement(W, requirements=[5e-3, 4e-3])
    np.testing.assert_allclose(met.gradient(G), [0, 0, 0])
    with pytest.raises(ValueError, match="requirements"):
        LatencyRequirement(W, requirements=[1.0])


def test_f3_geometric_mean_speedup_prefers_relative_gains():
    refs = np.array([8e-3, 7e-3])                                   # both networks at 2x speedup
    f = GeometricMeanSpeedup(W, refs)
    assert f(G) == pytest.approx(-2.0)
    np.testing.assert_allclose(f.gradient(G), numeric_gradient(f, G), rtol=1e-5)
    # one task per network, identical weights; network 0 is 10x faster than network 1 with the
    # same reference: a millisecond off network 0 is a larger relative gain, so f3 prefers it
    f = GeometricMeanSpeedup(np.eye(2), [10e-3, 10e-3])
    grad = f.gradient(np.array([1e-3, 10e-3]))
    assert grad[0] == pytest.approx(10 * grad[1])
    assert (grad > 0).all()
    np.testing.assert_allclose(WeightedSum(np.eye(2)).gradient([1e-3, 10e-3]), [1, 1])   # f1 sees no difference


def test_f4_freezes_tasks_that_stopped_improving():
    f = PerTaskEarlyStopping(W, patience=3)
    histories = [[3e-3, 2e-3, 1.5e-3, 1e-3],          # still improving
                 [2e-3, 2e-3, 2e-3, 2e-3],            # stalled for 3 rounds
                 [1e-3, 0.5e-3]]                      # too few rounds to tell
    np.testing.assert_allclose(f.gradient(G, histories), [2, 0, 3])
    assert f(G, histories) == pytest.approx(WeightedSum(W)(G))
    np.testing.assert_allclose(f.gradient(G), [2, 2, 3])          # without histories: nothing frozen


def test_user_callable_objective_is_differentiated_numerically():
    def worst_network(g):
        return float(np.max(W @ g))
    f = FunctionObjective(worst_network, W)
    assert f(G) == pytest.approx(4e-3)
    np.testing.assert_allclose(f.gradient(G), [2, 1, 0], rtol=1e-6)   # only network A matters
    lin = FunctionObjective(lambda g: float(np.sum(W @ g)), W)
    np.testing.assert_allclose(lin.gradient(G), WeightedSum(W).gradient(G), rtol=1e-6)


def test_make_objective_by_name_and_errors():
    assert isinstance(make_objective(None, W), WeightedSum)
    assert isinstance(make_objective("latency", W), WeightedSum)
    assert isinstance(make_objective("requirement", W, latency_requirements=[1, 1]), LatencyRequirement)
    assert isinstance(make_objective("speedup", W, reference_latencies=[1, 1]), GeometricMeanSpeedup)
    assert isinstance(make_objective("f4", W, patience=2), PerTaskEarlyStopping)
    assert isinstance(make_objective(lambda g: g.sum(), W), FunctionObjective)
    with pytest.raises(ValueError, match="latency_requirements"):
        make_objective("requirement", W)
    with pytest.raises(ValueError, match="unknown objective"):
        make_objective("fastest", W)
    with pytest.raises(ValueError, match="3 tasks"):
        WeightedSum(W)([1.0, 2.0])
