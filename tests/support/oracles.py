"""Enumeration oracles for the tests: brute force over explicit state lists, with call counters."""

from __future__ import annotations

import time
from itertools import combinations

import numpy as np

from imle_solvers import MapOracle


class Enum(MapOracle):
    """MAP by brute force over an explicit list of states; ``sense`` configurable.

    Module-level and picklable, so pool workers can rebuild it. It keeps the base class's
    ``solve_batch`` (a loop over `solve`), so a pool solves its rows one by one and checks the call's
    time limit between them; ``delay`` seconds of sleep per solve release the GIL.
    """

    def __init__(self, states: np.ndarray, sense: str = "max", delay: float = 0.0) -> None:
        self.states = np.asarray(states, dtype=np.float64)
        self.n_vars = self.states.shape[1]
        self.sense = sense  # type: ignore[assignment]
        self.expected_nonzeros = float(self.states.sum(1).mean())
        self.delay = delay
        self.solve_calls = 0

    def solve(self, weights: np.ndarray) -> np.ndarray:
        self.solve_calls += 1
        if self.delay:
            time.sleep(self.delay)
        scores = self.states @ weights
        best = np.argmax(scores) if self.sense == "max" else np.argmin(scores)
        return self.states[best].copy()


class EnumOracle(Enum):
    """`Enum` that also records the batch size of every ``solve_batch`` call.

    A separate class because recording means overriding ``solve_batch``, and a pool treats an oracle
    that overrides it differently: it hands the whole chunk to ``solve_batch`` instead of looping
    `solve` row by row with the time limit checked between rows. The pool tests need the loop, so
    they use `Enum`; the layer tests use this class to count how the layer batches its calls.
    """

    def __init__(self, states: np.ndarray, sense: str = "max", delay: float = 0.0) -> None:
        super().__init__(states, sense, delay)
        self.batch_calls: list[int] = []

    def solve_batch(self, weights: np.ndarray) -> np.ndarray:
        self.batch_calls.append(int(np.shape(weights)[0]) if np.ndim(weights) else 0)
        return super().solve_batch(weights)


def k_subsets(m: int, k: int) -> np.ndarray:
    """All 0/1 vectors of length m with exactly k ones, in lexicographic order: shape ``(C(m, k), m)``."""
    rows = []
    for idx in combinations(range(m), k):
        z = np.zeros(m)
        z[list(idx)] = 1.0
        rows.append(z)
    return np.array(rows, dtype=np.float64).reshape(-1, m)  # [C(m, k), m], (0, m) when k > m
