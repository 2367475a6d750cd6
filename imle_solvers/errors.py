"""Typed errors raised by `imle_solvers`.

Every error that concerns particular rows of a batch carries them in ``.rows`` (flat row indices of
the ``(B·S, m)`` batch that reached the oracle, or of the ``(..., m)`` weights the user passed) and
names them in its message, so that a failure in a batch of 256 says *which* instance failed.

Hierarchy:

```text
ImleSolversError
├── InvalidWeightsError      (also a ValueError)   NaN/inf, wrong length, dtype or shape of an input
├── InfeasibleError                                 no state satisfies the constraints
├── UnboundedError                                  the objective is unbounded
├── SolverTimeoutError       (also a TimeoutError)  time limit hit with no usable answer
├── NegativeCycleError                              shortest path with a negative cycle
├── WorkerCrashedError                              a pool worker died mid-call
├── InvalidSolutionError                            a solver's state violates the declared model
├── SolverLicenseError                              the solver's licence does not cover the model
├── MissingExtraError        (also an ImportError)  an optional solver extra is not installed
├── ConfigError              (also a ValueError)    a command's setting that cannot work
├── DataError                (also a ValueError)    a data set on disk that is not in its format
├── OutputError              (also an OSError)      a command's results could not be written
└── DistributedError                                a training process of a torchrun job failed

UnprovenSolutionWarning      (a RuntimeWarning)     time limit hit, feasible state returned anyway
```
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

__all__ = [
    "ConfigError",
    "DataError",
    "DistributedError",
    "ImleSolversError",
    "InfeasibleError",
    "InvalidSolutionError",
    "InvalidWeightsError",
    "MissingExtraError",
    "NegativeCycleError",
    "OutputError",
    "SolverLicenseError",
    "SolverTimeoutError",
    "UnboundedError",
    "UnprovenSolutionWarning",
    "WorkerCrashedError",
]


def _format_rows(rows: Sequence[int], limit: int = 10) -> str:
    shown = ", ".join(str(r) for r in rows[:limit])
    more = f", … ({len(rows)} rows in all)" if len(rows) > limit else ""
    return f"{shown}{more}"


class ImleSolversError(Exception):
    """Base class of every error raised by `imle_solvers`.

    Parameters
    ----------
    message
        What went wrong, without the row information (that is added here).
    rows
        Flat batch-row indices the error concerns, if known.
    """

    def __init__(self, message: str, rows: Iterable[int] | None = None) -> None:
        self.message = message
        self.rows: tuple[int, ...] = tuple(int(r) for r in rows) if rows is not None else ()
        super().__init__(self._render())

    def _render(self) -> str:
        if not self.rows:
            return self.message
        label = "row" if len(self.rows) == 1 else "rows"
        return f"batch {label} {_format_rows(self.rows)}: {self.message}"

    @property
    def row(self) -> int | None:
        """The first row the error concerns, or ``None`` when unknown."""
        return self.rows[0] if self.rows else None

    def with_rows(self, rows: Iterable[int]) -> ImleSolversError:
        """Attach batch rows to an error raised by a single-instance ``solve`` (in place)."""
        self.rows = tuple(int(r) for r in rows)
        self.args = (self._render(),)
        return self

    def __reduce__(self):  # type: ignore[no-untyped-def]
        # Errors travel back from pool workers: keep the rows through pickling.
        return (_rebuild_error, (type(self), self.message, self.rows, self.__dict__.copy()))

    def __str__(self) -> str:
        return self._render()


def _rebuild_error(
    cls: type[ImleSolversError], message: str, rows: tuple[int, ...], state: dict[str, object]
) -> ImleSolversError:
    err = cls.__new__(cls)
    Exception.__init__(err, message)
    err.__dict__.update(state)
    err.message = message
    err.rows = rows
    err.args = (err._render(),)
    return err


class InvalidWeightsError(ImleSolversError, ValueError):
    """Weights that no oracle can take: NaN/inf entries, the wrong last dimension or a non-float dtype.

    Also raised for the other input tensors of layers and losses (optimal or target states, objective
    values) that have NaN/inf entries or a shape other than the one required: they are never broadcast.
    """


class InfeasibleError(ImleSolversError):
    """The constraints admit no state (an ILP with an empty feasible set, no path source → target)."""


class UnboundedError(ImleSolversError):
    """The objective is unbounded over the feasible set (e.g. an ILP with an unbounded variable)."""


class SolverTimeoutError(ImleSolversError, TimeoutError):
    """A solver or pool call hit its time limit without a usable answer."""


class NegativeCycleError(ImleSolversError):
    """Shortest-path weights (perturbed ones too) with a negative cycle reachable from the source."""


class WorkerCrashedError(ImleSolversError):
    """A pool worker process died (killed, segfaulted) while solving the given rows."""


class InvalidSolutionError(ImleSolversError):
    """A solver returned a state that violates the declared constraints, bounds or integrality.

    Raised by the ILP adapters' solution check instead of handing back a wrong state (numerical trouble
    in the solver, e.g. coefficients far apart in magnitude).
    """

    constraint: int | None = None
    """The first violated constraint row, ``None`` for a bound or integrality violation."""

    violation: float = 0.0
    """By how much the state violates it."""


class SolverLicenseError(ImleSolversError):
    """The solver's licence does not cover this model.

    Gurobi's size-limited licence (the one ``pip install gurobipy`` brings, no licence file) solves models
    of at most 2,000 variables and 2,000 linear constraints; a larger model is refused when its oracle is
    made, naming its size and the other back ends.
    """


class MissingExtraError(ImleSolversError, ImportError):
    """An optional dependency is missing; the message names the ``pip install 'imle-solvers[extra]'``."""


class ConfigError(ImleSolversError, ValueError):
    """A setting of a command or of its configuration that cannot work, found before any work starts.

    A value out of range, an unknown name, a combination of options that does not fit, an output folder
    that is a file, a device this machine lacks.

    ``.field`` names the setting (``None`` for a combination of settings) and ``.reason`` says what is
    wrong with it; the message is ``"{field} {reason}"``, the command line shows
    ``"argument --{field}: {reason}"``.
    """

    def __init__(self, reason: str, field: str | None = None) -> None:
        self.reason, self.field = reason, field
        super().__init__(f"{field} {reason}" if field else reason)


class DataError(ImleSolversError, ValueError):
    """A data set on disk that cannot be read in its documented format: a missing or unreadable file, an
    array of the wrong shape or dtype, or values out of range.

    ``.rows`` names the instances (the rows of the file's first axis) whose values are wrong; the message
    names the file, then the instances: ``"… have negative weights (instances 3, 17)"``.
    """

    def _render(self) -> str:
        if not self.rows:
            return self.message
        return f"{self.message} (instance{'s' if len(self.rows) > 1 else ''} {_format_rows(self.rows)})"


class OutputError(ImleSolversError, OSError):
    """A command's results could not be written (a full disk, a folder removed while it ran).

    The results that had finished were handed to the caller before the failed write (``on_result``).
    """


class DistributedError(ImleSolversError):
    """The processes of a data-parallel training run (``torchrun``) could not go on together: another
    process died, stopped answering within the time-out, never arrived at the start, or the launcher
    stopped this one.

    ``.kind`` says which: ``"died"``, ``"timed out"``, ``"missing"``, ``"stopped"`` or ``"failed"``
    (another failure of the process group). Every process of the run raises it, each with one line
    naming itself (``training process 0 of 2: …``).
    """

    def __init__(self, message: str, kind: str = "failed") -> None:
        super().__init__(message)
        self.kind = kind


class UnprovenSolutionWarning(RuntimeWarning):
    """A solver hit its time limit with a feasible state it could not prove optimal (returned anyway).

    Pass ``strict=True`` to an adapter to get
    [`SolverTimeoutError`][imle_solvers.errors.SolverTimeoutError] instead.
    """


def require(module: str, extra: str) -> object:
    """Import an optional dependency, or raise a `MissingExtraError` naming the extra to install.

    The error is [`MissingExtraError`][imle_solvers.errors.MissingExtraError] (also an ``ImportError``).

    Parameters
    ----------
    module
        Module to import, e.g. ``"ortools.sat.python.cp_model"``.
    extra
        The ``imle-solvers`` extra that provides it, e.g. ``"cpsat"``.
    """
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise MissingExtraError(
            f"{module!r} is not installed; install it with: pip install 'imle-solvers[{extra}]'"
        ) from exc
