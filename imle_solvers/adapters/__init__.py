"""Adapters that turn real solvers into [`MapOracle`][imle_solvers.MapOracle] s.

Each adapter module imports its solver lazily: touching ``CPSATOracle`` without ``ortools``
installed raises [`MissingExtraError`][imle_solvers.errors.MissingExtraError] naming the extra to install.

* ``cpsat.py``  — [`CPSATOracle`][imle_solvers.CPSATOracle] (OR-Tools CP-SAT, extra ``cpsat``)
* ``pulp.py``   — [`PulpOracle`][imle_solvers.PulpOracle] (PuLP with CBC or HiGHS, extra ``pulp``); its
  back ends on the shared linear form live in ``_cbc.py`` and ``_highs.py``
* ``graphs/``   — [`ShortestPath`][imle_solvers.ShortestPath],
  [`GridShortestPath`][imle_solvers.GridShortestPath], [`Matching`][imle_solvers.Matching],
  [`SpanningTree`][imle_solvers.SpanningTree] (NetworkX / SciPy, extra ``graphs``)
* ``graphs/torch_grid.py`` — [`TorchGridShortestPath`][imle_solvers.adapters.TorchGridShortestPath], the
  grid path on the weights' device
* ``graphs/matching.py``, ``graphs/spanning_tree.py`` —
  [`TorchMatching`][imle_solvers.TorchMatching] (bipartite assignment) and
  [`TorchSpanningTree`][imle_solvers.TorchSpanningTree], batched on the weights' device
* ``knapsack.py`` — [`TorchKnapsack`][imle_solvers.adapters.TorchKnapsack], 0/1 knapsack with integer
  weights on the weights' device
* ``dag.py``    — [`DAGShortestPath`][imle_solvers.adapters.DAGShortestPath], a batched device-native
  (torch) DAG shortest path
* ``clamp.py``  — [`ClampedCosts`][imle_solvers.ClampedCosts], ``max(c, floor)`` before a cost oracle
  (no negative cycles)
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
    "TorchGridShortestPath": ".graphs",
    "TorchMatching": ".graphs",
    "TorchSpanningTree": ".graphs",
    "TorchKnapsack": ".knapsack",
    "DAGShortestPath": ".dag",
    "ClampedCosts": ".clamp",
}

__all__ = sorted(_LAZY)


__getattr__, __dir__ = lazy_exports(__name__, globals(), _LAZY)


if TYPE_CHECKING:  # pragma: no cover
    from .clamp import ClampedCosts  # noqa: F401
    from .cpsat import CPSATOracle  # noqa: F401
    from .dag import DAGShortestPath  # noqa: F401
    from .graphs import (  # noqa: F401
        GridShortestPath,
        Matching,
        ShortestPath,
        SpanningTree,
        TorchGridShortestPath,
        TorchMatching,
        TorchSpanningTree,
    )
    from .knapsack import TorchKnapsack  # noqa: F401
    from .pulp import PulpOracle  # noqa: F401
