"""Chunk solving: how every backend (caller, thread, process, Dask) solves a range of rows.

One function, so that a failing row is reported the same way everywhere: the *global* batch row, the
exception and the traceback text of the place it was raised (`_failure.py`). Light imports only:
worker processes import this module (solver imports come with the oracle when it is unpickled).
"""

from __future__ import annotations

import time

import numpy as np

from ..errors import ImleSolversError, SolverTimeoutError
from ..oracle import MapOracle
from ._failure import ChunkError, failure_of
from ._runner import Deadline

__all__ = ["solve_chunk"]


def _uses_default_batch(oracle: MapOracle) -> bool:
    """True when ``oracle.solve_batch`` is the base-class loop (then rows are solved one by one here)."""
    return getattr(type(oracle), "solve_batch", None) is MapOracle.solve_batch


def solve_chunk(
    oracle: MapOracle,
    weights: np.ndarray,
    start: int,
    where: str = "in-process",
    deadline: Deadline | None = None,
) -> tuple[np.ndarray, float]:
    """Solve already-validated rows ``start … start + n − 1`` of a batch.

    Parameters
    ----------
    oracle
        The oracle (its ``solve`` is looped unless it overrides ``solve_batch``).
    weights
        ``(n, m)`` float64 rows in the oracle's sense.
    start
        Global index of the first row (used in errors).
    where
        Where this runs, for error messages.
    deadline
        The call's time limit, after which no new row is started (a soft limit: checked
        between rows; [`SolverTimeoutError`][imle_solvers.errors.SolverTimeoutError] names the unstarted
        rows).

    Returns
    -------
    (states, seconds)
        ``(n, m)`` float64 states and the time spent solving.

    Raises
    ------
    ChunkError
        Wrapping whatever the oracle raised, with the global row.
    """
    n = weights.shape[0]
    t0 = time.perf_counter()
    if _uses_default_batch(oracle):
        out = np.empty(weights.shape, dtype=np.float64)  # z_i = MAP(w_i)   [n, m]
        for i in range(n):
            if deadline is not None and deadline.expired():
                exc = SolverTimeoutError(
                    f"pool call exceeded {deadline.describe()} before these rows were started",
                    rows=range(start + i, start + n),
                )
                raise ChunkError(failure_of(exc, exc.rows, where), exc)
            try:
                out[i] = oracle.solve(weights[i])
            except Exception as exc:
                raise ChunkError(failure_of(exc, (start + i,), where), exc) from None
    else:
        try:
            out = np.asarray(oracle.solve_batch(weights), dtype=np.float64)  # [n, m]
            if out.shape != weights.shape:
                raise ImleSolversError(
                    f"{type(oracle).__name__}.solve_batch returned shape {out.shape} "
                    f"for input {weights.shape}"
                )
        except Exception as exc:
            local = exc.rows if isinstance(exc, ImleSolversError) and exc.rows else range(n)
            raise ChunkError(failure_of(exc, tuple(start + int(r) for r in local), where), exc) from None
    return out, time.perf_counter() - t0
