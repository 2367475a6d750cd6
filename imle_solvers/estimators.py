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

from ._checks import one_of, positive
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


ScoreNoise = Literal["normal", "gumbel"]


def _perturbation(sigma: float, noise: ScoreNoise) -> tuple[NoiseDistribution, _PerturbedScore]:
    """The noise ``σZ`` of a perturbed optimizer and the score estimator that matches it."""
    positive("PerturbedOptimizer sigma", sigma)
    if not isinstance(noise, str):
        raise TypeError(
            "PerturbedOptimizer noise must be 'normal', 'gumbel', a Normal or a Gumbel instance (the "
            f"score estimator needs the density), got {noise!r}"
        )
    one_of("PerturbedOptimizer noise", noise, ("normal", "gumbel"))
    distribution = Normal(sigma) if noise == "normal" else Gumbel(sigma)
    return distribution, _PerturbedScore(float(sigma), noise)


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
    samples
        S, the number of perturb-and-MAP samples per row, as for [`IMLE`][imle_solvers.IMLE].
    pool
        Optional [`SolverPool`][imle_solvers.pool.SolverPool] for solver-backed oracles.
    generator
        Optional `torch.Generator` on the weights' device.
    check_finite
        Check the weights for NaN/inf before solving, as for [`IMLE`][imle_solvers.IMLE].

    References
    ----------
    Bengio, Léonard & Courville, "Estimating or Propagating Gradients Through Stochastic Neurons for
    Conditional Computation", 2013, <https://arxiv.org/abs/1308.3432>.
    """

    _fixed = frozenset({"noise_on", "target_noise_scale"})

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
    pool
        Optional [`SolverPool`][imle_solvers.pool.SolverPool] for solver-backed oracles.
    check_finite
        Check the weights for NaN/inf before solving, as for [`IMLE`][imle_solvers.IMLE].

    References
    ----------
    Vlastelica, Paulus, Musil, Martius & Rolínek, "Differentiation of Blackbox Combinatorial Solvers",
    ICLR 2020, <https://arxiv.org/abs/1912.02175>.
    """

    _fixed = frozenset({"noise", "samples", "generator", "noise_on", "target_noise_scale"})

    def __init__(
        self,
        oracle: MapOracle,
        lam: float = 20.0,
        *,
        pool: BatchSolver | None = None,
        check_finite: bool | None = None,
    ) -> None:
        rule = PerturbedTarget(positive("lam", lam))
        super().__init__(oracle, NoNoise(), rule, pool=pool, check_finite=check_finite)
        self.lam = lam

    @property
    def lam(self) -> float:
        """λ > 0, the interpolation strength; assigning it takes effect at the next backward pass."""
        return self.rule.lam  # type: ignore[attr-defined]

    @lam.setter
    def lam(self, lam: float) -> None:
        self.__dict__["_rule"] = PerturbedTarget(positive("lam", lam))  # ∇ = [MAP(θ) − MAP(θ − λ∇zL)]/λ

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
    pool
        Optional [`SolverPool`][imle_solvers.pool.SolverPool] for solver-backed oracles.
    generator
        Optional `torch.Generator` on the weights' device.
    check_finite
        Check the weights for NaN/inf before solving, as for [`IMLE`][imle_solvers.IMLE].

    References
    ----------
    Berthet, Blondel, Teboul, Cuturi, Vert & Bach, "Learning with Differentiable Perturbed Optimizers",
    NeurIPS 2020, <https://arxiv.org/abs/2002.08676>.
    """

    _fixed = frozenset({"noise_on", "target_noise_scale"})

    def __init__(
        self,
        oracle: MapOracle,
        sigma: float = 1.0,
        *,
        samples: int = 10,
        noise: ScoreNoise = "normal",
        pool: BatchSolver | None = None,
        generator: torch.Generator | None = None,
        check_finite: bool | None = None,
    ) -> None:
        distribution, score = _perturbation(sigma, noise)
        super().__init__(
            oracle,
            distribution,
            score,
            samples=samples,
            pool=pool,
            generator=generator,
            check_finite=check_finite,
        )

    @property
    def sigma(self) -> float:
        """Noise scale σ > 0; assigning it changes the noise and the score together."""
        return self.rule.sigma  # type: ignore[attr-defined]

    @sigma.setter
    def sigma(self, sigma: float) -> None:
        self._perturb(sigma, self.rule.noise)  # type: ignore[attr-defined]

    @property
    def noise(self) -> NoiseDistribution:
        """The perturbation ``σZ``, ``Normal(σ)`` or ``Gumbel(σ)``.

        Assign ``"normal"`` or ``"gumbel"`` (what the constructor takes) to change the family and keep σ,
        or a ``Normal(σ)`` / ``Gumbel(σ)`` to set both; the score estimator follows.
        """
        return self._noise

    @noise.setter
    def noise(self, noise: ScoreNoise | NoiseDistribution) -> None:
        if isinstance(noise, Normal):
            self._perturb(noise.sigma, "normal")
        elif isinstance(noise, Gumbel):
            self._perturb(noise.tau, "gumbel")
        else:  # "normal" or "gumbel" (anything else is refused there)
            self._perturb(self.sigma, noise)  # type: ignore[arg-type]

    def _perturb(self, sigma: float, noise: ScoreNoise) -> None:
        distribution, score = _perturbation(sigma, noise)
        PerturbAndMAPLayer.noise.fset(self, distribution)  # type: ignore[attr-defined]
        self.__dict__["_rule"] = score

    def forward(self, weights: torch.Tensor) -> torch.Tensor:
        """``(..., m)`` → ``(..., m)`` expected perturbed state (MAP state in ``eval()``)."""
        z = self.sample_states(weights)  # [..., M, m]
        return z.mean(dim=-2)  # ŷ = mean_s MAP(θ + σZ_s)   [..., m]
