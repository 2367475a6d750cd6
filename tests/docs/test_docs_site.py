"""The documentation site builds strictly, and its HTML has no raw LaTeX, Sphinx roles or dead links.

One `mkdocs build --strict` into a temporary directory (a few seconds) serves every check.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from typing import ClassVar
from urllib.parse import unquote, urlsplit

import pytest

from tests.support.paths import ROOT

pytest.importorskip("mkdocs")
pytest.importorskip("mkdocstrings")

# outside math: \( \) \[ \] $$ and LaTeX commands such as \mathrm, \frac
RAW_LATEX = re.compile(
    r"\\[()\[\]]|\$\$|\\(?:math[a-z]+|frac|sum|theta|lambda|nabla|langle|rangle|qquad|text)\b"
)
SPHINX_ROLE = re.compile(
    r":(?:py:)?(?:class|meth|func|attr|mod|data|exc|obj|ref|doc|term|const):(?:`|<code>)"
)


class _Page(HTMLParser):
    """Collects a page's text outside math and code, its element ids and its links."""

    SKIP: ClassVar[frozenset[str]] = frozenset({"code", "pre", "script", "style", "kbd", "textarea"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.text: list[str] = []
        self.ids: set[str] = set()
        self.links: list[str] = []
        self.scripts: list[str] = []
        self.stylesheets: list[str] = []
        self._stack: list[tuple[str, bool]] = []  # (tag, starts a skipped region)
        self._skip = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if a.get("id"):
            self.ids.add(str(a["id"]))
        if tag == "a" and a.get("href"):
            self.links.append(str(a["href"]))
        if tag == "img" and a.get("src"):
            self.links.append(str(a["src"]))
        if tag == "script" and a.get("src"):
            self.scripts.append(str(a["src"]))
        if tag == "link" and a.get("href") and "stylesheet" in (a.get("rel") or ""):
            self.stylesheets.append(str(a["href"]))
        if tag in ("br", "img", "hr", "input", "meta", "link", "source", "wbr"):
            return
        skipped = tag in self.SKIP or "arithmatex" in (a.get("class") or "").split()
        self._stack.append((tag, skipped))
        self._skip += skipped

    def handle_endtag(self, tag: str) -> None:
        while self._stack:
            name, skipped = self._stack.pop()
            self._skip -= skipped
            if name == tag:
                break

    def handle_data(self, data: str) -> None:
        if not self._skip:
            self.text.append(data)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> dict[Path, _Page]:
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],  # not --quiet: it
        # hides the warnings that --strict turns into a failure
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stdout}\n{proc.stderr}"
    pages = {}
    for html in sorted(out.rglob("*.html")):
        if html.name == "404.html":
            continue
        page = _Page()
        page.feed(html.read_text(encoding="utf-8"))
        pages[html] = page
    yield pages
    shutil.rmtree(out, ignore_errors=True)


def _site_root(pages: dict[Path, _Page]) -> Path:
    return min(pages, key=lambda p: len(p.parts)).parent


def _name(path: Path) -> str:
    """The page a built file is: ``api.html`` (the offline plugin's file URLs) or ``api/index.html``."""
    return path.parent.name if path.name == "index.html" else path.stem


def test_every_page_rendered(site: dict[Path, _Page]) -> None:
    names = {_name(p) for p in site}
    for page in ("how-imle-works", "performance", "benchmarks", "pyepo", "tutorials", "api"):
        assert page in names


def test_no_raw_latex_outside_math(site: dict[Path, _Page]) -> None:
    bad = {}
    for path, page in site.items():
        hits = RAW_LATEX.findall("".join(page.text))
        if hits:
            bad[str(path)] = hits[:5]
    assert not bad, f"raw LaTeX outside math spans (a display without blank lines around it?): {bad}"


def test_math_is_rendered_by_mathjax(site: dict[Path, _Page]) -> None:
    root = _site_root(site)
    html = (root / "how-imle-works.html").read_text(encoding="utf-8")
    assert 'class="arithmatex"' in html
    assert 'src="javascripts/mathjax.js"' in html and 'src="javascripts/mathjax/tex-mml-chtml.js"' in html
    assert (root / "javascripts" / "mathjax.js").exists()
    # the renderer itself is part of the site: the component, its fonts and its TeX extensions
    mathjax = root / "javascripts" / "mathjax"
    assert (mathjax / "tex-mml-chtml.js").stat().st_size > 500_000
    assert (mathjax / "output" / "chtml" / "fonts" / "woff-v2" / "MathJax_Main-Regular.woff").exists()
    assert (mathjax / "input" / "tex" / "extensions" / "ams.js").exists()
    for path, page in site.items():
        if 'class="arithmatex"' in path.read_text(encoding="utf-8"):
            assert any(s.endswith("javascripts/mathjax/tex-mml-chtml.js") for s in page.scripts), path


def test_no_page_loads_anything_from_another_host(site: dict[Path, _Page]) -> None:
    """Scripts, stylesheets and fonts come from the site itself: the docs read offline, formulas included."""
    remote = {
        str(path): [
            url for url in page.scripts + page.stylesheets if urlsplit(url).netloc or url.startswith("//")
        ]
        for path, page in site.items()
    }
    remote = {k: v for k, v in remote.items() if v}
    assert not remote, f"pages that load from another host: {remote}"
    root = _site_root(site)
    css = [p.read_text(encoding="utf-8", errors="replace") for p in root.rglob("*.css")]
    assert not [c for c in css if re.search(r"@import\s+url\(['\"]?https?:", c)]


def test_no_raw_rest_literal_blocks(site: dict[Path, _Page]) -> None:
    """A docstring's reST ``Hierarchy::`` renders as literal text: the API page shows the hierarchy itself."""
    assert not [p for p, page in site.items() if re.search(r"\w::(\s|$)", "".join(page.text))]
    for path in ROOT.joinpath("imle_solvers").rglob("*.py"):
        found = re.findall(r"\w::\n", path.read_text(encoding="utf-8"))
        assert not found, f"{path}: a reST literal block (word::) renders as text under mkdocstrings"


def test_api_page_documents_each_object_once(site: dict[Path, _Page]) -> None:
    root = _site_root(site)
    ids = [i for i in site[root / "api.html"].ids if i.startswith("imle_solvers.")]
    assert "imle_solvers.IMLE" in ids and "imle_solvers.imle.IMLE" not in ids  # not the module beside it
    names = [i.rsplit(".", 1)[-1] for i in ids if i.count(".") == 1 or i.startswith("imle_solvers.errors.")]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)


def test_no_sphinx_roles(site: dict[Path, _Page]) -> None:
    bad = {str(p): SPHINX_ROLE.findall(p.read_text(encoding="utf-8"))[:5] for p in site}
    bad = {k: v for k, v in bad.items() if v}
    assert not bad, f"Sphinx roles do not render under mkdocstrings: {bad}"


def test_internal_links_resolve(site: dict[Path, _Page]) -> None:
    broken = []
    for path, page in site.items():
        for link in page.links:
            parts = urlsplit(link)
            if parts.scheme or parts.netloc or link.startswith(("mailto:", "javascript:")):
                continue
            target = path if not parts.path else (path.parent / unquote(parts.path)).resolve()
            if target.is_dir():
                target = target / "index.html"
            if not target.exists():
                broken.append(f"{_name(path)}: {link}")
                continue
            if parts.fragment and target.suffix == ".html":
                ids = site[target].ids if target in site else set()
                if target in site and parts.fragment not in ids:
                    broken.append(f"{_name(path)}: {link} (no such anchor)")
    assert not broken, "broken internal links:\n" + "\n".join(broken)


def test_no_reference_to_files_outside_the_project() -> None:
    sources = [
        *ROOT.joinpath("docs").rglob("*.md"),
        *ROOT.joinpath("imle_solvers").rglob("*.py"),
        ROOT / "README.md",
    ]
    bad = [str(p.relative_to(ROOT)) for p in sources if "DESIGN.md" in p.read_text(encoding="utf-8")]
    assert not bad, f"these files point to a DESIGN.md the project does not have: {bad}"


def test_the_docs_build_needs_the_pinned_mathjax(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    from mkdocs.exceptions import PluginError

    spec = importlib.util.spec_from_file_location("mkdocs_hooks", ROOT / "scripts" / "mkdocs_hooks.py")
    assert spec is not None and spec.loader is not None
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    assert hooks.mathjax_build().joinpath("tex-mml-chtml.js").is_file()
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(PluginError, match=r"pip install 'imle-solvers\[docs\]'"):
        hooks.mathjax_build()
    pinned = re.search(
        r'docs = \[.*"django-static-mathjax==([\d.]+)".*\]', (ROOT / "pyproject.toml").read_text()
    )
    assert pinned is not None and pinned.group(1).startswith("3.2.2")


def test_every_page_loads_the_site_s_own_worker_shim(site: dict[Path, _Page]) -> None:
    """Material's offline plugin loads a shim that runs the search worker in an iframe (for file://);
    the pages load the site's copy of it, not unpkg.com's."""
    root = _site_root(site)
    assert (root / "search" / "search_index.js").is_file()  # the index as a script, for file://
    shim = "javascripts/vendor/iframe-worker-shim.js"
    assert (root / shim).is_file()
    for path, page in site.items():
        assert [s for s in page.scripts if "iframe-worker" in s] == [
            "../" * (len(path.relative_to(root).parts) - 1) + shim
        ], path


def _chromium() -> str:
    """A Chromium for the browser tests: ``$CHROMIUM`` or one on the PATH (the test skips without)."""
    for name in (os.environ.get("CHROMIUM"), "chromium-headless-shell", "chromium", "chromium-browser"):
        found = shutil.which(name) if name else None
        if found:
            return found
    pytest.skip("no Chromium on this machine (set CHROMIUM or install chromium-headless-shell)")


def _search(url: str, query: str) -> list[str]:
    """Type ``query`` into the search box of the page at ``url`` in headless Chromium; the result links."""
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=_chromium(), args=["--no-sandbox"])
        try:
            page = browser.new_page()
            page.goto(url)
            page.focus("input.md-search__input")
            page.keyboard.type(query)
            items = page.locator(".md-search-result__item a")
            items.first.wait_for(timeout=30_000)  # "Initializing search" until the index is built
            return [str(items.nth(i).get_attribute("href")) for i in range(items.count())]
        finally:
            browser.close()


@pytest.mark.parametrize("where", ["served", "file"])
def test_search_finds_pages_in_a_real_browser(site: dict[Path, _Page], where: str) -> None:
    """The built site's search answers in headless Chromium, served over HTTP and opened from disk."""
    import functools
    import http.server
    import threading

    root = _site_root(site)
    if where == "file":
        hits = _search((root / "api.html").as_uri(), "SolverPool")
    else:
        handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
        handler.log_message = lambda *args: None  # type: ignore[attr-defined]
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            hits = _search(f"http://127.0.0.1:{server.server_address[1]}/api.html", "SolverPool")
        finally:
            server.shutdown()
    assert any("parallel.html" in h for h in hits), hits  # the page about the pool is among the results
