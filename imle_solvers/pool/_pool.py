"""`SolverPool`: its options, its lifecycle and one solving call.

A call's rows take one path: validated here, routed by the cost model (`_plan.py`, pure), timed by a probe in
the caller when the oracle is new, then solved by the caller's runner or the backend's runner (`_serial.py`,
`_thread.py`, `_process.py`, `_dask.py`, one ``Runner`` interface in `_runner.py`, picked by name in
`_backends.py`) straight into the one output array.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import threading
import time
import weakref
from collections.abc import Callable
from types import TracebackType
from typing import Any

import numpy as np

from .._checks import non_negative, non_negative_int, one_of, positive, positive_int
from ..errors import InvalidWeightsError, SolverTimeoutError
from ..oracle import MapOracle, TorchOracle, check_oracle
from ._address import scheduler_address
from ._backends import BACKENDS, Backend, make_runner
from ._plan import (
    Decision,
    Policy,
    PoolPlan,
    Timings,
    after_caller,
    after_probe,
    after_workers,
    decide,
    next_overhead,
    route,
)
from ._runner import Deadline, Runner, RunnerOptions
from ._serial import SerialRunner

__all__ = ["SolverPool"]


def _default_workers() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - macOS / Windows
        return max(1, os.cpu_count() or 1)


def _close_runner(runner: Runner) -> None:
    """Finalizer: stop the runner the pool holds (the pool itself may be gone)."""
    runner.close()


def _forget_token(
    runner_ref: Callable[[], Runner | None], entries: dict[int, _Known], key: int, token: int
) -> None:
    """Weak-reference callback of a collected oracle: drop what the pool and its runner kept for it."""
    known = entries.get(key)
    if known is not None and known.token == token:
        del entries[key]
    runner = runner_ref()
    if runner is not None:
        runner.forget(token)


@dataclasses.dataclass(eq=False)
class _Known:
    """An oracle the pool has seen: its token (the runners' key), a reference to it, its timings."""

    token: int
    ref: Callable[[], MapOracle | None]
    name: str
    timings: Timings


class SolverPool:
    """Solve ``(N, m)`` batches of MAP problems on workers, rows in order.

    Used as ``pool=`` of [`IMLE`][imle_solvers.IMLE] and the other layers: the forward's ``N·S`` rows
    (``MAP(θ + ε)``, Algorithm 1 of the paper) go out in one call, the backward's (``MAP(θ' + ε)``) in
    another.

    Parameters
    ----------
    workers
        Number of workers (processes, threads, or local Dask workers); default: the usable CPUs.
    backend
        ``"process"``: persistent worker processes (each oracle is pickled once and cached in the
        workers); ``"thread"``: a thread pool (for solvers that release the GIL, or unpicklable
        oracles); ``"serial"``: solve in the caller; ``"dask"``: a ``dask.distributed`` cluster.
    timeout
        Seconds allowed for one [`solve_batch`][imle_solvers.pool.SolverPool.solve_batch] call (``None``: no
        limit); past it [`SolverTimeoutError`][imle_solvers.errors.SolverTimeoutError] is raised. With a
        timeout, the process, thread and Dask backends never solve rows in the caller (where a running
        solve cannot be stopped): busy worker processes are killed and replaced; on threads, CP-SAT,
        HiGHS and CBC solves are stopped through their own APIs and any other running solve is
        abandoned (it finishes in the background); Dask workers still running the call's tasks are
        restarted. The serial backend checks the limit between rows.
    chunksize
        Rows per chunk (equal chunks). Default: sized from the measured solve time. Rows that hold at
        most one chunk of ~20 ms of solving per worker go out as one chunk per worker (fewest round
        trips); slower rows in a guided schedule, as OpenMP's ``schedule(guided)``: each chunk takes about
        ``remaining / 2W`` rows, never less than ~20 ms of solving (nor ten measured round trips), so the
        first chunks are large and the last ones small, and no worker waits long for the others at the
        end of a call.
    min_parallel_seconds
        Batches whose predicted serial solve time is below this are solved in the caller.
    fallback
        Whether the pool may solve a batch in the caller when its cost model predicts no gain from the
        workers. ``None`` (default): on the thread backend yes; on the process and Dask backends only for
        oracles that declare ``in_process_safe = True`` (the library's torch oracles, for instance), so that a
        user oracle that crashes (segfault, ``os._exit``) or hangs never takes the caller down with it.
        ``True``: yes for every oracle (fastest, no isolation for small batches). ``False``: every row goes to
        the workers.
    min_speedup
        Predicted speedup the parallel path must reach to be chosen.
    retries
        How many times a chunk lost to a dead worker process (a Dask call whose oracle copy died with
        a worker) is resent before [`WorkerCrashedError`][imle_solvers.errors.WorkerCrashedError] is
        raised.
    start_method
        ``"forkserver"`` (default where available: one server process imports the library once, with
        one thread, and workers are forked from it, so a replacement starts in milliseconds) or
        ``"spawn"`` (a fresh interpreter per worker). ``"fork"`` is refused: unsafe once torch runs threads.
    worker_threads
        Threads each worker process may use (BLAS, OpenMP, torch); 1 avoids oversubscription.
    max_cached_oracles
        Oracles each worker process keeps unpickled.
    dask_address
        Scheduler address (``"tcp://host:8786"``, ``tls://``; ``host:8786`` is ``tcp://``) for the Dask
        backend; a malformed one is a ``ValueError`` here, before anything connects.
    client
        An existing ``distributed.Client`` for the Dask backend (left open on
        [`close`][imle_solvers.pool.SolverPool.close]).

    Attributes
    ----------
    last_plan : PoolPlan | None
        How the last call ran and why.

    Notes
    -----
    Each oracle is identified by object identity: mutate an oracle after handing it to a pool and the
    workers keep the old copy; call [`forget`][imle_solvers.pool.SolverPool.forget] after mutating it.
    [`TorchOracle`][imle_solvers.TorchOracle] instances are always solved in the caller (the layers
    never send them here: they solve on the weights' device).

    References
    ----------
    Python documentation, "concurrent.futures — Launching parallel tasks" (the futures of the thread backend),
    <https://docs.python.org/3/library/concurrent.futures.html>.

    Python documentation, "multiprocessing — Process-based parallelism" (start methods, pipes and
    ``multiprocessing.connection.wait`` of the process backend),
    <https://docs.python.org/3/library/multiprocessing.html>.

    Dask.distributed documentation (``Client.scatter`` and futures, the Dask backend),
    <https://distributed.dask.org/en/stable/>.

    Examples
    --------
    >>> import numpy as np
    >>> from imle_solvers import SolverPool, TopK
    >>> with SolverPool(backend="serial") as pool:
    ...     pool.solve_batch(TopK(1, 3), np.array([[0.0, 2.0, 1.0]])).tolist()
    [[0.0, 1.0, 0.0]]
    """

    def __init__(
        self,
        workers: int | None = None,
        backend: Backend = "process",
        *,
        timeout: float | None = None,
        chunksize: int | None = None,
        min_parallel_seconds: float = 0.01,
        fallback: bool | None = None,
        min_speedup: float = 1.1,
        retries: int = 1,
        start_method: str | None = None,
        worker_threads: int = 1,
        max_cached_oracles: int = 16,
        dask_address: str | None = None,
        client: Any = None,
    ) -> None:
        one_of("backend", backend, tuple(BACKENDS))
        if workers is not None:
            workers = positive_int("workers", workers)
        if timeout is not None:
            timeout = positive("timeout", timeout)
        if chunksize is not None:
            chunksize = positive_int("chunksize", chunksize)  # 2.0 rows are 2 (a slice bound)
        if fallback is not None:
            one_of("fallback", fallback, (None, True, False))
        if start_method is None:
            methods = multiprocessing.get_all_start_methods()
            start_method = "forkserver" if "forkserver" in methods else "spawn"
        if start_method == "fork":
            raise ValueError("start_method='fork' is unsafe with torch threads; use 'spawn' or 'forkserver'")
        one_of("start_method", start_method, ("spawn", "forkserver"))
        self.backend: str = backend
        """The backend's name."""
        self.workers = int(workers) if workers is not None else _default_workers()
        """Workers requested (a Dask cluster reports its own count)."""
        self.timeout = timeout
        """Seconds allowed per call (``None``: no limit)."""
        self.chunksize = chunksize
        """Rows per chunk (``None``: sized from the timings)."""
        self.min_parallel_seconds = non_negative("min_parallel_seconds", min_parallel_seconds)
        """Predicted in-process time below which the caller solves a batch."""
        self.fallback = None if fallback is None else bool(fallback)
        """Whether the caller may solve rows (``None``: as the backend's isolation and the oracle say)."""
        self.min_speedup = positive("min_speedup", min_speedup)
        """Predicted speed-up the parallel path must reach."""
        self.retries = non_negative_int("retries", retries)
        self.start_method = start_method
        self.worker_threads = positive_int("worker_threads", worker_threads)
        self.max_cached_oracles = positive_int("max_cached_oracles", max_cached_oracles)
        if dask_address is not None:
            try:
                scheduler_address(dask_address)
            except ValueError as exc:
                raise ValueError(f"dask_address {exc}") from None
        self.dask_address = dask_address
        self.last_plan: PoolPlan | None = None
        """How the last call ran and why."""
        options = RunnerOptions(
            workers=self.workers,
            start_method=start_method,
            worker_threads=self.worker_threads,
            max_cached_oracles=self.max_cached_oracles,
            retries=self.retries,
            client=client,
            dask_address=dask_address,
        )
        self._runner: Runner = make_runner(backend, options)  # checks its options; starts nothing yet
        self._caller = SerialRunner()  # where rows are solved when they stay in the caller
        self.overhead_s: float = self._runner.traits.overhead_s
        """Measured fixed cost of one parallel call (running average), seconds."""
        self._entries: dict[int, _Known] = {}
        self._next_token = 0
        self._lock = threading.RLock()  # one call at a time (workers hold one chunk each)
        self._closed = False
        self._counts = {"calls": 0, "rows": 0, "parallel_calls": 0, "in_process_calls": 0, "probe_rows": 0}
        # garbage-collected or never-closed pools still stop their workers (also at interpreter exit)
        self._finalizer = weakref.finalize(self, _close_runner, self._runner)

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> SolverPool:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Stop every worker and release the Dask client/cluster the pool opened (idempotent)."""
        self._closed = True
        self._finalizer()

    @property
    def closed(self) -> bool:
        """Whether [`close`][imle_solvers.pool.SolverPool.close] was called."""
        return self._closed

    def start(self) -> SolverPool:
        """Start the workers now and wait until they are ready (otherwise: on the first parallel call)."""
        self._check_open()
        self._runner.start()
        return self

    def worker_pids(self) -> list[int]:
        """Pids of the live worker processes (process backend; empty otherwise)."""
        return self._runner.pids()

    def forget(self, oracle: MapOracle) -> None:
        """Drop what the pool cached about ``oracle`` (call after mutating it): timings, pickle, futures."""
        known = self._entries.pop(id(oracle), None)
        if known is not None:
            self._runner.forget(known.token)

    def __repr__(self) -> str:
        state = "closed" if self._closed else "running" if self._runner.active() else "idle"
        extra = f", timeout={self.timeout}" if self.timeout is not None else ""
        return (
            f"SolverPool(backend={self.backend!r}, workers={self.workers}{extra}, {state}, "
            f"calls={self._counts['calls']})"
        )

    @property
    def stats(self) -> dict[str, Any]:
        """Counters and the cost model's current estimates (see ``docs/parallel.md``)."""
        return {
            **self._counts,
            **self._runner.counters(),
            "overhead_s": self.overhead_s,
            "oracles": [
                {
                    "oracle": k.name,
                    "serial_row_s": k.timings.serial_row_s,
                    "worker_row_s": k.timings.worker_row_s,
                    "parallel_row_s": k.timings.parallel_row_s,
                }
                for k in self._entries.values()
            ],
        }

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this SolverPool is closed; create a new one")

    def _policy(self) -> Policy:
        return Policy(
            timeout=self.timeout,
            fallback=self.fallback,
            min_parallel_seconds=self.min_parallel_seconds,
            min_speedup=self.min_speedup,
            chunksize=self.chunksize,
        )

    # ------------------------------------------------------------------ oracles
    def _known(self, oracle: MapOracle) -> _Known:
        """The pool's record of ``oracle``, created (and the oracle handed to the runner) on first sight."""
        key = id(oracle)
        known = self._entries.get(key)
        if known is not None and known.ref() is oracle:
            return known
        self._next_token += 1
        token = self._next_token
        # the callback must not hold the pool alive: it reaches the runner through a weak reference
        callback = (lambda r, e, k, t: lambda _ref: _forget_token(r, e, k, t))(
            weakref.ref(self._runner), self._entries, key, token
        )
        try:
            ref: Callable[[], MapOracle | None] = weakref.ref(oracle, callback)
        except TypeError:  # not weak-referenceable: keep it alive while the pool knows it
            ref = (lambda o: lambda: o)(oracle)
        self._runner.prepare(token, oracle)  # the process backend pickles here: failure is immediate
        known = self._entries[key] = _Known(token, ref, type(oracle).__name__, Timings())
        return known

    # ------------------------------------------------------------------ solving
    def solve_batch(self, oracle: MapOracle, weights: np.ndarray) -> np.ndarray:
        """Solve ``(N, m)`` weights in the oracle's sense; returns ``(N, m)`` float64 states in row order.

        The whole batch is validated (``oracle.validate``) before any row is solved or shipped.

        Raises
        ------
        InvalidWeightsError
            Bad rows (named), before anything runs.
        ImleSolversError
            Re-raised from the row that failed, with ``.rows`` the global batch row(s); other exceptions
            keep their type and get ``.rows``, a note, and (from a worker) the worker's traceback.
        WorkerCrashedError
            A worker died on the same rows twice (after ``retries``); the pool has replaced it. On the
            Dask backend also: the scheduler cannot be reached.
        SolverTimeoutError
            The call exceeded ``timeout``.
        TypeError
            The process or Dask backend was given an oracle that cannot be pickled.
        """
        self._check_open()
        check_oracle(oracle)
        weights = oracle.validate(weights)
        if weights.ndim != 2:
            raise InvalidWeightsError(f"a pool solves (N, m) batches, got shape {weights.shape}")
        with self._lock:
            return self._solve(oracle, weights)

    def _solve(self, oracle: MapOracle, weights: np.ndarray) -> np.ndarray:
        """One call: route, probe a new oracle in the caller, decide, solve into ``out``, record."""
        n = weights.shape[0]
        t0 = time.perf_counter()
        deadline = Deadline.start(self.timeout)
        self._counts["calls"] += 1
        self._counts["rows"] += n
        runner, policy = self._runner, self._policy()
        workers = runner.n_workers()
        where = route(
            runner.traits,
            policy,
            rows=n,
            oracle_name=type(oracle).__name__,
            device_native=isinstance(oracle, TorchOracle),
            in_process_safe=bool(getattr(oracle, "in_process_safe", False)),
        )
        if where.where == "caller":  # nothing to plan: no timings kept
            states, _ = self._caller.solve_rows(oracle, weights, 0, deadline)  # the answer itself: no copy
            self._record(
                Decision(mode="in-process", reason=where.reason), rows=n, workers=workers, probe_rows=0, t0=t0
            )
            return states

        known = self._known(oracle)
        out: np.ndarray | None = None  # z = MAP(w)   [N, m], allocated once rows are placed in it
        done = 0
        if where.where == "either" and not known.timings.timed:  # time a new oracle on leading rows
            out = np.empty(weights.shape, dtype=np.float64)
            done, row_s = self._caller.probe(oracle, weights, deadline, out)
            known.timings = after_probe(known.timings, row_s)
            self._counts["probe_rows"] += done
        decision, known.timings = decide(
            known.timings,
            where,
            runner.traits,
            policy,
            rows=n - done,
            offset=done,
            row_bytes=weights[0].nbytes,
            workers=workers,
            overhead_s=self.overhead_s,
        )
        if decision.mode == "in-process":
            if done < n:
                if out is None:  # the whole batch: the caller's states are the answer
                    out, seconds = self._caller.solve_rows(oracle, weights, 0, deadline)
                else:
                    seconds = self._caller.solve(oracle, weights, done, n, deadline, out)
                known.timings = after_caller(known.timings, seconds / (n - done))
        else:
            if deadline.expired():
                raise SolverTimeoutError(f"pool call exceeded {deadline.describe()}", rows=range(done, n))
            if out is None:
                out = np.empty(weights.shape, dtype=np.float64)
            result = runner.run(known.token, oracle, weights, list(decision.bounds), deadline, out)
            known.timings = after_workers(
                known.timings,
                rows=n - done,
                solve_s=result.solve_s,
                wall_s=result.wall_s,
                first_use=result.first_use,
            )
            self.overhead_s = next_overhead(
                self.overhead_s, wall_s=result.wall_s, slowest_s=result.slowest_s, first_use=result.first_use
            )
        assert out is not None  # every path above placed the rows
        self._record(decision, rows=n, workers=workers, probe_rows=done, t0=t0)
        return out

    def _record(self, decision: Decision, *, rows: int, workers: int, probe_rows: int, t0: float) -> None:
        """Count the call and leave its plan in `last_plan`."""
        parallel = decision.mode == "parallel"
        self._counts["parallel_calls" if parallel else "in_process_calls"] += 1
        self.last_plan = PoolPlan(
            backend=self.backend,
            mode=decision.mode,
            rows=rows,
            probe_rows=probe_rows,
            chunks=len(decision.bounds),
            chunksize=max((b - a for a, b in decision.bounds), default=0),
            workers=workers,
            est_row_s=decision.est_row_s,
            est_serial_s=decision.est_serial_s,
            est_parallel_s=decision.est_parallel_s,
            reason=decision.reason,
            wall_s=time.perf_counter() - t0,
        )
