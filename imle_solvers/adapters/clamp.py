"""Keep perturbed costs in the domain of a cost oracle: ``c ← max(c, floor)`` before solving."""

from __future__ import annotations

import numpy as np

from ..oracle import MapOracle

__all__ = ["ClampedCosts"]


class ClampedCosts(MapOracle):
    """A ``"min"`` oracle that raises costs below ``floor`` to ``floor`` before solving (a wrapper).

    For shortest paths on graphs with cycles (the terrain grid), a perturbation ``c − ε`` or a
    target ``c + λ∇zℓ`` can make costs negative, and negative cycles make the problem unbounded
    ([`NegativeCycleError`][imle_solvers.errors.NegativeCycleError]). Clamping at ``floor ≥ 0`` keeps every
    perturbed problem well posed; it only changes instances whose perturbed costs dip below it.

    Parameters
    ----------
    oracle
        The wrapped ``"min"`` oracle.
    floor
        Smallest cost handed to it.
    """

    sense = "min"

    def __init__(self, oracle: MapOracle, floor: float = 0.0) -> None:
        if oracle.sense != "min":
            raise ValueError("ClampedCosts wraps a 'min' (cost) oracle")
        self.oracle, self.floor = oracle, float(floor)
        self.n_vars = oracle.n_vars
        self.expected_nonzeros = oracle.expected_nonzeros
        self.in_process_safe = oracle.in_process_safe  # a wrapper: the inner oracle decides

    def solve(self, weights: np.ndarray) -> np.ndarray:
        return self.oracle.solve(np.maximum(weights, self.floor))

    def solve_batch(self, weights: np.ndarray) -> np.ndarray:
        arr = self.validate(weights)
        return self.oracle.solve_batch(np.maximum(arr, self.floor))  # c ← max(c, floor)

    def __repr__(self) -> str:
        return f"ClampedCosts({self.oracle!r}, floor={self.floor})"
