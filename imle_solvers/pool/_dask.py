"""The Dask backend of [`SolverPool`][imle_solvers.pool.SolverPool]: the same calls on a ``dask.distributed``
cluster, and the task that runs on its workers.

The oracle is scattered once to every worker (``client.scatter(oracle, broadcast=True)``) and the
resulting future is reused by every later call; each call submits one task per row chunk
(`dask_solve_chunk`) and gathers the states in row order. What can go wrong, and what the caller gets:

* a task that hangs past the call's time-out: the tasks are cancelled and the workers still running
  them are restarted through their nannies, so later calls do not queue behind the stuck solve;
* a worker that dies with the oracle's copy: the oracle is scattered again and the call resent
  (``retries`` times), then [`WorkerCrashedError`][imle_solvers.errors.WorkerCrashedError];
* a scheduler that cannot be reached: [`WorkerCrashedError`][imle_solvers.errors.WorkerCrashedError] at
  once; a pool that opened its own client reconnects (or starts its own cluster again) on its next
  call, a client passed in must be replaced, together with the pool.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import re
import time
from typing import Any

import numpy as np

from ..errors import ImleSolversError, SolverTimeoutError, WorkerCrashedError, require
from ..oracle import MapOracle
from ._chunk import solve_chunk
from ._failure import ChunkError, ChunkFailure, portable, raise_failure
from ._runner import Deadline, RunnerOptions, RunnerTraits, RunResult, rows_of

__all__ = ["DaskRunner", "dask_solve_chunk"]

WAIT_SLICE_S = 0.5
"""A call waits for its tasks in slices of this many seconds, checking the scheduler connection between."""

RESTART_S = 1.0
"""How long a timed-out call waits for the stuck workers' restart (it completes in the background)."""


def dask_solve_chunk(oracle: MapOracle, weights: np.ndarray, start: int) -> tuple[str, Any, float]:
    """The task run on a Dask worker: ``("ok", states, seconds)`` or ``("failed", ChunkFailure, 0.0)``.

    Never raises for a failing row: the failure travels back as data, with the global rows.
    """
    try:
        out, seconds = solve_chunk(oracle, weights, start, where=f"dask worker (pid {os.getpid()})")
    except ChunkError as err:
        return "failed", portable(err.failure), 0.0
    return "ok", out, seconds


class _LostOracle(Exception):
    """A call's tasks were cancelled with the oracle's copy: worth one more try."""


class _SchedulerLost(Exception):
    """The client is not connected to its scheduler."""


class DaskRunner:
    """Holds the Dask client (and the local cluster it may own) for one pool; a ``Runner``.

    Reads ``workers`` (processes of the `distributed.LocalCluster` started when neither a client nor
    an address is given), ``client`` (an existing `distributed.Client`, never closed by the pool),
    ``dask_address`` (a scheduler address such as ``"tcp://10.0.0.5:8786"``: the pool opens and
    closes its own client) and ``retries`` (resends of a call whose oracle copy was lost with a dead
    worker) from the options.
    """

    traits = RunnerTraits(
        name="dask", in_caller=False, isolated=True, transfers=True, local=False, overhead_s=2e-2
    )

    def __init__(self, options: RunnerOptions) -> None:
        self._workers = options.workers
        self.retries = options.retries
        self._address = options.dask_address
        self._own_client = options.client is None
        self._cluster: Any = None
        self._client: Any = options.client
        self._distributed: Any = None
        self._futures: dict[int, Any] = {}  # token → the scattered oracle
        self.scatters = 0
        """Oracles scattered to the workers."""
        self.restarts = 0
        """Workers restarted after a time-out."""
        self._threads = options.workers or 2  # worker threads last seen on the cluster

    @property
    def client(self) -> Any:
        """The ``distributed.Client`` (connected, or a local cluster started, on first use)."""
        if self._distributed is None:
            self._distributed = require("distributed", "dask")
        if self._client is None:
            distributed = self._distributed
            try:
                if self._address is not None:
                    self._client = distributed.Client(self._address)
                else:
                    from ._worker_process import script_kept_from_workers

                    with script_kept_from_workers():  # its workers do not re-run an unguarded script
                        self._cluster = distributed.LocalCluster(
                            n_workers=self._workers or 2,
                            threads_per_worker=1,
                            processes=True,
                            dashboard_address=None,
                            env={"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"},
                        )
                    self._client = distributed.Client(self._cluster)
            except OSError as exc:
                self._drop_client()
                raise WorkerCrashedError(
                    f"cannot connect to the Dask scheduler at {self._address} ({type(exc).__name__}: "
                    f"{exc}); is it running (`dask scheduler`)? The pool tries again on its next call"
                ) from exc
        return self._client

    def start(self) -> None:
        """Connect (or start the local cluster)."""
        self.client  # noqa: B018 - the property connects

    def n_workers(self) -> int:
        """Total worker threads on the cluster (each solves one chunk at a time); the last count known
        while the client is not connected (asking would wait for the scheduler)."""
        if self._client is not None and self._client.status == "running":
            with contextlib.suppress(Exception):
                info = self._client.scheduler_info()
                threads = sum(int(w.get("nthreads", 1)) for w in info.get("workers", {}).values())
                self._threads = max(1, threads)
        return self._threads

    def prepare(self, token: int, oracle: MapOracle) -> None:
        """Check that the oracle pickles (Dask pickles it for the workers), so that it fails at once."""
        cloudpickle: Any = require("cloudpickle", "dask")
        try:
            cloudpickle.dumps(oracle)
        except Exception as exc:
            raise TypeError(
                f"{type(oracle).__name__} cannot be sent to Dask workers: it does not pickle ({exc}). "
                "Make it picklable (drop locks/solver handles in __getstate__ and rebuild them lazily), "
                "or use SolverPool(backend='thread') or backend='serial'."
            ) from exc

    def forget(self, token: int) -> None:
        """Release the scattered oracle."""
        future = self._futures.pop(token, None)
        if future is not None and self._client is not None:
            with contextlib.suppress(Exception):
                future.release()

    def pids(self) -> list[int]:
        return []

    def counters(self) -> dict[str, int]:
        return {"worker_restarts": self.restarts, "oracles_shipped": self.scatters}

    def active(self) -> bool:
        return self._client is not None

    # ------------------------------------------------------------------ the scheduler connection
    def _check_connected(self) -> None:
        if self._client is not None and self._client.status != "running":
            raise _SchedulerLost(f"client status {self._client.status!r}")

    def _drop_client(self) -> None:
        """Close the client and cluster this runner opened; the next call opens new ones."""
        self._futures.clear()
        if self._own_client:
            client, cluster, self._client, self._cluster = self._client, self._cluster, None, None
            if client is not None:
                with contextlib.suppress(Exception):
                    client.close(timeout=2)
            if cluster is not None:
                with contextlib.suppress(Exception):
                    cluster.close(timeout=2)

    def _scheduler_lost(self, why: str, rows: list[int]) -> WorkerCrashedError:
        where = f"at {self._address}" if self._address is not None else "of the pool's LocalCluster"
        if self._own_client:
            self._drop_client()
            advice = (
                "the pool reconnects on its next call (start the scheduler again first)"
                if self._address is not None
                else "the pool starts a new LocalCluster on its next call"
            )
            return WorkerCrashedError(f"lost the Dask scheduler {where} ({why}); {advice}", rows=rows)
        return WorkerCrashedError(
            f"the distributed.Client passed to this pool lost its scheduler ({why}); the pool does not "
            "reconnect a client it did not open: once the scheduler is back, create a new Client and "
            "a new SolverPool(backend='dask', client=...)",
            rows=rows,
        )

    # ------------------------------------------------------------------ one call
    def run(
        self,
        token: int,
        oracle: MapOracle,
        weights: np.ndarray,
        bounds: list[tuple[int, int]],
        deadline: Deadline,
        out: np.ndarray,
    ) -> RunResult:
        """Solve ``weights`` in chunks into ``out``; returns what was measured.

        A call whose tasks were cancelled because a worker died with the oracle's copy ("lost
        dependencies") is sent again, with the oracle scattered again, up to ``retries`` times.

        Raises
        ------
        SolverTimeoutError
            The deadline passed (also when it had passed before anything was submitted).
        WorkerCrashedError
            The scheduler cannot be reached, or workers died with the call's tasks.
        """
        for attempt in range(self.retries + 1):
            try:
                done = self._run_once(token, oracle, weights, bounds, deadline, out, attempt < self.retries)
            except ImleSolversError:  # typed already (a SolverTimeoutError is an OSError too)
                raise
            except _LostOracle:
                left = deadline.remaining()
                with contextlib.suppress(Exception):  # workers restart after a crash
                    self.client.wait_for_workers(1, timeout=60 if left is None else max(left, 0.1))
            except _SchedulerLost as exc:
                raise self._scheduler_lost(str(exc), rows_of(bounds)) from None
            except OSError as exc:  # Dask's communication (the oracle's own errors come back as data)
                if self._client is not None and self._client.status == "running":
                    raise WorkerCrashedError(
                        f"a Dask connection failed while solving these rows ({type(exc).__name__}: {exc})",
                        rows=rows_of(bounds),
                    ) from exc
                raise self._scheduler_lost(f"{type(exc).__name__}: {exc}", rows_of(bounds)) from None
            else:
                if isinstance(done, ChunkFailure):  # the oracle's own error, re-raised with its rows
                    raise_failure(done)
                return done
        raise AssertionError("unreachable")  # pragma: no cover

    def _expired(self, deadline: Deadline, bounds: list[tuple[int, int]], when: str) -> None:
        if deadline.expired():
            raise SolverTimeoutError(
                f"dask pool call exceeded {deadline.describe()} {when}", rows=rows_of(bounds)
            )

    def _run_once(
        self,
        token: int,
        oracle: MapOracle,
        weights: np.ndarray,
        bounds: list[tuple[int, int]],
        deadline: Deadline,
        out: np.ndarray,
        retry: bool,
    ) -> RunResult | ChunkFailure:
        """One attempt; an oracle's failure is returned (not raised), so that it never meets the
        handlers of Dask's own errors."""
        self._expired(deadline, bounds, "before its tasks were submitted")
        client = self.client
        self._check_connected()
        distributed = self._distributed
        future = self._futures.get(token)
        if future is not None and future.status != "finished":
            self.forget(token)  # the scattered copy was lost (its workers died): send it again
            future = None
        first_use = future is None
        if future is None:  # send the oracle to every worker once; the future stands for it later
            future = self._futures[token] = self._scatter(oracle, deadline, bounds)
            self._expired(deadline, bounds, "while the oracle was sent to the workers")
        t0 = time.perf_counter()
        futures = [client.submit(dask_solve_chunk, future, weights[a:b], a, pure=False) for a, b in bounds]
        crashed = (concurrent.futures.CancelledError, distributed.KilledWorker)
        failure: ChunkFailure | None = None
        try:
            self._wait(futures, deadline)
            seconds: list[float] = []
            for task, (a, b) in zip(futures, bounds):
                error = task.exception() if task.status == "error" else None
                if error is not None and not isinstance(error, crashed):
                    raise error  # raised by Dask itself, outside the oracle
                status, payload, secs = task.result()  # a lost task raises KilledWorker/CancelledError
                if status == "failed":
                    failure = payload  # re-raised by `run`, outside the handlers of Dask's own errors
                    break
                out[a:b] = payload  # z = MAP(w)   [b - a, m]
                seconds.append(secs)
        except (TimeoutError, distributed.TimeoutError) as exc:
            unfinished = [r for f, (a, b) in zip(futures, bounds) if not f.done() for r in range(a, b)]
            restarted = self._cancel_and_restart(futures)
            raise SolverTimeoutError(
                f"dask pool call exceeded {deadline.describe()} ({len(unfinished)} rows unfinished; "
                f"tasks were cancelled, {restarted})",
                rows=unfinished,
            ) from exc
        except crashed as exc:
            # a worker died: its task was lost (KilledWorker) or cancelled with the oracle's copy
            # ("lost dependencies"); the scattered oracle cannot be trusted any more
            lost = [r for f, (a, b) in zip(futures, bounds) if f.status != "finished" for r in range(a, b)]
            client.cancel(futures)
            self.forget(token)  # the next call scatters the oracle again
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
            with contextlib.suppress(Exception):
                client.cancel(futures)
            raise
        if failure is not None:
            return failure
        solve_s = float(sum(seconds))
        return RunResult(
            solve_s=solve_s,
            slowest_s=solve_s / min(self.n_workers(), len(bounds)),
            wall_s=time.perf_counter() - t0,
            first_use=first_use,
        )

    def _scatter(self, oracle: MapOracle, deadline: Deadline, bounds: list[tuple[int, int]]) -> Any:
        """``client.scatter(oracle, broadcast=True)``, retried while crashed workers restart."""
        self.scatters += 1
        for attempt in range(3):
            left = deadline.remaining()
            try:
                kw = {} if left is None else {"timeout": max(left, 1e-3)}
                return self.client.scatter(oracle, broadcast=True, hash=False, **kw)
            except OSError:  # CommClosedError: a worker that was just replaced, or the scheduler is gone
                self._check_connected()
                self._expired(deadline, bounds, "while the oracle was sent to the workers")
                if attempt == 2:
                    raise
                self.client.wait_for_workers(1, timeout=60 if left is None else max(left, 0.1))
                time.sleep(0.5 * (attempt + 1))
        raise AssertionError("unreachable")  # pragma: no cover

    def _wait(self, futures: list[Any], deadline: Deadline) -> None:
        """Wait for every task, in slices: the scheduler connection is checked between them (a lost
        scheduler would leave the tasks pending forever) and Ctrl-C is seen within a slice."""
        distributed = self._distributed
        while True:
            left = deadline.remaining()
            step = WAIT_SLICE_S if left is None else min(WAIT_SLICE_S, max(left, 1e-3))
            try:
                distributed.wait(futures, timeout=step)
                return
            except (TimeoutError, distributed.TimeoutError):
                self._check_connected()
                if deadline.expired():
                    raise

    def _cancel_and_restart(self, futures: list[Any]) -> str:
        """Cancel the tasks and restart the workers still running them (a solve running in a worker
        thread cannot be stopped otherwise); returns what happened, for the error message."""
        client = self.client
        keys = {f.key for f in futures if not f.done()}
        try:
            busy = [w for w, running in client.processing().items() if keys & set(running)]
        except Exception:  # pragma: no cover - the scheduler went away meanwhile
            busy = []
        client.cancel(futures)
        if not busy:
            return "no worker was still running them"
        try:
            client.restart_workers(busy, timeout=RESTART_S, raise_for_error=False)
        except Exception as exc:  # workers without a nanny cannot be restarted
            return (
                f"the {len(busy)} worker(s) running them could not be restarted ({exc}); "
                "a solve already running finishes on its worker first"
            )
        self.restarts += len(busy)
        return f"the {len(busy)} worker(s) running them are being restarted"

    def close(self) -> None:
        """Close the client and cluster this runner opened (a client passed in is left open, the
        oracles scattered through it released)."""
        if self._own_client:
            self._drop_client()
        for token in list(self._futures):
            self.forget(token)
