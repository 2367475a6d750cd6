"""Shortest top-left → bottom-right path on a vertex-weighted grid (the Warcraft setting)."""

from __future__ import annotations

from typing import Literal

import numpy as np
import scipy.sparse as sp
from scipy.sparse import csgraph

from ...errors import ImleSolversError, InvalidWeightsError, NegativeCycleError
from ._common import _GRID_CHUNK, _block_dijkstra, _csr_order, _GraphOracle, _grid_shape

__all__ = ["GridShortestPath"]


class GridShortestPath(_GraphOracle):
    """Shortest top-left → bottom-right path on a vertex-weighted grid (Warcraft, Vlastelica et al. 2020).

    The setting of the paper's Warcraft experiment (sec. 5): weights and states are the ``H·W`` cells
    in row-major order (cell ``(r, c)`` is entry ``r·W + c``); a path moves between 8- (or 4-)
    neighbouring cells and costs the sum of the weights of the cells it visits, both corners
    included. The layer takes **costs** (``sense="min"``); the state is the 0/1 mask of the path cells.

    Parameters
    ----------
    height
        Rows ``H`` of the grid (``≥ 1``).
    width
        Columns ``W`` of the grid (``≥ 1``).
    neighbourhood
        ``8`` (king moves, as in Warcraft) or ``4`` (rook moves).

    Notes
    -----
    *Negative weights.* Any cycle's cost is half the sum of its consecutive pair sums
    ``w_u + w_v``, so the grid has a negative cycle iff two adjacent cells sum below 0: then
    [`NegativeCycleError`][imle_solvers.errors.NegativeCycleError]. Otherwise the potential
    ``h = w / 2`` (Johnson reweighting) turns the problem into an undirected graph with edge costs
    ``(w_u + w_v) / 2 ≥ 0`` whose paths cost ``path cost − (w_s + w_t) / 2``: Dijkstra on it (with the
    costs doubled, ``w_u + w_v``) is exact, negative cell weights included. (Rows without a negative
    cell take the cheaper direct form: arc ``u → v`` costs ``w_v``.)

    *Speed.* The arc structure is built once; a call only fills the arc costs of a per-thread SciPy
    matrix and runs ``scipy.sparse.csgraph.dijkstra``. `solve_batch` stacks up to 16 rows into
    one block-diagonal graph and solves them in one SciPy call (each row keeps its own heap, so rows
    are solved exactly as by `solve`, ties included).

    Ties are broken deterministically by SciPy's Dijkstra; ``solve`` and every row of ``solve_batch``
    agree. ``expected_nonzeros`` is the number of cells of a shortest path under unit weights:
    ``max(H, W)`` for 8 neighbours, ``H + W − 1`` for 4.

    References
    ----------
    * Vlastelica, Paulus, Musil, Martius & Rolínek, "Differentiation of Blackbox Combinatorial Solvers", ICLR
      2020, <https://arxiv.org/abs/1912.02175> (the Warcraft shortest-path benchmark).
    * Niepert, Minervini & Franceschi, "Implicit MLE: Backpropagating Through Discrete Exponential Family
      Distributions", NeurIPS 2021, sec. 5 (the Warcraft experiment), <https://arxiv.org/abs/2106.01798>.
    * Dijkstra, "A note on two problems in connexion with graphs", Numerische Mathematik 1, 1959,
      <https://doi.org/10.1007/BF01386390>.
    * SciPy, ``scipy.sparse.csgraph.dijkstra``,
      <https://docs.scipy.org/doc/scipy/reference/generated/scipy.sparse.csgraph.dijkstra.html>.

    Examples
    --------
    >>> import numpy as np
    >>> grid = GridShortestPath(3, 3)
    >>> w = np.array([1, 9, 9,
    ...               1, 9, 9,
    ...               9, 1, 1.0])
    >>> grid.solve(w).reshape(3, 3).astype(int).tolist()
    [[1, 0, 0], [1, 0, 0], [0, 1, 1]]
    """

    sense = "min"

    def __init__(self, height: int, width: int, neighbourhood: Literal[4, 8] = 8) -> None:
        super().__init__()
        self.height, self.width, self.neighbourhood = _grid_shape(height, width, neighbourhood)
        h, w = self.height, self.width
        self.n_vars = h * w
        self.expected_nonzeros = float(max(h, w) if neighbourhood == 8 else h + w - 1)
        steps = [(0, 1), (1, 0)] + ([(1, 1), (1, -1)] if neighbourhood == 8 else [])
        r, c = np.divmod(np.arange(h * w), w)
        eu_list, ev_list = [], []
        for dr, dc in steps:  # undirected edges u < v                                   [e]
            ok = (r + dr < h) & (c + dc >= 0) & (c + dc < w)
            eu_list.append(np.flatnonzero(ok))
            ev_list.append((r[ok] + dr) * w + c[ok] + dc)
        eu, ev = np.concatenate(eu_list), np.concatenate(ev_list)
        tail, head = np.concatenate([eu, ev]), np.concatenate([ev, eu])  # both directions  [a]
        perm, self._indices, self._indptr = _csr_order(tail, head, h * w)
        self._tail, self._head = tail[perm], head[perm]  # arcs in CSR order           [a]

    @property
    def nodes(self) -> list[tuple[int, int]]:
        """The cells ``(row, col)`` in row-major order: the order of weights and states."""
        return [(i // self.width, i % self.width) for i in range(self.n_vars)]

    @property
    def edges(self) -> list[tuple[tuple[int, int], tuple[int, int]]]:
        """Adjacent cell pairs (each once, CSR order); weights live on the cells, not here."""
        nodes = self.nodes
        return [(nodes[a], nodes[b]) for a, b in zip(self._tail.tolist(), self._head.tolist()) if a < b]

    def _costs(self, w: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """Arc costs in CSR order, per row; raises
        [`NegativeCycleError`][imle_solvers.errors.NegativeCycleError] naming the bad rows.  [..., a]

        A row with no negative cell uses ``c(u → v) = w_v`` (entering a cell costs its weight; the
        source's weight is a constant). A row with a negative cell uses the reweighted ``w_u + w_v``
        (twice ``(w_u + w_v)/2``: scaling every arc by 2 changes no shortest path), and has a negative
        cycle iff one of these is below 0. The choice depends on the row's weights only, so ``solve``
        and every ``solve_batch`` row agree.
        """
        nonneg = w.min(axis=-1) >= 0  # [...]
        if w.ndim == 1 and nonneg:
            return np.take(w, self._head, out=out, mode="clip")  # c(u → v) = w_v   [a]
        cost = np.take(w, self._tail, axis=-1, out=out, mode="clip")  # clip: unbuffered
        cost += np.take(w, self._head, axis=-1)  # c(u → v) = w_u + w_v   [..., a]
        negative = (cost.min(axis=-1) < 0) & ~nonneg
        if negative.any():
            raise NegativeCycleError(
                "two adjacent cells have weights summing below 0: a negative cycle (u → v → u)",
                rows=np.flatnonzero(negative).tolist() if cost.ndim == 2 else None,
            )
        if w.ndim == 2 and nonneg.any():
            cost[nonneg] = w[nonneg][:, self._head]
        return cost

    def _solve(self, w: np.ndarray) -> np.ndarray:
        state = np.zeros(self.n_vars, dtype=np.float64)
        if self.n_vars == 1:
            state[0] = 1.0
            return state
        mat = getattr(self._local, "matrix", None)
        if mat is None:  # this thread's matrix: structure fixed, data refilled per call
            mat = sp.csr_matrix(
                (np.zeros(len(self._indices)), self._indices.copy(), self._indptr.copy()),
                shape=(self.n_vars, self.n_vars),
            )
            self._local.matrix = mat
        if w.min() >= 0:  # the common case, inlined: c(u → v) = w_v, written in place   [a]
            np.take(w, self._head, out=mat.data, mode="clip")
        else:
            self._costs(w, out=mat.data)
        _, pred_arr, _ = csgraph.dijkstra(
            mat, directed=True, indices=0, return_predecessors=True, min_only=True
        )  # min_only: the cheaper 1-D code path
        v = self.n_vars - 1
        path = [v]
        while v != 0:
            v = pred_arr.item(v)
            if v < 0 or len(path) > self.n_vars:  # unreachable after the scaling in solve; never loop
                raise InvalidWeightsError("no finite path: the path sums overflow")
            path.append(v)
        state[path] = 1.0
        return state

    def _solve_many(self, w: np.ndarray) -> np.ndarray:
        out = np.zeros(w.shape, dtype=np.float64)
        if self.n_vars == 1:  # the single cell is the path, whatever its weight
            out[:, 0] = 1.0
            return out
        cost = self._costs(w)  # checks every row before any solve                 [B, a]
        for start in range(0, w.shape[0], _GRID_CHUNK):
            stop = min(start + _GRID_CHUNK, w.shape[0])
            try:
                out[start:stop] = self._solve_block(cost[start:stop])
            except ImleSolversError as err:
                raise err.with_rows([start + r for r in err.rows]) from None
        return out

    def _solve_block(self, cost: np.ndarray) -> np.ndarray:
        """``K`` rows in one SciPy call (`_block_dijkstra`), paths read off all at once.  [K, V]"""
        pred = _block_dijkstra(self._indices, self._indptr, self.n_vars, cost, 0)  # [K, V]
        k = cost.shape[0]
        rows = np.arange(k)
        cur = np.full(k, self.n_vars - 1)  # every row's bottom-right cell                  [K]
        state = np.zeros((k, self.n_vars), dtype=np.float64)
        state[rows, cur] = 1.0
        for _ in range(self.n_vars):  # walk the K predecessor chains back together (≤ V − 1 moves)
            if not (active := rows[cur != 0]).size:
                break
            cur[active] = pred[active, cur[active]]
            lost = active[cur[active] < 0]
            if lost.size:  # unreachable after the scaling in solve_batch; never loop
                raise InvalidWeightsError("no finite path: the path sums overflow", rows=lost.tolist())
            state[active, cur[active]] = 1.0
        return state

    def __repr__(self) -> str:
        return f"GridShortestPath({self.height}×{self.width}, neighbourhood={self.neighbourhood})"
