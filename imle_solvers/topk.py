"""Top-k: the k-subset MAP oracle of paper Example 2, native to torch (batched, on device)."""

from __future__ import annotations

import torch

from ._checks import positive_int
from .errors import InvalidWeightsError
from .oracle import TorchOracle

__all__ = ["TopK"]


class TopK(TorchOracle):
    """MAP of the k-subset distribution (paper, Example 2): the indicator of the k largest scores.

    ``MAP(θ) = 1[i ∈ top-k(θ)]``. Runs on the weights' device with one ``torch.topk`` and one
    ``scatter``: no host synchronisation. ``TopK(k=1, n_vars)`` is the categorical (one-hot argmax)
    oracle of Proposition 1.

    Parameters
    ----------
    k
        Subset size, ``1 <= k <= n_vars``.
    n_vars
        Number of items m.

    References
    ----------
    Niepert, Minervini & Franceschi, "Implicit MLE: Backpropagating Through Discrete Exponential Family
    Distributions", NeurIPS 2021, <https://arxiv.org/abs/2106.01798>.
    """

    sense = "max"

    def __init__(self, k: int, n_vars: int) -> None:
        n_vars = positive_int("TopK n_vars", n_vars)
        if positive_int("TopK k", k) > n_vars:
            raise ValueError(f"TopK k must be at most n_vars={n_vars}, got {k!r}")
        self.k = int(k)
        self.n_vars = int(n_vars)
        self.expected_nonzeros = float(k)

    def solve_torch(self, weights: torch.Tensor) -> torch.Tensor:
        """Indicators of the ``k`` largest scores of ``(..., m)`` weights; same shape, device and dtype.

        Equal scores at the ``k``-th place are decided by ``torch.topk``: the same way for the same
        weights, though not necessarily the same way on every device.
        """
        if weights.dim() == 0 or weights.shape[-1] != self.n_vars:
            raise InvalidWeightsError(
                f"{self!r} expects weights of shape (..., {self.n_vars}), got {tuple(weights.shape)}"
            )
        idx = torch.topk(weights, self.k, dim=-1).indices  # the k best items   [..., k]
        z = torch.zeros_like(weights)
        return z.scatter_(-1, idx, 1.0)  # z_i = 1[i ∈ top-k]                   [..., m]

    def __repr__(self) -> str:
        return f"TopK(k={self.k}, n_vars={self.n_vars})"
