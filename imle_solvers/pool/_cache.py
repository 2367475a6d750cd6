"""Solution caching: answer some MAP calls from a pool of states already found (Mulamba et al., 2021)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .._checks import in_range, positive_int
from ..errors import ImleSolversError, InvalidWeightsError
from ..oracle import MapOracle, check_oracle

if TYPE_CHECKING:
    from ..oracle import BatchSolver

__all__ = ["SolutionCache"]


class SolutionCache(MapOracle):
    """A [`MapOracle`][imle_solvers.MapOracle] wrapper that answers a fraction ``p`` of rows from a cache.

    Solution caching as in Mulamba, Mandi, Diligenti, Lombardi, Bucarey & Guns, "Contrastive losses and
    solution caching for predict-and-optimize" (IJCAI 2021): every state the solver returns is feasible,
    so it is kept; with probability ``p`` a row is answered by the best cached state instead of a solver
    call, ``argmax_{z ∈ cache} ⟨θ, z⟩`` (``argmin ⟨c, z⟩`` for a ``"min"`` oracle, i.e. the same in
    θ-space) — one ``(B, m) × (m, K)`` product for all cached rows. The answer is exact over the cache,
    an approximation of ``MAP(θ)`` over ``C``.

    Parameters
    ----------
    oracle
        The inner MAP oracle; ``sense``, ``n_vars`` and ``expected_nonzeros`` are taken from it.
    p
        Probability that a row is answered from the cache (rows always go to the solver while the
        cache is empty). ``0``: always solve (the cache still fills); ``1``: solve only until warm.
    max_size
        Most states kept; the oldest is replaced first. Lookup costs ``O(B · K · m)``.
    seed
        Seed of the generator that draws which rows use the cache.
    pool
        Optional [`SolverPool`][imle_solvers.pool.SolverPool] for the rows that reach the solver. A pool that
        is
        handed a ``SolutionCache`` (``pool.solve_batch(cache, w)``, e.g. as ``IMLE(cache, pool=pool)``)
        uses itself for those rows; the cache always stays in the caller's process.

    Attributes
    ----------
    oracle
        The inner oracle. Assigning another one empties the cache (its states may not be feasible,
        or not optimal, for the new one) and takes over its ``sense``, ``n_vars``,
        ``expected_nonzeros`` and ``in_process_safe``.
    hits, misses
        Rows answered from the cache and rows sent to the solver.

    References
    ----------
    Mulamba, Mandi, Diligenti, Lombardi, Bucarey & Guns, "Contrastive Losses and Solution Caching for
    Predict-and-Optimize", IJCAI 2021, <https://arxiv.org/abs/2011.05354>.
    """

    def __init__(
        self,
        oracle: MapOracle,
        p: float = 0.5,
        max_size: int = 2048,
        seed: int | None = None,
        pool: BatchSolver | None = None,
    ) -> None:
        check_oracle(oracle)
        in_range("p", p, 0, 1, closed="[]")
        positive_int("max_size", max_size)
        self.p = float(p)
        self.max_size = int(max_size)
        self.pool = pool
        self._rng = np.random.default_rng(seed)
        self.oracle = oracle  # sets sense, n_vars, … and an empty cache
        self.hits = 0
        self.misses = 0

    @property
    def oracle(self) -> MapOracle:
        """The inner oracle (assigning one empties the cache)."""
        return self._oracle

    @oracle.setter
    def oracle(self, oracle: MapOracle) -> None:
        check_oracle(oracle)
        self._oracle = oracle
        self.sense = oracle.sense
        self.n_vars = oracle.n_vars
        self.expected_nonzeros = oracle.expected_nonzeros
        self.in_process_safe = oracle.in_process_safe  # the lookups are numpy: the inner oracle decides
        self.clear()

    def clear(self) -> None:
        """Forget every cached state (``hits`` and ``misses`` keep counting)."""
        self._states = np.empty((0, self.n_vars), dtype=np.float64)  # cached states   [K, m]
        self._keys: dict[bytes, int] = {}  # state bytes -> slot
        self._next = 0  # slot replaced next once full (oldest first)

    @property
    def size(self) -> int:
        """Number of distinct states in the cache."""
        return self._states.shape[0]

    @property
    def states(self) -> np.ndarray:
        """A copy of the cached states, ``(K, m)``."""
        return self._states.copy()

    def add(self, states: np.ndarray) -> int:
        """Insert ``(B, m)`` feasible states (duplicates skipped); returns how many were new."""
        added = 0
        for z in np.asarray(states, dtype=np.float64).reshape(-1, self.n_vars):
            z = z + 0.0  # −0.0 → 0.0, so equal states have equal bytes
            key = z.tobytes()
            if key in self._keys:
                continue
            if self.size < self.max_size:
                self._keys[key] = self.size
                self._states = np.vstack([self._states, z[None]])
            else:
                slot = self._next
                del self._keys[self._states[slot].tobytes()]
                self._states[slot] = z
                self._keys[key] = slot
                self._next = (slot + 1) % self.max_size
            added += 1
        return added

    def lookup(self, weights: np.ndarray) -> np.ndarray:
        """Best cached state for each row of ``(B, m)`` weights in the oracle's sense."""
        if self.size == 0:
            raise ImleSolversError("the solution cache is empty")
        scores = np.asarray(weights, dtype=np.float64) @ self._states.T  # ⟨w_b, z_k⟩   [B, K]
        best = scores.argmax(1) if self.sense == "max" else scores.argmin(1)  # best in θ-space
        return self._states[best]  # [B, m]

    def solve(self, weights: np.ndarray) -> np.ndarray:
        """One ``(m,)`` instance (through `solve_batch`)."""
        return self.solve_batch(np.asarray(weights)[None])[0]

    def solve_batch(self, weights: np.ndarray, pool: BatchSolver | None = None) -> np.ndarray:
        """Answer each row from the cache with probability ``p``, the rest with the inner oracle.

        Parameters
        ----------
        weights
            ``(B, m)`` weights in the oracle's sense (validated as a whole first).
        pool
            Pool for the solver rows (default: the one given at construction, else none).

        Returns
        -------
        numpy.ndarray
            ``(B, m)`` states; errors from the solver name rows of *this* batch.
        """
        w = self.validate(weights)
        if w.ndim != 2:
            raise InvalidWeightsError(f"solve_batch takes (B, m) weights, got shape {w.shape}")
        n = w.shape[0]
        cached = np.asarray(self._rng.random(n) < self.p) if self.size else np.zeros(n, dtype=bool)
        out = np.empty(w.shape, dtype=np.float64)  # [B, m]
        if cached.any():
            out[cached] = self.lookup(w[cached])
            self.hits += int(cached.sum())
        rows = np.flatnonzero(~cached)
        if rows.size:
            solver = pool if pool is not None else self.pool
            try:
                z = (
                    solver.solve_batch(self.oracle, w[rows])
                    if solver is not None
                    else self.oracle.solve_batch(w[rows])
                )
            except Exception as exc:
                local = getattr(exc, "rows", None)
                if local:  # rows of the sub-batch → rows of this batch
                    mapped = [int(rows[r]) for r in local]
                    if isinstance(exc, ImleSolversError):
                        exc.with_rows(mapped)
                    else:
                        exc.rows = tuple(mapped)  # type: ignore[attr-defined]
                raise
            out[rows] = z
            self.misses += rows.size
            self.add(z)
        return out

    def __repr__(self) -> str:
        return f"SolutionCache({self.oracle!r}, p={self.p}, size={self.size}/{self.max_size})"
