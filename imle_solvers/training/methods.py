"""The training methods compared by ``imle-solvers train``, all on the same oracle API.

Each method turns a model's predicted weights ``ĉ`` (in the oracle's sense) and a batch of
``(x, c, z*, f*)`` into a scalar loss whose gradient trains the model:

============  ===========================================================================================
name          loss (``S`` perturbations, ``⟨·,·⟩`` summed over the m variables)
============  ===========================================================================================
imle          I-MLE, the default scale-equivariant target (RelativeTarget), SumOfGamma, S = 10, ``ℓ_R``
imle-pid      I-MLE, the paper's fixed-λ PID target (eq. 8, λ = 10), SumOfGamma noise, S = 10, ``ℓ_R``
imle-mumu     I-MLE "μ-μ": OptimalTarget (eq. 10) + ``ℓ_R`` → ``MAP(θ+ε) − MAP(−c+ε)`` (Fact 2), S = 10
imle-mm       I-MLE "M-M": no noise, OptimalTarget + Hamming loss to ``z*`` → ``MAP(θ) − z*`` (Fact 1)
aimle         AI-MLE (Minervini et al. 2023): the published adaptive target, ``ℓ_R``, S = 10
dbb           Blackbox (Vlastelica et al. 2020), λ = 20, ``ℓ_R``
dpo           PerturbedOptimizer (Berthet et al. 2020), σ = 1, S = 10, squared error to ``z*``
pfyl          perturbed Fenchel-Young loss (Berthet et al. 2020), σ = 1, S = 10
spo+          SPO+ (Elmachtoub & Grigas 2022)
two-stage     mean squared error between ``ĉ`` and ``c`` (no solver in training)
============  ===========================================================================================

``ℓ_R(z; c) = ⟨c, z⟩`` for a ``"min"`` oracle (``−⟨c, z⟩`` for ``"max"``) is the regret up to a term
that does not depend on ``z``, so ``∇z ℓ_R = c`` (θ-space ``−θ_true``). Targets (eq. 8, eq. 10) need
the *unscaled* per-instance, per-sample ``∇z ℓ``: the layer-based methods sum the loss over the batch
and the samples and rescale the weights' gradient by ``1/(B·S)`` instead (`scale_grad`), so that e.g.
eq. 10 gives ``θ' = −c`` and the update is the mean over instances and samples.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from ..estimators import Blackbox, PerturbedOptimizer
from ..imle import IMLE
from ..losses import FenchelYoungLoss, SPOPlusLoss, hamming_loss
from ..noise import NoiseDistribution, NoNoise, SumOfGamma
from ..oracle import BatchSolver, MapOracle, sense_sign
from ..target import AdaptiveTarget, OptimalTarget, PerturbedTarget, RelativeTarget, TargetDistribution

__all__ = ["METHODS", "Method", "build_method", "decision_loss", "scale_grad"]

Batch = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]  # x, c, z*, f*


class _ScaleGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, factor: float) -> torch.Tensor:
        ctx.factor = factor
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad * ctx.factor, None


def scale_grad(x: torch.Tensor, factor: float) -> torch.Tensor:
    """Identity in the forward pass; multiplies the gradient by ``factor`` in the backward pass."""
    return _ScaleGrad.apply(x, factor)  # type: ignore[no-any-return]


def decision_loss(z: torch.Tensor, costs: torch.Tensor, oracle: MapOracle) -> torch.Tensor:
    """``ℓ_R`` per instance and sample: ``−sign·⟨c, z⟩`` (``⟨c, z⟩`` for min, ``−⟨v, z⟩`` for max).

    ``z`` is ``(B, m)`` or ``(B, S, m)``; the result is ``(B,)`` or ``(B, S)``.
    """
    c = costs if z.dim() == costs.dim() else costs.unsqueeze(1)  # [B, 1, m] against [B, S, m]
    return -sense_sign(oracle) * (c * z).sum(-1)


@dataclasses.dataclass
class Method:
    """A named training method: ``loss(ĉ, batch) -> (loss for backward, per-instance loss to report)``."""

    name: str
    loss: Callable[[torch.Tensor, Batch], tuple[torch.Tensor, torch.Tensor]]
    modules: list[nn.Module]
    uses_solver: bool = True

    def train(self) -> None:
        for m in self.modules:
            m.train()


def build_method(
    name: str,
    oracle: MapOracle,
    samples: int = 10,
    pool: BatchSolver | None = None,
    noise: NoiseDistribution | None = None,
    lam: float = 10.0,
    sigma: float = 1.0,
    bb_lam: float = 20.0,
    bb_loss: str = "regret",
    dpo_samples: int | None = None,
) -> Method:
    """Build one of `METHODS` for ``oracle``.

    Parameters
    ----------
    name
        A key of `METHODS`.
    oracle
        The problem's MAP oracle.
    samples
        S, perturbations per instance for the perturbation-based methods.
    pool
        Optional [`SolverPool`][imle_solvers.pool.SolverPool] for solver-backed oracles.
    noise
        Perturbation of the I-MLE methods (default ``SumOfGamma()``, κ = ``oracle.expected_nonzeros``).
    lam
        λ of the fixed-λ PID target (``imle-pid``).
    sigma
        σ of DPO and the Fenchel-Young loss.
    bb_lam
        λ of the blackbox method.
    bb_loss
        Loss behind the blackbox layer: ``"regret"`` (``ℓ_R``) or ``"hamming"`` (to ``z*``, as in
        Vlastelica et al.'s Warcraft experiment).
    dpo_samples
        Perturbations of ``dpo`` and ``pfyl`` (default ``samples``).
    """
    if name not in METHODS:
        raise ValueError(f"unknown method {name!r}; choose from {', '.join(METHODS)}")
    sog = SumOfGamma() if noise is None else noise
    if bb_loss not in ("regret", "hamming"):
        raise ValueError(f"bb_loss must be 'regret' or 'hamming', got {bb_loss!r}")
    m_samples = samples if dpo_samples is None else dpo_samples
    if name == "two-stage":
        mse = nn.MSELoss()
        return Method(name, lambda c_hat, b: _both(mse(c_hat, b[1]), c_hat), [], uses_solver=False)
    if name == "spo+":
        spo = SPOPlusLoss(oracle, pool=pool, reduction="none")
        return Method(name, lambda c_hat, b: _per(spo(c_hat, b[1], optimal=b[2])), [spo])
    if name == "pfyl":
        fy = FenchelYoungLoss(oracle, sigma=sigma, samples=m_samples, pool=pool, reduction="none")
        return Method(name, lambda c_hat, b: _per(fy(c_hat, b[2])), [fy])
    if name == "dpo":
        dpo = PerturbedOptimizer(oracle, sigma=sigma, samples=m_samples, pool=pool)

        def dpo_loss(c_hat: torch.Tensor, b: Batch) -> tuple[torch.Tensor, torch.Tensor]:
            y_hat = dpo(c_hat)  # E[MAP(θ + σZ)]   [B, m]
            return _per(((y_hat - b[2]) ** 2).sum(-1))  # ‖ŷ − z*‖²   [B]

        return Method(name, dpo_loss, [dpo])
    if name == "dbb":
        layer: nn.Module = Blackbox(oracle, lam=bb_lam, pool=pool)
        return Method(name, _summed(layer, 1, bb_loss, oracle), [layer])
    if name == "imle-mm":  # Fact 1 is noise-free: MAP(θ) − z*, one sample
        layer = IMLE(oracle, noise=NoNoise(), target=OptimalTarget())
        return Method(name, _summed(layer, 1, "hamming", oracle), [layer])
    target: TargetDistribution = {
        "imle": RelativeTarget(),
        "imle-pid": PerturbedTarget(lam),
        "aimle": AdaptiveTarget(),
        "imle-mumu": OptimalTarget(),
    }[name]
    layer = IMLE(oracle, noise=sog, target=target, samples=samples, pool=pool)
    return Method(name, _summed(layer, samples, "regret", oracle), [layer])


def _summed(
    layer: nn.Module, samples: int, kind: str, oracle: MapOracle
) -> Callable[[torch.Tensor, Batch], tuple[torch.Tensor, torch.Tensor]]:
    """Loss through a perturb-and-MAP layer, summed over instances and samples.

    Targets (eq. 8's ``θ − λ∇zℓ``, eq. 10's ``−∇zℓ``) need the *per-instance, per-sample* ``∇z ℓ``
    (e.g. ``c``), not one divided by the batch size or S; the layer sums its S per-sample estimates,
    and the weights' gradient is rescaled by ``1/(B·S)``: the update is their mean.
    """

    def loss(c_hat: torch.Tensor, b: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        n = len(c_hat)
        z = layer(scale_grad(c_hat, 1.0 / (n * samples))).reshape(n, samples, -1)  # MAP(θ+ε)  [B, S, m]
        if kind == "regret":
            per = decision_loss(z, b[1], oracle)  # ℓ_R = ⟨c, z⟩ → ∇z ℓ = c   [B, S]
        else:
            y = b[2].unsqueeze(1)  # z*   [B, 1, m]
            per = hamming_loss(z, y, reduction="none") * z.shape[-1]  # Σ_i |z_i − y_i|, ∇z = 1 − 2y
        return per.sum(), per.mean(1).detach()

    return loss


def _per(values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean for backward, per-instance values for reporting."""
    return values.mean(), values.detach()


def _both(loss: torch.Tensor, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return loss, loss.detach().expand(len(like))


#: method name → one-line description (the order is the table order)
METHODS: dict[str, str] = {
    "imle": "I-MLE, default scale-equivariant target, SumOfGamma, S=10, regret loss",
    "imle-pid": "I-MLE, the paper's fixed-λ PID target (λ=10), SumOfGamma, S=10, regret loss",
    "imle-mumu": "I-MLE μ-μ: optimal target (eq. 10) + regret loss (Fact 2), S=10",
    "imle-mm": "I-MLE M-M: no noise, optimal target (eq. 10) + Hamming loss (Fact 1)",
    "aimle": "AI-MLE: the published adaptive target, S=10, regret loss",
    "dbb": "Blackbox (DBB), λ=20, regret loss (Hamming on terrain)",
    "dpo": "PerturbedOptimizer (DPO), σ=1, S=10, squared error to z*",
    "pfyl": "perturbed Fenchel-Young loss, σ=1, S=10",
    "spo+": "SPO+ loss",
    "two-stage": "two-stage: MSE regression of the costs",
}
