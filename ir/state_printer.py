"""Ansor-style printing of a State's loop nest, with annotations and attach points.

The text is also the identity of a program: two States that print the same are the same
program (used to de-duplicate candidates and measured programs)."""
from __future__ import annotations

_KEYWORD = {"none": "for", "parallel": "parallel", "vectorize": "vectorize", "unroll": "unroll",
            "blockIdx.x": "blockIdx.x", "vthread": "vthread", "threadIdx.x": "threadIdx.x"}


def state_str(state) -> str:
    attached: dict[tuple[int, int], list[int]] = {}
    for idx, st in enumerate(state.stages):
        if st.compute_at == "iter":
            attached.setdefault(st.attach, []).append(idx)
    placeholders = [st.name for st in state.stages if st.is_placeholder]
    lines = [f"Placeholder: {', '.join(placeholders)}"]
    for idx, st in enumerate(state.stages):
        if not st.is_placeholder and st.compute_at == "root":
            _stage_lines(state, idx, 0, attached, lines)
    return "\n".join(lines)


def _stage_lines(state, idx: int, depth: int, attached, lines: list[str]) -> None:
    st = state.stages[idx]
    if st.auto_unroll_max_step:
        lines.append(f"{'  ' * depth}{st.name} auto_unroll: {st.auto_unroll_max_step}")
    for pos, it in enumerate(st.iters):
        lines.append(f"{'  ' * depth}{_KEYWORD[it.annotation]} {it.name} (0,{it.extent})")
        depth += 1
        for child in attached.get((idx, pos), ()):
            _stage_lines(state, child, depth, attached, lines)
    lines.append(f"{'  ' * depth}{st.name} = ...")
