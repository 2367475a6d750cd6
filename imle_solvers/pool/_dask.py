"""The Dask backend of [`SolverPool`][imle_solvers.pool.SolverPool]: the same calls on a ``dask.distributed``
cluster.

The oracle is scattered once to every worker (``client.scatter(oracle, broadcast=True)``) and the
resulting future is reused by every later call; each call submits one task per row chunk and gathers
the states in row order.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import re
import time
from typing import Any

import numpy as np

from ..errors import SolverTimeoutError, WorkerCrashedError, require
from ._plan import Entry
from ._runner import Deadline, RunResult
from ._worker import dask_solve_chunk, raise_failure

__all__ = ["DaskRunner"]


class _LostOracle(Exception):
    """A call's tasks were cancelled with the oracle's copy: worth one more try."""


class DaskRunner:
    """Holds the Dask client (and the local cluster it may own) for one pool; a
    ``Runner``.

    Parameters
    ----------
    workers
        Worker processes of the `distributed.LocalCluster` started when neither ``client`` nor
        ``address`` is given.
    client
        An existing `distributed.Client` (not closed by the pool).
    address
        A scheduler address such as ``"tcp://10.0.0.5:8786"``; the pool opens (and closes) a client.
    retries
        How many times a call whose oracle copy was lost with a dead worker is sent again.
    """

    def __init__(
        self, workers: int | None, client: Any = None, address: str | None = None, retries: int = 1
    ) -> None:
        self._workers = workers
        self.retries = retries
        self._address = address
        self._own_client = client is None
        self._cluster: Any = None
        self._client: Any = client
        self._distributed: Any = None
        self.scatters = 0  # oracles scattered

    @property
    def client(self) -> Any:
        """The ``distributed.Client`` (connected, or a local cluster started, on first use)."""
        if self._distributed is None:
            self._distributed = require("distributed", "dask")
        if self._client is None:
            distributed = self._distributed
            if self._address is not None:
                self._client = distributed.Client(self._address)
            else:
                self._cluster = distributed.LocalCluster(
                    n_workers=self._workers or 2,
                    threads_per_worker=1,
                    processes=True,
                    dashboard_address=None,
                    env={"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"},
                )
                self._client = distributed.Client(self._cluster)
        return self._client

    def start(self) -> None:
        """Connect (or start the local cluster)."""
        self.client  # noqa: B018 - the property connects

    def n_workers(self) -> int:
        """Total worker threads on the cluster (each solves one chunk at a time)."""
        if self._client is None:
            return self._workers or 2
        info = self.client.scheduler_info()
        return max(1, sum(int(w.get("nthreads", 1)) for w in info.get("workers", {}).values()))

    def prepare(self, entry: Entry, oracle: object) -> None:
        """Nothing yet: the oracle is scattered on its first parallel call."""

    def forget(self, entry: Entry) -> None:
        """Release the scattered oracle."""
        if entry.dask_future is not None and self._client is not None:
            with contextlib.suppress(Exception):
                entry.dask_future.release()
        entry.dask_future = None

    def pids(self) -> list[int]:
        return []

    def counters(self) -> dict[str, int]:
        return {"worker_restarts": 0, "oracles_shipped": self.scatters}

    def active(self) -> bool:
        return self._client is not None

    def _scatter(self, oracle: object) -> Any:
        """``client.scatter(oracle, broadcast=True)``, retried while crashed workers restart."""
        self.scatters += 1
        for attempt in range(3):
            try:
                return self.client.scatter(oracle, broadcast=True, hash=False)
            except OSError:  # CommClosedError: a worker that was just replaced
                if attempt == 2:
                    raise
                self.client.wait_for_workers(1, timeout=60)
                time.sleep(0.5 * (attempt + 1))
        raise AssertionError("unreachable")  # pragma: no cover

    def run(
        self, entry: Entry, weights: np.ndarray, bounds: list[tuple[int, int]], deadline: Deadline
    ) -> RunResult:
        """Solve ``weights`` in chunks; returns the states and what was measured.

        A call whose tasks were cancelled because a worker died with the oracle's copy ("lost
        dependencies") is sent again, with the oracle scattered again, up to ``retries`` times.
        """
        for attempt in range(self.retries + 1):
            try:
                return self._run_once(entry, weights, bounds, deadline, retry=attempt < self.retries)
            except _LostOracle:
                self.client.wait_for_workers(1, timeout=60)  # workers restart after a crash
        raise AssertionError("unreachable")  # pragma: no cover

    def _run_once(
        self,
        entry: Entry,
        weights: np.ndarray,
        bounds: list[tuple[int, int]],
        deadline: Deadline,
        retry: bool,
    ) -> RunResult:
        client = self.client
        distributed = self._distributed
        if entry.dask_future is not None and entry.dask_future.status != "finished":
            self.forget(entry)  # the scattered copy was lost (its workers died): send it again
        first_use = entry.dask_future is None
        if first_use:  # send the oracle to every worker once; the future stands for it later
            entry.dask_future = self._scatter(entry.ref())
        t0 = time.perf_counter()
        futures = [
            client.submit(dask_solve_chunk, entry.dask_future, weights[a:b], a, pure=False) for a, b in bounds
        ]
        crashed = (concurrent.futures.CancelledError, distributed.KilledWorker)
        try:
            distributed.wait(futures, timeout=deadline.remaining())
            out = np.empty(weights.shape, dtype=np.float64)
            seconds: list[float] = []
            for future, (a, b) in zip(futures, bounds):
                error = future.exception() if future.status == "error" else None
                if error is not None and not isinstance(error, crashed):
                    raise error  # raised by Dask itself, outside the oracle
                status, payload, secs = future.result()  # a lost task raises KilledWorker/CancelledError
                if status == "failed":
                    raise_failure(payload)
                out[a:b] = payload
                seconds.append(secs)
        except (TimeoutError, distributed.TimeoutError) as exc:
            unfinished = [r for f, (a, b) in zip(futures, bounds) if not f.done() for r in range(a, b)]
            client.cancel(futures)
            raise SolverTimeoutError(
                f"dask pool call exceeded {deadline.describe()} ({len(unfinished)} rows unfinished; "
                "tasks were cancelled, a solve already running finishes on its worker)",
                rows=unfinished,
            ) from exc
        except crashed as exc:
            # a worker died: its task was lost (KilledWorker) or cancelled with the oracle's copy
            # ("lost dependencies"); the scattered oracle cannot be trusted any more
            lost = [r for f, (a, b) in zip(futures, bounds) if f.status != "finished" for r in range(a, b)]
            client.cancel(futures)
            self.forget(entry)  # the next call scatters the oracle again
            if retry and not isinstance(exc, distributed.KilledWorker) and not deadline.expired():
                raise _LostOracle from None
            found = re.search(r"for reason: ([^.\n]+)", str(exc))
            why = found.group(1) if found else str(exc).strip().split("\n")[0][:200]
            raise WorkerCrashedError(
                f"a dask worker died (or the tasks were cancelled) while solving these rows "
                f"({type(exc).__name__}: {why}); the oracle is sent again on the next call",
                rows=lost,
            ) from None
        except BaseException:
            client.cancel(futures)
            raise
        solve_s = float(sum(seconds))
        return RunResult(
            states=out,
            solve_s=solve_s,
            slowest_s=solve_s / min(self.n_workers(), len(bounds)),
            wall_s=time.perf_counter() - t0,
            first_use=first_use,
        )

    def close(self) -> None:
        """Close the client and cluster this runner opened (a client passed in is left open)."""
        if self._own_client and self._client is not None:
            with contextlib.suppress(Exception):
                self._client.close()
            if self._cluster is not None:
                with contextlib.suppress(Exception):
                    self._cluster.close()
            self._client = None
