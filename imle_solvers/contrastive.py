"""Contrastive losses on a solution pool: NCE and contrastive MAP (Mulamba et al., IJCAI 2021).

With ``θ̂`` the predictions in θ-space (``−ĉ`` for a ``"min"`` oracle), ``y = z*(c)`` the optimal state and
``W = Γ`` the pool's states ([`SolutionPoolLoss`][imle_solvers.solution_pool.SolutionPoolLoss]):

```text
NCE   ℓ(θ̂, y) = (1/|Γ|) Σ_{w ∈ Γ} ⟨θ̂, w − y⟩         (min: ⟨ĉ, y⟩ − ⟨ĉ, w⟩ averaged)
CMAP  ℓ(θ̂, y) = max_{w ∈ Γ} ⟨θ̂, w − y⟩               (≥ 0 when y ∈ Γ)
```

Both push ``y`` above every state of the pool under the predicted weights; their gradients are
``mean_w w − y`` and ``w_best − y`` in θ-space, with no solver call in the backward pass.
"""

from __future__ import annotations

import torch

from .oracle import sense_sign
from .solution_pool import SolutionPoolLoss

__all__ = ["CMAPLoss", "NCELoss"]


class _ContrastiveLoss(SolutionPoolLoss):
    """The gaps ``⟨θ̂, w − y⟩`` of every pool state against the optimal state, shared by NCE and CMAP."""

    def _gaps(self, weights_pred: torch.Tensor, optimal: torch.Tensor) -> torch.Tensor:
        pool = self._pool_states(weights_pred)  # W   [K, m]
        y = self._weights("optimal", optimal, weights_pred)  # y   [N, m]
        theta = sense_sign(self.oracle) * weights_pred.reshape(-1, self.oracle.n_vars)  # θ̂   [N, m]
        return theta @ pool.T - (theta * y).sum(-1, keepdim=True)  # ⟨θ̂, w − y⟩   [N, K]


class NCELoss(_ContrastiveLoss):
    """Noise-contrastive estimation over a solution pool (Mulamba et al., IJCAI 2021, eq. 6 as PyEPO has it).

    ``ℓ(θ̂, y) = mean_{w ∈ Γ} ⟨θ̂, w − y⟩``: for a ``"min"`` oracle, ``mean_w ⟨ĉ, y⟩ − ⟨ĉ, w⟩``. Takes
    PyEPO's call ``nce(pred_cost, true_sol)``. Options as for
    [`SolutionPoolLoss`][imle_solvers.solution_pool.SolutionPoolLoss].

    References
    ----------
    Mulamba, Mandi, Diligenti, Lombardi, Bucarey & Guns, "Contrastive Losses and Solution Caching for
    Predict-and-Optimize", IJCAI 2021, <https://arxiv.org/abs/2011.05354>.
    """

    def forward(self, weights_pred: torch.Tensor, optimal: torch.Tensor) -> torch.Tensor:
        """NCE of ``(..., m)`` predicted weights against optimal states ``y`` of the same shape."""
        return self._finish(self._gaps(weights_pred, optimal).mean(1), weights_pred)  # mean over Γ


class CMAPLoss(_ContrastiveLoss):
    """Contrastive MAP over a solution pool (Mulamba et al., IJCAI 2021, eq. 8): the hardest negative only.

    ``ℓ(θ̂, y) = max_{w ∈ Γ} ⟨θ̂, w − y⟩``: for a ``"min"`` oracle, ``⟨ĉ, y⟩ − min_{w ∈ Γ} ⟨ĉ, w⟩``. Takes
    PyEPO's call ``cmap(pred_cost, true_sol)``. Options as for
    [`SolutionPoolLoss`][imle_solvers.solution_pool.SolutionPoolLoss].

    References
    ----------
    Mulamba, Mandi, Diligenti, Lombardi, Bucarey & Guns, "Contrastive Losses and Solution Caching for
    Predict-and-Optimize", IJCAI 2021, <https://arxiv.org/abs/2011.05354>.
    """

    def forward(self, weights_pred: torch.Tensor, optimal: torch.Tensor) -> torch.Tensor:
        """Contrastive MAP of ``(..., m)`` predicted weights against optimal states of the same shape."""
        return self._finish(self._gaps(weights_pred, optimal).amax(1), weights_pred)  # max over Γ
