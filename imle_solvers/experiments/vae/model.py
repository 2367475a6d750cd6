"""The VAE's networks and loss: encoder → latent sampler → decoder, BCE plus the latents' KL term."""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from .ksubset import kl_to_uniform

__all__ = ["N_LATENT", "N_VARS", "SubsetVAE", "latent_kl", "vae_loss"]

N_LATENT = 20  # latent distributions
N_VARS = 20  # binary variables per distribution


class SubsetVAE(nn.Module):
    """Encoder → latent sampler → decoder, the paper's appendix architecture.

    Parameters
    ----------
    n_pixels
        Input and output size.
    sampler
        θ ``[B, 20, 20]`` → z ``[B, 20, 20]`` (an `IMLE`, `STE` or `GumbelSoftmax` layer).

    References
    ----------
    Niepert, Minervini & Franceschi, "Implicit MLE: Backpropagating Through Discrete Exponential Family
    Distributions", NeurIPS 2021, sec. 6 and its appendix (the discrete VAE), <https://arxiv.org/abs/2106.01798>.
    """

    def __init__(self, n_pixels: int, sampler: nn.Module) -> None:
        super().__init__()
        code = N_LATENT * N_VARS
        self.encoder = nn.Sequential(
            nn.Linear(n_pixels, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, code)
        )
        self.decoder = nn.Sequential(
            nn.Linear(code, 256), nn.ReLU(), nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, n_pixels)
        )
        self.sampler = sampler

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``[B, pixels]`` → (pixel logits ``[B, pixels]``, θ ``[B, 20, 20]``)."""
        theta = self.encoder(x).view(-1, N_LATENT, N_VARS)  # θ   [B, 20, 20]
        z = self.sampler(theta)  # z = MAP(θ + ε) (or a relaxed sample)         [B, 20, 20]
        return self.decoder(z.reshape(-1, N_LATENT * N_VARS)), theta


def latent_kl(theta: torch.Tensor, k: int, kl: str = "softmax") -> torch.Tensor:
    """``[B]`` Σ over the latents of the KL term: ``Σ q log(q n)``, ``q = softmax(θ)`` (``"softmax"``,
    the paper's), or the exact ``KL(p(z; θ) ‖ uniform over k-subsets)`` (``"exact"``)."""
    if kl == "exact":
        return kl_to_uniform(theta, k).sum(dim=-1)
    log_q = torch.log_softmax(theta, dim=-1)  # log q   [B, 20, 20]
    return (log_q.exp() * (log_q + math.log(theta.shape[-1]))).sum(dim=(-2, -1))  # Σ q log(q n)   [B]


def vae_loss(
    logits: torch.Tensor, theta: torch.Tensor, x: torch.Tensor, k: int, kl: str = "softmax"
) -> torch.Tensor:
    """``[B]`` per-image loss: Σ_pixels BCE(x, σ(logits)) + Σ_latents KL (see `latent_kl`)."""
    bce = F.binary_cross_entropy_with_logits(logits, x, reduction="none").sum(dim=-1)  # [B]
    return bce + latent_kl(theta, k, kl)  # [B]
