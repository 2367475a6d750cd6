"""Maximum-weight matchings as MAP oracles: general graphs on the host (NetworkX blossom), and
bipartite assignments batched on the weights' device (SciPy on the CPU, a Triton kernel on CUDA)."""

from __future__ import annotations

import importlib.util
import os
import threading
from collections.abc import Hashable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import torch

from ..._checks import positive_int
from ...errors import InfeasibleError, InvalidWeightsError
from ...oracle import TorchOracle
from ._common import _SAFE_EXP, _SCALED_EXP, _check_graph, _GraphOracle, _networkx, _scale_rows

__all__ = ["Matching", "TorchMatching"]

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
        return cached

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


_THREAD_WORK = 1 << 12
"""A CPU batch is split over threads when an instance costs SciPy at least ``n_rows · n_cols · min(n_rows,
n_cols)`` = this many units (16×16: its solve, which releases the GIL, outweighs the Python call)."""
_THREAD_ROWS = 32
"""... and only when each thread gets at least this many rows."""
_KERNEL_MAX_COLS = 1024
"""The Triton kernel keeps a few vectors of this many lanes in registers; larger instances go to SciPy."""
_EXACT_INTEGER = 2**50
"""Integer weights up to this ``|w|`` are assigned exactly: SciPy's float64 arithmetic then forms only
integers below ``7 · 2^50 < 2^53`` (see `TorchMatching`'s notes)."""


class TorchMatching(TorchOracle):
    """Maximum-weight bipartite assignment, batched on the weights' device (sense ``"max"``).

    ``MAP(θ) = argmax_z ⟨z, θ⟩`` over the assignments of ``n_rows`` rows to ``n_cols`` columns (paper,
    eq. 3): a permutation matrix when the matrix is square; when it is rectangular, every node of the
    smaller side is matched exactly once. Weights and states are the ``n_rows × n_cols`` matrix in
    row-major order: variable ``i · n_cols + j`` is the pair (row ``i``, column ``j``), as listed in
    `edges`. The layer takes **scores**; batched over any leading dimensions, states come back on the
    weights' device and dtype. This is the oracle of permutation learning and of matching keypoints
    (Rolínek et al. 2020; Mena et al. 2018).

    Parameters
    ----------
    n_rows
        Nodes on one side of the bipartite graph (``≥ 1``).
    n_cols
        Nodes on the other side (``≥ 1``); every (row, column) pair is an edge.

    Notes
    -----
    *Algorithm and states.* Exact: the shortest augmenting path method (Crouse 2016) that SciPy's
    ``linear_sum_assignment(w, maximize=True)`` runs, in float64, rows augmented in order. On the CPU
    the rows are handed to SciPy (split over ``torch.get_num_threads()`` threads for large batches;
    SciPy releases the GIL). On CUDA one Triton kernel solves the whole batch, one instance per
    program, with SciPy's float64 arithmetic in SciPy's order, so the states are SciPy's on every
    device, bit for bit, ties included, and no host synchronisation is made. Instances with more than
    1024 columns (rows, if there are more rows), and accelerators without Triton (it comes with
    PyTorch's CUDA wheels on Linux, or ``pip install 'imle-solvers[triton]'``), are solved by SciPy
    through one host copy of the batch (which synchronises).

    *Ties* are SciPy's rule (SciPy ≥ 1.10): with ``R ≤ C`` the smaller side (the transpose otherwise),
    row ``r = 0, 1, …`` is added by a Dijkstra search over the columns in the reduced costs of the
    rows before it; each step takes the column of least distance and, among equal distances, a free
    column (which ends the search) before a matched one. So a constant matrix gives the identity
    (the first ``R`` columns, in order). The same weights give the same state on every device.

    *Infinite weights.* ``-inf`` marks a forbidden pair (never matched). ``+inf`` and NaN are
    refused: on the CPU [`InvalidWeightsError`][imle_solvers.errors.InvalidWeightsError] names the
    rows before anything is solved, and rows with no assignment avoiding the forbidden pairs raise
    [`InfeasibleError`][imle_solvers.errors.InfeasibleError] naming them. On an accelerator those
    checks would need a host synchronisation, so such rows come back as all-NaN states instead. (A
    layer checks its weights for NaN/inf on the CPU unless ``check_finite=False``.) Rows whose
    largest ``|w|`` exceeds ``2^512`` are first divided by an exact power of two (the assignment does
    not change), so no sum the algorithm forms can overflow.

    *Integer weights* are solved exactly up to ``|w| ≤ 2^50``; beyond it
    [`InvalidWeightsError`][imle_solvers.errors.InvalidWeightsError] names the rows (on an accelerator
    that check costs one host synchronisation, for integer dtypes only). The algorithm computes in
    float64: with ``|w| ≤ M`` every row dual stays within ``M`` and every column dual within ``2M``
    (a free column keeps its dual at 0), so every value it forms is an integer of magnitude at most
    ``7M``, exact in float64 while ``7M < 2^53``. Larger integers (2^62 against 2^62 + 1) would be
    rounded; divide them by a common factor, or convert them to float64 yourself to accept the rounding.

    ``expected_nonzeros`` is ``min(n_rows, n_cols)``: every assignment has that many pairs, so
    [`SumOfGamma`][imle_solvers.SumOfGamma] needs no ``k``. The oracle is picklable.

    References
    ----------
    * Niepert, Minervini & Franceschi, "Implicit MLE: Backpropagating Through Discrete Exponential Family
      Distributions", NeurIPS 2021, eq. 3 (the MAP oracle), <https://arxiv.org/abs/2106.01798>.
    * Crouse, "On implementing 2D rectangular assignment algorithms", IEEE Transactions on Aerospace and
      Electronic Systems 52(4), 2016, <https://doi.org/10.1109/TAES.2016.140952> (the algorithm).
    * SciPy, ``scipy.optimize.linear_sum_assignment``,
      <https://docs.scipy.org/doc/scipy/reference/generated/scipy.optimize.linear_sum_assignment.html>.
    * Rolínek, Swoboda, Zietlow, Paulus, Musil & Martius, "Deep Graph Matching via Blackbox
      Differentiation of Combinatorial Solvers", ECCV 2020, <https://arxiv.org/abs/2003.11657>.
    * Mena, Belanger, Linderman & Snoek, "Learning Latent Permutations with Gumbel-Sinkhorn Networks",
      ICLR 2018, <https://arxiv.org/abs/1802.08665>.

    Examples
    --------
    >>> import torch
    >>> match = TorchMatching(3, 3)
    >>> w = torch.tensor([[1.0, 5.0, 0.0],
    ...                   [4.0, 4.0, 0.0],
    ...                   [0.0, 0.0, 2.0]])
    >>> match.solve_torch(w.flatten()).reshape(3, 3).int().tolist()
    [[0, 1, 0], [1, 0, 0], [0, 0, 1]]
    """

    sense = "max"
    in_process_safe = True

    def __init__(self, n_rows: int, n_cols: int) -> None:
        self.n_rows = positive_int("n_rows", int(n_rows) if isinstance(n_rows, np.integer) else n_rows)
        self.n_cols = positive_int("n_cols", int(n_cols) if isinstance(n_cols, np.integer) else n_cols)
        self.n_vars = self.n_rows * self.n_cols
        self.expected_nonzeros = float(min(self.n_rows, self.n_cols))
        self._pool: tuple[int, int, ThreadPoolExecutor] | None = None  # (pid, threads, executor)
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_pool"], state["_lock"] = None, None  # threads and locks are not pickled
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    @property
    def edges(self) -> list[tuple[int, int]]:
        """The pairs ``(i, j)`` (row ``i``, column ``j``) in row-major order: the order of the weights."""
        return [(i, j) for i in range(self.n_rows) for j in range(self.n_cols)]

    def solve_torch(self, weights: torch.Tensor) -> torch.Tensor:
        """Assignment masks for ``(..., n_rows · n_cols)`` scores; same shape, device and dtype."""
        if weights.shape[-1:] != (self.n_vars,):
            raise InvalidWeightsError(
                f"{self!r} expects weights of shape (..., {self.n_vars}), got {tuple(weights.shape)}"
            )
        lead = weights.shape[:-1]
        w = weights.detach().reshape(-1, self.n_vars)  # θ   [N, R·C]
        if not w.is_floating_point() and w.dtype != torch.bool and torch.iinfo(w.dtype).bits > 32:
            _refuse_inexact_integers(w)
        if w.device.type == "cpu":  # dtype conversions in NumPy (torch's wake its intra-op threads)
            states = _from_numpy(self._solve_host(_to_numpy(w)), weights.dtype)
        elif self._kernel_available(w.device):
            states = self._solve_device(w)
        else:  # one host copy of the batch (synchronises), SciPy, one copy back; bad rows → NaN
            states = torch.from_numpy(self._solve_host(_to_numpy(w.cpu()), nan_rows=True))
        return states.to(device=weights.device, dtype=weights.dtype).reshape(*lead, self.n_vars)

    # ---- CPU: SciPy, row by row (threads for large batches) ----------------------------------------

    def _solve_host(self, w: np.ndarray, *, nan_rows: bool = False) -> np.ndarray:
        """``(N, R·C)`` float64 scores → ``(N, R·C)`` states. Bad rows raise typed errors naming them
        (before any solve), or with ``nan_rows`` come back all-NaN."""
        n, r, c = w.shape[0], self.n_rows, self.n_cols
        simple = n == 0 or bool(np.abs(w).max() <= 2.0**_SAFE_EXP)  # no NaN, no inf, nothing to scale
        bad = np.zeros(n, dtype=bool)
        if not simple:
            bad = np.isnan(w).any(axis=1) | (w == np.inf).any(axis=1)  # [N]
            if bad.any() and not nan_rows:
                raise InvalidWeightsError(
                    "weights contain NaN or +inf (-inf marks a forbidden pair)",
                    rows=np.flatnonzero(bad).tolist(),
                )
            finite = np.isfinite(w)
            w = np.where(finite, _scale_rows(np.where(finite, w, 0.0)), w)  # exact powers of two
        tall = r > c
        wide = w.reshape(n, r, c).transpose(0, 2, 1) if tall else w.reshape(n, r, c)  # SciPy's orientation
        k = min(r, c)
        partner = np.zeros((n, k), dtype=np.int64)  # the partner of each node of the smaller side   [N, k]
        failed = bad.copy()
        rows = np.flatnonzero(~bad)
        threads = min(torch.get_num_threads(), len(rows) // _THREAD_ROWS)
        if threads > 1 and self.n_vars * k >= _THREAD_WORK:
            parts = np.array_split(rows, threads)
            list(self._executor(threads).map(lambda part: _assign(wide, part, partner, failed), parts))
        else:
            _assign(wide, rows, partner, failed)
        infeasible = failed & ~bad
        if infeasible.any() and not nan_rows:
            raise InfeasibleError(
                "no assignment avoids the forbidden (-inf) pairs", rows=np.flatnonzero(infeasible).tolist()
            )
        mine = np.arange(k)
        flat = partner * c + mine if tall else mine * c + partner  # variables i·C + j   [N, k]
        states = np.zeros((n, self.n_vars), dtype=np.float64)
        np.put_along_axis(states, flat, 1.0, axis=1)
        states[failed] = np.nan
        return states

    def _executor(self, threads: int) -> ThreadPoolExecutor:
        """This process's thread pool (rebuilt after a fork or for another thread count)."""
        with self._lock:
            pool = self._pool
            if pool is None or pool[0] != os.getpid() or pool[1] != threads:
                if pool is not None and pool[0] == os.getpid():
                    pool[2].shutdown(wait=False)
                pool = (os.getpid(), threads, ThreadPoolExecutor(threads, thread_name_prefix="TorchMatching"))
                self._pool = pool
            return pool[2]

    # ---- accelerators: the Triton kernel ----------------------------------------------------------

    def _kernel_available(self, device: torch.device) -> bool:
        return (
            device.type == "cuda"
            and max(self.n_rows, self.n_cols) <= _KERNEL_MAX_COLS
            and importlib.util.find_spec("triton") is not None
        )

    def _solve_device(self, w: torch.Tensor) -> torch.Tensor:
        """The batch on its device in one kernel launch, no host synchronisation; bad rows → NaN.

        Prepares SciPy's cost matrix ``−θ`` (transposed when there are more rows than columns), in
        float64.   ``[N, R·C]`` → ``[N, R·C]``
        """
        from . import _lsap_triton

        n, r, c = w.shape[0], self.n_rows, self.n_cols
        x = w.to(torch.float64).reshape(n, r, c)  # θ   [N, R, C]
        bad = torch.isnan(x).flatten(1).any(dim=1) | (x == float("inf")).flatten(1).any(dim=1)  # [N]
        finite = torch.where(torch.isfinite(x), x.abs(), 0.0).flatten(1).amax(dim=1)  # [N]
        shift = (torch.frexp(finite).exponent - _SCALED_EXP).clamp_min(0)  # `_scale_rows`: exact 2^-shift
        x = torch.ldexp(x, -shift[:, None, None].to(torch.float64))
        tall = r > c
        cost = -(x.transpose(1, 2) if tall else x).contiguous()  # SciPy: transpose, then negate
        col4row, status = _lsap_triton.solve(cost, ~bad)  # [N, min(R, C)]
        k = min(r, c)
        mine = torch.arange(k, device=w.device).expand(n, k)  # the smaller side's nodes
        other = col4row.long().clamp_min(0)  # their partners (−1 on skipped rows)
        flat = other * c + mine if tall else mine * c + other  # variables i·C + j   [N, k]
        states = torch.zeros((n, r * c), dtype=torch.float64, device=w.device)
        states.scatter_(1, flat, 1.0)
        return states.masked_fill_((bad | (status != 0))[:, None], float("nan"))

    def __repr__(self) -> str:
        return f"TorchMatching({self.n_rows}×{self.n_cols})"


def _assign(wide: np.ndarray, rows: np.ndarray, partner: np.ndarray, failed: np.ndarray) -> None:
    """SciPy on ``wide[rows]`` (``[N, k, ≥ k]`` scores): writes each row's column per smaller-side node
    into ``partner`` (or flags the row in ``failed``)."""
    from scipy.optimize import linear_sum_assignment

    for r in rows.tolist():
        try:
            partner[r] = linear_sum_assignment(wide[r], True)[1]  # maximize=True; rows come back 0…k−1
        except ValueError:  # "cost matrix is infeasible": no assignment avoids the -inf pairs
            failed[r] = True


def _refuse_inexact_integers(w: torch.Tensor) -> None:
    """Name the rows of ``[N, m]`` integer weights beyond ``±2^50``, which float64 could not assign
    exactly (one host synchronisation on an accelerator)."""
    beyond = ((w > _EXACT_INTEGER) | (w < -_EXACT_INTEGER)).any(dim=1)  # [N]   (no abs: −2^63 has none)
    if bool(beyond.any()):
        raise InvalidWeightsError(
            "integer weights beyond ±2^50 cannot be assigned exactly (the assignment is computed in "
            "float64); divide them by a common factor, or convert them to float64 to accept rounding",
            rows=torch.nonzero(beyond).flatten().tolist(),
        )


def _to_numpy(w: torch.Tensor) -> np.ndarray:
    """A CPU tensor as a float64 array (a view when it is float64 already)."""
    if w.dtype in (torch.float16, torch.float32, torch.float64):
        return w.numpy().astype(np.float64, copy=False)
    return w.to(torch.float64).numpy()


def _from_numpy(states: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
    """float64 states as a tensor of ``dtype``, converted by NumPy where it has the dtype."""
    np_dtype = {torch.float16: np.float16, torch.float32: np.float32}.get(dtype)
    return torch.from_numpy(states.astype(np_dtype) if np_dtype is not None else states)
