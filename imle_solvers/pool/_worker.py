"""The worker main loop of the process backend, with its watchdog: what runs inside a worker process.

A worker leads its own process group, pins its thread pools to ``threads`` threads, reports
``("ready", pid)`` and then answers messages on its pipe until told to stop. A daemon thread (the
watchdog) kills the worker's whole process group as soon as the caller's end of the pipe closes, so a
worker never outlives its caller, even while its main thread is stuck in a long solve. Rows are
solved by `solve_chunk` (`_chunk.py`); failures travel back as `ChunkFailure` (`_failure.py`).

This module is imported by spawned worker processes (and preloaded by the ``forkserver``); it keeps
its imports light (no solver imports: those come with the oracle when it is unpickled).
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import select
import signal
import threading
import time
from typing import Any

from ..oracle import MapOracle
from ._chunk import solve_chunk
from ._failure import ChunkError, ChunkFailure, failure_of, portable

__all__ = ["THREAD_ENV_VARS", "pin_threads", "worker_main"]

THREAD_ENV_VARS = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
)
"""Environment set for worker processes before they import numpy/torch: one thread per solver."""


def pin_threads(threads: int) -> None:
    """One (or ``threads``) thread(s) per solver inside a worker: torch intra/inter-op and BLAS."""
    try:
        import torch

        torch.set_num_threads(threads)
        try:
            torch.set_num_interop_threads(threads)
        except RuntimeError:  # already set, or parallel work already started
            pass
    except ImportError:  # pragma: no cover - torch is a hard dependency
        pass
    try:  # threadpoolctl is optional: it caps BLAS pools that were loaded before the env took effect
        from threadpoolctl import threadpool_limits

        threadpool_limits(threads)
    except ImportError:
        pass


def _own_process_group() -> bool:
    """Make this worker the leader of a new session and process group (its solver children join it).

    The caller then stops a worker with ``killpg``, which takes any ``cbc``-like child process
    along, and a terminal's Ctrl-C reaches the caller only.
    """
    try:
        os.setsid()
    except OSError:  # pragma: no cover - already a group leader
        return os.getpgid(0) == os.getpid()
    return True


def _gone(pid: int) -> bool:
    """Whether process ``pid`` has exited (no such process, or a zombie)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def _watch_parent(conn: Any, own_group: bool, caller: int) -> None:
    """Die with the caller: a daemon thread waits for the caller's end of the pipe to close.

    The caller is the only process holding that end, so a hang-up means that it exited or was killed
    (even by SIGKILL, which it cannot handle). The worker then kills its process group: itself and
    every solver process it started, even while its main thread is stuck in a long solve. If the
    caller is gone and the worker was forked by the caller's ``forkserver``, it takes that along too
    (the server would otherwise linger until its Python shut down). Linux (``POLLRDHUP``); elsewhere a
    worker notices at its next ``recv``.
    """
    rdhup = getattr(select, "POLLRDHUP", None)
    if rdhup is None:  # pragma: no cover - not Linux
        return
    poller = select.poll()
    poller.register(conn.fileno(), rdhup)  # peer hang-up only: never consumes a message
    server = os.getppid() if os.getppid() != caller else None  # forkserver start method

    def watch() -> None:
        while True:
            try:
                events = poller.poll()
            except InterruptedError:  # pragma: no cover - retried by Python itself
                continue
            if events:
                break
        for _ in range(50):  # a killed caller's pipe closes a moment before it turns zombie
            if _gone(caller):
                break
            time.sleep(0.01)
        if server is not None and os.getppid() == server and _gone(caller):
            os.kill(server, signal.SIGKILL)  # the caller's forkserver: it has no one left to serve
        if own_group:
            os.killpg(os.getpid(), signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)  # pragma: no cover - without a group of its own

    threading.Thread(target=watch, name="imle-solvers-parent-watch", daemon=True).start()


def worker_main(conn: Any, threads: int, caller: int | None = None) -> None:
    """Main loop of a process worker (see ``_process.py`` for the message protocol).

    Messages in: ``("oracle", token, blob)``, ``("forget", token)``,
    ``("solve", call_id, chunk_id, token, start, weights)``, ``("stop",)``.
    Messages out: ``("ready", pid)``, ``("done", call_id, chunk_id, states, seconds)``,
    ``("failed", call_id, chunk_id, ChunkFailure)``.
    The loop ends on ``stop`` or when the parent's end of the pipe closes (the parent died).
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's business: it stops us
    own_group = _own_process_group()
    _watch_parent(conn, own_group, os.getppid() if caller is None else caller)
    pin_threads(threads)
    where = f"pool worker (pid {os.getpid()})"
    oracles: dict[int, MapOracle | ChunkFailure] = {}
    conn.send(("ready", os.getpid()))
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        kind = msg[0]
        if kind == "stop":
            return
        if kind == "oracle":
            _, token, blob = msg
            try:
                oracles[token] = pickle.loads(blob)
            except Exception as exc:  # reported on the first solve that needs it
                context = where + ", unpickling the oracle"
                if isinstance(exc, AttributeError) and "__main__" in str(exc):
                    context += (
                        "; its class is defined in __main__, which the workers do not import (a notebook, or "
                        "a script without an `if __name__ == '__main__':` guard): define it in a module"
                    )
                oracles[token] = portable(failure_of(exc, (), context))
        elif kind == "forget":
            oracles.pop(msg[1], None)
        elif kind == "solve":
            _, call_id, chunk_id, token, start, weights = msg
            oracle = oracles.get(token)
            if isinstance(oracle, ChunkFailure) or oracle is None:
                failure = (
                    oracle
                    if isinstance(oracle, ChunkFailure)
                    else portable(
                        failure_of(KeyError(f"oracle token {token} unknown to the worker"), (), where)
                    )
                )
                rows = tuple(range(start, start + weights.shape[0]))
                conn.send(("failed", call_id, chunk_id, dataclasses.replace(failure, rows=rows)))
                continue
            try:
                out, seconds = solve_chunk(oracle, weights, start, where=where)
            except ChunkError as err:
                conn.send(("failed", call_id, chunk_id, portable(err.failure)))
            else:
                conn.send(("done", call_id, chunk_id, out, seconds))
