"""Linear algebra: matmul, batch_matmul, dense (x·Wᵀ) and the matrix 2-norm.

The operands of a plain matmul are not weights, so they are not marked constant unless
asked (``b_constant=True``): the paper tunes GMM without layout rewrite. Dense is a network
layer, so its weight is constant by default.
"""
from __future__ import annotations

import ir

from . import reference as ref
from .common import check_dims
from .elementwise import bias_add
from .registry import ANCHOR, node_kind, operator


def _product(a, b, transpose_a: bool, transpose_b: bool, batch_dims: int, name: str, tag: str,
             columns: int | None = None):
    """``op(A)·op(B)`` over ``batch_dims`` leading axes that A and B share; ``columns``: only
    the first that many columns of ``op(B)`` (B stored wider: a padded copy)."""
    what = f"{name}: A {a.shape} (transpose_a={transpose_a}), B {b.shape} (transpose_b={transpose_b})"
    if a.ndim != b.ndim or a.ndim != batch_dims + 2:
        raise ValueError(f"{what}: expected both operands with {batch_dims + 2} dimensions")
    batch = a.shape[:batch_dims]
    if b.shape[:batch_dims] != batch:
        raise ValueError(f"{what}: the batch dimensions {batch} and {b.shape[:batch_dims]} differ")
    n, ka = a.shape[-2:][::-1] if transpose_a else a.shape[-2:]
    m, kb = b.shape[-2:] if transpose_b else b.shape[-2:][::-1]
    if ka != kb:
        raise ValueError(f"{what}: the reduction lengths differ (K={ka} from A, K={kb} from B)")
    if columns is not None:
        if not 0 < columns <= m:
            raise ValueError(f"{what}: columns={columns}; expected 1 to the {m} columns of B")
        m = columns
    k = ir.reduce_axis(ka, "k")

    def body(*idx):
        *bi, i, j = idx
        av = a[(*bi, k, i)] if transpose_a else a[(*bi, i, k)]
        bv = b[(*bi, j, k)] if transpose_b else b[(*bi, k, j)]
        return ir.sum(av * bv, axis=k)

    return ir.compute((*batch, n, m), body, name=name, tag=tag)


def matmul(a, b, transpose_a: bool = False, transpose_b: bool = False, name: str = "matmul",
           columns: int | None = None):
    """C (N, M) = A (N, K) · B (K, M); ``transpose_a``: A is stored (K, N); ``transpose_b``: B is
    (M, K); ``columns``: C has only the first that many of B's M columns."""
    return _product(a, b, transpose_a, transpose_b, 0, name, "matmul", columns)


def batch_matmul(a, b, transpose_a: bool = False, transpose_b: bool = False, name: str = "batch_matmul",
                 columns: int | None = None):
    """``matmul`` per index of the leading axes, which A and B share (one or more)."""
    if a.ndim < 3:
        raise ValueError(f"{name}: A has shape {a.shape}; expected at least one batch axis (3+ dims)")
    return _product(a, b, transpose_a, transpose_b, a.ndim - 2, name, "batch_matmul", columns)


def dense(x, weight, bias=None, name: str = "dense"):
    """y (batch, out) = x (batch, in) · weight (out, in)ᵀ [+ bias (out,)]; ``x`` may have more
    leading axes (batch, seq, in), each row multiplied alike, as ONNX's MatMul by a weight."""
    if x.ndim > 2 and weight.ndim == 2:
        if x.shape[-1] != weight.shape[1]:
            raise ValueError(f"{name}: x {x.shape} has {x.shape[-1]} features, the weight {weight.shape} "
                             f"expects {weight.shape[1]}")
        k = ir.reduce_axis(weight.shape[1], "k")
        y = ir.compute((*x.shape[:-1], weight.shape[0]),
                       lambda *idx: ir.sum(x[(*idx[:-1], k)] * weight[idx[-1], k], axis=k), name=name, tag="dense")
    else:
        y = _product(x, weight, False, True, 0, name, "dense")
    return y if bias is None else bias_add(y, bias, axis=-1, name=f"{name}_bias_add")


def norm(a, name: str = "norm"):
    """out[b] = sqrt(Σ a[b, ...]²): a sum of squares over all but the first axis, then sqrt."""
    if a.ndim < 2:
        raise ValueError(f"{name}: A has shape {a.shape}; expected a batch axis and at least one more")
    axes = [ir.reduce_axis(s, f"r{i}") for i, s in enumerate(a.shape[1:])]

    def square_sum(b):
        v = a[(b, *axes)]
        return ir.sum(v * v, axis=axes)

    ss = ir.compute(a.shape[:1], square_sum, name=f"{name}_square_sum", tag="comm_reduce")
    return ir.compute(a.shape[:1], lambda b: ir.sqrt(ss[b]), name=name, tag="elemwise")


# workloads -----------------------------------------------------------------------------

@operator("matmul", reference=lambda ins, p: [ref.matmul(*ins, p.transpose_a, p.transpose_b)],
          flops=lambda ts, p: 2 * p.N * p.M * p.K)
def matmul_workload(N, M, K, transpose_a=False, transpose_b=False, b_constant=False, dtype="float32"):
    """C (N, M) = A (N, K) · B (K, M), A stored transposed with ``transpose_a``, B with ``transpose_b``."""
    check_dims("matmul", N=N, M=M, K=K)
    a = ir.placeholder((K, N) if transpose_a else (N, K), dtype, name="A")
    b = ir.placeholder((M, K) if transpose_b else (K, M), dtype, name="B", constant=b_constant)
    return [a, b, matmul(a, b, transpose_a, transpose_b)]


@operator("batch_matmul", reference=lambda ins, p: [ref.matmul(*ins, p.transpose_a, p.transpose_b)],
          flops=lambda ts, p: 2 * p.batch * p.N * p.M * p.K)
def batch_matmul_workload(batch, N, M, K, transpose_a=False, transpose_b=False, b_constant=False,
                          dtype="float32"):
    """C[b] = A[b] · B[b] for ``batch`` independent (N, K)·(K, M) products (GMM in the suite)."""
    check_dims("batch_matmul", batch=batch, N=N, M=M, K=K)
    a = ir.placeholder((batch, K, N) if transpose_a else (batch, N, K), dtype, name="A")
    b = ir.placeholder((batch, M, K) if transpose_b else (batch, K, M), dtype, name="B", constant=b_constant)
    return [a, b, batch_matmul(a, b, transpose_a, transpose_b)]


@operator("dense", reference=lambda ins, p: [ref.dense(*ins)],
          flops=lambda ts, p: 2 * p.batch * p.in_features * p.out_features + p.bias * p.batch * p.out_features)
def dense_workload(batch, in_features, out_features, bias=False, weight_constant=True, dtype="float32"):
    """A fully connected layer: x (batch, in) · W (out, in)ᵀ, plus a bias when ``bias``."""
    check_dims("dense", batch=batch, in_features=in_features, out_features=out_features)
    x = ir.placeholder((batch, in_features), dtype, name="x")
    w = ir.placeholder((out_features, in_features), dtype, name="weight", constant=weight_constant)
    b = ir.placeholder((out_features,), dtype, name="bias", constant=weight_constant) if bias else None
    return [x, w] + ([b] if bias else []) + [dense(x, w, b)]


@operator("norm", reference=lambda ins, p: [ref.norm(ins[0])],
          flops=lambda ts, p: 2 * p.B * p.M * p.N + p.B)
def norm_workload(B, M, N, dtype="float32"):
    """The matrix 2-norm (Frobenius) of each of ``B`` (M, N) matrices (NRM in the suite)."""
    check_dims("norm", B=B, M=M, N=N)
    a = ir.placeholder((B, M, N), dtype, name="A")
    return [a, norm(a)]


# graph node kinds ------------------------------------------------------------------------

node_kind("dense", ANCHOR, lambda t, a, name: dense(t[0], t[1], name=name), lambda x, a: ref.dense(x[0], x[1]), 2)
def _product_node_reference(x, a):
    out = ref.matmul(x[0], x[1], a.get("transpose_a", False), a.get("transpose_b", False))
    return out if a.get("columns") is None else out[..., :a["columns"]]


node_kind("matmul", ANCHOR,
          lambda t, a, name: matmul(t[0], t[1], a.get("transpose_a", False), a.get("transpose_b", False), name,
                                    a.get("columns")),
          _product_node_reference, 2)
node_kind("batch_matmul", ANCHOR,
          lambda t, a, name: batch_matmul(t[0], t[1], a.get("transpose_a", False), a.get("transpose_b", False),
                                          name, a.get("columns")),
          _product_node_reference, 2)
