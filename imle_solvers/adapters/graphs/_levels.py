"""The level-synchronous dynamic programme of every DAG shortest path in the library.

On a DAG, ``d(v) = min_{(u, v)} d(u) + c(u, v)`` (Bellman's recursion) can be evaluated for all nodes of
one topological *level* at once (a node's level is one more than the highest level of its
predecessors), since their in-arcs all come from lower levels. `LevelPlan` builds that grouping once
per graph and runs the recursion for a whole batch of cost rows, then reads the cheapest paths back:

* `LevelPlan.path` on NumPy arrays (a few operations per level for a batch; plain Python for one
  small row, where NumPy's per-call cost would dominate);
* `LevelPlan.path_torch` as torch operations on the costs' device, with a fixed-length backtrack (no
  data-dependent control flow, no host synchronisation).

Every executor follows one tie rule (a node's predecessor is its optimal in-arc of least index) with
the same floating-point sums, so all return the same states. Used by
[`DAGShortestPath`][imle_solvers.DAGShortestPath] and by [`ShortestPath`][imle_solvers.ShortestPath] on a
DAG.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

__all__ = ["LevelPlan"]

_ARCS_PER_LEVEL = 80
"""A batch with fewer (rows · arcs) than this many per level runs the plain-Python programme row by row
(NumPy's per-call overhead would dominate); larger ones the level-vectorised NumPy programme."""


class LevelPlan:
    """A DAG's arcs grouped by topological level, and the batched ``source → target`` shortest path.

    Parameters
    ----------
    n_nodes
        Nodes are ``0 … n_nodes − 1``.
    tails
        ``[a]`` first node of every arc ``tails[k] → heads[k]``, in the order of the cost vector. Arcs on
        no ``source → target`` walk are ignored (never on a returned path); self-loops are not allowed.
    heads
        ``[a]`` last node of every arc.
    source
        First node of every path.
    target
        Last node of every path.

    Raises
    ------
    ValueError
        When the arcs on ``source → target`` walks contain a cycle.

    Notes
    -----
    Ties: each node's predecessor is its optimal in-arc of least index ``k`` (the first minimum), on
    every executor. Costs may be negative (a DAG has no cycle to exploit).
    """

    def __init__(self, n_nodes: int, tails: Any, heads: Any, source: int, target: int) -> None:
        self.n_nodes, self.source, self.target = int(n_nodes), int(source), int(target)
        tails = np.asarray(tails, dtype=np.int64).reshape(-1)
        heads = np.asarray(heads, dtype=np.int64).reshape(-1)
        self.n_arcs = len(tails)
        reach = _reachable(self.source, tails, heads, self.n_nodes)
        coreach = _reachable(self.target, heads, tails, self.n_nodes)
        self.feasible = bool(reach[self.target])
        """Whether any path joins ``source`` to ``target``."""
        self.useful = (
            np.flatnonzero(reach[tails] & coreach[heads]) if self.feasible else np.zeros(0, np.int64)
        )
        """The arcs on some ``source → target`` path, in arc order   ``[a_u]``."""
        self.tails, self.heads = tails[self.useful], heads[self.useful]  # useful arcs only   [a_u]
        n, a_u = self.n_nodes, len(self.useful)
        level = _levels(n, self.tails, self.heads)  # raises ValueError on a cycle
        indeg = np.bincount(self.heads, minlength=n)
        by_head = np.lexsort((np.arange(a_u), self.heads))  # in-arcs of each node, in arc order
        starts = np.concatenate([[0], np.cumsum(indeg)])
        self.levels: list[tuple[np.ndarray, np.ndarray]] = []
        """Per level ≥ 1: its nodes ``[n_L]`` and their in-arcs ``[n_L, deg]`` (useful-arc ids; padding:
        ``a_u``, a zero-cost arc from node ``n``, whose distance is ``+inf``)."""
        for lev in range(1, int(level.max(initial=0)) + 1):
            nodes = np.flatnonzero((level == lev) & (indeg > 0))
            if not nodes.size:
                continue
            width = int(indeg[nodes].max())
            pad = np.full((len(nodes), width), a_u, dtype=np.int64)
            for r, v in enumerate(nodes.tolist()):
                pad[r, : indeg[v]] = by_head[starts[v] : starts[v + 1]]
            self.levels.append((nodes, pad))
        self._tail_ext = np.append(self.tails, n)  # the padding arc leaves node n   [a_u + 1]
        self._all_arcs = (
            np.concatenate([pad.ravel() for _, pad in self.levels]) if self.levels else np.zeros(0, np.int64)
        )  # every level's padded in-arcs, gathered in one call   [Σ n_L·deg]
        self._flat: list[tuple[np.ndarray, np.ndarray, int, int, int, np.ndarray]] = []
        offset = 0
        for nodes, pad in self.levels:
            n_l, width = pad.shape
            self._flat.append((nodes, self._tail_ext[pad].ravel(), offset, n_l, width, pad))
            offset += n_l * width
        # plain Python: each relaxed node with its in-arcs (arc, tail), the nodes in level order
        self._python = [
            (int(v), [(int(k), int(self.tails[k])) for k in pad[r].tolist() if k < a_u])
            for nodes, pad in self.levels
            for r, v in enumerate(nodes.tolist())
        ]
        self._tails_list: list[int] = self.tails.tolist()
        self._useful_list: list[int] = self.useful.tolist()
        self.max_hops, self.min_hops = self._hop_range()
        """Most and fewest arcs on a ``source → target`` path (0 and 0 when there is none)."""
        self._device: dict[torch.device, dict[str, Any]] = {}

    def _hop_range(self) -> tuple[int, int]:
        """(most, fewest) arcs on a ``source → target`` path, by the same recursion over the levels."""
        if not self.feasible:
            return 0, 0
        lo = [self.n_nodes + 1] * self.n_nodes
        hi = [-1] * self.n_nodes
        lo[self.source] = hi[self.source] = 0
        for v, ins in self._python:
            lo[v] = min(lo[u] + 1 for _, u in ins)
            hi[v] = max(hi[u] + 1 for _, u in ins)
        return hi[self.target], lo[self.target]

    # ------------------------------------------------------------------ NumPy and Python
    def predecessors(self, cost: np.ndarray) -> np.ndarray:
        """Optimal in-arc (a useful-arc id) of every node for each row of ``cost``; ``−1``: the source.

        ``cost`` is ``[B, a]`` over all arcs (float; the sums are formed in its dtype); returns
        ``[B, n_nodes]``.
        """
        b = cost.shape[0]
        cost_ext = np.concatenate([cost[:, self.useful], np.zeros((b, 1), dtype=cost.dtype)], axis=1)
        dist = np.full((b, self.n_nodes + 1), np.inf, dtype=cost.dtype)  # node n: behind the padding
        dist[:, self.source] = 0.0  # d(source) = 0
        arc_cost = cost_ext[:, self._all_arcs]  # every level's in-arc costs, one gather   [B, Σ n_L·deg]
        pred = np.full((b, self.n_nodes), -1, dtype=np.int64)
        for nodes, tails, offset, n_l, width, pad in self._flat:
            cand = dist[:, tails]  # d(u)   [B, n_L·deg]
            cand += arc_cost[:, offset : offset + n_l * width]  # d(u) + c(u, v)
            cand = cand.reshape(b, n_l, width)
            j = cand.argmin(axis=2)  # first minimum = in-arc of least index                 [B, n_L]
            dist[:, nodes] = cand.min(axis=2)  # Bellman: d(v) = min_u d(u) + c(u, v)
            pred[:, nodes] = pad[np.arange(n_l), j]
        return pred

    def path(self, cost: np.ndarray) -> np.ndarray:
        """Arc indicators of a cheapest ``source → target`` path for each row of ``cost``.

        ``cost`` is ``[B, a]`` (float, finite; the sums are formed in its dtype); returns ``[B, a]`` 0/1 in
        ``cost``'s dtype. Small float64 batches run in plain Python (whose floats are float64), the
        others level-vectorised in NumPy: the same states.
        """
        b = cost.shape[0]
        z = np.zeros(cost.shape, dtype=cost.dtype)
        if not self.feasible or not self.useful.size:
            return z
        small = b * len(self.useful) < _ARCS_PER_LEVEL * len(self.levels)
        if small and cost.dtype == np.float64:
            for row in range(b):
                z[row, self._path_python(cost[row])] = 1.0
            return z
        pred = self.predecessors(cost)  # useful arc into each node; −1: none   [B, n]
        a_u = len(self.useful)
        best = np.full((b, self.n_nodes + 1), a_u, dtype=np.int64)  # −1 → the padding arc; node n too
        np.copyto(best[:, :-1], pred, where=pred >= 0)
        arcs = np.zeros((b, a_u + 1), dtype=cost.dtype)
        rows = np.arange(b)
        node = np.full(b, self.target, dtype=np.int64)
        for _ in range(self.max_hops):  # rows at the source step along the padding arc to node n, and stay
            arc = best[rows, node]  # useful arc into the current node   [B]
            arcs[rows, arc] = 1.0
            node = self._tail_ext[arc]  # step back to its tail
        if a_u == self.n_arcs:  # every arc is on some path (a grid): no scatter
            return arcs[:, :a_u]
        z[:, self.useful] = arcs[:, :a_u]
        return z

    def _path_python(self, cost: np.ndarray) -> list[int]:
        """The programme for one row in plain Python (the first minimal in-arc wins); its arc ids."""
        c = cost.tolist()
        useful, tails = self._useful_list, self._tails_list
        dist = [0.0] * self.n_nodes  # read only once set: every tail precedes its head
        pred = [-1] * self.n_nodes
        for v, ins in self._python:
            best, arc = float("inf"), -1
            for k, u in ins:
                d = dist[u] + c[useful[k]]
                if d < best:
                    best, arc = d, k
            dist[v], pred[v] = best, arc
        arcs: list[int] = []
        v = self.target
        while v != self.source:
            k = pred[v]
            arcs.append(useful[k])
            v = tails[k]
        return arcs

    # ------------------------------------------------------------------ torch
    def _tables(self, device: torch.device) -> dict[str, Any]:
        """The plan's index tables on ``device`` (built on first use there; the plan has ≥ 1 level)."""
        tables = self._device.get(device)
        if tables is None:
            a_u = len(self.useful)
            k_max = max(pad.shape[1] for _, pad in self.levels)
            table = np.concatenate(
                [
                    np.pad(pad, ((0, 0), (0, k_max - pad.shape[1])), constant_values=a_u)
                    for _, pad in self.levels
                ]
            )  # in-arcs of every relaxed node, padded to the widest level   [Σ n_L, K]
            tables = {
                "levels": [
                    (
                        torch.from_numpy(nodes).to(device),
                        torch.from_numpy(tails).to(device),
                        offset,
                        n_l,
                        width,
                    )
                    for nodes, tails, offset, n_l, width, _ in self._flat
                ],
                "all_arcs": torch.from_numpy(self._all_arcs).to(device),
                "useful": torch.from_numpy(self.useful).to(device),
                "table": torch.from_numpy(table).to(device),
                "level_nodes": torch.from_numpy(np.concatenate([nodes for nodes, _ in self.levels])).to(
                    device
                ),
                "tail_ext": torch.from_numpy(self._tail_ext).to(device),
            }
            self._device[device] = tables
        return tables

    def path_torch(self, cost: torch.Tensor) -> torch.Tensor:
        """`path` as torch operations on ``cost``'s device: ``[N, a]`` floating costs → ``[N, a]`` 0/1.

        The sums are formed in ``cost``'s dtype; the backtrack takes `max_hops` steps for every row (rows
        already at the source step along a dummy arc), so nothing waits for the device.
        """
        n, device = cost.shape[0], cost.device
        z_all = torch.zeros(cost.shape, dtype=cost.dtype, device=device)
        if not self.feasible or not self.useful.size:
            return z_all
        tables = self._tables(device)
        a_u = len(self.useful)
        cost_ext = torch.cat([cost.index_select(1, tables["useful"]), cost.new_zeros((n, 1))], dim=1)
        arc_cost = cost_ext.index_select(1, tables["all_arcs"])  # every level's arc costs   [N, Σ L·K]
        dist = cost.new_full((n, self.n_nodes + 1), float("inf"))  # d(v) = +inf; node n: padding   [N, V+1]
        dist[:, self.source] = 0.0  # d(source) = 0
        choices = []
        for nodes, tails, offset, n_l, width in tables["levels"]:
            cand = dist.index_select(1, tails) + arc_cost[:, offset : offset + n_l * width]  # d(u) + c(u,v)
            value, k = cand.view(n, n_l, width).min(dim=-1)  # Bellman: d(v) = min d(u) + c(u,v)   [N, L]
            dist.index_copy_(1, nodes, value)
            choices.append(k)
        k_all = torch.cat(choices, dim=1)  # argmin position per relaxed node   [N, Σ L]
        table = tables["table"]  # [Σ L, K]
        best_rel = table.unsqueeze(0).expand(n, -1, -1).gather(2, k_all.unsqueeze(-1)).squeeze(-1)
        best = torch.full((n, self.n_nodes + 1), a_u, dtype=torch.long, device=device)  # arc into v
        best.index_copy_(1, tables["level_nodes"], best_rel)
        # Backtrack from the target for max_hops steps; rows at the source take the padding arc a_u to
        # node n, which leads to itself (no data-dependent control flow, no host sync).
        z = torch.zeros((n, a_u + 1), dtype=cost.dtype, device=device)
        node = torch.full((n, 1), self.target, dtype=torch.long, device=device)  # [N, 1]
        tail_ext = tables["tail_ext"]
        for _ in range(self.max_hops):
            arc = best.gather(1, node)  # useful arc into the current node   [N, 1]
            z.scatter_(1, arc, 1.0)  # z_arc = 1
            node = tail_ext[arc]  # step back to its tail
        return z_all.index_copy_(1, tables["useful"], z[:, :a_u])

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_device"] = {}  # device tables are rebuilt where the plan is used
        return state


def _levels(n_nodes: int, tails: np.ndarray, heads: np.ndarray) -> np.ndarray:
    """Longest hop count from a node without in-arcs, for every node (Kahn's algorithm)   ``[n]``.

    Raises ``ValueError`` when the arcs contain a cycle.
    """
    indeg = np.bincount(heads, minlength=n_nodes)
    out: list[list[int]] = [[] for _ in range(n_nodes)]
    for t, h in zip(tails.tolist(), heads.tolist()):
        out[t].append(h)
    remaining = indeg.tolist()
    level = [0] * n_nodes
    queue = [v for v in range(n_nodes) if remaining[v] == 0]
    seen = 0
    while queue:
        v = queue.pop()
        seen += 1
        for h in out[v]:
            level[h] = max(level[h], level[v] + 1)
            remaining[h] -= 1
            if remaining[h] == 0:
                queue.append(h)
    if seen != n_nodes:
        raise ValueError("the arcs on source → target walks contain a cycle: a DAG is needed")
    return np.asarray(level, dtype=np.int64)


def _reachable(start: int, tails: np.ndarray, heads: np.ndarray, n_nodes: int) -> np.ndarray:
    """Nodes reachable from ``start`` along arcs ``tails[k] → heads[k]``   ``[n]`` bool."""
    out: list[list[int]] = [[] for _ in range(n_nodes)]
    for t, h in zip(tails.tolist(), heads.tolist()):
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
    return np.asarray(seen, dtype=bool)
