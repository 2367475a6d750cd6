"""The timer of every `imle-solvers bench` suite (exported as `imle_solvers.benchmarks.time_per_call`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

__all__ = ["time_per_call"]


def time_per_call(
    fn: Callable[[], Any], repeat: int = 5, number: int | None = None, min_time: float = 0.2
) -> float:
    """Median seconds per call of ``fn`` over ``repeat`` rounds of ``number`` calls.

    ``number`` is chosen so that one round lasts about ``min_time`` seconds when not given.
    One warm-up call runs first (imports, caches, JIT).
    """
    fn()
    if number is None:
        start = time.perf_counter()
        fn()
        once = max(time.perf_counter() - start, 1e-7)
        number = max(1, int(min_time / once))
    rounds = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        rounds.append((time.perf_counter() - start) / number)
    rounds.sort()
    return rounds[len(rounds) // 2]
