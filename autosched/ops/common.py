"""Helpers shared by the operator modules: layouts, parameter checks, padding, windows.

The convolution family and pooling all read a padded input through a sliding window;
writing that once here keeps their definitions short and their error messages alike.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import ir
from ir.tensor import as_int

#: the data layouts of operators with 1, 2 or 3 spatial dimensions (channel-first, channel-last)
LAYOUTS = {1: ("NCW", "NWC"), 2: ("NCHW", "NHWC"), 3: ("NCDHW", "NDHWC")}


@dataclass(frozen=True)
class Layout:
    """Where the batch, channel and spatial axes of a data tensor are."""
    name: str

    @property
    def channel_last(self) -> bool:
        return self.name.endswith("C")

    @property
    def spatial_dims(self) -> int:
        return len(self.name) - 2

    @property
    def channel_axis(self) -> int:
        return len(self.name) - 1 if self.channel_last else 1

    def shape(self, n, c, spatial) -> tuple:
        """Arrange (batch, channel, spatial...) in this layout; works for shapes and indices."""
        return (n, *spatial, c) if self.channel_last else (n, c, *spatial)

    index = shape

    def unpack(self, seq) -> tuple:
        """The inverse of ``shape``: ``(batch, channel, spatial tuple)``."""
        seq = tuple(seq)
        if self.channel_last:
            return seq[0], seq[-1], seq[1:-1]
        return seq[0], seq[1], seq[2:]


def parse_layout(layout, spatial_dims: int, what: str) -> Layout:
    expected = LAYOUTS[spatial_dims]
    if layout not in expected:
        raise ValueError(f"{what}: unknown layout {layout!r}; expected one of "
                         f"{', '.join(repr(x) for x in expected)}")
    return Layout(layout)


def as_tuple(value, n: int, what: str, minimum: int = 1) -> tuple[int, ...]:
    """An int or a tuple of ``n`` ints, each at least ``minimum``, as a tuple of ``n`` ints."""
    values = (value,) * n if as_int(value) is not None else value
    ints = tuple(as_int(v) for v in values) if isinstance(values, (tuple, list)) else ()
    if len(ints) != n or any(v is None or v < minimum for v in ints):
        bound = "positive" if minimum == 1 else f">= {minimum}"
        raise ValueError(f"{what} must be an int or a tuple of {n} ints, each {bound}; got {value!r}")
    return ints


def check_positive(what: str, value) -> int:
    number = as_int(value)
    if number is None or number < 1:
        raise ValueError(f"{what} must be a positive int, got {value!r}")
    return number


def check_dims(what: str, **dims) -> None:
    """Each named extent must be a positive int: ``check_dims("conv2d", N=1, H=0)`` raises."""
    for name, value in dims.items():
        check_positive(f"{what}: {name}", value)


def check_shape(shape, what: str) -> tuple[int, ...]:
    if as_int(shape) is not None:
        shape = (shape,)
    ints = tuple(as_int(s) for s in shape) if isinstance(shape, (tuple, list)) else ()
    if not ints or any(s is None or s < 1 for s in ints):
        raise ValueError(f"{what} must be a non-empty tuple of positive ints, got {shape!r}")
    return ints


def out_size(size: int, kernel: int, stride: int, pad: int, dilation: int = 1, pad_after: int | None = None,
             ceil_mode: bool = False) -> int:
    """Output extent of a sliding window, as in every framework: floor mode by default; in
    ``ceil_mode`` a last partial window counts if it starts inside the input or the padding
    before it (PyTorch's and ONNX's rule). ``pad_after`` defaults to ``pad``."""
    span = size + pad + (pad if pad_after is None else pad_after) - dilation * (kernel - 1) - 1
    if not ceil_mode:
        return span // stride + 1
    out = -(-span // stride) + 1
    return out - 1 if (out - 1) * stride >= size + pad else out


def numel(shape) -> int:
    return math.prod(shape)


def pad(data, pad_before, pad_after=None, pad_value=0.0, name: str = "pad"):
    """``data`` surrounded by ``pad_value``: its own stage (tag ``injective,pad``), which the
    sketch rules may inline or compute_at. Returns ``data`` itself when nothing is padded."""
    nd = data.ndim
    before = as_tuple(pad_before, nd, f"{name}: pad_before", minimum=0)
    after = before if pad_after is None else as_tuple(pad_after, nd, f"{name}: pad_after", minimum=0)
    if not any(before) and not any(after):
        return data
    shape = tuple(s + b + a for s, b, a in zip(data.shape, before, after))
    fill = ir.const(pad_value, data.dtype)

    def body(*idx):
        conds, src = [], []
        for i, s, b, a in zip(idx, data.shape, before, after):
            if b:
                conds.append(i >= b)
            if a:
                conds.append(i < b + s)
            src.append(i - b if b else i)
        return ir.select(ir.all_of(conds), data[tuple(src)], fill)

    return ir.compute(shape, body, name=name, tag="injective,pad")


def attr_tuple(value, n: int) -> tuple:
    """A graph node's attribute that is an int (repeated ``n`` times) or a tuple, as a tuple."""
    return (value,) * n if as_int(value) is not None else tuple(value)


def node_layout(ndim: int) -> str:
    """The layout of a graph node's data of ``ndim`` dimensions: channel-last."""
    return LAYOUTS[ndim - 2][1]


def node_pads(attrs: dict, spatial_dims: int) -> tuple[tuple, tuple]:
    """A window node's padding before and after each spatial axis (``pad_after`` defaults
    to ``padding``)."""
    before = attr_tuple(attrs.get("padding", 0), spatial_dims)
    after = attrs.get("pad_after")
    return before, (before if after is None else attr_tuple(after, spatial_dims))


def scaled(index, factor: int):
    """``index * factor`` without a multiplication by one in the expression."""
    return index if factor == 1 else index * factor


def reduce_axes(kernel, layout: Layout) -> list:
    """One reduce axis per kernel dimension, named after the layout's axes (rh, rw...)."""
    names = [c.lower() for c in layout.name if c not in "NC"]
    return [ir.reduce_axis(k, f"r{n}") for k, n in zip(kernel, names)]


def window(out_index, reduce_index, stride, dilation) -> list:
    """Input positions read by a sliding window: ``out * stride + r * dilation`` per dimension."""
    return [scaled(o, s) + scaled(r, d) for o, r, s, d in zip(out_index, reduce_index, stride, dilation)]


@dataclass(frozen=True)
class Sliding:
    """A sliding-window operator's data side, normalised: layout, params, padded input."""
    layout: Layout
    batch: int
    channels: int
    in_spatial: tuple
    out_spatial: tuple
    stride: tuple
    padding: tuple
    dilation: tuple
    padded: object  # Tensor
    pad_after: tuple = ()   # explicit padding after each spatial axis (ceil mode may read beyond it)


def data_layout(data, layout, what: str) -> Layout:
    """The layout of ``data``, checked against its rank (3, 4 or 5 dimensions)."""
    sd = data.ndim - 2
    if sd not in LAYOUTS:
        raise ValueError(f"{what}: data must have 3, 4 or 5 dimensions (batch, channels, 1 to 3 "
                         f"spatial), got shape {data.shape}")
    return parse_layout(layout, sd, what)


def sliding(data, kernel, stride, padding, dilation, layout, what: str, pad_value=0.0,
            pad_name: str = "pad", pad_after=None, ceil_mode: bool = False) -> Sliding:
    """Check and normalise the window parameters of ``data`` and pad it (one shared stage).
    ``padding`` pads before each spatial axis, ``pad_after`` (default: the same) after it;
    in ``ceil_mode`` the input is padded further where the last window reaches beyond."""
    lay = data_layout(data, layout, what)
    sd = lay.spatial_dims
    n, c, in_sp = lay.unpack(data.shape)
    kernel = as_tuple(kernel, sd, f"{what}: kernel")
    stride = as_tuple(stride, sd, f"{what}: stride")
    padding = as_tuple(padding, sd, f"{what}: padding", minimum=0)
    after = padding if pad_after is None else as_tuple(pad_after, sd, f"{what}: pad_after", minimum=0)
    dilation = as_tuple(dilation, sd, f"{what}: dilation")
    out_sp = tuple(out_size(*a, ceil_mode) for a in zip(in_sp, kernel, stride, padding, dilation, after))
    if min(out_sp) < 1:
        raise ValueError(f"{what}: the window (kernel {kernel}, dilation {dilation}) does not fit the "
                         f"input {in_sp} padded by {padding} before and {after} after; output would be {out_sp}")
    reach = [max(a, (o - 1) * s + d * (k - 1) + 1 - i - p)
             for a, o, s, d, k, i, p in zip(after, out_sp, stride, dilation, kernel, in_sp, padding)]
    padded = pad(data, lay.shape(0, 0, padding), lay.shape(0, 0, reach), pad_value, pad_name)
    return Sliding(lay, n, c, tuple(in_sp), out_sp, stride, padding, dilation, padded, after)
