"""Predict-then-optimize data sets (features, true costs, optimal solutions and objectives).

* :func:`shortest_path` — the grid shortest path of Elmachtoub & Grigas / PyEPO (``DAGShortestPath``);
* :func:`knapsack` — PyEPO's multi-dimensional knapsack (an :class:`~imle_solvers.ILP`, sense ``"max"``);
* :func:`terrain_maps` — a generated stand-in for the Warcraft terrain maps (``GridShortestPath``).

Each returns a :class:`PTODataset` whose ``oracle`` solves the problem.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .dataset import PTODataset, solve_optimal
from .shortest_path import shortest_path

_LAZY: dict[str, str] = {"knapsack": ".knapsack", "terrain_maps": ".terrain"}

__all__ = ["PTODataset", "knapsack", "shortest_path", "solve_optimal", "terrain_maps"]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'imle_solvers.data' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


if TYPE_CHECKING:  # pragma: no cover
    from .knapsack import knapsack
    from .terrain import terrain_maps
