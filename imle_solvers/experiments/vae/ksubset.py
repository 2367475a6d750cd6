"""Exact quantities of the k-subset distribution ``p(z; θ) ∝ exp⟨z, θ⟩`` on ``{z ∈ {0,1}^n : Σz = k}``.

The partition function is the elementary symmetric polynomial ``Z(θ) = e_k(exp θ_1, …, exp θ_n)`` (paper,
Example 2), computed in log space by the recursion
``e_j(x_1..x_i) = e_j(x_1..x_{i-1}) + x_i · e_{j-1}(x_1..x_{i-1})`` in ``O(n k)``. Its gradient is the
marginal vector ``μ(θ) = ∇θ log Z(θ)``, and the KL divergence to the uniform distribution over the ``C(n, k)``
states is ``⟨μ, θ⟩ − log Z(θ) + log C(n, k)``: the KL term of the discrete VAE's ELBO with a uniform prior
over k-subsets. For ``k = 1`` it is the categorical ``Σ q log(q n)``, ``q = softmax(θ)``.
"""

from __future__ import annotations

import math

import torch

__all__ = ["kl_to_uniform", "log_partition", "marginals"]

_LOG_ZERO = -1.0e4
"""Stand-in for log 0 in the recursion: finite, so that the log-sum-exp has finite gradients everywhere."""


def log_partition(theta: torch.Tensor, k: int) -> torch.Tensor:
    """``[...]`` ``log Z(θ) = log e_k(exp θ)`` for ``[..., n]`` θ (differentiable, twice)."""
    n = theta.shape[-1]
    if not 1 <= k <= n:
        raise ValueError(f"need 1 <= k <= n, got k={k}, n={n}")
    log_e = theta.new_full((*theta.shape[:-1], k + 1), _LOG_ZERO)
    log_e = torch.cat([torch.zeros_like(log_e[..., :1]), log_e[..., 1:]], dim=-1)  # log e_0 = 0   [..., k+1]
    for i in range(n):
        x = theta[..., i : i + 1]  # log x_i   [..., 1]
        # log e_j ← log(e_j + x_i e_{j−1}),  j = 1..k
        # (logsumexp rather than logaddexp: its double backward is finite, the KL needs it)
        both = torch.stack([log_e[..., 1:], log_e[..., :-1] + x])  # [2, ..., k]
        log_e = torch.cat([log_e[..., :1], torch.logsumexp(both, dim=0)], dim=-1)
    return log_e[..., k]


def marginals(theta: torch.Tensor, k: int, create_graph: bool = False) -> torch.Tensor:
    """``[..., n]`` ``μ(θ) = E_{p(z; θ)}[z] = ∇θ log Z(θ)``."""
    with torch.enable_grad():
        leaf = theta if theta.requires_grad else theta.detach().requires_grad_(True)
        (mu,) = torch.autograd.grad(log_partition(leaf, k).sum(), leaf, create_graph=create_graph)
    return mu


def kl_to_uniform(theta: torch.Tensor, k: int) -> torch.Tensor:
    """``[...]`` ``KL(p(z; θ) ‖ Uniform) = ⟨μ, θ⟩ − log Z(θ) + log C(n, k)`` (differentiable in θ)."""
    n = theta.shape[-1]
    log_z = log_partition(theta, k)
    (mu,) = (
        torch.autograd.grad(log_z.sum(), theta, create_graph=True)
        if theta.requires_grad
        else (marginals(theta, k),)
    )
    return (mu * theta).sum(dim=-1) - log_z + math.log(math.comb(n, k))  # E_p[log p] − log(1/C(n,k))
