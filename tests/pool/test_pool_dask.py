"""SolverPool on dask.distributed: same answers, the oracle scattered once, errors with rows, time-outs,
a stuck worker replaced, a lost scheduler, oracles that do not pickle."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from imle_solvers import InfeasibleError, SolverTimeoutError, WorkerCrashedError
from imle_solvers.pool import SolverPool
from imle_solvers.pool._dask import DaskRunner
from imle_solvers.pool._runner import Deadline, RunnerOptions
from tests.support.oracles import Enum, k_subsets
from tests.support.pool_oracles import FLAG, Failing, Hang, Locked

distributed = pytest.importorskip("distributed")

pytestmark = pytest.mark.timeout(15)

STATES = k_subsets(6, 2)


def batch(n: int, seed: int = 0, flag_row: int | None = None) -> np.ndarray:
    w = np.random.default_rng(seed).normal(size=(n, STATES.shape[1]))
    if flag_row is not None:
        w[flag_row, 0] = FLAG
    return w


@pytest.fixture(scope="module")
def client() -> object:
    cluster = distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None
    )
    with distributed.Client(cluster) as c:
        yield c
    cluster.close()


@pytest.fixture(scope="module")
def dask_pool(client: object) -> SolverPool:
    with SolverPool(backend="dask", client=client, fallback=False, chunksize=5) as pool:
        yield pool


def test_dask_pool_matches_serial_and_scatters_once(dask_pool: SolverPool) -> None:
    oracle = Enum(STATES, sense="min")
    shipped = dask_pool.stats["oracles_shipped"]
    for seed in range(3):
        w = batch(23, seed)
        np.testing.assert_array_equal(dask_pool.solve_batch(oracle, w), oracle.solve_batch(w))
    assert dask_pool.stats["oracles_shipped"] == shipped + 1
    assert dask_pool.last_plan is not None and dask_pool.last_plan.chunks == 5
    assert dask_pool.last_plan.workers == 2


def test_dask_error_names_global_row(dask_pool: SolverPool) -> None:
    with pytest.raises(InfeasibleError) as info:
        dask_pool.solve_batch(Failing(STATES, "library"), batch(20, flag_row=17))
    assert info.value.rows == (17,)
    assert "no state for this row" in info.value.worker_traceback  # type: ignore[attr-defined]


def test_dask_timeout(dask_pool: SolverPool) -> None:
    dask_pool.timeout = 0.5
    try:
        start = time.monotonic()
        with pytest.raises(SolverTimeoutError) as info:
            # a task already running cannot be stopped in a thread: keep the "hang" short
            dask_pool.solve_batch(Hang(STATES, seconds=2.0), batch(10, flag_row=2))
        assert time.monotonic() - start < 10 and 2 in info.value.rows
    finally:
        dask_pool.timeout = None


def test_client_passed_in_is_left_open(client: object) -> None:
    pool = SolverPool(backend="dask", client=client, fallback=False)
    pool.solve_batch(Enum(STATES), batch(4))
    pool.close()
    assert client.status == "running"  # type: ignore[attr-defined]


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_pool_owned_local_cluster_is_closed_with_the_pool() -> None:
    pool = SolverPool(2, backend="dask", fallback=False)
    w = batch(9)
    np.testing.assert_array_equal(pool.solve_batch(Enum(STATES), w), Enum(STATES).solve_batch(w))
    client = pool._runner.client  # type: ignore[attr-defined]
    pool.close()
    assert client.status in ("closed", "closing")


def test_lost_oracle_copy_gives_worker_crashed_then_is_sent_again(client: object) -> None:
    """What a dying worker does to a call: its tasks and the scattered oracle are lost ("lost dependencies").

    The cheap form, on threads; ``test_pool_guarantees.py`` kills a real worker process (slow).
    """
    with SolverPool(backend="dask", client=client, fallback=False, chunksize=2, retries=0) as pool:
        oracle = Hang(STATES, seconds=0.6)
        pool.solve_batch(oracle, batch(4))
        future = pool._runner._futures[pool._entries[id(oracle)].token]  # type: ignore[attr-defined]
        timer = threading.Timer(0.2, client.cancel, args=([future],), kwargs={"force": True})  # type: ignore[attr-defined]
        timer.start()
        with pytest.raises(WorkerCrashedError, match="sent again") as info:
            pool.solve_batch(oracle, batch(4, flag_row=0))
        assert 0 in info.value.rows
        shipped = pool.stats["oracles_shipped"]
        np.testing.assert_array_equal(pool.solve_batch(oracle, batch(4)), Enum(STATES).solve_batch(batch(4)))
        assert pool.stats["oracles_shipped"] == shipped + 1


def test_an_oracle_copy_lost_between_calls_is_scattered_again(client: object) -> None:
    with SolverPool(backend="dask", client=client, fallback=False, chunksize=2, retries=0) as pool:
        oracle = Enum(STATES)  # no resend: the lost copy is noticed before the call is sent
        pool.solve_batch(oracle, batch(4))
        future = pool._runner._futures[pool._entries[id(oracle)].token]  # type: ignore[attr-defined]
        client.cancel([future], force=True)  # type: ignore[attr-defined]  # as if its workers had died
        deadline = time.monotonic() + 5
        while future.status == "finished" and time.monotonic() < deadline:
            time.sleep(0.01)
        np.testing.assert_array_equal(pool.solve_batch(oracle, batch(4)), Enum(STATES).solve_batch(batch(4)))
        assert pool.stats["oracles_shipped"] == 2


def test_a_call_whose_oracle_copy_was_lost_is_sent_again(client: object) -> None:
    with SolverPool(backend="dask", client=client, fallback=False, chunksize=2, retries=1) as pool:
        oracle = Hang(STATES, seconds=0.6)
        pool.solve_batch(oracle, batch(4))
        future = pool._runner._futures[pool._entries[id(oracle)].token]  # type: ignore[attr-defined]
        timer = threading.Timer(0.2, client.cancel, args=([future],), kwargs={"force": True})  # type: ignore[attr-defined]
        timer.start()
        w = batch(4, flag_row=0)
        np.testing.assert_array_equal(pool.solve_batch(oracle, w), Enum(STATES).solve_batch(w))
        assert pool.stats["oracles_shipped"] == 2


# --------------------------------------------------------------------------- what the caller is told
def test_an_unpicklable_oracle_fails_at_submission_with_advice(client: object) -> None:
    with SolverPool(backend="dask", client=client, fallback=False) as pool:
        with pytest.raises(TypeError, match="backend='thread'") as info:
            pool.solve_batch(Locked(STATES), batch(4))
        assert "cannot be sent to Dask workers" in str(info.value)
        assert pool.stats["oracles_shipped"] == 0


def test_a_deadline_that_has_passed_is_a_timeout_error(client: object) -> None:
    runner = DaskRunner(RunnerOptions(workers=2, client=client))
    past = Deadline(seconds=0.5, at=time.monotonic() - 1.0)
    out = np.empty((6, STATES.shape[1]))
    with pytest.raises(SolverTimeoutError, match="before its tasks were submitted") as info:
        runner.run(1, Enum(STATES), batch(6), [(0, 3), (3, 6)], past, out)
    assert info.value.rows == tuple(range(6)) and runner.scatters == 0
    with SolverPool(backend="dask", client=client, fallback=False, timeout=1e-9) as pool:
        with pytest.raises(SolverTimeoutError) as info:
            pool.solve_batch(Enum(STATES), batch(4))
        assert "timeout=1e-09 s" in str(info.value)


def test_a_client_that_lost_its_scheduler_gives_advice_every_time() -> None:
    cluster = distributed.LocalCluster(
        n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None, protocol="tcp"
    )
    own = distributed.Client(cluster.scheduler_address)
    try:
        pool = SolverPool(backend="dask", client=own, fallback=False)
        np.testing.assert_array_equal(
            pool.solve_batch(Enum(STATES), batch(3)), Enum(STATES).solve_batch(batch(3))
        )
        cluster.close()
        for _ in range(2):  # not a raw OSError, and not "ConnectionPool is closed" the second time
            start = time.monotonic()
            with pytest.raises(WorkerCrashedError, match="create a new Client") as info:
                pool.solve_batch(Enum(STATES), batch(3))
            assert info.value.rows == (0, 1, 2) and time.monotonic() - start < 5
        pool.close()
    finally:
        own.close(timeout=2)
        cluster.close()


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_pool_that_lost_its_scheduler_reconnects_when_it_is_back() -> None:
    cluster = distributed.LocalCluster(
        n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None, protocol="tcp"
    )
    address = cluster.scheduler_address
    with SolverPool(backend="dask", dask_address=address, fallback=False) as pool:
        oracle = Enum(STATES)
        np.testing.assert_array_equal(pool.solve_batch(oracle, batch(3)), oracle.solve_batch(batch(3)))
        cluster.close()
        start = time.monotonic()
        with pytest.raises(WorkerCrashedError, match="reconnects on its next call") as info:
            pool.solve_batch(oracle, batch(3))
        assert info.value.rows == (0, 1, 2) and time.monotonic() - start < 5
        port = int(address.rsplit(":", 1)[1])
        back = distributed.LocalCluster(
            n_workers=1,
            threads_per_worker=1,
            processes=False,
            dashboard_address=None,
            protocol="tcp",
            scheduler_port=port,
        )
        try:
            np.testing.assert_array_equal(pool.solve_batch(oracle, batch(5)), oracle.solve_batch(batch(5)))
            assert pool.stats["oracles_shipped"] == 2  # the new cluster got the oracle again
        finally:
            pool.close()
            back.close()


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_worker_stuck_in_a_hung_solve_is_replaced_after_the_timeout() -> None:
    """Was: the stuck worker kept its thread busy and every later call timed out behind it."""
    with SolverPool(2, backend="dask", fallback=False, chunksize=2) as pool:
        oracle = Hang(STATES, seconds=600)
        w = batch(4)  # the first call starts the cluster; its workers import the library: no time-out yet
        np.testing.assert_array_equal(pool.solve_batch(oracle, w), Enum(STATES).solve_batch(w))
        pool.timeout = 5.0
        with pytest.raises(SolverTimeoutError, match="being restarted") as info:
            pool.solve_batch(oracle, batch(4, flag_row=0))
        assert 0 in info.value.rows and pool.stats["worker_restarts"] == 1
        for seed in range(3):  # later calls run on healthy workers, within the time-out
            w = batch(4, seed=seed)
            np.testing.assert_array_equal(pool.solve_batch(oracle, w), Enum(STATES).solve_batch(w))
