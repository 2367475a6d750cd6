"""The predict-then-optimize data set: features, true costs, optimal solutions and objectives."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from ..oracle import MapOracle, map_solve, sense_sign

__all__ = ["DEG_MAX", "PTODataset", "solve_optimal", "spo_costs"]

DEG_MAX = 69
"""The largest degree of the SPO cost model whose costs the float32 data hold: the model's smallest
cost, ``3.5^-deg`` (its ``+ 1`` term), is a normal float32 number up to degree 69 (``3.5^-69 ≈ 2.9e-38``,
``3.5^-70 ≈ 8.2e-39`` is below float32's smallest normal number). Beyond, small costs lose their
precision and then become zero; from about degree 130 the largest costs of a data set of a few thousand
instances overflow float32 to infinity, and from degree 567 ``3.5^deg`` overflows float64 itself."""


def solve_optimal(oracle: MapOracle, costs: torch.Tensor, batch: int = 4096) -> torch.Tensor:
    """Optimal states ``z*(c)`` for ``(n, m)`` weights in the oracle's sense (in chunks of ``batch``)."""
    sign = sense_sign(oracle)
    chunks = [costs[i : i + batch].to(torch.float64) for i in range(0, len(costs), batch)]
    out = [map_solve(oracle, sign * chunk) for chunk in chunks]  # z* = MAP(θ), θ = ±c
    return torch.cat(out).to(costs.dtype) if out else costs.new_zeros(costs.shape)


class PTODataset(Dataset):
    """A predict-then-optimize data set (Elmachtoub & Grigas 2022; PyEPO's ``optDataset``).

    Item ``i`` is the tuple ``(x_i, c_i, z*_i, f*_i)``: features, true weights (in the oracle's sense:
    costs for a ``"min"`` oracle, values for a ``"max"`` one), an optimal state ``z*(c_i)`` and its
    objective ``f*_i = ⟨c_i, z*_i⟩``.

    Parameters
    ----------
    features
        ``(n, p)`` inputs of the model (any trailing shape, e.g. images ``(n, 3, H, W)``).
    costs
        ``(n, m)`` true weights.
    oracle
        The MAP oracle of the problem (what a model's predictions are solved with).
    solutions
        ``(n, m)`` optimal states; solved with ``oracle`` (one batched call) when not given.
    info
        Free-form description of how the data were generated (recorded in result files).

    References
    ----------
    Elmachtoub & Grigas, "Smart 'Predict, then Optimize'", Management Science 68(1), 2022,
    <https://arxiv.org/abs/1710.08005>.

    Tang & Khalil, "PyEPO: A PyTorch-based End-to-End Predict-then-Optimize Library for Linear and Integer
    Programming", 2022, <https://arxiv.org/abs/2206.14234>.
    """

    def __init__(
        self,
        features: torch.Tensor,
        costs: torch.Tensor,
        oracle: MapOracle,
        solutions: torch.Tensor | None = None,
        info: dict[str, Any] | None = None,
    ) -> None:
        if len(features) != len(costs):
            raise ValueError(f"features and costs differ in length: {len(features)} vs {len(costs)}")
        if costs.dim() != 2 or costs.shape[1] != oracle.n_vars:
            raise ValueError(f"costs must be (n, {oracle.n_vars}), got {tuple(costs.shape)}")
        self.features = features
        self.costs = costs
        self.oracle = oracle
        self.solutions = solve_optimal(oracle, costs) if solutions is None else solutions
        self.objectives = (self.costs * self.solutions).sum(dim=-1)  # f* = ⟨c, z*⟩   [n]
        self.info = dict(info or {})

    def __len__(self) -> int:
        return len(self.costs)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        return self.features[i], self.costs[i], self.solutions[i], self.objectives[i]

    def to(self, device: str | torch.device) -> PTODataset:
        """The same data set with its tensors on ``device`` (the oracle and the solutions are kept: no
        solve); ``self`` when they are there already."""
        dev = torch.device(device)
        if self.costs.device == dev or (dev.index is None and self.costs.device.type == dev.type):
            return self
        moved = PTODataset.__new__(PTODataset)
        moved.features, moved.costs, moved.solutions, moved.objectives = (
            t.to(dev) for t in (self.features, self.costs, self.solutions, self.objectives)
        )
        moved.oracle, moved.info = self.oracle, self.info
        return moved

    def split(self, n_first: int) -> tuple[PTODataset, PTODataset]:
        """The first ``n_first`` items and the rest, as two data sets sharing the oracle."""
        if not 0 <= n_first <= len(self):
            raise ValueError(f"n_first must be in [0, {len(self)}], got {n_first}")
        parts = []
        for sl in (slice(0, n_first), slice(n_first, None)):
            parts.append(
                PTODataset(self.features[sl], self.costs[sl], self.oracle, self.solutions[sl], self.info)
            )
        return parts[0], parts[1]

    def __repr__(self) -> str:
        return f"PTODataset(n={len(self)}, features={tuple(self.features.shape[1:])}, oracle={self.oracle!r})"


def spo_costs(x: np.ndarray, basis: np.ndarray, deg: int, eps: np.ndarray) -> np.ndarray:
    """The SPO generating model: ``c = [(x Bᵀ/√p + 3)^deg + 1] / 3.5^deg · ε``.

    Parameters
    ----------
    x
        ``(n, p)`` features.
    basis
        ``(d, p)`` 0/1 matrix B.
    deg
        Polynomial degree (model misspecification for a linear predictor grows with it), at most
        `DEG_MAX`.
    eps
        ``(n, d)`` multiplicative noise ``ε ~ U[1 − ē, 1 + ē]``.

    References
    ----------
    Elmachtoub & Grigas, "Smart 'Predict, then Optimize'", Management Science 68(1), 2022,
    <https://arxiv.org/abs/1710.08005>.
    """
    if not 1 <= deg <= DEG_MAX:
        raise ValueError(f"deg must be in [1, {DEG_MAX}] (the costs must fit float32), got {deg!r}")
    p = x.shape[1]
    return ((x @ basis.T / np.sqrt(p) + 3.0) ** deg + 1.0) / 3.5**deg * eps  # [n, d]
