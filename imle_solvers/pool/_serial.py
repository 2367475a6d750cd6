"""Solving in the caller: whether [`SolverPool`][imle_solvers.pool.SolverPool] may, how it times a new
oracle there, and the in-process call itself.

The caller is where the ``"serial"`` backend solves every row, and where the other backends solve a
batch when the cost model (`_plan.py`) predicts no gain from the workers. A solve running in the
caller cannot be stopped and takes the caller down if the solver crashes: `may_solve_in_caller` says
when that is allowed.
"""

from __future__ import annotations

import time

import numpy as np

from ..oracle import MapOracle
from ._plan import Entry
from ._runner import Deadline
from ._worker import ChunkError, raise_failure, solve_chunk

__all__ = ["may_solve_in_caller", "probe", "solve_in_caller"]


def may_solve_in_caller(
    oracle: MapOracle, *, backend: str, timeout: float | None, fallback: bool | None
) -> tuple[bool, str]:
    """Whether the cost model may pick the caller for this oracle; if not, why.

    Never with a ``timeout`` (a solve in the caller cannot be stopped); else as ``fallback`` says;
    by default on the thread backend (no isolation to lose) and for ``in_process_safe`` oracles.
    """
    if timeout is not None:  # a solve running in the caller cannot be stopped
        return False, f"timeout={timeout} s: rows are solved where a time-out can stop them"
    if fallback is not None:
        return fallback, "fallback=False"
    if backend == "thread" or getattr(oracle, "in_process_safe", False):
        return True, ""
    return False, (
        f"backend={backend!r} keeps {type(oracle).__name__} out of the caller "
        "(in_process_safe=False; fallback=True allows it)"
    )


def solve_in_caller(oracle: MapOracle, weights: np.ndarray, start: int, deadline: Deadline) -> np.ndarray:
    """``(n, m)`` states of ``weights`` (global rows ``start …``), solved here; failures re-raised as
    the pool raises a worker's."""
    try:
        out, _ = solve_chunk(oracle, weights, start, "in-process", deadline)
    except ChunkError as err:
        failed = err
    else:
        return out
    raise_failure(failed.failure, live=failed.original)  # outside `except`: no chained ChunkError


def probe(
    oracle: MapOracle, weights: np.ndarray, entry: Entry, parts: list[np.ndarray], deadline: Deadline
) -> int:
    """Solve leading rows in the caller to time a new oracle; returns how many were solved.

    Blocks of 2, 4, 8, … rows go through one ``solve_batch``-like call each (an oracle that batches
    internally is timed as it will run), until ~2 ms were spent or a quarter of the batch is done;
    the best block's time per row is the estimate (the first block pays for cold caches). The states
    are appended to ``parts`` (they are part of the answer, not extra work).
    """
    n = weights.shape[0]
    done, spent, size, rate = 0, 0.0, 2, float("inf")
    while done < n and (done == 0 or (spent < 2e-3 and done < n // 4)):
        k = min(size, n - done)
        t1 = time.perf_counter()
        parts.append(solve_in_caller(oracle, weights[done : done + k], done, deadline))
        dt = time.perf_counter() - t1
        spent, done, size, rate = spent + dt, done + k, size * 2, min(rate, dt / k)  # first: coldest
    entry.serial_row_s = rate
    entry.serial_probed = True
    return done
