"""Target distributions q(z; θ') for the I-MLE backward pass (paper, sec. 3.1 and 5).

The I-MLE gradient (eq. 7) compares the current distribution with a target one, sample by sample:

    ∇θ L ≈ Σ_i [MAP(θ + ε_i) − MAP(θ' + ε_i)] / λ_i        (same ε_i in both MAPs)

A target turns the upstream gradient ``∇z L`` into the target parameters θ' and the divisor λ. The
backward pass returns the **sum** over the S samples of the per-sample estimates, exactly as autograd
treats any layer with S outputs: a loss averaged over the samples averages them, a summed loss adds
them. All tensors are in θ-space (scores to maximise).

Targets, from the most to the least robust:

* [`RelativeTarget`][imle_solvers.RelativeTarget] (the default of [`IMLE`][imle_solvers.IMLE]): the
  target step has a size relative to θ + ε, whatever the scale of the loss; the estimate is linear in
  ``∇z L``.
* [`AdaptiveTarget`][imle_solvers.AdaptiveTarget]: AI-MLE (Minervini et al., AAAI 2023), λ adapted
  online to a target gradient sparsity; linear in ``∇z L``.
* [`PerturbedTarget`][imle_solvers.PerturbedTarget]: the paper's fixed-λ PID target (eq. 8). The step
  ``λ ∇z L`` moves with the scale of the loss: a ``.mean()`` over a large batch can shrink it below
  the gaps of θ + ε, and the gradient becomes exactly zero (the target warns).
* [`OptimalTarget`][imle_solvers.OptimalTarget]: eq. 10, for losses whose ``∇z L`` is a target
  score vector (Facts 1 and 2).
"""

from __future__ import annotations

import abc
import dataclasses
import math
import warnings
from collections.abc import Callable

import torch
from torch import nn

from ._checks import in_range, non_negative, positive

__all__ = [
    "AdaptiveTarget",
    "OptimalTarget",
    "PerturbedTarget",
    "RelativeTarget",
    "RowAdaptiveTarget",
    "TargetDistribution",
]

Solve = Callable[[torch.Tensor], torch.Tensor]
"""``solve(θ_batch)``: batched ``MAP`` of ``[N, S', m]`` θ-space weights (one oracle / pool call)."""


def _difference(
    theta: torch.Tensor, eps: torch.Tensor, z: torch.Tensor, step: torch.Tensor, solve: Solve, two_sided: bool
) -> torch.Tensor:
    """``MAP(θ + ε) − MAP(θ − step + ε)`` per sample, or the two-sided
    ``[MAP(θ + step + ε) − MAP(θ − step + ε)] / 2`` with both MAPs in one call.  → ``[N, S, m]``"""
    if two_sided:
        both = torch.cat([theta + step + eps, theta - step + eps], dim=1)  # [N, 2S, m], one call
        z_plus, z_minus = solve(both).chunk(2, dim=1)  # MAP(θ ± λ∇zL + ε)   [N, S, m] each
        return (z_plus - z_minus) / 2  # central difference
    return z - solve(theta - step + eps)  # z − z', z' = MAP(θ' + ε) with the same ε


def _pid(
    theta: torch.Tensor,
    eps: torch.Tensor,
    z: torch.Tensor,
    step: torch.Tensor,
    inverse_lam: torch.Tensor | float,
    solve: Solve,
    two_sided: bool,
) -> torch.Tensor:
    """Per-sample PID estimate ``[MAP(θ + ε) − MAP(θ − step + ε)] / λ``, summed over samples.

    ``step = λ ∇zL`` (``[N, S, m]``); ``inverse_lam`` = 1/λ broadcasts against ``[N, S, 1]`` (a
    multiplier, so that a λ beyond the float range gives a tiny estimate, not 0·∞).
    """
    diff = _difference(theta, eps, z, step, solve, two_sided)  # [N, S, m]
    per_sample = diff * inverse_lam  # eq. 7 per sample   [N, S, m]
    return per_sample.sum(dim=1)  # Σ over the S samples (autograd's rule)         [N, m]


class TargetDistribution(abc.ABC):
    """A rule ``θ' = params(θ, ∇z L)`` defining the target q(z; θ') = p(z; θ') (paper, eq. 6-7).

    Subclasses implement [`params`][imle_solvers.TargetDistribution.params] and, when the estimate is
    not ``Σ_s [MAP(θ + ε_s) − MAP(θ'_s + ε_s)]``, override
    [`estimate`][imle_solvers.TargetDistribution.estimate].
    """

    @abc.abstractmethod
    def params(self, theta: torch.Tensor, grad_z: torch.Tensor) -> torch.Tensor:
        """Target parameters θ' from θ and the upstream gradient (broadcasting, θ-space)."""

    def estimate(
        self,
        theta: torch.Tensor,
        eps: torch.Tensor,
        z: torch.Tensor,
        grad_z: torch.Tensor,
        solve: Solve,
    ) -> torch.Tensor:
        """The I-MLE gradient estimate of eq. 7, summed over the S samples.

        Parameters
        ----------
        theta
            ``[N, 1, m]`` current parameters θ.
        eps
            ``[N, S, m]`` the noise the target MAP uses (the forward's ε, possibly rescaled).
        z
            ``[N, S, m]`` forward states ``MAP(θ + ε)``.
        grad_z
            ``[N, S, m]`` upstream gradient ``∇z L`` of every sample (finite).
        solve
            Batched MAP in θ-space.

        Returns
        -------
        torch.Tensor
            ``[N, m]`` gradient with respect to θ.
        """
        theta_target = self.params(theta, grad_z)  # θ' = params(θ, ∇zL)           [N, S, m]
        z_target = solve(theta_target + eps)  # MAP(θ' + ε), same ε              [N, S, m]
        return (z - z_target).sum(dim=1)  # eq. 7, summed over samples          [N, m]


@dataclasses.dataclass(frozen=True)
class RelativeTarget(TargetDistribution):
    """Scale-equivariant PID target: a step of relative size λ, the default of [`IMLE`][imle_solvers.IMLE].

    Paper eq. 8 with a λ chosen per row and sample so that the target step has a fixed size *relative
    to the perturbed weights*, whatever the scale of the loss::

        s      = RMS(θ + ε)                              (1 where θ + ε = 0)
        λ_eff  = λ · s / ‖∇z L‖_∞
        θ'     = θ − λ_eff ∇z L      (the largest entry moves by exactly λ · s)
        ∇θ L  ≈ Σ_s [MAP(θ + ε_s) − MAP(θ'_s + ε_s)] / λ_eff

    Why: the paper's fixed λ (eq. 8) moves θ' by ``λ ∇z L``, so the step shrinks with the loss
    scale; under ``loss.mean()`` over a batch of B rows it shrinks B-fold, falls below the gaps of
    θ + ε, and the gradient is exactly zero. Here multiplying the loss by α leaves θ' unchanged and
    multiplies the gradient by α (``grad(αL) = α grad(L)``), and which rows get a nonzero gradient
    does not depend on the reduction or the batch size. Dividing by λ_eff keeps eq. 11's finite
    difference: the estimate has the scale of ``∇z L``.

    Rows (and samples) with ``∇z L = 0`` get a zero gradient.

    Parameters
    ----------
    lam
        λ > 0: the largest target move in units of RMS(θ + ε).
    two_sided
        Use the central difference ``[MAP(θ + λ_eff∇zL + ε) − MAP(θ − λ_eff∇zL + ε)] / (2λ_eff)``
        (both MAPs in one solver call).

    References
    ----------
    Niepert, Minervini & Franceschi, "Implicit MLE", NeurIPS 2021, eq. 8 and eq. 11,
    <https://arxiv.org/abs/2106.01798>.
    """

    lam: float = 10.0
    two_sided: bool = False

    def __post_init__(self) -> None:
        positive("RelativeTarget lam", self.lam)

    def _step(self, perturbed: torch.Tensor, grad_z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(step, 1/λ_eff)``: ``step = λ_eff ∇zL`` ``[N, S, m]`` and ``1/λ_eff`` ``[N, S, 1]``."""
        # s = RMS(θ + ε), computed as max|x|·RMS(x / max|x|) so that huge finite weights cannot overflow.
        peak = perturbed.abs().amax(dim=-1, keepdim=True)  # max|θ + ε|   [N, S, 1]
        safe_peak = torch.where(peak > 0, peak, torch.ones_like(peak))
        scale = safe_peak * (perturbed / safe_peak).square().mean(dim=-1, keepdim=True).sqrt()
        scale = torch.where(peak > 0, scale, torch.ones_like(scale))  # s   [N, S, 1]
        g_max = grad_z.abs().amax(dim=-1, keepdim=True)  # ‖∇zL‖_∞   [N, S, 1]
        active = g_max > 0
        unit = grad_z / torch.where(active, g_max, torch.ones_like(g_max))  # ∇zL/‖∇zL‖_∞ ∈ [−1, 1]
        reach = (self.lam * scale).clamp(max=torch.finfo(scale.dtype).max)  # λ·s, finite   [N, S, 1]
        step = reach * unit  # λ_eff ∇zL = λ·s·∇zL/‖∇zL‖_∞   [N, S, m]
        inverse = torch.where(active, (g_max / scale) / self.lam, 1.0)  # 1/λ_eff = ‖∇zL‖_∞/(λ·s)
        return step, inverse

    def params(self, theta: torch.Tensor, grad_z: torch.Tensor) -> torch.Tensor:
        """θ' for noise-free θ (s = RMS(θ)); the layer's backward uses θ + ε for s."""
        step, _ = self._step(theta.expand_as(grad_z), grad_z)
        return theta - step

    def estimate(
        self,
        theta: torch.Tensor,
        eps: torch.Tensor,
        z: torch.Tensor,
        grad_z: torch.Tensor,
        solve: Solve,
    ) -> torch.Tensor:
        step, inverse = self._step(theta + eps, grad_z)  # λ_eff ∇zL, 1/λ_eff   [N, S, m], [N, S, 1]
        return _pid(theta, eps, z, step, inverse, solve, self.two_sided)


@dataclasses.dataclass(frozen=True)
class PerturbedTarget(TargetDistribution):
    """Perturbation-based implicit differentiation (PID) target with a fixed λ, paper eq. 8.

    ``θ' = θ − λ ∇z L``; the gradient is ``Σ_s [MAP(θ+ε_s) − MAP(θ'_s+ε_s)] / λ``. Dividing by λ
    (eq. 11's finite difference) makes λ only a perturbation *intensity*: the gradient keeps the scale
    of ``∇z L`` whatever λ is. With [`NoNoise`][imle_solvers.NoNoise] this is the blackbox estimator
    of Vlastelica et al. (sec. 3.1).

    The step ``λ ∇z L`` depends on the scale of the loss by definition: averaging the loss over a
    batch of B rows divides it by B, and once it is smaller than the gaps of θ + ε the target MAP
    equals the forward MAP and the gradient is exactly zero. The layer warns (``RuntimeWarning``, once
    per layer) when more than half of the rows with a nonzero ``∇z L`` get an all-zero gradient;
    [`RelativeTarget`][imle_solvers.RelativeTarget] has no such failure mode.

    Parameters
    ----------
    lam
        λ > 0, the perturbation intensity.
    two_sided
        Use the central difference ``[MAP(θ + λ∇zL + ε) − MAP(θ − λ∇zL + ε)] / (2λ)``.

    References
    ----------
    Niepert, Minervini & Franceschi, "Implicit MLE", NeurIPS 2021, eq. 8,
    <https://arxiv.org/abs/2106.01798>.
    """

    lam: float = 10.0
    two_sided: bool = False

    def __post_init__(self) -> None:
        positive("PerturbedTarget lam", self.lam)

    def params(self, theta: torch.Tensor, grad_z: torch.Tensor) -> torch.Tensor:
        return theta - self.lam * grad_z  # θ' = θ − λ ∇zL   (eq. 8)

    def estimate(
        self,
        theta: torch.Tensor,
        eps: torch.Tensor,
        z: torch.Tensor,
        grad_z: torch.Tensor,
        solve: Solve,
    ) -> torch.Tensor:
        return _pid(theta, eps, z, self.lam * grad_z, 1.0 / self.lam, solve, self.two_sided)


@dataclasses.dataclass(frozen=True)
class OptimalTarget(TargetDistribution):
    """The target of paper eq. 10: ``θ'_i = θ_i`` where ``(∇z L)_i = 0``, else ``−(∇z L)_i``.

    With the Hamming loss and no noise it gives ``MAP(θ) − y`` (Fact 1, the perceptron rule); with the
    regret loss ``⟨c, z⟩`` it gives ``MAP(θ + ε) − MAP(−c + ε)`` (Fact 2). The difference is not
    divided by anything.

    Loss scale: θ' is ``−∇z L`` itself, so the target depends on the scale of the loss by definition.
    It is meant for losses whose per-sample ``∇z L`` *is* a score vector: ``Σ_i |z_i − y_i|`` (Fact 1)
    or ``⟨c, z⟩`` (Fact 2), summed over the samples of each row. Averaging such a loss over a batch of
    B rows scales θ' by 1/B, which changes the target MAP wherever θ + ε is not also rescaled; the
    library's own training methods therefore sum the loss and rescale the weights' gradient by 1/B.

    References
    ----------
    Niepert, Minervini & Franceschi, "Implicit MLE", NeurIPS 2021, eq. 10 and Facts 1-2,
    <https://arxiv.org/abs/2106.01798>.
    """

    def params(self, theta: torch.Tensor, grad_z: torch.Tensor) -> torch.Tensor:
        return torch.where(grad_z == 0, theta, -grad_z)  # eq. 10


class AdaptiveTarget(nn.Module, TargetDistribution):
    """Adaptive I-MLE (AI-MLE, Minervini, Franceschi & Niepert, AAAI 2023), as published.

    One λ for the whole batch, relative to the norms of θ and of the upstream gradient::

        λ = β · ‖θ‖ / ‖∇z L‖          (Frobenius norms over the batch's N·S rows; 0 when ∇z L = 0)
        θ' = θ − λ ∇z L,   ∇θ L ≈ Σ_s [MAP(θ + ε_s) − MAP(θ'_s + ε_s)] / λ

    After every backward pass β moves additively towards a target *number of nonzero gradient
    entries per sample*: ``n̄ ← decay·n̄ + (1 − decay)·nnz/(N·S)`` (an exponential moving average),
    then ``u ← momentum·u ± step`` (+ while ``n̄ < nonzero_target``, − otherwise) and
    ``β ← max(β + u, 0)``. β, n̄ and u are buffers: they move with ``.to(device)``, are saved in the
    owning layer's ``state_dict`` and are updated on the device with no host synchronisation.

    The estimate is linear in ``∇z L``: multiplying the loss by α leaves θ' unchanged and multiplies
    the gradient by α. The reference implementation divides by a λ computed from θ *without* the
    repetition over samples (√S smaller than its step's λ); here one λ serves both, as eq. 7 reads.

    Parameters
    ----------
    nonzero_target
        Target number of nonzero gradient entries per sample (the reference's ``target_norm``).
    beta
        Initial β ≥ 0.
    step
        Additive update of β per backward pass (the reference's ``beta_update_step``).
    momentum
        Momentum of the β update (``beta_update_momentum``).
    decay
        Decay of the moving average of the nonzero count (``grad_norm_decay_rate``).
    initial_nonzeros
        Initial value of the moving average (``initial_grad_norm``).
    two_sided
        Use the central difference ``[MAP(θ + λ∇zL + ε) − MAP(θ − λ∇zL + ε)] / (2λ)``
        (the reference's ``symmetric_perturbation``).

    References
    ----------
    Minervini, Franceschi & Niepert, "Adaptive Perturbation-Based Gradient Estimation for Discrete
    Latent Variable Models", AAAI 2023, <https://arxiv.org/abs/2209.04862>.
    """

    beta: torch.Tensor
    nonzeros: torch.Tensor
    last_update: torch.Tensor

    def __init__(
        self,
        nonzero_target: float = 1.0,
        beta: float = 1.0,
        *,
        step: float = 1e-4,
        momentum: float = 0.0,
        decay: float = 0.9,
        initial_nonzeros: float = 1.0,
        two_sided: bool = False,
    ) -> None:
        super().__init__()
        positive("AdaptiveTarget nonzero_target", nonzero_target)
        non_negative("AdaptiveTarget beta", beta)
        non_negative("AdaptiveTarget step", step)
        in_range("AdaptiveTarget momentum", momentum, 0, 1)
        in_range("AdaptiveTarget decay", decay, 0, 1)
        self.nonzero_target = float(nonzero_target)
        self.step = float(step)
        self.momentum = float(momentum)
        self.decay = float(decay)
        self.two_sided = bool(two_sided)
        self.register_buffer("beta", torch.tensor(float(beta), dtype=torch.float64))
        self.register_buffer("nonzeros", torch.tensor(float(initial_nonzeros), dtype=torch.float64))
        self.register_buffer("last_update", torch.tensor(0.0, dtype=torch.float64))

    def lam(self, theta: torch.Tensor, grad_z: torch.Tensor) -> torch.Tensor:
        """λ = β‖θ‖/‖∇zL‖ over the whole batch (0 when ∇zL = 0), a 0-dim tensor on θ's device.

        ``‖θ‖`` is the norm of θ repeated over the S samples (``√S·‖θ‖``), as in the reference's target
        step, so that S identical samples under a loss averaged over S give the one-sample gradient.
        """
        beta = self.beta.to(device=theta.device, dtype=theta.dtype)
        repeats = grad_z.shape[1] if grad_z.dim() == 3 and theta.dim() == 3 and theta.shape[1] == 1 else 1
        theta_norm = torch.linalg.vector_norm(theta) * math.sqrt(repeats)  # ‖θ‖ over N·S rows   []
        grad_norm = torch.linalg.vector_norm(grad_z)  # ‖∇zL‖ over the batch   []
        ratio = theta_norm / torch.where(grad_norm > 0, grad_norm, torch.ones_like(grad_norm))
        return torch.where(grad_norm > 0, beta * ratio, torch.zeros_like(ratio))

    def params(self, theta: torch.Tensor, grad_z: torch.Tensor) -> torch.Tensor:
        return theta - self.lam(theta, grad_z) * grad_z  # θ' = θ − λ ∇zL

    def estimate(
        self,
        theta: torch.Tensor,
        eps: torch.Tensor,
        z: torch.Tensor,
        grad_z: torch.Tensor,
        solve: Solve,
    ) -> torch.Tensor:
        lam = self.lam(theta, grad_z)  # λ   []
        divisor = torch.where(lam > 0, lam, torch.ones_like(lam))  # λ = 0 only where z' = z
        diff = _difference(theta, eps, z, lam * grad_z, solve, self.two_sided)  # [N, S, m]
        self._update(diff)
        return (diff / divisor).sum(dim=1)  # Σ over samples   [N, m]

    @torch.no_grad()
    def _update(self, diff: torch.Tensor) -> None:
        """One step of the published β update, on the buffers' device (moved to ``diff``'s first)."""
        if self.beta.device != diff.device:
            for name in ("beta", "nonzeros", "last_update"):
                setattr(self, name, getattr(self, name).to(diff.device))
        n, s = diff.shape[0], diff.shape[1]
        if n * s == 0:
            return
        nnz = torch.count_nonzero(diff).to(torch.float64) / (n * s)  # nonzeros per sample   []
        self.nonzeros.mul_(self.decay).add_((1 - self.decay) * nnz)  # n̄ ← decay·n̄ + (1−decay)·nnz
        direction = torch.where(self.nonzeros < self.nonzero_target, 1.0, -1.0).to(torch.float64)
        update = self.momentum * self.last_update + direction * self.step  # u ← μu ± step
        self.beta.add_(update).clamp_(min=0.0)  # β ← max(β + u, 0)
        self.last_update.copy_(update)

    def extra_repr(self) -> str:
        return (
            f"nonzero_target={self.nonzero_target}, beta={float(self.beta):.4g}, step={self.step}, "
            f"momentum={self.momentum}, two_sided={self.two_sided}"
        )

    __hash__ = nn.Module.__hash__


@dataclasses.dataclass
class RowAdaptiveTarget(TargetDistribution):
    """A per-row variant of adaptive I-MLE: λ per row, adapted multiplicatively to a nonzero *fraction*.

    ``λ = α · max(‖θ‖, min_norm) / ‖∇z L‖`` per row, so that the target step has a size relative to
    θ; after every backward pass α grows by ``exp(step)`` when the fraction of nonzero gradient
    entries is below ``nonzero_target`` and shrinks by it otherwise. The difference is divided by λ as
    in [`PerturbedTarget`][imle_solvers.PerturbedTarget]. [`AdaptiveTarget`][imle_solvers.AdaptiveTarget]
    is the published algorithm; this variant keeps its state (α) as a plain attribute.

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

    References
    ----------
    Minervini, Franceschi & Niepert, "Adaptive Perturbation-Based Gradient Estimation for Discrete
    Latent Variable Models", AAAI 2023, <https://arxiv.org/abs/2209.04862>.
    """

    nonzero_target: float = 0.1
    alpha: float = 1.0
    step: float = 0.05
    two_sided: bool = False
    min_norm: float = 1.0

    def __post_init__(self) -> None:
        in_range("RowAdaptiveTarget nonzero_target", self.nonzero_target, 0, 1, closed="(]")
        positive("RowAdaptiveTarget alpha", self.alpha)
        positive("RowAdaptiveTarget min_norm", self.min_norm)
        non_negative("RowAdaptiveTarget step", self.step)

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

    def estimate(
        self,
        theta: torch.Tensor,
        eps: torch.Tensor,
        z: torch.Tensor,
        grad_z: torch.Tensor,
        solve: Solve,
    ) -> torch.Tensor:
        lam = self.lam(theta, grad_z)  # [N, S, 1]
        divisor = torch.where(lam > 0, lam, torch.ones_like(lam))
        grad = _pid(theta, eps, z, lam * grad_z, 1.0 / divisor, solve, self.two_sided)
        self._update(grad)
        return grad

    def _update(self, grad: torch.Tensor) -> None:
        """α ← α·exp(±step) so that the nonzero fraction of the gradient tracks the target."""
        if self.step == 0 or grad.numel() == 0:
            return
        nonzero = float((grad != 0).to(torch.float32).mean())
        direction = 1.0 if nonzero < self.nonzero_target else -1.0
        self.alpha = float(min(max(self.alpha * math.exp(direction * self.step), 1e-6), 1e6))


def warn_if_mostly_zero(
    target: TargetDistribution, grad_theta: torch.Tensor, grad_z: torch.Tensor, state: dict[str, bool]
) -> None:
    """Warn once per layer when a fixed-λ target returned all-zero gradients for most rows.

    Only [`PerturbedTarget`][imle_solvers.PerturbedTarget] can lose every row to the loss scale; rows
    whose upstream gradient is zero are not counted. Needs one host read, so the layer calls it only
    where the backward already synchronises (CPU tensors or host oracles).
    """
    if state.get("warned") or not isinstance(target, PerturbedTarget):
        return
    live = grad_z.reshape(grad_z.shape[0], -1).ne(0).any(dim=1)  # rows with ∇zL ≠ 0   [N]
    zero = grad_theta.eq(0).all(dim=-1) & live  # rows whose estimate is all zero   [N]
    n_live = int(live.sum())
    if n_live == 0:
        return
    fraction = int(zero.sum()) / n_live
    if fraction > 0.5:
        state["warned"] = True
        warnings.warn(
            f"PerturbedTarget(lam={target.lam}) returned an all-zero gradient for {fraction:.0%} of the "
            "rows: the step λ∇zL is smaller than the gaps of θ + ε (a loss averaged over a large batch "
            "shrinks it). Use the default RelativeTarget(), which does not depend on the loss scale, "
            "or a larger lam (or sum the loss). This warning is shown once per layer.",
            RuntimeWarning,
            stacklevel=2,
        )
