"""`SolverPool`: over 400 lines as one class, a quarter of them its user documentation (docstrings).

Its options, its lifecycle and one solving call. The backends live beside this module (`_thread.py`,
`_process.py`, `_dask.py`, one ``Runner`` interface in `_runner.py`), solving in the caller in
`_serial.py`, the cost model in `_plan.py`.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
import weakref
from collections.abc import Callable
from types import TracebackType
from typing import Any, Literal

import numpy as np

from .._checks import one_of, positive, positive_int
from ..errors import ImleSolversError, InvalidWeightsError, SolverTimeoutError
from ..oracle import MapOracle, TorchOracle, check_oracle
from ._cache import SolutionCache
from ._plan import DEFAULT_OVERHEAD_S, Decision, Entry, PoolPlan, choose, chunk_bounds, ema
from ._runner import Deadline, Runner, make_runner
from ._serial import may_solve_in_caller, probe, solve_in_caller

__all__ = ["SolverPool"]

Backend = Literal["process", "thread", "serial", "dask"]
_BACKENDS = ("process", "thread", "serial", "dask")


def _default_workers() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - macOS / Windows
        return max(1, os.cpu_count() or 1)


def _close_runner(holder: list[Runner | None]) -> None:
    """Finalizer: stop the runner the pool holds (the pool itself may be gone)."""
    runner = holder[0]
    if runner is not None:
        runner.close()


class SolverPool:
    """Solve ``(N, m)`` batches of MAP problems on workers, rows in order.

    Used as ``pool=`` of [`IMLE`][imle_solvers.IMLE] and the other layers: the forward's ``N·S`` rows
    (``MAP(θ + ε)``, Algorithm 1 of the paper) go out in one call, the backward's (``MAP(θ' + ε)``)
    in another.

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
        solve cannot be stopped): busy worker processes are killed and replaced, a thread or Dask task
        that is already solving is abandoned (it finishes in the background). The serial backend checks
        the limit between rows.
    chunksize
        Rows per chunk; default: sized from the measured solve time, one to four chunks per worker of
        at least ~20 ms of solving each.
    min_parallel_seconds
        Batches whose predicted serial solve time is below this are solved in the caller.
    fallback
        Whether the pool may solve a batch in the caller when its cost model predicts no gain from
        the workers. ``None`` (default): on the thread backend yes; on the process and Dask backends
        only for oracles that declare ``in_process_safe = True`` (the library's torch oracles, for
        instance), so that a user oracle that crashes (segfault, ``os._exit``) or hangs never takes
        the caller down with it. ``True``: yes for every oracle (fastest, no isolation for small
        batches). ``False``: every row goes to the workers.
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
        Scheduler address (``"tcp://host:8786"``) for the Dask backend.
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
    [`TorchOracle`][imle_solvers.TorchOracle]
    instances are always solved in the caller (the layers never send them here: they solve on the
    weights' device).

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
        one_of("backend", backend, _BACKENDS)
        if workers is not None:
            positive_int("workers", workers)
        if timeout is not None:
            positive("timeout", timeout)
        if chunksize is not None:
            positive_int("chunksize", chunksize)
        if start_method is None:
            methods = multiprocessing.get_all_start_methods()
            start_method = "forkserver" if "forkserver" in methods else "spawn"
        if start_method == "fork":
            raise ValueError("start_method='fork' is unsafe with torch threads; use 'spawn' or 'forkserver'")
        one_of("start_method", start_method, ("spawn", "forkserver"))
        if (dask_address is not None or client is not None) and backend != "dask":
            raise ValueError("dask_address / client only apply to backend='dask'")
        if backend == "process" and multiprocessing.current_process().daemon:
            raise ImleSolversError(
                f"backend='process' cannot start worker processes inside the daemonic process "
                f"{multiprocessing.current_process().name!r} (a pool worker, a DataLoader worker…: "
                "daemonic processes may not have children); use SolverPool(backend='thread') or "
                "backend='serial' there"
            )
        self.backend: str = backend
        self.workers = int(workers) if workers is not None else _default_workers()
        self.timeout = timeout
        self.chunksize = chunksize
        self.min_parallel_seconds = float(min_parallel_seconds)
        self.fallback = None if fallback is None else bool(fallback)
        self.min_speedup = float(min_speedup)
        self.retries = int(retries)
        self.start_method = start_method
        self.worker_threads = int(worker_threads)
        self.max_cached_oracles = int(max_cached_oracles)
        self.dask_address = dask_address
        self._client = client
        self.last_plan: PoolPlan | None = None
        self.overhead_s: float = DEFAULT_OVERHEAD_S.get(backend, 0.0)
        self._entries: dict[int, Entry] = {}
        self._next_token = 0
        self._lock = threading.RLock()  # one call at a time (workers hold one chunk each)
        self._closed = False
        self._counts = {"calls": 0, "rows": 0, "parallel_calls": 0, "in_process_calls": 0, "probe_rows": 0}
        self._holder: list[Runner | None] = [None]  # the runner, created on first use
        # garbage-collected or never-closed pools still stop their workers (also at interpreter exit)
        self._finalizer = weakref.finalize(self, _close_runner, self._holder)

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
        if self.backend != "serial":
            self._runner().start()
        return self

    def worker_pids(self) -> list[int]:
        """Pids of the live worker processes (process backend; empty otherwise)."""
        runner = self._holder[0]
        return runner.pids() if runner is not None else []

    def forget(self, oracle: MapOracle) -> None:
        """Drop what the pool cached about ``oracle`` (call after mutating it): timings, pickle, futures."""
        entry = self._entries.pop(id(oracle), None)
        runner = self._holder[0]
        if entry is not None and runner is not None:
            runner.forget(entry)

    def __repr__(self) -> str:
        runner = self._holder[0]
        running = runner is not None and runner.active()
        state = "closed" if self._closed else "running" if running else "idle"
        extra = f", timeout={self.timeout}" if self.timeout is not None else ""
        return (
            f"SolverPool(backend={self.backend!r}, workers={self.workers}{extra}, {state}, "
            f"calls={self._counts['calls']})"
        )

    @property
    def stats(self) -> dict[str, Any]:
        """Counters and the cost model's current estimates (see ``docs/parallel.md``)."""
        runner = self._holder[0]
        counters = runner.counters() if runner is not None else {"worker_restarts": 0, "oracles_shipped": 0}
        return {
            **self._counts,
            **counters,
            "overhead_s": self.overhead_s,
            "oracles": [
                {
                    "oracle": e.name,
                    "serial_row_s": e.serial_row_s,
                    "worker_row_s": e.worker_row_s,
                    "parallel_row_s": e.parallel_row_s,
                }
                for e in self._entries.values()
            ],
        }

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this SolverPool is closed; create a new one")

    def _runner(self) -> Runner:
        """The backend's runner (created on first use; it starts its workers lazily)."""
        runner = self._holder[0]
        if runner is None:
            runner = make_runner(
                self.backend,
                self.workers,
                start_method=self.start_method,
                worker_threads=self.worker_threads,
                max_cached_oracles=self.max_cached_oracles,
                retries=self.retries,
                client=self._client,
                dask_address=self.dask_address,
            )
            self._holder[0] = runner
        return runner

    def _n_workers(self) -> int:
        runner = self._holder[0]
        if self.backend == "dask" and runner is not None:
            return runner.n_workers()
        return self.workers

    # ------------------------------------------------------------------ oracles
    def _entry(self, oracle: MapOracle) -> Entry:
        entry = self._entries.get(id(oracle))
        if entry is not None and entry.ref() is oracle:
            return entry
        key, entries = id(oracle), self._entries  # the callback must not hold the pool alive
        try:
            ref: Callable[[], MapOracle | None] = weakref.ref(
                oracle,
                lambda _r, entries=entries, key=key: entries.pop(key, None),  # type: ignore[misc]
            )
        except TypeError:  # not weak-referenceable: keep it alive while the pool knows it
            ref = (lambda o: lambda: o)(oracle)
        self._next_token += 1
        entry = Entry(self._next_token, ref, type(oracle).__name__)
        self._runner().prepare(entry, oracle)  # the process backend pickles here: failure is immediate
        self._entries[key] = entry
        return entry

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
            A worker died on the same rows twice (after ``retries``); the pool has replaced it.
        SolverTimeoutError
            The call exceeded ``timeout``.
        TypeError
            The process backend was given an oracle that cannot be pickled.
        """
        self._check_open()
        check_oracle(oracle)
        if isinstance(oracle, SolutionCache):  # answers cached rows itself, sends the rest back here
            return oracle.solve_batch(weights, pool=self)
        weights = oracle.validate(weights)
        if weights.ndim != 2:
            raise InvalidWeightsError(f"a pool solves (N, m) batches, got shape {weights.shape}")
        with self._lock:
            return self._solve(oracle, weights)

    def _solve(self, oracle: MapOracle, weights: np.ndarray) -> np.ndarray:
        n = weights.shape[0]
        t0 = time.perf_counter()
        deadline = Deadline.start(self.timeout)
        self._counts["calls"] += 1
        self._counts["rows"] += n
        workers = self._n_workers()

        def finish(mode: str, decision: Decision, **kw: Any) -> None:
            self._counts["in_process_calls" if mode == "in-process" else "parallel_calls"] += 1
            self.last_plan = PoolPlan(
                backend=self.backend,
                mode=mode,
                rows=n,
                workers=workers,
                reason=decision.reason,
                est_serial_s=decision.est_serial_s,
                est_parallel_s=decision.est_parallel_s,
                wall_s=time.perf_counter() - t0,
                **kw,
            )

        if n == 0 or isinstance(oracle, TorchOracle) or self.backend == "serial":
            reason = (
                "empty batch"
                if n == 0
                else "TorchOracle: solved in the caller (layers keep it on its device)"
                if isinstance(oracle, TorchOracle)
                else "backend='serial'"
            )
            out = (
                oracle.solve_batch(weights)
                if isinstance(oracle, TorchOracle)
                else solve_in_caller(oracle, weights, 0, deadline)
            )
            finish("in-process", Decision(mode="in-process", reason=reason))
            return out

        entry = self._entry(oracle)
        parts: list[np.ndarray] = []
        done = 0
        in_caller, why_not = may_solve_in_caller(
            oracle, backend=self.backend, timeout=self.timeout, fallback=self.fallback
        )
        if in_caller and entry.serial_row_s is None and entry.worker_row_s is None:
            done = probe(oracle, weights, entry, parts, deadline)
            self._counts["probe_rows"] += done
        rest = n - done
        decision, row_s = choose(
            entry,
            rows=rest,
            in_caller=in_caller,
            why_not=why_not,
            backend=self.backend,
            row_bytes=weights[0].nbytes,
            workers=workers,
            overhead_s=self.overhead_s,
            min_parallel_seconds=self.min_parallel_seconds,
            min_speedup=self.min_speedup,
            chunksize=self.chunksize,
        )

        if decision.mode == "in-process":
            if rest:
                t1 = time.perf_counter()
                parts.append(solve_in_caller(oracle, weights[done:], done, deadline))
                row_wall = (time.perf_counter() - t1) / rest
                # a whole in-process call is a better measurement than the probe's small blocks
                entry.serial_row_s = row_wall if entry.serial_probed else ema(entry.serial_row_s, row_wall)
                entry.serial_probed = False
            out = parts[0] if len(parts) == 1 else np.concatenate(parts)
            finish("in-process", decision, probe_rows=done, est_row_s=row_s)
            return out

        bounds = chunk_bounds(rest, row_s, workers, offset=done, chunksize=self.chunksize)
        if deadline.expired():
            raise SolverTimeoutError(f"pool call exceeded {deadline.describe()}", rows=range(done, n))
        result = self._parallel(entry, weights, bounds, deadline)
        if not result.first_use:  # a call that shipped the oracle pays a one-off cost: not representative
            entry.parallel_row_s = ema(entry.parallel_row_s, result.wall_s / rest)
        parts.append(result.states[done:])
        out = parts[0] if len(parts) == 1 else np.concatenate(parts)
        finish(
            "parallel",
            decision,
            probe_rows=done,
            chunks=len(bounds),
            chunksize=max(b - a for a, b in bounds),
            est_row_s=row_s,
        )
        return out

    def _parallel(
        self, entry: Entry, weights: np.ndarray, bounds: list[tuple[int, int]], deadline: Deadline
    ) -> Any:
        """Run the chunks on the backend's runner and update the timing model."""
        result = self._runner().run(entry, weights, bounds, deadline)
        rows = sum(b - a for a, b in bounds)
        entry.worker_row_s = ema(entry.worker_row_s, result.solve_s / max(rows, 1))
        if entry.serial_row_s is None:
            entry.serial_row_s = entry.worker_row_s
        if not result.first_use:  # first shipment of an oracle is not overhead
            self.overhead_s = ema(self.overhead_s, max(0.0, result.wall_s - result.slowest_s))
        return result
