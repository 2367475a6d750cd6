"""The level-synchronous DAG dynamic programme shared by the DAG shortest-path oracles.

On a DAG, ``d(v) = min_{(u, v)} d(u) + c(u, v)`` can be evaluated for all nodes of one topological
*level* (longest hop count from the source) at once, since their in-arcs all come from lower levels.
``LevelPlan`` holds that grouping (built once per graph) and
runs the recursion for a whole batch of cost rows with a few NumPy operations per level.
"""

from __future__ import annotations

import numpy as np

__all__ = ["LevelPlan"]


class LevelPlan:
    """In-arcs of the nodes of a DAG grouped by level, and the batched DP over them.

    Parameters
    ----------
    n_nodes
        Nodes are ``0 … n_nodes − 1``.
    tails, heads
        The arcs ``tails[k] → heads[k]`` (``[a]``): only arcs on walks from ``source`` (callers drop
        the others), forming a DAG.
    source
        Where every path starts (``d(source) = 0``).

    Notes
    -----
    Ties: each node's predecessor is its optimal in-arc of least index ``k`` (the first minimum).
    """

    def __init__(self, n_nodes: int, tails: np.ndarray, heads: np.ndarray, source: int) -> None:
        self.n_nodes, self.source = int(n_nodes), int(source)
        self.tails = np.asarray(tails, dtype=np.int64)
        heads = np.asarray(heads, dtype=np.int64)
        n_arcs = len(self.tails)
        by_head = np.lexsort((np.arange(n_arcs), heads))  # in-arcs of each node, in arc order
        indeg = np.bincount(heads, minlength=self.n_nodes)
        starts = np.concatenate([[0], np.cumsum(indeg)])
        level = np.zeros(self.n_nodes, dtype=np.int64)
        out: list[list[int]] = [[] for _ in range(self.n_nodes)]
        for k, t in enumerate(self.tails.tolist()):
            out[t].append(k)
        remaining = indeg.copy()
        queue = [v for v in range(self.n_nodes) if remaining[v] == 0]
        while queue:  # Kahn: level(v) = 1 + max level of its tails
            v = queue.pop()
            for k in out[v]:
                h = int(heads[k])
                level[h] = max(level[h], level[v] + 1)
                remaining[h] -= 1
                if remaining[h] == 0:
                    queue.append(h)
        #: per level ≥ 1: its nodes ``[n_L]`` and their in-arcs ``[n_L, deg]`` (padding: arc ``a``)
        self.levels: list[tuple[np.ndarray, np.ndarray]] = []
        for lev in range(1, int(level.max(initial=0)) + 1):
            nodes = np.flatnonzero((level == lev) & (indeg > 0))
            if not nodes.size:
                continue
            width = int(indeg[nodes].max())
            pad = np.full((len(nodes), width), n_arcs, dtype=np.int64)
            for r, v in enumerate(nodes.tolist()):
                pad[r, : indeg[v]] = by_head[starts[v] : starts[v + 1]]
            self.levels.append((nodes, pad))
        self._tail_ext = np.append(self.tails, self.n_nodes)  # padding arc: from node n (d = +inf)
        # per level, flat and precomputed: tails of the padded in-arcs, their offset in one gather
        self._all_arcs = (
            np.concatenate([pad.ravel() for _, pad in self.levels])
            if self.levels
            else (np.zeros(0, dtype=np.int64))
        )
        self._flat: list[tuple[np.ndarray, np.ndarray, int, int, int, np.ndarray]] = []
        offset = 0
        for nodes, pad in self.levels:
            n_l, width = pad.shape
            self._flat.append((nodes, self._tail_ext[pad].ravel(), offset, n_l, width, pad))
            offset += n_l * width

    def predecessors(self, cost: np.ndarray) -> np.ndarray:
        """Optimal in-arc of every node for each cost row (``−1``: the source, or no in-arc).

        ``cost`` is ``[B, a]`` (float); returns ``[B, n_nodes]`` arc ids.
        """
        b = cost.shape[0]
        dist = np.full((b, self.n_nodes + 1), np.inf, dtype=cost.dtype)  # node n: behind the padding
        dist[:, self.source] = 0.0  # d(source) = 0
        cost_ext = np.concatenate([cost, np.zeros((b, 1), dtype=cost.dtype)], axis=1)  # [B, a + 1]
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
