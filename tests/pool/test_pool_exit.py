"""Programs that used solver threads end cleanly: stopped solves, no abort at exit, no process left behind.

A thread still inside a C++ solve (HiGHS, CP-SAT) when the interpreter finalises is ended as it
re-acquires the GIL, which C++ answers with ``std::terminate`` (exit status 134, "terminate called
without an active exception"). The scripts below are written as users write them (no main guard) and
run in a child interpreter each.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from imle_solvers import ImleSolversError, _interrupt
from imle_solvers._interrupt import solving, stop_solves
from tests.support.paths import ROOT

pytestmark = pytest.mark.timeout(10)

ENV = {**os.environ, "PYTHONPATH": str(ROOT)}

_SETUP = """
import os, signal, sys, threading, time
import numpy as np
sys.path.insert(0, {root!r})
from imle_solvers import ILP, SolverPool, SolverTimeoutError
from tests.support.ilp_cases import market_split

A, b = market_split(5, 40)  # no back end solves it in under a minute
w = np.random.default_rng(0).normal(size=(4, 40))


def hard(name):
    return ILP(40, A_eq=A, b_eq=b, backend=name)
"""

_THREAD_POOL_TIMEOUT = """
pool = SolverPool(2, "thread", timeout=0.5)
for name in {backends!r}:
    try:
        pool.solve_batch(hard(name), w)
    except SolverTimeoutError:
        print(name, "timed out", flush=True)
if {close!r}:
    pool.close()
print(os.getpid(), flush=True)
"""

_DAEMON_THREADS = """
for name in {backends!r}:
    threading.Thread(target=hard(name).solve, args=(w[0],), daemon=True).start()
time.sleep(1.0)  # the solves are running (CBC in its own process)
print(os.getpid(), flush=True)
"""  # the main thread ends here: the docs promise that the solves stop with the program

_CTRL_C_WHILE_JOINING = """
solver = threading.Thread(target=hard({backend!r}).solve, args=(w[0],))
solver.start()
threading.Timer(0.5, signal.pthread_kill, args=(threading.main_thread().ident, signal.SIGINT)).start()
print(os.getpid(), flush=True)
solver.join()
"""


def run_script(body: str, **fields: object) -> subprocess.CompletedProcess[str]:
    script = (_SETUP + body).format(root=str(ROOT), **fields)
    return subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        env=ENV,
    )


def cbc_of(owner: int) -> list[int]:
    """CBC processes started by process ``owner`` (their model file is in its scratch directory)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                if f"imle-cbc-{owner}-".encode() in fh.read():
                    found.append(int(pid))
        except OSError:
            pass
    return found


def assert_clean_end(done: subprocess.CompletedProcess[str], codes: tuple[int, ...] = (0,)) -> None:
    output = done.stdout + done.stderr
    assert "terminate called" not in done.stderr and "bad_function_call" not in done.stderr, output
    assert done.returncode in codes, output
    owner = int(done.stdout.split()[-1])
    deadline = time.monotonic() + 3
    while cbc_of(owner) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert cbc_of(owner) == [], "a CBC process outlived the program"


@pytest.mark.slow
@pytest.mark.timeout(150)
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="walks /proc")
@pytest.mark.parametrize(
    ("backends", "close"),
    [(("highs", "cpsat", "cbc"), True), (("highs", "cpsat"), False)],
    ids=["closed", "left-open"],
)
def test_a_thread_pool_that_timed_out_lets_the_program_exit(backends: tuple[str, ...], close: bool) -> None:
    pytest.importorskip("highspy")
    pytest.importorskip("ortools")
    done = run_script(_THREAD_POOL_TIMEOUT, backends=backends, close=close)
    assert_clean_end(done)
    assert [line.split()[0] for line in done.stdout.splitlines()[:-1]] == list(backends), done.stdout


@pytest.mark.slow
@pytest.mark.timeout(150)
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="walks /proc")
def test_solves_on_daemon_threads_stop_when_the_main_thread_ends() -> None:
    pytest.importorskip("highspy")
    pytest.importorskip("ortools")
    t0 = time.monotonic()
    done = run_script(_DAEMON_THREADS, backends=("highs", "cpsat", "cbc"))
    assert_clean_end(done)
    assert time.monotonic() - t0 < 60  # stopped, not waited for


@pytest.mark.slow
@pytest.mark.timeout(150)
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="walks /proc")
@pytest.mark.parametrize("backend", ["highs", "cpsat"])
def test_ctrl_c_while_the_main_thread_joins_a_solving_thread(backend: str) -> None:
    pytest.importorskip("highspy" if backend == "highs" else "ortools")
    done = run_script(_CTRL_C_WHILE_JOINING, backend=backend)
    assert_clean_end(done, codes=(-signal.SIGINT, 130))
    assert "KeyboardInterrupt" in done.stderr


# --------------------------------------------------------------------------- the mechanism, in process
class FakeSolve:
    """A registered "solve" on a thread: it returns ``lag`` seconds after being stopped (or never)."""

    def __init__(self, lag: float = 0.1, stoppable: bool = True) -> None:
        self.stopped = threading.Event()
        self.left = threading.Event()
        self.lag = lag
        self.stoppable = stoppable
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.entered = threading.Event()

    def _stop(self) -> None:
        if self.stoppable:
            self.stopped.set()

    def _run(self) -> None:
        with solving(self._stop):
            self.entered.set()
            self.stopped.wait(5.0)
            time.sleep(self.lag)  # returning from C++ takes a moment
        self.left.set()

    def start(self) -> FakeSolve:
        self.thread.start()
        assert self.entered.wait(5.0)
        return self


def test_stop_solves_can_stop_only_the_solves_of_given_threads() -> None:
    mine, other = FakeSolve(lag=0.0).start(), FakeSolve(lag=0.0).start()
    assert mine.thread.ident is not None
    assert stop_solves({mine.thread.ident}) == 1
    assert mine.left.wait(2.0) and not other.stopped.is_set()
    assert stop_solves() == 1 and other.left.wait(2.0)
    assert _interrupt._active == {}


def test_the_exit_hook_stops_solves_waits_for_them_and_refuses_new_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_interrupt, "_exiting", False)
    solves = [FakeSolve(lag=0.3).start() for _ in range(2)]
    t0 = time.monotonic()
    _interrupt._exit_hook(grace=5.0)
    assert all(s.left.is_set() for s in solves)  # returned before the hook did: nothing left in C++
    assert 0.25 < time.monotonic() - t0 < 4.0
    refused: list[BaseException] = []

    def late_solve() -> None:
        try:
            with solving(lambda: None):
                pass
        except ImleSolversError as exc:
            refused.append(exc)

    late = threading.Thread(target=late_solve)
    late.start()
    late.join(5.0)
    assert len(refused) == 1 and "shutting down" in str(refused[0])
    with solving(lambda: None):  # the main thread may still solve (atexit handlers): it is never cut off
        pass
    assert _interrupt._active == {}


def test_the_exit_hook_gives_up_on_a_solve_that_cannot_be_stopped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_interrupt, "_exiting", False)
    stuck = FakeSolve(lag=0.0, stoppable=False).start()
    t0 = time.monotonic()
    _interrupt._exit_hook(grace=0.3)
    assert 0.25 < time.monotonic() - t0 < 2.0 and not stuck.left.is_set()
    stuck.stopped.set()  # let it go
    assert stuck.left.wait(2.0)
