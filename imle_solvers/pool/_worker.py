"""What runs inside a [`SolverPool`][imle_solvers.pool.SolverPool] worker: chunk solving, failures, the
process loop.

Every backend (in-process, thread, process, Dask) solves rows through `solve_chunk`, so a
failing row is reported the same way everywhere: the *global* batch row, the exception and the
traceback text of the place it was raised.

This module is imported by spawned worker processes; it keeps its imports light (no solver imports:
those come with the oracle when it is unpickled).
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import select
import signal
import threading
import time
import traceback
from typing import Any, NoReturn

import numpy as np

from ..errors import ImleSolversError, SolverTimeoutError
from ..oracle import MapOracle
from ._runner import Deadline

__all__ = [
    "ChunkError",
    "ChunkFailure",
    "RemoteTraceback",
    "dask_solve_chunk",
    "raise_failure",
    "solve_chunk",
    "worker_main",
]

# Environment set for worker processes before they import numpy/torch: one thread per solver.
THREAD_ENV_VARS = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
)


@dataclasses.dataclass
class ChunkFailure:
    """A picklable account of a row that failed (travels from a worker to the caller).

    Attributes
    ----------
    rows
        Global batch rows the failure concerns (one row for a per-row ``solve``).
    exc
        The original exception when it could be pickled, else ``None``.
    exc_type, message
        ``type(exc).__qualname__`` and ``str(exc)`` (kept even when ``exc`` is ``None``).
    traceback
        The formatted traceback where the exception was raised.
    where
        ``"in-process"``, ``"thread"`` or ``"pool worker (pid N)"``.
    """

    rows: tuple[int, ...]
    exc: BaseException | None
    exc_type: str
    message: str
    traceback: str
    where: str


class ChunkError(Exception):
    """Raised by `solve_chunk`; carries a `ChunkFailure` (and the live exception)."""

    def __init__(self, failure: ChunkFailure, exc: BaseException) -> None:
        super().__init__(failure.message)
        self.failure = failure
        self.original = exc


class RemoteTraceback(Exception):
    """The ``__cause__`` of an exception re-raised from a worker: its text is the worker's traceback."""

    def __init__(self, tb: str) -> None:
        super().__init__(tb)
        self.tb = tb

    def __str__(self) -> str:
        return f'\n"""\n{self.tb}"""'


def _uses_default_batch(oracle: MapOracle) -> bool:
    """True when ``oracle.solve_batch`` is the base-class loop (then rows are solved one by one here)."""
    return getattr(type(oracle), "solve_batch", None) is MapOracle.solve_batch


def _failure(exc: BaseException, rows: tuple[int, ...], where: str) -> ChunkFailure:
    return ChunkFailure(
        rows=rows,
        exc=exc,
        exc_type=type(exc).__qualname__,
        message=str(exc),
        traceback="".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
        where=where,
    )


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
                raise ChunkError(_failure(exc, exc.rows, where), exc)
            try:
                out[i] = oracle.solve(weights[i])
            except Exception as exc:
                raise ChunkError(_failure(exc, (start + i,), where), exc) from None
    else:
        try:
            out = np.asarray(oracle.solve_batch(weights), dtype=np.float64)
            if out.shape != weights.shape:
                raise ImleSolversError(
                    f"{type(oracle).__name__}.solve_batch returned shape {out.shape} "
                    f"for input {weights.shape}"
                )
        except Exception as exc:
            local = exc.rows if isinstance(exc, ImleSolversError) and exc.rows else range(n)
            raise ChunkError(_failure(exc, tuple(start + int(r) for r in local), where), exc) from None
    return out, time.perf_counter() - t0


def raise_failure(failure: ChunkFailure, live: BaseException | None = None) -> NoReturn:
    """Re-raise a failed row in the caller: the original type where possible, with ``.rows`` set.

    * library errors ([`ImleSolversError`][imle_solvers.errors.ImleSolversError]) get the global rows through
      ``with_rows``;
    * other exceptions keep their type, get a ``rows`` attribute and a note naming the row;
    * for a remote failure the worker's traceback text is attached as ``worker_traceback``, as the
      ``__cause__`` (printed above the caller's traceback) and in the message of the fallback
      [`ImleSolversError`][imle_solvers.errors.ImleSolversError] used when the exception could not be pickled.
    """
    remote = live is None
    exc = live if live is not None else failure.exc
    if exc is None:  # the worker's exception did not pickle: wrap its text
        err = ImleSolversError(
            f"{failure.exc_type}: {failure.message} (raised in {failure.where}; worker traceback:\n"
            f"{failure.traceback})",
            rows=failure.rows,
        )
        err.worker_traceback = failure.traceback  # type: ignore[attr-defined]
        raise err
    if isinstance(exc, ImleSolversError):
        exc.with_rows(failure.rows)
    else:
        try:
            exc.rows = failure.rows  # type: ignore[attr-defined]
        except Exception:  # pragma: no cover - exceptions with __slots__
            pass
        label = "row" if len(failure.rows) == 1 else "rows"
        note = f"raised by batch {label} {', '.join(map(str, failure.rows[:10]))} ({failure.where})"
        if hasattr(exc, "add_note"):
            exc.add_note(note)
    if remote:
        try:
            exc.worker_traceback = failure.traceback  # type: ignore[attr-defined]
        except Exception:  # pragma: no cover
            pass
        raise exc from RemoteTraceback(failure.traceback)
    raise exc


def _portable(failure: ChunkFailure) -> ChunkFailure:
    """Drop the exception object when it does not survive pickling (its text stays)."""
    try:
        pickle.loads(pickle.dumps(failure.exc))
    except Exception:
        failure.exc = None
    else:
        if failure.exc is not None:
            failure.exc.__traceback__ = None
    return failure


def dask_solve_chunk(oracle: MapOracle, weights: np.ndarray, start: int) -> tuple[str, Any, float]:
    """Dask task: ``("ok", states, seconds)`` or ``("failed", ChunkFailure, 0.0)`` (never raises)."""
    try:
        out, seconds = solve_chunk(oracle, weights, start, where=f"dask worker (pid {os.getpid()})")
    except ChunkError as err:
        return "failed", _portable(err.failure), 0.0
    return "ok", out, seconds


def pin_threads(threads: int) -> None:
    """One (or ``threads``) thread(s) per solver inside a worker: torch intra/inter-op and BLAS."""
    try:
        import torch

        torch.set_num_threads(threads)
        try:
            torch.set_num_interop_threads(threads)
        except RuntimeError:  # already set, or parallel work already started
            pass
    except ImportError:  # pragma: no cover - torch is a hard dependency
        pass
    try:  # threadpoolctl is optional: it caps BLAS pools that were loaded before the env took effect
        from threadpoolctl import threadpool_limits

        threadpool_limits(threads)
    except ImportError:
        pass


def _own_process_group() -> bool:
    """Make this worker the leader of a new session and process group (its solver children join it).

    The caller then stops a worker with ``killpg``, which takes any ``cbc``-like child process
    along, and a terminal's Ctrl-C reaches the caller only.
    """
    try:
        os.setsid()
    except OSError:  # pragma: no cover - already a group leader
        return os.getpgid(0) == os.getpid()
    return True


def _gone(pid: int) -> bool:
    """Whether process ``pid`` has exited (no such process, or a zombie)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def _watch_parent(conn: Any, own_group: bool, caller: int) -> None:
    """Die with the caller: a daemon thread waits for the caller's end of the pipe to close.

    The caller is the only process holding that end, so a hang-up means that it exited or was killed
    (even by SIGKILL, which it cannot handle). The worker then kills its process group: itself and
    every solver process it started, even while its main thread is stuck in a long solve. If the
    caller is gone and the worker was forked by the caller's ``forkserver``, it takes that along too
    (the server would otherwise linger until its Python shut down). Linux (``POLLRDHUP``); elsewhere a
    worker notices at its next ``recv``.
    """
    rdhup = getattr(select, "POLLRDHUP", None)
    if rdhup is None:  # pragma: no cover - not Linux
        return
    poller = select.poll()
    poller.register(conn.fileno(), rdhup)  # peer hang-up only: never consumes a message
    server = os.getppid() if os.getppid() != caller else None  # forkserver start method

    def watch() -> None:
        while True:
            try:
                events = poller.poll()
            except InterruptedError:  # pragma: no cover - retried by Python itself
                continue
            if events:
                break
        for _ in range(50):  # a killed caller's pipe closes a moment before it turns zombie
            if _gone(caller):
                break
            time.sleep(0.01)
        if server is not None and os.getppid() == server and _gone(caller):
            os.kill(server, signal.SIGKILL)  # the caller's forkserver: it has no one left to serve
        if own_group:
            os.killpg(os.getpid(), signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)  # pragma: no cover - without a group of its own

    threading.Thread(target=watch, name="imle-solvers-parent-watch", daemon=True).start()


def worker_main(conn: Any, threads: int, caller: int | None = None) -> None:
    """Main loop of a process worker (see ``_process.py`` for the message protocol).

    Messages in: ``("oracle", token, blob)``, ``("forget", token)``,
    ``("solve", call_id, chunk_id, token, start, weights)``, ``("stop",)``.
    Messages out: ``("ready", pid)``, ``("done", call_id, chunk_id, states, seconds)``,
    ``("failed", call_id, chunk_id, ChunkFailure)``.
    The loop ends on ``stop`` or when the parent's end of the pipe closes (the parent died).
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's business: it stops us
    own_group = _own_process_group()
    _watch_parent(conn, own_group, os.getppid() if caller is None else caller)
    pin_threads(threads)
    where = f"pool worker (pid {os.getpid()})"
    oracles: dict[int, MapOracle | ChunkFailure] = {}
    conn.send(("ready", os.getpid()))
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        kind = msg[0]
        if kind == "stop":
            return
        if kind == "oracle":
            _, token, blob = msg
            try:
                oracles[token] = pickle.loads(blob)
            except Exception as exc:  # reported on the first solve that needs it
                oracles[token] = _portable(_failure(exc, (), where + ", unpickling the oracle"))
        elif kind == "forget":
            oracles.pop(msg[1], None)
        elif kind == "solve":
            _, call_id, chunk_id, token, start, weights = msg
            oracle = oracles.get(token)
            if isinstance(oracle, ChunkFailure) or oracle is None:
                failure = (
                    oracle
                    if isinstance(oracle, ChunkFailure)
                    else _portable(
                        _failure(KeyError(f"oracle token {token} unknown to the worker"), (), where)
                    )
                )
                rows = tuple(range(start, start + weights.shape[0]))
                conn.send(("failed", call_id, chunk_id, dataclasses.replace(failure, rows=rows)))
                continue
            try:
                out, seconds = solve_chunk(oracle, weights, start, where=where)
            except ChunkError as err:
                conn.send(("failed", call_id, chunk_id, _portable(err.failure)))
            else:
                conn.send(("done", call_id, chunk_id, out, seconds))
