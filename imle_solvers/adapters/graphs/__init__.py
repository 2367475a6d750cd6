"""Graph MAP oracles: shortest paths, grid paths, matchings and spanning trees (NetworkX / SciPy).

Each oracle turns a weight vector, ordered by a documented edge (or node) order, into the 0/1
indicator of an optimal structure — the MAP state ``argmax_{z ∈ C} ⟨z, θ⟩`` of the paper (eq. 2-3)
for the polytope ``C`` of paths, matchings or spanning trees (Example 3: a shortest path is the
MAP state of the *costs*, ``θ = −c``).

* [`ShortestPath`][imle_solvers.ShortestPath] — source → target path in any NetworkX graph, edge or
  node weights (``sense="min"``), correct for negative weights (topological DP on DAGs, Bellman-Ford
  otherwise);
* [`GridShortestPath`][imle_solvers.GridShortestPath] — top-left → bottom-right path on a
  vertex-weighted grid, the setting of the Warcraft experiment (Vlastelica et al., ICLR 2020; paper
  sec. 5), batched through SciPy;
* [`TorchGridShortestPath`][imle_solvers.adapters.TorchGridShortestPath] — the same grid path as a
  batched torch oracle on the weights' device (CPU or GPU);
* [`Matching`][imle_solvers.Matching] — maximum-weight matching (``sense="max"``);
* [`TorchMatching`][imle_solvers.TorchMatching] — the bipartite assignment, batched on the weights'
  device (SciPy's states, ties included);
* [`SpanningTree`][imle_solvers.SpanningTree] — minimum / maximum spanning tree or forest;
* [`TorchSpanningTree`][imle_solvers.TorchSpanningTree] — the same forest, batched on the weights'
  device.

Every oracle is picklable (a process pool ships it to its workers); per-thread scratch objects
(SciPy matrices, NetworkX graphs) are rebuilt on first use in each thread and never pickled.
NetworkX is imported lazily through [`imle_solvers.errors.require`][imle_solvers.errors.require]
(extra ``graphs``).

One module per problem: ``shortest_path.py``, ``grid.py`` (host grid path; it re-exports the device
one), ``torch_grid.py`` (device-native grid path), ``matching.py`` (host and device; the CUDA kernel
in ``_lsap_triton.py``), ``spanning_tree.py`` (host and device); ``_common.py`` holds the shared
plumbing.
"""

from __future__ import annotations

from .grid import GridShortestPath
from .matching import Matching, TorchMatching
from .shortest_path import ShortestPath
from .spanning_tree import SpanningTree, TorchSpanningTree
from .torch_grid import TorchGridShortestPath

__all__ = [
    "GridShortestPath",
    "Matching",
    "ShortestPath",
    "SpanningTree",
    "TorchGridShortestPath",
    "TorchMatching",
    "TorchSpanningTree",
]
