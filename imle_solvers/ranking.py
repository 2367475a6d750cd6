"""Learning-to-rank losses on a solution pool (Mandi et al., ICML 2022): pointwise, pairwise, listwise.

The pool's states ``W = Γ`` ([`SolutionPoolLoss`][imle_solvers.solution_pool.SolutionPoolLoss]) are
ranked by their objective under the true weights; the model's predictions should rank them the same way.
In θ-space (``θ = −c`` for a ``"min"`` oracle, so a higher score is a better state):

```text
pointwise  ℓ = mean_{w ∈ Γ} ⟨θ − θ̂, w⟩²                                  scores regressed
pairwise   ℓ = Σ_{w ∈ Γ} relu(⟨θ̂, w − w⁺⟩) / max(|Γ| − 1, 1)             w⁺ = argmax_{w ∈ Γ} ⟨θ, w⟩
listwise   ℓ = −Σ_{w ∈ Γ} max(softmax(θW)_w, 1e-8) · log softmax(θ̂W)_w   cross-entropy of the rankings
```

No solver runs in the backward pass.
"""

from __future__ import annotations

import torch
from torch.nn import functional as F

from .oracle import sense_sign
from .solution_pool import SolutionPoolLoss

__all__ = ["ListwiseLTRLoss", "PairwiseLTRLoss", "PointwiseLTRLoss"]


class _RankingLoss(SolutionPoolLoss):
    def _scores(
        self, weights_pred: torch.Tensor, weights_true: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(θ̂W, θW)``: predicted and true scores of every pool state, ``[N, K]`` each."""
        pool = self._pool_states(weights_pred)  # W   [K, m]
        true = self._weights("weights_true", weights_true, weights_pred)  # c   [N, m]
        sign = sense_sign(self.oracle)
        theta_hat = sign * weights_pred.reshape(-1, self.oracle.n_vars)  # θ̂   [N, m]
        return theta_hat @ pool.T, (sign * true) @ pool.T  # ⟨θ̂, w⟩, ⟨θ, w⟩   [N, K]


class PointwiseLTRLoss(_RankingLoss):
    """Pointwise learning to rank (Mandi et al., ICML 2022, sec. 4.1): ``mean_{w ∈ Γ} ⟨c − ĉ, w⟩²``.

    Each pool state's predicted objective is regressed on its true one. Takes PyEPO's call
    ``ptltr(pred_cost, true_cost)``; options as for
    [`SolutionPoolLoss`][imle_solvers.solution_pool.SolutionPoolLoss].

    References
    ----------
    Mandi, Bucarey, Mulamba & Guns, "Decision-Focused Learning: Through the Lens of Learning to Rank",
    ICML 2022, <https://arxiv.org/abs/2112.03609>.
    """

    def forward(self, weights_pred: torch.Tensor, weights_true: torch.Tensor) -> torch.Tensor:
        """The loss of ``(..., m)`` predicted weights against the true weights of the same shape."""
        predicted, true = self._scores(weights_pred, weights_true)  # [N, K] each
        return self._finish((true - predicted).square().mean(1), weights_pred)


class PairwiseLTRLoss(_RankingLoss):
    """Pairwise learning to rank (Mandi et al., ICML 2022, sec. 4.2): the pool's best state ranked first.

    ``w⁺`` is the pool's best state under the true weights; every other state that the predictions score
    above it adds its margin: ``Σ_w relu(⟨θ̂, w − w⁺⟩) / max(|Γ| − 1, 1)`` (for a ``"min"`` oracle,
    ``relu(⟨ĉ, w⁺⟩ − ⟨ĉ, w⟩)``). Takes PyEPO's call ``prltr(pred_cost, true_cost)``; options as for
    [`SolutionPoolLoss`][imle_solvers.solution_pool.SolutionPoolLoss].

    References
    ----------
    Mandi, Bucarey, Mulamba & Guns, "Decision-Focused Learning: Through the Lens of Learning to Rank",
    ICML 2022, <https://arxiv.org/abs/2112.03609>.
    """

    def forward(self, weights_pred: torch.Tensor, weights_true: torch.Tensor) -> torch.Tensor:
        """The loss of ``(..., m)`` predicted weights against the true weights of the same shape."""
        predicted, true = self._scores(weights_pred, weights_true)  # [N, K] each
        best = predicted.gather(1, true.argmax(1, keepdim=True))  # ⟨θ̂, w⁺⟩   [N, 1]
        per_row = F.relu(predicted - best).sum(1) / max(predicted.shape[1] - 1, 1)  # [N]
        return self._finish(per_row, weights_pred)


class ListwiseLTRLoss(_RankingLoss):
    """Listwise learning to rank (Mandi et al., ICML 2022, sec. 4.3): cross-entropy of softmax rankings.

    ``−Σ_w max(softmax(θW)_w, 1e-8) · log softmax(θ̂W)_w`` over the pool's states (for a ``"min"``
    oracle the softmax of ``−cW``). Takes PyEPO's call ``lsltr(pred_cost, true_cost)``; options as for
    [`SolutionPoolLoss`][imle_solvers.solution_pool.SolutionPoolLoss].

    References
    ----------
    Mandi, Bucarey, Mulamba & Guns, "Decision-Focused Learning: Through the Lens of Learning to Rank",
    ICML 2022, <https://arxiv.org/abs/2112.03609>.
    """

    def forward(self, weights_pred: torch.Tensor, weights_true: torch.Tensor) -> torch.Tensor:
        """The loss of ``(..., m)`` predicted weights against the true weights of the same shape."""
        predicted, true = self._scores(weights_pred, weights_true)  # [N, K] each
        target = F.softmax(true, dim=1).clamp(min=1e-8)  # true ranking distribution   [N, K]
        per_row = -(F.log_softmax(predicted, dim=1) * target).sum(1)  # [N]
        return self._finish(per_row, weights_pred)
