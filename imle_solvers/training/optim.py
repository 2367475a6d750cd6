"""Adam (Kingma & Ba, 2015) without ``torch.optim``.

``torch.optim`` imports ``torch._dynamo`` on first use, which costs several seconds of start-up on a
CPU (more than a whole ``imle-solvers demo`` run of the linear model). This is the textbook
algorithm with the defaults of ``torch.optim.Adam`` (no weight decay, no amsgrad).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

__all__ = ["Adam"]


class Adam:
    """Adam: ``m ← β₁m + (1−β₁)g``, ``v ← β₂v + (1−β₂)g²``, ``p ← p − lr · m̂ / (√v̂ + eps)``.

    ``m̂ = m / (1 − β₁ᵗ)`` and ``v̂ = v / (1 − β₂ᵗ)`` are the bias-corrected moments (Kingma & Ba, 2015,
    Algorithm 1, in the form used by ``torch.optim.Adam``).

    Parameters
    ----------
    params
        Tensors to optimise (``requires_grad=True``).
    lr
        Learning rate (may be changed between steps through :attr:`lr`).
    betas
        ``(β₁, β₂)``.
    eps
        Denominator guard.
    """

    def __init__(
        self,
        params: Iterable[torch.Tensor],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
    ) -> None:
        self.params = [p for p in params if p.requires_grad]
        self.lr, self.betas, self.eps = float(lr), betas, float(eps)
        self.t = 0
        self.m = [torch.zeros_like(p) for p in self.params]
        self.v = [torch.zeros_like(p) for p in self.params]

    def zero_grad(self) -> None:
        """Drop the gradients (``set_to_none``)."""
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        """One Adam update of every parameter that has a gradient."""
        self.t += 1
        b1, b2 = self.betas
        c1, c2 = 1 - b1**self.t, 1 - b2**self.t
        for p, m, v in zip(self.params, self.m, self.v):
            if p.grad is None:
                continue
            g = p.grad
            m.mul_(b1).add_(g, alpha=1 - b1)  # m ← β₁m + (1−β₁)g
            v.mul_(b2).addcmul_(g, g, value=1 - b2)  # v ← β₂v + (1−β₂)g²
            denom = (v / c2).sqrt_().add_(self.eps)  # √v̂ + eps
            p.addcdiv_(m, denom, value=-self.lr / c1)  # p ← p − lr · m̂ / (√v̂ + eps)
