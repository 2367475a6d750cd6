"""Baseline gradient estimators on the same oracle API as I-MLE, for head-to-head comparisons.

All of them run through [`PerturbAndMAP`][imle_solvers.perturb_and_map.PerturbAndMAP] (the one
autograd function of the library); they differ in the forward noise and the backward *gradient rule*:

* [`STE`][imle_solvers.STE] — straight-through: ``∂z/∂θ ≈ I`` (Bengio et al. 2013; paper sec. 3.1).
* [`Blackbox`][imle_solvers.Blackbox] — Vlastelica et al. 2020: ``[MAP(θ) − MAP(θ − λ∇zL)] / λ``
  (= I-MLE with δ₀ noise).
* [`PerturbedOptimizer`][imle_solvers.PerturbedOptimizer] — Berthet et al. 2020: the expected perturbed
  MAP with its score-function Jacobian (Gaussian or Gumbel noise).

Like I-MLE, each returns the sum of its per-sample estimates (autograd's rule for S outputs).
"""

from __future__ import annotations

import dataclasses
from typing import Literal

import torch

from ._checks import one_of
from .noise import Gumbel, NoiseDistribution, NoNoise, Normal
from .oracle import BatchSolver, MapOracle
from .perturb_and_map import PerturbAndMAPLayer
from .target import PerturbedTarget, Solve

__all__ = ["STE", "Blackbox", "PerturbedOptimizer"]


@dataclasses.dataclass(frozen=True)
class _StraightThrough:
    """``∇θ L = Σ_s ∇z_s L``: each sample ``z_s ≈ θ + ε_s`` has identity Jacobian."""

    def estimate(
        self, theta: torch.Tensor, eps: torch.Tensor, z: torch.Tensor, grad_z: torch.Tensor, solve: Solve
    ) -> torch.Tensor:
        return grad_z.sum(dim=1)  # [N, m]


@dataclasses.dataclass(frozen=True)
class _PerturbedScore:
    """Berthet et al. (2020), Prop. 3.1: ``J_θ E[MAP(θ+σZ)]ᵀ g = E[⟨MAP(θ+σZ), g⟩ ∇ν(Z)] / σ``.

    ``Z`` has density ``∝ exp(−ν(z))``: ``∇ν(Z) = Z`` for the standard normal, ``1 − exp(−Z)`` for the
    standard Gumbel. With ``ε = σZ`` and ``g_s`` the gradient of sample ``s`` (which already carries the
    1/S of the mean the layer outputs), the estimate is ``Σ_s ⟨z_s, g_s⟩ ∇ν(ε_s/σ) / σ``.
    """

    sigma: float
    noise: str = "normal"

    def estimate(
        self, theta: torch.Tensor, eps: torch.Tensor, z: torch.Tensor, grad_z: torch.Tensor, solve: Solve
    ) -> torch.Tensor:
        standard = eps / self.sigma  # Z = ε/σ   [N, S, m]
        score = standard if self.noise == "normal" else -torch.expm1(-standard)  # ∇ν(Z)   [N, S, m]
        inner = (z * grad_z).sum(dim=-1, keepdim=True)  # ⟨z_s, g_s⟩      [N, S, 1]
        return (inner * score).sum(dim=1) / self.sigma  # Σ_s ⟨z_s,g_s⟩ ∇ν(Z_s) / σ   [N, m]


class STE(PerturbAndMAPLayer):
    """Straight-through estimator over perturb-and-MAP samples (paper sec. 3.1, appendix toy setup).

    Forward ``z = MAP(θ + ε)``; backward passes ``∇z L`` through unchanged (in θ-space: for a ``"min"``
    oracle the cost gradient is ``−∇z L``). Output shapes as for [`IMLE`][imle_solvers.IMLE].

    Parameters
    ----------
    oracle
        The MAP oracle.
    noise
        ρ(ε), default Gumbel(0, 1) (the paper found STE slightly better with Gumbel than SoG).
    samples, pool, generator, check_finite
        As for [`IMLE`][imle_solvers.IMLE].

    References
    ----------
    Bengio, Léonard & Courville, "Estimating or Propagating Gradients Through Stochastic Neurons for
    Conditional Computation", 2013, <https://arxiv.org/abs/1308.3432>.
    """

    def __init__(
        self,
        oracle: MapOracle,
        noise: NoiseDistribution | None = None,
        *,
        samples: int = 1,
        pool: BatchSolver | None = None,
        generator: torch.Generator | None = None,
        check_finite: bool | None = None,
    ) -> None:
        noise = Gumbel() if noise is None else noise
        super().__init__(
            oracle,
            noise,
            _StraightThrough(),
            samples=samples,
            pool=pool,
            generator=generator,
            check_finite=check_finite,
        )

    def forward(self, weights: torch.Tensor) -> torch.Tensor:
        """``(..., m)`` → ``(..., m)`` (``(..., S, m)`` when ``samples > 1``)."""
        z = self.sample_states(weights)
        return z.squeeze(-2) if self.samples == 1 else z


class Blackbox(PerturbAndMAPLayer):
    """Blackbox differentiation of combinatorial solvers (Vlastelica et al., ICLR 2020).

    Forward ``z = MAP(θ)``; backward ``∇θ L = [MAP(θ) − MAP(θ − λ ∇z L)] / λ`` — exactly I-MLE with
    ``NoNoise()`` and ``PerturbedTarget(lam)`` (paper sec. 3.1), computed by the same code.

    Parameters
    ----------
    oracle
        The MAP oracle (costs for a ``"min"`` oracle, as in the original paper).
    lam
        λ > 0, the interpolation strength.
    pool, check_finite
        As for [`IMLE`][imle_solvers.IMLE].

    References
    ----------
    Vlastelica, Paulus, Musil, Martius & Rolínek, "Differentiation of Blackbox Combinatorial Solvers",
    ICLR 2020, <https://arxiv.org/abs/1912.02175>.
    """

    def __init__(
        self,
        oracle: MapOracle,
        lam: float = 20.0,
        *,
        pool: BatchSolver | None = None,
        check_finite: bool | None = None,
    ) -> None:
        super().__init__(oracle, NoNoise(), PerturbedTarget(lam), pool=pool, check_finite=check_finite)
        self.lam = lam

    def forward(self, weights: torch.Tensor) -> torch.Tensor:
        """``(..., m)`` → ``(..., m)`` MAP states."""
        return self.sample_states(weights).squeeze(-2)


class PerturbedOptimizer(PerturbAndMAPLayer):
    """Differentiable perturbed optimizer (Berthet et al., NeurIPS 2020).

    Training forward: ``ŷ(θ) = (1/M) Σ_s MAP(θ + σ Z_s)``, ``Z_s ~ N(0, I)`` — a point of the convex hull,
    not a vertex; backward: the Gaussian score-function Jacobian ``E[MAP(θ+σZ) Zᵀ] / σ``. ``eval()``
    returns the plain ``MAP(θ)``.

    Parameters
    ----------
    oracle
        The MAP oracle.
    sigma
        Noise scale σ > 0.
    samples
        M, the number of perturbations.
    noise
        ``"normal"`` (``Z ~ N(0, I)``, Berthet et al.'s default) or ``"gumbel"`` (``Z`` standard
        Gumbel, score ``1 − exp(−Z)``): any noise with a known score gives the same estimator (Prop. 3.1).
    pool, generator, check_finite
        As for [`IMLE`][imle_solvers.IMLE].

    References
    ----------
    Berthet, Blondel, Teboul, Cuturi, Vert & Bach, "Learning with Differentiable Perturbed Optimizers",
    NeurIPS 2020, <https://arxiv.org/abs/2002.08676>.
    """

    def __init__(
        self,
        oracle: MapOracle,
        sigma: float = 1.0,
        *,
        samples: int = 10,
        noise: Literal["normal", "gumbel"] = "normal",
        pool: BatchSolver | None = None,
        generator: torch.Generator | None = None,
        check_finite: bool | None = None,
    ) -> None:
        one_of("PerturbedOptimizer noise", noise, ("normal", "gumbel"))
        distribution: NoiseDistribution = Normal(sigma) if noise == "normal" else Gumbel(sigma)
        super().__init__(
            oracle,
            distribution,
            _PerturbedScore(sigma, noise),
            samples=samples,
            pool=pool,
            generator=generator,
            check_finite=check_finite,
        )
        self.sigma = sigma

    def forward(self, weights: torch.Tensor) -> torch.Tensor:
        """``(..., m)`` → ``(..., m)`` expected perturbed state (MAP state in ``eval()``)."""
        z = self.sample_states(weights)  # [..., M, m]
        return z.mean(dim=-2)  # ŷ = mean_s MAP(θ + σZ_s)   [..., m]
