"""One worker process of the process backend, as the caller sees it: started with its thread limits,
stopped, or killed together with the solver processes it started.

What runs *inside* a worker is in `_worker.py`; scheduling chunks over the workers in `_process.py`.
"""

from __future__ import annotations

import ast
import collections
import contextlib
import dataclasses
import functools
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from ._worker import THREAD_ENV_VARS, worker_main

__all__ = [
    "Chunk",
    "WorkerProcess",
    "kill_worker",
    "script_kept_from_workers",
    "shutdown_workers",
    "spawn_worker",
]

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


def _is_main_test(test: ast.expr) -> bool:
    """Whether ``test`` is ``__name__ == "__main__"`` (either way round)."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)):
        return False
    sides = [test.left, test.comparators[0]]
    names = {s.id for s in sides if isinstance(s, ast.Name)}
    texts = {s.value for s in sides if isinstance(s, ast.Constant)}
    return names == {"__name__"} and texts == {"__main__"}


@functools.lru_cache(maxsize=8)
def _unguarded(path: str, mtime: float) -> bool:
    """Whether the script at ``path`` has no ``if __name__ == "__main__":`` block at its top level."""
    try:
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
        return False  # unreadable: leave it to multiprocessing
    return not any(isinstance(node, ast.If) and _is_main_test(node.test) for node in tree.body)


@contextlib.contextmanager
def script_kept_from_workers() -> Iterator[None]:
    """Start a worker without re-running a main script that has no ``__name__`` guard.

    A ``spawn`` or ``forkserver`` child runs the parent's main *script* again (as ``__mp_main__``) before
    its target, so that objects defined there unpickle. A script without the guard — a tutorial run as
    ``python tutorial.py``, a notebook exported to a file — would then train again and start pools again
    in every worker, and the workers die while starting. The library's workers need nothing from the
    script but the oracles they are sent: for such a script the child is started as if the main module had
    no file (a notebook's case), and an oracle class defined in the script itself then cannot be sent.
    Scripts with the guard, and ``python -m`` modules, are left as multiprocessing starts them. The pool's
    own Dask ``LocalCluster`` starts its worker processes under the same rule.
    """
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    hide = False
    if main is not None and isinstance(path, str) and getattr(main, "__spec__", None) is None:
        with contextlib.suppress(OSError):
            hide = _unguarded(os.path.abspath(path), os.path.getmtime(path))
    if not hide:
        yield
        return
    main.__file__ = None  # type: ignore[union-attr]  # multiprocessing's spawn skips a main without a file
    try:
        yield
    finally:
        main.__file__ = path  # type: ignore[union-attr]


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
    with _child_env(threads), script_kept_from_workers():
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
