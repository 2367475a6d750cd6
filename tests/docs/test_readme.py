"""The examples on the README and the docs home page run as printed."""

from __future__ import annotations

import re

import pytest

from tests.support.paths import ROOT


@pytest.mark.parametrize("page", ["README.md", "docs/index.md"])
def test_python_blocks_run(page: str, capsys: pytest.CaptureFixture[str]) -> None:
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / page).read_text(), flags=re.S)
    assert blocks, f"no python example on {page}"
    for code in blocks:
        exec(compile(code, page, "exec"), {})
    if page == "README.md":
        assert capsys.readouterr().out.strip() == "torch.Size([32, 10])"


def test_readme_first_run_and_cpu_install() -> None:
    text = (ROOT / "README.md").read_text()
    assert "make demo" in text and "make test" in text
    assert "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu" in text
    makefile = (ROOT / "Makefile").read_text()
    install = makefile[makefile.index("$(STAMP):") : makefile.index("install: $(STAMP)")]
    assert "--quiet" not in install and "@echo" in install  # says what it installs, shows pip's progress


def test_every_repository_path_the_readme_and_the_docs_name_exists() -> None:
    """Each file, folder or pattern (``examples/tutorial_*.py``) the README or a docs page names exists."""
    pages = [ROOT / "README.md", *sorted(ROOT.joinpath("docs").glob("*.md"))]
    top = "imle_solvers|examples|tests|scripts|docs"
    named = {
        (page, path)
        for page in pages
        for path in re.findall(rf"(?<![\w./-])((?:{top})/[\w./*-]*[\w*/])", page.read_text())
    }
    assert len({path for _, path in named}) > 20  # the pages are read at all
    missing = sorted(
        f"{page.relative_to(ROOT)}: {path}" for page, path in named if not any(ROOT.glob(path.rstrip("/")))
    )
    assert not missing, missing
