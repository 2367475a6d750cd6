"""Minimum / maximum spanning tree (forest) by Kruskal's algorithm as a MAP oracle."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any, Literal

import numpy as np

from ..._checks import one_of
from ._common import _check_graph, _GraphOracle, _networkx

__all__ = ["SpanningTree"]

Node = Hashable
Edge = tuple[Any, Any]


class SpanningTree(_GraphOracle):
    """Minimum (or maximum) spanning tree — a spanning forest if disconnected — as a MAP oracle.

    The edge indicators of spanning forests are the bases of the graphic matroid, so Kruskal's greedy
    algorithm is an exact MAP oracle (paper, eq. 3) for any real weights, negative ones included.

    Parameters
    ----------
    graph
        An undirected ``networkx.Graph``; weights are ordered as `edges` (``list(graph.edges)``).
        Self-loops are allowed in the order but never chosen.
    kind
        ``"min"`` (weights are costs, ``sense="min"``) or ``"max"`` (scores, ``sense="max"``).

    Notes
    -----
    Per call: a stable sort of the weights plus a union-find pass, ``O(E log E)``. Ties go to the edge
    that comes first in `edges` (stable sort), so the same weights always give the same tree.
    ``expected_nonzeros`` is the number of edges of every spanning forest: ``V − #components``.

    References
    ----------
    * Niepert, Minervini & Franceschi, "Implicit MLE: Backpropagating Through Discrete Exponential Family
      Distributions", NeurIPS 2021, eq. 3 (the MAP oracle), <https://arxiv.org/abs/2106.01798>.
    * Kruskal, "On the shortest spanning subtree of a graph and the traveling salesman problem", Proceedings
      of the AMS 7(1), 1956, <https://doi.org/10.1090/S0002-9939-1956-0078686-7>.
    """

    def __init__(self, graph: Any, kind: Literal["min", "max"] = "min") -> None:
        super().__init__()
        nx = _networkx()
        _check_graph(graph, "SpanningTree", undirected=True)
        one_of("kind", kind, ("min", "max"))
        self.kind = kind
        self.sense = kind
        self.nodes: list[Node] = list(graph.nodes)
        self.edges: list[Edge] = list(graph.edges)
        self.n_vars = len(self.edges)
        index = {node: i for i, node in enumerate(self.nodes)}
        proper = [i for i, (u, v) in enumerate(self.edges) if u != v]
        self._proper = np.array(proper, dtype=np.int64)
        self._u = [index[self.edges[i][0]] for i in proper]
        self._v = [index[self.edges[i][1]] for i in proper]
        self._size = len(self.nodes) - nx.number_connected_components(graph)
        self.expected_nonzeros = float(self._size) if self._size > 0 else None

    def _solve(self, w: np.ndarray) -> np.ndarray:
        state = np.zeros(self.n_vars, dtype=np.float64)
        key = w[self._proper] if self.kind == "min" else -w[self._proper]
        parent = list(range(len(self.nodes)))
        chosen: list[int] = []
        for j in np.argsort(key, kind="stable").tolist():  # Kruskal; ties: first in .edges
            a, b = self._u[j], self._v[j]
            while parent[a] != a:
                parent[a] = parent[parent[a]]  # path halving
                a = parent[a]
            while parent[b] != b:
                parent[b] = parent[parent[b]]
                b = parent[b]
            if a != b:
                parent[a] = b
                chosen.append(j)
                if len(chosen) == self._size:
                    break
        state[self._proper[chosen]] = 1.0
        return state

    def __repr__(self) -> str:
        return f"SpanningTree(n_vars={self.n_vars}, kind={self.kind!r})"
