"""The Gumbel-Sinkhorn relaxation of a permutation (Mena et al. 2018), in log space."""

from __future__ import annotations

import torch
from torch import nn

from ..._checks import positive, positive_int
from ...adapters.graphs.matching import TorchMatching
from ...noise import Gumbel

__all__ = ["GumbelSinkhorn", "log_sinkhorn"]


def log_sinkhorn(log_alpha: torch.Tensor, iterations: int) -> torch.Tensor:
    """Sinkhorn normalisation in log space: ``iterations`` rounds of row then column normalisation.

    ``S(X) = lim T_c(T_r(…T_c(T_r(exp X))))``, ``T_r`` and ``T_c`` dividing every row and every
    column by its sum (Sinkhorn 1964; Mena et al. 2018, eq. 1). In log space each step subtracts a
    ``logsumexp``, which neither overflows nor underflows at small temperatures. After the last round
    every column sums to exactly 1 and the rows to 1 up to the convergence of the iteration.

    Parameters
    ----------
    log_alpha
        ``[..., n, n]`` logits ``X``.
    iterations
        Rounds (≥ 1; Mena et al. use 20).

    Returns
    -------
    torch.Tensor
        ``[..., n, n]``: ``log`` of the (nearly) doubly stochastic matrix.
    """
    positive_int("iterations", iterations)
    if log_alpha.ndim < 2 or log_alpha.shape[-1] != log_alpha.shape[-2]:
        raise ValueError(f"log_alpha must be [..., n, n], got shape {tuple(log_alpha.shape)}")
    for _ in range(iterations):
        log_alpha = log_alpha - torch.logsumexp(log_alpha, dim=-1, keepdim=True)  # rows sum to 1
        log_alpha = log_alpha - torch.logsumexp(log_alpha, dim=-2, keepdim=True)  # columns sum to 1
    return log_alpha


class GumbelSinkhorn(nn.Module):
    """The Gumbel-Sinkhorn relaxation of a permutation matrix (Mena et al. 2018, sec. 3 and eq. 3).

    Training: ``S((θ + g) / τ)``, ``g ~ Gumbel(0, 1)`` per entry, `log_sinkhorn` over ``iterations``
    rounds: a doubly stochastic matrix that tends to the permutation ``MAP(θ + g)`` as ``τ → 0``
    (their Theorem 1). Evaluation: the hard permutation ``MAP(θ)`` of
    [`TorchMatching`][imle_solvers.TorchMatching] (their Hungarian algorithm at test time). Weights and
    outputs are ``n × n`` matrices flattened row-major, as [`TorchMatching`][imle_solvers.TorchMatching]
    orders them.

    Parameters
    ----------
    n
        Size of the permutation.
    temperature
        τ > 0.
    iterations
        Sinkhorn rounds.
    noise_scale
        Multiplies the Gumbel noise (0: the deterministic Sinkhorn operator).
    generator
        Optional `torch.Generator` on the weights' device.

    References
    ----------
    * Mena, Belanger, Linderman & Snoek, "Learning Latent Permutations with Gumbel-Sinkhorn Networks",
      ICLR 2018, <https://arxiv.org/abs/1802.08665>.
    * Sinkhorn, "A Relationship Between Arbitrary Positive Matrices and Doubly Stochastic Matrices",
      The Annals of Mathematical Statistics 35(2), 1964, <https://doi.org/10.1214/aoms/1177703591>.
    """

    def __init__(
        self,
        n: int,
        temperature: float = 1.0,
        iterations: int = 20,
        *,
        noise_scale: float = 1.0,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__()
        self.n = positive_int("n", n)
        self.temperature = positive("temperature", temperature)
        self.iterations = positive_int("iterations", iterations)
        if not noise_scale >= 0:
            raise ValueError(f"noise_scale must be a finite number >= 0, got {noise_scale!r}")
        self.noise_scale = float(noise_scale)
        self.generator = generator
        self.oracle = TorchMatching(n, n)

    def forward(self, theta: torch.Tensor) -> torch.Tensor:
        """``(..., n · n)`` weights → ``(..., n · n)``: doubly stochastic (training) or a permutation."""
        if theta.shape[-1:] != (self.n * self.n,):
            raise ValueError(f"theta must be [..., {self.n * self.n}], got shape {tuple(theta.shape)}")
        if not self.training:
            return self.oracle.solve_torch(theta)  # MAP(θ)   [..., n·n]
        g = Gumbel(1.0).sample(theta.shape, theta.device, theta.dtype, self.generator)  # [..., n·n]
        logits = ((theta + self.noise_scale * g) / self.temperature).unflatten(-1, (self.n, self.n))
        return log_sinkhorn(logits, self.iterations).exp().flatten(-2)  # S((θ + g)/τ)   [..., n·n]

    def extra_repr(self) -> str:
        return f"n={self.n}, temperature={self.temperature:g}, iterations={self.iterations}"
