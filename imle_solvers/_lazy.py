"""Lazy attribute loading for packages (PEP 562), shared by ``imle_solvers`` and ``imle_solvers.adapters``.

Optional solvers (OR-Tools, PuLP, NetworkX, Dask) are imported only when a name that needs them is
first touched, so ``import imle_solvers`` stays light.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, namespace: dict[str, Any], table: dict[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """Build a package's ``__getattr__`` and ``__dir__`` from ``{name: relative module}``.

    Parameters
    ----------
    package
        The package's ``__name__`` (relative module paths resolve against it).
    namespace
        The package's ``globals()``; a loaded name is cached there, so the lookup runs once.
    table
        Which submodule defines each lazily exported name.
    """

    def __getattr__(name: str) -> Any:
        module = table.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(table))

    return __getattr__, __dir__
