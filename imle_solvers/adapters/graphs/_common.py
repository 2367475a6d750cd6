"""Plumbing shared by the graph oracles: NetworkX checks, the picklable base class, block Dijkstra."""

from __future__ import annotations

import math
import threading
from typing import Any

import numpy as np
import scipy.sparse as sp
from scipy.sparse import csgraph

from ..._checks import one_of, positive_int
from ...errors import InvalidWeightsError, require
from ...oracle import MapOracle

__all__: list[str] = []

_GRID_CHUNK = 16
"""Batch rows solved by one SciPy Dijkstra call (`_block_dijkstra`; one heap per row)."""


def _networkx() -> Any:
    return require("networkx", "graphs")


def _check_graph(graph: Any, who: str, *, undirected: bool = False) -> None:
    """Reject what an adapter cannot take, before anything is built."""
    nx = _networkx()
    if not isinstance(graph, nx.Graph):
        raise TypeError(f"{who} expects a networkx graph, got {type(graph).__name__}")
    if graph.is_multigraph():
        raise ValueError(f"{who} does not take multigraphs: keep one edge per node pair (nx.Graph(G))")
    if undirected and graph.is_directed():
        raise ValueError(f"{who} needs an undirected graph; convert with G.to_undirected()")
    if graph.number_of_edges() == 0:
        raise ValueError(f"{who} needs a graph with at least one edge (a weight vector of length ≥ 1)")


def _grid_shape(height: Any, width: Any, neighbourhood: Any) -> tuple[int, int, int]:
    """``(H, W, neighbourhood)`` of a grid oracle, checked: ``H, W ≥ 1`` integers (NumPy integers
    included), ``neighbourhood`` 4 or 8."""
    h, w = (
        positive_int(name, int(v) if isinstance(v, np.integer) else v)
        for name, v in (("height", height), ("width", width))
    )
    return h, w, int(one_of("neighbourhood", neighbourhood, (4, 8)))


_SAFE_EXP = 512
"""Weights up to ``2^_SAFE_EXP`` (≈ 1.3e154) cannot overflow any sum of ≤ 2^400 of them."""
_SCALED_EXP = 600
"""Rows beyond that are scaled by a power of two so that their largest ``|weight|`` is at most
``2^_SCALED_EXP``."""


def _scale_rows(w: np.ndarray) -> np.ndarray:
    """Divide each row whose largest ``|w|`` exceeds ``2^512`` by a power of two (exact) to bring it to
    ``≤ 2^600``: no sum a graph algorithm forms can overflow, and the argmax / argmin of every problem
    here is invariant under a positive scale. Weights ``2^−400`` times smaller than the row's largest
    may become subnormal or 0 (their ties with 0 are then decided as for 0).  [..., m]
    """
    peak = np.abs(w).max(axis=-1, keepdims=True) if w.size else np.zeros((*w.shape[:-1], 1))
    _, exp = np.frexp(peak)  # peak = mantissa · 2^exp
    shift = np.maximum(exp - _SCALED_EXP, 0)  # [..., 1]
    return np.ldexp(w, -shift) if shift.any() else w


class _GraphOracle(MapOracle):
    """Shared plumbing: validate each batch once, solve rows via `_solve`, pickle without scratch.

    Weights so large that sums of them could overflow (beyond ``2^512 ≈ 1.3e154``) are scaled down by
    an exact power of two per row first (`_scale_rows`), when the oracle's `_scale_invariant`.
    """

    in_process_safe = True  # SciPy / NetworkX in the caller's process: no crash-prone native solver
    _scale_invariant = True

    def __init__(self) -> None:
        self._local = threading.local()

    def _solve(self, w: np.ndarray) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def solve(self, weights: np.ndarray) -> np.ndarray:
        """Solve one ``(m,)`` instance (weights in `sense`); returns the ``(m,)`` 0/1 state."""
        w = weights
        fast = type(w) is np.ndarray and w.dtype == np.float64 and w.shape == (self.n_vars,)
        with np.errstate(over="ignore"):
            fast = fast and math.isfinite(w.dot(w))
        if not fast:  # finite ⟨w, w⟩ ⇒ no NaN/inf and no overflowing sums: skip the full check
            w = self.validate(weights)
            if w.ndim != 1:
                raise InvalidWeightsError(f"solve takes one (m,) weight vector, got shape {w.shape}")
            if self._scale_invariant and w.size and np.abs(w).max() > 2.0**_SAFE_EXP:
                w = _scale_rows(w)
        return self._solve(w)

    def solve_batch(self, weights: np.ndarray) -> np.ndarray:
        """Solve ``(B, m)`` weights; every row is validated before the first solve."""
        w = self.validate(weights)
        if w.ndim != 2:
            raise InvalidWeightsError(f"solve_batch takes (B, m) weights, got shape {w.shape}")
        if self._scale_invariant and w.size and np.abs(w).max() > 2.0**_SAFE_EXP:
            w = _scale_rows(w)
        return self._solve_many(w)

    def _solve_many(self, w: np.ndarray) -> np.ndarray:
        return self._solve_rows(w, range(w.shape[0]), self._solve)  # row-tagged errors

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.pop("_local", None)  # per-thread scratch: rebuilt on first use after unpickling
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._local = threading.local()


def _csr_order(tail: np.ndarray, head: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Arcs sorted by (tail, head): returns ``perm`` (arc ids in CSR order), ``indices`` and ``indptr``."""
    perm = np.lexsort((head, tail))
    indptr = np.searchsorted(tail[perm], np.arange(n + 1)).astype(np.int32)
    return perm, head[perm].astype(np.int32), indptr


def _block_dijkstra(
    indices: np.ndarray, indptr: np.ndarray, n: int, cost: np.ndarray, source: int
) -> np.ndarray:
    """Dijkstra for ``K`` cost rows of one CSR structure in a single SciPy call.  → ``[K, n]`` predecessors

    The rows become the diagonal blocks of a ``K·n``-node graph and SciPy runs one search (with its own
    heap) per block source, so every row gets exactly what a one-row call gives it, ties included.
    Predecessors are local node ids, ``< 0`` for none.
    """
    k, a = cost.shape
    offset = np.arange(k)[:, None]
    block_indices = (indices[None, :] + n * offset).ravel()  # block b's nodes are b·n + j      [K·a]
    block_indptr = np.concatenate([[0], (indptr[None, 1:] + a * offset).ravel()])  # [K·n + 1]
    mat = sp.csr_matrix((cost.ravel(), block_indices, block_indptr), shape=(k * n, k * n))
    _, pred = csgraph.dijkstra(
        mat, directed=True, indices=source + n * np.arange(k), return_predecessors=True
    )  # [K, K·n]
    own = pred.reshape(k, k, n)[np.arange(k), np.arange(k)]  # each search's own block   [K, n]
    return np.where(own >= 0, own - n * offset, -1)
