"""Target distributions q(z; θ') for the I-MLE backward pass (paper, sec. 3.1 and 5).

The I-MLE gradient (eq. 7) compares the current distribution with a target one, sample by sample:

    ∇θ L ≈ Σ_i [MAP(θ + ε_i) − MAP(θ' + ε_i)] / λ_i        (same ε_i in both MAPs)

A target turns the upstream gradient ``∇z L`` into the target parameters θ' and the divisor λ. The
backward pass returns the **sum** over the S samples of the per-sample estimates, exactly as autograd
treats any layer with S outputs. All tensors are in θ-space (scores to maximise).

Targets:

* [`AutoTarget`][imle_solvers.AutoTarget] (the default of [`IMLE`][imle_solvers.IMLE]): eq. 8 with
  a step sized per batch from the spreads of θ + ε and of the loss gradient, a central difference in
  general and the best state under the loss as the far side where the loss is linear in z. Chosen by
  training every task the library ships (``imle-solvers bench targets``). Positively homogeneous in
  ``∇z L`` (``grad(α·L) = α·grad(L)`` for α > 0; not additive), invariant to offsets of θ where every
  state has the same size, and scaled by ``1/c`` when θ and the noise temperature are scaled by c.
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
import warnings
from collections.abc import Callable
from typing import Any

import torch

from ._checks import positive

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


@dataclasses.dataclass(frozen=True)
class AutoTarget(TargetDistribution):
    """The default target of [`IMLE`][imle_solvers.IMLE]: the PID target of eq. 8 with a step sized from
    the batch, a central difference in general and the best state under the loss as the far side where
    the loss is linear in z.

    With ``g = ∇z L``, ``s = std(θ + ε)`` and ``σ = std(ε)`` (each row and sample, over its finite
    entries), one *unit* of step is the ratio of the batch's spreads to its loss gradients,

    ```text
    r  = min(s, c·σ)                        (the spread of θ + ε, at most c spreads of the noise)
    u  = ‖(r_ns)‖₂ / ‖(‖g_ns‖_∞)‖₂          (over the rows n and samples s with g ≠ 0: one number a batch)
    ```

    so that ``θ ± u·g`` moves the largest entry of a typical row by about one spread, and a row whose
    loss gradient is larger further, as the paper's ``θ − λ∇zL`` does. Then, per row, with ``a = near``
    and ``b = far``:

    ```text
    in general:     ∇θ L ≈ Σ_s [MAP(θ + a·u·g_s + ε_s) − MAP(θ − a·u·g_s + ε_s)] / (2u)
    linear in z:    ∇θ L ≈ Σ_s [MAP(θ + u·g_s + ε_s)   − MAP(θ − b·u·g_s + ε_s)] / u
    ```

    The differences are those of eq. 7, divided by the unit, not by the step: the paper's Algorithm 1
    (and torch-imle) returns ``z − z'`` as it is, λ being only a perturbation intensity, and the unit puts
    it in the loss's units. A row is *linear in z* when its samples are not all one state and their
    upstream gradients are all equal: the loss's gradient did not change with z, as the regret
    ``⟨c, z⟩`` of predict-then-optimize (Fact 2). There the far side reaches the best state under the
    loss, the target of eq. 10, and the other side stays one unit away. Elsewhere (one sample, samples
    that are all one state, gradients that differ with z) both sides take ``a`` units: a central
    difference, as AI-MLE's symmetric perturbation. The cap ``c`` keeps the step from growing with
    weights more confident than the noise (the paper's fixed λ does not grow either): uncapped, a
    two-sided step that always changes the state keeps pushing them apart. Both MAPs of every sample go
    out in one solver call (2·S rows per row of θ).

    What holds, with the same noise (each is a test):

    * *loss scale*: ``grad(α·L) = α·grad(L)`` for every α > 0, under ``.mean()`` as under ``.sum()``,
      and which rows get a nonzero gradient does not depend on the reduction or on the batch size; a
      loss averaged over the S samples gives the summed gradient divided by S;
    * *offsets*: ``θ + c·1`` gives the same estimate wherever every state has the same size;
    * *temperature*: ``(θ, τ) → (cθ, cτ)`` scales the estimate by ``1/c``;
    * *data parallelism*: the unit is computed over the global batch (when a ``torch.distributed``
      process group is initialised: two small all-reduces per backward pass, asynchronous to the host),
      to the same bits as one process, whatever the sizes of the processes' shares.

    Unlike [`RelativeTarget`][imle_solvers.RelativeTarget] the unit couples the rows of a batch (a row's
    step depends on the other rows' gradients), as the paper's fixed λ measured against the loss and
    AI-MLE's λ per batch do. The defaults were chosen by training every task the library ships against
    the paper's fixed λ tuned per task and the other targets (``imle-solvers bench targets``).

    Rows with ``g = 0`` get a zero gradient. Where the spread of θ + ε is 0 or subnormal it is measured by
    ``max|θ + ε|``, and by 1 where that is 0 too; without noise (σ = 0) the cap does not apply.

    Parameters
    ----------
    near
        ``a`` > 0: the step of both sides in general, in units.
    far
        ``b`` > 0: the far step of the rows whose loss is linear in z, in units.
    cap
        ``c`` > 0: the spread that sizes the unit is at most ``c`` spreads of the noise.
    sync
        Compute the unit over every process of an initialised process group (each process must then run
        the layer's backward pass equally often, as DDP requires of a model); ``False``: over this
        process's rows only.
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
    AutoTarget(near=2.0, far=30.0, cap=3.0, sync=True)
    """

    near: float = 2.0
    far: float = 30.0
    cap: float = 3.0
    sync: bool = True
    process_group: Any = dataclasses.field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        positive("AutoTarget near", self.near)
        positive("AutoTarget far", self.far)
        positive("AutoTarget cap", self.cap)

    def _scales(
        self, perturbed: torch.Tensor, eps: torch.Tensor, grad_z: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(‖r‖₂, ‖‖g‖_∞‖₂)`` over the samples with ``g ≠ 0`` of the batch (of every process when
        synchronised): 0-dim tensors of ``grad_z``'s dtype, clamped to its finite range. The unit is their
        ratio; they are kept apart so that neither ``u·g`` nor ``1/u`` leaves the range of float32."""
        from ._collective import batch_norms, sync_group

        g_max = grad_z.abs().amax(dim=-1, keepdim=True)  # ‖g‖_∞ per row and sample   [N, S, 1]
        sigma, _ = _finite_std(eps)  # σ = std(ε)   [N, S, 1]
        capped = torch.minimum(_spread(perturbed), self.cap * sigma)  # r = min(s, c·σ)
        spread = torch.where(sigma > 0, capped, _spread(perturbed))  # no noise: s
        spread = torch.where(g_max > 0, spread, torch.zeros_like(spread))  # samples with g ≠ 0   [N, S, 1]
        norms = batch_norms([spread, g_max], sync_group(self.sync, self.process_group))  # float64   [2]
        norms = norms.clamp(max=torch.finfo(grad_z.dtype).max).to(grad_z.dtype)
        return norms[0], norms[1]

    def _step(
        self, perturbed: torch.Tensor, eps: torch.Tensor, grad_z: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(u·g, 1/u)``: ``[N, S, m]`` and a 0-dim tensor (0 where no sample has a gradient)."""
        reach, scale = self._scales(perturbed, eps, grad_z)  # ‖r‖, ‖g‖   [], []
        live = scale > 0
        unit_g = grad_z / torch.where(live, scale, torch.ones_like(scale))  # g/‖g‖
        inverse = (scale / torch.where(live, reach, torch.ones_like(reach))).clamp(
            max=torch.finfo(reach.dtype).max
        )
        return reach * unit_g, torch.where(live, inverse, torch.zeros_like(inverse))  # u·g, 1/u

    @staticmethod
    def linear_rows(z: torch.Tensor, grad_z: torch.Tensor) -> torch.Tensor:
        """``[N]`` booleans: the rows whose samples are not all the same state and whose upstream gradients
        are all equal (the loss's gradient did not change with z)."""
        if grad_z.dim() < 3 or grad_z.shape[1] < 2:
            return torch.zeros(grad_z.shape[0], dtype=torch.bool, device=grad_z.device)
        same_gradient = (grad_z == grad_z[:, :1]).flatten(1).all(dim=1)  # [N]
        other_states = (z != z[:, :1]).flatten(1).any(dim=1)  # [N]
        return same_gradient & other_states

    def params(self, theta: torch.Tensor, grad_z: torch.Tensor) -> torch.Tensor:
        """The minus side ``θ' = θ − a·u·g`` of the general case, with the unit from θ alone (no noise, no
        samples: the cap does not apply and no row can be told linear)."""
        theta = theta.expand_as(grad_z)
        step, _ = self._step(theta, torch.zeros_like(theta), grad_z)
        linear = torch.zeros(theta.shape[0], 1, 1, dtype=torch.bool, device=theta.device)  # no z: general
        return theta - torch.where(linear, self.far * step, self.near * step)

    def estimate(
        self,
        theta: torch.Tensor,
        eps: torch.Tensor,
        z: torch.Tensor,
        grad_z: torch.Tensor,
        solve: Solve,
    ) -> torch.Tensor:
        perturbed = theta + eps  # θ + ε   [N, S, m]
        step, inverse = self._step(perturbed, eps, grad_z)  # u·g   [N, S, m], 1/u   []
        linear = self.linear_rows(z, grad_z)[:, None, None]  # loss linear in z   [N, 1, 1]
        plus = torch.where(linear, step, self.near * step)  # 1 unit on linear rows, else a
        minus = torch.where(linear, self.far * step, self.near * step)  # b units on linear rows, else a
        both = torch.cat([perturbed + plus, perturbed - minus], dim=1)  # [N, 2S, m]
        z_plus, z_minus = solve(both).chunk(2, dim=1)  # MAP(θ + (1|a)·u·g + ε), MAP(θ − (b|a)·u·g + ε)
        inverse = torch.where(linear, inverse, inverse / 2)  # 1/u, or 1/(2u)   [N, 1, 1]
        return ((z_plus - z_minus) * inverse).sum(dim=1)  # Σ over the samples   [N, m]


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
