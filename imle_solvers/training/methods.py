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
import inspect
from collections.abc import Callable
from typing import Any, NamedTuple

import torch
from torch import nn

from .._checks import one_of
from ..estimators import Blackbox, PerturbedOptimizer
from ..imle import IMLE
from ..losses import FenchelYoungLoss, SPOPlusLoss, hamming_loss
from ..noise import NoiseDistribution, NoNoise, SumOfGamma
from ..oracle import BatchSolver, MapOracle, sense_sign
from ..target import AdaptiveTarget, OptimalTarget, PerturbedTarget, RelativeTarget, TargetDistribution

__all__ = ["FACTORIES", "METHODS", "Batch", "Method", "build_method", "decision_loss", "scale_grad"]


class Batch(NamedTuple):
    """One mini-batch of a predict-then-optimize data set."""

    features: torch.Tensor  # x    [B, d]
    costs: torch.Tensor  # c (true weights, oracle sense)   [B, m]
    optimal: torch.Tensor  # z* = MAP(c)   [B, m]
    objective: torch.Tensor  # f* = ⟨c, z*⟩   [B]


BatchLike = Batch | tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]
LossFn = Callable[[torch.Tensor, Batch], tuple[torch.Tensor, torch.Tensor]]


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
    """A named training method: ``loss(ĉ, batch) -> (loss for backward, per-instance loss to report)``.

    ``batch`` is a `Batch` or a plain ``(x, c, z*, f*)`` tuple.

    References
    ----------
    Tang & Khalil, "PyEPO: A PyTorch-based End-to-End Predict-then-Optimize Library for Linear and Integer
    Programming", 2022, <https://arxiv.org/abs/2206.14234>.

    Niepert, Minervini & Franceschi, "Implicit MLE: Backpropagating Through Discrete Exponential Family
    Distributions", NeurIPS 2021, <https://arxiv.org/abs/2106.01798>.
    """

    name: str
    rule: LossFn
    modules: list[nn.Module]
    uses_solver: bool = True

    def loss(self, c_hat: torch.Tensor, batch: BatchLike) -> tuple[torch.Tensor, torch.Tensor]:
        """``(loss for backward, per-instance loss to report)`` of predictions ``ĉ`` on ``batch``."""
        return self.rule(c_hat, batch if isinstance(batch, Batch) else Batch(*batch))

    def train(self) -> None:
        for m in self.modules:
            m.train()


def _imle_regret(
    name: str,
    oracle: MapOracle,
    target: TargetDistribution,
    samples: int,
    pool: BatchSolver | None,
    noise: NoiseDistribution | None,
) -> Method:
    """An I-MLE layer with this target (SumOfGamma unless ``noise``) trained on the summed regret."""
    layer = IMLE(oracle, _noise(noise), target, samples=samples, pool=pool)
    return Method(name, _summed(layer, samples, "regret", oracle), [layer])


def imle(
    oracle: MapOracle,
    *,
    samples: int = 10,
    pool: BatchSolver | None = None,
    noise: NoiseDistribution | None = None,
) -> Method:
    """I-MLE, default scale-equivariant target, SumOfGamma, S=10, regret loss."""
    return _imle_regret("imle", oracle, RelativeTarget(), samples, pool, noise)


def imle_pid(
    oracle: MapOracle,
    *,
    samples: int = 10,
    pool: BatchSolver | None = None,
    noise: NoiseDistribution | None = None,
    lam: float = 10.0,
) -> Method:
    """I-MLE, the paper's fixed-λ PID target (eq. 8, λ=10), SumOfGamma, S=10, regret loss."""
    return _imle_regret("imle-pid", oracle, PerturbedTarget(lam), samples, pool, noise)


def imle_mumu(
    oracle: MapOracle,
    *,
    samples: int = 10,
    pool: BatchSolver | None = None,
    noise: NoiseDistribution | None = None,
) -> Method:
    """I-MLE μ-μ: optimal target (eq. 10) + regret loss (Fact 2), S=10."""
    return _imle_regret("imle-mumu", oracle, OptimalTarget(), samples, pool, noise)


def imle_mm(oracle: MapOracle, *, pool: BatchSolver | None = None) -> Method:
    """I-MLE M-M: no noise, optimal target (eq. 10) + Hamming loss (Fact 1), i.e. MAP(θ) − z*."""
    layer = IMLE(oracle, NoNoise(), OptimalTarget(), pool=pool)
    return Method("imle-mm", _summed(layer, 1, "hamming", oracle), [layer])


def aimle(
    oracle: MapOracle,
    *,
    samples: int = 10,
    pool: BatchSolver | None = None,
    noise: NoiseDistribution | None = None,
) -> Method:
    """AI-MLE: the published adaptive target (Minervini et al. 2023), S=10, regret loss."""
    return _imle_regret("aimle", oracle, AdaptiveTarget(), samples, pool, noise)


def dbb(
    oracle: MapOracle,
    *,
    pool: BatchSolver | None = None,
    bb_lam: float = 20.0,
    bb_loss: str = "regret",
) -> Method:
    """Blackbox (DBB), λ=20, regret loss (Hamming on terrain)."""
    one_of("bb_loss", bb_loss, ("regret", "hamming"))
    layer = Blackbox(oracle, lam=bb_lam, pool=pool)
    return Method("dbb", _summed(layer, 1, bb_loss, oracle), [layer])


def dpo(
    oracle: MapOracle,
    *,
    samples: int = 10,
    pool: BatchSolver | None = None,
    sigma: float = 1.0,
    dpo_samples: int | None = None,
) -> Method:
    """PerturbedOptimizer (DPO), σ=1, S=10, squared error to z*."""
    layer = PerturbedOptimizer(oracle, sigma, samples=dpo_samples or samples, pool=pool)

    def loss(c_hat: torch.Tensor, b: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        y_hat = layer(c_hat)  # E[MAP(θ + σZ)]   [B, m]
        return _per(((y_hat - b.optimal) ** 2).sum(-1))  # ‖ŷ − z*‖²   [B]

    return Method("dpo", loss, [layer])


def pfyl(
    oracle: MapOracle,
    *,
    samples: int = 10,
    pool: BatchSolver | None = None,
    sigma: float = 1.0,
    dpo_samples: int | None = None,
) -> Method:
    """Perturbed Fenchel-Young loss, σ=1, S=10."""
    fy = FenchelYoungLoss(oracle, sigma=sigma, samples=dpo_samples or samples, pool=pool, reduction="none")
    return Method("pfyl", lambda c_hat, b: _per(fy(c_hat, b.optimal)), [fy])


def spo_plus(oracle: MapOracle, *, pool: BatchSolver | None = None) -> Method:
    """SPO+ loss."""
    spo = SPOPlusLoss(oracle, pool=pool, reduction="none")
    return Method("spo+", lambda c_hat, b: _per(spo(c_hat, b.costs, optimal=b.optimal)), [spo])


def two_stage(oracle: MapOracle) -> Method:
    """Two-stage: MSE regression of the costs (no solver in training)."""
    mse = nn.MSELoss()
    return Method("two-stage", lambda c_hat, b: _both(mse(c_hat, b.costs), c_hat), [], uses_solver=False)


FACTORIES: dict[str, Callable[..., Method]] = {
    "imle": imle,
    "imle-pid": imle_pid,
    "imle-mumu": imle_mumu,
    "imle-mm": imle_mm,
    "aimle": aimle,
    "dbb": dbb,
    "dpo": dpo,
    "pfyl": pfyl,
    "spo+": spo_plus,
    "two-stage": two_stage,
}
"""Method name → factory ``(oracle, **its own options) -> Method``, in table order."""

METHODS: dict[str, str] = {
    name: (factory.__doc__ or name).strip().splitlines()[0].rstrip(".") for name, factory in FACTORIES.items()
}
"""Method name → one-line description (the first line of its factory's docstring)."""


def build_method(name: str, oracle: MapOracle, **options: Any) -> Method:
    """Build one of `METHODS` for ``oracle``, passing each factory only the options it takes.

    Parameters
    ----------
    name
        A key of `METHODS`.
    oracle
        The problem's MAP oracle.
    **options
        Any of ``samples`` (S), ``pool``, ``noise`` (I-MLE perturbation, default
        ``SumOfGamma()`` with κ = ``oracle.expected_nonzeros``), ``lam`` (λ of ``imle-pid``),
        ``sigma`` (σ of ``dpo``/``pfyl``), ``bb_lam``, ``bb_loss`` (``"regret"`` or ``"hamming"``,
        for ``dbb``) and ``dpo_samples``; options a method does not take are ignored.
    """
    if name not in FACTORIES:
        raise ValueError(f"unknown method {name!r}; choose from {', '.join(FACTORIES)}")
    factory = FACTORIES[name]
    accepted = inspect.signature(factory).parameters
    known = {"samples", "pool", "noise", "lam", "sigma", "bb_lam", "bb_loss", "dpo_samples"}
    unknown = set(options) - known
    if unknown:
        raise TypeError(f"build_method got unknown options {sorted(unknown)}")
    return factory(oracle, **{k: v for k, v in options.items() if k in accepted})


def _noise(noise: NoiseDistribution | None) -> NoiseDistribution:
    return SumOfGamma() if noise is None else noise


def _summed(layer: nn.Module, samples: int, kind: str, oracle: MapOracle) -> LossFn:
    """Loss through a perturb-and-MAP layer, summed over instances and samples.

    Targets (eq. 8's ``θ − λ∇zℓ``, eq. 10's ``−∇zℓ``) need the *per-instance, per-sample* ``∇z ℓ``
    (e.g. ``c``), not one divided by the batch size or S; the layer sums its S per-sample estimates,
    and the weights' gradient is rescaled by ``1/(B·S)``: the update is their mean.
    """

    def loss(c_hat: torch.Tensor, b: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        n = len(c_hat)
        z = layer(scale_grad(c_hat, 1.0 / (n * samples))).reshape(n, samples, -1)  # MAP(θ+ε)  [B, S, m]
        if kind == "regret":
            per = decision_loss(z, b.costs, oracle)  # ℓ_R = ⟨c, z⟩ → ∇z ℓ = c   [B, S]
        else:
            y = b.optimal.unsqueeze(1)  # z*   [B, 1, m]
            per = hamming_loss(z, y, reduction="none") * z.shape[-1]  # Σ_i |z_i − y_i|, ∇z = 1 − 2y
        return per.sum(), per.mean(1).detach()

    return loss


def _per(values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean for backward, per-instance values for reporting."""
    return values.mean(), values.detach()


def _both(loss: torch.Tensor, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return loss, loss.detach().expand(len(like))
