"""What an ONNX model is compared with: onnxruntime (``onnxruntime_runner``) and PyTorch
(``torch_runner``), each running the model file itself, as their users would. ``autosched
tune model.onnx`` and ``bench/tune_onnx.py`` time them beside the tuned model, in the same
run; ``seconds_per_call`` times any of them the way ``GraphExecutor.benchmark`` times ours.

PyTorch cannot read ONNX, so ``torch_runner`` maps the model's nodes to PyTorch functions
on its own channel-first tensors (weights as given, constants folded first with ONNX's
reference implementation), traced and frozen by TorchScript and run under
``torch.inference_mode``, as a PyTorch user would run the architecture. It covers the
operators the importer converts, with PyTorch's own kernels; where PyTorch has no
equivalent (e.g. asymmetric pooling pads) it raises ``Unsupported``. onnxruntime and
PyTorch are imported inside the functions that use them.
"""
from __future__ import annotations

import math
import statistics

import numpy as np

from .executor import time_repeats
from .onnx import fix_input_shapes, fold_node, inferred_shapes, load_model, model_opset, node_attributes
from .onnx_nn import conv_transpose_params, window_params
from .onnx_ops import Unsupported, as_ints


def _torch_ops(torch, F):
    """ONNX operator -> fn(attrs, opset, shapes of the inputs, *inputs) -> output(s)."""
    def spatial_pad(x, before, after, value=0.0):
        pads = [p for b, a in zip(reversed(before), reversed(after)) for p in (b, a)]
        return F.pad(x, pads, value=value) if any(pads) else x

    def conv(a, opset, shapes, x, w, b=None):
        strides, dil, before, after = window_params(a, shapes[0][2:], w.shape[2:])
        fn = (F.conv1d, F.conv2d, F.conv3d)[x.ndim - 3]
        return fn(spatial_pad(x, before, after), w, b, strides, 0, dil, int(a.get("group", 1)))

    def conv_transpose(a, opset, shapes, x, w, b=None):
        strides, extra, before, after = conv_transpose_params(a, shapes[0][2:], w.shape[2:])
        y = F.conv_transpose2d(x, w, b, strides)
        y = F.pad(y, [0, extra[1], 0, extra[0]])
        return y[:, :, before[0]:y.shape[2] - after[0], before[1]:y.shape[3] - after[1]]

    def pool(kind):
        def run(a, opset, shapes, x):
            kernel = as_ints(a["kernel_shape"])
            strides, dil, before, after = window_params(a, shapes[0][2:], kernel)
            if before != after:
                raise Unsupported(f"{kind} pooling with asymmetric pads")
            sd = x.ndim - 2
            if kind == "max":
                fn = (F.max_pool1d, F.max_pool2d, F.max_pool3d)[sd - 1]
                return fn(x, kernel, strides, before, dil, ceil_mode=bool(a.get("ceil_mode", 0)))
            if any(d != 1 for d in dil):
                raise Unsupported("dilated average pooling")
            fn = (F.avg_pool1d, F.avg_pool2d, F.avg_pool3d)[sd - 1]
            return fn(x, kernel, strides, before, ceil_mode=bool(a.get("ceil_mode", 0)),
                      count_include_pad=bool(a.get("count_include_pad", 0)))
        return run

    def softmax(fn):
        def run(a, opset, shapes, x):
            axis = int(a.get("axis", -1 if opset >= 13 else 1)) % x.ndim
            if opset >= 13:
                return fn(x, axis)
            return fn(x.reshape(math.prod(x.shape[:axis]), -1), -1).reshape(x.shape)
        return run

    def reduce(fn):
        def run(a, opset, shapes, x, axes=None):
            axes = as_ints(axes) if axes is not None else as_ints(a.get("axes", range(x.ndim)))
            return fn(x, tuple(int(v) % x.ndim for v in axes), bool(a.get("keepdims", 1)))
        return run

    def clip(a, opset, shapes, x, lo=None, hi=None):
        lo = a.get("min") if opset < 11 else (None if lo is None else float(lo))
        hi = a.get("max") if opset < 11 else (None if hi is None else float(hi))
        return torch.clamp(x, lo, hi)

    def gemm(a, opset, shapes, x, w, c=None):
        x = x.t() if a.get("transA", 0) else x
        w = w.t() if a.get("transB", 0) else w
        y = float(a.get("alpha", 1.0)) * (x @ w)
        return y if c is None else y + float(a.get("beta", 1.0)) * c

    def reshape(a, opset, shapes, x, shape):
        target = [x.shape[k] if s == 0 and not a.get("allowzero", 0) else int(s) for k, s in enumerate(shape)]
        return x.reshape(target)

    def squeeze(a, opset, shapes, x, axes=None):
        axes = as_ints(axes) if axes is not None else as_ints(a.get("axes", [k for k, s in enumerate(x.shape) if s == 1]))
        return x.reshape([s for k, s in enumerate(x.shape) if k not in {v % x.ndim for v in axes}])

    def unsqueeze(a, opset, shapes, x, axes=None):
        axes = sorted(int(v) % (x.ndim + len(as_ints(axes if axes is not None else a["axes"])))
                      for v in as_ints(axes if axes is not None else a["axes"]))
        for v in axes:
            x = x.unsqueeze(v)
        return x

    def split(a, opset, shapes, x, parts=None):
        axis = int(a.get("axis", 0)) % x.ndim
        parts = as_ints(parts) if parts is not None else as_ints(a["split"]) if "split" in a else None
        if parts is None:
            n = int(a.get("num_outputs", 2))
            parts = [-(-x.shape[axis] // n)] * (n - 1)
            parts.append(x.shape[axis] - sum(parts))
        return list(torch.split(x, list(parts), axis))

    def slice_(a, opset, shapes, x, starts=None, ends=None, axes=None, steps=None):
        if opset < 10:
            starts, ends, axes = a["starts"], a["ends"], a.get("axes")
        starts, ends = as_ints(starts), as_ints(ends)
        axes = as_ints(axes) if axes is not None else range(len(starts))
        steps = as_ints(steps) if steps is not None else [1] * len(starts)
        index = [slice(None)] * x.ndim
        for s, e, ax, st in zip(starts, ends, axes, steps):
            if st < 0:
                raise Unsupported("a slice with a negative step")
            index[ax % x.ndim] = slice(s, e, st)
        return x[tuple(index)]

    def gather(a, opset, shapes, x, idx):
        axis = int(a.get("axis", 0)) % x.ndim
        if isinstance(idx, torch.Tensor) and idx.ndim == 0:
            return x.select(axis, int(idx))
        out = torch.index_select(x, axis, idx.reshape(-1))
        return out.reshape(x.shape[:axis] + idx.shape + x.shape[axis + 1:])

    def pad(a, opset, shapes, x, pads=None, value=None, axes=None):
        pads = as_ints(pads if pads is not None else a["pads"])
        axes = as_ints(axes) if axes is not None else range(x.ndim)
        before, after = [0] * x.ndim, [0] * x.ndim
        for k, ax in enumerate(axes):
            before[ax % x.ndim], after[ax % x.ndim] = pads[k], pads[k + len(axes)]
        mode = {"constant": "constant", "reflect": "reflect", "edge": "replicate", "wrap": "circular"}[
            a.get("mode", "constant")]
        flat = [p for b, c in zip(reversed(before), reversed(after)) for p in (b, c)]
        if mode == "constant":
            fill = float(a.get("value", 0.0)) if opset < 11 else (0.0 if value is None else float(value))
            return F.pad(x, flat, value=fill)
        return F.pad(x, flat[:2 * (x.ndim - 2)], mode=mode)

    def layer_norm(a, opset, shapes, x, scale, bias=None):
        axis = int(a.get("axis", -1)) % x.ndim
        return F.layer_norm(x, x.shape[axis:], scale, bias, float(a.get("epsilon", 1e-5)))

    binary = {"Add": torch.add, "Sub": torch.sub, "Mul": torch.mul, "Div": torch.div, "Pow": torch.pow,
              "Max": torch.maximum, "Min": torch.minimum, "Sum": torch.add}

    def nary(op):
        def run(a, opset, shapes, *xs):
            y = xs[0]
            for v in xs[1:]:
                y = binary[op](y, v)
            return y
        return run

    unary = {"Relu": F.relu, "Sigmoid": torch.sigmoid, "Tanh": torch.tanh, "Erf": torch.erf, "Sqrt": torch.sqrt,
             "Reciprocal": torch.reciprocal, "HardSwish": F.hardswish, "Identity": lambda x: x,
             "Dropout": lambda x: x}
    table = {op: (lambda fn: lambda a, opset, shapes, x, *rest: fn(x))(fn) for op, fn in unary.items()}
    table.update({op: nary(op) for op in binary})
    table.update({
        "LeakyRelu": lambda a, o, s, x: F.leaky_relu(x, float(a.get("alpha", 0.01))),
        "HardSigmoid": lambda a, o, s, x: torch.clamp(float(a.get("alpha", 0.2)) * x + float(a.get("beta", 0.5)),
                                                      0.0, 1.0),
        "Gelu": lambda a, o, s, x: F.gelu(x, approximate=a.get("approximate", "none")),
        "Clip": clip, "MatMul": lambda a, o, s, x, y: torch.matmul(x, y), "Gemm": gemm,
        "Conv": conv, "ConvTranspose": conv_transpose, "MaxPool": pool("max"), "AveragePool": pool("avg"),
        "GlobalAveragePool": lambda a, o, s, x: x.mean(tuple(range(2, x.ndim)), keepdim=True),
        "GlobalMaxPool": lambda a, o, s, x: x.amax(tuple(range(2, x.ndim)), keepdim=True),
        "BatchNormalization": lambda a, o, s, x, g, b, m, v: F.batch_norm(x, m, v, g, b, False, 0.0,
                                                                          float(a.get("epsilon", 1e-5))),
        "LayerNormalization": layer_norm,
        "LRN": lambda a, o, s, x: F.local_response_norm(x, int(a["size"]), float(a.get("alpha", 1e-4)),
                                                        float(a.get("beta", 0.75)), float(a.get("bias", 1.0))),
        "Softmax": softmax(torch.softmax), "LogSoftmax": softmax(torch.log_softmax),
        "ReduceMean": reduce(lambda x, ax, k: x.mean(ax, keepdim=k)),
        "ReduceSum": reduce(lambda x, ax, k: x.sum(ax, keepdim=k)),
        "ReduceMax": reduce(lambda x, ax, k: x.amax(ax, keepdim=k)),
        "Reshape": reshape, "Flatten": lambda a, o, s, x: x.reshape(math.prod(x.shape[:int(a.get("axis", 1))]), -1),
        "Squeeze": squeeze, "Unsqueeze": unsqueeze,
        "Transpose": lambda a, o, s, x: x.permute(*as_ints(a.get("perm", list(reversed(range(x.ndim)))))),
        "Concat": lambda a, o, s, *xs: torch.cat(xs, int(a["axis"])), "Split": split, "Slice": slice_,
        "Gather": gather, "Pad": pad,
        "Cast": lambda a, o, s, x: x.to(_torch_dtype(torch, int(a["to"]))),
    })
    return table


_CONST_PARAMS = {"Reshape": (1,), "Squeeze": (1,), "Unsqueeze": (1,), "Split": (1,), "Slice": (1, 2, 3, 4),
                 "Pad": (1, 2, 3), "Clip": (1, 2), "ReduceMean": (1,), "ReduceSum": (1,), "ReduceMax": (1,)}


def onnxruntime_runner(model_or_path, threads: int | None = None):
    """``run(*arrays) -> list of arrays``: the model in an onnxruntime CPU session with
    ``threads`` intra-op threads (default: onnxruntime's)."""
    import onnxruntime as ort
    model = load_model(model_or_path)
    options = ort.SessionOptions()
    if threads is not None:
        options.intra_op_num_threads = threads
    options.log_severity_level = 3
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]

    def run(*arrays):
        return session.run(None, dict(zip(names, arrays)))

    return run


def seconds_per_call(fn, repeat: int = 10, min_repeat_ms: float = 100.0) -> float:
    """The median over ``repeat`` repeats of ``fn``'s seconds per call, each repeat calling
    it until ``min_repeat_ms`` have passed, after one warm-up call (as ``GraphExecutor.benchmark``)."""
    return statistics.median(time_repeats(fn, repeat, min_repeat_ms))


def torch_runner(model_or_path, input_shapes: dict | None = None, threads: int | None = None):
    """``run(*arrays) -> list of arrays``: the model run by PyTorch (TorchScript, frozen),
    inputs in the model's order. ``threads``: PyTorch's intra-op threads (default: as set).
    Raises ``Unsupported`` for a node it cannot map."""
    import torch
    import torch.nn.functional as F
    model = fix_input_shapes(load_model(model_or_path), input_shapes)
    opset = model_opset(model)
    shapes = inferred_shapes(model)
    table = _torch_ops(torch, F)
    from onnx import numpy_helper
    consts = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in consts]
    for i in inputs:
        shapes[i.name] = tuple(d.dim_value for d in i.type.tensor_type.shape.dim)
    steps = []          # (fn, attrs, input names or arrays, output names)
    runtime = {i.name for i in inputs}
    for node in model.graph.node:
        args = [consts.get(i) if i else None for i in node.input]
        if not any(i in runtime for i in node.input if i):
            for name, value in zip(node.output, fold_node(node, args, opset)):
                consts[name] = value
            continue
        if node.op_type in ("Shape", "Size"):
            shape = shapes.get(node.input[0])
            if shape is None:
                raise Unsupported(f"Shape of '{node.input[0]}', whose shape is not known statically")
            attrs = node_attributes(node)
            value = np.array(shape[attrs.get("start", 0):attrs.get("end", len(shape))], np.int64)
            consts[node.output[0]] = value if node.op_type == "Shape" else np.array(int(np.prod(shape)), np.int64)
            continue
        fn = table.get(node.op_type)
        if fn is None:
            raise Unsupported(f"{node.op_type} has no PyTorch mapping here")
        steps.append((fn, node_attributes(node), list(node.input), list(node.output), node.op_type))
        runtime.update(o for o in node.output if o)
    tensors = {k: _to_torch(torch, np.array(v)) for k, v in consts.items()}

    def forward(*xs):
        values = dict(zip([i.name for i in inputs], xs))
        for fn, attrs, ins, outs, op in steps:
            args = []
            for k, name in enumerate(ins):
                if not name:
                    args.append(None)
                elif name in values:
                    args.append(values[name])
                elif k in _CONST_PARAMS.get(op, ()):
                    args.append(consts[name])       # shapes, axes, bounds: Python values
                else:
                    args.append(tensors[name])
            while args and args[-1] is None:
                args.pop()
            got = fn(attrs, opset, [tuple(a.shape) if a is not None else None for a in args], *args)
            for name, value in zip(outs, got if isinstance(got, list) else [got]):
                values[name] = value
        return tuple(values[o.name] for o in model.graph.output)

    class Module(torch.nn.Module):
        def forward(self, *xs):
            return forward(*xs)

    if threads is not None:
        torch.set_num_threads(threads)
    example = tuple(torch.zeros(shapes[i.name], dtype=_torch_dtype(torch, i.type.tensor_type.elem_type))
                    for i in inputs)
    with torch.no_grad():
        traced = torch.jit.trace(Module().eval(), example, check_trace=False)
        frozen = torch.jit.optimize_for_inference(torch.jit.freeze(traced))

    def run(*arrays):
        with torch.inference_mode():
            out = frozen(*[_to_torch(torch, np.ascontiguousarray(a)) for a in arrays])
        return [_to_numpy(torch, o) for o in (out if isinstance(out, tuple) else (out,))]

    return run


def _to_torch(torch, array: np.ndarray):
    """``torch.from_numpy``, which knows no bfloat16 (ml_dtypes'): those go through float32
    (exactly: every bfloat16 is a float32)."""
    if array.dtype.name == "bfloat16":
        return torch.from_numpy(array.astype(np.float32)).to(torch.bfloat16)
    return torch.from_numpy(array)


def _to_numpy(torch, tensor) -> np.ndarray:
    if tensor.dtype == torch.bfloat16:
        import ml_dtypes
        return tensor.float().numpy().astype(ml_dtypes.bfloat16)
    return tensor.numpy()


def _torch_dtype(torch, onnx_type: int):
    from onnx import TensorProto, helper
    if onnx_type == TensorProto.BFLOAT16:
        return torch.bfloat16
    return torch.from_numpy(np.zeros(0, helper.tensor_dtype_to_np_dtype(onnx_type))).dtype
