"""The cost model of [`SolverPool`][imle_solvers.pool.SolverPool]: in the caller or on the workers, in
which chunks.

Pure functions of measured timings (no processes, no clocks), so that every decision can be tested
directly: `decide` compares the predicted in-process time ``rows · t_serial`` with the parallel time,
`chunk_bounds` cuts the rows into chunks.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

__all__ = ["Decision", "Entry", "PoolPlan", "choose", "chunk_bounds", "decide", "ema"]

# A-priori fixed cost of one parallel call (dispatch, wake-up, gather), refined by measurement.
DEFAULT_OVERHEAD_S = {"process": 1.5e-3, "thread": 2e-4, "dask": 2e-2}
PIPE_BYTES_PER_S = 1e9  # process/dask: weights out + states back, per byte
TARGET_CHUNK_S = 2e-2  # a chunk should carry at least this much solving (amortises round trips)
REMEASURE_EVERY = 32  # after this many calls on one path, take the other once to refresh its timing
REMEASURE_FIRST = 3  # ... and early, once: first estimates (small probe blocks, cold caches) are rough
REMEASURE_CLOSE = 8  # ... and more often while the two paths are within 1.5× of each other
EMA = 0.3  # weight of a new measurement in the running estimates


@dataclasses.dataclass(frozen=True, kw_only=True)
class PoolPlan:
    """How the last [`SolverPool.solve_batch`][imle_solvers.pool.SolverPool.solve_batch] call was carried
    out, and why.

    Attributes
    ----------
    backend
        The pool's backend.
    mode
        ``"in-process"`` (the caller solved every row) or ``"parallel"``.
    rows
        Rows in the call.
    probe_rows
        Rows solved in the caller to time a new oracle (part of the answer, not extra work).
    chunks, chunksize
        Chunks sent to workers and their (largest) size; ``0`` when in-process.
    workers
        Workers available to the call.
    est_row_s
        Per-row solve time used for the decision (``None`` when not timed).
    est_serial_s, est_parallel_s
        Predicted in-process and parallel times for the rows that were planned.
    reason
        Human-readable reason for the decision.
    wall_s
        Time the call took.

    References
    ----------
    Python documentation, ``multiprocessing.pool.Pool.map`` and its ``chunksize`` (rows are sent to workers in
    chunks in the same way),
    <https://docs.python.org/3/library/multiprocessing.html#multiprocessing.pool.Pool.map>.
    """

    backend: str
    mode: str
    rows: int
    probe_rows: int = 0
    chunks: int = 0
    chunksize: int = 0
    workers: int
    est_row_s: float | None = None
    est_serial_s: float | None = None
    est_parallel_s: float | None = None
    reason: str
    wall_s: float


@dataclasses.dataclass(eq=False)
class Entry:
    """What a pool knows about one oracle: its token, pickled form, Dask future and timings."""

    token: int
    ref: Callable[[], Any]
    name: str
    blob: bytes | None = None
    dask_future: Any = None
    serial_row_s: float | None = None  # in-process seconds per row (EMA)
    worker_row_s: float | None = None  # seconds per row inside a worker (EMA)
    parallel_row_s: float | None = None  # wall seconds per row of whole parallel calls (EMA)
    streak: int = 0  # consecutive calls the cost model sent down the same path
    last_mode: str = ""
    remeasures: int = 0  # times the other path was taken to refresh its timing
    serial_probed: bool = False  # serial_row_s still comes from the probe only


@dataclasses.dataclass(frozen=True, kw_only=True)
class Decision:
    """The cost model's answer: ``mode`` (``"in-process"`` or ``"parallel"``), why, and its predictions."""

    mode: str
    reason: str
    est_serial_s: float | None = None
    est_parallel_s: float | None = None


def ema(old: float | None, new: float) -> float:
    """Exponential moving average with weight ``EMA`` on the new measurement."""
    return new if old is None else (1 - EMA) * old + EMA * new


def chunk_bounds(
    rows: int, row_s: float | None, workers: int, offset: int = 0, chunksize: int | None = None
) -> list[tuple[int, int]]:
    """Row ranges ``[(a, b), …]``: ``chunksize`` if given, else ``W … 4W`` chunks of ≥ ~20 ms of solving.

    One chunk per worker minimises round trips (each costs a wake-up on both sides, milliseconds on
    a busy machine); up to four per worker balance solves of uneven length.
    """
    if chunksize is not None:
        size = chunksize
    else:
        total = rows * (row_s if row_s is not None else TARGET_CHUNK_S)
        count = min(rows, max(workers, min(4 * workers, math.ceil(total / TARGET_CHUNK_S))))
        size = math.ceil(rows / max(count, 1))
    return [(offset + a, offset + min(a + size, rows)) for a in range(0, rows, size)]


def decide(
    entry: Entry,
    *,
    backend: str,
    rows: int,
    row_bytes: int,
    serial_row: float,
    row_s: float,
    workers: int,
    overhead_s: float,
    min_parallel_seconds: float,
    min_speedup: float,
    chunksize: int | None,
) -> Decision:
    """In-process ``rows · t_serial`` against the parallel time; updates ``entry``'s re-measuring streak.

    The parallel time is the measured wall time per row of earlier parallel calls when there are
    any, else ``overhead + transfer + rows · t_worker / W``. After a long run on one path the other
    is taken once, to refresh its timing (loads and caches change).
    """
    est_serial = rows * serial_row  # predicted in-process seconds
    n_chunks = len(chunk_bounds(rows, row_s, workers, 0, chunksize))
    transfer = 0.0 if backend == "thread" else 2 * rows * row_bytes / PIPE_BYTES_PER_S
    est_parallel = overhead_s + transfer + rows * row_s / min(workers, n_chunks)
    if entry.parallel_row_s is not None:  # measured beats modelled: whole parallel calls, wall time
        est_parallel = rows * entry.parallel_row_s
    if workers < 2 and backend != "dask":
        return Decision(
            mode="in-process",
            reason="one worker cannot beat the caller",
            est_serial_s=est_serial,
            est_parallel_s=est_parallel,
        )
    if est_serial < min_parallel_seconds:
        reason = (
            f"predicted {est_serial * 1e3:.2f} ms < min_parallel_seconds={min_parallel_seconds * 1e3:.1f} ms"
        )
        return Decision(
            mode="in-process", reason=reason, est_serial_s=est_serial, est_parallel_s=est_parallel
        )
    speedup = est_serial / est_parallel
    if speedup >= min_speedup:
        mode, reason = "parallel", f"predicted speed-up {speedup:.2f}×"
    else:
        mode, reason = "in-process", f"predicted speed-up {speedup:.2f}× < min_speedup={min_speedup}"
    entry.streak = entry.streak + 1 if mode == entry.last_mode else 1
    entry.last_mode = mode
    close = 1 / 1.5 < speedup < 1.5  # a wrong choice costs little but should not last
    every = REMEASURE_FIRST if entry.remeasures == 0 else REMEASURE_CLOSE if close else REMEASURE_EVERY
    if entry.streak >= every:
        entry.streak = 0
        entry.remeasures += 1
        mode = "in-process" if mode == "parallel" else "parallel"
        reason = f"re-measuring the {mode} path ({reason})"
    return Decision(mode=mode, reason=reason, est_serial_s=est_serial, est_parallel_s=est_parallel)


def choose(
    entry: Entry,
    *,
    rows: int,
    in_caller: bool,
    why_not: str,
    backend: str,
    row_bytes: int,
    workers: int,
    overhead_s: float,
    min_parallel_seconds: float,
    min_speedup: float,
    chunksize: int | None,
) -> tuple[Decision, float | None]:
    """The decision for the ``rows`` rows a call has left after the probe, and the per-row worker time
    it used (``None`` when not timed).

    ``in_caller``: whether the caller may solve this oracle at all (``why_not`` when not); if it may,
    `decide` compares the two paths.
    """
    timed = [t for t in (entry.serial_row_s, entry.worker_row_s) if t is not None]
    # in-process per-row time: the lower of the caller's and the workers' (same code, one thread
    # each); taking the lower one errs towards staying in-process
    serial_row = min(timed) if timed else None
    row_s = entry.worker_row_s if entry.worker_row_s is not None else serial_row
    if rows == 0:
        return Decision(mode="in-process", reason="all rows solved while timing"), row_s
    if not in_caller:
        return Decision(mode="parallel", reason=why_not), row_s
    if row_s is None or serial_row is None:  # pragma: no cover - the probe timed it
        return Decision(mode="parallel", reason="not timed yet"), row_s
    decision = decide(
        entry,
        backend=backend,
        rows=rows,
        row_bytes=row_bytes,
        serial_row=serial_row,
        row_s=row_s,
        workers=workers,
        overhead_s=overhead_s,
        min_parallel_seconds=min_parallel_seconds,
        min_speedup=min_speedup,
        chunksize=chunksize,
    )
    return decision, row_s
