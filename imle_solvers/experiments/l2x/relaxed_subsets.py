"""Relaxed k-subset samplers, the baselines of the learning-to-explain experiment (paper, sec. 6).

* [`L2XRelaxedTopK`][imle_solvers.experiments.l2x.relaxed_subsets.L2XRelaxedTopK]: L2X's relaxation
  (Chen et al., "Learning to Explain", ICML 2018, sec. 3.2): ``k`` independent Gumbel-softmax samples
  over the positions at temperature ``t``, combined by an element-wise maximum.
* [`SoftSub`][imle_solvers.experiments.l2x.relaxed_subsets.SoftSub]: the relaxed top-k of Xie and Ermon
  ("Reparameterizable Subset Sampling via Continuous Relaxations", IJCAI 2019, Algorithm 2): Gumbel
  keys ``r = θ + g`` and ``k`` rounds of a softmax, each round suppressing what the previous ones
  selected, ``α ← α + log(1 − a)``; the mask is the sum of the ``k`` softmaxes.

Both return a continuous mask during training and the hard top-k of θ in ``eval()`` mode, as the
explainer is evaluated in both papers.
"""

from __future__ import annotations

import torch
from torch import nn

from ..._checks import positive, positive_int
from ...noise import Gumbel
from ...topk import TopK

__all__ = ["L2XRelaxedTopK", "SoftSub"]


class _Relaxed(nn.Module):
    def __init__(self, k: int, temperature: float, generator: torch.Generator | None = None) -> None:
        super().__init__()
        self.k, self.temperature = positive_int("k", k), positive("temperature", temperature)
        self.generator = generator

    def _gumbel(self, shape: tuple[int, ...], like: torch.Tensor) -> torch.Tensor:
        return Gumbel(1.0).sample(shape, like.device, like.dtype, self.generator)

    def forward(self, theta: torch.Tensor) -> torch.Tensor:
        """``[..., n]`` scores → ``[..., n]`` mask (relaxed in training, hard top-k in ``eval()``)."""
        if not self.training:
            return TopK(self.k, theta.shape[-1]).solve_torch(theta.detach()).to(theta.dtype)
        return self.relaxed(theta)

    def relaxed(self, theta: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError


class L2XRelaxedTopK(_Relaxed):
    """L2X: ``max_j softmax((θ + g_j) / t)`` over ``k`` independent Gumbel draws ``g_j`` (Chen et al. 2018).

    Parameters
    ----------
    k
        Subset size.
    temperature
        t (the I-MLE paper reports L2X with t = 0.1).
    generator
        Optional `torch.Generator` on the scores' device.

    References
    ----------
    * Chen, Song, Wainwright & Jordan, "Learning to Explain: An Information-Theoretic Perspective on Model
      Interpretation", ICML 2018, <https://arxiv.org/abs/1802.07814>.
    * Niepert, Minervini & Franceschi, "Implicit MLE: Backpropagating Through Discrete Exponential Family
      Distributions", NeurIPS 2021, sec. 6 (the L2X baseline, t = 0.1), <https://arxiv.org/abs/2106.01798>.
    """

    def __init__(self, k: int, temperature: float = 0.1, generator: torch.Generator | None = None) -> None:
        super().__init__(k, temperature, generator)

    def relaxed(self, theta: torch.Tensor) -> torch.Tensor:
        g = self._gumbel((self.k, *theta.shape), theta)  # k independent draws   [k, ..., n]
        samples = torch.softmax((theta + g) / self.temperature, dim=-1)  # k relaxed one-hots
        return samples.max(dim=0).values  # element-wise max   [..., n]


class SoftSub(_Relaxed):
    """Xie and Ermon's relaxed subset sampling: ``Σ_j a_j``, ``a_j = softmax(α_j / t)``,
    ``α_1 = θ + g``, ``α_{j+1} = α_j + log(1 − a_j)`` (IJCAI 2019, Algorithm 2).

    Parameters
    ----------
    k
        Subset size.
    temperature
        t (the I-MLE paper reports SoftSub with t = 0.5).
    generator
        Optional `torch.Generator` on the scores' device.

    References
    ----------
    * Xie & Ermon, "Reparameterizable Subset Sampling via Continuous Relaxations", IJCAI 2019,
      <https://arxiv.org/abs/1901.10517>.
    * Niepert, Minervini & Franceschi, "Implicit MLE: Backpropagating Through Discrete Exponential Family
      Distributions", NeurIPS 2021, sec. 6 (the SoftSub baseline, t = 0.5), <https://arxiv.org/abs/2106.01798>.
    """

    def __init__(self, k: int, temperature: float = 0.5, generator: torch.Generator | None = None) -> None:
        super().__init__(k, temperature, generator)

    def relaxed(self, theta: torch.Tensor) -> torch.Tensor:
        alpha = theta + self._gumbel(tuple(theta.shape), theta)  # Gumbel keys r = θ + g   [..., n]
        khot = torch.zeros_like(theta)
        for _ in range(self.k):
            a = torch.softmax(alpha / self.temperature, dim=-1)  # relaxed arg-max of this round
            khot = khot + a  # [..., n]
            alpha = alpha + torch.log((1.0 - a).clamp_min(1e-20))  # α ← α + log max(1 − a, ε)
        return khot
