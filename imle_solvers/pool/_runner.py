"""The one interface every backend of [`SolverPool`][imle_solvers.pool.SolverPool] implements, serial
included.

A runner owns its workers (none, threads, processes, a Dask client), declares what the cost model must
know about them (`RunnerTraits`: overhead, isolation, transfer) and solves row chunks of one batch,
``run(token, oracle, weights, bounds, deadline, out)``. The pool decides *whether* to use it and in
which chunks (`_plan.py`); the runner only carries the chunks out and reports what it measured. This
module imports no backend: `_backends.py` maps backend names to runner classes.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Protocol

import numpy as np

from ..oracle import MapOracle

__all__ = ["Deadline", "InProcessRunner", "RunResult", "Runner", "RunnerOptions", "RunnerTraits", "rows_of"]


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
class RunnerTraits:
    """What a backend declares about itself: the facts the cost model and the routing rules read.

    Attributes
    ----------
    name
        The backend's name (``"serial"``, ``"thread"``, …), as plans and messages show it.
    in_caller
        Rows are solved on the calling thread (the serial backend): there is nothing to plan.
    isolated
        A solve that crashes or hangs cannot take the caller down (worker processes, a cluster), so an
        oracle that is not ``in_process_safe`` is kept off the caller unless ``fallback=True``.
    transfers
        Weights and states are copied to the workers and back (pipes, network): the cost model adds
        the transfer time.
    local
        The workers share the caller's machine: one of them cannot beat the caller.
    overhead_s
        A-priori fixed cost of one call (dispatch, wake-up, gather); the pool refines it by measurement.
    """

    name: str
    in_caller: bool
    isolated: bool
    transfers: bool
    local: bool
    overhead_s: float


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunnerOptions:
    """The pool's options a runner may use (each backend reads the ones that concern it).

    Attributes
    ----------
    workers
        Number of workers (threads, processes, local Dask workers).
    start_method
        ``"forkserver"`` or ``"spawn"`` (worker processes).
    worker_threads
        Threads each worker process may use.
    max_cached_oracles
        Oracles each worker process keeps unpickled.
    retries
        Resends of a chunk lost with a dead worker.
    client
        An existing ``distributed.Client`` (Dask).
    dask_address
        A scheduler address (Dask).
    """

    workers: int
    start_method: str = "spawn"
    worker_threads: int = 1
    max_cached_oracles: int = 16
    retries: int = 1
    client: Any = None
    dask_address: str | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunResult:
    """What one call on a runner measured (the states are written into the caller's ``out``).

    Attributes
    ----------
    solve_s
        Solving seconds summed over the chunks.
    slowest_s
        Solving seconds of the busiest worker (the part of the wall time that is not overhead).
    wall_s
        Wall time of the call.
    first_use
        The call shipped the oracle to the workers (a one-off cost: not representative).
    """

    solve_s: float
    slowest_s: float
    wall_s: float
    first_use: bool


class Runner(Protocol):
    """A backend of the pool: solves row chunks in the caller, on threads, processes or a cluster.

    Oracles are known by the pool's ``token`` (one per oracle); what a runner keeps per oracle (a
    pickled copy, a scattered future) it keeps itself, until `forget`.
    """

    traits: RunnerTraits

    def start(self) -> None:
        """Start the workers and wait until they are ready."""

    def n_workers(self) -> int:
        """Workers that can solve a chunk at the same time."""

    def prepare(self, token: int, oracle: MapOracle) -> None:
        """Called once per oracle when the pool first sees it (the process backend pickles it here)."""

    def run(
        self,
        token: int,
        oracle: MapOracle,
        weights: np.ndarray,
        bounds: list[tuple[int, int]],
        deadline: Deadline,
        out: np.ndarray,
    ) -> RunResult:
        """Solve ``weights[a:b]`` into ``out[a:b]`` for every ``(a, b)`` in ``bounds``."""

    def forget(self, token: int) -> None:
        """Release what the runner holds for this oracle."""

    def pids(self) -> list[int]:
        """Pids of live worker processes (empty for the caller, threads and Dask)."""

    def counters(self) -> dict[str, int]:
        """``worker_restarts`` and ``oracles_shipped``."""

    def active(self) -> bool:
        """Whether workers are running."""

    def close(self) -> None:
        """Stop every worker (idempotent)."""


class InProcessRunner:
    """What the runners without worker processes share (serial, thread): no oracle is shipped, kept or
    counted, and no process is listed; they solve the caller's oracle object itself."""

    def prepare(self, token: int, oracle: MapOracle) -> None:
        """Nothing to ship."""

    def forget(self, token: int) -> None:
        """Nothing is kept per oracle."""

    def pids(self) -> list[int]:
        """No worker processes."""
        return []

    def counters(self) -> dict[str, int]:
        """No restarts, no oracles shipped."""
        return {"worker_restarts": 0, "oracles_shipped": 0}


def rows_of(bounds: Any) -> list[int]:
    """Every row of ``(a, b)`` ranges (or of objects with ``start`` and ``stop``)."""
    rows: list[int] = []
    for item in bounds:
        a, b = item if isinstance(item, tuple) else (item.start, item.stop)
        rows.extend(range(a, b))
    return rows
