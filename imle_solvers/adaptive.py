"""Adaptive targets: λ adapted online to a target gradient sparsity (AI-MLE, Minervini et al., AAAI 2023).

Both are [`TargetDistribution`][imle_solvers.TargetDistribution]s with the PID step of paper eq. 8,
``θ' = θ − λ ∇z L``, whose λ follows the norms of θ and of ``∇z L``; after every backward pass a
factor of λ moves so that the number of nonzero gradient entries tracks a target:

* [`AdaptiveTarget`][imle_solvers.AdaptiveTarget]: the published algorithm, one λ per batch, its
  state in buffers (``state_dict``, ``.to(device)``);
* [`RowAdaptiveTarget`][imle_solvers.RowAdaptiveTarget]: a per-row variant with a multiplicative
  update, its state a plain attribute.

Under data parallelism (a ``torch.distributed`` process group is initialised, e.g. by ``torchrun``) both
combine the statistics of their updates over the processes, so that every process adapts as one process
would on the global batch.

Both are importable from ``imle_solvers``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from ._checks import in_range, non_negative, positive
from ._collective import Sync, batch_norms, finite_part, sync_group
from .target import Solve, TargetDistribution, map_difference, pid_estimate

__all__ = ["AdaptiveTarget", "RowAdaptiveTarget"]


def _norm(x: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """``‖x‖₂`` (over ``dim``, kept; over everything when ``None``) as ``max|x| · ‖x / max|x|‖₂``.

    Scaling by the largest entry before squaring keeps the squares in range: a plain norm of float32
    entries of 1e-30 underflows to 0 and one of 1e30 overflows to inf.
    """
    if x.numel() == 0:
        return x.abs().sum() if dim is None else x.abs().sum(dim=dim, keepdim=True)  # zeros
    peak = x.abs().amax() if dim is None else x.abs().amax(dim=dim, keepdim=True)  # max|x|
    safe = torch.where(peak > 0, peak, torch.ones_like(peak))
    if dim is None:
        return torch.linalg.vector_norm(x / safe) * safe
    return torch.linalg.vector_norm(x / safe, dim=dim, keepdim=True) * safe


class AdaptiveTarget(nn.Module, TargetDistribution):
    """Adaptive I-MLE (AI-MLE, Minervini, Franceschi & Niepert, AAAI 2023), as published.

    One λ for the whole batch, relative to the norms of θ and of the upstream gradient:

    ```text
    λ = β · ‖θ‖ / ‖∇z L‖          (Frobenius norms over the batch's N·S rows; 0 when ∇z L = 0)
    θ' = θ − λ ∇z L,   ∇θ L ≈ Σ_s [MAP(θ + ε_s) − MAP(θ'_s + ε_s)] / λ
    ```

    After every backward pass β moves additively towards a target *number of nonzero gradient
    entries per sample*: ``n̄ ← decay·n̄ + (1 − decay)·nnz/(N·S)`` (an exponential moving average),
    then ``u ← momentum·u ± step`` (+ while ``n̄ < nonzero_target``, − otherwise) and
    ``β ← max(β + u, 0)``. β, n̄ and u are buffers: they move with ``.to(device)``, are saved in the
    owning layer's ``state_dict`` and are updated on the device with no host synchronisation.

    The estimate is positively homogeneous in ``∇z L``: multiplying the loss by α > 0 leaves θ'
    unchanged and multiplies the gradient by α (it is not additive). β, n̄ and u stay float64 under
    module casts (``model.to(torch.bfloat16)``), so that β's small additive steps do not round away;
    the norms are scaled by their largest entry before squaring, so loss scales of 1e±30 in float32
    neither underflow nor overflow.

    The reference implementation divides by a λ computed from θ *without* the repetition over
    samples (√S smaller than its step's λ); here one λ serves both, as eq. 7 reads.

    **Data parallelism.** When a ``torch.distributed`` process group is initialised (``torchrun``,
    DistributedDataParallel), every backward pass combines the statistics over the processes: the norms
    ‖θ‖ and ‖∇zL‖ behind λ (one all-gather of two numbers) and the nonzero count behind the β update (one
    all-reduce of two numbers), both asynchronous to the host on CUDA. Every process then uses the λ and
    holds the β, n̄ and u that one process would on the global batch, whether the layer sits inside the
    DDP-wrapped model (whose broadcast of rank 0's buffers at every forward changes nothing, as they are
    equal) or after it. Every process must run the layer's backward pass equally often (as DDP requires
    of the model), or the others wait; `lam` and `params` stay local.

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
    sync
        Combine the statistics over the processes of an initialised process group (above); ``False``:
        each process adapts to its own batches (under DDP, all then take rank 0's buffers at every
        forward).
    process_group
        The group to combine over (default: the default group).

    References
    ----------
    Minervini, Franceschi & Niepert, "Adaptive Perturbation-Based Gradient Estimation for Discrete
    Latent Variable Models", AAAI 2023, <https://arxiv.org/abs/2209.04862>.

    Li et al., "PyTorch Distributed: Experiences on Accelerating Data Parallel Training", VLDB 2020,
    <https://arxiv.org/abs/2006.15704>.
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
        sync: bool = True,
        process_group: Any = None,
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
        self.sync = bool(sync)
        self.process_group = process_group
        self.register_buffer("beta", torch.tensor(float(beta), dtype=torch.float64))
        self.register_buffer("nonzeros", torch.tensor(float(initial_nonzeros), dtype=torch.float64))
        self.register_buffer("last_update", torch.tensor(0.0, dtype=torch.float64))

    def _reach(
        self, theta: torch.Tensor, grad_z: torch.Tensor, sync: Sync | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(β‖θ‖, ‖∇zL‖)`` over the batch, 0-dim tensors on θ's device; ``λ = β‖θ‖/‖∇zL‖``.

        ``‖θ‖`` is the norm of θ repeated over the S samples (``√S·‖θ‖``), as in the reference's target
        step, so that S identical samples under a loss averaged over S give the one-sample gradient.
        Both norms come from `batch_norms`: scaled by their largest entry (no under- or overflow at loss
        scales of 1e±30 in float32), computed in float64, and the same bits whether one process holds
        the batch or several hold shares of it (of any sizes); entries of θ that are not finite
        (forbidden ``-inf`` pairs) are left out.
        """
        beta = self.beta.to(device=theta.device, dtype=torch.float64)
        repeats = grad_z.shape[1] if grad_z.dim() == 3 and theta.dim() == 3 and theta.shape[1] == 1 else 1
        norms = batch_norms([finite_part(theta), grad_z], sync)  # over every process's rows: the global batch
        theta_norm = norms[0] * math.sqrt(repeats)  # ‖θ‖ over N·S rows (finite entries)   []
        return (beta * theta_norm).to(theta.dtype), norms[1].to(theta.dtype)  # β‖θ‖, ‖∇zL‖   [], []

    def lam(self, theta: torch.Tensor, grad_z: torch.Tensor) -> torch.Tensor:
        """λ = β‖θ‖/‖∇zL‖ over the whole batch (0 when ∇zL = 0), a 0-dim tensor on θ's device.

        ``‖θ‖`` is the norm of θ repeated over the S samples (``√S·‖θ‖``), as in the reference's target
        step, so that S identical samples under a loss averaged over S give the one-sample gradient.
        """
        reach, grad_norm = self._reach(theta, grad_z)
        ratio = reach / torch.where(grad_norm > 0, grad_norm, torch.ones_like(grad_norm))
        return torch.where(grad_norm > 0, ratio, torch.zeros_like(ratio))

    def params(self, theta: torch.Tensor, grad_z: torch.Tensor) -> torch.Tensor:
        step, _ = self._step(theta, grad_z)
        return theta - step  # θ' = θ − λ ∇zL

    def _step(
        self, theta: torch.Tensor, grad_z: torch.Tensor, sync: Sync | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(λ ∇zL, 1/λ)`` as ``β‖θ‖ · ∇zL/‖∇zL‖`` and ``‖∇zL‖/(β‖θ‖)`` (0 where λ = 0)."""
        reach, grad_norm = self._reach(theta, grad_z, sync)  # β‖θ‖, ‖∇zL‖   [], []
        live = (grad_norm > 0) & (reach > 0)
        unit = grad_z / torch.where(grad_norm > 0, grad_norm, torch.ones_like(grad_norm))  # ∇zL/‖∇zL‖
        inverse = (grad_norm / torch.where(live, reach, torch.ones_like(reach))).clamp(
            max=torch.finfo(grad_norm.dtype).max
        )  # 1/λ   []
        return reach * unit, torch.where(live, inverse, torch.zeros_like(inverse))

    def estimate(
        self,
        theta: torch.Tensor,
        eps: torch.Tensor,
        z: torch.Tensor,
        grad_z: torch.Tensor,
        solve: Solve,
    ) -> torch.Tensor:
        sync = sync_group(self.sync, self.process_group)  # None: this process alone
        step, inverse = self._step(theta, grad_z, sync)  # λ∇zL   [N, S, m], 1/λ   []
        diff = map_difference(theta, eps, z, step, solve, self.two_sided)  # [N, S, m]
        self._update(diff, sync)
        return (diff * inverse).sum(dim=1)  # Σ_s diff_s / λ   [N, m]

    @torch.no_grad()
    def _update(self, diff: torch.Tensor, sync: Sync | None = None) -> None:
        """One step of the published β update, on the buffers' device (moved to ``diff``'s first); with
        a process group, from the nonzero count of every process's rows."""
        if self.beta.device != diff.device:
            for name in self._STATE:
                setattr(self, name, getattr(self, name).to(diff.device))
        n, s = diff.shape[0], diff.shape[1]
        if sync is None and n * s == 0:
            return
        counts = torch.stack(
            [torch.count_nonzero(diff).to(torch.float64), torch.full_like(self.beta, float(n * s))]
        )  # nonzero entries, samples   [2]
        if sync is not None:
            import torch.distributed as dist

            dist.all_reduce(counts, group=sync.group)  # over every process's rows (no host sync)
        live = counts[1] > 0  # a global batch with rows (False only where every process had none)
        nnz = counts[0] / torch.where(live, counts[1], torch.ones_like(counts[1]))  # per sample   []
        nonzeros = self.nonzeros * self.decay + (1 - self.decay) * nnz  # n̄ ← decay·n̄ + (1−decay)·nnz
        direction = torch.where(nonzeros < self.nonzero_target, 1.0, -1.0).to(torch.float64)
        update = self.momentum * self.last_update + direction * self.step  # u ← μu ± step
        beta = (self.beta + update).clamp(min=0.0)  # β ← max(β + u, 0)
        self.nonzeros.copy_(torch.where(live, nonzeros, self.nonzeros))
        self.beta.copy_(torch.where(live, beta, self.beta))
        self.last_update.copy_(torch.where(live, update, self.last_update))

    _STATE = ("beta", "nonzeros", "last_update")

    def _apply(self, fn: Callable[[torch.Tensor], torch.Tensor], recurse: bool = True) -> AdaptiveTarget:
        """Module casts move the state between devices but keep it float64.

        ``model.to(torch.bfloat16)`` (or ``.half()``) would otherwise round β to 8 bits, and its
        additive updates of 1e-4 would round away.
        """
        kept = {name: self._buffers[name] for name in self._STATE}
        super()._apply(fn, recurse)
        for name, old in kept.items():
            new = self._buffers[name]
            if new is not None and old is not None and new.dtype != torch.float64:
                self._buffers[name] = old.to(device=new.device)  # the float64 value, on the new device
        return self

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
    sync
        When a ``torch.distributed`` process group is initialised, update α from the nonzero fraction
        of every process's gradient (one all-reduce of two numbers per backward pass), so that every
        process holds the α one process would; every process must then run the backward pass equally
        often. ``False``: each process adapts to its own batches.
    process_group
        The group to combine over (default: the default group).

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
    sync: bool = True
    process_group: Any = dataclasses.field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        in_range("RowAdaptiveTarget nonzero_target", self.nonzero_target, 0, 1, closed="(]")
        positive("RowAdaptiveTarget alpha", self.alpha)
        positive("RowAdaptiveTarget min_norm", self.min_norm)
        non_negative("RowAdaptiveTarget step", self.step)

    def lam(self, theta: torch.Tensor, grad_z: torch.Tensor) -> torch.Tensor:
        """Per-row λ = α·max(‖θ‖, min_norm)/‖∇zL‖ (0 where ∇zL = 0), shape ``[N, S, 1]``."""
        theta_norm = _norm(finite_part(theta), dim=-1).clamp_min(self.min_norm)  # ‖θ‖ (finite)  [N, 1, 1]
        grad_norm = _norm(grad_z, dim=-1)  # ‖∇zL‖  [N, S, 1]
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
        grad = pid_estimate(theta, eps, z, lam * grad_z, 1.0 / divisor, solve, self.two_sided)
        self._update(grad)
        return grad

    def _update(self, grad: torch.Tensor) -> None:
        """α ← α·exp(±step) so that the nonzero fraction of the gradient tracks the target."""
        if self.step == 0:
            return
        sync = sync_group(self.sync, self.process_group)
        if sync is None:
            if grad.numel() == 0:
                return
            nonzero = int(torch.count_nonzero(grad)) / grad.numel()  # the same division as several processes
        else:
            import torch.distributed as dist

            count = torch.count_nonzero(grad).to(torch.float64)
            counts = torch.stack([count, torch.full_like(count, float(grad.numel()))])  # nonzeros, entries
            dist.all_reduce(counts, group=sync.group)  # over every process's rows
            nonzero_count, entries = counts.tolist()  # a host copy, as the update decides on the host
            if entries == 0:
                return
            nonzero = nonzero_count / entries
        direction = 1.0 if nonzero < self.nonzero_target else -1.0
        self.alpha = float(min(max(self.alpha * math.exp(direction * self.step), 1e-6), 1e6))
