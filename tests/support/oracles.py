"""Enumeration oracles for the tests: brute force over explicit state lists, with call counters."""

from __future__ import annotations

import numpy as np

from imle_solvers import MapOracle


class EnumOracle(MapOracle):
    """MAP by brute force over an explicit list of states; ``sense`` configurable."""

    def __init__(self, states: np.ndarray, sense: str = "max") -> None:
        self.states = np.asarray(states, dtype=np.float64)
        self.n_vars = self.states.shape[1]
        self.sense = sense  # type: ignore[assignment]
        self.expected_nonzeros = float(self.states.sum(1).mean())
        self.batch_calls: list[int] = []
        self.solve_calls = 0

    def solve(self, weights: np.ndarray) -> np.ndarray:
        self.solve_calls += 1
        scores = self.states @ weights
        best = np.argmax(scores) if self.sense == "max" else np.argmin(scores)
        return self.states[best].copy()

    def solve_batch(self, weights: np.ndarray) -> np.ndarray:
        self.batch_calls.append(int(np.shape(weights)[0]) if np.ndim(weights) else 0)
        return super().solve_batch(weights)


def k_subsets(m: int, k: int) -> np.ndarray:
    """All 0/1 vectors of length m with exactly k ones, in lexicographic order."""
    from itertools import combinations

    out = []
    for idx in combinations(range(m), k):
        z = np.zeros(m)
        z[list(idx)] = 1.0
        out.append(z)
    return np.array(out)
