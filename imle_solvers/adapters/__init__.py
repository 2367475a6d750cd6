"""Adapters that turn real solvers into :class:`~imle_solvers.MapOracle` s.

Each adapter module imports its solver lazily: touching ``CPSATOracle`` without ``ortools``
installed raises :class:`~imle_solvers.errors.MissingExtraError` naming the extra to install.

* ``cpsat.py``  — :class:`CPSATOracle` (OR-Tools CP-SAT, extra ``cpsat``)
* ``pulp.py``   — :class:`PulpOracle` (PuLP with CBC or HiGHS, extra ``pulp``)
* ``graphs.py`` — :class:`ShortestPath`, :class:`GridShortestPath`, :class:`Matching`,
  :class:`SpanningTree` (NetworkX / SciPy, extra ``graphs``)
* ``dag.py``    — :class:`DAGShortestPath`, a batched device-native (torch) DAG shortest path
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_LAZY: dict[str, str] = {
    "CPSATOracle": ".cpsat",
    "PulpOracle": ".pulp",
    "ShortestPath": ".graphs",
    "GridShortestPath": ".graphs",
    "Matching": ".graphs",
    "SpanningTree": ".graphs",
    "DAGShortestPath": ".dag",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'imle_solvers.adapters' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


if TYPE_CHECKING:  # pragma: no cover
    from .cpsat import CPSATOracle  # noqa: F401
    from .dag import DAGShortestPath  # noqa: F401
    from .graphs import GridShortestPath, Matching, ShortestPath, SpanningTree  # noqa: F401
    from .pulp import PulpOracle  # noqa: F401
