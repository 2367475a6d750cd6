"""Baseline gradient estimators on the same oracle API as I-MLE, for head-to-head comparisons.

All of them run through [`PerturbAndMAP`][imle_solvers.perturb_and_map.PerturbAndMAP] (the one
autograd function of the library); they differ in the forward noise and the backward *gradient rule*:

* [`STE`][imle_solvers.STE] — straight-through: ``∂z/∂θ ≈ I`` (Bengio et al. 2013; paper sec. 3.1).
* [`Blackbox`][imle_solvers.Blackbox] — Vlastelica et al. 2020: ``[MAP(θ) − MAP(θ − λ∇zL)] / λ``
  (= I-MLE with δ₀ noise).
* [`PerturbedOptimizer`][imle_solvers.PerturbedOptimizer] — Berthet et al. 2020: the expected perturbed
  MAP with its score-function Jacobian (Gaussian or Gumbel noise); ``multiplicative=True`` is the
  sign-preserving perturbation ``θ ⊙ exp(σZ − σ²/2)`` of Dalle et al. 2022.
* [`NegativeIdentity`][imle_solvers.NegativeIdentity] — Sahoo et al. 2023: ``MAP(θ)`` forward, the
  identity backward (``−I`` in cost space), no second solve.

Like I-MLE, each returns the sum of its per-sample estimates (autograd's rule for S outputs).
"""

from __future__ import annotations

import dataclasses
from typing import Literal

import torch

from ._checks import one_of, positive
from .noise import Gumbel, NoiseDistribution, NoNoise, Normal
from .oracle import BatchSolver, MapOracle
from .perturb_and_map import NoiseOn, PerturbAndMAPLayer
from .target import PerturbedTarget, Solve

__all__ = ["STE", "Blackbox", "NegativeIdentity", "PerturbedOptimizer"]


@dataclasses.dataclass(frozen=True)
class _StraightThrough:
    """``∇θ L = Σ_s ∇z_s L``: each sample ``z_s ≈ θ + ε_s`` has identity Jacobian."""

    def estimate(
        self, theta: torch.Tensor, eps: torch.Tensor, z: torch.Tensor, grad_z: torch.Tensor, solve: Solve
    ) -> torch.Tensor:
        return grad_z.sum(dim=1)  # [N, m]


_EPS = 1e-8
"""Smallest ``|σθ|`` the multiplicative score divides by (PyEPO's clamp, sign kept)."""


@dataclasses.dataclass(frozen=True)
class _PerturbedScore:
    """Berthet et al. (2020), Prop. 3.1: ``J_θ E[MAP(θ+σZ)]ᵀ g = E[⟨MAP(θ+σZ), g⟩ ∇ν(Z)] / σ``.

    ``Z`` has density ``∝ exp(−ν(z))``: ``∇ν(Z) = Z`` for the standard normal, ``1 − exp(−Z)`` for the
    standard Gumbel. With ``ε = σZ`` and ``g_s`` the gradient of sample ``s`` (which already carries the
    1/S of the mean the layer outputs), the estimate is ``Σ_s ⟨z_s, g_s⟩ ∇ν(ε_s/σ) / σ``.

    ``variance_reduction`` replaces ``⟨z_s, g_s⟩`` by its difference from the mean of the other samples
    (a leave-one-out baseline: independent of ``Z_s``, so the estimate stays unbiased). ``multiplicative``
    is the score of ``MAP(θ ⊙ exp(σZ − σ²/2))`` (Dalle et al. 2022): Gaussian in ``log|θ|``, so the
    estimate above is divided by ``θ`` (``|σθ|`` kept at least ``1e-8``).
    """

    sigma: float
    noise: str = "normal"
    multiplicative: bool = False
    variance_reduction: bool = False

    def estimate(
        self, theta: torch.Tensor, eps: torch.Tensor, z: torch.Tensor, grad_z: torch.Tensor, solve: Solve
    ) -> torch.Tensor:
        standard = eps / self.sigma  # Z = ε/σ   [N, S, m]
        score = standard if self.noise == "normal" else -torch.expm1(-standard)  # ∇ν(Z)   [N, S, m]
        inner = (z * grad_z).sum(dim=-1, keepdim=True)  # ⟨z_s, g_s⟩      [N, S, 1]
        samples = inner.shape[1]
        if self.variance_reduction and samples > 1:  # ⟨z_s, g_s⟩ − mean_{j≠s} ⟨z_j, g_j⟩
            inner = (inner - inner.mean(dim=1, keepdim=True)) * (samples / (samples - 1))
        if not self.multiplicative:
            return (inner * score).sum(dim=1) / self.sigma  # Σ_s ⟨z_s,g_s⟩ ∇ν(Z_s) / σ   [N, m]
        scale = self.sigma * theta.squeeze(1)  # σθ   [N, m]
        tiny = torch.where(scale >= 0, _EPS, -_EPS).to(scale.dtype)
        scale = torch.where(scale.abs() < _EPS, tiny, scale)  # |σθ| ≥ 1e-8, sign kept
        return (inner * score).sum(dim=1) / scale  # Σ_s ⟨z_s,g_s⟩ Z_s / (σθ)   [N, m]


ScoreNoise = Literal["normal", "gumbel"]


def _perturbation(
    sigma: float, noise: ScoreNoise, multiplicative: bool = False, variance_reduction: bool = False
) -> tuple[NoiseDistribution, _PerturbedScore]:
    """The noise ``σZ`` of a perturbed optimizer and the score estimator that matches it."""
    positive("PerturbedOptimizer sigma", sigma)
    if not isinstance(noise, str):
        raise TypeError(
            "PerturbedOptimizer noise must be 'normal', 'gumbel', a Normal or a Gumbel instance (the "
            f"score estimator needs the density), got {noise!r}"
        )
    one_of("PerturbedOptimizer noise", noise, ("normal", "gumbel"))
    for name, flag in (("multiplicative", multiplicative), ("variance_reduction", variance_reduction)):
        if not isinstance(flag, bool):
            raise TypeError(f"PerturbedOptimizer {name} must be True or False, got {flag!r}")
    if multiplicative and noise != "normal":
        raise ValueError("PerturbedOptimizer multiplicative=True takes noise='normal' (exp(σZ − σ²/2))")
    distribution = Normal(sigma) if noise == "normal" else Gumbel(sigma)
    return distribution, _PerturbedScore(float(sigma), noise, multiplicative, variance_reduction)


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


class NegativeIdentity(PerturbAndMAPLayer):
    """Negative identity backpropagation (Sahoo et al., ICLR 2023): ``MAP(θ)`` forward, identity backward.

    Forward ``z = MAP(θ)`` (no noise); backward ``∇θ L = ∇z L``, i.e. ``∂z/∂θ ≈ I`` in θ-space, which for a
    ``"min"`` oracle is ``∂z/∂c ≈ −I`` on the costs: the "negative identity" of the paper, the
    hyper-parameter-free limit of [`Blackbox`][imle_solvers.Blackbox] that needs no second solve. It is
    [`STE`][imle_solvers.STE] with ``NoNoise()``.

    Parameters
    ----------
    oracle
        The MAP oracle.
    pool
        Optional [`SolverPool`][imle_solvers.pool.SolverPool] for solver-backed oracles.
    check_finite
        Check the weights for NaN/inf before solving, as for [`IMLE`][imle_solvers.IMLE].

    References
    ----------
    Sahoo, Paulus, Vlastelica, Musil, Kuleshov & Martius, "Backpropagation through Combinatorial
    Algorithms: Identity with Projection Works", ICLR 2023, <https://arxiv.org/abs/2205.15213>.
    """

    _fixed = frozenset({"noise", "samples", "generator", "noise_on", "target_noise_scale"})

    def __init__(
        self,
        oracle: MapOracle,
        *,
        pool: BatchSolver | None = None,
        check_finite: bool | None = None,
    ) -> None:
        super().__init__(oracle, NoNoise(), _StraightThrough(), pool=pool, check_finite=check_finite)

    def forward(self, weights: torch.Tensor) -> torch.Tensor:
        """``(..., m)`` → ``(..., m)`` MAP states."""
        return self.sample_states(weights).squeeze(-2)


class PerturbedOptimizer(PerturbAndMAPLayer):
    """Differentiable perturbed optimizer (Berthet et al., NeurIPS 2020).

    Training forward: ``ŷ(θ) = (1/M) Σ_s MAP(θ + σ Z_s)``, ``Z_s ~ N(0, I)`` — a point of the convex hull,
    not a vertex; backward: the Gaussian score-function Jacobian ``E[MAP(θ+σZ) Zᵀ] / σ``. ``eval()``
    returns the plain ``MAP(θ)``.

    With ``multiplicative=True`` the perturbation is Dalle et al.'s sign-preserving
    ``θ ⊙ exp(σZ − σ²/2)`` (every weight keeps its sign, its expectation is ``θ``: for costs that must
    stay positive, e.g. a Dijkstra oracle), and the score is divided by ``θ``:
    ``J_θ ŷᵀ g = E[⟨MAP(θ ⊙ e^(σZ−σ²/2)), g⟩ Z] / (σθ)``.

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
    multiplicative
        The multiplicative perturbation above (``noise="normal"`` only).
    variance_reduction
        Subtract from each sample's ``⟨z_s, g_s⟩`` the mean of the other samples' (a leave-one-out
        baseline; unbiased, lower variance; PyEPO's ``variance_reduction=True``).
    pool
        Optional [`SolverPool`][imle_solvers.pool.SolverPool] for solver-backed oracles.
    generator
        Optional `torch.Generator` on the weights' device.
    check_finite
        Check the weights for NaN/inf before solving, as for [`IMLE`][imle_solvers.IMLE].
    noise_on
        ``"theta"`` (default) adds ``σZ`` to θ; ``"costs"`` adds it to the costs of a ``"min"`` oracle
        (PyEPO's convention: the same draws of ``generator`` give PyEPO's perturbed costs). No effect on a
        ``"max"`` oracle or with ``multiplicative=True``.

    References
    ----------
    Berthet, Blondel, Teboul, Cuturi, Vert & Bach, "Learning with Differentiable Perturbed Optimizers",
    NeurIPS 2020, <https://arxiv.org/abs/2002.08676>.

    Dalle, Baty, Bouvier & Parmentier, "Learning with Combinatorial Optimization Layers: a Probabilistic
    Approach", 2022, sec. 3 (multiplicative perturbation), <https://arxiv.org/abs/2207.13513>.
    """

    _fixed = frozenset({"target_noise_scale"})

    def __init__(
        self,
        oracle: MapOracle,
        sigma: float = 1.0,
        *,
        samples: int = 10,
        noise: ScoreNoise = "normal",
        multiplicative: bool = False,
        variance_reduction: bool = False,
        pool: BatchSolver | None = None,
        generator: torch.Generator | None = None,
        check_finite: bool | None = None,
        noise_on: NoiseOn = "theta",
    ) -> None:
        distribution, score = _perturbation(sigma, noise, multiplicative, variance_reduction)
        super().__init__(
            oracle,
            distribution,
            score,
            samples=samples,
            pool=pool,
            generator=generator,
            check_finite=check_finite,
            noise_on=noise_on,
        )

    @property
    def sigma(self) -> float:
        """Noise scale σ > 0; assigning it changes the noise and the score together."""
        return self.rule.sigma  # type: ignore[attr-defined]

    @sigma.setter
    def sigma(self, sigma: float) -> None:
        self._perturb(sigma, self.rule.noise)  # type: ignore[attr-defined]

    @property
    def multiplicative(self) -> bool:
        """Whether the perturbation is ``θ ⊙ exp(σZ − σ²/2)`` rather than ``θ + σZ``; assigning it changes
        the perturbation and the score together."""
        return self.rule.multiplicative  # type: ignore[attr-defined]

    @multiplicative.setter
    def multiplicative(self, multiplicative: bool) -> None:
        self._score(multiplicative, self.variance_reduction)

    @property
    def variance_reduction(self) -> bool:
        """Whether the score uses the leave-one-out baseline (assignable)."""
        return self.rule.variance_reduction  # type: ignore[attr-defined]

    @variance_reduction.setter
    def variance_reduction(self, variance_reduction: bool) -> None:
        self._score(self.multiplicative, variance_reduction)

    def _score(self, multiplicative: bool, variance_reduction: bool) -> None:
        """A new score estimator for these flags (checked as the constructor does), σ and noise kept."""
        noise = self.rule.noise  # type: ignore[attr-defined]
        _, score = _perturbation(self.sigma, noise, multiplicative, variance_reduction)
        self.__dict__["_rule"] = score

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
        rule = self.__dict__.get("_rule")  # None while the base class sets the noise, before the rule
        flags = (False, False) if rule is None else (rule.multiplicative, rule.variance_reduction)
        distribution, score = _perturbation(sigma, noise, *flags)
        PerturbAndMAPLayer.noise.fset(self, distribution)  # type: ignore[attr-defined]
        self.__dict__["_rule"] = score

    def _multiplicative_shift(self) -> float | None:
        return 0.5 * self.sigma**2 if self.multiplicative else None  # exp(σZ − σ²/2) has mean 1

    def forward(self, weights: torch.Tensor) -> torch.Tensor:
        """``(..., m)`` → ``(..., m)`` expected perturbed state (MAP state in ``eval()``)."""
        z = self.sample_states(weights)  # [..., M, m]
        return z.mean(dim=-2)  # ŷ = mean_s MAP(θ + σZ_s)   [..., m]
