"""Batched, device-native shortest paths on a fixed DAG: a [`TorchOracle`][imle_solvers.TorchOracle].

On a DAG the shortest path is a dynamic programme over a topological order, correct for *negative*
edge costs (there are no cycles to exploit). The programme is the library's one DAG programme
(``_levels.py``): the whole batch is relaxed one topological level at a time with a handful of tensor
operations, and the path is recovered by a fixed-length vectorised backtrack: no Python loop over
instances, no host synchronisation.

This is the oracle of the predict-then-optimize shortest-path benchmark of Elmachtoub & Grigas (2022)
and PyEPO (Tang & Khalil, 2022): a ``rows × cols`` grid whose arcs go east and north
([`DAGShortestPath.grid`][imle_solvers.DAGShortestPath.grid]).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ..._checks import positive_int
from ...errors import InvalidWeightsError
from ...oracle import TorchOracle
from ._levels import LevelPlan

if TYPE_CHECKING:
    import networkx as nx

__all__ = ["DAGShortestPath"]


class DAGShortestPath(TorchOracle):
    """Shortest ``source → target`` path on a fixed DAG with per-instance edge costs (sense ``"min"``).

    The MAP oracle of paper Example 3 for paths: weights are edge costs ``c`` (θ = −c), the state is
    the edge indicator ``z ∈ {0, 1}^m`` of a cheapest path, in the order of `edges`.
    Solved by a level-synchronous dynamic programme (Bellman's recursion over a topological order),
    batched over any leading dimensions, on the weights' device.

    Parameters
    ----------
    edges
        The arcs ``(u, v)``; their order is the order of the weight vector and of the state. Parallel
        arcs are allowed (the cheaper one is taken).
    source
        First node of every path.
    target
        Last node of every path (``source != target``).
    expected_nonzeros
        ``⟨z, 1⟩`` of a typical path for [`SumOfGamma`][imle_solvers.SumOfGamma]. Default: the mean of the
        fewest and the most arcs on any ``source → target`` path (exact when all paths have the same
        length, as on the grid).

    Raises
    ------
    ValueError
        When the arcs on ``source → target`` walks contain a cycle, ``source == target``, or no path
        joins them.

    Notes
    -----
    Ties are broken deterministically (the first incoming arc in `edges` order wins), the same way on
    every device. Arcs that lie on no ``source → target`` path are always 0.

    *Dtypes.* The state has the weights' dtype. Path costs are summed in float32 for half-precision
    weights (float16, bfloat16: their own sums would round away the differences between paths), in
    the weights' dtype for float32 and float64, and in float64 for integer weights (exact while every
    path's total stays within ±2⁵³).

    References
    ----------
    * Niepert, Minervini & Franceschi, "Implicit MLE: Backpropagating Through Discrete Exponential Family
      Distributions", NeurIPS 2021, Example 3 (a shortest path as a MAP state),
      <https://arxiv.org/abs/2106.01798>.
    * Elmachtoub & Grigas, "Smart 'Predict, then Optimize'", Management Science 68(1), 2022,
      <https://arxiv.org/abs/1710.08005> (the grid shortest-path benchmark).
    * Tang & Khalil, "PyEPO: A PyTorch-based End-to-End Predict-then-Optimize Library for Linear and Integer
      Programming", Mathematical Programming Computation, 2024, <https://arxiv.org/abs/2206.14234>.
    """

    sense = "min"

    def __init__(
        self,
        edges: Iterable[tuple[Hashable, Hashable]],
        source: Hashable,
        target: Hashable,
        expected_nonzeros: float | None = None,
    ) -> None:
        self.edges: list[tuple[Hashable, Hashable]] = [(u, v) for u, v in edges]
        if not self.edges:
            raise ValueError("DAGShortestPath needs at least one edge")
        if source == target:
            raise ValueError("source and target must differ")
        nodes: dict[Hashable, int] = {}
        for u, v in self.edges:
            nodes.setdefault(u, len(nodes))
            nodes.setdefault(v, len(nodes))
        for name, node in (("source", source), ("target", target)):
            if node not in nodes:
                raise ValueError(f"{name} {node!r} is not an end of any edge")
        self.nodes: list[Hashable] = list(nodes)
        self.source, self.target = source, target
        self.n_vars = len(self.edges)
        tails = [nodes[u] for u, _ in self.edges]
        heads = [nodes[v] for _, v in self.edges]
        self._plan = LevelPlan(len(nodes), tails, heads, nodes[source], nodes[target])  # the DP, shared
        if not self._plan.feasible:
            raise ValueError(f"no path from {source!r} to {target!r}")
        if expected_nonzeros is None:
            expected_nonzeros = 0.5 * (self._plan.max_hops + self._plan.min_hops)
        self.expected_nonzeros = float(expected_nonzeros)

    # ------------------------------------------------------------------ constructors
    @classmethod
    def grid(cls, rows: int, cols: int) -> DAGShortestPath:
        """The ``rows × cols`` grid of PyEPO's shortest-path benchmark.

        Nodes are ``i * cols + j`` (row ``i``, column ``j``); arcs go east ``(v, v + 1)`` and north
        ``(v, v + cols)``, listed row by row: the east arcs of row ``i``, then its north arcs. The path
        runs from node 0 (south-west corner) to ``rows * cols − 1`` (north-east corner); every path
        has ``rows + cols − 2`` arcs. ``grid(5, 5)`` has 40 arcs.
        """
        rows, cols = (
            positive_int(name, int(v) if isinstance(v, np.integer) else v)
            for name, v in (("rows", rows), ("cols", cols))
        )
        if rows * cols < 2:
            raise ValueError(f"grid needs rows*cols >= 2 (a source and a target), got {rows}x{cols}")
        edges: list[tuple[Hashable, Hashable]] = []
        for i in range(rows):
            edges += [(i * cols + j, i * cols + j + 1) for j in range(cols - 1)]  # east
            if i < rows - 1:
                edges += [(i * cols + j, (i + 1) * cols + j) for j in range(cols)]  # north
        return cls(edges, 0, rows * cols - 1)

    @classmethod
    def from_networkx(
        cls, graph: nx.DiGraph, source: Hashable, target: Hashable, **kwargs: Any
    ) -> DAGShortestPath:
        """From a NetworkX ``DiGraph``; the weight order is ``list(graph.edges)``."""
        return cls(list(graph.edges), source, target, **kwargs)

    # ------------------------------------------------------------------ solving
    def solve_torch(self, weights: torch.Tensor) -> torch.Tensor:
        """Edge indicators of a cheapest path for ``(..., m)`` costs; same shape, device and dtype.

        On the CPU the level-synchronous programme runs on NumPy views of the tensor (NumPy's per-call
        overhead is a fraction of torch's on these small arrays); elsewhere as torch operations on the
        weights' device. Both form the same sums and break ties alike.
        """
        if weights.dim() == 0 or weights.shape[-1] != self.n_vars:
            raise InvalidWeightsError(
                f"{self!r} expects costs of shape (..., {self.n_vars}), got {tuple(weights.shape)}"
            )
        if weights.is_complex():
            raise InvalidWeightsError(f"DAGShortestPath takes real costs, got {weights.dtype}")
        lead, m = weights.shape[:-1], self.n_vars
        acc = (
            torch.promote_types(weights.dtype, torch.float32)
            if weights.is_floating_point()
            else torch.float64
        )
        w = weights.detach().reshape(-1, m).to(acc)  # costs, summed in float32 or wider   [N, m]
        if w.device.type == "cpu":
            z = torch.from_numpy(self._plan.path(w.numpy()))
        else:
            z = self._plan.path_torch(w)
        return z.to(weights.dtype).reshape(*lead, m)

    def __repr__(self) -> str:
        return (
            f"DAGShortestPath(n_vars={self.n_vars}, nodes={len(self.nodes)}, "
            f"source={self.source!r}, target={self.target!r})"
        )
