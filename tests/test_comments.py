"""Comments and docstrings in product code say what the code does and why, not where or when it was
measured: no issue numbers (the tracker's history belongs in commit messages) and no machine names (a
figure measured on one machine goes stale on the next; BENCHMARKS.md holds figures with their machine).
Read from the source with `tokenize` and `ast`; string literals the code uses are not comments. A
reference to an upstream project's issue (e.g. "kombu issue #1551") is a citation and allowed.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = ("normlab", "client/normlab_client", "backend", "frontend", "workers", "kernels")
UPSTREAM = re.compile(
    r"(?i)\b(kombu|celery|dash|plotly|torch|pytorch|triton|fastapi|starlette|alembic|sqlalchemy|redis|"
    r"psycopg|pydantic|uvicorn|numpy|cpython|python|chromium|playwright|github\.com/[\w./-]+)\s+(issue|#)"
)
ISSUE = re.compile(r"(?i)\bissues?\s+#?\d+|(?<![\w&#/\"'])#\d{1,5}\b")  # not a quoted "#555"
MACHINE = re.compile(
    r"\b(H100|H200|A100|V100|A10G|RTX ?\d{4}|EPYC|Xeon|Sapphire Rapids|Ryzen|Graviton)\b|\b\d+-core\b"
    r"|\bGPU machine\b|\bdevelopment (VM|machine)\b|\bVM\b"
)
COLOUR = re.compile(r"(?i)colou?r|fill|rgb|#[0-9a-f]{6}\b")


def comments_and_docstrings(source: str) -> list[tuple[int, str]]:
    """(line, text) of every comment and every module, class and function docstring line."""
    out = [
        (tok.start[0], tok.string)
        for tok in tokenize.generate_tokens(io.StringIO(source).readline)
        if tok.type == tokenize.COMMENT
    ]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                first = node.body[0].lineno
                out += [(first + i, line) for i, line in enumerate(doc.splitlines())]
    return out


def offences(text: str) -> list[str]:
    found = []
    for m in ISSUE.finditer(text):
        before = text[: m.end()]
        if UPSTREAM.search(before[max(0, m.start() - 40) :]):
            continue  # an upstream project's issue, cited
        if m.group(0).startswith("#") and COLOUR.search(text):
            continue  # a colour such as "#555"
        found.append(f"issue number {m.group(0)!r}")
    found += [f"machine name {m.group(0)!r}" for m in MACHINE.finditer(text)]
    return found


def _files() -> list[Path]:
    return [p for pkg in PRODUCT for p in sorted((ROOT / pkg).rglob("*.py"))]


@pytest.mark.parametrize(
    ("text", "flagged"),
    [
        ("# see issue 17 for the figures", True),
        ("# fixed in #27", True),
        ("measured on an H200 at 85 µs", True),
        ("# 5.6 s on the 2-core machine", True),
        ("(torch 2.11 on the GPU machine)", True),
        ("error that kills the Celery worker (kombu issue #1551)", False),
        ('# queued runs are grey: "#555" on "#eee"', False),
        ("# the last 27 steps, #rows = B", False),
        ("The task's data is not on this machine", False),
        ("# step 2 of 4 (issue-free path)", False),
    ],
)
def test_the_rule_flags_these_and_passes_these(text, flagged):
    assert bool(offences(text)) is flagged, offences(text)


def test_product_comments_and_docstrings_name_no_issue_and_no_machine():
    found = [
        f"{path.relative_to(ROOT)}:{line}: {why}: {text.strip()[:100]}"
        for path in _files()
        for line, text in comments_and_docstrings(path.read_text())
        for why in offences(text)
    ]
    assert not found, "say what the code does and why instead:\n" + "\n".join(found)
