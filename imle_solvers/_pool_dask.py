"""The Dask backend of [`SolverPool`][imle_solvers.pool.SolverPool]: the same calls on a ``dask.distributed``
cluster.

The oracle is scattered once to every worker (``client.scatter(oracle, broadcast=True)``) and the
resulting future is reused by every later call; each call submits one task per row chunk and gathers
the states in row order.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

import numpy as np

from ._pool_worker import dask_solve_chunk, raise_failure
from .errors import SolverTimeoutError, WorkerCrashedError, require
from .oracle import MapOracle

__all__ = ["DaskRunner"]


class DaskRunner:
    """Holds the Dask client (and the local cluster it may own) for one pool.

    Parameters
    ----------
    workers
        Worker processes of the `distributed.LocalCluster` started when neither ``client`` nor
        ``address`` is given.
    client
        An existing `distributed.Client` (not closed by the pool).
    address
        A scheduler address such as ``"tcp://10.0.0.5:8786"``; the pool opens (and closes) a client.
    """

    def __init__(self, workers: int | None, client: Any = None, address: str | None = None) -> None:
        distributed: Any = require("distributed", "dask")
        self._distributed = distributed
        self._own_client = client is None
        self._cluster: Any = None
        if client is not None:
            self.client = client
        elif address is not None:
            self.client = distributed.Client(address)
        else:
            self._cluster = distributed.LocalCluster(
                n_workers=workers or 2, threads_per_worker=1, processes=True, dashboard_address=None,
                env={"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"},
            )
            self.client = distributed.Client(self._cluster)
        self.scatters = 0  # oracles scattered

    def n_workers(self) -> int:
        """Total worker threads on the cluster (each solves one chunk at a time)."""
        info = self.client.scheduler_info()
        return max(1, sum(int(w.get("nthreads", 1)) for w in info.get("workers", {}).values()))

    def scatter(self, oracle: MapOracle) -> Any:
        """Send the oracle to every worker once; the future stands for it in later tasks."""
        self.scatters += 1
        return self.client.scatter(oracle, broadcast=True, hash=False)

    def run(self, oracle_future: Any, weights: np.ndarray, bounds: list[tuple[int, int]],
            timeout: float | None) -> tuple[np.ndarray, list[float], float]:
        """Solve ``weights`` in chunks; returns the states, per-chunk solve seconds and the wall time."""
        distributed = self._distributed
        t0 = time.perf_counter()
        futures = [
            self.client.submit(dask_solve_chunk, oracle_future, weights[a:b], a, pure=False)
            for a, b in bounds
        ]
        try:
            distributed.wait(futures, timeout=timeout)
        except (TimeoutError, distributed.TimeoutError) as exc:
            unfinished = [r for f, (a, b) in zip(futures, bounds) if not f.done() for r in range(a, b)]
            self.client.cancel(futures)
            raise SolverTimeoutError(
                f"dask pool call exceeded timeout={timeout} s ({len(unfinished)} rows unfinished; "
                "tasks were cancelled, a solve already running finishes on its worker)",
                rows=unfinished,
            ) from exc
        except BaseException:
            self.client.cancel(futures)
            raise
        out = np.empty(weights.shape, dtype=np.float64)
        seconds: list[float] = []
        for future, (a, b) in zip(futures, bounds):
            if future.status == "error":
                error = future.exception()
                if type(error).__name__ == "KilledWorker":
                    raise WorkerCrashedError(f"dask workers died while solving these rows ({error})",
                                             rows=range(a, b)) from error
                raise error
            status, payload, secs = future.result()
            if status == "failed":
                raise_failure(payload)
            out[a:b] = payload
            seconds.append(secs)
        return out, seconds, time.perf_counter() - t0

    def close(self) -> None:
        """Close the client and cluster this runner opened (a client passed in is left open)."""
        if self._own_client:
            with contextlib.suppress(Exception):
                self.client.close()
            if self._cluster is not None:
                with contextlib.suppress(Exception):
                    self._cluster.close()
