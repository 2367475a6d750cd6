"""The examples on the README and the docs home page run as printed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("page", ["README.md", "docs/index.md"])
def test_python_blocks_run(page: str, capsys: pytest.CaptureFixture[str]) -> None:
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / page).read_text(), flags=re.S)
    assert blocks, f"no python example on {page}"
    for code in blocks:
        exec(compile(code, page, "exec"), {})
    if page == "README.md":
        assert capsys.readouterr().out.strip() == "torch.Size([32, 10])"
