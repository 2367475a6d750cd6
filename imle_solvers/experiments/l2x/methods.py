"""The samplers between explainer and predictor that L2X compares: `METHODS`, a registry of factories."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
from torch import nn

from ...app.registry import Registry
from ...estimators import STE
from ...imle import IMLE
from ...noise import Gumbel, SumOfGamma
from ...target import PerturbedTarget
from ...topk import TopK
from .relaxed_subsets import L2XRelaxedTopK, SoftSub

if TYPE_CHECKING:
    from .run import L2XConfig

__all__ = ["METHODS", "L2XMethod"]

Maker = Callable[[int, int, "L2XConfig", "torch.Generator | None"], nn.Module]


@dataclasses.dataclass(frozen=True)
class L2XMethod:
    """One way of turning the explainer's scores into a k-subset mask.

    Parameters
    ----------
    name
        Label in tables.
    make
        ``make(k, n_positions, config, generator) -> nn.Module`` mapping θ ``[B, L]`` to a mask ``[B, L]``
        (the config gives λ and the SoG temperature).
    """

    name: str
    make: Maker


def _sog(k: int, config: L2XConfig) -> SumOfGamma:
    return SumOfGamma(k=k, tau=config.tau_factor * k, s=10)


def _imle_sog(k: int, n: int, config: L2XConfig, generator: torch.Generator | None) -> nn.Module:
    return IMLE(TopK(k, n), noise=_sog(k, config), target=PerturbedTarget(config.lam), generator=generator)


def _imle_gumbel(k: int, n: int, config: L2XConfig, generator: torch.Generator | None) -> nn.Module:
    return IMLE(TopK(k, n), noise=Gumbel(1.0), target=PerturbedTarget(config.lam), generator=generator)


def _ste(k: int, n: int, config: L2XConfig, generator: torch.Generator | None) -> nn.Module:
    return STE(TopK(k, n), noise=_sog(k, config), generator=generator)


def _l2x(k: int, n: int, config: L2XConfig, generator: torch.Generator | None) -> nn.Module:
    return L2XRelaxedTopK(k, 0.1, generator=generator)


def _softsub(k: int, n: int, config: L2XConfig, generator: torch.Generator | None) -> nn.Module:
    return SoftSub(k, 0.5, generator=generator)


def imle_sog() -> L2XMethod:
    """I-MLE, SumOfGamma noise at τ = tau_factor · k, the PID target with λ = --lam."""
    return L2XMethod("I-MLE SoG", _imle_sog)


def imle_gumbel() -> L2XMethod:
    """I-MLE, Gumbel(0, 1) noise, the PID target with λ = --lam."""
    return L2XMethod("I-MLE Gumbel(0,1)", _imle_gumbel)


def ste() -> L2XMethod:
    """Straight-through estimator, SumOfGamma noise at τ = tau_factor · k."""
    return L2XMethod("STE SoG", _ste)


def l2x() -> L2XMethod:
    """L2X's relaxation: the maximum of k Gumbel-softmax samples over the positions, t = 0.1."""
    return L2XMethod("L2X (t=0.1)", _l2x)


def softsub() -> L2XMethod:
    """SoftSub (Xie and Ermon 2019): k rounds of a softmax over Gumbel keys, t = 0.5."""
    return L2XMethod("SoftSub (t=0.5)", _softsub)


METHODS: Registry[Callable[[], L2XMethod]] = Registry(
    "L2X method",
    {"imle-sog": imle_sog, "imle-gumbel": imle_gumbel, "ste": ste, "l2x": l2x, "softsub": softsub},
)
"""Method key → factory of its `L2XMethod`, in table order."""
