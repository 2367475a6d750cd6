"""Picklable oracles for the pool tests (kept light: pool workers import this module to unpickle them)."""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any

import numpy as np

from imle_solvers import InfeasibleError
from tests.support.oracles import Enum

FLAG = 999.0  # weights[0] == FLAG marks the row an oracle misbehaves on


class CountingPickles(Enum):
    """Counts how often it is pickled (in the process that pickles it)."""

    pickled = 0

    def __getstate__(self) -> dict[str, Any]:
        type(self).pickled += 1
        return self.__dict__.copy()


class Failing(Enum):
    """Raises on the flagged row: a library error, a ValueError, or an exception that does not pickle."""

    def __init__(self, states: np.ndarray, kind: str) -> None:
        super().__init__(states)
        self.kind = kind

    def solve(self, weights: np.ndarray) -> np.ndarray:
        if weights[0] == FLAG:
            if self.kind == "library":
                raise InfeasibleError("no state for this row")
            if self.kind == "value":
                raise ValueError("bad row seen by the oracle")
            raise Unpicklable("cannot travel", threading.Lock())
        return super().solve(weights)


class Unpicklable(Exception):
    """An exception whose arguments do not pickle."""


class Killer(Enum):
    """SIGKILLs its own process on the flagged row: every time, or once (a marker file remembers)."""

    def __init__(self, states: np.ndarray, marker: str | None = None) -> None:
        super().__init__(states)
        self.marker = marker

    def solve(self, weights: np.ndarray) -> np.ndarray:
        if weights[0] == FLAG:
            if self.marker is None or not os.path.exists(self.marker):
                if self.marker is not None:
                    open(self.marker, "w").close()
                os.kill(os.getpid(), signal.SIGKILL)
        return super().solve(weights)


class Hang(Enum):
    """Sleeps on the flagged row (a minute by default: practically forever for a test)."""

    def __init__(self, states: np.ndarray, seconds: float = 60.0) -> None:
        super().__init__(states)
        self.seconds = seconds

    def solve(self, weights: np.ndarray) -> np.ndarray:
        if weights[0] == FLAG:
            time.sleep(self.seconds)
        return super().solve(weights)


class StoppableHang(Enum):
    """Hangs on the flagged row as a library solve does: registered with the stop-solve registry, it
    returns (raising) when stopped; ``stopped`` records that."""

    def __init__(self, states: np.ndarray) -> None:
        super().__init__(states)
        self.stopped = threading.Event()

    def solve(self, weights: np.ndarray) -> np.ndarray:
        if weights[0] == FLAG:
            from imle_solvers._interrupt import solving

            with solving(self.stopped.set):
                if self.stopped.wait(30.0):
                    raise InfeasibleError("stopped")
        return super().solve(weights)


class Locked(Enum):
    """Holds a lock: cannot be pickled."""

    def __init__(self, states: np.ndarray) -> None:
        super().__init__(states)
        self.lock = threading.Lock()


class BrokenUnpickle(Enum):
    """Pickles fine but fails to unpickle (in the worker)."""

    def __setstate__(self, state: dict[str, Any]) -> None:
        raise RuntimeError("this oracle refuses to be rebuilt")


class ThreadReport(Enum):
    """Raises a ValueError whose message reports the worker's thread settings (OMP env, torch threads)."""

    def solve(self, weights: np.ndarray) -> np.ndarray:
        import torch

        raise ValueError(f"threads:{os.environ.get('OMP_NUM_THREADS')},{torch.get_num_threads()}")


class SafeEnum(Enum):
    """Declares itself safe to run in the caller (pure numpy)."""

    in_process_safe = True


class Exiter(Enum):
    """Ends its process on the flagged row: ``os._exit(3)`` or a segmentation fault (reads address 0)."""

    def __init__(self, states: np.ndarray, how: str = "exit") -> None:
        super().__init__(states)
        self.how = how

    def solve(self, weights: np.ndarray) -> np.ndarray:
        if weights[0] == FLAG:
            if self.how == "segfault":
                import ctypes

                ctypes.string_at(0)
            os._exit(3)
        return super().solve(weights)


class Spawner(Enum):
    """Starts a ``sleep`` child process (as solvers like CBC do) and writes its pid to ``marker``.

    On the flagged row it then waits for the child ("a long solve"); otherwise it returns at once and
    leaves the child running (a solver process that outlives the call).
    """

    def __init__(self, states: np.ndarray, marker: str) -> None:
        super().__init__(states)
        self.marker = marker

    def solve(self, weights: np.ndarray) -> np.ndarray:
        import subprocess

        child = subprocess.Popen(["sleep", "120"])
        with open(self.marker + ".tmp", "w") as fh:
            fh.write(f"{os.getpid()} {child.pid}")
        os.replace(self.marker + ".tmp", self.marker)
        if weights[0] == FLAG:
            child.wait()
        return super().solve(weights)


class NestedPool(Enum):
    """Opens a process pool inside its own solve (inside a pool worker: a daemonic process)."""

    def solve(self, weights: np.ndarray) -> np.ndarray:
        from imle_solvers.pool import SolverPool

        with SolverPool(2, "process", fallback=False) as pool:
            return pool.solve_batch(Enum(self.states), weights[None])[0]


def silent_worker_main(conn: Any, threads: int, caller: int | None = None) -> None:
    """A process worker that reports ready, then swallows every message: it never answers a chunk,
    not even with a failure (as if it were stuck, or a bug dropped its reports)."""
    conn.send(("ready", os.getpid()))
    while True:
        try:
            conn.recv()
        except (EOFError, OSError):
            return


class Announcing(Enum):
    """Writes its process id to a file in ``folder`` on every solve: a test sees which worker is solving."""

    def __init__(self, states: np.ndarray, folder: str, delay: float = 0.0) -> None:
        super().__init__(states, delay=delay)
        self.folder = folder

    def solve(self, weights: np.ndarray) -> np.ndarray:
        open(os.path.join(self.folder, str(os.getpid())), "w").close()
        return super().solve(weights)
