"""The convolution family: N-d (grouped, dilated) convolution, depthwise, transposed, capsule.

Every member pads its input as a separate stage (see ``common.pad``) and reduces over a
window of it. Weight layouts: channel-last data takes a (*kernel, CI/groups, CO) weight
(HWIO), channel-first data a (CO, CI/groups, *kernel) one (OIHW); the depthwise and
transposed variants follow TVM (see their docstrings). Flops follow Ansor:
2·N·OH·OW·CO·(CI/groups)·KH·KW, and for the transposed convolution only the useful
multiply-adds, 2·N·H·W·CI·CO·KH·KW.
"""
from __future__ import annotations

import math

import ir
from ir.tensor import as_int

from . import reference as ref
from .common import (as_tuple, attr_tuple, check_dims, data_layout, node_layout, node_pads, numel, out_size, pad,
                     parse_layout, reduce_axes, sliding, window)
from .registry import ANCHOR, node_kind, operator


def _check_groups(what: str, ci: int, co: int, groups) -> None:
    if as_int(groups) is None or groups < 1:
        raise ValueError(f"{what}: groups must be a positive int, got {groups!r}")
    for label, c in (("input", ci), ("output", co)):
        if c % groups:
            raise ValueError(f"{what}: {c} {label} channels are not divisible by groups={groups}")


_WEIGHT_AXES = {"K": "*kernel", "I": "in_channels", "O": "out_channels", "C": "channels", "M": "multiplier"}


def _weight_dims(weight, data, pattern: str, what: str) -> dict:
    """The extents of a weight laid out as ``pattern``, e.g. "KIO" for (*kernel, in, out)."""
    if weight.ndim != data.ndim:
        described = ", ".join(_WEIGHT_AXES[a] for a in pattern)
        raise ValueError(f"{what}: the weight has shape {weight.shape}; expected {data.ndim} dimensions "
                         f"({described})")
    sd, dims, pos = data.ndim - 2, {}, 0
    for axis in pattern:
        width = sd if axis == "K" else 1
        dims[axis] = weight.shape[pos:pos + width] if axis == "K" else weight.shape[pos]
        pos += width
    return dims


def conv(data, weight, stride=1, padding=0, dilation=1, groups=1, layout="NHWC", name=None, pad_after=None):
    """Convolution with 1 to 3 spatial dimensions (from the data's rank), grouped and dilated;
    ``padding`` before each spatial axis, ``pad_after`` (default: the same) after it."""
    what = name or f"conv{data.ndim - 2}d"
    lay = data_layout(data, layout, what)
    dims = _weight_dims(weight, data, "KIO" if lay.channel_last else "OIK", what)
    kernel, cig, co = dims["K"], dims["I"], dims["O"]
    ci = lay.unpack(data.shape)[1]
    _check_groups(what, ci, co, groups)
    if cig != ci // groups:
        raise ValueError(f"{what}: the weight {weight.shape} has {cig} input channels per group, expected "
                         f"CI/groups = {ci}/{groups} = {ci // groups}")
    win = sliding(data, kernel, stride, padding, dilation, layout, what, pad_after=pad_after)
    cog = co // groups
    rc = ir.reduce_axis(cig, "rc")
    rk = reduce_axes(kernel, lay)

    def body(*idx):
        n, c_out, sp = lay.unpack(idx)
        c_in = rc if groups == 1 else (c_out // cog) * cig + rc
        x = win.padded[lay.index(n, c_in, window(sp, rk, win.stride, win.dilation))]
        if lay.channel_last:
            return ir.sum(x * weight[(*rk, rc, c_out)], axis=[*rk, rc])
        return ir.sum(x * weight[(c_out, rc, *rk)], axis=[rc, *rk])

    tag = f"{'group_' if groups > 1 else ''}conv{lay.spatial_dims}d_{layout.lower()}"
    return ir.compute(lay.shape(win.batch, co, win.out_spatial), body, name=name or tag, tag=tag)


def _of_rank(spatial_dims: int):
    def conv_nd(data, weight, stride=1, padding=0, dilation=1, groups=1,
                layout=("NWC", "NHWC", "NDHWC")[spatial_dims - 1], name=None):
        if data.ndim != spatial_dims + 2:
            raise ValueError(f"conv{spatial_dims}d: data has shape {data.shape}; expected "
                             f"{spatial_dims + 2} dimensions")
        return conv(data, weight, stride, padding, dilation, groups, layout, name)
    conv_nd.__name__ = conv_nd.__qualname__ = f"conv{spatial_dims}d"
    conv_nd.__doc__ = f"``conv`` for data with {spatial_dims} spatial dimension(s)."
    return conv_nd


conv1d, conv2d, conv3d = _of_rank(1), _of_rank(2), _of_rank(3)


def depthwise_conv2d(data, weight, stride=1, padding=0, dilation=1, layout="NHWC", name=None, pad_after=None):
    """Each channel convolved with its own filters. Weight (kh, kw, C, multiplier) for NHWC,
    (C, multiplier, kh, kw) for NCHW; output channel ``c·multiplier + q``; ``pad_after`` as ``conv``."""
    what = name or "depthwise_conv2d"
    lay = data_layout(data, layout, what)
    dims = _weight_dims(weight, data, "KCM" if lay.channel_last else "CMK", what)
    kernel, c, m = dims["K"], dims["C"], dims["M"]
    if c != lay.unpack(data.shape)[1]:
        raise ValueError(f"{what}: the weight {weight.shape} is for {c} channels, the data {data.shape} "
                         f"has {lay.unpack(data.shape)[1]}")
    win = sliding(data, kernel, stride, padding, dilation, layout, what, pad_after=pad_after)
    rk = reduce_axes(kernel, lay)

    def body(*idx):
        n, c_out, sp = lay.unpack(idx)
        c_in, q = (c_out, 0) if m == 1 else (c_out // m, c_out % m)
        x = win.padded[lay.index(n, c_in, window(sp, rk, win.stride, win.dilation))]
        w = weight[(*rk, c_in, q)] if lay.channel_last else weight[(c_in, q, *rk)]
        return ir.sum(x * w, axis=rk)

    tag = f"depthwise_conv{lay.spatial_dims}d_{layout.lower()}"
    return ir.compute(lay.shape(win.batch, c * m, win.out_spatial), body, name=name or tag, tag=tag)


def conv2d_transpose(data, weight, stride=1, padding=0, layout="NHWC", name=None, pad_after=None,
                     output_padding=0):
    """The gradient of conv2d w.r.t. its input. Weight (kh, kw, CI, CO) for NHWC, (CI, CO, kh, kw)
    for NCHW (TVM's). As in TVM, one stage ("dilate_pad") inserts stride−1 zeros between input
    pixels and pads by kernel−1−padding; a stride-1 convolution with the flipped kernel follows.
    ``padding`` crops before each spatial axis, ``pad_after`` (default: the same) after it, and
    ``output_padding`` adds rows and columns at the end (ONNX's and PyTorch's)."""
    what = name or "conv2d_transpose"
    lay = data_layout(data, layout, what)
    sd = lay.spatial_dims
    dims = _weight_dims(weight, data, "KIO" if lay.channel_last else "IOK", what)
    kernel, ci, co = dims["K"], dims["I"], dims["O"]
    n, data_ci, in_sp = lay.unpack(data.shape)
    if ci != data_ci:
        raise ValueError(f"{what}: the weight {weight.shape} has {ci} input channels, the data {data.shape} "
                         f"has {data_ci}")
    stride = as_tuple(stride, sd, f"{what}: stride")
    padding = as_tuple(padding, sd, f"{what}: padding", minimum=0)
    after = padding if pad_after is None else as_tuple(pad_after, sd, f"{what}: pad_after", minimum=0)
    extra = as_tuple(output_padding, sd, f"{what}: output_padding", minimum=0)
    out_sp = tuple((i - 1) * s - p - a + k + e for i, s, p, a, k, e in zip(in_sp, stride, padding, after, kernel, extra))
    if min(out_sp) < 1:
        pads = padding if after == padding else f"{padding} before, {after} after"
        raise ValueError(f"{what}: padding {pads} is too large for input {in_sp} with kernel {kernel} "
                         f"and stride {stride}; output would be {out_sp}")
    offsets = [k - 1 - p for k, p in zip(kernel, padding)]
    if any(st > 1 for st in stride):
        return _conv_transpose_by_phase(data, weight, lay, n, kernel, stride, offsets, in_sp, out_sp, ci, co,
                                        name, layout)
    # positions of the dilated input past its last pixel that the windows read (asymmetric padding)
    overhang = [o + k - 2 - off - (i - 1) * s for o, k, off, i, s in zip(out_sp, kernel, offsets, in_sp, stride)]

    def dilate_pad(*idx):
        n_, c, sp = lay.unpack(idx)
        conds, src = [], []
        for t, off, s, size, over in zip(sp, offsets, stride, in_sp, overhang):
            u = t - off if off else t
            if off > 0:
                conds.append(t >= off)
            if over > 0:
                conds.append(t < off + (size - 1) * s + 1)
            if s > 1:
                conds.append(u % s == 0)
                u = u // s
            src.append(u)
        x = data[lay.index(n_, c, src)]
        return ir.select(ir.all_of(conds), x, 0) if conds else x

    if any(s > 1 for s in stride) or any(offsets) or any(o > 0 for o in overhang):
        dilated = ir.compute(lay.shape(n, ci, [o + k - 1 for o, k in zip(out_sp, kernel)]), dilate_pad,
                             name="dilate_pad", tag="injective,pad")
    else:
        dilated = data
    rc = ir.reduce_axis(ci, "rc")
    rk = reduce_axes(kernel, lay)

    def body(*idx):
        n_, c_out, sp = lay.unpack(idx)
        x = dilated[lay.index(n_, rc, [o + r for o, r in zip(sp, rk)])]
        flipped = [k - 1 - r for k, r in zip(kernel, rk)]
        if lay.channel_last:
            return ir.sum(x * weight[(*flipped, rc, c_out)], axis=[*rk, rc])
        return ir.sum(x * weight[(rc, c_out, *flipped)], axis=[rc, *rk])

    tag = f"conv{sd}d_transpose_{layout.lower()}"
    return ir.compute(lay.shape(n, co, out_sp), body, name=name or tag, tag=tag)


def _conv_transpose_by_phase(data, weight, lay, n, kernel, stride, offsets, in_sp, out_sp, ci, co, name, layout):
    """A strided transposed convolution without its zeros: of the kernel taps over the
    dilated input only every stride-th meets an input pixel, which ones depending on the
    output position's phase (o − offset) mod s. Output o reads input
    q = ⌈(o − offset) / s⌉ + j with the flipped kernel's tap r = (offset − o) mod s + s·j,
    for j < ⌈k / s⌉: 1/s of the dilated form's multiply-adds per strided dimension (the
    zeros TVM's form multiplies unless an unrolled loop folds its condition).

    Where every strided output size is a multiple of its stride, the sums are computed
    phase-major, o = q·s + p with q and p axes of their own (laid out as the output is), and
    copied into the output's shape: neighbouring outputs have different phases and so
    different taps, so a register tile of them would load one weight per multiply-add; a
    tile of one phase's positions shares its weights, as a convolution's does."""
    taps = [-(-k // st) for k, st in zip(kernel, stride)]
    rc = ir.reduce_axis(ci, "rc")
    rk = reduce_axes(taps, lay)
    phased = all(st == 1 or out % st == 0 for st, out in zip(stride, out_sp))

    def term(n_, c_out, positions):
        """The summand at the output position given per dimension as (q, p), o = q·s + p
        (q None: o = p)."""
        conds, src, tap = [], [], []
        for (q_out, p), j, off, st, k, t, size, out in zip(positions, rk, offsets, stride, kernel, taps, in_sp,
                                                            out_sp):
            if st > 1:
                r = (off - p) % st + j * st
                q = (p - off + st - 1) // st + j
                q = q + q_out if q_out is not None else q
            else:
                r, q = j, p - off + j
            if st * t > k:  # the last tap runs past the kernel for some phases
                conds.append(r < k)
            if off // st > 0:  # ⌈(0 − off) / s⌉ < 0: the first outputs start before the input
                conds.append(q >= 0)
            if -((off - out + 1) // st) + t - 1 >= size:  # the last ones read past its end
                conds.append(q < size)
            src.append(q)
            tap.append(k - 1 - r)
        w = weight[(*tap, rc, c_out)] if lay.channel_last else weight[(rc, c_out, *tap)]
        value = data[lay.index(n_, rc, src)] * w
        return ir.select(ir.all_of(conds), value, 0) if conds else value

    tag = f"conv{lay.spatial_dims}d_transpose_{layout.lower()}"
    if not phased:
        def body(*idx):
            n_, c_out, sp = lay.unpack(idx)
            return ir.sum(term(n_, c_out, [(None, o) for o in sp]), axis=[*rk, rc])

        return ir.compute(lay.shape(n, co, out_sp), body, name=name or tag, tag=tag)

    split = [st > 1 for st in stride]
    phase_sp = [d for out, st, s in zip(out_sp, stride, split) for d in ((out // st, st) if s else (out,))]

    def phase_body(*idx):
        n_, c_out, flat = lay.unpack(idx)
        flat, positions = list(flat), []
        for s in split:
            positions.append((flat.pop(0), flat.pop(0)) if s else (None, flat.pop(0)))
        return ir.sum(term(n_, c_out, positions), axis=[*rk, rc])

    phases = ir.compute(lay.shape(n, co, phase_sp), phase_body, name=f"{name or tag}_phases", tag=tag)

    def copy(*idx):
        n_, c_out, sp = lay.unpack(idx)
        src = [i for o, st, s in zip(sp, stride, split) for i in ((o // st, o % st) if s else (o,))]
        return phases[lay.index(n_, c_out, src)]

    return ir.compute(lay.shape(n, co, out_sp), copy, name=name or tag, tag="injective")


def capsule_conv2d(data, weight, stride=1, padding=0, layout="NHWC", name=None):
    """Capsule convolution (the paper's CAP): data (N, H, W, cap, cap, CI), weight
    (k, k, cap, cap, CI, CO), out[n,h,w,i,j,co] = Σ data[n, h·s+rh−p, w·s+rw−p, i, rk, rc] ·
    weight[rh, rw, rk, j, rc, co]. Only the channel-last layout exists (as in the paper)."""
    what = name or "capsule_conv2d"
    if layout != "NHWC":
        raise ValueError(f"{what}: unknown layout {layout!r}; expected 'NHWC' (the only capsule layout)")
    if data.ndim != 6 or weight.ndim != 6:
        raise ValueError(f"{what}: data {data.shape} and weight {weight.shape} must both have 6 dimensions: "
                         "(N, H, W, cap, cap, CI) and (k, k, cap, cap, CI, CO)")
    n, h, w, cap_i, cap_k, ci = data.shape
    kh, kw, wcap_k, cap_j, wci, co = weight.shape
    if (wcap_k, wci) != (cap_k, ci):
        raise ValueError(f"{what}: the weight {weight.shape} does not fit the data {data.shape}: "
                         f"expected (k, k, {cap_k}, cap, {ci}, CO)")
    s = as_tuple(stride, 2, f"{what}: stride")
    p = as_tuple(padding, 2, f"{what}: padding", minimum=0)
    out_sp = [out_size(size, k, ss, pp) for size, k, ss, pp in zip((h, w), (kh, kw), s, p)]
    if min(out_sp) < 1:
        raise ValueError(f"{what}: the kernel {(kh, kw)} does not fit the input {(h, w)} padded by {p}")
    padded = pad(data, (0, p[0], p[1], 0, 0, 0))
    rh, rw = ir.reduce_axis(kh, "rh"), ir.reduce_axis(kw, "rw")
    rk, rc = ir.reduce_axis(cap_k, "rk"), ir.reduce_axis(ci, "rc")

    def body(n_, y, x, i, j, c):
        yy, xx = window((y, x), (rh, rw), s, (1, 1))
        return ir.sum(padded[n_, yy, xx, i, rk, rc] * weight[rh, rw, rk, j, rc, c], axis=[rh, rw, rk, rc])

    tag = "conv2d_capsule_nhwijc"
    return ir.compute((n, *out_sp, cap_i, cap_j, co), body, name=name or tag, tag=tag)


# workloads -----------------------------------------------------------------------------

def _tuple(value, n: int) -> tuple:
    return (value,) * n if as_int(value) is not None else tuple(value)


def _channel_last(layout: str) -> bool:
    return layout.endswith("C")


def _conv_workload(what, N, spatial, CI, CO, kernel, stride, padding, dilation, groups, layout,
                   weight_constant, dtype):
    """Placeholders for a convolution: data in ``layout``, weight HWIO/OIHW to match."""
    lay = parse_layout(layout, len(spatial), what)
    check_dims(what, N=N, CI=CI, CO=CO, **{f"spatial[{i}]": s for i, s in enumerate(spatial)})
    kernel = as_tuple(kernel, len(spatial), f"{what}: kernel")
    _check_groups(what, CI, CO, groups)
    data = ir.placeholder(lay.shape(N, CI, spatial), dtype, name="data")
    w_shape = (*kernel, CI // groups, CO) if lay.channel_last else (CO, CI // groups, *kernel)
    weight = ir.placeholder(w_shape, dtype, name="weight", constant=weight_constant)
    return [data, weight, conv(data, weight, stride, padding, dilation, groups, layout)]


def _conv_reference(ins, p):
    sd = ins[0].ndim - 2
    return [ref.conv(ins[0], ins[1], _tuple(p.stride, sd), _tuple(p.padding, sd), _tuple(p.dilation, sd),
                     p.groups, _channel_last(p.layout))]


def _conv_flops(ts, p):
    sd = ts[0].ndim - 2
    return 2 * numel(ts[-1].shape) * (p.CI // p.groups) * math.prod(_tuple(p.kernel, sd))


@operator("conv1d", reference=_conv_reference, flops=_conv_flops)
def conv1d_workload(N, L, CI, CO, kernel, stride=1, padding=0, dilation=1, groups=1, layout="NWC",
                    weight_constant=True, dtype="float32"):
    """1-d convolution of (N, L, CI) data (NWC; or NCW) with a (k, CI/groups, CO) weight (or OIW)."""
    return _conv_workload("conv1d", N, (L,), CI, CO, kernel, stride, padding, dilation, groups, layout,
                          weight_constant, dtype)


@operator("conv2d", reference=_conv_reference, flops=_conv_flops)
def conv2d_workload(N, H, W, CI, CO, kernel, stride=1, padding=0, dilation=1, groups=1, layout="NHWC",
                    weight_constant=True, dtype="float32"):
    """2-d convolution of (N, H, W, CI) data (NHWC; or NCHW) with an HWIO (or OIHW) weight."""
    return _conv_workload("conv2d", N, (H, W), CI, CO, kernel, stride, padding, dilation, groups, layout,
                          weight_constant, dtype)


@operator("conv3d", reference=_conv_reference, flops=_conv_flops)
def conv3d_workload(N, D, H, W, CI, CO, kernel, stride=1, padding=0, dilation=1, groups=1, layout="NDHWC",
                    weight_constant=True, dtype="float32"):
    """3-d convolution of (N, D, H, W, CI) data (NDHWC; or NCDHW) with a DHWIO (or OIDHW) weight."""
    return _conv_workload("conv3d", N, (D, H, W), CI, CO, kernel, stride, padding, dilation, groups, layout,
                          weight_constant, dtype)


@operator("depthwise_conv2d",
          reference=lambda ins, p: [ref.depthwise_conv(ins[0], ins[1], _tuple(p.stride, 2), _tuple(p.padding, 2),
                                                       _tuple(p.dilation, 2), _channel_last(p.layout))],
          flops=lambda ts, p: 2 * numel(ts[-1].shape) * math.prod(_tuple(p.kernel, 2)))
def depthwise_conv2d_workload(N, H, W, C, kernel, stride=1, padding=0, dilation=1, multiplier=1,
                              layout="NHWC", weight_constant=True, dtype="float32"):
    """Depthwise convolution of C channels, ``multiplier`` filters each (the suite's DEP)."""
    lay = parse_layout(layout, 2, "depthwise_conv2d")
    check_dims("depthwise_conv2d", N=N, H=H, W=W, C=C, multiplier=multiplier)
    kernel = as_tuple(kernel, 2, "depthwise_conv2d: kernel")
    data = ir.placeholder(lay.shape(N, C, (H, W)), dtype, name="data")
    w_shape = (*kernel, C, multiplier) if lay.channel_last else (C, multiplier, *kernel)
    weight = ir.placeholder(w_shape, dtype, name="weight", constant=weight_constant)
    return [data, weight, depthwise_conv2d(data, weight, stride, padding, dilation, layout)]


@operator("conv2d_transpose",
          reference=lambda ins, p: [ref.conv_transpose(ins[0], ins[1], _tuple(p.stride, 2), _tuple(p.padding, 2),
                                                       _channel_last(p.layout))],
          flops=lambda ts, p: 2 * p.N * p.H * p.W * p.CI * p.CO * math.prod(_tuple(p.kernel, 2)))
def conv2d_transpose_workload(N, H, W, CI, CO, kernel, stride=1, padding=0, layout="NHWC",
                              weight_constant=True, dtype="float32"):
    """Transposed convolution (the suite's T2D); weight (k, k, CI, CO) for NHWC, (CI, CO, k, k) for NCHW."""
    lay = parse_layout(layout, 2, "conv2d_transpose")
    check_dims("conv2d_transpose", N=N, H=H, W=W, CI=CI, CO=CO)
    kernel = as_tuple(kernel, 2, "conv2d_transpose: kernel")
    data = ir.placeholder(lay.shape(N, CI, (H, W)), dtype, name="data")
    w_shape = (*kernel, CI, CO) if lay.channel_last else (CI, CO, *kernel)
    weight = ir.placeholder(w_shape, dtype, name="weight", constant=weight_constant)
    return [data, weight, conv2d_transpose(data, weight, stride, padding, layout)]


@operator("capsule_conv2d",
          reference=lambda ins, p: [ref.capsule_conv2d(ins[0], ins[1], _tuple(p.stride, 2), _tuple(p.padding, 2))],
          flops=lambda ts, p: 2 * numel(ts[-1].shape) * math.prod(ts[1].shape[:3]) * p.CI)
def capsule_conv2d_workload(N, H, W, CI, CO, kernel, stride=1, padding=0, capsule=4, layout="NHWC",
                            weight_constant=True, dtype="float32"):
    """Capsule convolution (the suite's CAP) with ``capsule`` x ``capsule`` pose matrices."""
    check_dims("capsule_conv2d", N=N, H=H, W=W, CI=CI, CO=CO, capsule=capsule, kernel=kernel)
    if layout != "NHWC":
        raise ValueError(f"capsule_conv2d: unknown layout {layout!r}; expected 'NHWC' (the only capsule layout)")
    data = ir.placeholder((N, H, W, capsule, capsule, CI), dtype, name="data")
    weight = ir.placeholder((kernel, kernel, capsule, capsule, CI, CO), dtype, name="weight",
                            constant=weight_constant)
    return [data, weight, capsule_conv2d(data, weight, stride, padding)]


# graph node kinds (channel-last data) ----------------------------------------------------

def _conv_node_reference(x, a):
    sd = x[0].ndim - 2
    before, after = node_pads(a, sd)
    return ref.conv(x[0], x[1], attr_tuple(a["stride"], sd), before, attr_tuple(a.get("dilation", 1), sd),
                    a.get("groups", 1), True, pad_after=after)


def _depthwise_node_reference(x, a):
    before, after = node_pads(a, 2)
    return ref.depthwise_conv(x[0], x[1], attr_tuple(a["stride"], 2), before, attr_tuple(a.get("dilation", 1), 2),
                              True, pad_after=after)


def _deconv_node_reference(x, a):
    before, after = node_pads(a, 2)
    return ref.conv_transpose(x[0], x[1], attr_tuple(a["stride"], 2), before, True, pad_after=after,
                              output_padding=attr_tuple(a.get("output_padding", 0), 2))


node_kind("conv", ANCHOR,
          lambda t, a, name: conv(t[0], t[1], a["stride"], a["padding"], a.get("dilation", 1), a.get("groups", 1),
                                  node_layout(t[0].ndim), name=name, pad_after=a.get("pad_after")),
          _conv_node_reference, 2)
node_kind("depthwise_conv2d", ANCHOR,
          lambda t, a, name: depthwise_conv2d(t[0], t[1], a["stride"], a["padding"], a.get("dilation", 1), "NHWC",
                                              name=name, pad_after=a.get("pad_after")),
          _depthwise_node_reference, 2)
node_kind("conv2d_transpose", ANCHOR,
          lambda t, a, name: conv2d_transpose(t[0], t[1], a["stride"], a["padding"], "NHWC", name=name,
                                              pad_after=a.get("pad_after"),
                                              output_padding=a.get("output_padding", 0)),
          _deconv_node_reference, 2)
