"""Adapters that turn real solvers into :class:`~imle_solvers.MapOracle` s.

Each adapter module imports its solver lazily: touching ``CPSATOracle`` without ``ortools``
installed raises :class:`~imle_solvers.errors.MissingExtraError` naming the extra to install.

* ``cpsat.py``  — :class:`CPSATOracle` (OR-Tools CP-SAT, extra ``cpsat``)
* ``pulp.py``   — :class:`PulpOracle` (PuLP with CBC or HiGHS, extra ``pulp``)
* ``graphs.py`` — :class:`ShortestPath`, :class:`GridShortestPath`, :class:`Matching`,
  :class:`SpanningTree` (NetworkX / SciPy, extra ``graphs``)
* ``dag.py``    — :class:`DAGShortestPath`, a batched device-native (torch) DAG shortest path
* ``clamp.py``  — :class:`ClampedCosts`, ``max(c, floor)`` before a cost oracle (no negative cycles)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

_LAZY: dict[str, str] = {
    "CPSATOracle": ".cpsat",
    "PulpOracle": ".pulp",
    "ShortestPath": ".graphs",
    "GridShortestPath": ".graphs",
    "Matching": ".graphs",
    "SpanningTree": ".graphs",
    "DAGShortestPath": ".dag",
    "ClampedCosts": ".clamp",
}

__all__ = sorted(_LAZY)


__getattr__, __dir__ = lazy_exports(__name__, globals(), _LAZY)


if TYPE_CHECKING:  # pragma: no cover
    from .clamp import ClampedCosts  # noqa: F401
    from .cpsat import CPSATOracle  # noqa: F401
    from .dag import DAGShortestPath  # noqa: F401
    from .graphs import GridShortestPath, Matching, ShortestPath, SpanningTree  # noqa: F401
    from .pulp import PulpOracle  # noqa: F401
