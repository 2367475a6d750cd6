"""SolverPool on dask.distributed: same answers, the oracle scattered once, errors with rows, time-outs."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from imle_solvers import InfeasibleError, SolverTimeoutError, WorkerCrashedError
from imle_solvers.pool import SolverPool
from tests.support.oracles import Enum, k_subsets
from tests.support.pool_oracles import FLAG, Failing, Hang

distributed = pytest.importorskip("distributed")

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
def test_pool_owned_local_cluster_is_closed_with_the_pool() -> None:
    pool = SolverPool(2, backend="dask", fallback=False)
    w = batch(9)
    np.testing.assert_array_equal(pool.solve_batch(Enum(STATES), w), Enum(STATES).solve_batch(w))
    client = pool._holder[0].client  # type: ignore[union-attr]
    pool.close()
    assert client.status in ("closed", "closing")


def test_lost_oracle_copy_gives_worker_crashed_then_is_sent_again(client: object) -> None:
    """What a dying worker does to a call: its tasks and the scattered oracle are lost ("lost dependencies").

    The cheap form, on threads; ``test_pool_guarantees.py`` kills a real worker process (slow).
    """
    with SolverPool(backend="dask", client=client, fallback=False, chunksize=2, retries=0) as pool:
        oracle = Hang(STATES, seconds=0.6)
        pool.solve_batch(oracle, batch(4))
        future = pool._entries[id(oracle)].dask_future
        timer = threading.Timer(0.2, client.cancel, args=([future],), kwargs={"force": True})  # type: ignore[attr-defined]
        timer.start()
        with pytest.raises(WorkerCrashedError, match="sent again") as info:
            pool.solve_batch(oracle, batch(4, flag_row=0))
        assert 0 in info.value.rows
        shipped = pool.stats["oracles_shipped"]
        np.testing.assert_array_equal(pool.solve_batch(oracle, batch(4)), Enum(STATES).solve_batch(batch(4)))
        assert pool.stats["oracles_shipped"] == shipped + 1


def test_a_call_whose_oracle_copy_was_lost_is_sent_again(client: object) -> None:
    with SolverPool(backend="dask", client=client, fallback=False, chunksize=2, retries=1) as pool:
        oracle = Hang(STATES, seconds=0.6)
        pool.solve_batch(oracle, batch(4))
        future = pool._entries[id(oracle)].dask_future
        timer = threading.Timer(0.2, client.cancel, args=([future],), kwargs={"force": True})  # type: ignore[attr-defined]
        timer.start()
        w = batch(4, flag_row=0)
        np.testing.assert_array_equal(pool.solve_batch(oracle, w), Enum(STATES).solve_batch(w))
        assert pool.stats["oracles_shipped"] == 2
