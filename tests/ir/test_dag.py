"""ComputeDAG structure, access maps, flop count and workload key."""
import subprocess
import sys
import textwrap

import pytest

import ir


def matmul_relu(n=8, m=6, k=5):
    A = ir.placeholder((n, k), name="A")
    B = ir.placeholder((k, m), name="B", constant=True)
    r = ir.reduce_axis(k, name="r")
    C = ir.compute((n, m), lambda i, j: ir.sum(A[i, r] * B[r, j], axis=r), name="C")
    D = ir.compute((n, m), lambda i, j: ir.max(C[i, j], 0.0), name="D")
    return A, B, C, D


def test_topological_order_graph_and_args():
    A, B, C, D = matmul_relu()
    dag = ir.ComputeDAG([A, B, D])
    assert [op.name for op in dag.ops] == ["A", "B", "C", "D"]
    assert list(dag.graph.successors(C.op)) == [D.op]
    assert dag.inputs == [A, B] and dag.outputs == [D]
    assert dag.consumers(A.op) == [C.op] and dag.producers(C.op) == [A.op, B.op]


def test_missing_placeholder_is_an_error():
    A, B, C, D = matmul_relu()
    with pytest.raises(ValueError, match="placeholder 'B' is read but is not in the tensor list"):
        ir.ComputeDAG([A, D])


def test_access_maps():
    A, B, C, D = matmul_relu()
    dag = ir.ComputeDAG([A, B, D])
    reads = dag.read_accesses(C.op)
    assert [t.name for t in reads] == ["A", "B"]
    (a_idx,) = reads[A]
    assert [str(x) for x in a_idx] == ["i", "r"]
    assert [str(x) for x in dag.write_access(C.op)] == ["i", "j"]


def test_flop_count():
    A, B, C, D = matmul_relu(8, 6, 5)
    dag = ir.ComputeDAG([A, B, D])
    assert dag.flop_count() == 2 * 8 * 6 * 5 + 8 * 6


def test_workload_key_ignores_names_but_not_shapes():
    A, B, C, D = matmul_relu()
    key = ir.ComputeDAG([A, B, D]).workload_key()
    A2, B2, C2, D2 = matmul_relu()
    assert ir.ComputeDAG([A2, B2, D2]).workload_key() == key
    A3, B3, C3, D3 = matmul_relu(8, 6, 7)
    assert ir.ComputeDAG([A3, B3, D3]).workload_key() != key


def test_workload_key_is_stable_across_processes():
    A, B, C, D = matmul_relu()
    key = ir.ComputeDAG([A, B, D]).workload_key()
    code = textwrap.dedent("""
        import ir
        A = ir.placeholder((8, 5), name="X")
        B = ir.placeholder((5, 6), name="Y", constant=True)
        r = ir.reduce_axis(5, name="q")
        C = ir.compute((8, 6), lambda a, b: ir.sum(A[a, r] * B[r, b], axis=r))
        D = ir.compute((8, 6), lambda a, b: ir.max(C[a, b], 0.0))
        print(ir.ComputeDAG([A, B, D]).workload_key())
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == key


def test_printing():
    A, B, C, D = matmul_relu()
    text = str(ir.ComputeDAG([A, B, D]))
    assert "B = constant placeholder[5, 6] float32" in text
    assert "C[i, j] = sum((A[i, r] * B[r, j]), axis=[r])" in text
