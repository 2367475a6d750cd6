"""The serial backend: the runner that solves in the caller, and how a new oracle is timed there.

Every pool holds one: it is the whole ``"serial"`` backend, and the other backends' pools solve a
batch with it when the cost model (`_plan.py`) predicts no gain from the workers. A solve running in
the caller cannot be stopped (the deadline is checked between rows) and takes the caller down if the
solver crashes: `_plan.route` says when a pool may use it.
"""

from __future__ import annotations

import time

import numpy as np

from ..oracle import MapOracle
from ._chunk import solve_chunk
from ._failure import ChunkError, raise_failure
from ._runner import Deadline, InProcessRunner, RunnerOptions, RunnerTraits, RunResult

__all__ = ["SerialRunner"]

PROBE_S = 2e-3
"""The probe stops after about this much solving (or a quarter of the batch)."""


class SerialRunner(InProcessRunner):
    """Solves every chunk on the calling thread (see ``Runner``)."""

    traits = RunnerTraits(
        name="serial", in_caller=True, isolated=False, transfers=False, local=True, overhead_s=0.0
    )

    def __init__(self, options: RunnerOptions | None = None) -> None:
        pass

    def start(self) -> None:
        pass

    def n_workers(self) -> int:
        return 1

    def active(self) -> bool:
        return False

    def close(self) -> None:
        pass

    def run(
        self,
        token: int,
        oracle: MapOracle,
        weights: np.ndarray,
        bounds: list[tuple[int, int]],
        deadline: Deadline,
        out: np.ndarray,
    ) -> RunResult:
        t0 = time.perf_counter()
        seconds = 0.0
        for a, b in bounds:
            seconds += self.solve(oracle, weights, a, b, deadline, out)
        return RunResult(solve_s=seconds, slowest_s=seconds, wall_s=time.perf_counter() - t0, first_use=False)

    @staticmethod
    def solve_rows(
        oracle: MapOracle, weights: np.ndarray, start: int, deadline: Deadline
    ) -> tuple[np.ndarray, float]:
        """States of ``weights`` (global rows ``start …``) and the solving seconds. Failures are re-raised
        as the pool raises a worker's (with the global rows)."""
        try:
            return solve_chunk(oracle, weights, start, "in-process", deadline)
        except ChunkError as err:
            failed = err
        raise_failure(failed.failure, live=failed.original)  # outside `except`: no chained ChunkError

    def solve(
        self, oracle: MapOracle, weights: np.ndarray, a: int, b: int, deadline: Deadline, out: np.ndarray
    ) -> float:
        """Solve rows ``a:b`` into ``out[a:b]``; returns the solving seconds."""
        out[a:b], seconds = self.solve_rows(oracle, weights[a:b], a, deadline)
        return seconds

    def probe(
        self, oracle: MapOracle, weights: np.ndarray, deadline: Deadline, out: np.ndarray
    ) -> tuple[int, float]:
        """Solve leading rows to time a new oracle; returns how many were solved and the time per row.

        Blocks of 2, 4, 8, … rows go through one ``solve_batch``-like call each (an oracle that batches
        internally is timed as it will run), until ~`PROBE_S` were spent or a quarter of the batch is
        done; the best block's time per row is the estimate (the first block pays for cold caches). The
        states are written to ``out`` (they are part of the answer, not extra work).
        """
        n = weights.shape[0]
        done, spent, size, rate = 0, 0.0, 2, float("inf")
        while done < n and (done == 0 or (spent < PROBE_S and done < n // 4)):
            k = min(size, n - done)
            t1 = time.perf_counter()
            self.solve(oracle, weights, done, done + k, deadline, out)
            dt = time.perf_counter() - t1
            spent, done, size, rate = spent + dt, done + k, size * 2, min(rate, dt / k)  # first: coldest
        return done, rate
