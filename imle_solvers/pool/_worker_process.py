"""One worker process of the process backend, as the caller sees it: started with its thread limits,
stopped, or killed together with the solver processes it started.

What runs *inside* a worker is in `_worker.py`; scheduling chunks over the workers in `_process.py`.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from ._worker import THREAD_ENV_VARS, worker_main

__all__ = ["Chunk", "WorkerProcess", "kill_worker", "shutdown_workers", "spawn_worker"]

_ENV_LOCK = threading.Lock()


@contextlib.contextmanager
def _child_env(threads: int) -> Iterator[None]:
    """Set the thread-count variables while a child is spawned (it copies the environment)."""
    with _ENV_LOCK:
        saved = {k: os.environ.get(k) for k in THREAD_ENV_VARS}
        os.environ.update({k: str(threads) for k in THREAD_ENV_VARS})
        try:
            yield
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


@dataclasses.dataclass
class Chunk:
    """Rows ``start:stop`` of one call, as handed to a worker, and how many times they were sent."""

    chunk_id: int
    start: int
    stop: int
    attempts: int = 0


@dataclasses.dataclass(eq=False)
class WorkerProcess:
    """A worker process and the caller's end of its pipe, with what the caller knows about it."""

    process: Any
    """The ``multiprocessing.Process``."""
    conn: Any
    """The caller's end of the duplex pipe (``multiprocessing.connection.Connection``)."""
    ready: bool = False
    """The worker has imported and reported ``("ready", pid)``."""
    pid: int | None = None
    """The pid it reported."""
    tokens: collections.OrderedDict[int, None] = dataclasses.field(default_factory=collections.OrderedDict)
    """Tokens of the oracles it holds, least recently used first."""
    job: tuple[int, Chunk] | None = None
    """``(call_id, chunk)`` in flight, if any."""
    busy_s: float = 0.0
    """Solve seconds it reported during the current call."""


def spawn_worker(ctx: Any, threads: int, target: Callable[..., None] = worker_main) -> WorkerProcess:
    """Start one worker process (``ctx``: a `multiprocessing` context) limited to ``threads`` threads;
    returns at once, the worker reports ``("ready", pid)`` on its pipe once it has imported.

    ``target(conn, threads, caller_pid)`` is the worker's main loop (`worker_main`; tests give a
    worker that misbehaves)."""
    parent, child = ctx.Pipe(duplex=True)
    proc = ctx.Process(
        target=target,
        args=(child, threads, os.getpid()),
        daemon=True,
        name="imle-solvers-worker",
    )
    with _child_env(threads):
        proc.start()
    child.close()
    return WorkerProcess(proc, parent)


def shutdown_workers(workers: list[WorkerProcess], grace: float) -> None:
    """Stop workers: ask politely, then terminate, then kill; close pipes. Safe to call twice."""
    for w in workers:
        with contextlib.suppress(Exception):
            if w.process.is_alive() and w.job is None and w.ready:
                w.conn.send(("stop",))
    end = time.monotonic() + grace
    for w in workers:
        with contextlib.suppress(Exception):
            w.process.join(max(0.0, end - time.monotonic()))
    for w in workers:
        kill_worker(w)
    workers.clear()


def kill_worker(w: WorkerProcess) -> None:
    """Kill one worker and its solver children, reap it, close its pipe and process handle.

    A worker leads its own process group (see ``_worker.py``), so ``killpg`` also ends the solver
    processes it started (``cbc``…). The pid cannot name anyone else's group: Linux does not reuse a
    pid while a process group of that number exists.
    """
    pid = w.process.pid
    if pid is not None:
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGKILL)
    with contextlib.suppress(Exception):
        if w.process.is_alive():
            w.process.kill()
        w.process.join(5.0)
    with contextlib.suppress(Exception):
        w.conn.close()
    with contextlib.suppress(Exception):
        w.process.close()
