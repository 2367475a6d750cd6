"""The timer every bench suite reports with: the median round, per call."""

from __future__ import annotations

import pytest

from imle_solvers.benchmarks import _timing, time_per_call


def test_time_per_call_is_the_median_round_per_call(monkeypatch: pytest.MonkeyPatch) -> None:
    rounds = iter([4.0, 1.0, 9.0, 2.0, 3.0])  # seconds of each round of `number` calls
    calls: list[int] = []

    def fn() -> None:
        calls.append(1)

    ticks = iter(t for r in rounds for t in (0.0, r))  # each round: its start at 0, its end at its length
    monkeypatch.setattr(_timing.time, "perf_counter", lambda: next(ticks))
    assert time_per_call(fn, repeat=5, number=2) == pytest.approx(3.0 / 2)  # median round 3 s, 2 calls
    assert len(calls) == 1 + 5 * 2  # one warm-up call, then 5 rounds of 2
