"""Batched MAP solving on a pool of workers: serial, threads, persistent processes or a Dask cluster.

An I-MLE step makes ``2·N·S`` oracle calls (paper, Algorithm 1: the forward ``MAP(θ + ε)`` and the
target ``MAP(θ' + ε)`` for every row and sample). `map_solve` hands each of
the two ``(N·S, m)`` host batches to a pool in ONE call; [`SolverPool`][imle_solvers.pool.SolverPool] spreads
the rows over
workers and returns the states in row order, or solves them in the caller when parallelism would not
pay (see [`PoolPlan`][imle_solvers.pool.PoolPlan]).

[`SolutionCache`][imle_solvers.pool.SolutionCache] (solution caching, Mulamba et al. 2021) is re-exported
from here.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import math
import multiprocessing
import os
import pickle
import threading
import time
import weakref
from collections.abc import Callable
from types import TracebackType
from typing import Any, Literal

import numpy as np

from ._pool_cache import SolutionCache
from ._pool_worker import ChunkError, raise_failure, solve_chunk
from .errors import InvalidWeightsError, SolverTimeoutError
from .oracle import MapOracle, TorchOracle, check_oracle

__all__ = ["PoolPlan", "SolutionCache", "SolverPool"]

Backend = Literal["process", "thread", "serial", "dask"]
_BACKENDS = ("process", "thread", "serial", "dask")

# A-priori fixed cost of one parallel call (dispatch, wake-up, gather), refined by measurement.
_DEFAULT_OVERHEAD_S = {"process": 1.5e-3, "thread": 2e-4, "dask": 2e-2}
_PIPE_BYTES_PER_S = 1e9  # process/dask: weights out + states back, per byte
_TARGET_CHUNK_S = 2e-2  # a chunk should carry at least this much solving (amortises round trips)
_REMEASURE_EVERY = 32  # after this many calls on one path, take the other once to refresh its timing
_REMEASURE_FIRST = 3  # ... and early, once: first estimates (small probe blocks, cold caches) are rough
_REMEASURE_CLOSE = 8  # ... and more often while the two paths are within 1.5× of each other
_EMA = 0.3  # weight of a new measurement in the running estimates


@dataclasses.dataclass(frozen=True)
class PoolPlan:
    """How the last [`SolverPool.solve_batch`][imle_solvers.pool.SolverPool.solve_batch] call was carried
    out, and why.

    Attributes
    ----------
    backend
        The pool's backend.
    mode
        ``"in-process"`` (the caller solved every row) or ``"parallel"``.
    rows
        Rows in the call.
    probe_rows
        Rows solved in the caller to time a new oracle (part of the answer, not extra work).
    chunks, chunksize
        Chunks sent to workers and their (largest) size; ``0`` when in-process.
    workers
        Workers available to the call.
    est_row_s
        Per-row solve time used for the decision (``None`` when not timed).
    est_serial_s, est_parallel_s
        Predicted in-process and parallel times for the rows that were planned.
    reason
        Human-readable reason for the decision.
    wall_s
        Time the call took.
    """

    backend: str
    mode: str
    rows: int
    probe_rows: int
    chunks: int
    chunksize: int
    workers: int
    est_row_s: float | None
    est_serial_s: float | None
    est_parallel_s: float | None
    reason: str
    wall_s: float


@dataclasses.dataclass(eq=False)
class _Entry:
    """What the pool knows about one oracle: its token, pickled form, Dask future and timings."""

    token: int
    ref: Callable[[], MapOracle | None]
    name: str
    blob: bytes | None = None
    dask_future: Any = None
    serial_row_s: float | None = None  # in-process seconds per row (EMA)
    worker_row_s: float | None = None  # seconds per row inside a worker (EMA)
    parallel_row_s: float | None = None  # wall seconds per row of whole parallel calls (EMA)
    streak: int = 0  # consecutive calls the cost model sent down the same path
    last_mode: str = ""
    remeasures: int = 0  # times the other path was taken to refresh its timing
    serial_probed: bool = False  # serial_row_s still comes from the probe only


def _ema(old: float | None, new: float) -> float:
    return new if old is None else (1 - _EMA) * old + _EMA * new


class _Resources:
    """The pool's processes, threads and Dask client; closed by the pool or by its finalizer."""

    def __init__(self) -> None:
        self.fleet: Any = None
        self.executor: concurrent.futures.ThreadPoolExecutor | None = None
        self.dask: Any = None

    def close(self) -> None:
        if self.fleet is not None:
            self.fleet.close()
        if self.executor is not None:
            self.executor.shutdown(wait=False, cancel_futures=True)
            self.executor = None
        if self.dask is not None:
            self.dask.close()
            self.dask = None


def _default_workers() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - macOS / Windows
        return max(1, os.cpu_count() or 1)


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
        limit). On the process backend
        busy workers are killed and replaced and
        [`SolverTimeoutError`][imle_solvers.errors.SolverTimeoutError] is raised;
        rows solved in the caller or on threads are checked between rows (a running solve cannot be
        interrupted there).
    chunksize
        Rows per chunk; default: sized from the measured solve time, one to four chunks per worker of
        at least ~20 ms of solving each.
    min_parallel_seconds
        Batches whose predicted serial solve time is below this are solved in the caller.
    fallback
        Let the pool solve in the caller when its cost model predicts no gain (``True``, the default:
        a pool is then never much slower than serial). ``False`` sends every row to the workers.
    min_speedup
        Predicted speedup the parallel path must reach to be chosen.
    retries
        How many times a chunk lost to a dead worker process is resent before
        [`WorkerCrashedError`][imle_solvers.errors.WorkerCrashedError] is raised.
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
        fallback: bool = True,
        min_speedup: float = 1.1,
        retries: int = 1,
        start_method: str | None = None,
        worker_threads: int = 1,
        max_cached_oracles: int = 16,
        dask_address: str | None = None,
        client: Any = None,
    ) -> None:
        if backend not in _BACKENDS:
            raise ValueError(f"backend must be one of {_BACKENDS}, got {backend!r}")
        if workers is not None and (int(workers) != workers or workers < 1):
            raise ValueError(f"workers must be a positive integer, got {workers}")
        if timeout is not None and not timeout > 0:
            raise ValueError(f"timeout must be positive seconds or None, got {timeout}")
        if chunksize is not None and (int(chunksize) != chunksize or chunksize < 1):
            raise ValueError(f"chunksize must be a positive integer or None, got {chunksize}")
        if start_method is None:
            methods = multiprocessing.get_all_start_methods()
            start_method = "forkserver" if "forkserver" in methods else "spawn"
        if start_method not in ("spawn", "forkserver"):
            raise ValueError("start_method must be 'spawn' or 'forkserver' ('fork' is unsafe with torch)")
        if (dask_address is not None or client is not None) and backend != "dask":
            raise ValueError("dask_address / client only apply to backend='dask'")
        self.backend: str = backend
        self.workers = int(workers) if workers is not None else _default_workers()
        self.timeout = timeout
        self.chunksize = chunksize
        self.min_parallel_seconds = float(min_parallel_seconds)
        self.fallback = bool(fallback)
        self.min_speedup = float(min_speedup)
        self.retries = int(retries)
        self.start_method = start_method
        self.worker_threads = int(worker_threads)
        self.max_cached_oracles = int(max_cached_oracles)
        self.dask_address = dask_address
        self._client = client
        self.last_plan: PoolPlan | None = None
        self.overhead_s: float = _DEFAULT_OVERHEAD_S.get(backend, 0.0)
        self._entries: dict[int, _Entry] = {}
        self._next_token = 0
        self._lock = threading.RLock()  # one call at a time (workers hold one chunk each)
        self._closed = False
        self._counts = {"calls": 0, "rows": 0, "parallel_calls": 0, "in_process_calls": 0, "probe_rows": 0}
        self._res = _Resources()
        # garbage-collected or never-closed pools still stop their workers (also at interpreter exit)
        self._finalizer = weakref.finalize(self, self._res.close)

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> SolverPool:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
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
        if self.backend == "process":
            self._fleet().wait_ready()
        elif self.backend == "thread":
            self._executor()
        elif self.backend == "dask":
            self._dask()
        return self

    def worker_pids(self) -> list[int]:
        """Pids of the live worker processes (process backend; empty otherwise)."""
        return self._res.fleet.pids() if self._res.fleet is not None else []

    def forget(self, oracle: MapOracle) -> None:
        """Drop what the pool cached about ``oracle`` (call after mutating it): timings, pickle, futures."""
        entry = self._entries.pop(id(oracle), None)
        if entry is not None and entry.dask_future is not None and self._res.dask is not None:
            entry.dask_future.release()

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("running" if self.worker_pids() or self._res.executor
                                               or self._res.dask else "idle")
        extra = f", timeout={self.timeout}" if self.timeout is not None else ""
        return (f"SolverPool(backend={self.backend!r}, workers={self.workers}{extra}, {state}, "
                f"calls={self._counts['calls']})")

    @property
    def stats(self) -> dict[str, Any]:
        """Counters and the cost model's current estimates (see ``docs/parallel.md``)."""
        fleet = self._res.fleet
        return {
            **self._counts,
            "worker_restarts": fleet.restarts if fleet is not None else 0,
            "oracles_shipped": (fleet.shipments if fleet is not None else 0)
            + (self._res.dask.scatters if self._res.dask is not None else 0),
            "overhead_s": self.overhead_s,
            "oracles": [
                {"oracle": e.name, "serial_row_s": e.serial_row_s, "worker_row_s": e.worker_row_s,
                 "parallel_row_s": e.parallel_row_s}
                for e in self._entries.values()
            ],
        }

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this SolverPool is closed; create a new one")

    def _fleet(self) -> Any:
        if self._res.fleet is None:
            from ._pool_process import ProcessFleet

            self._res.fleet = ProcessFleet(self.workers, self.start_method, self.worker_threads,
                                           self.max_cached_oracles)
        return self._res.fleet

    def _executor(self) -> concurrent.futures.ThreadPoolExecutor:
        if self._res.executor is None:
            self._res.executor = concurrent.futures.ThreadPoolExecutor(
                self.workers, thread_name_prefix="imle-solvers-pool")
        return self._res.executor

    def _dask(self) -> Any:
        if self._res.dask is None:
            from ._pool_dask import DaskRunner

            self._res.dask = DaskRunner(self.workers, client=self._client, address=self.dask_address)
        return self._res.dask

    def _n_workers(self) -> int:
        if self.backend == "dask" and self._res.dask is not None:
            return int(self._res.dask.n_workers())
        return self.workers

    # ------------------------------------------------------------------ oracles
    def _entry(self, oracle: MapOracle) -> _Entry:
        entry = self._entries.get(id(oracle))
        if entry is not None and entry.ref() is oracle:
            return entry
        key, entries = id(oracle), self._entries  # the callback must not hold the pool alive
        try:
            ref: Callable[[], MapOracle | None] = weakref.ref(
                oracle, lambda _r, entries=entries, key=key: entries.pop(key, None))  # type: ignore[misc]
        except TypeError:  # not weak-referenceable: keep it alive while the pool knows it
            ref = (lambda o: (lambda: o))(oracle)
        self._next_token += 1
        entry = _Entry(self._next_token, ref, type(oracle).__name__)
        if self.backend == "process":  # pickled once, at submission, so that failure is immediate
            entry.blob = self._pickle(oracle)
        self._entries[key] = entry
        return entry

    @staticmethod
    def _pickle(oracle: MapOracle) -> bytes:
        try:
            return pickle.dumps(oracle, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:
            raise TypeError(
                f"{type(oracle).__name__} cannot be sent to worker processes: it does not pickle ({exc}). "
                "Make it picklable (module-level functions instead of lambdas, drop locks/solver handles in "
                "__getstate__ and rebuild them lazily), or use SolverPool(backend='thread') or "
                "backend='serial'."
            ) from exc

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
        deadline = None if self.timeout is None else t0 + self.timeout
        self._counts["calls"] += 1
        self._counts["rows"] += n
        workers = self._n_workers()
        plan_kw: dict[str, Any] = {"backend": self.backend, "rows": n, "workers": workers}
        if n == 0 or isinstance(oracle, TorchOracle) or self.backend == "serial":
            reason = ("empty batch" if n == 0 else "TorchOracle: solved in the caller (layers keep it on "
                      "its device)" if isinstance(oracle, TorchOracle) else "backend='serial'")
            out = (oracle.solve_batch(weights) if isinstance(oracle, TorchOracle)
                   else self._in_process(oracle, weights, 0, deadline))
            self._counts["in_process_calls"] += 1
            self._finish(plan_kw, "in-process", 0, 0, 0, None, None, None, reason, t0)
            return out

        entry = self._entry(oracle)
        parts: list[np.ndarray] = []
        done = 0
        if self.fallback and entry.serial_row_s is None and entry.worker_row_s is None \
                and not (self.timeout is not None and self.backend in ("process", "dask")):
            done = self._probe(oracle, weights, entry, parts, deadline)
        rest = n - done
        timed = [t for t in (entry.serial_row_s, entry.worker_row_s) if t is not None]
        # in-process per-row time: the lower of the caller's and the workers' (same code, one thread
        # each); taking the lower one errs towards staying in-process
        serial_row = min(timed) if timed else None
        row_s = entry.worker_row_s if entry.worker_row_s is not None else serial_row
        if rest == 0:
            mode, reason, est_serial, est_parallel = "in-process", "all rows solved while timing", None, None
        elif not self.fallback:
            mode, reason, est_serial, est_parallel = "parallel", "fallback=False", None, None
        elif row_s is None or serial_row is None:
            mode, reason = "parallel", "timed in the workers (timeout set)"
            est_serial = est_parallel = None
        else:
            mode, reason, est_serial, est_parallel = self._decide(entry, weights, rest, serial_row, row_s,
                                                                  workers)

        if mode == "in-process":
            if rest:
                t1 = time.perf_counter()
                parts.append(self._in_process(oracle, weights[done:], done, deadline))
                row_wall = (time.perf_counter() - t1) / rest
                # a whole in-process call is a better measurement than the probe's small blocks
                entry.serial_row_s = row_wall if entry.serial_probed else _ema(entry.serial_row_s, row_wall)
                entry.serial_probed = False
            out = parts[0] if len(parts) == 1 else np.concatenate(parts)
            self._counts["in_process_calls"] += 1
            self._finish(plan_kw, "in-process", done, 0, 0, row_s, est_serial, est_parallel, reason, t0)
            return out

        bounds = self._chunks(rest, row_s, workers, offset=done)
        if deadline is not None and time.perf_counter() > deadline:
            raise SolverTimeoutError(f"pool call exceeded timeout={self.timeout} s",
                                     rows=range(done, n))
        remaining = None if deadline is None else deadline - time.perf_counter()
        t1 = time.perf_counter()
        states, first = self._parallel(oracle, entry, weights, bounds, remaining)
        if not first:  # a call that shipped the oracle pays a one-off cost: not representative
            entry.parallel_row_s = _ema(entry.parallel_row_s, (time.perf_counter() - t1) / rest)
        parts.append(states[done:])
        out = parts[0] if len(parts) == 1 else np.concatenate(parts)
        self._counts["parallel_calls"] += 1
        size = max(b - a for a, b in bounds)
        self._finish(plan_kw, "parallel", done, len(bounds), size, row_s, est_serial, est_parallel, reason,
                     t0)
        return out

    def _finish(self, plan_kw: dict[str, Any], mode: str, probe: int, chunks: int, size: int,
                row_s: float | None, est_serial: float | None, est_parallel: float | None, reason: str,
                t0: float) -> None:
        self.last_plan = PoolPlan(mode=mode, probe_rows=probe, chunks=chunks, chunksize=size, est_row_s=row_s,
                                  est_serial_s=est_serial, est_parallel_s=est_parallel, reason=reason,
                                  wall_s=time.perf_counter() - t0, **plan_kw)

    def _decide(self, entry: _Entry, weights: np.ndarray, rest: int, serial_row: float, row_s: float,
                workers: int) -> tuple[str, str, float, float]:
        """The cost model: in-process ``rest · t_serial`` against the parallel time.

        The parallel time is the measured wall time per row of earlier parallel calls when there are
        any, else ``overhead + transfer + rest · t_worker / W``.
        """
        est_serial = rest * serial_row  # predicted in-process seconds
        n_chunks = len(self._chunks(rest, row_s, workers, 0))
        transfer = 0.0 if self.backend == "thread" else 2 * weights[:rest].nbytes / _PIPE_BYTES_PER_S
        est_parallel = self.overhead_s + transfer + rest * row_s / min(workers, n_chunks)
        if entry.parallel_row_s is not None:  # measured beats modelled: whole parallel calls, wall time
            est_parallel = rest * entry.parallel_row_s
        if workers < 2 and self.backend != "dask":
            return "in-process", "one worker cannot beat the caller", est_serial, est_parallel
        if est_serial < self.min_parallel_seconds:
            return ("in-process", f"predicted {est_serial * 1e3:.2f} ms < min_parallel_seconds="
                    f"{self.min_parallel_seconds * 1e3:.1f} ms", est_serial, est_parallel)
        speedup = est_serial / est_parallel
        if speedup >= self.min_speedup:
            mode, reason = "parallel", f"predicted speed-up {speedup:.2f}×"
        else:
            mode, reason = "in-process", f"predicted speed-up {speedup:.2f}× < min_speedup={self.min_speedup}"
        # loads and caches change: after a long run on one path, time the other path once
        entry.streak = entry.streak + 1 if mode == entry.last_mode else 1
        entry.last_mode = mode
        close = 1 / 1.5 < speedup < 1.5  # a wrong choice costs little but should not last
        every = _REMEASURE_FIRST if entry.remeasures == 0 else _REMEASURE_CLOSE if close else _REMEASURE_EVERY
        if entry.streak >= every:
            entry.streak = 0
            entry.remeasures += 1
            mode = "in-process" if mode == "parallel" else "parallel"
            reason = f"re-measuring the {mode} path ({reason})"
        return mode, reason, est_serial, est_parallel

    def _chunks(self, rows: int, row_s: float | None, workers: int, offset: int) -> list[tuple[int, int]]:
        """Row ranges: ``chunksize`` if given, else ``W … 4W`` chunks of ≥ ~20 ms of solving each.

        One chunk per worker minimises round trips (each costs a wake-up on both sides, milliseconds on
        a busy machine); up to four per worker balance solves of uneven length.
        """
        if self.chunksize is not None:
            size = self.chunksize
        else:
            total = rows * (row_s if row_s is not None else _TARGET_CHUNK_S)
            count = min(rows, max(workers, min(4 * workers, math.ceil(total / _TARGET_CHUNK_S))))
            size = math.ceil(rows / max(count, 1))
        return [(offset + a, offset + min(a + size, rows)) for a in range(0, rows, size)]

    def _probe(self, oracle: MapOracle, weights: np.ndarray, entry: _Entry, parts: list[np.ndarray],
               deadline: float | None) -> int:
        """Solve leading rows in the caller to time a new oracle; returns how many were solved.

        Blocks of 2, 4, 8, … rows go through one ``solve_batch``-like call each (an oracle that batches
        internally is timed as it will run), until ~2 ms were spent or a quarter of the batch is done;
        the best block's time per row is the estimate (the first block pays for cold caches).
        """
        n = weights.shape[0]
        done, spent, size, rate = 0, 0.0, 2, math.inf
        while done < n and (done == 0 or (spent < 2e-3 and done < n // 4)):
            k = min(size, n - done)
            t1 = time.perf_counter()
            parts.append(self._in_process(oracle, weights[done:done + k], done, deadline))
            dt = time.perf_counter() - t1
            spent, done, size, rate = spent + dt, done + k, size * 2, min(rate, dt / k)  # first: coldest
        entry.serial_row_s = rate
        entry.serial_probed = True
        self._counts["probe_rows"] += done
        return done

    def _in_process(self, oracle: MapOracle, weights: np.ndarray, start: int, deadline: float | None
                    ) -> np.ndarray:
        try:
            out, _ = solve_chunk(oracle, weights, start, "in-process", deadline)
        except ChunkError as err:
            failed = err
        else:
            return out
        raise_failure(failed.failure, live=failed.original)  # outside `except`: no chained ChunkError

    def _parallel(self, oracle: MapOracle, entry: _Entry, weights: np.ndarray, bounds: list[tuple[int, int]],
                  timeout: float | None) -> tuple[np.ndarray, bool]:
        """Run the chunks on the backend and update the timing model.

        Returns the full-size states array and whether this call shipped the oracle (first use).
        """
        if self.backend == "process":
            fleet = self._fleet()
            shipped = fleet.shipments
            assert entry.blob is not None
            out, result = fleet.run(entry.token, entry.blob, weights, bounds, timeout, self.retries)
            rows, busy, wall = result.rows, result.busy_s, result.wall_s
            solve_s, slowest = result.solve_s, max(busy) if busy else 0.0
            measure_overhead = fleet.shipments == shipped  # first shipment of an oracle is not overhead
        elif self.backend == "thread":
            out, seconds, wall = self._run_threads(oracle, weights, bounds, timeout)
            solve_s = float(sum(seconds))
            slowest = solve_s / min(self.workers, len(bounds))
            measure_overhead = True
        else:  # dask
            runner = self._dask()
            if entry.dask_future is None:
                entry.dask_future = runner.scatter(oracle)
                measure_overhead = False
            else:
                measure_overhead = True
            out, seconds, wall = runner.run(entry.dask_future, weights, bounds, timeout)
            solve_s = float(sum(seconds))
            slowest = solve_s / min(self._n_workers(), len(bounds))
        rows = sum(b - a for a, b in bounds)
        entry.worker_row_s = _ema(entry.worker_row_s, solve_s / max(rows, 1))
        if entry.serial_row_s is None:
            entry.serial_row_s = entry.worker_row_s
        if measure_overhead:
            self.overhead_s = _ema(self.overhead_s, max(0.0, wall - slowest))
        return out, not measure_overhead

    def _run_threads(self, oracle: MapOracle, weights: np.ndarray, bounds: list[tuple[int, int]],
                     timeout: float | None) -> tuple[np.ndarray, list[float], float]:
        executor = self._executor()
        t0 = time.perf_counter()
        deadline = None if timeout is None else t0 + timeout
        futures = {executor.submit(solve_chunk, oracle, weights[a:b], a, "thread", deadline): (a, b)
                   for a, b in bounds}
        try:
            done, not_done = concurrent.futures.wait(futures, timeout=timeout,
                                                     return_when=concurrent.futures.FIRST_EXCEPTION)
        except BaseException:
            for f in futures:
                f.cancel()
            raise
        out = np.empty(weights.shape, dtype=np.float64)
        seconds: list[float] = []
        failed = [f for f in done if f.exception() is not None]
        if failed:
            for f in not_done:
                f.cancel()
            first = min(failed, key=lambda f: futures[f][0])
            exc = first.exception()
            if isinstance(exc, ChunkError):
                raise_failure(exc.failure, live=exc.original)
            raise exc  # type: ignore[misc]
        if not_done:
            for f in not_done:
                f.cancel()
            rows = [r for f in not_done for r in range(*futures[f])]
            # threads cannot be killed: a solve already running finishes in the background
            self._res.executor = None
            executor.shutdown(wait=False, cancel_futures=True)
            raise SolverTimeoutError(f"pool call exceeded timeout={timeout} s ({len(rows)} rows unfinished)",
                                     rows=rows)
        for f, (a, b) in futures.items():
            states, secs = f.result()
            out[a:b] = states
            seconds.append(secs)
        return out, seconds, time.perf_counter() - t0
