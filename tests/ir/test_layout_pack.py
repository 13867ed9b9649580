"""``LayoutPlan.pack`` against its definition, element by element: every packed entry is
the original entry its affine forms name, or zero where a padded tile runs past the edge."""
import itertools

import numpy as np

import ir
from ir.layout import plan_all
from autosched import ops


def reference_pack(plan, array):
    out = np.zeros(plan.shape, array.dtype)
    for at in itertools.product(*(range(n) for n in plan.shape)):
        index = [const + sum(coef * (at[pos] + plan.lows[pos]) for pos, coef in terms) for const, terms in plan.forms]
        if all(0 <= i < n for i, n in zip(index, plan.original_shape)):
            out[at] = array[tuple(index)]
    return out


def test_pack_is_its_definition_with_padded_and_fused_atoms():
    w = ops.workload("conv2d", 1, 6, 6, 5, 7, 3, padding=1)
    dag = ir.ComputeDAG(w.tensors)
    state = dag.init_state()
    conv = next(i for i, st in enumerate(state.stages) if getattr(st.op, "reduce_axis", ()))
    state = state.split(conv, 3, [4])                                     # 7 channels in tiles of 4
    names = [it.name for it in state.stages[conv].iters]
    state = state.fuse(conv, [names[-3], names[-2]])                      # rh, rw as one loop: // and % atoms
    plans = list(plan_all(state).values())
    assert plans and any(np.prod(p.shape) > np.prod(p.original_shape) for p in plans)
    rng = np.random.default_rng(0)
    for plan in plans:
        array = rng.standard_normal(plan.original_shape).astype(np.float32)
        packed = plan.pack(array)
        assert packed.flags.c_contiguous and packed.shape == tuple(plan.shape)
        np.testing.assert_array_equal(packed, reference_pack(plan, array))
