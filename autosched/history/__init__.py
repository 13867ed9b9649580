"""A tuning's history: what was measured, and what is known before measuring.

- ``records``: the tuning log (one measured program a JSON line; reading, the one appender
  ``append_lines``, distilling), the one ranking of a workload's programs (``ranked``),
  resuming a tuning (``resume``) and re-applying the best programs (``apply_history_best``);
- ``database``: the local records database every tuning appends to and learns from;
- ``base_model``: the cost model trained on many workloads' records (``autosched pretrain``);
- ``zero_trial``: the program the base model ranks best, for a task never measured.

Measurement hands results to it through callbacks and never imports it. Everything read
here may come from someone else: bounded, tolerant of unknown fields, never pickled.
"""
