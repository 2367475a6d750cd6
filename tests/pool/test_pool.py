"""SolverPool: row order, shipping once, the in-process fallback, faults (errors, crashes, time-outs)."""

from __future__ import annotations

import gc
import itertools
import multiprocessing
import os
import signal
import threading
import time

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from imle_solvers import (
    IMLE,
    ImleSolversError,
    InfeasibleError,
    InvalidWeightsError,
    SolverTimeoutError,
    TopK,
    WorkerCrashedError,
)
from imle_solvers.oracle import map_solve
from imle_solvers.pool import PoolPlan, SolverPool
from imle_solvers.pool._failure import RemoteTraceback
from tests.support.oracles import Enum
from tests.support.paths import ROOT
from tests.support.pool import STATES, alive, batch, wait_dead
from tests.support.pool_oracles import (
    BrokenUnpickle,
    CountingPickles,
    Failing,
    Hang,
    Killer,
    Locked,
    StoppableHang,
    ThreadReport,
    silent_worker_main,
)

pytestmark = pytest.mark.timeout(10)  # a worker that never reports fails a test: it cannot hang the suite


@pytest.fixture(scope="module")
def proc_pool() -> SolverPool:
    """Two persistent worker processes, every row sent to them (no in-process fallback)."""
    with SolverPool(2, "process", fallback=False) as pool:
        yield pool.start()


@pytest.fixture(scope="module")
def thread_pool() -> SolverPool:
    with SolverPool(2, "thread", fallback=False) as pool:
        yield pool


# --------------------------------------------------------------------------- correctness
@given(
    n=st.integers(0, 40),
    chunksize=st.one_of(st.none(), st.integers(1, 9)),
    sense=st.sampled_from(["max", "min"]),
)
def test_process_pool_matches_serial_in_row_order(
    proc_pool: SolverPool, n: int, chunksize: int | None, sense: str
) -> None:
    oracle = Enum(STATES, sense=sense)
    w = batch(n, seed=n)
    proc_pool.chunksize = chunksize
    try:
        out = proc_pool.solve_batch(oracle, w)
    finally:
        proc_pool.chunksize = None
    assert out.shape == (n, STATES.shape[1]) and out.dtype == np.float64
    np.testing.assert_array_equal(out, oracle.solve_batch(w) if n else out)
    if n:
        assert proc_pool.last_plan is not None and proc_pool.last_plan.mode == "parallel"


@pytest.mark.parametrize("backend", ["serial", "thread"])
def test_serial_and_thread_backends_match(backend: str, thread_pool: SolverPool) -> None:
    oracle = Enum(STATES, sense="min")
    w = batch(33, seed=3)
    pool = thread_pool if backend == "thread" else SolverPool(backend="serial")
    np.testing.assert_array_equal(pool.solve_batch(oracle, w), oracle.solve_batch(w))
    assert pool.last_plan is not None
    assert pool.last_plan.mode == ("parallel" if backend == "thread" else "in-process")


def test_oracle_is_pickled_once_and_cached_in_workers(proc_pool: SolverPool) -> None:
    oracle = CountingPickles(STATES)
    CountingPickles.pickled = 0
    shipped = proc_pool.stats["oracles_shipped"]
    for seed in range(4):
        proc_pool.solve_batch(oracle, batch(16, seed))
    assert CountingPickles.pickled == 1  # pickled once by the pool, not per call
    assert proc_pool.stats["oracles_shipped"] - shipped <= proc_pool.workers  # once per worker at most
    token = proc_pool._entries[id(oracle)].token
    proc_pool.forget(oracle)  # after a mutation: re-pickled
    assert token not in proc_pool._runner._blobs  # type: ignore[attr-defined]  # the old pickle is gone
    proc_pool.solve_batch(oracle, batch(4))
    assert CountingPickles.pickled == 2
    token = proc_pool._entries[id(oracle)].token
    del oracle
    gc.collect()
    assert token not in proc_pool._runner._blobs  # type: ignore[attr-defined]  # nor a collected oracle's


class _Recorder:
    """Wraps a worker's pipe: records what the caller sends."""

    def __init__(self, conn: object) -> None:
        self.conn = conn
        self.sent: list[tuple[object, ...]] = []

    def send(self, msg: tuple[object, ...]) -> None:
        self.sent.append(msg[:2])
        self.conn.send(msg)  # type: ignore[attr-defined]

    def __getattr__(self, name: str) -> object:
        return getattr(self.conn, name)


def test_workers_keep_the_most_recently_used_oracles_and_drop_the_oldest() -> None:
    with SolverPool(1, "process", fallback=False, max_cached_oracles=2) as pool:
        pool.start()
        worker = pool._runner.workers[0]  # type: ignore[attr-defined]
        worker.conn = recorder = _Recorder(worker.conn)
        oracles = [Enum(STATES) for _ in range(3)]
        tokens = []
        for oracle in [*oracles[:2], oracles[0], oracles[2]]:  # 0 is used again before 2 arrives
            pool.solve_batch(oracle, batch(2))
            tokens.append(pool._entries[id(oracle)].token)
        shipped = [m[1] for m in recorder.sent if m[0] == "oracle"]
        assert shipped == [tokens[0], tokens[1], tokens[3]]  # oracle 0 was still cached the second time
        assert [m[1] for m in recorder.sent if m[0] == "forget"] == [tokens[1]]  # the least recently used
        pool.solve_batch(oracles[1], batch(2))  # dropped: shipped again
        assert pool.stats["oracles_shipped"] == 4 and [m[0] for m in recorder.sent].count("oracle") == 4


def test_workers_run_one_thread_each(proc_pool: SolverPool) -> None:
    with pytest.raises(ValueError, match=r"^threads:1,1(\n|$)"):
        proc_pool.solve_batch(ThreadReport(STATES), batch(2))


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_spawn_start_method_works() -> None:
    with SolverPool(2, "process", fallback=False, start_method="spawn") as pool:
        w = batch(12)
        np.testing.assert_array_equal(pool.solve_batch(Enum(STATES), w), Enum(STATES).solve_batch(w))
        pids = pool.worker_pids()
    assert wait_dead(pids)


def test_bad_rows_fail_before_anything_is_shipped(proc_pool: SolverPool) -> None:
    oracle = CountingPickles(STATES)
    CountingPickles.pickled = 0
    w = batch(10)
    w[3, 1] = np.nan
    w[7, 2] = np.inf
    with pytest.raises(InvalidWeightsError) as info:
        proc_pool.solve_batch(oracle, w)
    assert info.value.rows == (3, 7)
    assert CountingPickles.pickled == 0
    with pytest.raises(InvalidWeightsError):
        proc_pool.solve_batch(oracle, batch(3)[:, :4])  # wrong m
    with pytest.raises(InvalidWeightsError):
        proc_pool.solve_batch(oracle, batch(1)[0])  # (m,) is not a batch
    with pytest.raises(TypeError):
        proc_pool.solve_batch(object(), batch(2))  # type: ignore[arg-type]


# --------------------------------------------------------------------------- errors from workers
def test_library_error_in_worker_names_global_row_and_keeps_traceback(proc_pool: SolverPool) -> None:
    with pytest.raises(InfeasibleError) as info:
        proc_pool.solve_batch(Failing(STATES, "library"), batch(40, flag_row=37))
    err = info.value
    assert err.rows == (37,) and "batch row 37" in str(err)
    assert isinstance(err.__cause__, RemoteTraceback)
    assert 'raise InfeasibleError("no state for this row")' in err.worker_traceback  # type: ignore[attr-defined]
    proc_pool.solve_batch(Enum(STATES), batch(8))  # the pool is still fine


def test_other_exception_in_worker_keeps_its_type_with_row(proc_pool: SolverPool) -> None:
    with pytest.raises(ValueError, match="bad row seen by the oracle") as info:
        proc_pool.solve_batch(Failing(STATES, "value"), batch(20, flag_row=11))
    err = info.value
    assert err.rows == (11,)  # type: ignore[attr-defined]
    assert any("batch row 11" in note for note in getattr(err, "__notes__", []))
    assert "pool_oracles.py" in err.worker_traceback  # type: ignore[attr-defined]


def test_exception_that_does_not_pickle_is_wrapped_with_its_text(proc_pool: SolverPool) -> None:
    with pytest.raises(ImleSolversError, match=r"Unpicklable: .*cannot travel") as info:
        proc_pool.solve_batch(Failing(STATES, "unpicklable"), batch(12, flag_row=5))
    assert info.value.rows == (5,)
    assert "Traceback" in str(info.value)


def test_oracle_that_fails_to_unpickle_in_worker_reports_rows(proc_pool: SolverPool) -> None:
    with pytest.raises(RuntimeError, match="refuses to be rebuilt") as info:
        proc_pool.solve_batch(BrokenUnpickle(STATES), batch(6))
    assert set(info.value.rows) <= set(range(6)) and info.value.rows  # type: ignore[attr-defined]


@pytest.mark.parametrize("backend", ["serial", "thread"])
def test_in_process_and_thread_errors_name_the_row(backend: str, thread_pool: SolverPool) -> None:
    pool = thread_pool if backend == "thread" else SolverPool(backend="serial")
    with pytest.raises(InfeasibleError) as info:
        pool.solve_batch(Failing(STATES, "library"), batch(30, flag_row=29))
    assert info.value.rows == (29,)
    with pytest.raises(ValueError) as info2:
        pool.solve_batch(Failing(STATES, "value"), batch(30, flag_row=4))
    assert info2.value.rows == (4,)  # type: ignore[attr-defined]


def test_unpicklable_oracle_fails_at_submission_with_advice() -> None:
    pool = SolverPool(2, "process")
    try:
        with pytest.raises(TypeError, match="backend='thread'"):
            pool.solve_batch(Locked(STATES), batch(4))
        assert pool.worker_pids() == []  # nothing was started for it
    finally:
        pool.close()
    with SolverPool(2, "thread", fallback=False) as threads:  # the advice works
        np.testing.assert_array_equal(
            threads.solve_batch(Locked(STATES), batch(9)), Enum(STATES).solve_batch(batch(9))
        )


# --------------------------------------------------------------------------- crashes and time-outs
@pytest.fixture(scope="module")
def fault_pool() -> SolverPool:
    with SolverPool(2, "process", fallback=False, chunksize=4) as pool:
        yield pool.start()


def test_killed_worker_chunk_is_retried_and_worker_replaced(fault_pool: SolverPool, tmp_path: object) -> None:
    oracle = Killer(STATES, marker=str(tmp_path) + "/killed-once")  # type: ignore[operator]
    before_pids = set(fault_pool.worker_pids())
    restarts = fault_pool.stats["worker_restarts"]
    w = batch(16, flag_row=9)
    out = fault_pool.solve_batch(oracle, w)  # the worker holding row 9 dies once; its chunk is resent
    np.testing.assert_array_equal(out, Enum(STATES).solve_batch(w))
    assert fault_pool.stats["worker_restarts"] == restarts + 1
    assert len(before_pids - set(fault_pool.worker_pids())) == 1
    assert wait_dead(list(before_pids - set(fault_pool.worker_pids())))


def test_worker_killed_twice_raises_crashed_then_next_call_works(fault_pool: SolverPool) -> None:
    w = batch(16, flag_row=6)
    with pytest.raises(WorkerCrashedError) as info:
        fault_pool.solve_batch(Killer(STATES), w)
    assert 6 in info.value.rows and set(info.value.rows) <= set(range(4, 8))
    assert len(fault_pool.worker_pids()) == 2
    np.testing.assert_array_equal(fault_pool.solve_batch(Enum(STATES), w), Enum(STATES).solve_batch(w))


def test_worker_killed_between_calls_is_replaced(fault_pool: SolverPool) -> None:
    victim = fault_pool.worker_pids()[0]
    restarts = fault_pool.stats["worker_restarts"]
    os.kill(victim, signal.SIGKILL)
    assert wait_dead([victim])
    w = batch(16)
    np.testing.assert_array_equal(fault_pool.solve_batch(Enum(STATES), w), Enum(STATES).solve_batch(w))
    assert victim not in fault_pool.worker_pids() and len(fault_pool.worker_pids()) == 2
    assert fault_pool.stats["worker_restarts"] == restarts + 1


def test_timeout_raises_kills_stuck_worker_and_recovers(fault_pool: SolverPool) -> None:
    fault_pool.timeout = 1.0
    try:
        w = batch(16, flag_row=13)
        old = set(fault_pool.worker_pids())
        start = time.monotonic()
        with pytest.raises(SolverTimeoutError) as info:
            fault_pool.solve_batch(Hang(STATES), w)
        assert time.monotonic() - start < 15
        assert 13 in info.value.rows
        assert len(fault_pool.worker_pids()) == 2  # replacements already starting, in the background
        gone = old - set(fault_pool.worker_pids())
        assert gone and wait_dead(list(gone))
    finally:
        fault_pool.timeout = None
    np.testing.assert_array_equal(fault_pool.solve_batch(Enum(STATES), w), Enum(STATES).solve_batch(w))


def test_a_worker_that_never_reports_is_caught_by_the_timeout_and_replaced() -> None:
    """A worker that takes chunks and never answers (not even with a failure) cannot hang a call."""
    with SolverPool(1, "process", fallback=False, timeout=1.0) as pool:
        pool._runner.worker_target = silent_worker_main  # type: ignore[attr-defined]
        pool.start()
        silent = pool.worker_pids()
        start = time.monotonic()
        with pytest.raises(SolverTimeoutError, match="1 busy worker") as info:
            pool.solve_batch(Enum(STATES), batch(5))
        assert time.monotonic() - start < 5 and info.value.rows == (0, 1, 2, 3, 4)
        assert wait_dead(silent, 3.0) and pool.stats["worker_restarts"] == 1


def test_a_timed_out_thread_pool_stops_the_solves_on_its_own_threads_only() -> None:
    from imle_solvers._interrupt import solving

    elsewhere = threading.Event()  # a solve on a thread of nobody's pool
    released = threading.Event()

    def other_solve() -> None:
        with solving(elsewhere.set):
            released.wait(5.0)

    other = threading.Thread(target=other_solve, daemon=True)
    other.start()
    try:
        with SolverPool(2, "thread", timeout=0.3, chunksize=1) as pool:
            ours = list(pool.start()._runner._executor._threads)  # type: ignore[attr-defined]
            oracle = StoppableHang(STATES)
            start = time.monotonic()
            with pytest.raises(SolverTimeoutError):
                pool.solve_batch(oracle, batch(2, flag_row=0))
            assert oracle.stopped.wait(2.0) and time.monotonic() - start < 2.0
            for t in ours:  # the stopped solve returned: the threads end (no solve left in the background)
                t.join(2.0)
                assert not t.is_alive()
        assert not elsewhere.is_set()
    finally:
        released.set()
        other.join(5.0)


def test_closing_a_thread_pool_ends_its_threads() -> None:
    pool = SolverPool(2, "thread", fallback=False)
    pool.solve_batch(Enum(STATES), batch(4))
    threads = list(pool._runner._executor._threads)  # type: ignore[attr-defined]
    assert len(threads) == 2 and all(t.is_alive() for t in threads)
    pool.close()
    assert not any(t.is_alive() for t in threads)  # close() waits for them (up to a second)


def test_a_worker_ignores_ctrl_c_meant_for_the_caller(proc_pool: SolverPool) -> None:
    victim = proc_pool.worker_pids()[0]
    restarts = proc_pool.stats["worker_restarts"]
    os.kill(victim, signal.SIGINT)  # a terminal's Ctrl-C goes to the caller, which decides
    time.sleep(0.2)
    assert alive(victim)
    np.testing.assert_array_equal(
        proc_pool.solve_batch(Enum(STATES), batch(6)), Enum(STATES).solve_batch(batch(6))
    )
    assert victim in proc_pool.worker_pids() and proc_pool.stats["worker_restarts"] == restarts


class WrongShape(Enum):
    """Overrides ``solve_batch`` and returns one column too few."""

    def solve_batch(self, weights: np.ndarray) -> np.ndarray:
        return np.zeros((weights.shape[0], weights.shape[1] - 1))


@pytest.mark.parametrize(("backend", "rows"), [("serial", 5), ("thread", 3)])
def test_a_solve_batch_of_the_wrong_shape_is_an_error_naming_the_rows(backend: str, rows: int) -> None:
    with SolverPool(2, backend, fallback=False, chunksize=3) as pool:  # type: ignore[arg-type]
        with pytest.raises(
            ImleSolversError, match=rf"returned shape \({rows}, 6\) for input \({rows}, 7\)"
        ) as info:
            pool.solve_batch(WrongShape(STATES), batch(5))
        assert info.value.rows == tuple(range(rows))  # the first chunk's rows (serial: the whole batch)


def test_a_thread_pool_error_names_the_first_failing_chunk_whatever_the_timing() -> None:
    # every chunk fails; the second may fail before the first finishes: the error still names rows 0-2
    with SolverPool(2, "thread", fallback=False, chunksize=3) as pool:
        for _ in range(100):
            with pytest.raises(ImleSolversError) as info:
                pool.solve_batch(WrongShape(STATES), batch(5))
            assert info.value.rows == (0, 1, 2)


class SlowLateBlock(Enum):
    """Fast, except for the solves from the 15th on (the probe's fourth block): 0.5 ms each."""

    def solve(self, weights: np.ndarray) -> np.ndarray:
        if self.solve_calls >= 14:
            time.sleep(5e-4)
        return super().solve(weights)


def test_the_probe_takes_the_best_block_not_the_last() -> None:
    with SolverPool(1, "thread") as pool:
        pool.solve_batch(SlowLateBlock(STATES), batch(64))  # blocks of 2, 4, 8 fast, then 16 slow
        plan = pool.last_plan
        assert plan is not None and plan.probe_rows == 30 and plan.est_row_s is not None
        assert plan.est_row_s < 2e-4


def test_the_overhead_estimate_learns_from_parallel_calls() -> None:
    with SolverPool(2, "thread", fallback=False) as pool:
        default = pool.overhead_s
        for seed in range(3):
            pool.solve_batch(Enum(STATES, delay=0.002), batch(8, seed))
        assert pool.stats["overhead_s"] == pool.overhead_s != default


def test_thread_timeout_raises() -> None:
    with SolverPool(2, "thread", fallback=False, timeout=0.3, chunksize=1) as pool:
        start = time.monotonic()
        with pytest.raises(SolverTimeoutError) as info:
            pool.solve_batch(Enum(STATES, delay=0.2), batch(8))
        assert time.monotonic() - start < 2.0 and info.value.rows


def test_serial_timeout_is_checked_between_rows() -> None:
    pool = SolverPool(backend="serial", timeout=0.05)
    with pytest.raises(SolverTimeoutError) as info:
        pool.solve_batch(Enum(STATES, delay=0.02), batch(20))
    assert info.value.rows[-1] == 19 and 0 not in info.value.rows


# --------------------------------------------------------------------------- no child left behind
def test_leaving_with_block_stops_workers() -> None:
    with SolverPool(2, "process", fallback=False) as pool:
        pool.solve_batch(Enum(STATES), batch(8))
        pids = pool.worker_pids()
        assert len(pids) == 2 and all(alive(p) for p in pids)
    assert wait_dead(pids)
    assert not {p.pid for p in multiprocessing.active_children()} & set(pids)
    with pytest.raises(RuntimeError, match="closed"):
        pool.solve_batch(Enum(STATES), batch(2))
    assert "closed" in repr(pool)


_CTRL_C_SCRIPT = """
import os, signal, sys, threading, time
import numpy as np
sys.path.insert(0, os.getcwd())
from imle_solvers.pool import SolverPool
from tests.support.pool import STATES, alive, batch, wait_dead
from tests.support.oracles import Enum

with SolverPool(2, "process", fallback=False, chunksize=1) as pool:
    pool.start()
    pids = pool.worker_pids()
    assert pids and all(alive(p) for p in pids)
    main = threading.main_thread().ident
    timer = threading.Timer(0.5, signal.pthread_kill, args=(main, signal.SIGINT))
    timer.start()
    try:
        pool.solve_batch(Enum(STATES, delay=0.5), batch(16))
    except KeyboardInterrupt:
        print("interrupted")
    else:
        sys.exit("the call was not interrupted")
    finally:
        timer.cancel()
    assert wait_dead(pids) and pool.worker_pids() == [], "workers survived Ctrl-C"
    # still usable: workers are started again on demand
    expected = Enum(STATES).solve_batch(batch(4))
    np.testing.assert_array_equal(pool.solve_batch(Enum(STATES), batch(4)), expected)
print("ok")
"""


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_keyboard_interrupt_during_a_call_stops_workers() -> None:
    # Run in a child interpreter: a SIGINT that lands outside the call must not stop the whole test run.
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", _CTRL_C_SCRIPT],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.split() == ["interrupted", "ok"]


def test_garbage_collected_pool_stops_its_workers() -> None:
    pool = SolverPool(2, "process").start()
    pids = pool.worker_pids()
    assert pids and all(alive(p) for p in pids)
    del pool
    gc.collect()
    assert wait_dead(pids)


# --------------------------------------------------------------------------- the in-process fallback
class _SteadyClock:
    """A ``time`` stand-in for the probe: every reading is one microsecond after the last, whatever the
    machine's load (a probe of fast rows then measures microseconds, as on an idle machine)."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        self.now += 1e-6
        return self.now


def test_fast_oracle_is_solved_in_process_without_starting_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    from imle_solvers.pool import _serial

    monkeypatch.setattr(_serial, "time", _SteadyClock())  # the decision must not depend on the load
    with SolverPool(2, "process", fallback=True) as pool:  # any oracle may run in the caller
        oracle = Enum(STATES)
        w = batch(64)
        for _ in range(3):
            np.testing.assert_array_equal(pool.solve_batch(oracle, w), oracle.solve_batch(w))
        plan = pool.last_plan
        assert isinstance(plan, PoolPlan) and plan.mode == "in-process"
        assert "min_parallel_seconds" in plan.reason and plan.est_serial_s is not None
        assert pool.worker_pids() == []  # nothing was worth starting a process for
        assert pool.stats["probe_rows"] >= 2 and pool.stats["parallel_calls"] == 0


def test_slow_oracle_goes_parallel_and_threshold_is_respected() -> None:
    oracle = Enum(STATES, delay=0.004)  # sleeps release the GIL: threads really run in parallel
    with SolverPool(2, "thread") as pool:
        pool.solve_batch(oracle, batch(40))
        plan = pool.last_plan
        assert plan is not None and plan.mode == "parallel" and plan.probe_rows >= 1
        assert plan.chunks >= 2 and plan.est_parallel_s is not None and plan.est_serial_s is not None
        assert plan.est_parallel_s < plan.est_serial_s
        pool.min_parallel_seconds = 10.0  # now the whole batch is "too small"
        pool.solve_batch(oracle, batch(40))
        assert pool.last_plan is not None and pool.last_plan.mode == "in-process"
        assert "min_parallel_seconds" in pool.last_plan.reason


def test_the_probe_times_a_new_oracle_on_at_most_a_quarter_of_the_batch() -> None:
    with SolverPool(1, "thread") as pool:  # one worker: every call stays in the caller
        pool.solve_batch(Enum(STATES), batch(64))  # fast rows: blocks of 2, 4, 8, 16 until ≥ 64 // 4
        assert pool.last_plan is not None and 2 <= pool.last_plan.probe_rows <= 30
        pool.solve_batch(Enum(STATES, delay=0.003), batch(64))  # a slow block: 2 ms spent after it
        assert pool.last_plan is not None and pool.last_plan.probe_rows == 2
        assert pool.stats["probe_rows"] <= 32


def test_in_process_calls_keep_the_caller_timing_current() -> None:
    oracle = Enum(STATES)
    with SolverPool(1, "thread") as pool:
        pool.solve_batch(oracle, batch(16))
        seen = [pool.stats["oracles"][0]["serial_row_s"]]
        oracle.delay = 0.004  # the solves got slower: each whole call is measured and averaged in
        for _ in range(4):
            pool.solve_batch(oracle, batch(6))
            seen.append(pool.stats["oracles"][0]["serial_row_s"])
        assert seen[0] < 1e-3 and all(a < b for a, b in itertools.pairwise(seen)) and seen[-1] > 2.5e-3
        assert pool.last_plan is not None and pool.last_plan.est_serial_s == pytest.approx(6 * seen[-2])


def test_plan_records_the_largest_chunk() -> None:
    with SolverPool(2, "thread", fallback=False, chunksize=4) as pool:
        pool.solve_batch(Enum(STATES), batch(10))  # chunks of 4, 4 and 2 rows
        assert pool.last_plan is not None and pool.last_plan.chunks == 3 and pool.last_plan.chunksize == 4
        assert pool.last_plan.mode == "parallel" and pool.last_plan.reason == "fallback=False"


def test_a_deadline_gone_before_the_workers_starts_none() -> None:
    with SolverPool(2, "process", timeout=1e-9) as pool:
        with pytest.raises(SolverTimeoutError, match=r"timeout=1e-09 s") as info:
            pool.solve_batch(Enum(STATES), batch(3))
        assert info.value.rows == (0, 1, 2)
        assert pool.worker_pids() == [] and pool.stats["worker_restarts"] == 0


def test_cost_model_re_measures_the_other_path() -> None:
    oracle = Enum(STATES, delay=0.003)
    with SolverPool(2, "thread") as pool:
        reasons = []
        for seed in range(5):
            out = pool.solve_batch(oracle, batch(24, seed))
            np.testing.assert_array_equal(out, Enum(STATES).solve_batch(batch(24, seed)))
            assert pool.last_plan is not None
            reasons.append((pool.last_plan.mode, pool.last_plan.reason))
        assert reasons[0][0] == "parallel"
        assert any(mode == "in-process" and "re-measuring" in why for mode, why in reasons)
        stats = pool.stats["oracles"][0]
        assert stats["parallel_row_s"] is not None and stats["serial_row_s"] is not None


def test_one_worker_never_beats_the_caller() -> None:
    with SolverPool(1, "thread") as pool:
        pool.solve_batch(Enum(STATES, delay=0.003), batch(20))
        pool.solve_batch(Enum(STATES, delay=0.003), batch(20))
        assert pool.last_plan is not None and pool.last_plan.mode == "in-process"


# --------------------------------------------------------------------------- devices and the layer
class SpyPool:
    """Records the batch sizes it is asked to solve."""

    def __init__(self) -> None:
        self.calls: list[int] = []
        self.inner = SolverPool(backend="serial")

    def solve_batch(self, oracle: object, weights: np.ndarray) -> np.ndarray:
        self.calls.append(weights.shape[0])
        return self.inner.solve_batch(oracle, weights)  # type: ignore[arg-type]


def test_layer_sends_forward_and_backward_rows_in_one_call_each() -> None:
    spy = SpyPool()
    layer = IMLE(Enum(STATES), samples=3, pool=spy, generator=torch.Generator().manual_seed(0))
    w = torch.randn(5, STATES.shape[1], requires_grad=True)
    layer(w).sum().backward()
    assert spy.calls == [15, 30]  # forward B·S rows; backward both MAPs of the two-sided default, 2·B·S


def test_layer_with_process_pool_equals_layer_without(proc_pool: SolverPool) -> None:
    theta = torch.randn(6, STATES.shape[1], dtype=torch.float64)
    upstream = torch.randn(6, 2, STATES.shape[1], dtype=torch.float64)
    grads = []
    for pool in (None, proc_pool):
        w = theta.clone().requires_grad_(True)
        z = IMLE(Enum(STATES), samples=2, pool=pool, generator=torch.Generator().manual_seed(1))(w)
        (z * upstream).sum().backward()
        grads.append((z.detach(), w.grad))
    assert torch.equal(grads[0][0], grads[1][0]) and torch.equal(grads[0][1], grads[1][1])


def test_torch_oracle_never_reaches_the_workers() -> None:
    spy = SpyPool()
    theta = torch.randn(4, 6)
    z = map_solve(TopK(2, 6), theta, spy)  # map_solve keeps a TorchOracle on its device
    assert spy.calls == [] and z.sum().item() == 8
    with SolverPool(2, "process") as pool:  # handed one directly, the pool solves it in the caller
        out = pool.solve_batch(TopK(2, 6), theta.double().numpy())
        assert out.sum() == 8 and pool.worker_pids() == []
        assert pool.last_plan is not None and "TorchOracle" in pool.last_plan.reason


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_tensors_stay_on_device_and_topk_never_syncs() -> None:
    with SolverPool(2, "process") as pool:
        layer = IMLE(TopK(3, 10), samples=4, pool=pool)
        w = torch.randn(8, 10, device="cuda", requires_grad=True)
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            z = layer(w)
            z.sum().backward()
        finally:
            torch.cuda.set_sync_debug_mode(0)
        assert z.device.type == "cuda" and w.grad is not None and w.grad.device.type == "cuda"
        assert pool.stats["calls"] == 0  # TorchOracle: the pool is never asked
        # a solver-backed oracle: one host round trip, the answer back on the device
        zs = map_solve(Enum(STATES), torch.randn(5, STATES.shape[1], device="cuda"), pool)
        assert zs.device.type == "cuda" and pool.stats["calls"] == 1


# --------------------------------------------------------------------------- arguments
@pytest.mark.parametrize(
    "kwargs",
    [
        {"backend": "mpi"},
        {"workers": 0},
        {"timeout": 0},
        {"chunksize": 0},
        {"start_method": "fork"},
        {"backend": "thread", "start_method": "fork"},
        {"start_method": "threads"},
        {"client": object()},
        {"dask_address": "tcp://x:1"},
        {"backend": "thread", "client": object()},
    ],
)
def test_bad_arguments(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        SolverPool(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("name", "value", "requirement"),
    [
        ("workers", 1.5, "a positive integer"),
        ("timeout", -1.0, "a finite number > 0"),
        ("chunksize", 0, "a positive integer"),
        ("min_parallel_seconds", -0.1, "a finite number >= 0"),
        ("min_speedup", 0.0, "a finite number > 0"),
        ("retries", -1, "a non-negative integer"),
        ("worker_threads", 0, "a positive integer"),
        ("max_cached_oracles", 0, "a positive integer"),
        ("fallback", "no", "one of None, True, False"),
        ("backend", "mpi", "one of 'process', 'thread', 'serial', 'dask'"),
    ],
)
def test_each_argument_check_names_the_argument(name: str, value: object, requirement: str) -> None:
    with pytest.raises(ValueError) as info:
        SolverPool(**{name: value, **({"backend": "thread"} if name != "backend" else {})})  # type: ignore[arg-type]
    assert str(info.value) == f"{name} must be {requirement}, got {value!r}"


def test_documented_defaults() -> None:
    pool = SolverPool(backend="thread")
    assert pool.workers == len(os.sched_getaffinity(0)) and pool.timeout is None and pool.chunksize is None
    assert pool.min_parallel_seconds == 0.01 and pool.min_speedup == 1.1 and pool.fallback is None
    assert pool.retries == 1 and pool.worker_threads == 1 and pool.max_cached_oracles == 16
    assert pool.start_method == "forkserver"  # where the platform has it (Linux)
    assert SolverPool().backend == "process"


def test_repr_and_stats() -> None:
    pool = SolverPool(3, "thread", timeout=2.0)
    assert repr(pool) == "SolverPool(backend='thread', workers=3, timeout=2.0, idle, calls=0)"
    oracle = Enum(STATES)
    pool.solve_batch(oracle, batch(3))
    stats = pool.stats
    assert stats["calls"] == 1 and stats["rows"] == 3 and stats["oracles"][0]["oracle"] == "Enum"
    del oracle  # the pool holds oracles weakly: a dead oracle's entry goes with it
    assert pool.stats["oracles"] == []
    pool.close()
    pool.close()  # idempotent


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_pool_benchmark_quick_run_produces_rows() -> None:
    from imle_solvers.benchmarks import pool as bench

    rows = bench.run(quick=True)
    parts = {row["part"] for row in rows}
    assert {"ilp", "grid", "layer/grid"} <= parts
    grid = {row["variant"]: row for row in rows if row["part"] == "grid"}
    assert grid["process×2"]["ms"] > 0 and grid["process×2"]["goal"]


@pytest.mark.parametrize("backend", ["serial", "thread"])
def test_whole_numbers_given_as_floats_are_stored_as_ints_and_solve(backend: str) -> None:
    # SolverPool(chunksize=2.0): a count, stored as 2 (it bounds slices); 2.5 is refused when the pool is made
    with SolverPool(2.0, backend, fallback=False, chunksize=2.0, timeout=5) as pool:  # type: ignore[arg-type]
        assert (pool.workers, pool.chunksize) == (2, 2)
        assert type(pool.chunksize) is int and type(pool.timeout) is float
        oracle = Enum(STATES)
        weights = batch(5)
        np.testing.assert_array_equal(pool.solve_batch(oracle, weights), oracle.solve_batch(weights))
    for bad in ({"chunksize": 2.5}, {"workers": 1.5}, {"chunksize": 0}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            SolverPool(backend=backend, **bad)  # type: ignore[arg-type]
