"""The thread backend of [`SolverPool`][imle_solvers.pool.SolverPool]: chunks on a pool of threads.

For solvers that release the GIL (C/C++ solvers, ``time.sleep``) or oracles that cannot be pickled.
Threads share the caller's memory: no isolation from a crashing solver, and a solve that is already
running cannot be stopped (it finishes in the background after a time-out or Ctrl-C). The threads are
daemon threads, so such an abandoned solve never keeps the interpreter from exiting (the standard
``ThreadPoolExecutor`` joins its threads at exit: Ctrl-C would raise, then wait for the solve).
Library solvers (CP-SAT, HiGHS, CBC) are stopped through their own APIs when a call times out, is
interrupted or the pool closes (`imle_solvers._interrupt`); at interpreter exit every such solve is
stopped and waited for.
"""

from __future__ import annotations

import concurrent.futures
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from .._interrupt import stop_solves
from ..errors import SolverTimeoutError
from ..oracle import MapOracle
from ._chunk import solve_chunk
from ._failure import ChunkError, raise_failure
from ._runner import Deadline, InProcessRunner, RunnerOptions, RunnerTraits, RunResult

__all__ = ["ThreadRunner"]

CLOSE_GRACE_S = 1.0
"""How long `ThreadRunner.close` waits for its threads to end after stopping their solves."""


class _DaemonThreads:
    """A fixed set of daemon threads taking ``(future, fn, args)`` from one queue."""

    def __init__(self, size: int) -> None:
        self._queue: queue.SimpleQueue[
            tuple[concurrent.futures.Future[Any], Callable[..., Any], tuple[Any, ...]] | None
        ] = queue.SimpleQueue()
        self._threads = [
            threading.Thread(target=self._loop, name=f"imle-solvers-{i}", daemon=True) for i in range(size)
        ]
        for t in self._threads:
            t.start()

    def _loop(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            future, fn, args = item
            if not future.set_running_or_notify_cancel():  # cancelled while queued
                continue
            try:
                result = fn(*args)
            except BaseException as exc:  # handed to the caller through the future
                future.set_exception(exc)
            else:
                future.set_result(result)
            del item, future, fn, args  # hold no oracle or batch between tasks

    def submit(self, fn: Callable[..., Any], *args: Any) -> concurrent.futures.Future[Any]:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._queue.put((future, fn, args))
        return future

    def idents(self) -> set[int]:
        """``threading.get_ident()`` of each thread (to stop the solves running on them)."""
        return {t.ident for t in self._threads if t.ident is not None}

    def shutdown(self, grace: float) -> None:
        """Stop the library solves running on these threads, let every thread end after its current
        task (queued tasks should be cancelled first) and wait up to ``grace`` seconds for them."""
        stop_solves(self.idents())
        for _ in self._threads:
            self._queue.put(None)
        end = time.monotonic() + grace
        for t in self._threads:
            t.join(max(0.0, end - time.monotonic()))


class ThreadRunner(InProcessRunner):
    """``workers`` threads that solve one chunk each at a time (see ``Runner``)."""

    traits = RunnerTraits(
        name="thread", in_caller=False, isolated=False, transfers=False, local=True, overhead_s=2e-4
    )

    def __init__(self, options: RunnerOptions) -> None:
        self.size = options.workers
        self._executor: _DaemonThreads | None = None

    def _pool(self) -> _DaemonThreads:
        if self._executor is None:
            self._executor = _DaemonThreads(self.size)
        return self._executor

    def start(self) -> None:
        self._pool()

    def n_workers(self) -> int:
        return self.size

    def active(self) -> bool:
        return self._executor is not None

    def close(self, grace: float = CLOSE_GRACE_S) -> None:
        """Stop the library solves on the threads and let the threads end (waits up to ``grace``)."""
        executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(grace)

    def run(
        self,
        token: int,
        oracle: MapOracle,
        weights: np.ndarray,
        bounds: list[tuple[int, int]],
        deadline: Deadline,
        out: np.ndarray,
    ) -> RunResult:
        executor = self._pool()
        t0 = time.perf_counter()
        futures: dict[concurrent.futures.Future[Any], tuple[int, int]] = {
            executor.submit(solve_chunk, oracle, weights[a:b], a, "thread", deadline): (a, b)
            for a, b in bounds
        }
        try:
            done, not_done = concurrent.futures.wait(
                futures, timeout=deadline.remaining(), return_when=concurrent.futures.FIRST_EXCEPTION
            )
        except BaseException:  # Ctrl-C: queued chunks are dropped, running library solves are stopped
            for f in futures:
                f.cancel()
            self.close(grace=0.0)
            raise
        failed = [f for f in done if f.exception() is not None]
        if failed:
            # the error names the first failing rows whatever the timing: chunks before the failed one
            # that are still running finish first (within the deadline), the ones after are dropped
            first_row = min(futures[f][0] for f in failed)
            earlier = [f for f in not_done if futures[f][0] < first_row]
            for f in not_done:
                if futures[f][0] > first_row:
                    f.cancel()
            if earlier:
                concurrent.futures.wait(earlier, timeout=deadline.remaining())
            failed = [f for f in futures if f.done() and not f.cancelled() and f.exception() is not None]
            for f in futures:
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
            # threads cannot be killed: library solvers (CP-SAT, HiGHS, CBC) are stopped through their own
            # APIs; any other solve already running finishes in the background
            self.close(grace=0.0)
            raise SolverTimeoutError(
                f"pool call exceeded {deadline.describe()} ({len(rows)} rows unfinished)", rows=rows
            )
        seconds = 0.0
        for f, (a, b) in futures.items():
            states, secs = f.result()
            out[a:b] = states  # z = MAP(w)   [b - a, m]
            seconds += secs
        return RunResult(
            solve_s=seconds,
            slowest_s=seconds / min(self.size, len(bounds)),
            wall_s=time.perf_counter() - t0,
            first_use=False,
        )
