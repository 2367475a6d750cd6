"""Perturbation gradient losses (Huang & Gupta, NeurIPS 2024): finite differences of the optimal value.

With ``F(θ) = max_{z ∈ C} ⟨θ, z⟩`` (θ-space: ``θ = −c`` for a ``"min"`` oracle) and the true weights θ,
the decision's true objective ``⟨θ, MAP(θ̂)⟩ = ∂/∂t F(θ̂ + tθ)`` at ``t = 0`` (Danskin). Its backward and
central differences are Lipschitz surrogates of the regret with informative gradients:

```text
backward  ℓ(θ̂; θ) = [F(θ̂ − σθ) − F(θ̂)] / σ               ∇θ̂ ℓ = [MAP(θ̂ − σθ) − MAP(θ̂)] / σ
central   ℓ(θ̂; θ) = [F(θ̂ − σθ) − F(θ̂ + σθ)] / (2σ)      ∇θ̂ ℓ = [MAP(θ̂ − σθ) − MAP(θ̂ + σθ)] / (2σ)
```

(for a ``"min"`` oracle: ``[⟨ĉ, z(ĉ)⟩ − ⟨ĉ − σc, z(ĉ − σc)⟩] / σ``, PyEPO's form). Both solves go out in
one batched call.
"""

from __future__ import annotations

import torch
from torch import nn

from ._checks import positive
from .errors import ImleSolversError
from .losses import Reduction, _check_reduction, _flat_pair, _reduce
from .oracle import BatchSolver, MapOracle, check_oracle, map_solve, sense_sign

__all__ = ["PerturbationGradientLoss"]


class PerturbationGradientLoss(nn.Module):
    """The perturbation gradient (PG) loss of Huang & Gupta (NeurIPS 2024), backward or central difference.

    ``ℓ(θ̂; θ) = [F(θ̂ − σθ) − F(θ̂)] / σ`` (``central=False``, one extra solve) or
    ``[F(θ̂ − σθ) − F(θ̂ + σθ)] / (2σ)`` (``central=True``, two), ``F(x) = max_{z ∈ C} ⟨x, z⟩``: a
    difference quotient of the optimal value along the true weights, whose limit ``σ → 0`` is the true
    objective of the decision ``MAP(θ̂)``. The value is differentiable in ``θ̂`` through the solved states
    (``∇ = [MAP(θ̂ − σθ) − MAP(θ̂)] / σ``); it needs the true weights only, not the optimal states.

    Parameters
    ----------
    oracle
        The MAP oracle (weights in its sense).
    sigma
        σ > 0, the finite-difference width (PyEPO's default 0.1).
    central
        Central difference (PyEPO's ``two_sides=True``) instead of the backward one.
    pool
        Optional [`SolverPool`][imle_solvers.pool.SolverPool].
    reduction
        ``"mean"``, ``"sum"`` or ``"none"`` over instances.

    References
    ----------
    Huang & Gupta, "Decision-Focused Learning with Directional Gradients", NeurIPS 2024,
    <https://arxiv.org/abs/2402.03256>.
    """

    def __init__(
        self,
        oracle: MapOracle,
        *,
        sigma: float = 0.1,
        central: bool = False,
        pool: BatchSolver | None = None,
        reduction: Reduction = "mean",
    ) -> None:
        super().__init__()
        self.oracle = check_oracle(oracle)
        self.sigma = float(positive("sigma", sigma))
        if not isinstance(central, bool):
            raise TypeError(f"central must be True or False, got {central!r}")
        self.central = central
        self.pool = pool
        self.reduction: Reduction = _check_reduction(reduction)

    def forward(self, weights_pred: torch.Tensor, weights_true: torch.Tensor) -> torch.Tensor:
        """PG loss of ``(..., m)`` predicted weights against the true weights of the same shape."""
        pred, true = _flat_pair(self.oracle, weights_pred, weights_true)
        sign, s = sense_sign(self.oracle), self.sigma
        theta_hat, theta = sign * pred, sign * true.detach()  # θ̂ (differentiable), θ   [N, m]
        n = theta_hat.shape[0]
        ahead = theta_hat + s * theta if self.central else theta_hat  # θ̂ + σθ or θ̂   [N, m]
        behind = theta_hat - s * theta  # θ̂ − σθ   [N, m]
        try:  # MAP of both, one call   [2N, m]
            states = map_solve(self.oracle, torch.cat([ahead, behind]).detach(), self.pool)
        except ImleSolversError as err:
            if err.rows:
                err.with_rows(sorted({r % n for r in err.rows}))
            raise
        z_ahead, z_behind = states[:n], states[n:]
        f_ahead = (ahead * z_ahead).sum(-1)  # F(θ̂ + σθ) or F(θ̂)   [N]
        f_behind = (behind * z_behind).sum(-1)  # F(θ̂ − σθ)   [N]
        per_row = (f_behind - f_ahead) / (2 * s if self.central else s)  # [N]
        return _reduce(per_row.reshape(weights_pred.shape[:-1]), self.reduction)

    def extra_repr(self) -> str:
        return f"oracle={self.oracle!r}, sigma={self.sigma}, central={self.central}"
