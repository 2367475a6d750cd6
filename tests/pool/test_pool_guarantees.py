"""What every pool backend guarantees: time-outs on every path, crash isolation, Ctrl-C, no orphans."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from imle_solvers import (
    ClampedCosts,
    ImleSolversError,
    SolverTimeoutError,
    TopK,
    WorkerCrashedError,
)
from imle_solvers.pool import SolutionCache, SolverPool
from imle_solvers.pool._process import ProcessRunner
from imle_solvers.pool._runner import RunnerOptions
from tests.support.oracles import Enum
from tests.support.paths import ROOT
from tests.support.pool import STATES, alive, batch, wait_dead
from tests.support.pool_oracles import Exiter, Hang, NestedPool, SafeEnum, Spawner

ENV = {**os.environ, "PYTHONPATH": str(ROOT)}  # workers of a child script import this checkout

pytestmark = pytest.mark.timeout(10)  # subprocess tests (slow) set their own


def descendants(pid: int) -> set[int]:
    """Every process below ``pid`` (children of all its threads, recursively)."""
    found: set[int] = set()
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                with open(f"/proc/{p}/task/{task}/children") as fh:
                    kids = {int(k) for k in fh.read().split()}
            except OSError:
                continue
            todo.extend(kids - found)
            found |= kids
    return found


def wait_file(path: Path, seconds: float = 60.0, proc: subprocess.Popen[bytes] | None = None) -> str:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if path.exists():
            return path.read_text()
        assert proc is None or proc.poll() is None, "the script ended early"
        time.sleep(0.02)
    raise AssertionError(f"{path} never appeared")


@pytest.fixture(scope="module")
def pool() -> SolverPool:
    """Two worker processes, the default policy (no explicit fallback)."""
    with SolverPool(2, "process", chunksize=2) as p:
        yield p.start()


# --------------------------------------------------------------------------- a time-out holds on every path
def test_process_timeout_holds_even_where_the_caller_would_be_faster(pool: SolverPool) -> None:
    """Was: a fast oracle was moved to the caller, where a hanging row blocked forever."""
    pool.timeout, pool.fallback = 1.0, True
    try:
        oracle = Hang(STATES)
        for _ in range(2):  # timed as fast: the cost model would pick the caller
            pool.solve_batch(oracle, batch(4))
            assert pool.last_plan is not None and pool.last_plan.mode == "parallel"
            assert "timeout=1.0 s" in pool.last_plan.reason
        start = time.monotonic()
        with pytest.raises(SolverTimeoutError) as info:
            pool.solve_batch(oracle, batch(4, flag_row=1))
        assert time.monotonic() - start < 10
        assert 1 in info.value.rows
        assert "exceeded timeout=1.0 s" in str(info.value)  # the configured limit, not the time left
    finally:
        pool.timeout, pool.fallback = None, None


def test_thread_timeout_holds_for_a_single_hanging_row() -> None:
    """Was: the probe solved the first rows in the caller, where no time-out can stop them."""
    with SolverPool(2, "thread", timeout=0.3) as threads:
        start = time.monotonic()
        with pytest.raises(SolverTimeoutError) as info:
            threads.solve_batch(Hang(STATES, seconds=2.0), batch(1, flag_row=0))
        assert time.monotonic() - start < 1.5 and info.value.rows == (0,)
        assert "timeout=0.3 s" in str(info.value)


# --------------------------------------------------------------------------- crash isolation
@pytest.mark.parametrize("how", ["exit", "segfault"])
def test_crashing_oracle_never_runs_in_the_caller(pool: SolverPool, how: str) -> None:
    """A small, fast batch (the cost model's in-process case) still goes to the workers."""
    oracle = Exiter(STATES, how)
    np.testing.assert_array_equal(pool.solve_batch(oracle, batch(4)), Enum(STATES).solve_batch(batch(4)))
    assert pool.last_plan is not None and pool.last_plan.mode == "parallel"
    assert "in_process_safe=False" in pool.last_plan.reason and pool.stats["probe_rows"] == 0
    with pytest.raises(WorkerCrashedError) as info:
        pool.solve_batch(oracle, batch(4, flag_row=3))  # the caller survives
    assert info.value.rows == (2, 3)
    expected = Enum(STATES).solve_batch(batch(4))
    np.testing.assert_array_equal(pool.solve_batch(Enum(STATES), batch(4)), expected)


def test_in_process_safe_oracles_keep_the_fast_path() -> None:
    # min_parallel_seconds far above the batch's predicted time: the decision does not depend on how
    # fast the (possibly loaded) machine solved the probe rows.
    with SolverPool(2, "process", min_parallel_seconds=60.0) as fresh:
        fresh.solve_batch(SafeEnum(STATES), batch(8))
        assert fresh.last_plan is not None and fresh.last_plan.mode == "in-process"
        assert fresh.worker_pids() == []
    with SolverPool(
        2, "process", fallback=True, min_parallel_seconds=60.0
    ) as opted_in:  # the user accepts the risk
        opted_in.solve_batch(Enum(STATES), batch(8))
        assert opted_in.last_plan is not None and opted_in.last_plan.mode == "in-process"
        assert opted_in.worker_pids() == []


def test_in_process_safe_flag_of_wrappers_follows_the_inner_oracle() -> None:
    assert TopK(2, 5).in_process_safe and not Enum(STATES).in_process_safe
    assert SolutionCache(SafeEnum(STATES)).in_process_safe
    assert not SolutionCache(Enum(STATES)).in_process_safe
    assert ClampedCosts(SafeEnum(STATES, sense="min")).in_process_safe
    assert not ClampedCosts(Enum(STATES, sense="min")).in_process_safe


# --------------------------------------------------------------------------- no orphan process
def test_close_and_timeout_take_the_solver_children_along(pool: SolverPool, tmp_path: Path) -> None:
    marker = tmp_path / "child"
    pool.solve_batch(Spawner(STATES, str(marker)), batch(1))  # leaves a `sleep` child running
    worker, child = map(int, wait_file(marker).split())
    assert alive(child) and worker in pool.worker_pids()
    pool.timeout = 1.0
    try:
        marker.unlink()
        with pytest.raises(SolverTimeoutError):
            pool.solve_batch(Spawner(STATES, str(marker)), batch(2, flag_row=0))  # waits for its child
        _, stuck_child = map(int, wait_file(marker).split())
        assert wait_dead([stuck_child], 3.0), "a killed worker left its solver child running"
    finally:
        pool.timeout = None
    with SolverPool(1, "process", fallback=False) as own:
        marker.unlink()
        own.solve_batch(Spawner(STATES, str(marker)), batch(1))
        worker, child = map(int, wait_file(marker).split())
        assert alive(child)
    assert wait_dead([worker, child], 3.0), "close() left a worker or its solver child running"


_PARENT_DIES = """
import sys, numpy as np
sys.path.insert(0, {root!r})
from imle_solvers.pool import SolverPool
from tests.support.oracles import k_subsets
from tests.support.pool_oracles import FLAG, Spawner
if __name__ == "__main__":
    states = k_subsets(5, 2)
    w = np.random.default_rng(0).normal(size=(2, 5))
    w[:, 0] = FLAG
    pool = SolverPool(2, "process", fallback=False, chunksize=1)
    pool.solve_batch(Spawner(states, {marker!r}), w)  # two long solves, each waiting for a child
"""


def _kill_parent_during_a_solve(tmp_path: Path, sig: int) -> None:
    marker = tmp_path / "child"
    script = tmp_path / "parent.py"
    script.write_text(_PARENT_DIES.format(root=str(ROOT), marker=str(marker)))
    parent = subprocess.Popen([sys.executable, str(script)], cwd=tmp_path, stdin=subprocess.DEVNULL, env=ENV)
    try:
        wait_file(marker, 120, parent)
        time.sleep(0.2)  # the second worker starts its child too
        below = descendants(parent.pid)  # workers, their `sleep` children, forkserver, resource tracker
        assert len(below) >= 4, below
        os.kill(parent.pid, sig)
        parent.wait(10)
        assert wait_dead(sorted(below), 3.0), [p for p in below if alive(p)]
    finally:
        if parent.poll() is None:
            parent.kill()


@pytest.mark.slow
@pytest.mark.timeout(150)
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_killing_the_parent_leaves_no_descendant(tmp_path: Path, sig: int) -> None:
    _kill_parent_during_a_solve(tmp_path, sig)


def test_a_worker_whose_caller_is_gone_dies_with_its_solver_children(tmp_path: Path) -> None:
    """What a worker sees when its caller dies (even by SIGKILL): the caller's end of the pipe closes."""
    fleet = ProcessRunner(RunnerOptions(workers=1, start_method="forkserver"))
    try:
        fleet.start()
        worker = fleet.workers[0]
        marker = tmp_path / "child"
        fleet.prepare(1, Spawner(STATES, str(marker)))
        worker.conn.send(("oracle", 1, fleet._blobs[1]))
        worker.conn.send(("solve", 1, 0, 1, 0, batch(1, flag_row=0)))  # a long solve with a child
        pid, child = map(int, wait_file(marker).split())
        assert pid == worker.process.pid and alive(child)
        worker.conn.close()  # as if the caller were gone
        assert wait_dead([pid, child], 3.0), "the worker or its solver child outlived the caller"
    finally:
        fleet.close()


# --------------------------------------------------------------------------- Ctrl-C on threads
_THREAD_CTRL_C = """
import os, signal, sys, threading, numpy as np
sys.path.insert(0, {root!r})
from imle_solvers.pool import SolverPool
from tests.support.oracles import k_subsets
from tests.support.pool_oracles import FLAG, Hang
w = np.random.default_rng(0).normal(size=(4, 5))
w[:, 0] = FLAG
threading.Timer(0.5, signal.pthread_kill, args=(threading.main_thread().ident, signal.SIGINT)).start()
with SolverPool(2, "thread", fallback=False) as pool:
    pool.solve_batch(Hang(k_subsets(5, 2), seconds=120), w)
"""


def test_thread_backend_threads_never_keep_the_interpreter_alive() -> None:
    with SolverPool(2, "thread", fallback=False) as threads:
        threads.solve_batch(Enum(STATES), batch(4))
        ours = [t for t in threading.enumerate() if re.fullmatch(r"imle-solvers-\d+", t.name)]  # pool threads
        assert len(ours) == 2 and all(t.daemon for t in ours)  # non-daemon threads are joined at exit


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_ctrl_c_on_the_thread_backend_ends_the_program() -> None:
    """Was: KeyboardInterrupt was raised, then the interpreter waited for the running solves."""
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", _THREAD_CTRL_C.format(root=str(ROOT))],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        env=ENV,
    )
    assert "KeyboardInterrupt" in done.stderr, done.stderr
    assert done.returncode != 0 and time.monotonic() - start < 30


# --------------------------------------------------------------------------- smaller ones
def test_process_pool_inside_a_worker_is_a_typed_error(pool: SolverPool) -> None:
    with pytest.raises(ImleSolversError, match="daemonic") as info:
        pool.solve_batch(NestedPool(STATES), batch(3))
    assert info.value.rows and set(info.value.rows) <= {0, 1, 2}
    assert "backend='thread'" in str(info.value)


_NO_MAIN_GUARD = """
import sys, numpy as np
sys.path.insert(0, {root!r})
from imle_solvers import WorkerCrashedError
from imle_solvers.pool import SolverPool
from tests.support.oracles import Enum, k_subsets
pool = SolverPool(3, "process", fallback=False)   # no `if __name__ == "__main__":` guard
try:
    pool.solve_batch(Enum(k_subsets(4, 2)), np.zeros((4, 4)))
except WorkerCrashedError as exc:
    print("crashed:", exc)
pool.close()
"""


def test_a_worker_that_cannot_start_is_started_once() -> None:
    """Each failed start prints one traceback (the child's own): so start one, and do not retry."""
    options = RunnerOptions(workers=3, start_method="forkserver", worker_threads="many")  # type: ignore[arg-type]
    fleet = ProcessRunner(options)  # its workers die in start-up
    started: list[int] = []
    spawn = fleet._spawn
    fleet._spawn = lambda: started.append(1) or spawn()  # type: ignore[method-assign]
    try:
        with pytest.raises(WorkerCrashedError, match="while starting"):
            fleet.start()
        assert started == [1] and fleet.workers == []
    finally:
        fleet.close()


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_a_script_without_main_guard_prints_one_traceback(tmp_path: Path) -> None:
    script = tmp_path / "unguarded.py"
    script.write_text(_NO_MAIN_GUARD.format(root=str(ROOT)))
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        env=ENV,
    )
    assert "crashed:" in done.stdout and "__main__" in done.stdout, done.stdout + done.stderr
    assert done.stderr.count("Traceback (most recent call last)") == 1, done.stderr


def test_solution_cache_clear_and_oracle_swap() -> None:
    cache = SolutionCache(Enum(STATES), p=1.0, seed=0)
    cache.solve_batch(batch(5))
    assert cache.size > 0
    cache.clear()
    assert cache.size == 0 and cache.states.shape == (0, STATES.shape[1])
    cache.solve_batch(batch(5))
    other = Enum(STATES[::-1].copy(), sense="min")  # a different problem: cached states are stale
    cache.oracle = other
    assert cache.size == 0 and cache.sense == "min" and cache.oracle is other
    w = batch(6, seed=4)
    np.testing.assert_array_equal(cache.solve_batch(w[:1]), other.solve_batch(w[:1]))


# --------------------------------------------------------------------------- Dask: a lost oracle copy
_DASK_KILL = """
import sys, numpy as np
sys.path.insert(0, {root!r})
from imle_solvers import WorkerCrashedError
from imle_solvers.pool import SolverPool
from tests.support.oracles import Enum, k_subsets
from tests.support.pool_oracles import FLAG, Killer
if __name__ == "__main__":
    states = k_subsets(5, 2)
    w = np.random.default_rng(0).normal(size=(6, 5))
    with SolverPool(2, backend="dask", fallback=False, chunksize=3, retries=0) as pool:
        oracle = Killer(states)  # SIGKILLs its worker on the flagged row, wherever Dask runs it
        pool.solve_batch(oracle, w)
        bad = w.copy()
        bad[4, 0] = FLAG
        try:
            pool.solve_batch(oracle, bad)
        except WorkerCrashedError as exc:
            print("crashed", exc.rows)
        assert (pool.solve_batch(oracle, w) == Enum(states).solve_batch(w)).all()
        print("ok", pool.stats["oracles_shipped"])
"""


@pytest.mark.slow
@pytest.mark.timeout(330)
def test_dask_worker_process_killed_gives_worker_crashed_then_recovers(tmp_path: Path) -> None:
    pytest.importorskip("distributed")
    script = tmp_path / "dask_kill.py"
    script.write_text(_DASK_KILL.format(root=str(ROOT)))
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
        env=ENV,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.split("\n")
    assert lines[0].startswith("crashed") and "4" in lines[0] and lines[1] == "ok 2", done.stdout
