"""Models that predict the weights of an optimisation problem from its features."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

__all__ = ["ResNetStemCNN", "TerrainCNN", "as_float_images", "linear_model"]


def as_float_images(images: torch.Tensor) -> torch.Tensor:
    """Images as floats in [0, 1]: ``uint8`` pixels are divided by 255, float images pass unchanged."""
    if images.dtype == torch.uint8:
        return images.float().div_(255.0)  # stored as bytes (as the Warcraft PNGs): 4× less memory
    return images


def linear_model(num_features: int, n_vars: int) -> nn.Module:
    """``ĉ = W x + b``: the linear model of the PyEPO / SPO benchmarks (``nn.Linear(p, m)``)."""
    return nn.Linear(num_features, n_vars)


def _costs(head: nn.Module, features: torch.Tensor, floor: float) -> torch.Tensor:
    """``softplus(head(h)) + floor`` flattened to ``(B, K·K)``, in float32 even under autocast: costs
    rounded to bfloat16 (3 significant digits) would tie paths that differ, and the solvers take float32."""
    with torch.autocast(features.device.type, enabled=False):
        costs = F.softplus(head(features.float())) + floor  # positive costs   [B, 1, K, K]
    return costs.flatten(1)  # row-major cells   [B, K·K]


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

    References
    ----------
    Vlastelica, Paulus, Musil, Martius & Rolínek, "Differentiation of Blackbox Combinatorial Solvers",
    ICLR 2020, <https://arxiv.org/abs/1912.02175>.
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
        h = self.block(self.stem(as_float_images(images)))  # [B, w, 2K, 2K]
        h = F.adaptive_max_pool2d(h, self.size)  # one feature vector per cell   [B, w, K, K]
        return _costs(self.head, h, self.floor)


class _BasicBlock(nn.Module):
    """ResNet's basic block: ``relu(x + bn(conv(relu(bn(conv(x))))))``, 3×3 convolutions, same width."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(width, width, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.bn1(self.conv1(x)))
        return F.relu(x + self.bn2(self.conv2(h)))  # residual connection


class ResNetStemCNN(nn.Module):
    """The Warcraft model of the paper (sec. 6 and its appendix, after Vlastelica et al. 2020): the first
    block of a ResNet18, pooled to the K×K grid.

    ``(B, 3, H, W)`` image → 7×7 conv, stride 2, 64 channels → batch norm → ReLU → 3×3 max pool,
    stride 2 → one residual stage (two basic blocks of 64 channels, ResNet18's ``layer1``) → adaptive
    max pool to ``K×K`` → 1×1 conv → ``softplus + floor`` → ``(B, K·K)`` costs, row-major. Plain torch,
    randomly initialised (no pretrained weights). Images may be ``uint8`` (divided by 255).

    Parameters
    ----------
    size
        K, cells per side.
    width
        Channels of the stem and the residual stage (64 in ResNet18).
    floor
        Added to the softplus output: predicted costs are ``> floor`` (the grid shortest path needs
        non-negative costs).

    References
    ----------
    He, Zhang, Ren & Sun, "Deep Residual Learning for Image Recognition", CVPR 2016,
    <https://arxiv.org/abs/1512.03385>.

    Vlastelica, Paulus, Musil, Martius & Rolínek, "Differentiation of Blackbox Combinatorial Solvers",
    ICLR 2020, <https://arxiv.org/abs/1912.02175>.
    """

    def __init__(self, size: int = 12, width: int = 64, floor: float = 0.0) -> None:
        super().__init__()
        self.size, self.floor = size, float(floor)
        self.stem = nn.Sequential(
            nn.Conv2d(3, width, kernel_size=7, stride=2, padding=3, bias=False),  # [B, w, H/2, W/2]
            nn.BatchNorm2d(width),
            nn.ReLU(),
            nn.MaxPool2d(kernel_size=3, stride=2, padding=1),  # [B, w, H/4, W/4]
        )
        self.stage = nn.Sequential(_BasicBlock(width), _BasicBlock(width))
        self.head = nn.Conv2d(width, 1, 1)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        h = self.stage(self.stem(as_float_images(images)))  # [B, w, H/4, W/4]
        h = F.adaptive_max_pool2d(h, self.size)  # one feature vector per cell   [B, w, K, K]
        return _costs(self.head, h, self.floor)
