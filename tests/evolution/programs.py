"""Shared by the search tests: a program checked against the numpy reference."""
import numpy as np

import ir


def check_computes(w, task, state):
    """Build ``state`` (a program of ``task``, the DAG of workload ``w``) and compare its
    outputs on random inputs with ``w``'s numpy reference."""
    kernel = ir.build(task.dag, state, layout_rewrite=True)
    inputs = w.random_inputs(np.random.default_rng(0))
    args = [kernel.pack(t.name, a) if t.name in kernel.layouts else a for t, a in zip(task.dag.inputs, inputs)]
    outputs = w.output_buffers()
    kernel(*args, *outputs)
    for got, want in zip(outputs, w.reference(inputs)):
        np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-4, err_msg=str(state))
