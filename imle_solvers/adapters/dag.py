"""Batched, device-native shortest paths on a fixed directed acyclic graph (a :class:`TorchOracle`).

On a DAG the shortest path is a dynamic programme over a topological order, correct for *negative*
edge costs (there are no cycles to exploit). Nodes are grouped into topological *levels* (a node's
level is one more than the highest level of its predecessors), so the whole batch is relaxed one level
at a time with a handful of tensor operations, and the path is recovered by a fixed-length vectorised
backtrack: no Python loop over instances, no host synchronisation.

This is the oracle of the predict-then-optimize shortest-path benchmark of Elmachtoub & Grigas (2022)
and PyEPO (Tang & Khalil, 2022): a ``rows × cols`` grid whose arcs go east and north
(:meth:`DAGShortestPath.grid`).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import torch

from ..oracle import TorchOracle

if TYPE_CHECKING:
    import networkx as nx

__all__ = ["DAGShortestPath"]


class DAGShortestPath(TorchOracle):
    """Shortest ``source → target`` path on a fixed DAG with per-instance edge costs (sense ``"min"``).

    The MAP oracle of paper Example 3 for paths: weights are edge costs ``c`` (θ = −c), the state is
    the edge indicator ``z ∈ {0, 1}^m`` of a cheapest path, in the order of :attr:`edges`.
    Solved by a level-synchronous dynamic programme (Bellman's recursion over a topological order),
    batched over any leading dimensions, on the weights' device.

    Parameters
    ----------
    edges
        The arcs ``(u, v)``; their order is the order of the weight vector and of the state. Parallel
        arcs are allowed (the cheaper one is taken).
    source, target
        End nodes of the path (``source != target``).
    expected_nonzeros
        ``⟨z, 1⟩`` of a typical path for :class:`~imle_solvers.SumOfGamma`. Default: the mean of the
        fewest and the most arcs on any ``source → target`` path (exact when all paths have the same
        length, as on the grid).

    Raises
    ------
    ValueError
        When the graph has a cycle, ``source == target``, or no path joins them.

    Notes
    -----
    Ties are broken deterministically (the first incoming arc in :attr:`edges` order wins).
    Arcs that lie on no ``source → target`` path are always 0.
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
        levels = _levels(len(nodes), tails, heads)
        reach = _reachable(nodes[source], tails, heads, len(nodes))
        coreach = _reachable(nodes[target], heads, tails, len(nodes))
        if not reach[nodes[target]]:
            raise ValueError(f"no path from {source!r} to {target!r}")
        # Only arcs on some source → target path matter; the DP runs over their heads, level by level.
        useful = [reach[t] and coreach[h] for t, h in zip(tails, heads)]
        incoming: dict[int, list[int]] = {}
        for e, (h, ok) in enumerate(zip(heads, useful)):
            if ok:
                incoming.setdefault(h, []).append(e)
        self._n_nodes = len(nodes)
        self._source_idx, self._target_idx = nodes[source], nodes[target]
        self._tails = torch.tensor(tails, dtype=torch.long)
        # Per level: the nodes relaxed there and their incoming arcs, padded to the level's max in-degree
        # with the dummy arc index m (its cost is +inf).
        by_level: dict[int, list[int]] = {}
        for v in incoming:
            by_level.setdefault(levels[v], []).append(v)
        self._plan: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []
        for lvl in sorted(by_level):
            vs = by_level[lvl]
            width = max(len(incoming[v]) for v in vs)
            arcs = [incoming[v] + [self.n_vars] * (width - len(incoming[v])) for v in vs]
            arc_idx = torch.tensor(arcs, dtype=torch.long)  # [L, K]
            tail_idx = torch.tensor(
                [[tails[e] if e < self.n_vars else self._source_idx for e in row] for row in arcs],
                dtype=torch.long,
            )  # [L, K]
            self._plan.append((torch.tensor(vs, dtype=torch.long), arc_idx, tail_idx))
        self._max_hops, min_hops = _hop_range(
            self._source_idx, self._target_idx, tails, heads, useful, levels, len(nodes)
        )
        if expected_nonzeros is None:
            expected_nonzeros = 0.5 * (self._max_hops + min_hops)
        self.expected_nonzeros = float(expected_nonzeros)
        self._cache: dict[torch.device, list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]] = {}

    # ------------------------------------------------------------------ constructors
    @classmethod
    def grid(cls, rows: int, cols: int) -> DAGShortestPath:
        """The ``rows × cols`` grid of PyEPO's shortest-path benchmark.

        Nodes are ``i * cols + j`` (row ``i``, column ``j``); arcs go east ``(v, v + 1)`` and north
        ``(v, v + cols)``, listed row by row: the east arcs of row ``i``, then its north arcs. The path
        runs from node 0 (south-west corner) to ``rows * cols − 1`` (north-east corner); every path
        has ``rows + cols − 2`` arcs. ``grid(5, 5)`` has 40 arcs.
        """
        if int(rows) != rows or int(cols) != cols or rows < 1 or cols < 1 or rows * cols < 2:
            raise ValueError(f"grid needs positive integer rows, cols with rows*cols >= 2, got {rows}x{cols}")
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
    def _device_plan(self, device: torch.device) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        plan = self._cache.get(device)
        if plan is None:
            plan = [(v.to(device), a.to(device), t.to(device)) for v, a, t in self._plan]
            self._cache[device] = plan
        return plan

    def solve_torch(self, weights: torch.Tensor) -> torch.Tensor:
        """Edge indicators of a cheapest path for ``(..., m)`` costs; same device and dtype."""
        lead, m = weights.shape[:-1], weights.shape[-1]
        w = weights.reshape(-1, m)
        n, device = w.shape[0], w.device
        inf = torch.tensor(float("inf"), dtype=w.dtype, device=device)
        w_pad = torch.cat([w, inf.expand(n, 1)], dim=1)  # dummy arc m costs +inf          [N, m+1]
        dist = inf.expand(n, self._n_nodes).clone()  # d(v) = +inf                          [N, V]
        dist[:, self._source_idx] = 0.0  # d(source) = 0
        best = torch.full((n, self._n_nodes), m, dtype=torch.long, device=device)  # arc into v  [N, V]
        for nodes, arcs, tails in self._device_plan(device):
            cand = dist[:, tails] + w_pad[:, arcs]  # d(u) + c(u,v) per incoming arc        [N, L, K]
            value, k = cand.min(dim=-1)  # Bellman: d(v) = min_(u,v) d(u) + c(u,v)           [N, L]
            dist[:, nodes] = value
            best[:, nodes] = arcs[torch.arange(arcs.shape[0], device=device), k]  # argmin arc  [N, L]
        # Backtrack from the target for a fixed number of hops; finished rows write to the dummy column.
        z = torch.zeros((n, m + 1), dtype=w.dtype, device=device)
        rows = torch.arange(n, device=device)
        node = torch.full((n,), self._target_idx, dtype=torch.long, device=device)  # current node  [N]
        tails_pad = torch.cat([self._tails.to(device), node.new_tensor([self._source_idx])])
        for _ in range(self._max_hops):
            arc = best[rows, node]  # arc into the current node (m once at the source)    [N]
            z[rows, arc] = 1.0  # z_arc = 1
            node = tails_pad[arc]  # step back to its tail                               [N]
        return z[:, :m].reshape(*lead, m)

    def __repr__(self) -> str:
        return (
            f"DAGShortestPath(n_vars={self.n_vars}, nodes={len(self.nodes)}, "
            f"source={self.source!r}, target={self.target!r})"
        )


def _levels(n_nodes: int, tails: Sequence[int], heads: Sequence[int]) -> list[int]:
    """Longest-path depth of every node (Kahn's algorithm); raises ``ValueError`` on a cycle."""
    indeg = [0] * n_nodes
    out: list[list[int]] = [[] for _ in range(n_nodes)]
    for t, h in zip(tails, heads):
        indeg[h] += 1
        out[t].append(h)
    level = [0] * n_nodes
    queue = [v for v in range(n_nodes) if indeg[v] == 0]
    seen = 0
    while queue:
        v = queue.pop()
        seen += 1
        for h in out[v]:
            level[h] = max(level[h], level[v] + 1)
            indeg[h] -= 1
            if indeg[h] == 0:
                queue.append(h)
    if seen != n_nodes:
        raise ValueError("the graph has a cycle: DAGShortestPath needs a directed acyclic graph")
    return level


def _reachable(start: int, tails: Sequence[int], heads: Sequence[int], n_nodes: int) -> list[bool]:
    """Nodes reachable from ``start`` along arcs ``tails[e] → heads[e]``."""
    out: list[list[int]] = [[] for _ in range(n_nodes)]
    for t, h in zip(tails, heads):
        out[t].append(h)
    seen = [False] * n_nodes
    seen[start] = True
    stack = [start]
    while stack:
        v = stack.pop()
        for h in out[v]:
            if not seen[h]:
                seen[h] = True
                stack.append(h)
    return seen


def _hop_range(
    source: int,
    target: int,
    tails: Sequence[int],
    heads: Sequence[int],
    useful: Sequence[bool],
    levels: Sequence[int],
    n_nodes: int,
) -> tuple[int, int]:
    """(most, fewest) arcs on a ``source → target`` path, by DP over the topological levels."""
    lo = [n_nodes + 1] * n_nodes
    hi = [-1] * n_nodes
    lo[source] = hi[source] = 0
    order = sorted(range(len(tails)), key=lambda e: levels[heads[e]])
    for e in order:
        if useful[e] and hi[tails[e]] >= 0:
            lo[heads[e]] = min(lo[heads[e]], lo[tails[e]] + 1)
            hi[heads[e]] = max(hi[heads[e]], hi[tails[e]] + 1)
    return hi[target], lo[target]
