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
* the main thread has ended (a ``KeyboardInterrupt`` ended the program while pool threads still
  solve): the helper stops every solve, so the interpreter can exit;
* [`stop_solves`][imle_solvers.adapters._interrupt.stop_solves] is called (a pool that gives up
  on its threads).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import select
import signal
import threading
from collections.abc import Callable, Iterator

__all__ = ["solving", "stop_solves"]

_lock = threading.Lock()
_active: dict[int, Callable[[], None]] = {}  # token → stop
_tokens = itertools.count()
_watch: tuple[int, int, int] | None = None  # (read fd, write fd, pid) of the wake-up pipe
_POLL_S = 0.2  # how often the helper checks that the main thread is alive


def stop_solves() -> int:
    """Stop every solve now in progress in this process (through each solver's own API).

    Returns how many were stopped. The interrupted calls raise (``KeyboardInterrupt`` on the main
    thread after Ctrl-C, a typed error otherwise) instead of returning a state.
    """
    with _lock:
        stops = list(_active.values())
    for stop in stops:
        with contextlib.suppress(Exception):
            stop()
    return len(stops)


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
        elif not main.is_alive():
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
        return _watch[1]


@contextlib.contextmanager
def solving(stop: Callable[[], None]) -> Iterator[None]:
    """Register ``stop`` while the body solves.

    On the main thread with Python's default SIGINT handler, the wake-up descriptor is pointed at the
    helper's pipe for the duration (and restored after).
    """
    on_main = threading.current_thread() is threading.main_thread()
    token = next(_tokens)
    write_fd = _pipe()
    armed = False
    previous = -1
    if on_main and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        previous = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
        armed = previous == -1 or previous == write_fd
        if not armed:  # someone else (asyncio) listens there: leave it to them
            signal.set_wakeup_fd(previous)
    with _lock:
        _active[token] = stop
    try:
        yield
    finally:
        with _lock:
            del _active[token]
        if armed:
            signal.set_wakeup_fd(-1)
