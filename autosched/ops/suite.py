"""The benchmark suite of the Ansor paper (its single-operator and subgraph benchmarks,
Figures 6 and 7) as named workloads.

A name says what it computes, so it stays valid when the suite grows, and any shape of a
family can be named (``suite_workload`` parses names, it does not look them up)::

    FAMILY-SHAPE[-WINDOW]
    FAMILY  GMM C1D C2D C3D GRP DIL DEP T2D CAP NRM CBR TBS (the paper's abbreviations;
            CBR is the ConvLayer subgraph)
    SHAPE   the family's size parameters joined by 'x', in the paper's order, batch first:
            GMM batch x N x M x K; C1D N x L x CI x CO; C3D N x D x H x W x CI x CO;
            C2D, GRP, DIL, T2D, CAP, CBR N x H x W x CI x CO; DEP N x H x W x C;
            NRM B x M x N; TBS batch x seq_len x n_head x n_dim
    WINDOW  for convolutions and CBR: k<kernel>s<stride>p<padding>, then d<dilation> and
            g<groups> where they are not 1

e.g. ``GMM-1x1024x1024x1024``, ``C2D-1x56x56x64x64-k1s1p0``, ``GRP-1x56x56x64x128-k3s2p1g4``,
``DIL-1x7x7x512x512-k3s1p1d2``, ``TBS-1x128x12x64``. ``suite(batch=16)`` multiplies the
batch (the first size) by 16, and the names say so (``C2D-16x56x56x64x64-k1s1p0``).
Layouts are channel-last, as in the paper's CPU evaluation; GMM is a batch matmul whose
operands are not constant (no layout rewrite unless asked); TBS includes the softmax.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from ir.tensor import as_int

from .registry import Workload, workload


@dataclass(frozen=True)
class Family:
    """One family of the suite: an operator and the paper's shape configurations."""
    code: str
    operator: str
    shape: tuple[str, ...]       # names of the size parameters, as they appear in a name
    window: bool                 # takes kernel, stride, padding (and dilation, groups)
    configs: tuple[tuple, ...]   # the paper's parameters in the paper's order
    kwargs: dict = field(default_factory=dict)


_RESNET_2D = ((1, 224, 224, 3, 64, 7, 2, 3), (1, 56, 56, 64, 64, 1, 1, 0),
              (1, 14, 14, 256, 256, 3, 1, 1), (1, 7, 7, 512, 512, 3, 1, 1))
_NHWC = ("N", "H", "W", "CI", "CO")

FAMILIES: tuple[Family, ...] = (
    Family("GMM", "batch_matmul", ("batch", "N", "M", "K"), False,
           ((1, 128, 128, 128), (1, 512, 32, 512), (1, 512, 512, 512), (1, 1024, 1024, 1024))),
    Family("C1D", "conv1d", ("N", "L", "CI", "CO"), True,
           ((1, 256, 64, 128, 3, 2, 1), (1, 128, 128, 256, 1, 2, 0), (1, 64, 256, 256, 5, 1, 2),
            (1, 32, 512, 512, 3, 1, 1)), {"layout": "NWC"}),
    Family("C2D", "conv2d", _NHWC, True, _RESNET_2D, {"layout": "NHWC"}),
    Family("C3D", "conv3d", ("N", "D", "H", "W", "CI", "CO"), True,
           tuple((c[0], 16) + c[1:] for c in _RESNET_2D), {"layout": "NDHWC"}),
    Family("GRP", "conv2d", _NHWC, True,
           ((1, 56, 56, 64, 128, 3, 2, 1, 1, 4), (1, 56, 56, 64, 64, 1, 1, 0, 1, 4),
            (1, 14, 14, 256, 256, 3, 1, 1, 1, 4), (1, 7, 7, 512, 512, 3, 1, 1, 1, 4)), {"layout": "NHWC"}),
    Family("DIL", "conv2d", _NHWC, True, tuple(c + (2,) for c in _RESNET_2D), {"layout": "NHWC"}),
    Family("DEP", "depthwise_conv2d", ("N", "H", "W", "C"), True,
           ((1, 112, 112, 32, 3, 1, 1), (1, 112, 112, 64, 3, 2, 1), (1, 14, 14, 512, 3, 2, 1),
            (1, 7, 7, 1024, 3, 1, 1)), {"layout": "NHWC"}),
    Family("T2D", "conv2d_transpose", _NHWC, True,
           ((1, 4, 4, 512, 256, 4, 2, 1), (1, 8, 8, 256, 128, 4, 2, 1), (1, 16, 16, 128, 64, 4, 2, 1),
            (1, 32, 32, 64, 3, 4, 2, 1)), {"layout": "NHWC"}),
    Family("CAP", "capsule_conv2d", _NHWC, True,
           ((1, 16, 16, 32, 32, 3, 2, 1), (1, 8, 8, 32, 32, 3, 1, 1), (1, 16, 16, 8, 16, 3, 2, 1),
            (1, 8, 8, 16, 16, 3, 1, 1)), {"capsule": 4}),
    Family("NRM", "norm", ("B", "M", "N"), False,
           ((1, 256, 256), (1, 512, 512), (1, 1024, 1024), (1, 4096, 1024))),
    Family("CBR", "conv_layer", _NHWC, True,
           ((1, 224, 224, 3, 64, 7, 2, 3), (1, 56, 56, 64, 128, 3, 2, 1), (1, 28, 28, 128, 256, 1, 2, 0),
            (1, 7, 7, 512, 512, 3, 1, 1)), {"layout": "NHWC"}),
    Family("TBS", "transpose_batch_matmul", ("batch", "seq_len", "n_head", "n_dim"), False,
           ((1, 128, 12, 64), (1, 128, 16, 64), (1, 64, 12, 128), (1, 128, 12, 128))),
)
_BY_CODE = {f.code: f for f in FAMILIES}
_NAME = re.compile(r"^([A-Z0-9]+)-(\d+(?:x\d+)*)(?:-k(\d+)s(\d+)p(\d+)(?:d(\d+))?(?:g(\d+))?)?$")


@dataclass(frozen=True)
class SuiteEntry:
    """A family and concrete parameters: what a suite name stands for."""
    family: Family
    shape: tuple[int, ...]
    window: tuple[int, int, int] | None = None  # kernel, stride, padding
    dilation: int = 1
    groups: int = 1

    @property
    def name(self) -> str:
        text = f"{self.family.code}-{'x'.join(map(str, self.shape))}"
        if self.window is not None:
            text += "-k{}s{}p{}".format(*self.window)
            text += f"d{self.dilation}" * (self.dilation != 1) + f"g{self.groups}" * (self.groups != 1)
        return text

    def workload(self) -> Workload:
        kwargs = dict(self.family.kwargs)
        if self.dilation != 1:
            kwargs["dilation"] = self.dilation
        if self.groups != 1:
            kwargs["groups"] = self.groups
        try:
            return workload(self.family.operator, *self.shape, *(self.window or ()), label=self.name, **kwargs)
        except TypeError as e:
            raise ValueError(f"suite workload {self.name!r}: {e}") from None


def _entry(family: Family, config: tuple, batch: int) -> SuiteEntry:
    n = len(family.shape)
    shape = (config[0] * batch,) + tuple(config[1:n])
    if not family.window:
        return SuiteEntry(family, shape)
    extra = config[n + 3:] + (1, 1)
    return SuiteEntry(family, shape, tuple(config[n:n + 3]), extra[0], extra[1])


def suite_names(batch: int = 1, families=None) -> list[str]:
    """The names of the suite's workloads, in the paper's order (nothing is built)."""
    return [e.name for e in _entries(batch, families)]


def _entries(batch: int, families) -> list[SuiteEntry]:
    if as_int(batch) is None or batch < 1:
        raise ValueError(f"batch must be a positive int, got {batch!r}")
    batch = as_int(batch)
    codes = [f.code for f in FAMILIES] if families is None else list(families)
    unknown = [c for c in codes if c not in _BY_CODE]
    if unknown:
        raise ValueError(f"unknown suite families {unknown}; expected some of {', '.join(_BY_CODE)}")
    return [_entry(_BY_CODE[c], cfg, batch) for c in codes for cfg in _BY_CODE[c].configs]


def suite(batch: int = 1, families=None) -> dict[str, Workload]:
    """The suite as ``{name: Workload}``; ``families`` (codes like "C2D") selects a part."""
    return {e.name: e.workload() for e in _entries(batch, families)}


def parse_suite_name(name: str) -> SuiteEntry:
    """The family and parameters that a suite name stands for (any shape, not only the paper's)."""
    m = _NAME.match(name) if isinstance(name, str) else None
    family = _BY_CODE.get(m.group(1)) if m else None
    example = "e.g. 'C2D-1x56x56x64x64-k1s1p0' or 'GMM-1x1024x1024x1024'"
    if family is None:
        raise ValueError(f"{name!r} is not a suite workload name: expected FAMILY-SHAPE[-kKsSpP[dD][gG]] with "
                         f"FAMILY one of {', '.join(_BY_CODE)}, {example}")
    shape = tuple(int(v) for v in m.group(2).split("x"))
    if len(shape) != len(family.shape):
        raise ValueError(f"{name!r}: {family.code} takes {len(family.shape)} sizes "
                         f"({'x'.join(family.shape)}), got {len(shape)}")
    has_window = m.group(3) is not None
    if has_window != family.window:
        raise ValueError(f"{name!r}: {family.code} names "
                         + ("need a -kKsSpP part" if family.window else "take no -kKsSpP part") + f", {example}")
    if not has_window:
        return SuiteEntry(family, shape)
    k, s, p, d, g = (int(v) if v is not None else 1 for v in m.groups()[2:])
    return SuiteEntry(family, shape, (k, s, p), d, g)


def suite_workload(name: str) -> Workload:
    """The workload a suite name stands for, e.g. ``suite_workload("C2D-1x56x56x64x64-k1s1p0")``."""
    return parse_suite_name(name).workload()
