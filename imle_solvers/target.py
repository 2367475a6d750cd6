"""Target distributions q(z; θ') for the I-MLE backward pass (paper, sec. 3.1 and 5).

The I-MLE gradient (eq. 7) compares the current distribution with a target one:

    ∇θ L ≈ (1/S) Σ_i [MAP(θ + ε_i) − MAP(θ' + ε_i)]        (same ε_i in both MAPs)

A target turns the upstream gradient ``∇z L`` into the target parameters θ' (`params`) and,
in `estimate`, into the gradient itself. All tensors are in θ-space (scores to maximise).
"""

from __future__ import annotations

import abc
import dataclasses
import math
from collections.abc import Callable

import torch

__all__ = ["AdaptiveTarget", "OptimalTarget", "PerturbedTarget", "TargetDistribution"]

#: ``solve(θ_batch)``: batched ``MAP`` of ``[N, S', m]`` θ-space weights (one pool call).
Solve = Callable[[torch.Tensor], torch.Tensor]


class TargetDistribution(abc.ABC):
    """A rule ``θ' = params(θ, ∇z L)`` defining the target q(z; θ') = p(z; θ') (paper, eq. 6-7)."""

    @abc.abstractmethod
    def params(self, theta: torch.Tensor, grad_z: torch.Tensor) -> torch.Tensor:
        """Target parameters θ' from θ and the upstream gradient (broadcasting, θ-space)."""

    def scale(self, theta: torch.Tensor, grad_z: torch.Tensor) -> torch.Tensor | float:
        """Divisor applied to ``MAP(θ+ε) − MAP(θ'+ε)`` (1 unless the target says otherwise)."""
        return 1.0

    def estimate(
        self,
        theta: torch.Tensor,
        eps: torch.Tensor,
        z: torch.Tensor,
        grad_z: torch.Tensor,
        solve: Solve,
    ) -> torch.Tensor:
        """The I-MLE gradient estimate of eq. 7, averaged over the S samples.

        Parameters
        ----------
        theta
            ``[N, 1, m]`` current parameters θ.
        eps
            ``[N, S, m]`` the noise drawn in the forward pass (reused here).
        z
            ``[N, S, m]`` forward states ``MAP(θ + ε)``.
        grad_z
            ``[N, S, m]`` upstream gradient ``∇z L`` for every sample.
        solve
            Batched MAP in θ-space.

        Returns
        -------
        torch.Tensor
            ``[N, m]`` gradient with respect to θ.
        """
        theta_target = self.params(theta, grad_z)  # θ' = params(θ, ∇zL)          [N, S, m]
        z_target = solve(theta_target + eps)  # MAP(θ' + ε), same ε             [N, S, m]
        return ((z - z_target) / self.scale(theta, grad_z)).mean(dim=1)  # eq. 7  [N, m]


@dataclasses.dataclass(frozen=True)
class PerturbedTarget(TargetDistribution):
    """Perturbation-based implicit differentiation (PID) target, paper eq. 8.

    ``θ' = θ − λ ∇z L``; the gradient is ``[MAP(θ+ε) − MAP(θ'+ε)] / λ``. Dividing by λ (eq. 11's
    finite difference) makes λ only a perturbation *intensity*: the gradient keeps the scale of
    ``∇z L`` whatever λ is. With [`NoNoise`][imle_solvers.NoNoise] this is the blackbox estimator of
    Vlastelica et al. (sec. 3.1).

    Parameters
    ----------
    lam
        λ > 0, the perturbation intensity.
    """

    lam: float = 10.0

    def __post_init__(self) -> None:
        if not self.lam > 0:
            raise ValueError(f"PerturbedTarget lam must be > 0, got {self.lam}")

    def params(self, theta: torch.Tensor, grad_z: torch.Tensor) -> torch.Tensor:
        return theta - self.lam * grad_z  # θ' = θ − λ ∇zL   (eq. 8)

    def scale(self, theta: torch.Tensor, grad_z: torch.Tensor) -> float:
        return self.lam


@dataclasses.dataclass(frozen=True)
class OptimalTarget(TargetDistribution):
    """The target of paper eq. 10: ``θ'_i = θ_i`` where ``(∇z L)_i = 0``, else ``−(∇z L)_i``.

    With the Hamming loss and no noise it gives ``MAP(θ) − y`` (Fact 1, the perceptron rule); with the
    regret loss ``⟨c, z⟩`` it gives ``MAP(θ + ε) − MAP(−c + ε)`` (Fact 2). The difference is not scaled.
    """

    def params(self, theta: torch.Tensor, grad_z: torch.Tensor) -> torch.Tensor:
        return torch.where(grad_z == 0, theta, -grad_z)  # eq. 10


@dataclasses.dataclass
class AdaptiveTarget(TargetDistribution):
    """Adaptive PID target (AI-MLE, Minervini et al. 2023): λ chosen per instance and adapted online.

    ``λ = α · max(‖θ‖, min_norm) / ‖∇z L‖`` per row, so that the target step ``λ ∇z L`` has a size
    relative to θ, and the factor α is adapted after every backward pass so that the *fraction of
    nonzero gradient entries* tracks ``nonzero_target``: α grows by ``exp(step)`` when the gradient is
    sparser than the target, shrinks by it otherwise. The difference is divided by λ as in
    [`PerturbedTarget`][imle_solvers.PerturbedTarget].

    With ``two_sided=True`` the central difference ``[MAP(θ + λ∇zL + ε) − MAP(θ − λ∇zL + ε)] / (2λ)``
    is used (both MAPs go to the solver in one batched call).

    Parameters
    ----------
    nonzero_target
        Target fraction (0, 1] of nonzero gradient entries.
    alpha
        Initial factor α > 0.
    step
        Log-step of the multiplicative update of α (0 freezes α).
    two_sided
        Use the central difference.
    min_norm
        Floor on ‖θ‖, so that λ is not stuck at 0 when θ starts at 0.
    """

    nonzero_target: float = 0.1
    alpha: float = 1.0
    step: float = 0.05
    two_sided: bool = False
    min_norm: float = 1.0

    def __post_init__(self) -> None:
        if not 0 < self.nonzero_target <= 1:
            raise ValueError(f"nonzero_target must be in (0, 1], got {self.nonzero_target}")
        if not self.alpha > 0:
            raise ValueError(f"alpha must be > 0, got {self.alpha}")
        if self.min_norm <= 0:
            raise ValueError(f"min_norm must be > 0, got {self.min_norm}")
        if self.step < 0:
            raise ValueError(f"step must be >= 0, got {self.step}")

    def lam(self, theta: torch.Tensor, grad_z: torch.Tensor) -> torch.Tensor:
        """Per-row λ = α·max(‖θ‖, min_norm)/‖∇zL‖ (0 where ∇zL = 0), shape ``[N, S, 1]``."""
        theta_norm = torch.linalg.vector_norm(theta, dim=-1, keepdim=True)  # ‖θ‖    [N, 1, 1]
        theta_norm = theta_norm.clamp_min(self.min_norm)
        grad_norm = torch.linalg.vector_norm(grad_z, dim=-1, keepdim=True)  # ‖∇zL‖  [N, S, 1]
        tiny = torch.finfo(grad_z.dtype).tiny
        ratio = theta_norm / grad_norm.clamp_min(tiny)
        return torch.where(grad_norm > 0, self.alpha * ratio, torch.zeros_like(ratio))

    def params(self, theta: torch.Tensor, grad_z: torch.Tensor) -> torch.Tensor:
        return theta - self.lam(theta, grad_z) * grad_z  # θ' = θ − λ ∇zL

    def scale(self, theta: torch.Tensor, grad_z: torch.Tensor) -> torch.Tensor:
        lam = self.lam(theta, grad_z)
        return torch.where(lam > 0, lam, torch.ones_like(lam))  # λ = 0 only where z' = z

    def estimate(
        self,
        theta: torch.Tensor,
        eps: torch.Tensor,
        z: torch.Tensor,
        grad_z: torch.Tensor,
        solve: Solve,
    ) -> torch.Tensor:
        lam = self.lam(theta, grad_z)  # [N, S, 1]
        scale = torch.where(lam > 0, lam, torch.ones_like(lam))
        if self.two_sided:
            step = lam * grad_z
            both = torch.cat([theta + step + eps, theta - step + eps], dim=1)  # [N, 2S, m], one call
            z_plus, z_minus = solve(both).chunk(2, dim=1)
            grad = ((z_plus - z_minus) / (2 * scale)).mean(dim=1)  # central difference  [N, m]
        else:
            z_target = solve(theta - lam * grad_z + eps)  # MAP(θ − λ∇zL + ε)
            grad = ((z - z_target) / scale).mean(dim=1)
        self._update(grad)
        return grad

    def _update(self, grad: torch.Tensor) -> None:
        """α ← α·exp(±step) so that the nonzero fraction of the gradient tracks the target."""
        if self.step == 0 or grad.numel() == 0:
            return
        nonzero = float((grad != 0).to(torch.float32).mean())
        direction = 1.0 if nonzero < self.nonzero_target else -1.0
        self.alpha = float(min(max(self.alpha * math.exp(direction * self.step), 1e-6), 1e6))
