"""Keep perturbed costs in the domain of a cost oracle: ``c ← max(c, floor)`` before solving."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from .._checks import in_range
from ..oracle import MapOracle, TorchOracle

__all__ = ["ClampedCosts"]


class ClampedCosts(MapOracle):
    """A ``"min"`` oracle that raises costs below ``floor`` to ``floor`` before solving (a wrapper).

    For shortest paths on graphs with cycles (the terrain grid), a perturbation ``c − ε`` or a
    target ``c + λ∇zℓ`` can make costs negative, and negative cycles make the problem unbounded
    ([`NegativeCycleError`][imle_solvers.errors.NegativeCycleError]). Clamping at ``floor ≥ 0`` keeps every
    perturbed problem well posed; it only changes instances whose perturbed costs dip below it.

    Wrapping a [`TorchOracle`][imle_solvers.TorchOracle] (such as
    [`TorchGridShortestPath`][imle_solvers.TorchGridShortestPath]) gives a ``TorchOracle`` that clamps on
    the weights' device, so the layer stays free of host round trips: the constructor then returns an
    instance of a ``TorchOracle`` subclass of ``ClampedCosts`` (as ``pathlib.Path`` returns a
    ``PosixPath``), because layers and pools tell device-native oracles apart by that type.

    Parameters
    ----------
    oracle
        The wrapped ``"min"`` oracle.
    floor
        Smallest cost handed to it, a finite number.

    Raises
    ------
    ValueError
        For a ``"max"`` oracle, or a ``floor`` that is not a finite number (NaN would turn every cost
        into NaN, ``±inf`` every cost into ``±inf``).

    References
    ----------
    * Niepert, Minervini & Franceschi, "Implicit MLE: Backpropagating Through Discrete Exponential Family
      Distributions", NeurIPS 2021, eq. 8 (the target ``θ − λ∇zL``: for costs ``c + λ∇zL``, which can dip
      below 0 as the perturbed costs can), <https://arxiv.org/abs/2106.01798>.
    * Vlastelica, Paulus, Musil, Martius & Rolínek, "Differentiation of Blackbox Combinatorial Solvers", ICLR
      2020, <https://arxiv.org/abs/1912.02175> (the Warcraft shortest-path benchmark).
    """

    sense = "min"

    def __new__(cls, oracle: MapOracle, floor: float = 0.0) -> Any:
        if cls is ClampedCosts and isinstance(oracle, TorchOracle):
            return super().__new__(_TorchClampedCosts)
        return super().__new__(cls)

    def __init__(self, oracle: MapOracle, floor: float = 0.0) -> None:
        if oracle.sense != "min":
            raise ValueError("ClampedCosts wraps a 'min' (cost) oracle")
        self.oracle = oracle
        self.floor = in_range("ClampedCosts floor", floor, -math.inf, math.inf, closed="()")
        self.n_vars = oracle.n_vars
        self.expected_nonzeros = oracle.expected_nonzeros

    @property
    def in_process_safe(self) -> bool:  # type: ignore[override]
        """As safe to run in the caller's process as the wrapped oracle."""
        return bool(getattr(self.oracle, "in_process_safe", False))

    def __getnewargs__(self) -> tuple[Any, ...]:
        return (self.oracle, self.floor)

    def solve(self, weights: np.ndarray) -> np.ndarray:
        return self.oracle.solve(np.maximum(weights, self.floor))

    def solve_batch(self, weights: np.ndarray) -> np.ndarray:
        arr = self.validate(weights)
        return self.oracle.solve_batch(np.maximum(arr, self.floor))  # c ← max(c, floor)

    def __repr__(self) -> str:
        return f"ClampedCosts({self.oracle!r}, floor={self.floor})"


class _TorchClampedCosts(ClampedCosts, TorchOracle):  # type: ignore[override]
    """[`ClampedCosts`][imle_solvers.ClampedCosts] around a torch oracle: also clamps on the device.

    Only `solve_torch` is added: ``solve`` and ``solve_batch`` are ``ClampedCosts``' (first in the MRO).
    """

    oracle: TorchOracle

    def solve_torch(self, weights: torch.Tensor) -> torch.Tensor:
        return self.oracle.solve_torch(weights.clamp_min(self.floor))  # c ← max(c, floor)   [..., m]
