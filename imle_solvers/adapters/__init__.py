"""Every MAP oracle of the library, sorted by problem family.

One export rule: each public oracle is defined in its family's module and importable from here and from
``imle_solvers`` (both load it on first access). Solvers are imported lazily: touching ``CPSATOracle``
without ``ortools`` installed raises [`MissingExtraError`][imle_solvers.errors.MissingExtraError] naming
the extra to install.

* ``ilp/`` — the ILP family: [`ILP`][imle_solvers.ILP] (a declared integer programme on CP-SAT, CBC or
  HiGHS), [`CPSATOracle`][imle_solvers.CPSATOracle] (a CP-SAT model of your own, extra ``cpsat``),
  [`PulpOracle`][imle_solvers.PulpOracle] (a PuLP model of your own, extra ``pulp``);
* ``graphs/`` — paths, matchings, trees: [`ShortestPath`][imle_solvers.ShortestPath],
  [`DAGShortestPath`][imle_solvers.DAGShortestPath] (device-native),
  [`GridShortestPath`][imle_solvers.GridShortestPath],
  [`TorchGridShortestPath`][imle_solvers.TorchGridShortestPath] (device-native),
  [`Matching`][imle_solvers.Matching], [`SpanningTree`][imle_solvers.SpanningTree] (extra ``graphs`` for
  NetworkX graphs), [`TorchMatching`][imle_solvers.TorchMatching] (bipartite assignment) and
  [`TorchSpanningTree`][imle_solvers.TorchSpanningTree] (device-native),
  [`TravellingSalesperson`][imle_solvers.TravellingSalesperson] (tours; CP-SAT's circuit or an ILP on
  HiGHS/CBC);
* ``knapsack.py`` — [`TorchKnapsack`][imle_solvers.TorchKnapsack], the 0/1 knapsack with integer item
  weights (device-native);
* ``imle_solvers.topk`` — [`TopK`][imle_solvers.TopK], the k-subset (device-native; part of the core);
* ``clamp.py`` — [`ClampedCosts`][imle_solvers.ClampedCosts], ``max(c, floor)`` before a cost oracle
  (no negative cycles).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

_LAZY: dict[str, str] = {
    "ILP": ".ilp",
    "CPSATOracle": ".ilp",
    "PulpOracle": ".ilp",
    "ShortestPath": ".graphs",
    "DAGShortestPath": ".graphs",
    "GridShortestPath": ".graphs",
    "TorchGridShortestPath": ".graphs",
    "Matching": ".graphs",
    "SpanningTree": ".graphs",
    "TorchMatching": ".graphs",
    "TorchSpanningTree": ".graphs",
    "TravellingSalesperson": ".graphs",
    "TorchKnapsack": ".knapsack",
    "TopK": "..topk",
    "ClampedCosts": ".clamp",
}

__all__ = sorted(_LAZY)


__getattr__, __dir__ = lazy_exports(__name__, globals(), _LAZY)


if TYPE_CHECKING:  # pragma: no cover
    from ..topk import TopK  # noqa: F401
    from .clamp import ClampedCosts  # noqa: F401
    from .graphs import (  # noqa: F401
        DAGShortestPath,
        GridShortestPath,
        Matching,
        ShortestPath,
        SpanningTree,
        TorchGridShortestPath,
        TorchMatching,
        TorchSpanningTree,
        TravellingSalesperson,
    )
    from .ilp import ILP, CPSATOracle, PulpOracle  # noqa: F401
    from .knapsack import TorchKnapsack  # noqa: F401
