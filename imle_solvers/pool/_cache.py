"""Solution caching: answer some MAP calls from a pool of states already found (Mulamba et al., 2021)."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

import numpy as np

from .._checks import in_range, positive_int
from ..errors import ImleSolversError, InvalidSolutionError, InvalidWeightsError
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
        Most states kept; once full, the oldest state is replaced first (first in, first out: a
        state found again is not refreshed). Lookup costs ``O(B · K · m)``.
    seed
        Seed of the generator that draws which rows use the cache.
    pool
        Optional pool ([`SolverPool`][imle_solvers.pool.SolverPool]) for the rows the cache does not
        answer: ``SolutionCache(oracle, pool=pool)`` keeps the cache in the caller and sends only those
        rows to the pool's workers. A cache with a pool cannot itself be sent to worker processes.

    Attributes
    ----------
    oracle
        The inner oracle. Assigning another one empties the cache (its states may not be feasible,
        or not optimal, for the new one) and takes over its ``sense``, ``n_vars``,
        ``expected_nonzeros`` and ``in_process_safe``.
    hits
        Rows answered from the cache.
    misses
        Rows sent to the solver.
    version
        A counter that changes whenever the stored states change (`add` of a new state, `clear`), so
        that a copy of `states` can be kept until it is stale.

    Notes
    -----
    The cache is an oracle like any other: a pool handed a ``SolutionCache`` solves it as it solves
    its inner oracle (on its threads it shares one cache, which is thread-safe; on worker processes
    or Dask workers each worker keeps its own copy, and ``hits`` / ``misses`` count there). States
    with NaN or inf entries are never stored nor served: a row whose cached scores are not finite
    (weights near the float range) goes to the solver, and a solver state that is not finite raises
    [`InvalidSolutionError`][imle_solvers.errors.InvalidSolutionError].

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
        self.p = in_range("p", p, 0, 1, closed="[]")
        """Probability that a row is answered from the cache."""
        self.max_size = positive_int("max_size", max_size)
        """Most states kept."""
        self.pool = pool
        """Where the rows the cache does not answer are solved (``None``: the inner oracle, here)."""
        self._rng = np.random.default_rng(seed)
        self._lock = threading.RLock()  # pool threads may share one cache
        self.oracle = oracle  # sets sense, n_vars, … and an empty cache
        self.hits = 0
        self.misses = 0

    def __getstate__(self) -> dict[str, Any]:
        if self.pool is not None:
            raise TypeError(
                "a SolutionCache that sends its misses to a pool stays in the caller: give the layer "
                "the cache without pool= (IMLE(SolutionCache(oracle, pool=pool))), or drop the cache's "
                "pool to let each worker keep a cache of its own"
            )
        state = self.__dict__.copy()
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.RLock()

    @property
    def oracle(self) -> MapOracle:
        """The inner oracle (assigning one empties the cache)."""
        return self._oracle

    @oracle.setter
    def oracle(self, oracle: MapOracle) -> None:
        check_oracle(oracle)
        with self._lock:
            self._oracle = oracle
            self.sense = oracle.sense
            self.n_vars = oracle.n_vars
            self.expected_nonzeros = oracle.expected_nonzeros
            self.in_process_safe = oracle.in_process_safe  # the lookups are numpy: the inner oracle decides
            self.clear()

    def clear(self) -> None:
        """Forget every cached state (``hits`` and ``misses`` keep counting)."""
        with self._lock:
            self._states = np.empty((0, self.n_vars), dtype=np.float64)  # cached states   [K, m]
            self._keys: dict[bytes, int] = {}  # state bytes -> slot
            self._next = 0  # slot replaced next once full (oldest first)
            self.version = getattr(self, "version", -1) + 1

    @property
    def size(self) -> int:
        """Number of distinct states in the cache."""
        return self._states.shape[0]

    @property
    def states(self) -> np.ndarray:
        """A copy of the cached states, ``(K, m)``, in slot order."""
        with self._lock:
            return self._states.copy()

    def add(self, states: np.ndarray) -> int:
        """Insert ``(B, m)`` feasible states (duplicates skipped); returns how many were new.

        Raises
        ------
        InvalidSolutionError
            A state has NaN or inf entries (the rows are named; nothing is added), or the wrong length.
        """
        rows = np.asarray(states, dtype=np.float64)
        if rows.ndim == 0 or rows.shape[-1] != self.n_vars:
            raise InvalidSolutionError(
                f"states must have last dimension n_vars={self.n_vars}, got shape {rows.shape}"
            )
        rows = rows.reshape(-1, self.n_vars)  # [B, m]
        bad = ~np.isfinite(rows).all(axis=1)
        if bad.any():
            raise InvalidSolutionError(
                "a state with NaN or inf entries cannot be cached", rows=np.flatnonzero(bad).tolist()
            )
        added = 0
        with self._lock:
            fresh: list[np.ndarray] = []  # new states while the cache is not full, appended at once
            for z in rows:
                z = z + 0.0  # −0.0 → 0.0, so equal states have equal bytes
                key = z.tobytes()
                if key in self._keys:
                    continue
                if self.size + len(fresh) < self.max_size:
                    self._keys[key] = self.size + len(fresh)
                    fresh.append(z)
                else:
                    if fresh:  # the cache fills up in this call: store what came before
                        self._states = np.vstack([self._states, *[f[None] for f in fresh]])
                        fresh = []
                    slot = self._next
                    del self._keys[self._states[slot].tobytes()]
                    self._states[slot] = z
                    self._keys[key] = slot
                    self._next = (slot + 1) % self.max_size
                added += 1
            if fresh:
                self._states = np.vstack([self._states, np.stack(fresh)])  # one copy per call   [K, m]
            if added:
                self.version += 1
        return added

    def _best(self, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Best cached state per row of validated ``(B, m)`` weights, and which rows have finite scores."""
        with self._lock:
            cached = self._states
        with np.errstate(over="ignore", invalid="ignore"):
            scores = weights @ cached.T  # ⟨w_b, z_k⟩   [B, K]
        finite = np.isfinite(scores).all(axis=1)  # overflow near the float range: no trustworthy answer
        best = scores.argmax(1) if self.sense == "max" else scores.argmin(1)  # best in θ-space   [B]
        return cached[best], finite

    def lookup(self, weights: np.ndarray) -> np.ndarray:
        """Best cached state for each row of ``(B, m)`` weights in the oracle's sense.

        Raises
        ------
        InvalidWeightsError
            Weights with NaN or inf entries, or of the wrong shape (rows named).
        ImleSolversError
            The cache is empty, or a row's scores overflow (``|weights|`` near the float range).
        """
        w = self.validate(weights)
        if w.ndim != 2:
            raise InvalidWeightsError(f"lookup takes (B, m) weights, got shape {w.shape}")
        if self.size == 0:
            raise ImleSolversError("the solution cache is empty")
        states, finite = self._best(w)
        if not finite.all():
            raise ImleSolversError(
                "the cached scores ⟨w, z⟩ overflow for these rows: no cached state is the best one",
                rows=np.flatnonzero(~finite).tolist(),
            )
        return states

    def solve(self, weights: np.ndarray) -> np.ndarray:
        """One ``(m,)`` instance (through `solve_batch`)."""
        return self.solve_batch(np.asarray(weights)[None])[0]

    def solve_batch(self, weights: np.ndarray) -> np.ndarray:
        """Answer each row from the cache with probability ``p``, the rest with the inner oracle (through
        the cache's pool, if it has one).

        Parameters
        ----------
        weights
            ``(B, m)`` weights in the oracle's sense (validated as a whole first).

        Returns
        -------
        numpy.ndarray
            ``(B, m)`` states; errors from the solver name rows of *this* batch.

        Raises
        ------
        InvalidSolutionError
            The inner oracle returned a state with NaN or inf entries (nothing of the batch is cached).
        """
        w = self.validate(weights)
        if w.ndim != 2:
            raise InvalidWeightsError(f"solve_batch takes (B, m) weights, got shape {w.shape}")
        n = w.shape[0]
        out = np.empty(w.shape, dtype=np.float64)  # [B, m]
        with self._lock:
            draw = self._rng.random(n) < self.p if self.size else np.zeros(n, dtype=bool)  # [B]
        cached = np.flatnonzero(draw)
        if cached.size:
            states, finite = self._best(w[cached])
            out[cached[finite]] = states[finite]
            cached = cached[finite]  # rows whose scores overflow go to the solver
        solved = np.ones(n, dtype=bool)
        solved[cached] = False
        rows = np.flatnonzero(solved)
        if rows.size:
            z = self._solve_misses(w, rows)
            out[rows] = z
            self.add(z)
        with self._lock:
            self.hits += int(cached.size)
            self.misses += int(rows.size)
        return out

    def _solve_misses(self, w: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """The inner oracle's states for ``w[rows]`` (through the pool, if any); errors name rows of ``w``."""
        try:
            z = (
                self.pool.solve_batch(self.oracle, w[rows])
                if self.pool is not None
                else self.oracle.solve_batch(w[rows])
            )
            z = np.asarray(z, dtype=np.float64)
            bad = ~np.isfinite(z).reshape(len(rows), -1).all(axis=1)
            if bad.any():
                raise InvalidSolutionError(
                    f"{type(self.oracle).__name__} returned a state with NaN or inf entries",
                    rows=np.flatnonzero(bad).tolist(),
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
        return z

    def __repr__(self) -> str:
        return f"SolutionCache({self.oracle!r}, p={self.p}, size={self.size}/{self.max_size})"
