"""Readable text for expressions (used by repr, DAG printing and printed loop nests)."""
from __future__ import annotations

from . import expr as E

_INFIX = {"+", "-", "*", "/", "//", "%"}


def expr_str(e: E.Expr) -> str:
    if isinstance(e, E.Var):
        return e.name
    if isinstance(e, E.Const):
        if e.dtype == "float32":
            return f"{e.value!r}f"
        return repr(e.value)
    if isinstance(e, E.Binary):
        a, b = expr_str(e.a), expr_str(e.b)
        if e.op in _INFIX:
            return f"({a} {e.op} {b})"
        if e.op in ("and", "or"):
            return f"({a} {'&&' if e.op == 'and' else '||'} {b})"
        return f"{e.op}({a}, {b})"
    if isinstance(e, E.Compare):
        return f"({expr_str(e.a)} {e.op} {expr_str(e.b)})"
    if isinstance(e, E.Not):
        return f"!{expr_str(e.a)}"
    if isinstance(e, E.Select):
        return f"select({expr_str(e.cond)}, {expr_str(e.t)}, {expr_str(e.f)})"
    if isinstance(e, E.Cast):
        return f"{e.dtype}({expr_str(e.value)})"
    if isinstance(e, E.Call):
        return f"{e.func}({', '.join(expr_str(a) for a in e.args)})"
    if isinstance(e, E.TensorRead):
        return f"{e.tensor.name}[{', '.join(expr_str(i) for i in e.indices)}]"
    if isinstance(e, E.Reduce):
        axes = ", ".join(a.name for a in e.axes)
        where = "" if e.condition is None else f", where={expr_str(e.condition)}"
        return f"{e.combiner}({expr_str(e.source)}, axis=[{axes}]{where})"
    to_str = getattr(e, "to_str", None)
    if to_str is not None:
        return to_str()
    return f"<{type(e).__name__}>"
