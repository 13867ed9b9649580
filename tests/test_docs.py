"""The documentation is tested: every ```python block of README.md and docs/*.md runs, and
every relative link points to a file that exists.

The blocks of one file run in order, in one namespace, in a fresh interpreter (a block may
register an operator or a sketch rule: that must not leak into other tests) whose working
directory is a temporary one (blocks write tuning logs). A block preceded by the line
``<!-- not run: reason -->`` is skipped; one preceded by ``<!-- requires: pkg -->`` (several:
``pkg1, pkg2``) is run only where the packages import; where they do not, the blocks before
it run and the case is skipped with the reason (later blocks may need its names).
"""
from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import re
import subprocess
import sys
from dataclasses import dataclass

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
README_MAX_LINES = 300

#: seconds for all the blocks of one file
FILE_TIMEOUT_S = 300

_MARKER = re.compile(r"<!--\s*(not run|requires)\s*:\s*(.*?)\s*-->")
_FENCE = re.compile(r"^(\s*)```(\S*)\s*$")
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def documentation_files() -> list[pathlib.Path]:
    return [README, *sorted((ROOT / "docs").glob("*.md")), *sorted(ROOT.glob("BENCHMARKS.md"))]


@dataclass(frozen=True)
class Block:
    line: int                       # 1-based line of the block's first code line
    code: str
    not_run: str | None = None      # the reason, for a block that must not run
    requires: tuple[str, ...] = ()


def code_blocks(text: str, language: str = "python") -> list[Block]:
    """The fenced blocks of ``language`` with the marker on the line before their fence.
    A marker that no block of ``language`` follows is an error (it would skip nothing)."""
    lines, blocks, i = text.splitlines(), [], 0
    while i < len(lines):
        marker = _MARKER.fullmatch(lines[i].strip())
        if marker:
            fence = _FENCE.match(lines[i + 1]) if i + 1 < len(lines) else None
            if not fence or fence.group(2) != language:
                raise ValueError(f"line {i + 1}: {lines[i].strip()!r} is not directly followed by a "
                                 f"```{language} block")
        fence = _FENCE.match(lines[i])
        if not fence or not fence.group(2):
            i += 1
            continue
        end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == "```"), None)
        if end is None:
            raise ValueError(f"line {i + 1}: a ``` block that is never closed")
        if fence.group(2) == language:
            previous = _MARKER.fullmatch(lines[i - 1].strip()) if i > 0 else None
            kind, value = previous.groups() if previous else (None, "")
            indent = len(fence.group(1))
            code = "\n".join(line[indent:] for line in lines[i + 1:end])
            blocks.append(Block(i + 2, code, value if kind == "not run" else None,
                                tuple(p.strip() for p in value.split(",")) if kind == "requires" else ()))
        i = end + 1
    return blocks


# Runs the blocks given as JSON on stdin in one namespace, each compiled with its file name
# and line number so that a failure points at the documentation's line.
_RUNNER = """
import json, sys
namespace = {"__name__": "__main__"}
for block in json.load(sys.stdin):
    code = "\\n" * (block["line"] - 1) + block["code"]
    exec(compile(code, block["file"], "exec"), namespace)
"""


def _missing(packages: tuple[str, ...]) -> list[str]:
    return [p for p in packages if importlib.util.find_spec(p) is None]


@pytest.mark.parametrize("path", documentation_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_python_blocks_run(path, tmp_path):
    blocks, skipped_for = [], None
    for block in code_blocks(path.read_text()):
        if block.not_run is not None:
            continue
        missing = _missing(block.requires)
        if missing:
            skipped_for = f"line {block.line} needs {', '.join(missing)}, which is not installed"
            break
        blocks.append({"file": str(path), "line": block.line, "code": block.code})
    if blocks:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
        done = subprocess.run([sys.executable, "-c", _RUNNER], input=json.dumps(blocks), cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=FILE_TIMEOUT_S)
        if done.returncode != 0:
            pytest.fail(f"a python block of {path.name} failed:\n{done.stderr[-6000:]}", pytrace=False)
    if skipped_for:
        pytest.skip(f"{path.name}: {skipped_for}; the {len(blocks)} blocks before it ran")


def test_readme_is_a_guide_not_a_notebook():
    lines = len(README.read_text().splitlines())
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines, at most {README_MAX_LINES}: move details to docs/"


@pytest.mark.parametrize("path", sorted((ROOT / "docs").glob("*.md")), ids=lambda p: str(p.relative_to(ROOT)))
def test_guides_hold_no_dated_runs(path):
    """A dated measurement belongs in BENCHMARKS.md (with its command, commit and machine);
    the guides say how things work, and link there for figures."""
    dated = re.findall(r".*(?:\b20\d\d-\d\d-\d\d\b|\b\d\d:\d\d UTC\b).*", path.read_text())
    assert dated == [], f"{path.name} has dated runs; move them to BENCHMARKS.md"


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(path: pathlib.Path) -> set[str]:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    return {_slug(h) for h in re.findall(r"^#{1,6}\s+(.*)$", text, re.M)}


def broken_links(path: pathlib.Path) -> list[str]:
    """The relative links of ``path`` whose file (or heading anchor) does not exist."""
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)   # code is not a link
    broken = []
    for target in _LINK.findall(text):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):                     # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        relative = linked.relative_to(ROOT).as_posix() if linked.is_relative_to(ROOT) else str(linked)
        if not linked.exists():
            broken.append(f"{target} (no file {relative})")
        elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked):
            broken.append(f"{target} (no heading with anchor #{anchor} in {relative})")
    return broken


@pytest.mark.parametrize("path", documentation_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(path):
    assert broken_links(path) == [], f"{path.name} links to what does not exist"


def test_the_markers_and_links_are_read(tmp_path):
    """The parser finds what it must: markers, requirements, indented blocks, broken links."""
    page = tmp_path / "page.md"
    page.write_text("# A title\n\n<!-- not run: needs a GPU -->\n```python\nraise SystemExit\n```\n"
                    "<!-- requires: onnx, torch -->\n```python\nx = 1\n```\n"
                    "- item\n\n  ```python\n  y = 2\n  ```\n```bash\nls\n```\n"
                    "[ok](#a-title) [web](https://example.com) [gone](missing.md) [bad](#nothing)\n")
    blocks = code_blocks(page.read_text())
    assert [(b.line, b.code, b.not_run, b.requires) for b in blocks] == [
        (5, "raise SystemExit", "needs a GPU", ()), (9, "x = 1", None, ("onnx", "torch")), (14, "y = 2", None, ())]
    assert [b.split(" ")[0] for b in broken_links(page)] == ["missing.md", "#nothing"]
    with pytest.raises(ValueError, match="not directly followed"):
        code_blocks("<!-- not run: x -->\n\n```python\npass\n```\n")
