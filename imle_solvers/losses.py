"""Losses for training through discrete structures (paper sec. 5; predict-then-optimize)."""

from __future__ import annotations

from typing import Literal

import torch

__all__ = ["hamming_loss"]

Reduction = Literal["mean", "sum", "none"]


def _reduce(values: torch.Tensor, reduction: Reduction) -> torch.Tensor:
    if reduction == "mean":
        return values.mean()
    if reduction == "sum":
        return values.sum()
    if reduction == "none":
        return values
    raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


def hamming_loss(z: torch.Tensor, y: torch.Tensor, reduction: Reduction = "mean") -> torch.Tensor:
    """Hamming loss ``ℓ_H(z, y) = (1/m) Σ_i z_i(1 − y_i) + y_i(1 − z_i)`` (paper sec. 5, Fact 1).

    Parameters
    ----------
    z
        ``(..., m)`` predicted states (``(..., S, m)`` broadcasts against ``y`` of ``(..., 1, m)``).
    y
        ``(..., m)`` target states.
    reduction
        ``"mean"`` over all rows, ``"sum"``, or ``"none"`` for the per-row ``(...)`` values.
    """
    per_row = (z * (1 - y) + y * (1 - z)).mean(dim=-1)  # ℓ_H per row   [...]
    return _reduce(per_row, reduction)
