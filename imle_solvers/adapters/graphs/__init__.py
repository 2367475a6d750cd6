"""Graph MAP oracles: shortest paths, grid paths, matchings and spanning trees.

Each oracle turns a weight vector, ordered by a documented edge (or node) order, into the 0/1
indicator of an optimal structure — the MAP state ``argmax_{z ∈ C} ⟨z, θ⟩`` of the paper (eq. 2-3)
for the polytope ``C`` of paths, matchings or spanning trees (Example 3: a shortest path is the
MAP state of the *costs*, ``θ = −c``).

* [`ShortestPath`][imle_solvers.ShortestPath] — source → target path in any NetworkX graph, edge or
  node weights (``sense="min"``), correct for negative weights (topological DP on DAGs, Bellman-Ford
  otherwise);
* [`DAGShortestPath`][imle_solvers.DAGShortestPath] — source → target path on a fixed DAG, batched on the
  weights' device (CPU or GPU);
* [`GridShortestPath`][imle_solvers.GridShortestPath] — top-left → bottom-right path on a
  vertex-weighted grid, the setting of the Warcraft experiment (Vlastelica et al., ICLR 2020; paper
  sec. 5), batched through SciPy;
* [`TorchGridShortestPath`][imle_solvers.TorchGridShortestPath] — the same grid path as a batched torch
  oracle on the weights' device (CPU or GPU);
* [`Matching`][imle_solvers.Matching] — maximum-weight matching (``sense="max"``);
* [`TorchMatching`][imle_solvers.TorchMatching] — the bipartite assignment, batched on the weights'
  device (SciPy's states, ties included);
* [`SpanningTree`][imle_solvers.SpanningTree] — minimum / maximum spanning tree or forest;
* [`TorchSpanningTree`][imle_solvers.TorchSpanningTree] — the same forest, batched on the weights'
  device;
* [`TravellingSalesperson`][imle_solvers.TravellingSalesperson] — a shortest tour of a complete graph
  (``sense="min"``), on CP-SAT's circuit constraint or declared as an [`ILP`][imle_solvers.ILP] on
  HiGHS/CBC.

Every oracle is picklable (a process pool ships it to its workers); per-thread scratch objects
(SciPy matrices, NetworkX graphs) are rebuilt on first use in each thread and never pickled.
NetworkX (extra ``graphs``) is imported when a NetworkX graph is first read, through
[`imle_solvers.errors.require`][imle_solvers.errors.require]; the device-native oracles need torch only.

One module per problem: ``shortest_path.py`` (any graph), ``dag.py`` (DAGs, on the device), ``grid.py``
and ``torch_grid.py`` (the grid on the host and on the device), ``matching.py`` and ``spanning_tree.py``
(host and device side by side; the CUDA assignment kernel in ``_lsap_triton.py``), ``tsp.py`` (tours).
``_levels.py`` holds the one dynamic programme of every DAG path (``ShortestPath`` on a DAG and
``DAGShortestPath``); ``_common.py`` the shared plumbing.
"""

from __future__ import annotations

from .dag import DAGShortestPath
from .grid import GridShortestPath
from .matching import Matching, TorchMatching
from .shortest_path import ShortestPath
from .spanning_tree import SpanningTree, TorchSpanningTree
from .torch_grid import TorchGridShortestPath
from .tsp import TravellingSalesperson

__all__ = [
    "DAGShortestPath",
    "GridShortestPath",
    "Matching",
    "ShortestPath",
    "SpanningTree",
    "TorchGridShortestPath",
    "TorchMatching",
    "TorchSpanningTree",
    "TravellingSalesperson",
]
