"""The pool's cost model, decision by decision, on pure records: no process, thread or clock."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from imle_solvers.pool._dask import DaskRunner
from imle_solvers.pool._plan import (
    CHUNK_OVER_OVERHEAD,
    EMA,
    PIPE_BYTES_PER_S,
    REMEASURE_CLOSE,
    REMEASURE_EVERY,
    REMEASURE_FIRST,
    TARGET_CHUNK_S,
    Decision,
    Policy,
    Route,
    Timings,
    after_caller,
    after_probe,
    after_workers,
    chunk_bounds,
    decide,
    ema,
    next_overhead,
    route,
)
from imle_solvers.pool._process import ProcessRunner
from imle_solvers.pool._runner import RunnerTraits
from imle_solvers.pool._serial import SerialRunner
from imle_solvers.pool._thread import ThreadRunner

pytestmark = pytest.mark.timeout(5)

PROCESS = ProcessRunner.traits
THREAD = ThreadRunner.traits
DASK = DaskRunner.traits
SERIAL = SerialRunner.traits
EITHER = Route(where="either")


def test_each_runner_declares_its_own_facts() -> None:
    assert SERIAL.in_caller and not SERIAL.isolated and SERIAL.overhead_s == 0.0
    assert not THREAD.in_caller and not THREAD.isolated and not THREAD.transfers and THREAD.local
    assert PROCESS.isolated and PROCESS.transfers and PROCESS.local
    assert DASK.isolated and DASK.transfers and not DASK.local
    assert THREAD.overhead_s < PROCESS.overhead_s < DASK.overhead_s
    assert [t.name for t in (SERIAL, THREAD, PROCESS, DASK)] == ["serial", "thread", "process", "dask"]


# --------------------------------------------------------------------------- route: where rows may go
DEFAULT = Policy()


def where(traits: RunnerTraits, policy: Policy = DEFAULT, **facts: object) -> Route:
    kw: dict[str, object] = {
        "rows": 5,
        "oracle_name": "Enum",
        "device_native": False,
        "in_process_safe": False,
    }
    return route(traits, policy, **{**kw, **facts})  # type: ignore[arg-type]


def test_route_keeps_empty_batches_torch_oracles_and_the_serial_backend_in_the_caller() -> None:
    assert where(PROCESS, rows=0) == Route(where="caller", reason="empty batch")
    torch_route = where(DASK, Policy(timeout=1.0), device_native=True)  # even with a time-out
    assert torch_route.where == "caller" and torch_route.reason.startswith("TorchOracle")
    assert where(SERIAL, Policy(timeout=1.0, fallback=False)) == Route(
        where="caller", reason="backend='serial'"
    )


@pytest.mark.parametrize("traits", [THREAD, PROCESS, DASK])
def test_route_sends_every_row_where_a_timeout_can_stop_it(traits: RunnerTraits) -> None:
    for safe in (True, False):
        got = where(traits, Policy(timeout=2.0, fallback=True), in_process_safe=safe)
        assert got.where == "workers" and got.reason.startswith("timeout=2.0 s")


def test_route_follows_an_explicit_fallback() -> None:
    assert where(PROCESS, Policy(fallback=True)) == EITHER
    assert where(THREAD, Policy(fallback=False), in_process_safe=True) == Route(
        where="workers", reason="fallback=False"
    )


def test_route_by_default_keeps_unsafe_oracles_off_the_caller_of_an_isolating_runner() -> None:
    assert where(THREAD) == EITHER  # no isolation to lose
    assert where(PROCESS, in_process_safe=True) == EITHER
    kept = where(PROCESS, oracle_name="MySolver")
    assert kept.where == "workers"
    assert kept.reason == (
        "backend='process' keeps MySolver out of the caller (in_process_safe=False; fallback=True allows it)"
    )
    assert where(DASK).where == "workers" and where(DASK, in_process_safe=True) == EITHER


# --------------------------------------------------------------------------- chunks
def sizes(bounds: list[tuple[int, int]]) -> list[int]:
    return [b - a for a, b in bounds]


def test_chunk_bounds_explicit_untimed_and_fast_rows_are_equal_chunks() -> None:
    assert chunk_bounds(10, None, 2, offset=3, chunksize=4) == [(3, 7), (7, 11), (11, 13)]
    assert chunk_bounds(640, 3e-3, 2, chunksize=80) == [(a, a + 80) for a in range(0, 640, 80)]  # not guided
    assert chunk_bounds(100, None, 2) == [(a, min(a + 13, 100)) for a in range(0, 100, 13)]  # untimed: 4W
    assert chunk_bounds(100, 1e-6, 3) == [(0, 34), (34, 68), (68, 100)]  # fast rows: one chunk per worker
    assert chunk_bounds(100, 4e-4, 2) == [(0, 50), (50, 100)]  # 40 ms = W least chunks: still one each
    assert chunk_bounds(100, 0.0, 2) == [(0, 50), (50, 100)]  # a no-op oracle
    assert chunk_bounds(3, None, 8) == [(0, 1), (1, 2), (2, 3)]  # never more chunks than rows
    assert chunk_bounds(3, 1.0, 8) == [(0, 1), (1, 2), (2, 3)]
    assert chunk_bounds(0, 1.0, 2) == [] and chunk_bounds(0, None, 2, chunksize=4) == []


def test_chunk_bounds_guided_chunks_shrink_from_a_quarter_to_the_least_chunk() -> None:
    # the TSP epoch of the benchmarks: CP-SAT, ~3 ms a tour, 640 rows on 2 workers; 20 ms = 7 rows
    assert sizes(chunk_bounds(640, 3e-3, 2)) == [160, 120, 90, 68, 51, 38, 29, 21, 16, 12, 9, 7, 7, 7, 5]
    half = chunk_bounds(320, 3e-3, 2, offset=5)
    assert half[0] == (5, 85) and half[-1][1] == 325  # the first: rows / 2W
    # a measured overhead of 5 ms per call: chunks of 10 overheads = 50 ms = 17 rows at least
    assert sizes(chunk_bounds(640, 3e-3, 2, overhead_s=5e-3))[-4:] == [17, 17, 17, 12]
    assert sizes(chunk_bounds(100, 1e-3, 2)) == [25, 20, 20, 20, 15]  # 0.1 s: the least chunk (20 ms) rules
    assert sizes(chunk_bounds(8, 1.0, 2)) == [2, 2, 1, 1, 1, 1]  # slow rows: down to one row a chunk
    assert sizes(chunk_bounds(5, 1.0, 4)) == [1, 1, 1, 1, 1]


def test_chunk_bounds_a_costly_round_trip_keeps_tasks_few() -> None:
    # a Dask task's round trip (0.1 s): chunks of at least ten of them
    assert len(chunk_bounds(320, 1e-2, 2)) == 16  # 3.2 s of solving, 20 ms chunks: guided
    assert sizes(chunk_bounds(320, 1e-2, 2, overhead_s=0.1)) == [100, 100, 100, 20]  # 1 s chunks
    assert chunk_bounds(320, 1e-2, 2, overhead_s=1.0) == [(0, 160), (160, 320)]  # one per worker, never fewer
    big = sizes(chunk_bounds(10**6, 1e-3, 16, overhead_s=0.1))  # 1000 s of solving: ≥ 1 s a task
    assert min(big[:-1]) == 1000 and len(big) < 2 * 16 * (1 + math.log(10**6 / (2 * 16 * 1000)))


@given(
    rows=st.integers(0, 5000),
    workers=st.integers(1, 32),
    row_s=st.one_of(st.none(), st.floats(0.0, 1.0), st.floats(1e-7, 1e-3)),
    overhead_s=st.one_of(st.just(0.0), st.floats(0.0, 0.5)),
    offset=st.integers(0, 100),
)
def test_chunk_bounds_properties(
    rows: int, workers: int, row_s: float | None, overhead_s: float, offset: int
) -> None:
    bounds = chunk_bounds(rows, row_s, workers, offset, overhead_s=overhead_s)
    # every row once, in order
    assert [r for a, b in bounds for r in range(a, b)] == list(range(offset, offset + rows))
    got = sizes(bounds)
    assert all(s > 0 for s in got)
    assert got == sorted(got, reverse=True)  # the big chunks go first
    if rows == 0:
        return
    least_s = max(TARGET_CHUNK_S, CHUNK_OVER_OVERHEAD * overhead_s)
    per_worker = math.ceil(rows / workers)
    assert len(bounds) >= min(workers, rows) or got[0] == per_worker  # every worker gets a chunk
    assert got[0] <= per_worker
    if row_s is None:  # untimed: W … 4W equal chunks, as if each row took 20 ms
        assert len(bounds) <= 4 * workers
        assert len(set(got[:-1])) <= 1
        return
    total = rows * row_s
    if total <= workers * least_s:  # fast rows: one chunk per worker
        assert got[0] == per_worker and len(bounds) == math.ceil(rows / per_worker)
        return
    least_rows = min(math.ceil(least_s / row_s), per_worker)
    assert all(s >= least_rows for s in got[:-1])  # no chunk below the least one but the last
    assert got[0] == max(least_rows, math.ceil(rows / (2 * workers)))  # the first: about rows / 2W
    # few round trips: a geometric run down to the least chunk, then at most 2W least chunks
    assert len(bounds) <= 2 * workers * (1 + math.log(max(1.0, rows / (2 * workers * least_rows)))) + 2


# --------------------------------------------------------------------------- decide
def plan(
    timings: Timings,
    *,
    traits: RunnerTraits = PROCESS,
    route_: Route = EITHER,
    rows: int = 100,
    offset: int = 0,
    row_bytes: int = 80,
    workers: int = 4,
    overhead_s: float = 1e-3,
    **policy: object,
) -> tuple[Decision, Timings]:
    return decide(
        timings,
        route_,
        traits,
        Policy(**policy),  # type: ignore[arg-type]
        rows=rows,
        offset=offset,
        row_bytes=row_bytes,
        workers=workers,
        overhead_s=overhead_s,
    )


SLOW = Timings(serial_row_s=1e-2, worker_row_s=1e-2)  # 1 s for 100 rows: worth 4 workers


def test_slow_rows_go_parallel_with_the_modelled_estimates() -> None:
    decision, _ = plan(SLOW, offset=7)
    chunks = len(chunk_bounds(100, 1e-2, 4))
    transfer = 2 * 100 * 80 / PIPE_BYTES_PER_S
    assert decision.mode == "parallel" and decision.est_serial_s == pytest.approx(1.0)
    assert decision.est_parallel_s == pytest.approx(1e-3 + transfer + 100 * 1e-2 / min(4, chunks))
    assert decision.bounds == tuple(chunk_bounds(100, 1e-2, 4, offset=7))  # global rows after the probe
    assert decision.bounds[0][0] == 7 and decision.bounds[-1][1] == 107
    assert decision.reason.startswith("predicted speed-up") and decision.est_row_s == 1e-2


def test_a_call_of_fewer_chunks_than_workers_is_modelled_on_the_chunks_it_sends() -> None:
    # 3 rows of a slow oracle, chunks of at least one row: 3 chunks for 8 workers, so the parallel time is
    # the rows over 3 busy workers, not over 8 (the 5 others have nothing to do)
    slow = Timings(serial_row_s=0.5, worker_row_s=0.5)
    decision, _ = plan(slow, rows=3, workers=8, chunksize=1)
    assert len(decision.bounds) == 3
    transfer = 2 * 3 * 80 / PIPE_BYTES_PER_S
    assert decision.est_parallel_s == pytest.approx(1e-3 + transfer + 3 * 0.5 / 3)
    assert decision.est_parallel_s > 0.4  # not 3 · 0.5 / 8, the eight workers' share


def test_transfer_counts_only_for_runners_that_copy_rows() -> None:
    piped, _ = plan(SLOW, row_bytes=10**7)
    shared, _ = plan(SLOW, traits=THREAD, row_bytes=10**7)
    assert piped.est_parallel_s is not None and shared.est_parallel_s is not None
    assert piped.est_parallel_s - shared.est_parallel_s == pytest.approx(2 * 100 * 10**7 / PIPE_BYTES_PER_S)


def test_fast_rows_stay_in_the_caller_below_min_parallel_seconds() -> None:
    fast = Timings(serial_row_s=1e-5, worker_row_s=1e-5)
    decision, after = plan(fast, rows=4)
    assert decision.mode == "in-process" and "min_parallel_seconds=10.0 ms" in decision.reason
    assert decision.bounds == () and after == fast  # no streak: a threshold, not a comparison
    below, _ = plan(SLOW, rows=10, min_parallel_seconds=0.1 + 1e-9)  # 10 rows · 10 ms
    at, _ = plan(SLOW, rows=10, min_parallel_seconds=0.1)
    assert below.mode == "in-process" and at.mode == "parallel"


def test_min_speedup_is_the_threshold() -> None:
    decision, _ = plan(SLOW)
    assert decision.est_serial_s is not None and decision.est_parallel_s is not None
    speedup = decision.est_serial_s / decision.est_parallel_s
    assert plan(SLOW, min_speedup=speedup * 0.999)[0].mode == "parallel"
    assert plan(SLOW, min_speedup=speedup)[0].mode == "parallel"  # reaching it is enough
    refused, _ = plan(SLOW, min_speedup=speedup * 1.001)
    assert refused.mode == "in-process" and "< min_speedup=" in refused.reason


def test_one_local_worker_never_beats_the_caller_but_one_remote_may() -> None:
    one, after = plan(SLOW, workers=1)
    assert one.mode == "in-process" and one.reason == "one worker cannot beat the caller" and after == SLOW
    remote, _ = plan(SLOW, traits=DASK, workers=1, overhead_s=0.0)
    assert remote.mode == "in-process" and "min_speedup" in remote.reason  # decided on the numbers


def test_measured_parallel_time_replaces_the_formula() -> None:
    measured = dataclasses.replace(SLOW, parallel_row_s=2e-2)  # the workers got less CPU than modelled
    decision, _ = plan(measured)
    assert decision.est_parallel_s == pytest.approx(100 * 2e-2) and decision.mode == "in-process"


def test_serial_time_is_the_lower_of_caller_and_worker_and_chunks_use_the_worker_time() -> None:
    decision, _ = plan(Timings(serial_row_s=5e-3, worker_row_s=1e-2))
    assert decision.est_serial_s == pytest.approx(0.5) and decision.est_row_s == 1e-2
    decision, _ = plan(Timings(serial_row_s=1e-2, worker_row_s=5e-3))
    assert decision.est_serial_s == pytest.approx(0.5)
    probed_only, _ = plan(Timings(serial_row_s=1e-2))
    assert probed_only.est_row_s == 1e-2 and probed_only.mode == "parallel"


def test_forced_routes_and_the_corner_cases() -> None:
    workers_only, after = plan(Timings(), route_=Route(where="workers", reason="fallback=False"), offset=2)
    assert workers_only.mode == "parallel" and workers_only.reason == "fallback=False" and after == Timings()
    assert workers_only.bounds == tuple(chunk_bounds(100, None, 4, offset=2))
    caller_only, _ = plan(SLOW, route_=Route(where="caller", reason="backend='serial'"))
    assert caller_only.mode == "in-process" and caller_only.bounds == ()
    untimed, _ = plan(Timings())
    assert untimed.mode == "parallel" and untimed.reason == "not timed yet"
    nothing_left, _ = plan(SLOW, rows=0)
    assert nothing_left.mode == "in-process" and nothing_left.reason == "all rows solved while timing"


def decisions(timings: Timings, calls: int, **kw: object) -> tuple[list[str], Timings]:
    modes = []
    for _ in range(calls):
        decision, timings = plan(timings, **kw)  # type: ignore[arg-type]
        modes.append(decision.mode)
    return modes, timings


def test_the_other_path_is_re_measured_first_early_then_every_32_calls() -> None:
    clear = dataclasses.replace(SLOW, parallel_row_s=1e-3)  # parallel 10× faster
    modes, after = decisions(clear, REMEASURE_FIRST + REMEASURE_EVERY)
    first = REMEASURE_FIRST - 1
    assert modes[first] == "in-process" and modes.count("in-process") == 2
    assert modes[first + REMEASURE_EVERY] == "in-process"
    assert after.remeasures == 2 and after.streak == 0
    decision, _ = plan(
        dataclasses.replace(clear, streak=REMEASURE_EVERY - 1, last_mode="parallel", remeasures=1)
    )
    assert decision.mode == "in-process" and decision.reason.startswith("re-measuring the in-process path")


def test_close_paths_are_re_measured_every_8_calls() -> None:
    close = dataclasses.replace(SLOW, parallel_row_s=1e-2 / 1.3)  # parallel 1.3× faster: a close call
    modes, _ = decisions(close, REMEASURE_FIRST + 2 * REMEASURE_CLOSE)
    flips = [i for i, m in enumerate(modes) if m == "in-process"]
    assert flips == [
        REMEASURE_FIRST - 1,
        REMEASURE_FIRST - 1 + REMEASURE_CLOSE,
        REMEASURE_FIRST - 1 + 2 * REMEASURE_CLOSE,
    ]


def test_a_streak_in_process_is_broken_by_one_parallel_call() -> None:
    slower = dataclasses.replace(SLOW, parallel_row_s=5e-2)
    modes, after = decisions(slower, REMEASURE_FIRST)
    assert modes == ["in-process"] * (REMEASURE_FIRST - 1) + ["parallel"] and after.last_mode == "in-process"


def test_switching_paths_restarts_the_streak() -> None:
    decision, after = plan(dataclasses.replace(SLOW, streak=5, last_mode="in-process", remeasures=1))
    assert decision.mode == "parallel" and after.streak == 1 and after.last_mode == "parallel"


# --------------------------------------------------------------------------- folding measurements in
def test_measurements_fold_into_the_timings() -> None:
    assert ema(None, 3.0) == 3.0 and ema(1.0, 3.0) == pytest.approx((1 - EMA) * 1.0 + EMA * 3.0)
    probed = after_probe(Timings(), 2e-3)
    assert probed.serial_row_s == 2e-3 and probed.serial_probed and probed.timed
    first_call = after_caller(probed, 1e-3)  # a whole call replaces the probe's estimate
    assert first_call.serial_row_s == 1e-3 and not first_call.serial_probed
    assert after_caller(first_call, 2e-3).serial_row_s == pytest.approx(ema(1e-3, 2e-3))

    shipped = after_workers(Timings(), rows=10, solve_s=0.5, wall_s=0.4, first_use=True)
    assert shipped.worker_row_s == pytest.approx(0.05) and shipped.serial_row_s == pytest.approx(0.05)
    assert shipped.parallel_row_s is None  # the call that shipped the oracle is not representative
    again = after_workers(shipped, rows=10, solve_s=0.3, wall_s=0.2, first_use=False)
    assert again.worker_row_s == pytest.approx(ema(0.05, 0.03)) and again.parallel_row_s == pytest.approx(
        0.02
    )
    assert again.serial_row_s == pytest.approx(0.05)  # the caller's own measurement is kept once it exists
    assert after_workers(Timings(), rows=0, solve_s=0.0, wall_s=0.1, first_use=False).worker_row_s == 0.0

    assert next_overhead(1e-3, wall_s=0.5, slowest_s=0.2, first_use=True) == 1e-3
    assert next_overhead(1e-3, wall_s=0.5, slowest_s=0.2, first_use=False) == pytest.approx(ema(1e-3, 0.3))
    assert next_overhead(1e-3, wall_s=0.1, slowest_s=0.2, first_use=False) == pytest.approx(ema(1e-3, 0.0))
