"""Time allocation across tasks (Ansor section 6): the gradient-descent task scheduler and
its objective functions (the paper's Table 2).

- ``TaskScheduler``: warm-up round robin, then the task with the largest |∂f/∂t_i|
  (``gradient``: α, β, backward window, similar tasks, ε-greedy), per-task early stopping;
  a round-robin strategy for ablation; callbacks.
- ``first_round``: ``FirstRound``, a cheap first round of every task (its zero-trial
  program and a short search), and ``seed_from_family``: tasks of one operator family seed
  each other's search with their measured programs (``evolution.transfer``).
- ``objectives``: f1 ``WeightedSum``, f2 ``LatencyRequirement``, f3 ``GeometricMeanSpeedup``,
  f4 ``PerTaskEarlyStopping``, ``FunctionObjective`` for any callable of task latencies.

It depends on ``ir`` (tasks' DAGs) and ``evolution`` (search parameters, adapting programs
between tasks); policies and the measurer are passed in.
"""
from .gradient import (ALPHA, BACKWARD_WINDOW, BETA, EPS_GREEDY, NO_PROGRAM, backward_gradient, choose_task,
                       forward_gradient, group_best_flops, similarity_group_key, similarity_groups, task_gradients)
from .objectives import (OBJECTIVES, FunctionObjective, GeometricMeanSpeedup, LatencyRequirement, Objective,
                         PerTaskEarlyStopping, WeightedSum, make_objective)
from .first_round import FirstRound, family_seeds, seed_from_family
from .scheduler import STRATEGIES, TRANSFER_LIMIT, TaskScheduler, similarity_tag
from .callbacks import LogEstimatedLatency, PrintTableInfo

__all__ = ["ALPHA", "BACKWARD_WINDOW", "BETA", "EPS_GREEDY", "NO_PROGRAM", "backward_gradient", "choose_task",
           "forward_gradient", "group_best_flops", "similarity_group_key", "similarity_groups", "task_gradients",
           "OBJECTIVES", "FunctionObjective", "GeometricMeanSpeedup", "LatencyRequirement", "Objective",
           "PerTaskEarlyStopping", "WeightedSum", "make_objective",
           "FirstRound", "family_seeds", "seed_from_family", "STRATEGIES", "TRANSFER_LIMIT", "TaskScheduler", "similarity_tag", "LogEstimatedLatency", "PrintTableInfo"]
