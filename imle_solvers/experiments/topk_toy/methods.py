"""The gradient estimators the toy compares, and the one-sample gradient of ``L`` each gives.

* I-MLE (PID target, eq. 8) with Sum-of-Gamma noise (eq. 9) and with Gumbel noise,
* the straight-through estimator (STE) with Gumbel (and Sum-of-Gamma) noise,
* the score-function estimator (SFE) with exact samples and exact marginals, ``∇ ≈ ‖z − b‖² (z − μ(θ))``,
  ``z ~ p(z; θ)`` (implemented here; it is not a library estimator).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Literal

import torch

from ...app.registry import Registry
from ...estimators import STE
from ...imle import IMLE
from ...noise import Gumbel, NoiseDistribution, SumOfGamma
from ...target import PerturbedTarget, TargetDistribution
from ...topk import TopK
from .problem import ToyProblem

__all__ = ["DEFAULT_METHODS", "METHODS", "SOG", "SOG_LITERAL", "ToyMethod", "gradient_estimate"]


@dataclasses.dataclass(frozen=True)
class ToyMethod:
    """One gradient estimator of the comparison.

    Parameters
    ----------
    name
        Label in tables and plots.
    kind
        ``"imle"`` ([`IMLE`][imle_solvers.IMLE] with [`PerturbedTarget`][imle_solvers.PerturbedTarget]),
        ``"ste"`` ([`STE`][imle_solvers.STE]) or ``"sfe"`` (exact score-function estimator).
    noise
        Perturbation of the perturb-and-MAP methods (``None`` for SFE).
    """

    name: str
    kind: Literal["imle", "ste", "sfe"]
    noise: NoiseDistribution | None = None

    @property
    def uses_lambda(self) -> bool:
        """Only I-MLE has a perturbation intensity λ."""
        return self.kind == "imle"


SOG = SumOfGamma(k=5, tau=1.0, s=10)
"""The paper's SoG(κ=5, τ=1, s=10): Theorem 1 with κ = k (see the experiments page for the mapping)."""
SOG_LITERAL = SumOfGamma(k=1, tau=5.0, s=10)
"""The literal reading of the appendix's "SoG(1, 5, 10)": κ = 1, τ = 5, s = 10."""


def imle_sog() -> ToyMethod:
    """I-MLE, PID target (eq. 8), SoG(5,1,10) noise: Theorem 1's κ = k, temperature 1."""
    return ToyMethod("I-MLE SoG(5,1,10)", "imle", SOG)


def imle_gumbel() -> ToyMethod:
    """I-MLE, PID target (eq. 8), Gumbel(0,1) noise."""
    return ToyMethod("I-MLE Gumbel(0,1)", "imle", Gumbel(1.0))


def imle_sog_literal() -> ToyMethod:
    """I-MLE, PID target (eq. 8), the appendix's SoG(1,5,10) read literally: κ = 1, τ = 5."""
    return ToyMethod("I-MLE SoG(1,5,10) literal", "imle", SOG_LITERAL)


def imle_gumbel_5() -> ToyMethod:
    """I-MLE, PID target (eq. 8), Gumbel(0,5) noise: the temperature control of the noise study."""
    return ToyMethod("I-MLE Gumbel(0,5)", "imle", Gumbel(5.0))


def imle_sog_5() -> ToyMethod:
    """I-MLE, PID target (eq. 8), SoG(5,5,10) noise: the temperature control of the noise study."""
    return ToyMethod("I-MLE SoG(5,5,10)", "imle", SumOfGamma(k=5, tau=5.0, s=10))


def ste_gumbel() -> ToyMethod:
    """Straight-through estimator, Gumbel(0,1) noise."""
    return ToyMethod("STE Gumbel(0,1)", "ste", Gumbel(1.0))


def ste_sog() -> ToyMethod:
    """Straight-through estimator, SoG(5,1,10) noise."""
    return ToyMethod("STE SoG(5,1,10)", "ste", SOG)


def sfe() -> ToyMethod:
    """Score-function estimator with exact samples and exact marginals (not a library estimator)."""
    return ToyMethod("SFE exact", "sfe", None)


METHODS: Registry[Callable[[], ToyMethod]] = Registry(
    "toy method",
    {
        "imle-sog": imle_sog,
        "imle-gumbel": imle_gumbel,
        "imle-sog-literal": imle_sog_literal,
        "imle-gumbel-5": imle_gumbel_5,
        "imle-sog-5": imle_sog_5,
        "ste-gumbel": ste_gumbel,
        "ste-sog": ste_sog,
        "sfe": sfe,
    },
)
"""Method key → factory of its `ToyMethod`, in table order; the method's ``name`` labels tables and plots."""

DEFAULT_METHODS = ("imle-sog", "imle-gumbel", "imle-sog-literal", "ste-gumbel", "ste-sog", "sfe")
"""The methods of the experiment's table (the temperature-5 controls run in the noise study)."""


def gradient_estimate(
    problem: ToyProblem,
    method: ToyMethod,
    lam: float | None,
    generator: torch.Generator,
    target: TargetDistribution | None = None,
    samples: int = 1,
) -> Callable[[torch.Tensor], torch.Tensor]:
    """θ ``[N, m]`` → gradient estimate ``[N, m]`` of ``L`` for every row, from ``samples`` samples.

    Parameters
    ----------
    problem
        The instance (``b``, ``k``, the exact sampler for SFE).
    method
        The estimator.
    lam
        λ of the PID target (I-MLE only; ``None`` otherwise or with ``target``).
    generator
        Source of the estimator's randomness (noise or exact samples).
    target
        The I-MLE target instead of ``PerturbedTarget(lam)`` (``bench targets`` compares targets).
    samples
        S perturb-and-MAP samples per row (I-MLE and STE), the loss averaged over them; SFE draws one.
    """
    if method.kind == "sfe":
        return lambda theta: problem.sfe_gradient(theta, problem.sample(theta, generator))
    oracle = TopK(problem.k, problem.m)
    assert method.noise is not None
    layer: torch.nn.Module
    if method.kind == "imle":
        if target is None:
            assert lam is not None
            target = PerturbedTarget(lam)
        layer = IMLE(oracle, noise=method.noise, target=target, samples=samples, generator=generator)
    else:
        layer = STE(oracle, noise=method.noise, samples=samples, generator=generator)

    def grad(theta: torch.Tensor) -> torch.Tensor:
        leaf = theta.detach().requires_grad_(True)
        z = layer(leaf)  # z = MAP(θ + ε)              [N, m] or [N, S, m]
        per_sample = ((z - problem.b) ** 2).sum(-1)  # ℓ(z) = ‖z − b‖²; ∇zℓ = 2(z − b)
        loss = (per_sample.mean(-1) if samples > 1 else per_sample).sum()  # Σ_rows mean_S ℓ
        (g,) = torch.autograd.grad(loss, leaf)
        return g

    return grad
