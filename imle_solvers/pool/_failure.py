"""Failure transport: a row that failed anywhere (caller, thread, worker process, Dask worker) is
re-raised in the caller the same way.

`ChunkFailure` is the picklable account that travels from a worker; `raise_failure` re-raises it with
the *global* batch rows, the original exception type where possible, and the traceback text of the
place it was raised. Light imports only: worker processes import this module.
"""

from __future__ import annotations

import dataclasses
import pickle
import traceback
from typing import NoReturn

from ..errors import ImleSolversError

__all__ = ["ChunkError", "ChunkFailure", "RemoteTraceback", "failure_of", "portable", "raise_failure"]


@dataclasses.dataclass
class ChunkFailure:
    """A picklable account of a row that failed (travels from a worker to the caller).

    Attributes
    ----------
    rows
        Global batch rows the failure concerns (one row for a per-row ``solve``).
    exc
        The original exception when it could be pickled, else ``None``.
    exc_type
        ``type(exc).__qualname__`` (kept even when ``exc`` is ``None``).
    message
        ``str(exc)`` (kept even when ``exc`` is ``None``).
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
    """Raised by ``solve_chunk``; carries a `ChunkFailure` (and the live exception)."""

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


def failure_of(exc: BaseException, rows: tuple[int, ...], where: str) -> ChunkFailure:
    """The account of ``exc``, raised while solving the global ``rows`` in ``where``."""
    return ChunkFailure(
        rows=rows,
        exc=exc,
        exc_type=type(exc).__qualname__,
        message=str(exc),
        traceback="".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
        where=where,
    )


def portable(failure: ChunkFailure) -> ChunkFailure:
    """Drop the exception object when it does not survive pickling (its text stays)."""
    try:
        pickle.loads(pickle.dumps(failure.exc))
    except Exception:
        failure.exc = None
    else:
        if failure.exc is not None:
            failure.exc.__traceback__ = None
    return failure


def raise_failure(failure: ChunkFailure, live: BaseException | None = None) -> NoReturn:
    """Re-raise a failed row in the caller: the original type where possible, with ``.rows`` set.

    * library errors ([`ImleSolversError`][imle_solvers.errors.ImleSolversError]) get the global rows through
      ``with_rows``;
    * other exceptions keep their type, get a ``rows`` attribute and a note naming the row;
    * for a remote failure (``live`` is ``None``) the worker's traceback text is attached as
      ``worker_traceback``, as the ``__cause__`` (printed above the caller's traceback) and in the
      message of the fallback [`ImleSolversError`][imle_solvers.errors.ImleSolversError] used when the
      exception could not be pickled.
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
