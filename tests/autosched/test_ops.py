"""The operator library: every operator (both layouts where it has one) compiled naively and
run against its independent numpy reference; the suite's names, shapes and flops; errors."""
import math

import numpy as np
import pytest

import ir
from autosched import ops


def _id(name, args, kwargs):
    def text(v):
        if isinstance(v, (tuple, list)):
            return "x".join(map(text, v)) if v else "()"
        return str(v)
    parts = [name, "x".join(text(a) if not isinstance(a, tuple) else f"({text(a)})" for a in args)]
    parts += [f"{k}={text(v)}" for k, v in kwargs.items()]
    return "-".join(p for p in parts if p)


def case(name, *args, **kwargs):
    return pytest.param(name, args, kwargs, id=_id(name, args, kwargs))


def both_layouts(name, channel_first, channel_last, *args, **kwargs):
    return [case(name, *args, layout=lay, **kwargs) for lay in (channel_first, channel_last)]


CASES = [
    # linear algebra
    case("matmul", 1, 1, 1),
    case("matmul", 7, 5, 3),
    case("matmul", 4, 9, 13, transpose_a=True),
    case("matmul", 4, 9, 13, transpose_b=True),
    case("matmul", 6, 1, 5, transpose_a=True, transpose_b=True),
    case("matmul", 5, 3, 4, dtype="float64"),
    case("batch_matmul", 2, 3, 4, 5),
    case("batch_matmul", 1, 1, 7, 1),
    case("batch_matmul", 3, 4, 2, 5, transpose_a=True),
    case("batch_matmul", 2, 5, 3, 6, transpose_b=True),
    case("batch_matmul", 2, 3, 3, 4, transpose_a=True, transpose_b=True),
    case("dense", 3, 5, 4),
    case("dense", 1, 1, 1, bias=True),
    case("dense", 2, 7, 3, bias=True),
    case("norm", 1, 3, 5),
    case("norm", 2, 1, 7),
    # convolutions
    *both_layouts("conv1d", "NCW", "NWC", 1, 7, 3, 4, 3),
    *both_layouts("conv1d", "NCW", "NWC", 2, 9, 4, 6, 3, stride=2, padding=1, dilation=2, groups=2),
    *both_layouts("conv1d", "NCW", "NWC", 1, 1, 2, 3, 1),
    *both_layouts("conv2d", "NCHW", "NHWC", 1, 5, 5, 3, 4, 3, padding=1),
    *both_layouts("conv2d", "NCHW", "NHWC", 2, 7, 6, 4, 6, 3, stride=2, padding=1),
    *both_layouts("conv2d", "NCHW", "NHWC", 1, 8, 7, 2, 3, 3, dilation=2, padding=2),
    *both_layouts("conv2d", "NCHW", "NHWC", 1, 6, 6, 6, 4, (3, 1), stride=(2, 1), padding=(1, 0), groups=2),
    *both_layouts("conv2d", "NCHW", "NHWC", 1, 5, 4, 4, 4, 3, padding=1, groups=4),
    *both_layouts("conv2d", "NCHW", "NHWC", 1, 1, 1, 2, 3, 1),
    *both_layouts("conv3d", "NCDHW", "NDHWC", 1, 3, 4, 5, 2, 3, 3, padding=1),
    *both_layouts("conv3d", "NCDHW", "NDHWC", 1, 5, 5, 4, 4, 4, (3, 1, 2), stride=2, padding=(1, 0, 1), groups=2),
    case("conv2d_winograd", 1, 6, 6, 3, 4),
    case("conv2d_winograd", 2, 7, 5, 4, 3, padding=0),
    *both_layouts("depthwise_conv2d", "NCHW", "NHWC", 1, 6, 6, 3, 3, padding=1),
    *both_layouts("depthwise_conv2d", "NCHW", "NHWC", 1, 7, 7, 4, 3, stride=2, padding=1, multiplier=2),
    *both_layouts("depthwise_conv2d", "NCHW", "NHWC", 2, 5, 5, 2, 3, dilation=2, padding=2),
    *both_layouts("conv2d_transpose", "NCHW", "NHWC", 1, 4, 4, 3, 2, 4, stride=2, padding=1),
    *both_layouts("conv2d_transpose", "NCHW", "NHWC", 1, 3, 5, 2, 3, 3),
    *both_layouts("conv2d_transpose", "NCHW", "NHWC", 2, 3, 3, 2, 2, 3, stride=3, padding=2),
    *both_layouts("conv2d_transpose", "NCHW", "NHWC", 1, 2, 2, 2, 2, 1, stride=2),
    *both_layouts("conv2d_transpose", "NCHW", "NHWC", 1, 5, 5, 2, 2, 3, stride=2, padding=3),
    *both_layouts("conv2d_transpose", "NCHW", "NHWC", 1, 4, 3, 2, 3, 2, stride=1, padding=1),
    # phase-major (every strided output size a multiple of its stride)
    *both_layouts("conv2d_transpose", "NCHW", "NHWC", 1, 3, 4, 2, 3, 2, stride=2),
    *both_layouts("conv2d_transpose", "NCHW", "NHWC", 1, 3, 3, 2, 2, 4, stride=(2, 1), padding=1),
    *both_layouts("conv2d_transpose", "NCHW", "NHWC", 2, 2, 3, 2, 2, 3, stride=3),
    case("capsule_conv2d", 1, 5, 5, 2, 3, 3, stride=2, padding=1, capsule=2),
    case("capsule_conv2d", 1, 4, 4, 3, 2, 3, padding=1),
    case("capsule_conv2d", 2, 3, 3, 1, 1, 1, capsule=1),
    # normalisation, pooling
    case("softmax", (3, 7)),
    case("softmax", (2, 1, 5)),
    case("softmax", (4, 1)),
    case("layer_norm", (3, 8)),
    case("layer_norm", (2, 3, 5), eps=1e-3),
    case("layer_norm", (2, 1)),
    *both_layouts("batch_norm", "NCHW", "NHWC", 1, 3, 4, 5),
    *both_layouts("batch_norm", "NCHW", "NHWC", 2, 1, 1, 3, eps=0.1),
    *both_layouts("max_pool2d", "NCHW", "NHWC", 1, 6, 6, 3, 3, stride=2, padding=1),
    *both_layouts("max_pool2d", "NCHW", "NHWC", 2, 5, 7, 2, (2, 3), stride=(1, 2), padding=(1, 1)),
    *both_layouts("max_pool2d", "NCHW", "NHWC", 1, 4, 4, 2, 2, stride=2),
    *both_layouts("avg_pool2d", "NCHW", "NHWC", 1, 6, 6, 3, 3, stride=2, padding=1),
    *both_layouts("avg_pool2d", "NCHW", "NHWC", 2, 5, 7, 2, (2, 3), stride=(1, 2), padding=(1, 0)),
    *both_layouts("avg_pool2d", "NCHW", "NHWC", 1, 4, 4, 2, 2, stride=2),
    *both_layouts("global_max_pool2d", "NCHW", "NHWC", 1, 3, 5, 4),
    *both_layouts("global_max_pool2d", "NCHW", "NHWC", 2, 1, 1, 3),
    *both_layouts("global_avg_pool2d", "NCHW", "NHWC", 1, 3, 5, 4),
    *both_layouts("global_avg_pool2d", "NCHW", "NHWC", 2, 1, 1, 3),
    # elementwise and broadcast
    *[case(op, shape) for op in ("relu", "gelu", "sigmoid", "tanh") for shape in ((3, 5), (17,), (2, 1, 4))],
    case("relu", (4, 3), dtype="int32"),
    case("bias_add", (2, 3, 4)),
    case("bias_add", (2, 3, 4), axis=1),
    case("bias_add", (5,), axis=0),
    case("add", (3, 4)),
    case("add", (3, 4), (4,)),
    case("add", (2, 1, 4), (3, 1)),
    case("add", (2, 3), dtype="int32"),
    case("multiply", (3, 4)),
    case("multiply", (1, 5), (3, 1)),
    *[case(op, (3, 17)) for op in ("relu6", "gelu_tanh", "erf", "sqrt", "reciprocal", "hard_swish", "negative", "abs",
                                   "exp", "log", "floor", "ceil", "round", "softplus", "sign", "isnan",
                                   "logical_not")],
    case("abs", (2, 5), dtype="int32"),
    case("leaky_relu", (2, 9), alpha=0.2),
    case("clip", (3, 17), min=-0.5, max=0.7),
    case("clip", (3, 17), min=0.0),
    case("hard_sigmoid", (4, 9)),
    case("hard_sigmoid", (4, 9), alpha=0.3, beta=0.4),
    case("power_scalar", (5, 6), exponent=0.75),
    case("power_scalar", (5, 6), exponent=2.0),
    case("scale", (5, 6), value=-2.5),
    case("scalar", (2, 8), op="-", value=1.5, reverse=True),
    case("scalar", (2, 8), op="pow", value=0.5),
    case("subtract", (2, 3, 8), (3, 1)),
    case("divide", (2, 3, 8), (8,)),
    case("power", (2, 8)),
    case("maximum", (1, 3, 8), (4, 1, 8)),
    case("minimum", (4, 8), (1,)),
    *[case(op, (3, 8), (8,)) for op in ("equal", "less", "less_equal", "greater", "greater_equal", "mod", "fmod",
                                        "prelu")],
    case("equal", (3, 4), dtype="int32"),
    *[case(op, (3, 8), (3, 1)) for op in ("logical_and", "logical_or", "logical_xor")],
    # data movement
    case("pad", (3, 4), 1),
    case("pad", (2, 3, 4), (0, 1, 2), (1, 0, 3), 1.5),
    case("pad", (5,), 0, 2),
    case("transpose", (2, 3, 4), (2, 0, 1)),
    case("transpose", (3, 5)),
    case("transpose", (1, 4, 1, 3), (3, 2, 1, 0), dtype="int32"),
    case("reshape", (2, 3, 4), (4, 6)),
    case("reshape", (6,), (2, -1)),
    case("reshape", (2, 3, 4), (24,)),
    case("reshape", (1, 6), (3, 1, 2)),
    # subgraphs
    *both_layouts("conv_layer", "NCHW", "NHWC", 1, 6, 6, 3, 4, 3, stride=2, padding=1),
    *both_layouts("conv_layer", "NCHW", "NHWC", 1, 5, 5, 4, 2, 1),
    *both_layouts("conv_residual", "NCHW", "NHWC", 1, 6, 6, 3, 4, 3, stride=2, padding=1),
    *both_layouts("conv_residual", "NCHW", "NHWC", 2, 5, 4, 4, 6, 1),
    case("transpose_batch_matmul", 1, 5, 2, 3),
    case("transpose_batch_matmul", 2, 4, 3, 2, softmax=False),
    # a network's fused tasks, every epilogue stage and gate
    case("dense_chain", (1, 5), 7, 6, epilogue="add-gelu"),
    case("dense_chain", (1, 3, 3), 6, 5, epilogue="add-scale-residual"),
    case("dense_chain", 1, 9, 4, epilogue="bias-hard_swish"),
    case("dense_chain", 2, 4, 3, epilogue=""),
    case("conv2d_chain", 1, 6, 6, 4, 8, 1, epilogue="bias-silu"),
    case("conv2d_chain", 1, 6, 6, 8, 8, 3, stride=2, padding=1, groups=4, epilogue="bias-relu"),
    case("depthwise_chain", 1, 7, 7, 5, 5, stride=2, padding=2, epilogue="bias-hard_swish"),
    case("depthwise_chain", 1, 5, 5, 3, 3, padding=1, epilogue="bias-residual"),
    # channels of 8 x an odd number, as the training workloads of that kind (and MobileNet-V3)
    case("depthwise_chain", 1, 6, 6, 24, 5, padding=2, epilogue="bias-relu"),
    case("conv2d_chain", 1, 4, 4, 24, 8, 1, epilogue="bias-residual"),
    # a residual block's 3x3 convolution after the Winograd rewrite, odd map (a partial tile)
    case("winograd_chain", 1, 5, 5, 4, 8, epilogue="bias-residual-relu"),
    case("winograd_chain", 1, 4, 6, 3, 5, epilogue="bias-relu"),
    case("se_gate", 4, 4, 3, 6),
    case("se_gate", 3, 5, 2, 4, gate="sigmoid"),
]


def _tolerance(w):
    """Float32 rounding grows with the work per output element (about sqrt of it)."""
    work = max(1.0, w.flops / max(1, sum(math.prod(t.shape) for t in w.outputs)))
    return dict(rtol=1e-4, atol=1e-5 * math.sqrt(work))


@pytest.mark.parametrize("name, args, kwargs", CASES)
def test_naive_kernel_matches_reference(name, args, kwargs):
    w = ops.workload(name, *args, **kwargs)
    kernel = ir.build(ir.ComputeDAG(w.tensors))
    inputs = w.random_inputs(np.random.default_rng(0))
    outputs = w.output_buffers()
    kernel(*inputs, *outputs)
    expected = w.reference(inputs)
    for got, want in zip(outputs, expected, strict=True):
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_allclose(got, want, **_tolerance(w))


def test_every_operator_is_tested():
    assert {c.values[0] for c in CASES} == set(ops.OPERATORS)


LAYOUT_OPS = {"conv1d", "conv2d", "conv3d", "depthwise_conv2d", "conv2d_transpose", "batch_norm",
              "max_pool2d", "avg_pool2d", "global_max_pool2d", "global_avg_pool2d", "conv_layer",
              "conv_residual"}


def test_operators_with_a_layout_are_tested_in_both():
    for name in LAYOUT_OPS:
        tested = {c.values[2].get("layout") for c in CASES if c.values[0] == name}
        assert len(tested) == 2 and None not in tested, (name, tested)


# the workload object --------------------------------------------------------------------

def test_workload_inputs_outputs_and_buffers():
    w = ops.workload("batch_norm", 2, 3, 4, 5, layout="NCHW")
    assert [t.name for t in w.inputs] == ["x", "gamma", "beta", "mean", "var"]
    assert [t.shape for t in w.outputs] == [(2, 5, 3, 4)]
    arrays = w.random_inputs(np.random.default_rng(1))
    assert [a.shape for a in arrays] == [t.shape for t in w.inputs]
    assert all(a.dtype == np.float32 and a.flags.c_contiguous for a in arrays)
    assert arrays[4].min() > 0  # a variance
    (buf,) = w.output_buffers()
    assert buf.shape == (2, 5, 3, 4) and buf.dtype == np.float32 and not buf.any()


def test_random_inputs_are_deterministic():
    w = ops.workload("matmul", 3, 4, 5)
    a = w.random_inputs(np.random.default_rng(0))
    b = w.random_inputs(np.random.default_rng(0))
    assert all(np.array_equal(x, y) for x, y in zip(a, b))


def test_workloads_are_equal_by_parameters():
    a = ops.workload("conv2d", 1, 8, 8, 4, 4, 3, 1, 1)
    b = ops.workload("conv2d", 1, 8, 8, 4, 4, kernel=3, padding=1, layout="NHWC")
    c = ops.workload("conv2d", 1, 8, 8, 4, 4, 3, padding=0)
    assert a == b and hash(a) == hash(b) and a != c
    assert str(c) == "conv2d(1, 8, 8, 4, 4, 3, padding=0)"
    assert ops.workload("transpose", [2, 3], [1, 0]).args == ((2, 3), (1, 0))


def test_reference_checks_its_inputs():
    w = ops.workload("matmul", 3, 4, 5)
    with pytest.raises(ValueError, match=r"got 1 input array\(s\), expected 2 \(A, B\)"):
        w.reference([np.zeros((3, 5))])
    with pytest.raises(ValueError, match=r"input 'B' has shape \(5, 3\), expected \(5, 4\)"):
        w.reference([np.zeros((3, 5)), np.zeros((5, 3))])


def _stages(tensor):
    """All compute ops that ``tensor`` depends on, by name."""
    seen, stack = {}, [tensor]
    while stack:
        t = stack.pop()
        if isinstance(t.op, ir.ComputeOp) and t.op.name not in seen:
            seen[t.op.name] = t.op
            stack.extend(t.op.input_tensors)
    return seen


def test_tags_constants_and_the_pad_stage():
    w = ops.workload("conv2d", 1, 8, 8, 4, 4, 3, padding=1)
    stages = _stages(w.outputs[0])
    assert stages["pad"].tag == "injective,pad"
    assert w.outputs[0].op.tag == "conv2d_nhwc"
    assert [t.op.constant for t in w.inputs] == [False, True]
    assert "pad" not in _stages(ops.workload("conv2d", 1, 8, 8, 4, 4, 3).outputs[0])
    assert not any(t.op.constant for t in ops.workload("batch_matmul", 1, 4, 4, 4).inputs)
    assert ops.workload("conv2d", 1, 8, 8, 4, 4, 3, groups=2, layout="NCHW").outputs[0].op.tag == "group_conv2d_nchw"
    soft = _stages(ops.workload("softmax", (2, 5)).outputs[0])
    assert {n: s.tag for n, s in soft.items()} == {
        "softmax": "softmax_output", "softmax_exp": "broadcast",
        "softmax_maxelem": "comm_reduce", "softmax_expsum": "comm_reduce"}
    cbr = _stages(ops.workload("conv_layer", 1, 8, 8, 4, 4, 3, padding=1).outputs[0])
    assert set(cbr) == {"pad", "conv2d_nhwc", "bias_add", "bn_mul", "bn_add", "relu"}


def test_flops_of_small_operators():
    assert ops.workload("matmul", 3, 4, 5).flops == 2 * 3 * 4 * 5
    assert ops.workload("conv2d", 1, 8, 8, 4, 6, 3, stride=2, padding=1, groups=2).flops == 2 * 4 * 4 * 6 * 2 * 9
    assert ops.workload("softmax", (4, 6)).flops == 5 * 24
    assert ops.workload("avg_pool2d", 1, 4, 4, 2, 2, stride=2).flops == 2 * 2 * 2 * 5
    assert ops.workload("dense", 2, 3, 4, bias=True).flops == 2 * 2 * 3 * 4 + 2 * 4
    assert ops.workload("reshape", (2, 3), (3, 2)).flops == 0


# the suite ------------------------------------------------------------------------------

def test_suite_constructs_every_workload():
    suite = ops.suite()
    assert len(suite) == 48
    assert [n.split("-")[0] for n in suite][::4] == [f.code for f in ops.FAMILIES]
    for name, w in suite.items():
        assert w.label == name == str(w)
        assert w.flops > 0 and w.outputs
        assert ops.parse_suite_name(name).name == name


@pytest.mark.parametrize("name, flops", [
    ("GMM-1x1024x1024x1024", 2 * 1024 ** 3),
    ("C2D-1x56x56x64x64-k1s1p0", 2 * 56 * 56 * 64 * 64),
    ("T2D-1x4x4x512x256-k4s2p1", 2 * 4 * 4 * 512 * 256 * 4 * 4),
    ("CBR-1x56x56x64x128-k3s2p1", 2 * 28 * 28 * 128 * 64 * 9 + 4 * 28 * 28 * 128),
    ("GRP-1x56x56x64x128-k3s2p1g4", 2 * 28 * 28 * 128 * 16 * 9),
    ("DEP-1x112x112x32-k3s1p1", 2 * 112 * 112 * 32 * 9),
    ("NRM-1x1024x1024", 2 * 1024 * 1024 + 1),
    ("TBS-1x128x12x64", 12 * 128 * 128 * (2 * 64 + 5)),
    ("CAP-1x16x16x32x32-k3s2p1", 2 * 8 * 8 * 4 * 4 * 32 * (3 * 3 * 4 * 32)),
])
def test_suite_flops_by_hand(name, flops):
    assert ops.suite_workload(name).flops == flops


def test_suite_shapes():
    def shapes(name):
        return [t.shape for t in ops.suite_workload(name).tensors]
    assert shapes("GMM-1x512x32x512") == [(1, 512, 512), (1, 512, 32), (1, 512, 32)]
    assert shapes("DIL-1x224x224x3x64-k7s2p3d2") == [(1, 224, 224, 3), (7, 7, 3, 64), (1, 109, 109, 64)]
    assert shapes("GRP-1x7x7x512x512-k3s1p1g4") == [(1, 7, 7, 512), (3, 3, 128, 512), (1, 7, 7, 512)]
    assert shapes("C3D-1x16x224x224x3x64-k7s2p3")[-1] == (1, 8, 112, 112, 64)
    assert shapes("CAP-1x16x16x8x16-k3s2p1") == [(1, 16, 16, 4, 4, 8), (3, 3, 4, 4, 8, 16), (1, 8, 8, 4, 4, 16)]
    assert shapes("T2D-1x32x32x64x3-k4s2p1")[-1] == (1, 64, 64, 3)
    assert shapes("TBS-1x64x12x128") == [(1, 64, 12, 128)] * 2 + [(1, 12, 64, 64)]
    assert shapes("C1D-1x256x64x128-k3s2p1") == [(1, 256, 64), (3, 64, 128), (1, 128, 128)]


def test_suite_batch_multiplier_and_families():
    names = ops.suite_names(batch=16, families=["C2D", "TBS"])
    assert names[0] == "C2D-16x224x224x3x64-k7s2p3" and names[-1] == "TBS-16x128x12x128" and len(names) == 8
    w = ops.suite(batch=16, families=["NRM"])["NRM-16x256x256"]
    assert w.flops == 16 * (2 * 256 * 256 + 1)


def test_suite_names_of_other_shapes_parse():
    w = ops.suite_workload("C2D-1x28x28x128x128-k3s1p1")
    assert w == ops.workload("conv2d", 1, 28, 28, 128, 128, 3, 1, 1, layout="NHWC")
    assert ops.suite_workload("DIL-1x8x8x4x4-k3s1p2d2").params["dilation"] == 2


@pytest.mark.parametrize("name, message", [
    ("C2X-1x8x8x4x4-k3s1p1", r"not a suite workload name.*FAMILY one of GMM, C1D"),
    ("C2D-1x8x8x4", r"C2D takes 5 sizes \(NxHxWxCIxCO\), got 4"),
    ("C2D-1x8x8x4x4", r"need a -kKsSpP part"),
    ("GMM-1x8x8x8-k3s1p1", r"take no -kKsSpP part"),
    ("T2D-1x4x4x8x8-k4s2p1d2", r"T2D-1x4x4x8x8-k4s2p1d2.*dilation"),
    ("c2d-1x8x8x4x4-k3s1p1", r"not a suite workload name"),
])
def test_bad_suite_names(name, message):
    with pytest.raises(ValueError, match=message):
        ops.suite_workload(name)


def test_bad_suite_arguments():
    with pytest.raises(ValueError, match=r"unknown suite families \['XYZ'\]"):
        ops.suite(families=["XYZ"])
    with pytest.raises(ValueError, match="batch must be a positive int, got 0"):
        ops.suite_names(batch=0)


# bad parameters -------------------------------------------------------------------------

def _tensor(*shape):
    return ir.placeholder(shape, name="t")


@pytest.mark.parametrize("build, message", [
    (lambda: ops.workload("conv2d", 1, 8, 8, 6, 4, 3, groups=4),
     r"conv2d: 6 input channels are not divisible by groups=4"),
    (lambda: ops.workload("conv2d", 1, 8, 8, 8, 6, 3, groups=4),
     r"conv2d: 6 output channels are not divisible by groups=4"),
    (lambda: ops.workload("conv2d", 1, 8, 8, 4, 4, 3, layout="NHCW"),
     r"conv2d: unknown layout 'NHCW'; expected one of 'NCHW', 'NHWC'"),
    (lambda: ops.workload("conv1d", 1, 8, 4, 4, 3, layout="NHWC"),
     r"conv1d: unknown layout 'NHWC'; expected one of 'NCW', 'NWC'"),
    (lambda: ops.workload("conv2d", 1, 3, 3, 4, 4, 5),
     r"does not fit the input \(3, 3\) padded by \(0, 0\)"),
    (lambda: ops.workload("conv2d", 1, 8, 8, 4, 4, 3, stride=0),
     r"conv2d: stride must be an int or a tuple of 2 ints, each positive; got 0"),
    (lambda: ops.workload("conv3d", 1, 4, 4, 4, 2, 2, 3, padding=(1, 1)),
     r"padding must be an int or a tuple of 3 ints, each >= 0; got \(1, 1\)"),
    (lambda: ops.workload("conv2d", 1, 0, 8, 4, 4, 3), r"conv2d: spatial\[0\] must be a positive int, got 0"),
    (lambda: ops.workload("matmul", 4, 4, -1), r"matmul: K must be a positive int, got -1"),
    (lambda: ops.workload("conv4d", 1), r"unknown operator 'conv4d'; expected one of .*conv3d"),
    (lambda: ops.workload("conv2d_transpose", 1, 2, 2, 4, 4, 3, stride=1, padding=3),
     r"padding \(3, 3\) is too large"),
    (lambda: ops.workload("capsule_conv2d", 1, 8, 8, 4, 4, 3, layout="NCHW"),
     r"unknown layout 'NCHW'; expected 'NHWC'"),
    (lambda: ops.workload("reshape", (2, 3), (4, 2)), r"new_shape \(4, 2\) has 8 elements, the input has 6"),
    (lambda: ops.workload("reshape", (2, 3), (-1, -1)), r"at most one -1"),
    (lambda: ops.workload("transpose", (2, 3, 4), (0, 1, 1)), r"axes \(0, 1, 1\) are not a permutation"),
    (lambda: ops.workload("softmax", (5,)), r"softmax: expected at least 2 dimensions"),
    (lambda: ops.workload("add", (3, 4), (3,)), r"add: shapes \(3, 4\) and \(3,\) do not broadcast"),
    (lambda: ops.workload("bias_add", (3, 4), axis=2), r"bias_add: axis 2 is out of range for shape \(3, 4\)"),
    (lambda: ops.workload("relu", ()), r"relu: shape must be a non-empty tuple of positive ints, got \(\)"),
    (lambda: ops.pool(_tensor(1, 4, 4, 2), 2, pool_type="min"), r"unknown pool_type 'min'"),
    (lambda: ops.workload("avg_pool2d", 1, 4, 4, 2, 2, padding=2), r"padding \(2, 2\) must be smaller than the kernel"),
    (lambda: ops.matmul(_tensor(3, 4), _tensor(5, 6)), r"reduction lengths differ \(K=4 from A, K=5 from B\)"),
    (lambda: ops.batch_matmul(_tensor(2, 3, 4), _tensor(3, 4, 5)), r"batch dimensions \(2,\) and \(3,\) differ"),
    (lambda: ops.conv2d(_tensor(1, 8, 8, 4), _tensor(3, 3, 3, 8)),
     r"weight \(3, 3, 3, 8\) has 3 input channels per group, expected CI/groups = 4/1 = 4"),
    (lambda: ops.conv2d(_tensor(1, 8, 8), _tensor(3, 3, 3)), r"conv2d: data has shape \(1, 8, 8\)"),
    (lambda: ops.layer_norm(_tensor(2, 4), _tensor(3), _tensor(4)), r"gamma \(3,\) and beta \(4,\) must both"),
    (lambda: ops.batch_norm(_tensor(1, 2, 2, 3), *[_tensor(2)] * 4), r"gamma has shape \(2,\), expected \(3,\)"),
    (lambda: ops.transpose_batch_matmul(_tensor(1, 4, 2, 3), _tensor(1, 4, 2, 4)), r"must both be"),
])
def test_bad_parameters_raise_clear_errors(build, message):
    with pytest.raises(ValueError, match=message):
        build()


def test_bad_call_names_the_signature():
    with pytest.raises(TypeError, match=r"operator 'matmul': .*its parameters are matmul\(N, M, K"):
        ops.workload("matmul", 3, 4)


@pytest.mark.parametrize("name, args", [("matmul", (24, 40, 32)), ("batch_matmul", (2, 24, 40, 32)),
                                        ("norm", (3, 16, 20))])
def test_numpy_routine_is_float32_numpy_and_agrees_with_the_reference(name, args):
    w = ops.workload(name, *args)
    inputs = w.random_inputs(np.random.default_rng(0))
    got = np.asarray(ops.numpy_routine(w, inputs)())
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, w.reference(inputs)[0], rtol=1e-4, atol=1e-4)


def test_numpy_routine_of_transposed_operands_and_of_an_operator_numpy_lacks():
    w = ops.workload("matmul", 24, 40, 32, transpose_a=True, transpose_b=True)
    inputs = w.random_inputs(np.random.default_rng(1))
    np.testing.assert_allclose(ops.numpy_routine(w, inputs)(), w.reference(inputs)[0], rtol=1e-4, atol=1e-4)
    conv = ops.workload("conv2d", 1, 8, 8, 4, 8, 3, stride=1, padding=1, layout="NHWC")
    assert ops.numpy_routine(conv, conv.random_inputs(np.random.default_rng(0))) is None


def test_numpy_integer_parameters_work_like_ints():
    """Shapes computed with numpy: the same workload (same key), run against the reference."""
    plain = ops.workload("conv2d", 1, 9, 9, 8, 16, 3, stride=2, padding=(1, 1), layout="NHWC")
    numpy = ops.workload("conv2d", *np.array([1, 9, 9, 8, 16, 3]), stride=np.int64(2),
                         padding=[np.int32(1), np.uint8(1)], layout="NHWC")
    assert ir.ComputeDAG(numpy.tensors).workload_key() == ir.ComputeDAG(plain.tensors).workload_key()
    assert repr(numpy) == repr(plain)
    inputs = numpy.random_inputs(np.random.default_rng(0))
    outputs = numpy.output_buffers()
    ir.build(ir.ComputeDAG(numpy.tensors))(*inputs, *outputs)
    np.testing.assert_allclose(outputs[0], numpy.reference(inputs)[0], rtol=1e-4, atol=1e-4)
    x = ir.placeholder((2, 4, 4, 3), name="x")
    assert ops.pad(x, np.int64(1)).shape == (4, 6, 6, 5)
    assert ops.reshape(x, (np.int64(2), -1)).shape == (2, 48)


def test_conv_residual_refuses_a_shortcut_of_another_shape():
    data, weight = ir.placeholder((1, 6, 6, 3), name="x"), ir.placeholder((3, 3, 3, 4), name="w")
    bias, shortcut = ir.placeholder((4,), name="b"), ir.placeholder((1, 6, 6, 4), name="s")
    with pytest.raises(ValueError, match=r"shortcut has shape \(1, 6, 6, 4\), expected .*\(1, 3, 3, 4\)"):
        ops.conv_residual(data, weight, bias, shortcut, stride=2, padding=1)
    with pytest.raises(ValueError, match=r"conv_residual: the kernel \(7, 7\) does not fit the input \(4, 4\)"):
        ops.workload("conv_residual", 1, 4, 4, 3, 4, 7)


def test_a_strided_transposed_convolution_is_summed_phase_major():
    """Output o = q·s + p: the sums have q and p axes of their own (one phase's positions
    share their taps), copied into the output's shape; the old form had one axis per dimension."""
    w = ops.workload("conv2d_transpose", 1, 4, 4, 8, 16, 4, stride=2, padding=1)
    stages = {op.name: op.shape for op in ir.ComputeDAG(w.tensors).compute_ops}
    assert stages["conv2d_transpose_nhwc_phases"] == (1, 4, 2, 4, 2, 16)
    assert stages["conv2d_transpose_nhwc"] == (1, 8, 8, 16)
    odd = ops.workload("conv2d_transpose", 1, 5, 5, 2, 2, 3, stride=2, padding=3)  # 5 outputs: not a multiple
    assert [op.name for op in ir.ComputeDAG(odd.tensors).compute_ops] == ["conv2d_transpose_nhwc"]


def test_a_chain_refuses_an_unknown_epilogue_stage_or_gate():
    with pytest.raises(ValueError, match=r"dense_chain: unknown epilogue stage\(s\) \['swish'\] in 'bias-swish'"):
        ops.workload("dense_chain", 1, 4, 4, epilogue="bias-swish")
    with pytest.raises(ValueError, match="se_gate: unknown gate 'tanh'"):
        ops.workload("se_gate", 2, 2, 2, 4, gate="tanh")
    with pytest.raises(ValueError, match="conv2d_chain: groups=3 must divide CI=4 and CO=6"):
        ops.workload("conv2d_chain", 1, 4, 4, 4, 6, 1, groups=3)


@pytest.mark.parametrize("epilogue", ["add", "bias", "scale", "residual", "add-gelu", "bias-silu"])
def test_a_chain_names_its_tensors_apart(epilogue):
    """A runner passes arrays by tensor name: an input named as the output would be overwritten."""
    for w in (ops.workload("dense_chain", 2, 4, 3, epilogue=epilogue),
              ops.workload("conv2d_chain", 1, 3, 3, 2, 2, 1, epilogue=epilogue),
              ops.workload("winograd_chain", 1, 3, 3, 2, 2, epilogue=epilogue),
              ops.workload("depthwise_chain", 1, 3, 3, 2, 3, padding=1, epilogue=epilogue)):
        names = [t.name for t in w.tensors]
        assert len(set(names)) == len(names), names
