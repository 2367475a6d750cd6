"""The ways of turning the assignment weights into a permutation that the sorting task compares:
`METHODS`, a registry of factories."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
from torch import nn

from ...adapters.graphs.matching import TorchMatching
from ...app.registry import Registry
from ...estimators import STE
from ...imle import IMLE
from ...noise import SumOfGamma
from ...target import PerturbedTarget
from .sinkhorn import GumbelSinkhorn

if TYPE_CHECKING:
    from .run import SortConfig

__all__ = ["METHODS", "SortMethod"]

Maker = Callable[[int, "SortConfig", "torch.Generator | None"], nn.Module]


@dataclasses.dataclass(frozen=True)
class SortMethod:
    """One way of mapping the assignment weights to a (relaxed) permutation matrix.

    Parameters
    ----------
    name
        Label in tables.
    make
        ``make(n, config, generator) -> nn.Module`` mapping θ ``[B, n · n]`` to ``[B, n · n]``: a
        permutation matrix (or a doubly stochastic one) in training, the permutation ``MAP(θ)`` in
        ``eval()`` mode (the config gives the temperatures, λ and the Sinkhorn rounds).
    """

    name: str
    make: Maker


def _sog(config: SortConfig) -> SumOfGamma:
    return SumOfGamma(tau=config.noise_tau)  # k = n from TorchMatching's expected_nonzeros


def _imle(n: int, config: SortConfig, generator: torch.Generator | None) -> nn.Module:
    return IMLE(
        TorchMatching(n, n), noise=_sog(config), target=PerturbedTarget(config.lam), generator=generator
    )


def _ste(n: int, config: SortConfig, generator: torch.Generator | None) -> nn.Module:
    return STE(TorchMatching(n, n), noise=_sog(config), generator=generator)


def _gumbel_sinkhorn(n: int, config: SortConfig, generator: torch.Generator | None) -> nn.Module:
    return GumbelSinkhorn(n, config.sinkhorn_tau, config.sinkhorn_iters, generator=generator)


def imle() -> SortMethod:
    """I-MLE through TorchMatching(n, n): SumOfGamma noise (k = n, τ = --noise-tau), PID target λ = --lam."""
    return SortMethod("I-MLE SoG", _imle)


def gumbel_sinkhorn() -> SortMethod:
    """Gumbel-Sinkhorn (Mena et al. 2018): Sinkhorn((θ + g) / τ), τ = --sinkhorn-tau, --sinkhorn-iters."""
    return SortMethod("Gumbel-Sinkhorn", _gumbel_sinkhorn)


def ste() -> SortMethod:
    """Straight-through estimator through TorchMatching(n, n), the same SumOfGamma noise as I-MLE."""
    return SortMethod("STE SoG", _ste)


METHODS: Registry[Callable[[], SortMethod]] = Registry(
    "sorting method", {"imle": imle, "gumbel-sinkhorn": gumbel_sinkhorn, "ste": ste}
)
"""Method key → factory of its `SortMethod`, in table order."""
