"""The code on docs/graphs.md runs and prints what the page says it prints."""

from __future__ import annotations

import contextlib
import io
import re

import pytest

from tests.support.paths import ROOT

PAGE = ROOT / "docs" / "graphs.md"


def snippets() -> list[str]:
    return re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.S)


def expected_lines(code: str) -> list[str]:
    """The ``# …`` comment of every single-line ``print(...)``, up to two spaces before any remark."""
    out = []
    for line in code.splitlines():
        match = re.match(r"\s*print\(.*\)\s+# (.*)$", line)
        if match:
            out.append(re.split(r"\s{2,}", match.group(1))[0])
    return out


@pytest.mark.parametrize("index", range(len(snippets())))
def test_snippet_runs_and_prints_its_comments(index: int) -> None:
    code = snippets()[index]
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        exec(compile(code, f"graphs.md[{index}]", "exec"), {})
    printed = buffer.getvalue()
    for expected in expected_lines(code):
        if expected.endswith("..."):
            expected = expected[:-3].rstrip(": ")
        assert expected in printed, (expected, printed)
