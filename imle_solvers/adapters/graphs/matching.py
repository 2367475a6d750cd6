"""Maximum-weight matching (NetworkX blossom) as a MAP oracle."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import numpy as np

from ._common import _check_graph, _GraphOracle, _networkx

__all__ = ["Matching"]

Node = Hashable
Edge = tuple[Any, Any]


class Matching(_GraphOracle):
    """Maximum-weight matching of an undirected graph (bipartite or general) as a MAP oracle.

    ``MAP(θ) = argmax_z ⟨z, θ⟩`` over edge indicators of matchings (paper, eq. 3), solved exactly by
    NetworkX's blossom algorithm (Edmonds; Galil 1986), ``O(V³)``. The layer takes **scores**
    (``sense="max"``).

    Parameters
    ----------
    graph
        An undirected ``networkx.Graph``; weights are ordered as `edges` (``list(graph.edges)``).
        Self-loops are allowed in the order but never matched.
    maxcardinality
        ``True``: the best among the matchings of maximum cardinality (edges of negative score are
        then taken when they enlarge the matching). ``False``: edges of negative score are never
        worth taking, and zero-score edges may or may not be.

    Notes
    -----
    Ties are deterministic (the same weights give the same state: every thread solves on an
    identically built graph). ``expected_nonzeros`` is the size of a maximum-cardinality matching.
    Exact for integer-valued weights; with general floats NetworkX's blossom algorithm is exact up
    to rounding.

    References
    ----------
    * Niepert, Minervini & Franceschi, "Implicit MLE: Backpropagating Through Discrete Exponential Family
      Distributions", NeurIPS 2021, eq. 3 (the MAP oracle), <https://arxiv.org/abs/2106.01798>.
    * Edmonds, "Paths, trees, and flowers", Canadian Journal of Mathematics 17, 1965,
      <https://doi.org/10.4153/CJM-1965-045-4> (the blossom method).
    * NetworkX, ``max_weight_matching``,
      <https://networkx.org/documentation/stable/reference/algorithms/generated/networkx.algorithms.matching.max_weight_matching.html>.
    """

    sense = "max"

    def __init__(self, graph: Any, maxcardinality: bool = False) -> None:
        super().__init__()
        nx = _networkx()
        _check_graph(graph, "Matching", undirected=True)
        self.maxcardinality = bool(maxcardinality)
        self.nodes: list[Node] = list(graph.nodes)
        self.edges: list[Edge] = list(graph.edges)
        self.n_vars = len(self.edges)
        self._proper = [i for i, (u, v) in enumerate(self.edges) if u != v]  # non-loop edges
        self._edge_of: dict[tuple[Any, Any], int] = {}
        for i in self._proper:
            u, v = self.edges[i]
            self._edge_of[(u, v)] = self._edge_of[(v, u)] = i
        size = len(nx.max_weight_matching(self._build_graph(), maxcardinality=True))
        self.expected_nonzeros = float(size) if size > 0 else None

    def _build_graph(self) -> Any:
        nx = _networkx()
        graph = nx.Graph()
        graph.add_nodes_from(self.nodes)
        graph.add_edges_from(self.edges[i] for i in self._proper)
        return graph

    def _weighted(self) -> tuple[Any, list[dict[str, float]]]:
        """This thread's graph and its edge attribute dicts, in `edges` order (non-loops)."""
        cached = getattr(self._local, "graph", None)
        if cached is None:
            graph = self._build_graph()
            cached = (graph, [graph.edges[self.edges[i]] for i in self._proper])
            self._local.graph = cached
        return cached  # type: ignore[no-any-return]

    def _solve(self, w: np.ndarray) -> np.ndarray:
        nx = _networkx()
        graph, attrs = self._weighted()
        for attr, x in zip(attrs, w[self._proper].tolist()):
            attr["weight"] = x
        mate = nx.max_weight_matching(graph, maxcardinality=self.maxcardinality, weight="weight")
        state = np.zeros(self.n_vars, dtype=np.float64)
        state[[self._edge_of[(u, v)] for u, v in mate]] = 1.0
        return state

    def __repr__(self) -> str:
        return f"Matching(n_vars={self.n_vars}, maxcardinality={self.maxcardinality})"
