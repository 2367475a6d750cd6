"""Models that predict the weights of an optimisation problem from its features."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

__all__ = ["TerrainCNN", "linear_model"]


def linear_model(num_features: int, n_vars: int) -> nn.Module:
    """``ĉ = W x + b``: the linear model of the PyEPO / SPO benchmarks (``nn.Linear(p, m)``)."""
    return nn.Linear(num_features, n_vars)


class TerrainCNN(nn.Module):
    """A small CNN mapping a terrain image to positive per-cell costs (the paper's sec. 6 Warcraft setup
    uses the first block of a ResNet18 followed by a pooling to the K×K grid; this is a lighter version
    in the same spirit).

    ``(B, 3, K·P, K·P)`` image → patchify conv (stride ``P/2``) → two 3×3 conv blocks → adaptive max
    pool to ``K×K`` → 1×1 conv → ``softplus + floor`` → ``(B, K·K)`` costs, row-major.

    Parameters
    ----------
    size
        K, cells per side.
    pixels
        P, pixels per cell side (even).
    width
        Channels of the hidden layers.
    floor
        Added to the softplus output: predicted costs are ``> floor``.
    """

    def __init__(self, size: int = 12, pixels: int = 8, width: int = 32, floor: float = 0.0) -> None:
        super().__init__()
        if pixels % 2:
            raise ValueError(f"pixels must be even, got {pixels}")
        self.size, self.floor = size, float(floor)
        half = pixels // 2
        self.stem = nn.Conv2d(3, width, kernel_size=half, stride=half)  # [B, w, 2K, 2K]
        self.block = nn.Sequential(
            nn.BatchNorm2d(width),
            nn.ReLU(),
            nn.Conv2d(width, width, 3, padding=1),
            nn.BatchNorm2d(width),
            nn.ReLU(),
            nn.Conv2d(width, width, 3, padding=1),
            nn.ReLU(),
        )
        self.head = nn.Conv2d(width, 1, 1)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        h = self.block(self.stem(images))  # [B, w, 2K, 2K]
        h = F.adaptive_max_pool2d(h, self.size)  # one feature vector per cell   [B, w, K, K]
        costs = F.softplus(self.head(h)) + self.floor  # positive costs   [B, 1, K, K]
        return costs.flatten(1)  # row-major cells   [B, K·K]
