"""Target distributions q(z; θ') for the I-MLE backward pass (paper, sec. 3.1 and 5).

The I-MLE gradient (eq. 7) compares the current distribution with a target one, sample by sample:

    ∇θ L ≈ Σ_i [MAP(θ + ε_i) − MAP(θ' + ε_i)] / λ_i        (same ε_i in both MAPs)

A target turns the upstream gradient ``∇z L`` into the target parameters θ' and the divisor λ. The
backward pass returns the **sum** over the S samples of the per-sample estimates, exactly as autograd
treats any layer with S outputs. All tensors are in θ-space (scores to maximise).

Targets:

* [`AutoTarget`][imle_solvers.AutoTarget] (the default of [`IMLE`][imle_solvers.IMLE]): eq. 8 with
  a step sized per batch from the spreads of θ + ε and of the loss gradient (at least a share of each
  row's own), the best state under the loss as the far side where the loss is linear in z and a central
  difference where it is curved, blended by a weight read from the samples (or declared, or a prior at
  one sample). Chosen by training every task the library ships at S = 1 and S = 10 on linear and
  curved losses (``imle-solvers bench targets``). Positively homogeneous in ``∇z L``
  (``grad(α·L) = α·grad(L)`` for α > 0; not additive), invariant to offsets of θ where every state has
  the same size, and scaled by ``1/c`` when θ and the noise temperature are scaled by c.
* [`RelativeTarget`][imle_solvers.RelativeTarget]: a local step (eq. 11) of a tenth of the spread of
  θ + ε per row, two-sided: of the I-MLE targets the closest to the exact gradient on average, but
  most single draws are zero. [`RelativeTarget.large_step`][imle_solvers.RelativeTarget.large_step] is
  the same construction with a one-sided step of ten spreads: close to eq. 10.
* [`AdaptiveTarget`][imle_solvers.AdaptiveTarget]: AI-MLE (Minervini et al., AAAI 2023), λ adapted
  online to a target gradient sparsity; positively homogeneous in ``∇z L``. It and its per-row
  variant [`RowAdaptiveTarget`][imle_solvers.RowAdaptiveTarget] live in ``imle_solvers.adaptive``.
* [`PerturbedTarget`][imle_solvers.PerturbedTarget]: the paper's fixed-λ PID target (eq. 8). The step
  ``λ ∇z L`` moves with the scale of the loss: a ``.mean()`` over a large batch can shrink it below
  the gaps of θ + ε, and the gradient becomes exactly zero (the target warns).
* [`OptimalTarget`][imle_solvers.OptimalTarget]: eq. 10, for losses whose ``∇z L`` is a target
  score vector (Facts 1 and 2).

A loss averaged over the S samples gives the mean of the S one-sample estimates for the targets
whose estimate of a sample depends on that sample's ``∇z L`` alone, positively homogeneously:
`RelativeTarget` (both regimes). It does not for `PerturbedTarget` and `OptimalTarget` (dividing
``∇z L`` by S moves their target), nor for the blackbox rule (`PerturbedTarget` with `NoNoise`) with
S > 1; `AutoTarget` and `AdaptiveTarget` size one step from all samples, so averaging divides their
summed-loss gradient by S exactly but a sample's term depends on the others.
"""

from __future__ import annotations

import abc
import dataclasses
import math
import warnings
from collections.abc import Callable
from typing import Any

import torch

from ._checks import non_negative, positive

__all__ = [
    "AutoTarget",
    "OptimalTarget",
    "PerturbedTarget",
    "RelativeTarget",
    "TargetDistribution",
]

Solve = Callable[[torch.Tensor], torch.Tensor]
"""``solve(θ_batch)``: batched ``MAP`` of ``[N, S', m]`` θ-space weights (one oracle / pool call)."""


def map_difference(
    theta: torch.Tensor, eps: torch.Tensor, z: torch.Tensor, step: torch.Tensor, solve: Solve, two_sided: bool
) -> torch.Tensor:
    """``MAP(θ + ε) − MAP(θ − step + ε)`` per sample, or the two-sided
    ``[MAP(θ + step + ε) − MAP(θ − step + ε)] / 2`` with both MAPs in one call.  → ``[N, S, m]``"""
    if two_sided:
        both = torch.cat([theta + step + eps, theta - step + eps], dim=1)  # [N, 2S, m], one call
        z_plus, z_minus = solve(both).chunk(2, dim=1)  # MAP(θ ± λ∇zL + ε)   [N, S, m] each
        return (z_plus - z_minus) / 2  # central difference
    return z - solve(theta - step + eps)  # z − z', z' = MAP(θ' + ε) with the same ε


def pid_estimate(
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
    diff = map_difference(theta, eps, z, step, solve, two_sided)  # [N, S, m]
    per_sample = diff * inverse_lam  # eq. 7 per sample   [N, S, m]
    return per_sample.sum(dim=1)  # Σ over the S samples (autograd's rule)         [N, m]


class TargetDistribution(abc.ABC):
    """A rule ``θ' = params(θ, ∇z L)`` defining the target q(z; θ') = p(z; θ') (paper, eq. 6-7).

    Subclasses implement [`params`][imle_solvers.TargetDistribution.params] and, when the estimate is
    not ``Σ_s [MAP(θ + ε_s) − MAP(θ'_s + ε_s)]``, override
    [`estimate`][imle_solvers.TargetDistribution.estimate].

    References
    ----------
    Niepert, Minervini & Franceschi, "Implicit MLE", NeurIPS 2021, eq. 6-7,
    <https://arxiv.org/abs/2106.01798>.
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


def _finite_std(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(std, max|x|)`` of each row over its finite entries (0, 0 where it has none).  ``[..., 1]`` each

    Computed as ``max|x| · std(x / max|x|)``, so that huge finite weights cannot overflow; entries that
    are ``±inf`` (forbidden pairs of an assignment, say) are left out.
    """
    finite = torch.isfinite(x)
    values = torch.where(finite, x, torch.zeros_like(x))  # non-finite entries left out
    count = finite.sum(dim=-1, keepdim=True).clamp(min=1)  # finite entries per row   [..., 1]
    peak = values.abs().amax(dim=-1, keepdim=True)  # max|x| over finite entries   [..., 1]
    safe_peak = torch.where(peak > 0, peak, torch.ones_like(peak))
    scaled = values / safe_peak
    mean = scaled.sum(dim=-1, keepdim=True) / count
    centred = torch.where(finite, scaled - mean, torch.zeros_like(scaled))
    return (centred.square().sum(dim=-1, keepdim=True) / count).sqrt() * safe_peak, peak


def _spread(perturbed: torch.Tensor) -> torch.Tensor:
    """Per-row spread ``s`` of ``θ + ε``: the standard deviation over its finite entries.  ``[..., 1]``

    The standard deviation does not change under ``θ + c·1`` and scales by ``c`` under ``c·θ``; it is
    computed without overflow and leaves ``±inf`` entries out (`_finite_std`): they are not part of the
    scale of the weights, and would make it infinite. Where the spread is not a positive normal number
    (a row whose finite entries are all equal, e.g. θ = 0 with no noise, or whose spread is subnormal),
    ``max|x|`` over the finite entries is used instead, and 1 where that is not normal either.
    """
    std, peak = _finite_std(perturbed)
    tiny = torch.finfo(perturbed.dtype).tiny
    fallback = torch.where(peak >= tiny, peak, torch.ones_like(peak))  # degenerate rows
    return torch.where(std >= tiny, std, fallback)  # s   [..., 1]


@dataclasses.dataclass(frozen=True)
class RelativeTarget(TargetDistribution):
    """PID target with a step relative to each row's spread of θ + ε: a local finite difference (eq. 11).

    Paper eq. 8 with a λ chosen per row and sample so that the target step has a fixed size *relative
    to the spread of the perturbed weights*, whatever the scale of the loss, and the small-λ finite
    difference of eq. 11, two-sided by default:

    ```text
    s      = std(θ + ε)                     (over the m entries; see below where it is 0)
    λ_eff  = λ · s / ‖∇z L‖_∞                (the largest entry of the step moves by λ · s)
    ∇θ L  ≈ Σ_s [MAP(θ + λ_eff ∇zL + ε_s) − MAP(θ − λ_eff ∇zL + ε_s)] / (2 λ_eff)    (two-sided)
    ∇θ L  ≈ Σ_s [MAP(θ + ε_s) − MAP(θ − λ_eff ∇zL + ε_s)] / λ_eff                      (one-sided)
    ```

    What holds, with the same noise (each is a test):

    * *loss scale*: ``grad(α·L) = α·grad(L)`` for every α > 0 (the estimate is positively homogeneous
      in ``∇z L``, not linear: it is not additive, and the one-sided difference is not odd either),
      and which rows get a nonzero gradient does not depend on the loss reduction or the batch size;
    * *offsets*: ``θ + c·1`` gives the same estimate wherever the oracle's MAP ignores the offset (every
      state has the same size, e.g. k-subsets, where ``p(z; θ + c·1) = p(z; θ)``);
    * *temperature*: ``(θ, τ) → (cθ, cτ)``, which leaves ``p(z; θ) ∝ exp(⟨z, θ⟩/τ)`` unchanged, scales
      the estimate by exactly ``1/c``, as it scales the exact gradient;
    * *locality*: with the default λ = 0.1 the step is a tenth of the spread of θ + ε, a finite
      difference in the sense of eq. 11. On enumerable problems its mean estimate is the closest to
      the exact gradient ``∇θ E_p[L]`` of the I-MLE targets, at every loss scale and offset
      (``imle-solvers bench exact``; only the score-function estimator of
      [`PerturbedOptimizer`][imle_solvers.PerturbedOptimizer], with about twice its noise, comes closer
      on average). The price is in single draws: most are exactly zero (75-85 % on the 3-subsets of 8),
      and a model trained on them trains worse than with the default
      [`AutoTarget`][imle_solvers.AutoTarget] on every task measured (``imle-solvers bench targets``):
      use it where many draws are averaged.

    [`large_step`][imle_solvers.RelativeTarget.large_step] (λ = 10, one-sided) is the other regime:
    the target state is then mostly ``MAP(−∇z L)``, the best state under the loss (as with eq. 10),
    and the estimate close to the "μ-μ" difference ``MAP(θ + ε) − MAP(−∇z L + ε)``, scaled per row.
    It is not a derivative, but it trains better where ``∇z L`` is itself a score vector, as with the
    regret loss of predict-then-optimize.

    With [`NoNoise`][imle_solvers.NoNoise] the distribution is a point mass and a local step changes
    the state only where two weights nearly tie: most rows get a zero gradient. Without noise, use
    ``large_step()`` (the blackbox regime) or [`Blackbox`][imle_solvers.Blackbox].

    Rows (and samples) with ``∇z L = 0`` get a zero gradient. Where ``std(θ + ε)`` is 0 or subnormal
    (all entries equal, e.g. θ = 0 with no noise) the step is sized by ``max|θ + ε|`` instead, and by 1
    where that is 0 or subnormal too; ``1/λ_eff`` is clamped to the largest finite number.

    Parameters
    ----------
    lam
        λ > 0: the largest target move in units of the spread ``std(θ + ε)``.
    two_sided
        Use the central difference (both MAPs in one solver call: the backward pass solves 2·S
        rows per row of θ instead of S). ``False``: the one-sided difference of eq. 7, one MAP.

    References
    ----------
    Niepert, Minervini & Franceschi, "Implicit MLE", NeurIPS 2021, eq. 8 and eq. 11,
    <https://arxiv.org/abs/2106.01798>.

    Minervini, Franceschi & Niepert, "Adaptive Perturbation-Based Gradient Estimation for Discrete
    Latent Variable Models", AAAI 2023 (the two-sided difference), <https://arxiv.org/abs/2209.04862>.

    Examples
    --------
    >>> from imle_solvers import IMLE, RelativeTarget, TopK
    >>> RelativeTarget()
    RelativeTarget(lam=0.1, two_sided=True)
    >>> RelativeTarget.large_step()
    RelativeTarget(lam=10.0, two_sided=False)
    >>> layer = IMLE(TopK(k=2, n_vars=5), target=RelativeTarget.large_step())
    """

    lam: float = 0.1
    two_sided: bool = True

    def __post_init__(self) -> None:
        positive("RelativeTarget lam", self.lam)

    @classmethod
    def large_step(cls, lam: float = 10.0) -> RelativeTarget:
        """The large-step regime: ``RelativeTarget(lam, two_sided=False)``, λ = 10 by default.

        The target moves the largest entry by ten spreads of θ + ε, so ``MAP(θ' + ε)`` is mostly
        ``MAP(−∇z L)``, the best state under the loss (as with eq. 10), and the estimate
        ``[MAP(θ + ε) − MAP(θ' + ε)] / λ_eff`` compares the current state with it. Scale-equivariant
        and offset-invariant like the default, but not local: use it where ``∇z L`` is a score vector
        (regret losses); ``imle-solvers train --method imle`` does. A two-sided large step would
        compare the best state with the worst one, hence one-sided.
        """
        return cls(lam=lam, two_sided=False)

    def _step(self, perturbed: torch.Tensor, grad_z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(step, 1/λ_eff)``: ``step = λ_eff ∇zL`` ``[N, S, m]`` and ``1/λ_eff`` ``[N, S, 1]``."""
        finite_max = torch.finfo(perturbed.dtype).max
        scale = _spread(perturbed)  # s = std(θ + ε)   [N, S, 1]
        g_max = grad_z.abs().amax(dim=-1, keepdim=True)  # ‖∇zL‖_∞   [N, S, 1]
        active = g_max > 0
        unit = grad_z / torch.where(active, g_max, torch.ones_like(g_max))  # ∇zL/‖∇zL‖_∞ ∈ [−1, 1]
        reach = (self.lam * scale).clamp(max=finite_max)  # λ·s, finite   [N, S, 1]
        step = reach * unit  # λ_eff ∇zL = λ·s·∇zL/‖∇zL‖_∞   [N, S, m]
        inverse = ((g_max / scale) / self.lam).clamp(max=finite_max)  # 1/λ_eff = ‖∇zL‖_∞/(λ·s), finite
        return step, torch.where(active, inverse, torch.zeros_like(inverse))

    def params(self, theta: torch.Tensor, grad_z: torch.Tensor) -> torch.Tensor:
        """θ' = θ − λ_eff ∇zL for noise-free θ (s = std(θ)); the layer's backward uses θ + ε for s."""
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
        return pid_estimate(theta, eps, z, step, inverse, solve, self.two_sided)


LINEAR_BAND: tuple[float, float] = (0.01, 0.1)
"""``(ν₀, ν₁)``: a row whose upstream gradients vary across its samples by a relative amount
``ν ≤ ν₀`` is linear in z for [`AutoTarget`][imle_solvers.AutoTarget], one with ``ν ≥ ν₁`` is not, and
the weight of the linear rule falls with ``log ν`` in between."""


def _norms(x: torch.Tensor, keep: int = 1) -> torch.Tensor:
    """Euclidean norms over all but the first ``keep`` dimensions, in float64, each scaled by its largest
    entry so that no square under- or overflows.  ``x.shape[:keep]``"""
    flat = x.to(torch.float64).flatten(keep)  # [..., e]
    if flat.shape[-1] == 0:
        return flat.new_zeros(flat.shape[:-1])
    peak = flat.abs().amax(dim=-1, keepdim=True)
    safe = torch.where(peak > 0, peak, torch.ones_like(peak))
    return ((flat / safe).square().sum(dim=-1, keepdim=True).sqrt() * peak).squeeze(-1)


@dataclasses.dataclass(frozen=True)
class AutoTarget(TargetDistribution):
    """The default target of [`IMLE`][imle_solvers.IMLE]: the PID target of eq. 8 with a step sized from
    the batch, the best state under the loss as the far side where the loss is linear in z, and a
    central difference where it is curved.

    With ``g = ∇z L``, ``s = std(θ + ε)`` and ``σ = std(ε)`` (each row and sample, over its finite
    entries), one *unit* of step is the ratio of the batch's spreads to its loss gradients, at least a
    share ``f`` of the row's own:

    ```text
    r    = min(s, c·σ)                        (the spread of θ + ε, at most c spreads of the noise)
    u    = ‖(r_ns)‖₂ / ‖(‖g_ns‖_∞)‖₂          (over the rows n and samples s with g ≠ 0)
    u_n  = max(u, f · ‖(r_ns)_s‖₂ / ‖(‖g_ns‖_∞)_s‖₂)     (f = floor: the row n alone)
    ```

    so that ``θ ± u·g`` moves the largest entry of a typical row by about one spread, a row whose loss
    gradient is larger further, as the paper's ``θ − λ∇zL`` does, and a row whose loss is much smaller
    than its neighbours' still by ``f`` of its own spread. Then, per row, with ``a = near`` and
    ``b = far``, the two rules

    ```text
    linear in z:  ∇θ L ≈ Σ_s [MAP(θ + u_n·g_s + ε_s)   − MAP(θ − b·u_n·g_s + ε_s)] / u_n
    curved:       ∇θ L ≈ Σ_s [MAP(θ + a·u_n·g_s + ε_s) − MAP(θ − a·u_n·g_s + ε_s)] / (2u_n)
    ```

    are blended by a weight ``w ∈ [0, 1]``: the plus side moves ``w + (1 − w)·a`` units, the minus side
    ``w·b + (1 − w)·a`` and the difference is divided by ``(w + 2(1 − w))·u_n``. On a loss linear in z (the
    regret ``⟨c, z⟩`` of predict-then-optimize, Fact 2) the far side reaches the best state under the loss,
    the target of eq. 10, and the estimate compares the current state with it; on a curved loss that
    comparison follows the linearisation too far, and the central difference (AI-MLE's symmetric
    perturbation) is the better step. The weight is (`linear_weight`):

    * **declared**: ``linear=True`` (1) or ``linear=False`` (0);
    * **seen** in the row's S ≥ 2 samples, where they are not all one state: 1 where the upstream
      gradients of the samples point the same way (a linear loss, or any increasing function of one),
      falling continuously to 0 as their directions spread (`LINEAR_BAND`), so that no small change of
      the loss flips the rule;
    * ``prior`` where the samples cannot tell: with **one sample** (the layer's default) nothing shows
      whether the loss is linear, and ``prior`` (0.4) weighs the two rules by what trains best on both
      kinds of task (``imle-solvers bench targets``). Declare a linear loss (``linear=True``) or draw
      ``samples >= 2`` to get the linear rule at full weight.

    The differences are those of eq. 7, divided by the unit, not by the step: the paper's Algorithm 1
    (and torch-imle) returns ``z − z'`` as it is, λ being only a perturbation intensity, and the unit puts
    it in the loss's units. The cap ``c`` keeps the step from growing with weights more confident than
    the noise (the paper's fixed λ does not grow either): uncapped, a two-sided step that always changes
    the state keeps pushing them apart. Both MAPs of every sample go out in one solver call (2·S rows per
    row of θ).

    What holds, with the same noise (each is a test):

    * *loss scale*: ``grad(α·L) = α·grad(L)`` for every α > 0, under ``.mean()`` as under ``.sum()``,
      and which rows get a nonzero gradient does not depend on the reduction or on the batch size; a
      loss averaged over the S samples gives the summed gradient divided by S;
    * *offsets*: ``θ + c·1`` gives the same estimate wherever every state has the same size;
    * *temperature*: ``(θ, τ) → (cθ, cτ)`` scales the estimate by ``1/c``;
    * *data parallelism*: the batch's unit is computed over the global batch (when a
      ``torch.distributed`` process group is initialised: two small all-reduces per backward pass,
      asynchronous to the host), to the same bits as one process, whatever the sizes of the processes'
      shares; the row's own unit and its weight need no other row.

    The batch's unit couples the rows (a row's step depends on the other rows' gradients), as the paper's
    fixed λ measured against the loss and AI-MLE's λ per batch do; the floor bounds that coupling from
    below: a row whose loss is 100 times smaller than its neighbours' keeps a step of ``f`` of its own
    spread (``imle-solvers bench coupling``). The defaults were chosen by training every task the library
    ships, at one and at ten samples, on linear and curved losses, against the paper's fixed λ tuned per
    task and the other targets (``imle-solvers bench targets``).

    When to pick something else: at one sample, a regret (any loss linear in z) trains best declared,
    ``AutoTarget(linear=True)`` (``imle-solvers train --method imle`` does), and a latent-variable model
    whose loss is curved with ``AutoTarget(linear=False)`` (L2X: 5.6 % better precision than the prior's
    blend); a loss that weights its rows by their own scale (a squared *relative* regret) puts most of
    its signal on a few rows, which the unit treats like the others: tune the paper's fixed λ there
    (`PerturbedTarget`); and where many draws are averaged, `RelativeTarget` has the closer mean.

    Rows with ``g = 0`` get a zero gradient. Where the spread of θ + ε is 0 or subnormal it is measured by
    ``max|θ + ε|``, and by 1 where that is 0 too; without noise (σ = 0) the cap does not apply.

    Parameters
    ----------
    near
        ``a`` > 0: the step of both sides of the central difference, in units.
    far
        ``b`` > 0: the far step of the linear rule, in units.
    cap
        ``c`` > 0: the spread that sizes the unit is at most ``c`` spreads of the noise.
    floor
        ``f`` ≥ 0: every row's unit is at least this share of its own (0: the batch's unit alone).
    linear
        ``True``: the loss is linear in z (a regret), the linear rule at any sample count; ``False``:
        the central difference everywhere; ``None`` (default): the weight is read from the samples.
    prior
        The weight of the linear rule where the samples cannot tell (one sample, or samples that are all
        one state), in [0, 1].
    sync
        Compute the batch's unit over every process of an initialised process group (each process must
        then run the layer's backward pass equally often, as DDP requires of a model); ``False``: over
        this process's rows only.
    process_group
        The group to combine over (default: the default group).

    References
    ----------
    Niepert, Minervini & Franceschi, "Implicit MLE", NeurIPS 2021, eq. 7, 8, 10 and 11, Fact 2,
    <https://arxiv.org/abs/2106.01798>.

    Minervini, Franceschi & Niepert, "Adaptive Perturbation-Based Gradient Estimation for Discrete
    Latent Variable Models", AAAI 2023 (a λ set per batch; the symmetric perturbation),
    <https://arxiv.org/abs/2209.04862>.

    Examples
    --------
    >>> from imle_solvers import IMLE, AutoTarget, TopK
    >>> IMLE(TopK(k=2, n_vars=5)).target
    AutoTarget(near=2.0, far=30.0, cap=3.0, floor=0.5, linear=None, prior=0.4, sync=True)
    >>> regret_layer = IMLE(TopK(k=2, n_vars=5), target=AutoTarget(linear=True))  # a declared regret
    """

    near: float = 2.0
    far: float = 30.0
    cap: float = 3.0
    floor: float = 0.5
    linear: bool | None = None
    prior: float = 0.4
    sync: bool = True
    process_group: Any = dataclasses.field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        positive("AutoTarget near", self.near)
        positive("AutoTarget far", self.far)
        positive("AutoTarget cap", self.cap)
        non_negative("AutoTarget floor", self.floor)
        if not (self.linear is None or isinstance(self.linear, bool)):
            raise TypeError(f"AutoTarget linear must be None, True or False, got {self.linear!r}")
        if not 0.0 <= float(self.prior) <= 1.0:
            raise ValueError(f"AutoTarget prior must be in [0, 1], got {self.prior!r}")

    def _spreads(self, perturbed: torch.Tensor, eps: torch.Tensor, g_max: torch.Tensor) -> torch.Tensor:
        """``r = min(s, c·σ)`` of every sample with ``g ≠ 0`` (0 elsewhere; ``s`` where there is no noise).
        ``[N, S, 1]``"""
        sigma, _ = _finite_std(eps)  # σ = std(ε)   [N, S, 1]
        capped = torch.minimum(_spread(perturbed), self.cap * sigma)  # r = min(s, c·σ)
        spread = torch.where(sigma > 0, capped, _spread(perturbed))  # no noise: s
        return torch.where(g_max > 0, spread, torch.zeros_like(spread))  # samples with g ≠ 0

    def _step(
        self, perturbed: torch.Tensor, eps: torch.Tensor, grad_z: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(u·g, 1/u)``: ``[N, S, m]`` and ``[N, 1, 1]`` (0 where a row has no gradient).

        The unit of row n is ``u_n = max(u, floor · u_row)``: the batch's unit, or ``floor`` times the
        row's own unit ``‖r_n‖ / ‖‖g_n‖_∞‖`` where that is larger. The ratios are formed as ``reach ·
        (g / scale)`` so that neither ``u·g`` nor ``1/u`` leaves the dtype's range.
        """
        from ._collective import batch_norms, sync_group

        g_max = grad_z.abs().amax(dim=-1, keepdim=True)  # ‖g‖_∞ per row and sample   [N, S, 1]
        spread = self._spreads(perturbed, eps, g_max)  # r   [N, S, 1]
        batch = batch_norms([spread, g_max], sync_group(self.sync, self.process_group))  # ‖r‖, ‖‖g‖‖  [2]
        rows = torch.stack([_norms(spread), _norms(g_max)], dim=1)  # ‖r_n‖, ‖‖g_n‖_∞‖ of each row   [N, 2]
        own = rows[:, 0] * self.floor * batch[1] > batch[0] * rows[:, 1]  # floor·u_row > u   [N]
        reach = torch.where(own, self.floor * rows[:, 0], batch[0])  # numerator of u_n   [N]
        scale = torch.where(own, rows[:, 1], batch[1])  # denominator of u_n   [N]
        finite = torch.finfo(grad_z.dtype).max
        reach = reach.clamp(max=finite).to(grad_z.dtype)[:, None, None]  # [N, 1, 1]
        scale = scale.clamp(max=finite).to(grad_z.dtype)[:, None, None]
        live = scale > 0
        unit_g = grad_z / torch.where(live, scale, torch.ones_like(scale))  # g / scale, |·| ≤ 1
        inverse = (scale / torch.where(live, reach, torch.ones_like(reach))).clamp(max=finite)  # 1/u_n
        return reach * unit_g, torch.where(live, inverse, torch.zeros_like(inverse))  # u_n·g, 1/u_n

    def linear_weight(self, z: torch.Tensor, grad_z: torch.Tensor) -> torch.Tensor:
        """``[N]`` weight in [0, 1] of the linear rule for each row.

        Declared (``linear=True``/``False``): 1 or 0. Otherwise it is read from the directions ``ĝ_s =
        g_s / ‖g_s‖`` of the row's upstream gradients: the samples agree on the best state under the
        loss when their gradients point the same way (a loss linear in z, or any increasing function of
        one such as a squared regret). With ``ν = RMS_s ‖ĝ_s − mean_s ĝ_s‖`` over the samples with
        ``g ≠ 0``, the weight is 1 up to ν₀, 0 from ν₁ on and falls with ``log ν`` in between
        (`LINEAR_BAND`): continuous in the loss. Where the samples cannot tell (one sample, samples that
        are all one state, fewer than two with ``g ≠ 0``) it is ``prior``.
        """
        n = grad_z.shape[0]
        if self.linear is not None:
            return torch.full((n,), float(self.linear), dtype=grad_z.dtype, device=grad_z.device)
        prior = torch.full((n,), float(self.prior), dtype=grad_z.dtype, device=grad_z.device)
        if grad_z.dim() < 3 or grad_z.shape[1] < 2:
            return prior
        size = _norms(grad_z, keep=2)  # ‖g_s‖ of each row and sample   [N, S]
        live = size > 0  # samples with g ≠ 0   [N, S]
        safe = torch.where(live, size, torch.ones_like(size))[..., None].to(grad_z.dtype)
        direction = grad_z / safe  # ĝ_s (0 where g = 0)   [N, S, m]
        count = live.sum(dim=1)  # [N]
        mean = direction.sum(dim=1, keepdim=True) / count.clamp(min=1)[:, None, None]  # mean ĝ   [N, 1, m]
        apart = torch.where(live[..., None], direction - mean, torch.zeros_like(direction))
        nu = (apart.square().sum(dim=(1, 2)) / count.clamp(min=1)).sqrt()  # ν   [N]
        low, high = LINEAR_BAND
        ramp = (math.log(high) - nu.clamp(min=low, max=high).log()) / math.log(high / low)
        weight = torch.where(nu <= low, 1.0, torch.where(nu >= high, 0.0, ramp))  # [0, 1]   [N]
        seen = (z != z[:, :1]).flatten(1).any(dim=1) & (count >= 2)  # the samples can tell   [N]
        return torch.where(seen, weight.to(grad_z.dtype), prior)

    def _sides(self, weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(plus, minus, divisor)`` in units, ``[N, 1, 1]`` each: ``(1, b, 1)`` for the linear rule and
        ``(a, a, 2)`` for the central difference, blended by the weight."""
        w = weight[:, None, None]
        return w + (1 - w) * self.near, w * self.far + (1 - w) * self.near, w + (1 - w) * 2.0

    def params(self, theta: torch.Tensor, grad_z: torch.Tensor) -> torch.Tensor:
        """The minus side ``θ' = θ − minus·u·g`` with the unit from θ alone (no noise, no samples: the cap
        does not apply, and the weight of the linear rule is the declared one or ``prior``)."""
        theta = theta.expand_as(grad_z)
        step, _ = self._step(theta, torch.zeros_like(theta), grad_z)
        one = grad_z[:, :1]  # one sample (or entry): nothing tells the rules apart, the declared or prior
        _, minus, _ = self._sides(self.linear_weight(one, one))
        return theta - minus * step

    def estimate(
        self,
        theta: torch.Tensor,
        eps: torch.Tensor,
        z: torch.Tensor,
        grad_z: torch.Tensor,
        solve: Solve,
    ) -> torch.Tensor:
        perturbed = theta + eps  # θ + ε   [N, S, m]
        step, inverse = self._step(perturbed, eps, grad_z)  # u_n·g   [N, S, m], 1/u_n   [N, 1, 1]
        plus, minus, divisor = self._sides(self.linear_weight(z, grad_z))  # in units   [N, 1, 1] each
        both = torch.cat([perturbed + plus * step, perturbed - minus * step], dim=1)  # [N, 2S, m]
        z_plus, z_minus = solve(both).chunk(2, dim=1)  # MAP(θ + plus·u·g + ε), MAP(θ − minus·u·g + ε)
        return ((z_plus - z_minus) * (inverse / divisor)).sum(dim=1)  # Σ over the samples   [N, m]


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
    per layer) when more than half of the rows with a nonzero ``∇z L`` get an all-zero gradient from a
    step whose largest entry is below a tenth of the spread of θ + ε; a row whose larger step leaves its
    state unchanged has converged and does not count.
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
        return pid_estimate(theta, eps, z, self.lam * grad_z, 1.0 / self.lam, solve, self.two_sided)


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


def default_target() -> TargetDistribution:
    """A fresh instance of the target [`IMLE`][imle_solvers.IMLE] uses when none is given: `AutoTarget`."""
    return AutoTarget()


SMALL_STEP = 0.1
"""A fixed-λ step is small when its largest entry is below this fraction of the spread of θ + ε: the
step of the default [`RelativeTarget`][imle_solvers.RelativeTarget], ``0.1 · std(θ + ε)``."""


def warn_if_mostly_zero(
    target: TargetDistribution,
    theta: torch.Tensor,
    eps: torch.Tensor,
    grad_z: torch.Tensor,
    grad_theta: torch.Tensor,
    state: dict[str, bool],
) -> None:
    """Warn once per layer when a fixed-λ step was too small to move the state of most rows.

    Only [`PerturbedTarget`][imle_solvers.PerturbedTarget] can lose every row to the loss scale. A row is
    lost when its gradient is all zero *and* the step ``λ ∇z L`` of each of its samples is small: its
    largest entry is below `SMALL_STEP` times the spread ``std(θ + ε)`` of that sample. A row whose step
    is not small and still leaves the state where it is has converged (the step confirms the state), and
    rows whose upstream gradient is zero are not counted at all. The warning is given when more than half
    of the rows with a nonzero ``∇z L`` are lost. Needs one host read, so the layer calls it only where
    the backward already synchronises (CPU tensors or host oracles).

    Parameters
    ----------
    target
        The layer's gradient rule; anything but a `PerturbedTarget` returns at once.
    theta
        ``[N, 1, m]`` θ of the backward pass.
    eps
        ``[N, S, m]`` the noise of its target MAP.
    grad_z
        ``[N, S, m]`` upstream gradient ``∇z L``.
    grad_theta
        ``[N, m]`` the gradient the target returned.
    state
        The layer's warning state (``"warned"`` once the warning was given).
    """
    if state.get("warned") or not isinstance(target, PerturbedTarget):
        return
    step = target.lam * grad_z.abs().amax(dim=-1, keepdim=True)  # ‖λ ∇zL‖_∞ per sample   [N, S, 1]
    moves = step > 0  # samples with ∇zL ≠ 0   [N, S, 1]
    small = (step < SMALL_STEP * _spread(theta + eps)) | ~moves  # a step below 0.1·s   [N, S, 1]
    live = moves.flatten(1).any(dim=1)  # rows with ∇zL ≠ 0   [N]
    lost = grad_theta.eq(0).all(dim=-1) & live & small.flatten(1).all(dim=1)  # zero from a small step [N]
    n_live = int(live.sum())
    if n_live == 0:
        return
    fraction = int(lost.sum()) / n_live
    if fraction > 0.5:
        state["warned"] = True
        warnings.warn(
            f"PerturbedTarget(lam={target.lam}) returned an all-zero gradient for {fraction:.0%} of the "
            "rows, whose step λ∇zL is below a tenth of the spread of θ + ε (a loss averaged over a large "
            "batch shrinks it). Use the default RelativeTarget(), which does not depend on the loss "
            "scale, or a larger lam (or sum the loss). This warning is shown once per layer.",
            RuntimeWarning,
            stacklevel=2,
        )
