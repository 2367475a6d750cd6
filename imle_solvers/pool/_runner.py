"""The one interface every parallel backend of [`SolverPool`][imle_solvers.pool.SolverPool] implements.

A runner owns its workers (threads, processes, a Dask client) and solves row chunks of one batch:
``run(entry, weights, bounds, deadline)``. The pool decides *whether* to use it and in which chunks
(`_plan.py`); the runner only carries the chunks out and reports what it measured.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Protocol

import numpy as np

from ._plan import Entry

__all__ = ["Deadline", "RunResult", "Runner", "make_runner"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Deadline:
    """The time limit of one pool call: the configured ``seconds`` and the ``time.monotonic()`` end."""

    seconds: float | None
    at: float | None

    @classmethod
    def start(cls, seconds: float | None) -> Deadline:
        """A deadline ``seconds`` from now (none when ``seconds`` is ``None``)."""
        return cls(seconds=seconds, at=None if seconds is None else time.monotonic() + seconds)

    def remaining(self) -> float | None:
        """Seconds left (may be ≤ 0), or ``None`` without a limit."""
        return None if self.at is None else self.at - time.monotonic()

    def expired(self) -> bool:
        """Whether the limit has passed."""
        return self.at is not None and time.monotonic() >= self.at

    def describe(self) -> str:
        """``"timeout=2.0 s"``: the configured limit, as error messages state it."""
        return f"timeout={self.seconds} s"


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunResult:
    """What one parallel call produced and measured.

    Attributes
    ----------
    states
        ``(N, m)`` float64 states; rows outside the chunks are left as they were allocated.
    solve_s
        Solving seconds summed over the chunks.
    slowest_s
        Solving seconds of the busiest worker (the part of the wall time that is not overhead).
    wall_s
        Wall time of the call.
    first_use
        The call shipped the oracle to the workers (a one-off cost: not representative).
    """

    states: np.ndarray
    solve_s: float
    slowest_s: float
    wall_s: float
    first_use: bool


class Runner(Protocol):
    """A parallel backend: threads, worker processes or a Dask cluster."""

    def start(self) -> None:
        """Start the workers and wait until they are ready."""

    def n_workers(self) -> int:
        """Workers that can solve a chunk at the same time."""

    def prepare(self, entry: Entry, oracle: object) -> None:
        """Called once per oracle when the pool first sees it (the process backend pickles it here)."""

    def run(
        self, entry: Entry, weights: np.ndarray, bounds: list[tuple[int, int]], deadline: Deadline
    ) -> RunResult:
        """Solve ``weights[a:b]`` for every ``(a, b)`` in ``bounds``; rows come back in order."""

    def forget(self, entry: Entry) -> None:
        """Release what the runner holds for this oracle."""

    def pids(self) -> list[int]:
        """Pids of live worker processes (empty for threads and Dask)."""

    def counters(self) -> dict[str, int]:
        """``worker_restarts`` and ``oracles_shipped``."""

    def active(self) -> bool:
        """Whether workers are running."""

    def close(self) -> None:
        """Stop every worker (idempotent)."""


def make_runner(
    backend: str,
    workers: int,
    *,
    start_method: str,
    worker_threads: int,
    max_cached_oracles: int,
    retries: int,
    client: Any = None,
    dask_address: str | None = None,
) -> Runner:
    """The runner of a parallel ``backend`` (its module imported here; it starts its workers lazily)."""
    if backend == "process":
        from ._process import ProcessFleet

        return ProcessFleet(workers, start_method, worker_threads, max_cached_oracles, retries=retries)
    if backend == "thread":
        from ._thread import ThreadRunner

        return ThreadRunner(workers)
    if backend == "dask":
        from ._dask import DaskRunner

        return DaskRunner(workers, client=client, address=dask_address, retries=retries)
    raise RuntimeError(f"the {backend!r} backend has no runner")  # pragma: no cover - guarded by the pool
