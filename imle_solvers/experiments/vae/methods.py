"""The ways of sampling the latent code that the VAE compares: `METHODS`, a registry of factories; and
the Gumbel-softmax relaxation."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch
from torch import nn

from ..._checks import positive
from ...app.registry import Registry
from ...estimators import STE
from ...imle import IMLE
from ...noise import Gumbel, NoiseDistribution, SumOfGamma
from ...target import PerturbedTarget
from ...topk import TopK
from .model import N_VARS

__all__ = ["METHODS", "PAPER_METHODS", "GumbelSoftmax", "VAEMethod"]


class GumbelSoftmax(nn.Module):
    """The Gumbel-softmax (concrete) relaxation of a categorical sample (Jang et al., 2017).

    Training: ``softmax((θ + g) / t)``, ``g ~ Gumbel(0, 1)``; evaluation: ``softmax(θ / t)``.

    Parameters
    ----------
    temperature
        t > 0.
    generator
        Optional `torch.Generator` on the weights' device.

    References
    ----------
    * Jang, Gu & Poole, "Categorical Reparameterization with Gumbel-Softmax", ICLR 2017,
      <https://arxiv.org/abs/1611.01144>.
    * Maddison, Mnih & Teh, "The Concrete Distribution: A Continuous Relaxation of Discrete Random
      Variables", ICLR 2017, <https://arxiv.org/abs/1611.00712>.
    """

    def __init__(self, temperature: float = 0.5, generator: torch.Generator | None = None) -> None:
        super().__init__()
        self.temperature = positive("temperature", temperature)
        self.generator = generator

    def forward(self, theta: torch.Tensor) -> torch.Tensor:
        if not self.training:
            return torch.softmax(theta / self.temperature, dim=-1)
        g = Gumbel(1.0).sample(theta.shape, theta.device, theta.dtype, self.generator)  # g   [..., n]
        return torch.softmax((theta + g) / self.temperature, dim=-1)  # relaxed one-hot      [..., n]


@dataclasses.dataclass(frozen=True)
class VAEMethod:
    """One way of sampling the latent code and differentiating through it.

    Parameters
    ----------
    name
        Label in tables and plots.
    k
        Subset size of each latent distribution (1: categorical).
    make
        ``make(k, generator) -> nn.Module`` mapping θ ``[..., 20]`` to z ``[..., 20]``.
    """

    name: str
    k: int
    make: Callable[[int, torch.Generator | None], nn.Module]


def _imle(noise: Callable[[int], NoiseDistribution], lam: float | None) -> Callable[..., nn.Module]:
    """I-MLE with the fixed-λ target of the paper, or the library's default target when ``lam`` is None."""

    def make(k: int, generator: torch.Generator | None) -> nn.Module:
        target = None if lam is None else PerturbedTarget(lam)
        return IMLE(TopK(k, N_VARS), noise=noise(k), target=target, generator=generator)

    return make


def _ste(noise: Callable[[int], NoiseDistribution]) -> Callable[..., nn.Module]:
    def make(k: int, generator: torch.Generator | None) -> nn.Module:
        return STE(TopK(k, N_VARS), noise=noise(k), generator=generator)

    return make


def _sog(k: int) -> NoiseDistribution:
    return SumOfGamma(k=k, tau=10.0, s=10)  # the paper's SoG at temperature τ = 10


def _gumbel(k: int) -> NoiseDistribution:
    return Gumbel(1.0)


def _gumbel_softmax(k: int, generator: torch.Generator | None) -> nn.Module:
    return GumbelSoftmax(0.5, generator=generator)


def imle_sog_1() -> VAEMethod:
    """I-MLE, SumOfGamma noise at τ = 10, the paper's PID target with λ = 1."""
    return VAEMethod("I-MLE SoG(τ=10) λ=1", 10, _imle(_sog, 1.0))


def imle_sog_10() -> VAEMethod:
    """I-MLE, SumOfGamma noise at τ = 10, the paper's PID target with λ = 10."""
    return VAEMethod("I-MLE SoG(τ=10) λ=10", 10, _imle(_sog, 10.0))


def imle_gumbel_1() -> VAEMethod:
    """I-MLE, Gumbel(0, 1) noise, the paper's PID target with λ = 1."""
    return VAEMethod("I-MLE Gumbel(0,1) λ=1", 10, _imle(_gumbel, 1.0))


def imle_gumbel_10() -> VAEMethod:
    """I-MLE, Gumbel(0, 1) noise, the paper's PID target with λ = 10."""
    return VAEMethod("I-MLE Gumbel(0,1) λ=10", 10, _imle(_gumbel, 10.0))


def imle_sog_default() -> VAEMethod:
    """I-MLE, SumOfGamma noise at τ = 10, the library's default target (its step ignores the loss scale)."""
    return VAEMethod("I-MLE SoG(τ=10), default target", 10, _imle(_sog, None))


def imle_gumbel_default() -> VAEMethod:
    """I-MLE, Gumbel(0, 1) noise, the library's default target (its step ignores the loss scale)."""
    return VAEMethod("I-MLE Gumbel(0,1), default target", 10, _imle(_gumbel, None))


def imle_sog_100() -> VAEMethod:
    """I-MLE, SumOfGamma noise at τ = 10, PID target with λ = 100 (beyond the paper's grid)."""
    return VAEMethod("I-MLE SoG(τ=10) λ=100", 10, _imle(_sog, 100.0))


def imle_sog_1000() -> VAEMethod:
    """I-MLE, SumOfGamma noise at τ = 10, PID target with λ = 1000 (beyond the paper's grid)."""
    return VAEMethod("I-MLE SoG(τ=10) λ=1000", 10, _imle(_sog, 1000.0))


def imle_gumbel_100() -> VAEMethod:
    """I-MLE, Gumbel(0, 1) noise, PID target with λ = 100 (beyond the paper's grid)."""
    return VAEMethod("I-MLE Gumbel(0,1) λ=100", 10, _imle(_gumbel, 100.0))


def imle_gumbel_1000() -> VAEMethod:
    """I-MLE, Gumbel(0, 1) noise, PID target with λ = 1000 (beyond the paper's grid)."""
    return VAEMethod("I-MLE Gumbel(0,1) λ=1000", 10, _imle(_gumbel, 1000.0))


def ste_sog() -> VAEMethod:
    """Straight-through estimator, SumOfGamma noise at τ = 10."""
    return VAEMethod("STE SoG(τ=10)", 10, _ste(_sog))


def ste_gumbel() -> VAEMethod:
    """Straight-through estimator, Gumbel(0, 1) noise."""
    return VAEMethod("STE Gumbel(0,1)", 10, _ste(_gumbel))


def gsm_categorical() -> VAEMethod:
    """Gumbel-softmax at temperature 0.5 on a 1-subset (20-way categorical) code: the reference VAE."""
    return VAEMethod("Gumbel-softmax, 1-subset (t=0.5)", 1, _gumbel_softmax)


METHODS: Registry[Callable[[], VAEMethod]] = Registry(
    "VAE method",
    {
        "imle-sog-1": imle_sog_1,
        "imle-sog-10": imle_sog_10,
        "imle-gumbel-1": imle_gumbel_1,
        "imle-gumbel-10": imle_gumbel_10,
        "imle-sog-default": imle_sog_default,
        "imle-gumbel-default": imle_gumbel_default,
        "imle-sog-100": imle_sog_100,
        "imle-sog-1000": imle_sog_1000,
        "imle-gumbel-100": imle_gumbel_100,
        "imle-gumbel-1000": imle_gumbel_1000,
        "ste-sog": ste_sog,
        "ste-gumbel": ste_gumbel,
        "gsm-categorical": gsm_categorical,
    },
)
"""Method key → factory of its `VAEMethod`, in table order (``k`` is 10 unless the method fixes it)."""

PAPER_METHODS: tuple[str, ...] = tuple(k for k in METHODS if not k.endswith(("-100", "-1000")))
"""The default: the paper's λ ∈ {1, 10}, the default-target variants, STE and Gumbel-softmax; the
λ = 100, 1000 variants are opt-in."""
