"""Winograd convolution F(m×m, 3×3) for channel-last 2-D data (Lavin & Gray 2016).

A stride-1, undilated, ungrouped 3×3 convolution computed on tiles of m×m outputs:
``Y = Aᵀ [(G g Gᵀ) ⊙ (Bᵀ d B)] A`` per (m+2)×(m+2) input tile ``d``. The multiplications
move into one batched matrix product per tile position (``bgemm``: tiles × CI by CI × CO,
(m+2)² of them), which needs (m+2)²/(9m²) of the direct convolution's multiply-adds:
1/2.25 for m = 2, 1/4 for m = 4. The weight transform ``U = G g Gᵀ`` depends only on the
weights, so it is done once, in numpy, when the model is prepared
(``winograd_weight``); the operator takes ``U`` as its weight, laid out (α², CI, CO).

Stages: the padded input, ``data_pack`` (Bᵀ d B: a reduction over the nonzero entries of
Bᵀ's rows, found through small constant tables on the loop indices; its coefficient a
scalar that LLVM hoists out of the vector loop over channels, leaving one multiply-add per
term), ``bgemm``, and the output (Aᵀ M A, its nonzero terms written out, which also undoes
the tiling): an elementwise stage, so the partitioner fuses bias, residual add and ReLU
into it as into a convolution's output. Leaving out the zero entries matters: F(2×2, 3×3)'s
Bᵀ is half zeros, so a reduction over the whole 4×4 tile spent three of every four
multiply-adds of the pack on zeros (ResNet-50's 56×56×64 layer at 48 trials: the pack
alone 0.17 -> 0.07 ms, the layer 0.89 -> 0.62-0.64 ms). The transforms cost a few
multiply-adds per tile position and channel, against CO (output channels) for ``bgemm``:
Winograd pays off on wide layers (``graph.passes`` decides where, and with which m).
m = 2 and m = 4 are offered: F(2×2, 3×3)'s matrices are 0, ±1 and ½, exact in float32, so
its result matches the direct convolution to rounding; F(4×4, 3×3) needs a quarter of the
direct multiply-adds (against 1/2.25) on larger transforms, and its G has sixths and
twenty-fourths, so its result is a few roundings further off (about 1e-5 relative).
"""
from __future__ import annotations

import math

import numpy as np

import ir
from ir import dtype as dt
from ir.tensor import as_int

from .common import as_tuple, check_dims, pad
from .registry import ANCHOR, node_kind, operator

#: F(m×m, 3×3) by m: Bᵀ (α×α), G (α×3), Aᵀ (m×α); m = 4 interpolates at 0, ±1, ±2 (Lavin & Gray)
_MATRICES = {
    2: (np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], np.float64),
        np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]], np.float64),
        np.array([[1, 1, 1, 0], [0, 1, -1, -1]], np.float64)),
    4: (np.array([[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0],
                  [0, -2, -1, 2, 1, 0], [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]], np.float64),
        np.array([[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6],
                  [1 / 24, 1 / 12, 1 / 6], [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]], np.float64),
        np.array([[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]], np.float64)),
}
TILE_SIZES = tuple(_MATRICES)


def transform_matrices(tile: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(Bᵀ, G, Aᵀ) of F(tile×tile, 3×3)."""
    if tile not in _MATRICES:
        raise ValueError(f"winograd: tile size {tile!r} is not offered; expected one of {TILE_SIZES}")
    return _MATRICES[tile]


def winograd_weight(weight: np.ndarray, tile: int = 2) -> np.ndarray:
    """``U = G g Gᵀ`` of an HWIO 3×3 weight (3, 3, CI, CO), as (α², CI, CO) float32: the
    tile positions (ε, ν) flattened row-major, one matrix per position."""
    weight = np.asarray(weight)
    if weight.ndim != 4 or weight.shape[:2] != (3, 3):
        raise ValueError(f"winograd_weight: expected a (3, 3, CI, CO) weight, got shape {weight.shape}")
    _, g, _ = transform_matrices(tile)
    u = np.einsum("ek,klio,fl->efio", g, weight.astype(np.float64), g)
    u = u.reshape(-1, *weight.shape[2:])
    return u.astype(weight.dtype if weight.dtype.kind == "f" else np.float32)


def conv2d_winograd(data, weight, padding=1, pad_after=None, tile: int = 2, name=None):
    """A 3×3, stride-1 convolution of NHWC ``data`` with a transformed weight ``U``
    (α², CI, CO) from ``winograd_weight``; ``padding`` before each spatial axis,
    ``pad_after`` (default: the same) after it. Output (N, OH, OW, CO) as ``conv2d``."""
    what = name or "conv2d_winograd"
    bt, _, at = transform_matrices(tile)
    alpha = tile + 2
    if data.ndim != 4:
        raise ValueError(f"{what}: data must be NHWC (4 dimensions), got shape {data.shape}")
    n, h, w, ci = data.shape
    if weight.ndim != 3 or tuple(weight.shape[:2]) != (alpha * alpha, ci):
        raise ValueError(f"{what}: the transformed weight has shape {weight.shape}; expected "
                         f"({alpha * alpha}, {ci}, CO) for F({tile}x{tile}, 3x3) on {ci} input channels")
    co = weight.shape[2]
    before = as_tuple(padding, 2, f"{what}: padding", minimum=0)
    after = before if pad_after is None else as_tuple(pad_after, 2, f"{what}: pad_after", minimum=0)
    oh, ow = h + before[0] + after[0] - 2, w + before[1] + after[1] - 2
    check_dims(what, OH=oh, OW=ow)
    nh, nw = math.ceil(oh / tile), math.ceil(ow / tile)
    # pad so that every tile's α×α window lies inside: nh·m + 2 rows
    extra = (nh * tile + 2 - h - before[0], nw * tile + 2 - w - before[1])
    padded = pad(data, (0, before[0], before[1], 0), (0, max(0, extra[0]), max(0, extra[1]), 0))
    tiles = nh * nw

    def tile_origin(p):
        """(batch, first row, first column) of tile ``p`` (tiles numbered row-major per image)."""
        return p // tiles, (p // nw) % nh * tile, p % nw * tile

    # Bᵀ's nonzero entries row by row: for F(2×2, 3×3), Bᵀ[ε, a]·Bᵀ[ν, b] is zero for 12 of a
    # tile position's 16 (a, b), and a reduction over the whole α×α tile would spend a
    # multiply-add on each
    columns, coefficients, terms = _nonzeros_by_row(bt)
    rk, rl = ir.reduce_axis(terms, "rk"), ir.reduce_axis(terms, "rl")

    def pack(e, p, c):
        b, y0, x0 = tile_origin(p)
        eps, nu = e // alpha, e % alpha
        # the coefficient first: a scalar of the loop indices, hoisted out of the vector loop
        # over channels, leaving one multiply-add per term
        return ir.sum(padded[b, y0 + _table(columns, eps, rk, dt.INDEX), x0 + _table(columns, nu, rl, dt.INDEX), c]
                      * (_table(coefficients, eps, rk, "float32") * _table(coefficients, nu, rl, "float32")),
                      axis=[rk, rl])

    # GFLOPS of this algorithm are those of the direct convolution it computes (as TVM reports them)
    direct_flops = 2 * n * oh * ow * co * ci * 9
    data_pack = ir.compute((alpha * alpha, n * tiles, ci), pack, name=f"{what}_data_pack", tag="winograd_data_pack",
                           attrs={"flop_count": 0})
    rc = ir.reduce_axis(ci, "rc")
    bgemm = ir.compute((alpha * alpha, n * tiles, co),
                       lambda e, p, o: ir.sum(data_pack[e, p, rc] * weight[e, rc, o], axis=[rc]),
                       name=f"{what}_bgemm", tag="winograd_bgemm", attrs={"flop_count": direct_flops})

    out_columns, out_coefficients, out_terms = _nonzeros_by_row(at)

    def inverse(b, y, x, o):
        # Aᵀ M A for the output's place (row, column) in its tile, its nonzero terms written
        # out (no reduction axis): an elementwise stage, which the sketch rules fuse into the
        # output's consumers and vectorise along the channels
        p = b * tiles + (y // tile) * nw + x // tile
        row, col = y % tile, x % tile
        return _sum([bgemm[_table(out_columns, row, k, dt.INDEX) * alpha + _table(out_columns, col, l, dt.INDEX), p, o]
                     * (_table(out_coefficients, row, k, "float32") * _table(out_coefficients, col, l, "float32"))
                     for k in range(out_terms) for l in range(out_terms)])

    return ir.compute((n, oh, ow, co), inverse, name=what, tag="conv2d_winograd_nhwc", attrs={"flop_count": 0})


def _sum(terms: list):
    total = terms[0]
    for t in terms[1:]:
        total = total + t
    return total


def _nonzeros_by_row(matrix: np.ndarray) -> tuple[list, list, int]:
    """(columns, values, k): each row's nonzero entries, in order, padded with a zero entry
    (column 0, value 0) up to the most any row has, ``k``."""
    rows = [[(j, float(v)) for j, v in enumerate(row) if v != 0.0] for row in matrix]
    k = max(len(r) for r in rows)
    rows = [r + [(0, 0.0)] * (k - len(r)) for r in rows]
    return [[j for j, _ in r] for r in rows], [[v for _, v in r] for r in rows], k


def _table(values: list, i, j, dtype: str):
    """``values[i][j]`` of a small constant table for index expressions (or ints) ``i``, ``j``."""
    if isinstance(j, int):
        return _select_tree(i, [ir.const(row[j], dtype) for row in values])
    return _select_tree(i, [_select_tree(j, [ir.const(v, dtype) for v in row]) for row in values])


def _select_tree(index, branches: list, first: int = 0):
    """``branches[index - first]`` for an index expression in ``[first, first + len(branches))``:
    a balanced tree of selects (depth log₂ of the count), whose branches read memory only
    when taken."""
    if len(branches) == 1:
        return branches[0]
    mid = len(branches) // 2
    return ir.select(index < first + mid, _select_tree(index, branches[:mid], first),
                     _select_tree(index, branches[mid:], first + mid))


def reference(data: np.ndarray, weight: np.ndarray, padding=1, pad_after=None, tile: int = 2) -> np.ndarray:
    """``conv2d_winograd`` in float64 numpy, independently of the tensor expression: the
    tiles' transforms as matrix products (float64 keeps it a reference)."""
    bt, _, at = transform_matrices(tile)
    alpha = tile + 2
    x = np.asarray(data, np.float64)
    u = np.asarray(weight, np.float64)
    u = u.reshape(alpha, alpha, *u.shape[1:])
    n, h, w, _ = x.shape
    before = as_tuple(padding, 2, "padding", minimum=0)
    after = before if pad_after is None else as_tuple(pad_after, 2, "pad_after", minimum=0)
    oh, ow = h + before[0] + after[0] - 2, w + before[1] + after[1] - 2
    nh, nw = math.ceil(oh / tile), math.ceil(ow / tile)
    xp = np.zeros((n, nh * tile + 2, nw * tile + 2, x.shape[3]))
    rows, cols = min(h, nh * tile + 2 - before[0]), min(w, nw * tile + 2 - before[1])
    xp[:, before[0]:before[0] + rows, before[1]:before[1] + cols] = x[:, :rows, :cols]
    out = np.zeros((n, nh * tile, nw * tile, u.shape[3]))
    for i in range(nh):
        for j in range(nw):
            d = xp[:, i * tile:i * tile + alpha, j * tile:j * tile + alpha]          # (n, α, α, ci)
            v = np.einsum("ea,nabc,fb->nefc", bt, d, bt)
            m = np.einsum("nefc,efco->nefo", v, u)
            out[:, i * tile:(i + 1) * tile, j * tile:(j + 1) * tile] = np.einsum("ye,nefo,xf->nyxo", at, m, at)
    return out[:, :oh, :ow]


def winograd_applicable(kernel, stride, dilation, groups, data_ndim: int) -> bool:
    """Whether a convolution with these parameters can be computed by ``conv2d_winograd``."""
    return (data_ndim == 4 and tuple(kernel) == (3, 3) and as_tuple(stride, 2, "stride") == (1, 1)
            and as_tuple(dilation, 2, "dilation") == (1, 1) and as_int(groups) == 1)


@operator("conv2d_winograd",
          reference=lambda ins, p: [reference(ins[0], ins[1], p.padding, None, p.tile)],
          flops=lambda ts, p: 2 * math.prod(ts[-1].shape) * p.CI * 9)
def conv2d_winograd_workload(N, H, W, CI, CO, padding=1, tile=2, weight_constant=True, dtype="float32"):
    """A 3×3 stride-1 convolution of NHWC data by Winograd's F(tile×tile, 3×3); the weight
    input is the transformed one, ((tile+2)², CI, CO) (``winograd_weight``)."""
    check_dims("conv2d_winograd", N=N, H=H, W=W, CI=CI, CO=CO)
    data = ir.placeholder((N, H, W, CI), dtype, name="data")
    weight = ir.placeholder(((tile + 2) ** 2, CI, CO), dtype, name="weight", constant=weight_constant)
    return [data, weight, conv2d_winograd(data, weight, padding, tile=tile)]


node_kind("conv2d_winograd", ANCHOR,
          lambda t, a, name: conv2d_winograd(t[0], t[1], a["padding"], a.get("pad_after"), a["tile"], name=name),
          lambda x, a: reference(x[0], x[1], a["padding"], a.get("pad_after"), a["tile"]), 2)
