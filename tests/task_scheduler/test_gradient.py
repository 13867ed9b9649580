"""The gradient approximation of the task scheduler, checked by hand on made-up histories,
and the choice of task that follows from it."""
import numpy as np
import pytest

from task_scheduler import (NO_PROGRAM, TaskScheduler, backward_gradient, choose_task, forward_gradient,
                            group_best_flops, similarity_group_key, similarity_groups, task_gradients)


def test_backward_gradient_uses_the_window():
    assert backward_gradient([9.0, 8.0, 6.0, 5.0], window=3) == pytest.approx((5.0 - 9.0) / 3)
    assert backward_gradient([9.0, 8.0, 6.0, 5.0, 4.0], window=3) == pytest.approx((4.0 - 8.0) / 3)
    assert backward_gradient([9.0, 8.0, 6.0], window=3) == 0.0       # not enough rounds yet
    assert backward_gradient([], window=3) == 0.0


def test_forward_gradient_is_the_optimistic_guess():
    # alone: g - g/t - g = -g/t
    assert forward_gradient(8.0, 4, 1e9, None, beta=2.0) == pytest.approx(-2.0)
    # a similar task reaches 1e12 FLOPS: beta * C / V = 2 * 1e9 / 1e12 = 2e-3, far below g - g/t
    assert forward_gradient(8.0, 4, 1e9, 1e12, beta=2.0) == pytest.approx(2e-3 - 8.0)
    # a slow similar task: the guess from it is worse than g - g/t, which wins
    assert forward_gradient(8.0, 4, 1e9, 1e6, beta=2.0) == pytest.approx(-2.0)


def test_similarity_groups_need_the_same_tag_and_flop_magnitude():
    # int(log_1.618(flops + 1)): 1e9 and 1.2e9 share a bin, 1e10 does not
    assert similarity_group_key("conv2d_nhwc", 1e9) == similarity_group_key("conv2d_nhwc", 1.2e9)
    assert similarity_group_key("conv2d_nhwc", 1e9) != similarity_group_key("conv2d_nhwc", 1e10)
    assert similarity_group_key("", 1e9) is None
    groups = similarity_groups(["conv", "conv", "dense", "conv", ""], [1e9, 1.2e9, 1e9, 1e10, 1e9])
    assert groups == [[0, 1], [0, 1], [2], [3], [4]]
    costs = [1e-3, 4e-3, 1e-3, 1e-3, 1e-3]
    assert group_best_flops(1, groups, costs, [1e9, 1.2e9, 1e9, 1e10, 1e9]) == pytest.approx(1e12)
    assert group_best_flops(2, groups, costs, [1e9, 1.2e9, 1e9, 1e10, 1e9]) is None
    # a similar task without a valid program does not count
    assert group_best_flops(0, groups, [2e-3, NO_PROGRAM, 1, 1, 1], [1e9, 1.2e9, 1, 1, 1]) == pytest.approx(5e11)


def hand_gradients(best, histories, rounds, flops, groups, dfdg, alpha=0.2, beta=2.0, window=3):
    """The paper's formula written out, independently of task_scheduler.gradient."""
    out = []
    for i in range(len(best)):
        h = histories[i]
        back = (h[-1] - h[-1 - window]) / window if len(h) > window else 0.0
        g_next = best[i] - best[i] / rounds[i]
        if len(groups[i]) > 1:
            v = max(flops[k] / best[k] for k in groups[i])
            g_next = min(g_next, beta * flops[i] / v)
        out.append(dfdg[i] * (alpha * back + (1 - alpha) * (g_next - best[i])))
    return np.array(out)


def make_scheduler(weights, flops, tags, **kw):
    tasks = [object() for _ in flops]
    return TaskScheduler(tasks, weights=np.asarray(weights, float), flops=flops, tags=tags,
                         names=[f"t{i}" for i in range(len(flops))], **kw)


def test_choice_on_hand_made_histories_matches_the_formula():
    # three tasks of one network: two similar convs and a dense
    weights = [[1, 2, 1]]
    flops = [2e8, 2e8, 5e7]
    tags = ["conv2d_nhwc", "conv2d_nhwc", "dense"]
    sched = make_scheduler(weights, flops, tags, eps_greedy=0.0)
    histories = [[4e-3, 3e-3, 2.5e-3, 2.4e-3], [5e-3, 5e-3], [1e-3, 0.9e-3, 0.9e-3, 0.9e-3, 0.9e-3]]
    for i, h in enumerate(histories):
        for cost in h:
            sched.record_round(i, cost, 8)
    best = [h[-1] for h in histories]
    rounds = [len(h) for h in histories]
    groups = [[0, 1], [0, 1], [2]]
    expected = hand_gradients(best, histories, rounds, flops, groups, dfdg=[1, 2, 1])
    np.testing.assert_allclose(sched.gradients(), expected, rtol=1e-12)
    assert (expected <= 0).all()
    # task 1: weight 2, slow for its flops while its twin is fast -> the largest |df/dt|
    assert int(np.argmin(expected)) == 1
    assert sched.next_task() == 1
    # the same numbers through the pure function
    np.testing.assert_allclose(task_gradients(best, histories, rounds, flops, groups, [1, 2, 1]), expected)


def test_a_stalled_task_loses_priority_to_an_improving_one():
    # equal weights and latencies; task 0 improved steadily, task 1 stalled for 4 rounds
    sched = make_scheduler([[1, 1]], [1e8, 1e8], ["", ""], eps_greedy=0.0, alpha=0.5)
    for cost in (8e-3, 6e-3, 4e-3, 2e-3):
        sched.record_round(0, cost, 1)
    for cost in (2e-3, 2e-3, 2e-3, 2e-3):
        sched.record_round(1, cost, 1)
    g = sched.gradients()
    assert g[0] == pytest.approx(0.5 * (2e-3 - 8e-3) / 3 + 0.5 * (-2e-3 / 4))
    assert g[1] == pytest.approx(0.5 * 0.0 + 0.5 * (-2e-3 / 4))
    assert sched.next_task() == 0


def test_choose_task_epsilon_greedy_and_ties():
    rng = np.random.default_rng(0)
    grads = [-1.0, -5.0, -2.0]
    assert choose_task(grads, [True, True, True], rng, eps_greedy=0.0) == 1
    assert choose_task(grads, [True, False, True], rng, eps_greedy=0.0) == 2      # dead tasks never chosen
    assert choose_task(grads, [False, False, False], rng) is None
    picks = [choose_task(grads, [True] * 3, np.random.default_rng(s), eps_greedy=1.0) for s in range(60)]
    assert set(picks) == {0, 1, 2}                                                   # always random
    picks = [choose_task([0.0, 0.0, 0.0], [True] * 3, np.random.default_rng(s), eps_greedy=0.0) for s in range(60)]
    assert set(picks) == {0, 1, 2}                                                   # ties: random
    # eps = 0.05: about one pick in twenty is random
    rng = np.random.default_rng(1)
    picks = [choose_task(grads, [True] * 3, rng, eps_greedy=0.05) for _ in range(2000)]
    share = sum(p != 1 for p in picks) / len(picks)
    assert 0.01 < share < 0.07   # 0.05 x 2/3 of the random picks land on another task
