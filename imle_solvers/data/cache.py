"""Where generated data sets are kept between runs: a per-user cache folder, never the working tree."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["CACHE_ENV", "cache_dir"]

CACHE_ENV = "IMLE_SOLVERS_CACHE"
"""Environment variable naming the cache folder (overrides the XDG default)."""


def cache_dir() -> Path:
    """The cache folder: ``$IMLE_SOLVERS_CACHE``, else ``$XDG_CACHE_HOME/imle_solvers``, else
    ``~/.cache/imle_solvers`` (created on first write, not here)."""
    explicit = os.environ.get(CACHE_ENV)
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "imle_solvers"
