"""The cost model of [`SolverPool`][imle_solvers.pool.SolverPool]: in the caller or on the workers, in
which chunks.

Pure functions of frozen records (no processes, futures or clocks), so that every decision can be
tested directly:

* `route` says where a call's rows may go at all, from the runner's declared `RunnerTraits`, the
  pool's `Policy` and two facts about the oracle;
* `decide` compares the predicted in-process time ``rows · t_serial`` with the parallel time and cuts
  the rows into chunks (`chunk_bounds`);
* `after_probe`, `after_caller`, `after_workers` and `next_overhead` fold a measurement into the
  records the next decision reads.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Literal

from ._runner import RunnerTraits

__all__ = [
    "Decision",
    "Policy",
    "PoolPlan",
    "Route",
    "Timings",
    "after_caller",
    "after_probe",
    "after_workers",
    "chunk_bounds",
    "decide",
    "ema",
    "next_overhead",
    "route",
]

PIPE_BYTES_PER_S = 1e9
"""Transfer rate of weights out and states back (process and Dask backends), bytes per second."""

TARGET_CHUNK_S = 2e-2
"""Solving seconds a chunk should carry at least (amortises round trips)."""

CHUNK_OVER_OVERHEAD = 10.0
"""... and at least this many times the runner's (measured) overhead of a call: a Dask task's round trip
costs tens of milliseconds, a pipe's one."""

REMEASURE_EVERY = 32
"""After this many calls on one path, the other is taken once to refresh its timing."""

REMEASURE_FIRST = 3
"""... and early, once: first estimates (small probe blocks, cold caches) are rough."""

REMEASURE_CLOSE = 8
"""... and more often while the two paths are predicted within 1.5× of each other."""

EMA = 0.3
"""Weight of a new measurement in the running estimates."""

Mode = Literal["in-process", "parallel"]


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
    chunks
        Chunks sent to workers; ``0`` when in-process.
    chunksize
        Rows of the largest chunk; ``0`` when in-process.
    workers
        Workers available to the call.
    est_row_s
        Per-row solve time used for the decision (``None`` when not timed).
    est_serial_s
        Predicted in-process time for the rows that were planned.
    est_parallel_s
        Predicted parallel time for the rows that were planned.
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


@dataclasses.dataclass(frozen=True, kw_only=True)
class Policy:
    """The pool's options that the decisions read (taken from the pool at each call)."""

    timeout: float | None = None
    """Seconds allowed per call: rows then go only where a time-out can stop them."""
    fallback: bool | None = None
    """Whether the caller may solve rows: ``None`` lets the runner's isolation and the oracle decide."""
    min_parallel_seconds: float = 0.01
    """Predicted in-process time below which the caller solves the rows."""
    min_speedup: float = 1.1
    """Predicted speed-up the parallel path must reach."""
    chunksize: int | None = None
    """Rows per chunk (``None``: sized from the timings)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Timings:
    """What the pool measured about one oracle, and where its re-measuring streak stands."""

    serial_row_s: float | None = None
    """In-process seconds per row (running average)."""
    worker_row_s: float | None = None
    """Seconds per row inside a worker (running average)."""
    parallel_row_s: float | None = None
    """Wall seconds per row of whole parallel calls (running average)."""
    streak: int = 0
    """Consecutive calls the cost model sent down the same path."""
    last_mode: str = ""
    """The path of the last decision."""
    remeasures: int = 0
    """Times the other path was taken to refresh its timing."""
    serial_probed: bool = False
    """``serial_row_s`` still comes from the probe only."""

    @property
    def timed(self) -> bool:
        """Whether any per-row time is known."""
        return self.serial_row_s is not None or self.worker_row_s is not None


@dataclasses.dataclass(frozen=True, kw_only=True)
class Route:
    """Where a call's rows may go: only the ``"caller"``, only the ``"workers"``, or ``"either"``
    (the cost model chooses), and why."""

    where: Literal["caller", "workers", "either"]
    reason: str = ""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Decision:
    """The cost model's answer for the rows left after the probe.

    ``mode`` is ``"in-process"`` or ``"parallel"``; ``bounds`` the ``(a, b)`` row ranges of the chunks
    (global rows; empty when in-process); ``est_row_s`` the per-row worker time the plan used.
    """

    mode: Mode
    reason: str
    bounds: tuple[tuple[int, int], ...] = ()
    est_row_s: float | None = None
    est_serial_s: float | None = None
    est_parallel_s: float | None = None


def ema(old: float | None, new: float) -> float:
    """Exponential moving average with weight ``EMA`` on the new measurement."""
    return new if old is None else (1 - EMA) * old + EMA * new


def chunk_bounds(
    rows: int,
    row_s: float | None,
    workers: int,
    offset: int = 0,
    chunksize: int | None = None,
    overhead_s: float = 0.0,
) -> list[tuple[int, int]]:
    """Row ranges ``[(a, b), …]`` of the chunks of a call, in the order the workers take them.

    Parameters
    ----------
    rows
        Rows to cut.
    row_s
        Seconds of solving per row (``None``: not timed yet).
    workers
        Workers that solve chunks at the same time (``W``).
    offset
        Global row of the first row.
    chunksize
        Rows per chunk: equal chunks of this size (the last one shorter).
    overhead_s
        The runner's measured fixed cost of a call.

    Returns
    -------
    list of tuple of int
        Contiguous ``(a, b)`` ranges that cover ``offset … offset + rows`` once, in order.

    Notes
    -----
    A *least chunk* carries ``max(TARGET_CHUNK_S, CHUNK_OVER_OVERHEAD · overhead_s)`` seconds of
    solving (20 ms on a pipe, ten round trips for a Dask task): less, and round trips (a wake-up on
    both sides, milliseconds on a busy machine, tens of milliseconds for a Dask task) eat the gain.

    * With ``chunksize``, chunks are of that size.
    * Rows of unknown cost get ``W … 4W`` equal chunks, as many least chunks as they would hold at
      20 ms per row.
    * Rows whose total solving is at most ``W`` least chunks get one chunk per worker: that
      minimises round trips, and splitting further would make chunks too small to pay for theirs.
    * Otherwise the schedule is *guided* (OpenMP's ``schedule(guided)``): each chunk takes about
      ``remaining / 2W`` rows, never less than a least chunk (nor more than ``rows / W``, so every
      worker gets one), the last one what is left. The first chunks are large, so a call makes few
      round trips (about ``2W · (1 + ln(total / 2W least chunks))``), and the chunks that end the call
      are small: the workers take chunks in order as they finish one, so when uneven solve times
      leave one worker idle, it waits at most about one least chunk for the others. Equal chunks
      leave it idle for about half a chunk, and a chunk is ``1/4W`` of the call or more.

    References
    ----------
    Polychronopoulos, C. D. and Kuck, D. J. (1987). Guided self-scheduling: a practical scheduling
    scheme for parallel supercomputers. IEEE Transactions on Computers, C-36(12), 1425-1439.

    OpenMP Architecture Review Board, OpenMP Application Programming Interface, the ``schedule``
    clause of the worksharing-loop construct (``guided``), <https://www.openmp.org/specifications/>.
    """
    if rows <= 0:
        return []
    if chunksize is not None:
        sizes = [chunksize] * math.ceil(rows / chunksize)
    else:
        least = max(TARGET_CHUNK_S, CHUNK_OVER_OVERHEAD * overhead_s)  # seconds of solving a chunk
        total = rows * (row_s if row_s is not None else TARGET_CHUNK_S)
        count = min(rows, max(workers, min(4 * workers, math.ceil(total / least))))
        if row_s is None or count <= workers:  # not timed, or fast rows: equal chunks
            size = math.ceil(rows / count)
            sizes = [size] * math.ceil(rows / size)
        else:  # guided: ≈ remaining / 2W rows each, at least a least chunk, at most rows / W
            least_rows = min(math.ceil(least / row_s), math.ceil(rows / workers))
            sizes, left = [], rows
            while left > 0:
                size = min(left, max(least_rows, math.ceil(left / (2 * workers))))
                sizes.append(size)
                left -= size
    bounds, a = [], 0
    for size in sizes:
        b = min(a + size, rows)
        bounds.append((offset + a, offset + b))
        a = b
    return bounds


def route(
    traits: RunnerTraits,
    policy: Policy,
    *,
    rows: int,
    oracle_name: str,
    device_native: bool,
    in_process_safe: bool,
) -> Route:
    """Where the rows of a call may be solved.

    In the caller only: an empty batch, a device-native oracle (a ``TorchOracle``), a runner that
    solves in the caller anyway. On the workers only: with a ``timeout`` (a solve running in the
    caller cannot be stopped), with ``fallback=False``, and for an oracle that is not
    ``in_process_safe`` on an isolating runner (unless ``fallback=True``). Anywhere else the cost
    model chooses.
    """
    if rows == 0:
        return Route(where="caller", reason="empty batch")
    if device_native:
        return Route(
            where="caller", reason="TorchOracle: solved in the caller (layers keep it on its device)"
        )
    if traits.in_caller:
        return Route(where="caller", reason=f"backend={traits.name!r}")
    if policy.timeout is not None:
        return Route(
            where="workers",
            reason=f"timeout={policy.timeout} s: rows are solved where a time-out can stop them",
        )
    if policy.fallback is not None:
        return Route(where="either") if policy.fallback else Route(where="workers", reason="fallback=False")
    if not traits.isolated or in_process_safe:
        return Route(where="either")
    return Route(
        where="workers",
        reason=(
            f"backend={traits.name!r} keeps {oracle_name} out of the caller "
            "(in_process_safe=False; fallback=True allows it)"
        ),
    )


def decide(
    timings: Timings,
    plan: Route,
    traits: RunnerTraits,
    policy: Policy,
    *,
    rows: int,
    offset: int,
    row_bytes: int,
    workers: int,
    overhead_s: float,
) -> tuple[Decision, Timings]:
    """The decision for the ``rows`` rows (global rows ``offset …``) a call has left after the probe.

    Returns the decision and the timings with the re-measuring streak advanced. The parallel time is
    the measured wall time per row of earlier parallel calls when there are any, else
    ``overhead + transfer + rows · t_worker / min(W, chunks)``; ``t_serial`` is the lower of the
    caller's and the workers' time per row (same code, one thread each: taking the lower one errs
    towards staying in-process). After a long run on one path the other is taken once, to refresh
    its timing (loads and caches change).
    """
    timed = [t for t in (timings.serial_row_s, timings.worker_row_s) if t is not None]
    serial_row = min(timed) if timed else None
    row_s = timings.worker_row_s if timings.worker_row_s is not None else serial_row

    def parallel(reason: str, est_serial: float | None = None, est_parallel: float | None = None) -> Decision:
        return Decision(
            mode="parallel",
            reason=reason,
            bounds=tuple(chunk_bounds(rows, row_s, workers, offset, policy.chunksize, overhead_s)),
            est_row_s=row_s,
            est_serial_s=est_serial,
            est_parallel_s=est_parallel,
        )

    if rows == 0:
        return Decision(mode="in-process", reason="all rows solved while timing", est_row_s=row_s), timings
    if plan.where == "workers":
        return parallel(plan.reason), timings
    if plan.where == "caller":
        return Decision(mode="in-process", reason=plan.reason, est_row_s=row_s), timings
    if row_s is None or serial_row is None:
        return parallel("not timed yet"), timings

    est_serial = rows * serial_row  # predicted in-process seconds
    n_chunks = len(chunk_bounds(rows, row_s, workers, 0, policy.chunksize, overhead_s))
    transfer = 2 * rows * row_bytes / PIPE_BYTES_PER_S if traits.transfers else 0.0
    est_parallel = overhead_s + transfer + rows * row_s / min(workers, n_chunks)
    if timings.parallel_row_s is not None:  # measured beats modelled: whole parallel calls, wall time
        est_parallel = rows * timings.parallel_row_s

    def in_process(reason: str) -> Decision:
        return Decision(
            mode="in-process",
            reason=reason,
            est_row_s=row_s,
            est_serial_s=est_serial,
            est_parallel_s=est_parallel,
        )

    if workers < 2 and traits.local:
        return in_process("one worker cannot beat the caller"), timings
    if est_serial < policy.min_parallel_seconds:
        return in_process(
            f"predicted {est_serial * 1e3:.2f} ms < "
            f"min_parallel_seconds={policy.min_parallel_seconds * 1e3:.1f} ms"
        ), timings
    speedup = est_serial / est_parallel
    mode: Mode
    if speedup >= policy.min_speedup:
        mode, reason = "parallel", f"predicted speed-up {speedup:.2f}×"
    else:
        mode, reason = "in-process", f"predicted speed-up {speedup:.2f}× < min_speedup={policy.min_speedup}"
    streak = timings.streak + 1 if mode == timings.last_mode else 1
    timings = dataclasses.replace(timings, streak=streak, last_mode=mode)
    close = 1 / 1.5 < speedup < 1.5  # a wrong choice costs little but should not last
    every = REMEASURE_FIRST if timings.remeasures == 0 else REMEASURE_CLOSE if close else REMEASURE_EVERY
    if streak >= every:
        timings = dataclasses.replace(timings, streak=0, remeasures=timings.remeasures + 1)
        mode = "in-process" if mode == "parallel" else "parallel"
        reason = f"re-measuring the {mode} path ({reason})"
    if mode == "parallel":
        return parallel(reason, est_serial, est_parallel), timings
    return in_process(reason), timings


def after_probe(timings: Timings, row_s: float) -> Timings:
    """The probe's per-row time becomes the first in-process estimate."""
    return dataclasses.replace(timings, serial_row_s=row_s, serial_probed=True)


def after_caller(timings: Timings, row_s: float) -> Timings:
    """A whole in-process call's per-row time: it replaces the probe's estimate (a better measurement
    than the probe's small blocks), later ones are averaged in."""
    serial = row_s if timings.serial_probed else ema(timings.serial_row_s, row_s)
    return dataclasses.replace(timings, serial_row_s=serial, serial_probed=False)


def after_workers(timings: Timings, *, rows: int, solve_s: float, wall_s: float, first_use: bool) -> Timings:
    """A parallel call of ``rows`` rows: the workers' per-row solve time, and (unless the call shipped
    the oracle, a one-off cost) its wall time per row."""
    worker = ema(timings.worker_row_s, solve_s / max(rows, 1))
    serial = timings.serial_row_s if timings.serial_row_s is not None else worker
    parallel = timings.parallel_row_s if first_use else ema(timings.parallel_row_s, wall_s / max(rows, 1))
    return dataclasses.replace(timings, worker_row_s=worker, serial_row_s=serial, parallel_row_s=parallel)


def next_overhead(overhead_s: float, *, wall_s: float, slowest_s: float, first_use: bool) -> float:
    """The pool's fixed cost per call: wall time not explained by the busiest worker's solving (a call
    that shipped the oracle is not representative and leaves it as it was)."""
    return overhead_s if first_use else ema(overhead_s, max(0.0, wall_s - slowest_s))
