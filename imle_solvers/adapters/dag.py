"""Batched, device-native shortest paths on a fixed directed acyclic graph (a
[`TorchOracle`][imle_solvers.TorchOracle]).

On a DAG the shortest path is a dynamic programme over a topological order, correct for *negative*
edge costs (there are no cycles to exploit). Nodes are grouped into topological *levels* (a node's
level is one more than the highest level of its predecessors), so the whole batch is relaxed one level
at a time with a handful of tensor operations, and the path is recovered by a fixed-length vectorised
backtrack: no Python loop over instances, no host synchronisation.

This is the oracle of the predict-then-optimize shortest-path benchmark of Elmachtoub & Grigas (2022)
and PyEPO (Tang & Khalil, 2022): a ``rows × cols`` grid whose arcs go east and north
([`DAGShortestPath.grid`][imle_solvers.adapters.DAGShortestPath.grid]).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from .._checks import positive_int
from ..oracle import TorchOracle
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
    source, target
        End nodes of the path (``source != target``).
    expected_nonzeros
        ``⟨z, 1⟩`` of a typical path for [`SumOfGamma`][imle_solvers.SumOfGamma]. Default: the mean of the
        fewest and the most arcs on any ``source → target`` path (exact when all paths have the same
        length, as on the grid).

    Raises
    ------
    ValueError
        When the graph has a cycle, ``source == target``, or no path joins them.

    Notes
    -----
    Ties are broken deterministically (the first incoming arc in `edges` order wins).
    Arcs that lie on no ``source → target`` path are always 0.

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
        # with the dummy arc index m (its cost is +inf). All levels' arcs are gathered in one call.
        by_level: dict[int, list[int]] = {}
        for v in incoming:
            by_level.setdefault(levels[v], []).append(v)
        level_nodes: list[int] = []
        arc_rows: list[list[int]] = []
        self._levels: list[tuple[torch.Tensor, torch.Tensor, int, int, int]] = []
        offset = 0
        for lvl in sorted(by_level):
            vs = by_level[lvl]
            width = max(len(incoming[v]) for v in vs)
            arcs = [incoming[v] + [self.n_vars] * (width - len(incoming[v])) for v in vs]
            tails_lvl = [[tails[e] if e < self.n_vars else self._source_idx for e in row] for row in arcs]
            self._levels.append(
                (
                    torch.tensor(vs, dtype=torch.long),
                    torch.tensor(tails_lvl, dtype=torch.long).flatten(),
                    offset,
                    len(vs),
                    width,
                )
            )
            offset += len(vs) * width
            level_nodes += vs
            arc_rows.append([e for row in arcs for e in row])
        self._all_arcs = torch.tensor([e for row in arc_rows for e in row], dtype=torch.long)  # [Σ L·K]
        self._level_nodes = torch.tensor(level_nodes, dtype=torch.long)  # [Σ L]
        # For the backtrack: per relaxed node, its candidate arcs padded to the overall max in-degree.
        k_max = max(w for *_, w in self._levels)
        table = []
        for row, (_, _, _, n_l, w) in zip(arc_rows, self._levels):
            for i in range(n_l):
                table.append(row[i * w : (i + 1) * w] + [self.n_vars] * (k_max - w))
        self._arc_table = torch.tensor(table, dtype=torch.long)  # [Σ L, K_max]
        self._max_hops, min_hops = _hop_range(
            self._source_idx, self._target_idx, tails, heads, useful, levels, len(nodes)
        )
        if expected_nonzeros is None:
            expected_nonzeros = 0.5 * (self._max_hops + min_hops)
        self.expected_nonzeros = float(expected_nonzeros)
        self._cache: dict[torch.device, dict[str, Any]] = {}
        self._useful = np.flatnonzero(useful)  # arcs on some source → target path   [a]
        self._plan = LevelPlan(
            len(nodes), np.asarray(tails)[self._useful], np.asarray(heads)[self._useful], self._source_idx
        )  # the level DP of the NumPy path (shared)
        self._np_tails = np.concatenate([self._tails.numpy(), [self._source_idx]])

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
    def _device_plan(self, device: torch.device) -> dict[str, Any]:
        plan = self._cache.get(device)
        if plan is None:
            plan = {
                "levels": [(v.to(device), t.to(device), o, n, w) for v, t, o, n, w in self._levels],
                "all_arcs": self._all_arcs.to(device),
                "level_nodes": self._level_nodes.to(device),
                "arc_table": self._arc_table.to(device),
                "tails": torch.cat([self._tails, torch.tensor([self._source_idx])]).to(device),
            }
            self._cache[device] = plan
        return plan

    def solve_torch(self, weights: torch.Tensor) -> torch.Tensor:
        """Edge indicators of a cheapest path for ``(..., m)`` costs; same device and dtype.

        On the CPU (float32/float64) the same level-synchronous programme runs on NumPy views of the
        tensor (no copy; NumPy's per-call overhead is a fraction of torch's on these small arrays);
        elsewhere it runs as torch operations on the weights' device.
        """
        lead, m = weights.shape[:-1], weights.shape[-1]
        if weights.device.type == "cpu" and weights.dtype in (torch.float32, torch.float64):
            w_np = weights.detach().reshape(-1, m).numpy()
            return torch.from_numpy(self._solve_numpy(w_np)).reshape(*lead, m)
        return self._solve_torch_ops(weights.reshape(-1, m)).reshape(*lead, m)

    def _solve_numpy(self, w: np.ndarray) -> np.ndarray:
        """The programme of `_solve_torch_ops` in NumPy (`LevelPlan`; same ties: first minimum wins)."""
        n, m = w.shape
        pred = self._plan.predecessors(w[:, self._useful])  # optimal useful in-arc per node   [N, V]
        best = np.where(pred >= 0, self._useful[pred], m)  # as an edge id; m: none   [N, V]
        z = np.zeros((n, m + 1), dtype=w.dtype)
        rows = np.arange(n)
        node = np.full(n, self._target_idx, dtype=np.int64)
        for _ in range(self._max_hops):
            arc = best[rows, node]  # arc into the current node   [N]
            z[rows, arc] = 1.0
            node = self._np_tails[arc]  # step back to its tail (the source, once there)
        return z[:, :m]

    def _solve_torch_ops(self, w: torch.Tensor) -> torch.Tensor:
        """``(N, m)`` costs → ``(N, m)`` path indicators with torch operations on ``w``'s device."""
        m = w.shape[-1]
        n, device = w.shape[0], w.device
        plan = self._device_plan(device)
        w_pad = torch.cat([w, w.new_full((n, 1), float("inf"))], dim=1)  # dummy arc m: +inf   [N, m+1]
        w_arcs = w_pad.index_select(1, plan["all_arcs"])  # every level's arc costs, one gather   [N, Σ L·K]
        dist = w.new_full((n, self._n_nodes), float("inf"))  # d(v) = +inf                         [N, V]
        dist[:, self._source_idx] = 0.0  # d(source) = 0
        choices = []
        for nodes, tails, offset, n_l, width in plan["levels"]:
            cand = dist.index_select(1, tails) + w_arcs[:, offset : offset + n_l * width]  # d(u) + c(u,v)
            value, k = cand.view(n, n_l, width).min(dim=-1)  # Bellman: d(v) = min d(u) + c(u,v)   [N, L]
            dist.index_copy_(1, nodes, value)
            choices.append(k)
        k_all = torch.cat(choices, dim=1)  # argmin position per relaxed node   [N, Σ L]
        table = plan["arc_table"]  # [Σ L, K]
        best_rel = table.unsqueeze(0).expand(n, -1, -1).gather(2, k_all.unsqueeze(-1)).squeeze(-1)
        best = torch.full((n, self._n_nodes), m, dtype=torch.long, device=device)  # arc into v   [N, V]
        best.index_copy_(1, plan["level_nodes"], best_rel)
        # Backtrack from the target for a fixed number of hops; rows already at the source write to the
        # dummy column m (no data-dependent control flow, no host sync).
        z = torch.zeros((n, m + 1), dtype=w.dtype, device=device)
        node = torch.full((n, 1), self._target_idx, dtype=torch.long, device=device)  # [N, 1]
        tails_pad = plan["tails"]
        for _ in range(self._max_hops):
            arc = best.gather(1, node)  # arc into the current node   [N, 1]
            z.scatter_(1, arc, 1.0)  # z_arc = 1
            node = tails_pad[arc]  # step back to its tail          [N, 1]
        return z[:, :m]

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
