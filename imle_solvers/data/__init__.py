"""Predict-then-optimize data sets (features, true costs, optimal solutions and objectives).

* [`shortest_path`][imle_solvers.data.shortest_path.shortest_path] — the grid shortest path of
  Elmachtoub & Grigas / PyEPO (``DAGShortestPath``);
* [`knapsack`][imle_solvers.data.knapsack.knapsack] — PyEPO's multi-dimensional knapsack
  (``TorchKnapsack``, or an [`ILP`][imle_solvers.ILP]; sense ``"max"``);
* [`tsp`][imle_solvers.data.tsp.tsp] — PyEPO's travelling salesperson (``TravellingSalesperson``, CP-SAT;
  sense ``"min"``);
* [`terrain_maps`][imle_solvers.data.terrain_maps] — a generated stand-in for the Warcraft terrain maps
  (``GridShortestPath``).

Each returns a [`PTODataset`][imle_solvers.data.PTODataset] whose ``oracle`` solves the problem.
"""

from __future__ import annotations

from .dataset import PTODataset, solve_optimal
from .knapsack import knapsack  # the function, bound after its submodule: `data.knapsack` is never the module
from .shortest_path import shortest_path
from .terrain import terrain_maps
from .tsp import tsp  # the function, as for knapsack

__all__ = ["PTODataset", "knapsack", "shortest_path", "solve_optimal", "terrain_maps", "tsp"]
