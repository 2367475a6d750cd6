"""The exactly solvable k-subset problem of the toy: ``L(θ)``, marginals and samples by enumeration.

A k-subset distribution over ``m`` items, ``p(z; θ) ∝ exp(⟨z, θ⟩)`` on the ``C(m, k)`` states, and
the loss ``L(θ) = E_{z ~ p(z; θ)} ‖z − b‖²``. With ``m = 10``, ``k = 5`` there are 252 states, few
enough to compute everything exactly.
"""

from __future__ import annotations

import dataclasses
import itertools

import torch

from ..._checks import positive_int

__all__ = ["ToyProblem", "enumerate_states"]


def enumerate_states(m: int, k: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """All ``C(m, k)`` k-subset indicator vectors, lexicographic order, shape ``[C(m, k), m]``."""
    combos = torch.tensor(list(itertools.combinations(range(m), k)), dtype=torch.long)  # [S, k]
    states = torch.zeros(combos.shape[0], m, dtype=dtype)
    return states.scatter_(1, combos, 1.0)  # z_s = 1[i ∈ subset s]   [S, m]


@dataclasses.dataclass(frozen=True)
class ToyProblem:
    """The k-subset toy of the paper's sec. 6: exact ``L(θ)``, marginals and samples by enumeration.

    Parameters
    ----------
    b
        ``[m]`` the fixed target vector.
    theta0
        ``[m]`` the initial parameters shared by every run.
    k
        Subset size.

    References
    ----------
    Niepert, Minervini & Franceschi, "Implicit MLE: Backpropagating Through Discrete Exponential Family
    Distributions", NeurIPS 2021, sec. 6 (the synthetic k-subset experiment), <https://arxiv.org/abs/2106.01798>.
    """

    b: torch.Tensor
    theta0: torch.Tensor
    k: int

    @classmethod
    def create(cls, seed: int = 0, m: int = 10, k: int = 5, dtype: torch.dtype = torch.float64) -> ToyProblem:
        """Draw ``b ~ N(0, I)`` and ``θ₀ ~ N(0, I)`` (in that order) from a generator seeded with ``seed``."""
        m, k = positive_int("m", m), positive_int("k", k)
        if k > m:
            raise ValueError(f"k must be <= m = {m}, got {k!r}")
        gen = torch.Generator().manual_seed(int(seed))
        b = torch.randn(m, generator=gen, dtype=dtype)
        theta0 = torch.randn(m, generator=gen, dtype=dtype)
        return cls(b=b, theta0=theta0, k=k)

    @property
    def m(self) -> int:
        """Number of items."""
        return int(self.b.shape[0])

    @property
    def states(self) -> torch.Tensor:
        """``[S, m]`` every state of the k-subset distribution."""
        return _states_cached(self.m, self.k, self.b.dtype)

    @property
    def costs(self) -> torch.Tensor:
        """``[S]`` the point-wise loss ``ℓ(z_s) = ‖z_s − b‖²`` of every state."""
        return ((self.states - self.b) ** 2).sum(dim=-1)

    @property
    def loss_star(self) -> float:
        """``inf_θ L(θ) = min_s ‖z_s − b‖²`` (approached as θ → ∞ along the best state)."""
        return float(self.costs.min())

    def log_probs(self, theta: torch.Tensor) -> torch.Tensor:
        """``[..., S]`` exact ``log p(z_s; θ) = ⟨z_s, θ⟩ − log Z(θ)`` for ``[..., m]`` θ."""
        scores = theta @ self.states.T  # ⟨z_s, θ⟩   [..., S]
        return torch.log_softmax(scores, dim=-1)

    def expected_loss(self, theta: torch.Tensor) -> torch.Tensor:
        """``[...]`` exact ``L(θ) = Σ_s p(z_s; θ) ‖z_s − b‖²`` (differentiable)."""
        return self.log_probs(theta).exp() @ self.costs

    def marginals(self, theta: torch.Tensor) -> torch.Tensor:
        """``[..., m]`` exact ``μ(θ) = E_{p(z; θ)}[z]``."""
        return self.log_probs(theta).exp() @ self.states

    def sample(self, theta: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """``[N, m]`` exact ("faithful") samples ``z ~ p(z; θ)`` for ``[N, m]`` θ, one per row."""
        cdf = self.log_probs(theta).exp().cumsum(dim=-1)  # F(s) = Σ_{s' <= s} p(z_s'; θ)   [N, S]
        u = torch.rand((*cdf.shape[:-1], 1), generator=generator, dtype=cdf.dtype) * cdf[..., -1:]
        idx = torch.searchsorted(cdf, u, right=True).squeeze(-1)  # inverse CDF: s ~ p   [N]
        return self.states[idx.clamp_max(cdf.shape[-1] - 1)]  # [N, m]

    def sfe_gradient(self, theta: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """Score-function estimate ``‖z − b‖² ∇θ log p(z; θ) = ‖z − b‖² (z − μ(θ))``, shape ``[N, m]``."""
        cost = ((z - self.b) ** 2).sum(dim=-1, keepdim=True)  # ℓ(z)   [N, 1]
        return cost * (z - self.marginals(theta))  # ℓ(z) (z − μ(θ))     [N, m]


_STATES: dict[tuple[int, int, torch.dtype], torch.Tensor] = {}


def _states_cached(m: int, k: int, dtype: torch.dtype) -> torch.Tensor:
    key = (m, k, dtype)
    if key not in _STATES:
        _STATES[key] = enumerate_states(m, k, dtype)
    return _STATES[key]
