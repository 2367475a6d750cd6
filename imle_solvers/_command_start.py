"""Ctrl-C before the `imle-solvers` command handles it: one line, not a traceback.

Once a command runs, it answers Ctrl-C itself (one line, exit status 130; see
[`cli.main`][imle_solvers.cli.main]). Before that the process imports this package, PyTorch and the
command's modules: seconds in which ``KeyboardInterrupt`` would be raised inside some library's import,
which ends the process with a traceback, or surfaces as another error (NumPy and PyTorch catch the
failed import of a part of themselves, then fail on what is missing), or is swallowed. So the package
imports this module before anything else, and when the process is the command (its console script, or
``python -m imle_solvers``, see `is_command`), `guard`

* answers Ctrl-C with ``interrupted`` and exit status 130 at once, without raising anything, until
  `release` hands Ctrl-C back to Python just before the command runs (nothing has been started or
  written by then: no worker, no thread, no file);
* and, for the moments after the command returned, makes an uncaught ``KeyboardInterrupt`` (or an
  error raised while one was handled) print ``interrupted``, and so one that interrupts the
  interpreter's shutdown (joining threads, exit handlers), which Python would report with a traceback.

A program that only imports the package keeps Python's handler and hooks. What runs before the package
is imported (the interpreter's start-up and its ``site`` module, a few hundredths of a second) is
Python's own.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Sequence
from types import FrameType, TracebackType
from typing import Any

__all__ = ["COMMAND", "EXIT_STATUS", "MODULES", "guard", "interrupted", "is_command", "release"]

COMMAND = "imle-solvers"
"""The console script's name."""

MODULES = frozenset({"imle_solvers", "imle_solvers.__main__", "imle_solvers.cli"})
"""Modules that run the command under ``python -m``."""

EXIT_STATUS = 130
"""Exit status of an interrupted command (128 + SIGINT, as a shell reports it)."""

_said = False  # "interrupted" is printed once


def is_command(argv0: str, orig_argv: Sequence[str]) -> bool:
    """Whether a process started as ``orig_argv`` (``sys.orig_argv``), whose ``sys.argv[0]`` is
    ``argv0`` while this package is imported, is the `imle-solvers` command.

    The console script: ``argv0`` names it (``imle-solvers``; ``imle-solvers.exe`` or
    ``imle-solvers-script.py`` on Windows). ``python [options] -m MODULE``: ``argv0`` is ``"-m"`` while
    the module is found, and ``MODULE`` is one of `MODULES`.
    """
    name = argv0.replace("\\", "/").rsplit("/", 1)[-1].casefold()  # a POSIX or a Windows path
    for suffix in (".exe", "-script.pyw", "-script.py"):
        name = name.removesuffix(suffix)
    if name == COMMAND:
        return True
    if argv0 != "-m":
        return False
    for i, arg in enumerate(orig_argv[1:], start=1):
        if arg == "-m":
            return i + 1 < len(orig_argv) and orig_argv[i + 1] in MODULES
        if arg.startswith("-m"):
            return arg[2:] in MODULES
    return False


def interrupted(exc: BaseException | None) -> bool:
    """Whether ``exc`` is a ``KeyboardInterrupt`` or was raised while one was handled."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, KeyboardInterrupt):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False


def _say() -> None:
    global _said
    if not _said:
        _said = True
        try:
            os.write(2, b"interrupted\n")  # unbuffered: nothing is lost by os._exit
        except OSError:  # pragma: no cover - stderr closed
            pass


def _exit_at_once(signum: int, frame: FrameType | None) -> None:
    """SIGINT while the command loads: one line, exit status 130, nothing raised into an import."""
    _say()
    os._exit(EXIT_STATUS)


def _excepthook(previous: Any) -> Any:
    def hook(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
        if interrupted(value):
            _say()
        else:
            previous(kind, value, tb)

    hook._imle_solvers = True  # type: ignore[attr-defined]
    return hook


def _unraisablehook(previous: Any) -> Any:
    def hook(unraisable: Any) -> None:
        if interrupted(unraisable.exc_value):
            _say()
        else:
            previous(unraisable)

    return hook


def guard(argv0: str | None = None, orig_argv: Sequence[str] | None = None) -> bool:
    """In the command's process, answer Ctrl-C with one line (see the module docstring).

    Parameters
    ----------
    argv0
        The process's ``sys.argv[0]`` (default: this process's).
    orig_argv
        The process's ``sys.orig_argv`` (default: this process's).

    Returns
    -------
    bool
        Whether the guard was installed: the process is the command, on its main thread, and it was
        not already.
    """
    argv0 = (sys.argv[0] if sys.argv else "") if argv0 is None else argv0
    orig = getattr(sys, "orig_argv", []) if orig_argv is None else orig_argv
    if getattr(sys.excepthook, "_imle_solvers", False) or not is_command(argv0, orig):
        return False
    try:
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            signal.signal(signal.SIGINT, _exit_at_once)
    except ValueError:  # pragma: no cover - imported on another thread first
        return False
    sys.excepthook = _excepthook(sys.excepthook)
    sys.unraisablehook = _unraisablehook(sys.unraisablehook)
    return True


def release() -> None:
    """Hand Ctrl-C back to Python (``KeyboardInterrupt``): the command is about to run and handles it.

    Does nothing unless `guard` answers Ctrl-C in this process.
    """
    if signal.getsignal(signal.SIGINT) is _exit_at_once:
        signal.signal(signal.SIGINT, signal.default_int_handler)


guard()  # on import: the package imports this module before anything else
