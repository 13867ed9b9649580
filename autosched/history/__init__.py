"""A tuning's history: what was measured, and what is known before measuring.

- ``records``: the tuning log (one measured program a JSON line; reading, the one appender
  ``append_records`` with the one treatment of a truncated last line, distilling), the one
  ranking of a workload's programs (``best_records``, by ``HasCosts.rank``), resuming a
  tuning (``resume``) and the best programs to re-apply (``HistoryBest``);
- ``apply``: ``apply_history_best``, the best recorded programs (or zero-trial ones) inside
  ``ir.build``;
- ``database``: the local records database every tuning appends to and learns from (a
  cache: a failure to use it is one warning; it reconciles with the log);
- ``base_model``: the cost model trained on many workloads' records (``autosched pretrain``;
  ``model_check`` checks a model file's trees before XGBoost reads it);
- ``zero_trial``: the program the base model ranks best, for a task never measured (the
  searches of many tasks over the cores; remembered in the records database);
- ``program_library``: the fastest measured programs of the base model's training workloads
  (``autosched library``), offered to the zero-trial choice of tasks of their family;
- ``object_cache``: the compiled-kernel cache beside the records database (a model's
  kernels' object code, checked before LLVM loads it, so that the next load compiles nothing).

Measurement hands results to it through callbacks and never imports it. Everything read
here may come from someone else: bounded, tolerant of unknown fields, never pickled.
"""
