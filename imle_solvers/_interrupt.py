"""Stopping solves that run in C++ or in a child process: Ctrl-C, interpreter exit, `stop_solves`.

A solver call in C++ (CP-SAT, HiGHS) holds the main thread, so Python's ``KeyboardInterrupt`` would
only be raised when the solve ends, and a solve on another thread never sees it. Each adapter registers
a *stop* function for the duration of a solve (`solving`): CP-SAT's ``stop_search``, a flag HiGHS's
interrupt callback reads, killing CBC's process. They are called, never by raising across C++, when

* Ctrl-C arrives while the main thread solves: during the solve Python's signal wake-up descriptor
  points at a pipe watched by a helper thread, which stops the solve; Python's own SIGINT handler
  then raises ``KeyboardInterrupt`` as the solve returns. Only when the SIGINT handler is Python's
  default one (a program with its own handler keeps its solves running) and no other wake-up
  descriptor (asyncio) is installed;
* the program ends while other threads still solve (the main thread returned, raised, or was
  interrupted by Ctrl-C while it joined a solving thread): at interpreter shutdown, before thread
  pools join their threads, every solve is stopped, no new one may start on another thread, and the
  shutdown waits (at most `EXIT_GRACE_S`) until every stopped solve has returned from C++. A thread
  still inside C++ when the interpreter finalises is ended by the C runtime as it re-acquires the
  GIL, which C++ code answers with ``std::terminate`` ("terminate called without an active
  exception", exit status 134): the wait is what keeps a program that used solver threads from
  aborting at exit;
* `stop_solves` is called (a pool that gives up on its threads stops the solves on those threads).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import select
import signal
import threading
import time
from collections.abc import Callable, Collection
from typing import Any

from .errors import ImleSolversError

try:  # the C module: `signal`'s wrappers convert handlers to enums, about 10 µs a call
    import _signal as sig
except ImportError:  # pragma: no cover - every CPython has it
    sig = signal

__all__ = ["EXIT_GRACE_S", "default_sigint", "set_sigint", "solving", "stop_solves"]

EXIT_GRACE_S = 10.0
"""Longest wait at interpreter shutdown for stopped solves to return from C++ (seconds)."""

_lock = threading.Lock()
_active: dict[int, tuple[int, Callable[[], None]]] = {}  # token → (thread ident, stop)
_tokens = itertools.count()
_watch: tuple[int, int, int] | None = None  # (read fd, write fd, pid) of the wake-up pipe
_exiting = False  # set at interpreter shutdown
_POLL_S = 0.2  # how often the helper checks that the main thread is alive


def stop_solves(threads: Collection[int] | None = None) -> int:
    """Stop the solves now in progress in this process (through each solver's own API).

    Parameters
    ----------
    threads
        Only the solves running on these threads (``threading.get_ident()`` values); every solve
        when ``None``.

    Returns
    -------
    int
        How many were stopped. The interrupted calls raise (``KeyboardInterrupt`` on the main
        thread after Ctrl-C, a typed error otherwise) instead of returning a state.
    """
    stops = [stop for ident, stop in list(_active.values()) if threads is None or ident in threads]
    for stop in stops:
        with contextlib.suppress(Exception):
            stop()
    return len(stops)


def _others_solving() -> bool:
    """Whether a thread other than this one is inside a registered solve."""
    me = threading.get_ident()
    return any(ident != me for ident, _ in list(_active.values()))


def default_sigint() -> bool:
    """Whether Ctrl-C would raise ``KeyboardInterrupt`` on this thread (main thread, Python's own handler)."""
    return (
        threading.current_thread() is threading.main_thread()
        and sig.getsignal(signal.SIGINT) is signal.default_int_handler
    )


def set_sigint(handler: Any) -> None:
    """Install a SIGINT handler (main thread only), without `signal`'s enum conversions."""
    sig.signal(signal.SIGINT, handler)


def _exit_hook(grace: float = EXIT_GRACE_S) -> None:
    """Runs at interpreter shutdown before thread pools join their threads (`threading._register_atexit`).

    Stops every solve and waits until the other threads have returned from them: a thread still in
    C++ when the interpreter finalises aborts the process (see the module docstring). New solves on
    other threads are refused from here on (`solving` raises).
    """
    global _exiting
    _exiting = True
    end = time.monotonic() + grace
    while True:
        stop_solves()
        if not _others_solving() or time.monotonic() >= end:
            return
        time.sleep(0.005)


def _watcher(read_fd: int) -> None:
    main = threading.main_thread()
    while True:
        ready, _, _ = select.select([read_fd], [], [], _POLL_S)
        if ready:
            try:
                data = os.read(read_fd, 512)
            except BlockingIOError:  # pragma: no cover - spurious wake-up
                continue
            if signal.SIGINT in data:
                stop_solves()
        elif _exiting or not main.is_alive():
            stop_solves()  # the program is ending: let pool threads finish so the interpreter can exit


def _pipe() -> int:
    """The write end of the wake-up pipe, starting the helper thread on first use (per process)."""
    global _watch
    with _lock:
        if _watch is None or _watch[2] != os.getpid():  # a forked child needs its own helper
            read_fd, write_fd = os.pipe()
            os.set_blocking(write_fd, False)
            _watch = (read_fd, write_fd, os.getpid())
            threading.Thread(target=_watcher, args=(read_fd,), name="imle-solvers-stop", daemon=True).start()
            import concurrent.futures.thread  # noqa: F401  # its exit hook first: ours then runs before it

            register = getattr(threading, "_register_atexit", None)
            if register is not None:
                with contextlib.suppress(RuntimeError):  # already shutting down
                    register(_exit_hook)
        return _watch[1]


class solving:  # used as a function: ``with solving(stop):``
    """Register ``stop`` while the body solves.

    On the main thread with Python's default SIGINT handler, the wake-up descriptor is pointed at the
    helper's pipe for the duration (and restored after). A class, not a generator-based context
    manager: it runs around every solve (a few µs).

    Raises
    ------
    ImleSolversError
        On a thread other than the main one once the interpreter is shutting down: a solve started
        then could still be in C++ when the interpreter finalises.
    """

    __slots__ = ("armed", "stop", "token")

    def __init__(self, stop: Callable[[], None]) -> None:
        self.stop = stop
        self.token = next(_tokens)
        self.armed = False

    def __enter__(self) -> None:
        watch = _watch
        write_fd = watch[1] if watch is not None and watch[2] == os.getpid() else _pipe()
        # register first, then look at the flag: the exit hook sets the flag first, then waits for
        # the registered solves, so a solve is either seen by the hook or refused here
        _active[self.token] = (threading.get_ident(), self.stop)  # one dict store: atomic under the GIL
        if _exiting and threading.current_thread() is not threading.main_thread():
            _active.pop(self.token, None)
            raise ImleSolversError("the interpreter is shutting down: no new solve starts on this thread")
        if default_sigint():
            previous = sig.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
            self.armed = previous == -1 or previous == write_fd
            if not self.armed:  # someone else (asyncio) listens there: leave it to them
                sig.set_wakeup_fd(previous)

    def __exit__(self, *exc: object) -> None:
        _active.pop(self.token, None)
        if self.armed:
            sig.set_wakeup_fd(-1)
