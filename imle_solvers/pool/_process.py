"""The process backend of [`SolverPool`][imle_solvers.pool.SolverPool]: persistent worker processes on pipes.

Design
------
* ``W`` worker processes, started once (``forkserver`` or ``spawn``: ``fork`` is unsafe once torch has
  started threads) with ``OMP_NUM_THREADS=1`` & co. in their environment and ``torch.set_num_threads(1)``
  in their initialiser, so that ``W`` solvers use ``W`` cores and not ``W × cores`` threads.
* One duplex pipe per worker. The caller thread drives everything with
  `multiprocessing.connection.wait` over the pipes *and* the process sentinels, so a worker that
  dies (SIGKILL, segfault) is noticed at once, and a time-out is a plain ``wait`` time-out.
* An oracle is pickled once by the pool and sent to a worker once (keyed by a token); workers keep up
  to ``max_oracles`` of them (least recently used first out).
* A worker holds at most one chunk at a time: it is only written to while it waits in ``recv``, so
  the caller never blocks on a full pipe while the worker blocks sending its result (no deadlock),
  and a chunk lost to a dead worker is exactly known.
"""

from __future__ import annotations

import collections
import contextlib
import multiprocessing
import pickle
import time
from collections.abc import Callable
from multiprocessing.connection import wait as mp_wait
from typing import Any

import numpy as np

from .._checks import one_of
from ..errors import ImleSolversError, SolverTimeoutError, WorkerCrashedError
from ..oracle import MapOracle
from ._failure import ChunkFailure, raise_failure
from ._runner import Deadline, RunnerOptions, RunnerTraits, RunResult, rows_of
from ._worker import worker_main
from ._worker_process import Chunk, WorkerProcess, kill_worker, shutdown_workers, spawn_worker

__all__ = ["ProcessRunner"]

STARTUP_TIMEOUT_S = 120.0
"""Seconds to wait for worker processes to import and report ready."""


class ProcessRunner:
    """``workers`` persistent worker processes (see the module docstring); a ``Runner``.

    Reads ``workers``, ``start_method`` (``"spawn"`` or ``"forkserver"``; ``"fork"`` is refused, unsafe
    with torch threads), ``worker_threads`` (threads per worker for BLAS/OpenMP/torch),
    ``max_cached_oracles`` (oracles each worker keeps unpickled) and ``retries`` from the options.

    Raises
    ------
    ValueError
        For ``start_method="fork"`` or an unknown start method.
    ImleSolversError
        In a daemonic process (a pool worker, a ``DataLoader`` worker), which may not have children.
    """

    traits = RunnerTraits(
        name="process", in_caller=False, isolated=True, transfers=True, local=True, overhead_s=1.5e-3
    )
    worker_target: Callable[..., None] = staticmethod(worker_main)
    """The main loop a worker process runs (`worker_main`)."""

    def __init__(self, options: RunnerOptions, startup_timeout: float = STARTUP_TIMEOUT_S) -> None:
        start_method = options.start_method
        if start_method == "fork":
            raise ValueError("start_method='fork' is unsafe with torch threads; use 'spawn' or 'forkserver'")
        one_of("start_method", start_method, ("spawn", "forkserver"))
        if multiprocessing.current_process().daemon:
            raise ImleSolversError(
                f"backend='process' cannot start worker processes inside the daemonic process "
                f"{multiprocessing.current_process().name!r} (a pool worker, a DataLoader worker…: "
                "daemonic processes may not have children); use SolverPool(backend='thread') or "
                "backend='serial' there"
            )
        self.size = options.workers
        self.ctx: Any = multiprocessing.get_context(start_method)
        if start_method == "forkserver":  # the server imports the worker module once; forks are then cheap
            self.ctx.set_forkserver_preload(["imle_solvers.pool._worker"])
        self.threads = options.worker_threads
        self.max_oracles = options.max_cached_oracles
        self.startup_timeout = startup_timeout
        self.retries = options.retries
        self.workers: list[WorkerProcess] = []
        self._blobs: dict[int, bytes] = {}  # token → the pickled oracle
        self.restarts = 0
        """Workers replaced after a crash or a time-out."""
        self.shipments = 0
        """Oracle blobs sent to workers."""
        self._call_id = 0
        self._ever_ready = False  # until one worker has started, start one at a time (a scout)

    # ------------------------------------------------------------------ lifecycle
    def pids(self) -> list[int]:
        """Pids of the live worker processes."""
        return [w.process.pid for w in self.workers if w.process.pid is not None]

    def n_workers(self) -> int:
        """Worker processes (each solves one chunk at a time)."""
        return self.size

    def counters(self) -> dict[str, int]:
        """Workers replaced and oracle blobs sent."""
        return {"worker_restarts": self.restarts, "oracles_shipped": self.shipments}

    def active(self) -> bool:
        """Whether worker processes are running."""
        return bool(self.workers)

    def prepare(self, token: int, oracle: MapOracle) -> None:
        """Pickle the oracle once, when the pool first sees it, so that an unpicklable one fails at once."""
        try:
            self._blobs[token] = pickle.dumps(oracle, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:
            raise TypeError(
                f"{type(oracle).__name__} cannot be sent to worker processes: it does not pickle ({exc}). "
                "Make it picklable (module-level functions instead of lambdas, drop locks/solver handles in "
                "__getstate__ and rebuild them lazily), or use SolverPool(backend='thread') or "
                "backend='serial'."
            ) from exc

    def forget(self, token: int) -> None:
        """Drop the pickled oracle; workers drop their copies themselves (least recently used first)."""
        self._blobs.pop(token, None)

    def _spawn(self) -> WorkerProcess:
        worker = spawn_worker(self.ctx, self.threads, self.worker_target)
        self.workers.append(worker)
        return worker

    def start(self) -> None:
        """Start the workers and wait until they are ready."""
        self.wait_ready()

    def spawn_missing(self) -> None:
        """Start missing workers (returns at once; they import in the background).

        Until a first worker has reported ready, only that one is started: a worker that cannot start
        prints its traceback once, not once per worker and retry.
        """
        for w in [w for w in self.workers if not w.process.is_alive()]:
            self._discard(w)  # died between calls
            self.restarts += 1
        target = self.size if self._ever_ready else 1
        while len(self.workers) < target:
            self._spawn()

    def wait_ready(self) -> None:
        """Block until every live worker has reported ready (or raise if one cannot start)."""
        self.spawn_missing()
        end = time.monotonic() + self.startup_timeout
        while len(self.workers) < self.size or not all(w.ready for w in self.workers):
            remaining = end - time.monotonic()
            if remaining <= 0:
                raise WorkerCrashedError(f"pool workers did not start within {self.startup_timeout:.0f} s")
            for w in self._pump(mp_wait(self._waitables(), timeout=min(remaining, 0.5)), -1, None):
                self._replace(w)
            self.spawn_missing()

    def _start_failed(self, w: WorkerProcess, rows: list[int]) -> None:
        code = w.process.exitcode
        self._discard(w)
        raise WorkerCrashedError(
            f"a pool worker died while starting (exit code {code}; its own traceback, if any, is printed "
            "above). A script that creates a process pool at import time needs the "
            "`if __name__ == '__main__':` guard; the main module must import in a fresh interpreter. "
            "Or use backend='thread'",
            rows=rows,
        )

    def close(self, grace: float = 1.0) -> None:
        """Stop every worker (idempotent)."""
        shutdown_workers(self.workers, grace)

    def kill_all(self) -> None:
        """Kill every worker at once (Ctrl-C path)."""
        shutdown_workers(self.workers, 0.0)

    def _discard(self, w: WorkerProcess) -> None:
        with contextlib.suppress(ValueError):
            self.workers.remove(w)
        kill_worker(w)

    def _replace(self, w: WorkerProcess, rows: list[int] | None = None) -> None:
        if not w.ready:  # no retry: it would print the same traceback again
            self._start_failed(w, rows or [])
        self._discard(w)
        self.restarts += 1
        self._spawn()

    def _waitables(self) -> list[Any]:
        return [w.conn for w in self.workers] + [w.process.sentinel for w in self.workers]

    # ------------------------------------------------------------------ messages
    def _pump(
        self, ready: list[Any], call_id: int, on_done: Callable[[WorkerProcess, Chunk, Any], None] | None
    ) -> list[WorkerProcess]:
        """Read every available message; return workers found dead (their ``job`` still set)."""
        dead: list[WorkerProcess] = []
        by_conn = {id(w.conn): w for w in self.workers}
        by_sentinel = {w.process.sentinel: w for w in self.workers}
        suspects: list[WorkerProcess] = []
        for obj in ready:
            w = by_conn.get(id(obj))
            if w is None:
                w = by_sentinel.get(obj)
                if w is not None:
                    suspects.append(w)
                continue
            try:
                while w.conn.poll():
                    self._handle(w, w.conn.recv(), call_id, on_done)
            except (EOFError, OSError):
                w.process.join(1.0)  # the pipe closed: the process is exiting
                suspects.append(w)
        for w in suspects:
            if w in dead:
                continue
            with contextlib.suppress(EOFError, OSError):  # messages sent just before dying
                while w.conn.poll():
                    self._handle(w, w.conn.recv(), call_id, on_done)
            if not w.process.is_alive() or w.conn.closed:
                dead.append(w)
        return dead

    def _handle(
        self,
        w: WorkerProcess,
        msg: tuple[Any, ...],
        call_id: int,
        on_done: Callable[[WorkerProcess, Chunk, Any], None] | None,
    ) -> None:
        kind = msg[0]
        if kind == "ready":
            w.ready, w.pid = True, msg[1]
            self._ever_ready = True
            return
        job, w.job = w.job, None
        if job is None or job[0] != call_id or on_done is None:
            return  # a stale answer from an abandoned call
        on_done(w, job[1], msg)

    def _send_oracle(self, w: WorkerProcess, token: int, blob: bytes) -> None:
        if token in w.tokens:
            w.tokens.move_to_end(token)
            return
        w.conn.send(("oracle", token, blob))
        self.shipments += 1
        w.tokens[token] = None
        while len(w.tokens) > self.max_oracles:
            old, _ = w.tokens.popitem(last=False)
            w.conn.send(("forget", old))

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
        """Solve ``weights`` (validated, ``(N, m)``) in the given row chunks into ``out``.

        Raises
        ------
        WorkerCrashedError
            A worker died with a chunk that was already retried ``retries`` times.
        SolverTimeoutError
            The call exceeded its deadline; workers busy with this call are killed and replaced.
        """
        if token not in self._blobs:
            self.prepare(token, oracle)
        blob, retries = self._blobs[token], self.retries
        shipped = self.shipments
        self.wait_ready()  # start-up time is not part of the call's time-out
        self._call_id += 1
        call_id = self._call_id
        t0 = time.perf_counter()
        pending = collections.deque(Chunk(i, a, b) for i, (a, b) in enumerate(bounds))
        left = len(pending)
        failure: list[ChunkFailure] = []
        for w in self.workers:
            w.busy_s = 0.0

        def on_done(w: WorkerProcess, chunk: Chunk, msg: tuple[Any, ...]) -> None:
            nonlocal left
            if msg[0] == "done":
                out[chunk.start : chunk.stop] = msg[3]  # z = MAP(w)   [stop - start, m]
                w.busy_s += msg[4]
                left -= 1
            elif msg[0] == "failed":
                failure.append(msg[3])

        try:
            while left:
                for w in self.workers:  # dispatch: one chunk per idle, ready worker
                    if pending and w.ready and w.job is None and w.process.is_alive():
                        chunk = pending.popleft()
                        try:
                            self._send_oracle(w, token, blob)
                            w.conn.send(
                                (
                                    "solve",
                                    call_id,
                                    chunk.chunk_id,
                                    token,
                                    chunk.start,
                                    weights[chunk.start : chunk.stop],
                                )
                            )
                        except OSError:  # it died just now: its sentinel fires below
                            pending.appendleft(chunk)
                            continue
                        chunk.attempts += 1
                        w.job = (call_id, chunk)
                wait_s = deadline.remaining()
                if wait_s is not None and wait_s <= 0:
                    self._time_out(call_id, deadline, pending)
                # bounded waits: a Ctrl-C handled by another thread is seen within 0.5 s
                ready = mp_wait(self._waitables(), timeout=0.5 if wait_s is None else min(wait_s, 0.5))
                dead = self._pump(ready, call_id, on_done)
                if failure:
                    raise_failure(failure[0])
                for w in dead:
                    lost = w.job[1] if w.job is not None and w.job[0] == call_id else None
                    code = w.process.exitcode
                    self._replace(w, rows_of(pending) + rows_of([lost] if lost else []))
                    if lost is None:
                        continue
                    if lost.attempts > retries:
                        raise WorkerCrashedError(
                            f"a pool worker died (exit code {code}) while solving these rows"
                            f"{' (after a retry)' if retries else ''}; it has been replaced",
                            rows=range(lost.start, lost.stop),
                        )
                    pending.appendleft(lost)
        except Exception:
            raise
        except BaseException:  # KeyboardInterrupt / SystemExit: leave no child behind
            self.kill_all()
            raise
        busy = [w.busy_s for w in self.workers]
        return RunResult(
            solve_s=float(sum(busy)),
            slowest_s=max(busy, default=0.0),
            wall_s=time.perf_counter() - t0,
            first_use=self.shipments != shipped,
        )

    def _time_out(self, call_id: int, deadline: Deadline, pending: collections.deque[Chunk]) -> None:
        stuck = [w for w in self.workers if w.job is not None and w.job[0] == call_id]
        rows = rows_of([w.job[1] for w in stuck if w.job is not None]) + rows_of(pending)
        for w in stuck:
            self._discard(w)
            self.restarts += 1
        self.spawn_missing()  # replacements import in the background
        raise SolverTimeoutError(
            f"pool call exceeded {deadline.describe()}; {len(stuck)} busy worker(s) killed and replaced "
            f"({len(rows)} rows unfinished)",
            rows=sorted(rows),
        )
