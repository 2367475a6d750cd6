"""The network that scores each number, and the assignment weights its scores define."""

from __future__ import annotations

import torch
from torch import nn

from ..._checks import in_range, positive_int
from .data import DIGIT_SIZE

__all__ = ["NumberScorer", "assignment_weights", "rank_weights"]


class NumberScorer(nn.Module):
    """One real score per number image ``[..., 8, 8·digits]`` → ``[...]``: a small CNN.

    Three 3 × 3 convolutions (``channels``, ``2 · channels``, ``4 · channels``; batch normalisation,
    ReLU) with a 2 × 2 max-pool after the second and the third, dropout, a dense layer (``hidden``,
    ReLU) and a linear output: the convolutional scorer of Grover et al. (2019), sized for 8 × 8
    digits. Every number of a sequence is scored independently by the same network.

    Parameters
    ----------
    digits
        Digits per number (the image is ``8 × 8·digits``).
    channels
        Channels of the first convolution.
    hidden
        Width of the dense layer.
    dropout
        Dropout probability before the dense layer.

    References
    ----------
    Grover, Wang, Zweig & Ermon, "Stochastic Optimization of Sorting Networks via Continuous
    Relaxations", ICLR 2019, <https://arxiv.org/abs/1903.08850>.
    """

    def __init__(self, digits: int, channels: int = 8, hidden: int = 64, dropout: float = 0.3) -> None:
        super().__init__()
        self.digits = positive_int("digits", digits)
        c, h = positive_int("channels", channels), positive_int("hidden", hidden)
        in_range("dropout", dropout, 0.0, 1.0)
        self.features = nn.Sequential(
            *_conv(1, c),
            *_conv(c, 2 * c),
            nn.MaxPool2d(2),  # [2c, 4, 4·d]
            *_conv(2 * c, 4 * c),
            nn.MaxPool2d(2),  # [4c, 2, 2·d]
        )
        flat = 4 * c * (DIGIT_SIZE // 4) * (DIGIT_SIZE * self.digits // 4)
        self.head = nn.Sequential(
            nn.Flatten(), nn.Dropout(dropout), nn.Linear(flat, h), nn.ReLU(), nn.Linear(h, 1)
        )

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        lead = images.shape[:-2]
        x = images.reshape(-1, 1, *images.shape[-2:])  # one channel   [N, 1, 8, 8·d]
        return self.head(self.features(x)).reshape(lead)  # s: one score per number   [...]


def _conv(c_in: int, c_out: int) -> tuple[nn.Module, ...]:
    return nn.Conv2d(c_in, c_out, 3, padding=1), nn.BatchNorm2d(c_out), nn.ReLU()


def rank_weights(
    n: int, *, device: torch.device | None = None, dtype: torch.dtype | None = None
) -> torch.Tensor:
    """``w_r = 2r − (n − 1)``, ``r = 0 … n−1``: the rank weights of `assignment_weights` ``[n]``."""
    return 2 * torch.arange(n, device=device, dtype=dtype) - (n - 1)


def assignment_weights(scores: torch.Tensor) -> torch.Tensor:
    """Scores ``s`` ``[..., n]`` → the assignment weights ``θ[r, i] = w_r · s_i`` ``[..., n · n]``.

    Rows are ranks (ascending), columns the items, flattened row-major as
    [`TorchMatching`][imle_solvers.TorchMatching]``(n, n)`` orders them. By the rearrangement inequality
    ``MAP(θ) = argmax_π Σ_r w_r s_{π(r)}`` puts the ``r``-th smallest score at rank ``r``: the
    permutation that sorts the scores. These are the logits of Grover et al.'s (2019) NeuralSort
    score-to-rank matrix, ``(n + 1 − 2i) s_j − Σ_k |s_j − s_k|`` in their descending order, without the
    second term: it depends on the column alone, so it changes neither the MAP permutation (every
    permutation uses each column once) nor the limit of the Sinkhorn normalisation.
    """
    n = scores.shape[-1]
    w = rank_weights(n, device=scores.device, dtype=scores.dtype)  # w_r   [n]
    return (w[:, None] * scores[..., None, :]).flatten(-2)  # θ[r, i] = w_r s_i   [..., n·n]
