"""mkdocs hook: serve MathJax and the search's worker shim from the built site: the docs read offline.

MathJax 3.2.2 is a pinned build input: the ``docs`` extra installs the PyPI package
``django-static-mathjax==3.2.2.1``, which ships MathJax's own ``es5/`` build (no Django is needed to read
its files). This hook adds that build to the site under ``javascripts/mathjax/``: the component
``tex-mml-chtml.js`` that the pages load, and the fonts, TeX extensions and accessibility modules it loads
on demand, from the same folder. Without the package the build stops with the command that installs it.

The search runs in a Web Worker, which a browser does not start for pages opened from disk
(``file://``). Material's ``offline`` plugin then runs the worker in an iframe through the
``iframe-worker`` shim, which its template loads from unpkg.com; the pages load the copy in
``docs/javascripts/vendor/`` instead (`on_post_page`), so search works from the files and with no network.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files

SHIM_URL = "https://unpkg.com/iframe-worker/shim"
"""Where Material's template loads the worker shim of its ``offline`` plugin from."""
SHIM = "javascripts/vendor/iframe-worker-shim.js"
"""The site's own copy of that shim (iframe-worker 1.0.4, MIT)."""
PREFIX = "javascripts/mathjax"
"""Where the site serves MathJax (``extra_javascript`` in mkdocs.yml loads ``PREFIX/tex-mml-chtml.js``)."""
ENTRY = "tex-mml-chtml.js"
"""The component the pages load: TeX and MathML input, CommonHTML output."""
LOADED_ON_DEMAND = ("input", "output", "ui", "a11y", "sre", "adaptors")
"""Folders of the es5 build the component loads from its own location (fonts, extensions, menu)."""


def mathjax_build() -> Path:
    """The ``es5`` folder of the installed MathJax build."""
    spec = importlib.util.find_spec("mathjax")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    root = Path(locations[0]) / "static" / "mathjax" / "es5" if locations else None
    if root is None or not (root / ENTRY).is_file():
        raise PluginError(
            "MathJax is not installed: pip install 'imle-solvers[docs]' (it pins django-static-mathjax, "
            "a copy of MathJax 3.2.2)"
        )
    return root


def on_files(files: Files, config: Any) -> Files:
    """Add the MathJax build to the site's files."""
    root = mathjax_build()
    paths = [root / ENTRY]
    for folder in LOADED_ON_DEMAND:
        paths += sorted(p for p in (root / folder).rglob("*") if p.is_file())
    for path in paths:
        uri = f"{PREFIX}/{path.relative_to(root).as_posix()}"
        files.append(File.generated(config, uri, abs_src_path=str(path)))
    return files


def on_post_page(output: str, page: Any, config: Any) -> str:
    """Load the worker shim from the site, relative to the page (see the module)."""
    depth = page.file.dest_uri.count("/")  # folders between the site's root and the page
    return output.replace(f'src="{SHIM_URL}"', f'src="{"../" * depth}{SHIM}"')
