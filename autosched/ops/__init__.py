"""autosched's operator library: tensor expressions of common operators, by name.

Two levels, as in TVM's topi:

- *Tensor functions* (``conv2d(data, weight, ...)``, ``softmax(x)``, ``pad(x, ...)``...) build
  compute stages from tensors; networks and subgraphs are composed from them.
- *Operators* (``OPERATORS[name]``, shapes and parameters -> [inputs..., outputs...]) make
  whole workloads; ``workload(name, *args, **kwargs)`` adds the numpy reference, the flop
  count and valid random inputs (see ``registry.Workload``). The same registry holds the
  node kinds of the network graph (``OPDEFS[kind]``, ``opdef(kind)``), each declared beside
  its tensor function; ``@elementwise_operator`` declares an elementwise operator's two
  uses at once::

      w = ops.workload("conv2d", 1, 56, 56, 64, 64, 3, stride=1, padding=1, layout="NHWC")
      kernel = ir.build(ir.ComputeDAG(w.tensors))
      inputs, outputs = w.random_inputs(np.random.default_rng(0)), w.output_buffers()
      kernel(*inputs, *outputs); np.testing.assert_allclose(outputs[0], w.reference(inputs)[0], ...)

Operators with a data layout take channel-first and channel-last ones (NCW/NWC, NCHW/NHWC,
NCDHW/NDHWC); channel-last data takes (*kernel, CI/groups, CO) weights, channel-first
(CO, CI/groups, *kernel). Compute stages carry TVM's tags (``conv2d_nhwc``, ``injective,pad``,
``elemwise``, ``broadcast``, ``comm_reduce``...); padding is a stage of its own named ``pad``.
Weights of network layers are placeholders marked ``constant`` (``weight_constant=False``
turns that off); the operands of matmul and batch_matmul are not, unless ``b_constant``.
Flops count a multiply-add as 2 and index arithmetic not at all (see each module).

``numpy_routine(w, inputs)`` is numpy's own float32 routine for a workload where it has one
(what to compare a tuned kernel with). The benchmark suite of the paper is ``suite()`` / ``suite_workload(name)``; its naming
scheme (``C2D-1x56x56x64x64-k1s1p0``...) is described in ``suite``.
"""
from .registry import (OPDEFS, OPERATORS, OpDef, OperatorDef, Workload, elementwise_operator, node_kind, normal, opdef,
                       operator, operator_def, uniform, unregister_operator, workload)
from .common import LAYOUTS, Layout, pad
from .elementwise import (add, bias_add, broadcast_to, cast, channelwise, clip, divide, erf, gelu, gelu_tanh,
                          hard_sigmoid, hard_swish, leaky_relu, maximum, minimum, multiply, power, power_scalar,
                          reciprocal, relu, relu6, scalar_op, scale, sigmoid, sqrt, subtract, tanh, unary)
from .linalg import batch_matmul, dense, matmul, norm
from .conv import capsule_conv2d, conv, conv1d, conv2d, conv2d_transpose, conv3d, depthwise_conv2d
from .winograd import conv2d_winograd, winograd_weight
from .nn import batch_norm, global_pool, layer_norm, log_softmax, lrn, pool, reduce, softmax
from .transform import PAD_MODES, concat, gather, pad_mode, reshape, strided_slice, transpose
from .image import resize
from . import indexing, pointwise   # (their operators register themselves)
from .subgraphs import conv_bn_relu, conv_residual, transpose_batch_matmul
from .suite import FAMILIES, parse_suite_name, suite, suite_names, suite_workload
from .baseline import numpy_routine

__all__ = [
    "OPDEFS", "OPERATORS", "OpDef", "OperatorDef", "Workload", "elementwise_operator", "node_kind", "normal", "opdef",
    "operator", "operator_def", "uniform", "unregister_operator", "workload",
    "LAYOUTS", "Layout", "pad",
    "add", "bias_add", "broadcast_to", "cast", "channelwise", "clip", "divide", "erf", "gelu", "gelu_tanh",
    "hard_sigmoid", "hard_swish", "leaky_relu", "maximum", "minimum", "multiply", "power", "power_scalar",
    "reciprocal", "relu", "relu6", "scalar_op", "scale", "sigmoid", "sqrt", "subtract", "tanh", "unary",
    "batch_matmul", "dense", "matmul", "norm",
    "capsule_conv2d", "conv", "conv1d", "conv2d", "conv2d_transpose", "conv3d", "depthwise_conv2d",
    "conv2d_winograd", "winograd_weight",
    "batch_norm", "global_pool", "layer_norm", "log_softmax", "lrn", "pool", "reduce", "softmax",
    "PAD_MODES", "concat", "gather", "pad_mode", "reshape", "strided_slice", "transpose",
    "resize",
    "conv_bn_relu", "conv_residual", "transpose_batch_matmul",
    "FAMILIES", "parse_suite_name", "suite", "suite_names", "suite_workload",
    "numpy_routine",
]
