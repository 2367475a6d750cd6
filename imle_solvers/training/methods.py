"""The training methods compared by ``imle-solvers train``, all on the same oracle API.

Each method turns a model's predicted weights ``ĉ`` (in the oracle's sense) and a batch of
``(x, c, z*, f*)`` into a scalar loss whose gradient trains the model.
[`METHODS`][imle_solvers.training.METHODS] maps each name to its factory,
``factory(oracle, options) -> Method``; the first line of a factory's docstring describes the method
(``imle-solvers train --help`` and the documentation read it there), the rest says which
[`MethodOptions`][imle_solvers.training.methods.MethodOptions] it reads.

``ℓ_R(z; c) = ⟨c, z⟩`` for a ``"min"`` oracle (``−⟨c, z⟩`` for ``"max"``) is the regret up to a term
that does not depend on ``z``, so ``∇z ℓ_R = c`` (θ-space ``−θ_true``). Targets (eq. 8, eq. 10) need
the *unscaled* per-instance, per-sample ``∇z ℓ``: the layer-based methods sum the loss over the batch
and the samples and rescale the weights' gradient by ``1/(B·S)`` instead (`scale_grad`), so that e.g.
eq. 10 gives ``θ' = −c`` and the update is the mean over instances and samples.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple

import torch
from torch import nn

from .._checks import one_of, positive, positive_int
from ..adaptive import AdaptiveTarget
from ..app.registry import Registry
from ..estimators import Blackbox, NegativeIdentity, PerturbedOptimizer
from ..imle import IMLE
from ..losses import FenchelYoungLoss, SPOPlusLoss, hamming_loss
from ..noise import NoiseDistribution, NoNoise, SumOfGamma
from ..oracle import BatchSolver, MapOracle, sense_sign
from ..target import AutoTarget, OptimalTarget, PerturbedTarget, RelativeTarget, TargetDistribution

__all__ = ["METHODS", "Batch", "Method", "MethodOptions", "build_method", "decision_loss", "scale_grad"]


class Batch(NamedTuple):
    """One mini-batch of a predict-then-optimize data set."""

    features: torch.Tensor  # x    [B, d]
    costs: torch.Tensor  # c (true weights, oracle sense)   [B, m]
    optimal: torch.Tensor  # z* = MAP(c)   [B, m]
    objective: torch.Tensor  # f* = ⟨c, z*⟩   [B]


BatchLike = Batch | tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]
LossFn = Callable[[torch.Tensor, Batch], tuple[torch.Tensor, torch.Tensor]]
MethodFactory = Callable[["MapOracle", "MethodOptions"], "Method"]


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
    return _ScaleGrad.apply(x, factor)


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
    settings: dict[str, Any] = dataclasses.field(default_factory=dict)
    """The hyper-parameters the method uses, as built (recorded with each run)."""
    prepare: Callable[[Any], None] | None = None
    """Called once with the training set before the first step (the solution-pool methods seed their
    pool with its optimal states, as PyEPO does with ``dataset=``)."""

    def loss(self, c_hat: torch.Tensor, batch: BatchLike) -> tuple[torch.Tensor, torch.Tensor]:
        """``(loss for backward, per-instance loss to report)`` of predictions ``ĉ`` on ``batch``."""
        return self.rule(c_hat, batch if isinstance(batch, Batch) else Batch(*batch))

    def train(self) -> None:
        """Put the method's modules in training mode."""
        for m in self.modules:
            m.train()


@dataclasses.dataclass(frozen=True, kw_only=True)
class MethodOptions:
    """The settings a method factory may read; each factory's docstring says which it reads.

    Attributes
    ----------
    samples
        S, perturbations per instance (the I-MLE methods, ``dpo``, ``pfyl``).
    noise
        The I-MLE perturbation (default ``SumOfGamma()``, κ = the oracle's ``expected_nonzeros``).
    lam
        λ of the PID target of ``imle-pid`` (eq. 8).
    bb_lam
        λ of the blackbox interpolation of ``dbb``.
    bb_loss
        The loss behind ``dbb``: ``"regret"`` or ``"hamming"``.
    sigma
        σ of the Gaussian perturbation of ``dpo`` and ``pfyl``.
    dpo_samples
        S of ``dpo`` and ``pfyl`` when it differs from ``samples`` (``None``: ``samples``).
    rf_lam
        λ of the L2 regulariser of ``rfwo`` and ``rfy`` (PyEPO's ``lambd``, default 1).
    fw_max_iter
        Most Frank-Wolfe steps per call of ``rfwo`` and ``rfy`` (PyEPO's ``max_iter``, default 10,000).
    pg_sigma
        σ, the finite-difference width of ``pg`` and ``pg-central`` (PyEPO's default 0.1).
    cave_max_iter
        Interior-point iterations of the projection of ``cave`` (3: CaVE+, PyEPO's default).
    pool
        A [`SolverPool`][imle_solvers.pool.SolverPool] for solver-backed oracles.
    """

    samples: int = 10
    noise: NoiseDistribution | None = None
    lam: float = 10.0
    bb_lam: float = 20.0
    bb_loss: str = "regret"
    sigma: float = 1.0
    dpo_samples: int | None = None
    rf_lam: float = 1.0
    fw_max_iter: int = 10_000
    pg_sigma: float = 0.1
    cave_max_iter: int = 3
    pool: BatchSolver | None = None

    def __post_init__(self) -> None:
        positive_int("samples", self.samples)
        positive("lam", self.lam)
        positive("bb_lam", self.bb_lam)
        positive("sigma", self.sigma)
        one_of("bb_loss", self.bb_loss, ("regret", "hamming"))
        if self.dpo_samples is not None:
            positive_int("dpo_samples", self.dpo_samples)
        positive("rf_lam", self.rf_lam)
        positive_int("fw_max_iter", self.fw_max_iter)
        positive("pg_sigma", self.pg_sigma)
        positive_int("cave_max_iter", self.cave_max_iter)


DEFAULT_OPTIONS = MethodOptions()


def _imle_regret(
    name: str, oracle: MapOracle, target: TargetDistribution | None, options: MethodOptions, **used: Any
) -> Method:
    """An I-MLE layer with this target (``None``: the layer's default; SumOfGamma unless
    ``options.noise``) trained on the summed regret."""
    noise = _noise(options.noise)
    layer = IMLE(oracle, noise, target, samples=options.samples, pool=options.pool)
    settings = {"samples": options.samples, "noise": repr(noise), "target": repr(layer.target), **used}
    return Method(name, _summed(layer, options.samples, "regret", oracle), [layer], settings=settings)


def imle_default(oracle: MapOracle, options: MethodOptions = DEFAULT_OPTIONS) -> Method:
    """I-MLE with the library's default target told that the loss is linear, SumOfGamma, S samples, regret.

    ``IMLE(oracle, noise, AutoTarget(linear=True), samples=S)``: the summed regret ``⟨c, z⟩`` is linear
    in z, so every sample is compared with the best state under ``c`` (eq. 10's regime) at any S, one
    sample included (undeclared, the default target sees it only from S ≥ 2 samples that differ:
    docs/how-imle-works.md). Reads ``samples``, ``noise``, ``pool``.
    """
    return _imle_regret("imle", oracle, AutoTarget(linear=True), options)


def imle_large_step(oracle: MapOracle, options: MethodOptions = DEFAULT_OPTIONS) -> Method:
    """I-MLE with the large relative step (RelativeTarget.large_step()), SumOfGamma, S samples, regret loss.

    The one-sided step of ten spreads of θ + ε per row, close to eq. 10 (the command's ``imle`` before
    the default target was chosen by training, docs/benchmarks.md). Reads ``samples``, ``noise``,
    ``pool``.
    """
    return _imle_regret("imle-large-step", oracle, RelativeTarget.large_step(), options)


def imle_pid(oracle: MapOracle, options: MethodOptions = DEFAULT_OPTIONS) -> Method:
    """I-MLE, the paper's fixed-λ PID target (eq. 8, λ = --lam), SumOfGamma noise, S samples, regret loss.

    Reads ``samples``, ``noise``, ``lam``, ``pool``.
    """
    return _imle_regret("imle-pid", oracle, PerturbedTarget(options.lam), options, lam=options.lam)


def imle_mumu(oracle: MapOracle, options: MethodOptions = DEFAULT_OPTIONS) -> Method:
    """I-MLE μ-μ: the optimal target (eq. 10) and the regret loss (Fact 2), SumOfGamma noise, S samples.

    Reads ``samples``, ``noise``, ``pool``.
    """
    return _imle_regret("imle-mumu", oracle, OptimalTarget(), options)


def imle_mm(oracle: MapOracle, options: MethodOptions = DEFAULT_OPTIONS) -> Method:
    """I-MLE M-M: no noise, the optimal target (eq. 10) and the Hamming loss (Fact 1), i.e. MAP(θ) − z*.

    Reads ``pool``.
    """
    layer = IMLE(oracle, NoNoise(), OptimalTarget(), pool=options.pool)
    settings = {"samples": 1, "noise": repr(NoNoise()), "target": repr(OptimalTarget())}
    return Method("imle-mm", _summed(layer, 1, "hamming", oracle), [layer], settings=settings)


def aimle(oracle: MapOracle, options: MethodOptions = DEFAULT_OPTIONS) -> Method:
    """AI-MLE: the published adaptive target (Minervini et al. 2023), SumOfGamma, S samples, regret loss.

    Reads ``samples``, ``noise``, ``pool``.
    """
    return _imle_regret("aimle", oracle, AdaptiveTarget(), options)


def dbb(oracle: MapOracle, options: MethodOptions = DEFAULT_OPTIONS) -> Method:
    """Blackbox differentiation (Vlastelica et al. 2020), λ = 20, regret loss (Hamming on the maps).

    Reads ``bb_lam``, ``bb_loss``, ``pool``.
    """
    layer = Blackbox(oracle, lam=options.bb_lam, pool=options.pool)
    settings = {"bb_lam": options.bb_lam, "bb_loss": options.bb_loss}
    return Method("dbb", _summed(layer, 1, options.bb_loss, oracle), [layer], settings=settings)


def dpo(oracle: MapOracle, options: MethodOptions = DEFAULT_OPTIONS) -> Method:
    """Differentiable perturbed optimizer (Berthet et al. 2020), σ = 1, S samples, squared error to z*.

    Reads ``sigma``, ``samples`` (or ``dpo_samples``), ``pool``.
    """
    samples = options.dpo_samples or options.samples
    layer = PerturbedOptimizer(oracle, options.sigma, samples=samples, pool=options.pool)

    def loss(c_hat: torch.Tensor, b: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        y_hat = layer(c_hat)  # E[MAP(θ + σZ)]   [B, m]
        return _per(((y_hat - b.optimal) ** 2).sum(-1))  # ‖ŷ − z*‖²   [B]

    return Method("dpo", loss, [layer], settings={"sigma": options.sigma, "samples": samples})


def pfyl(oracle: MapOracle, options: MethodOptions = DEFAULT_OPTIONS) -> Method:
    """Perturbed Fenchel-Young loss (Berthet et al. 2020), σ = 1, S samples, against z*.

    Reads ``sigma``, ``samples`` (or ``dpo_samples``), ``pool``.
    """
    samples = options.dpo_samples or options.samples
    fy = FenchelYoungLoss(oracle, sigma=options.sigma, samples=samples, pool=options.pool, reduction="none")
    settings = {"sigma": options.sigma, "samples": samples}
    return Method("pfyl", lambda c_hat, b: _per(fy(c_hat, b.optimal)), [fy], settings=settings)


def spo_plus(oracle: MapOracle, options: MethodOptions = DEFAULT_OPTIONS) -> Method:
    """SPO+, the convex surrogate of the regret (Elmachtoub & Grigas 2022).

    Reads ``pool``.
    """
    spo = SPOPlusLoss(oracle, pool=options.pool, reduction="none")
    return Method("spo+", lambda c_hat, b: _per(spo(c_hat, b.costs, optimal=b.optimal)), [spo])


def nid(oracle: MapOracle, options: MethodOptions = DEFAULT_OPTIONS) -> Method:
    """Negative identity (Sahoo et al. 2023): MAP(ĉ) forward, −I backward, regret loss (PyEPO's NID).

    Reads ``bb_loss`` (the loss behind the layer, as for ``dbb``), ``pool``.
    """
    layer = NegativeIdentity(oracle, pool=options.pool)
    settings = {"bb_loss": options.bb_loss}
    return Method("nid", _summed(layer, 1, options.bb_loss, oracle), [layer], settings=settings)


def dpo_mul(oracle: MapOracle, options: MethodOptions = DEFAULT_OPTIONS) -> Method:
    """Perturbed optimizer, multiplicative noise ĉ⊙exp(σZ−σ²/2) (Dalle et al. 2022), squared error to z*.

    PyEPO's ``perturbedOptMul`` with its leave-one-out baseline (``variance_reduction``). Reads
    ``sigma``, ``samples`` (or ``dpo_samples``), ``pool``.
    """
    samples = options.dpo_samples or options.samples
    layer = PerturbedOptimizer(
        oracle,
        options.sigma,
        samples=samples,
        multiplicative=True,
        variance_reduction=True,
        pool=options.pool,
    )

    def loss(c_hat: torch.Tensor, b: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        y_hat = layer(c_hat)  # E[MAP(θ ⊙ exp(σZ − σ²/2))]   [B, m]
        return _per(((y_hat - b.optimal) ** 2).sum(-1))  # ‖ŷ − z*‖²   [B]

    settings = {"sigma": options.sigma, "samples": samples, "variance_reduction": True}
    return Method("dpo-mul", loss, [layer], settings=settings)


def pfyl_mul(oracle: MapOracle, options: MethodOptions = DEFAULT_OPTIONS) -> Method:
    """Perturbed Fenchel-Young loss, multiplicative noise (Dalle et al. 2022), against z* (PyEPO's PFYMul).

    Reads ``sigma``, ``samples`` (or ``dpo_samples``), ``pool``.
    """
    samples = options.dpo_samples or options.samples
    fy = FenchelYoungLoss(
        oracle,
        sigma=options.sigma,
        samples=samples,
        multiplicative=True,
        pool=options.pool,
        reduction="none",
    )
    settings = {"sigma": options.sigma, "samples": samples}
    return Method("pfyl-mul", lambda c_hat, b: _per(fy(c_hat, b.optimal)), [fy], settings=settings)


def rfwo(oracle: MapOracle, options: MethodOptions = DEFAULT_OPTIONS) -> Method:
    """L2-regularised optimiser by Frank-Wolfe (Dalle et al. 2022), squared error to z* (PyEPO's RFWO).

    Reads ``rf_lam``, ``fw_max_iter``, ``pool``.
    """
    from ..frank_wolfe import RegularizedOptimizer

    layer = RegularizedOptimizer(oracle, options.rf_lam, max_iter=options.fw_max_iter, pool=options.pool)

    def loss(c_hat: torch.Tensor, b: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        y_hat = layer(c_hat)  # ŷ_λ(θ̂) = proj_conv(C)(θ̂/λ)   [B, m]
        return _per(((y_hat - b.optimal) ** 2).sum(-1))  # ‖ŷ − z*‖²   [B]

    settings = {"rf_lam": options.rf_lam, "fw_max_iter": options.fw_max_iter}
    return Method("rfwo", loss, [layer], settings=settings)


def rfy(oracle: MapOracle, options: MethodOptions = DEFAULT_OPTIONS) -> Method:
    """Fenchel-Young loss of the L2 regulariser, Frank-Wolfe (Blondel et al. 2020), against z* (PyEPO's RFY).

    Reads ``rf_lam``, ``fw_max_iter``, ``pool``.
    """
    from ..frank_wolfe import RegularizedFenchelYoungLoss

    fy = RegularizedFenchelYoungLoss(
        oracle, options.rf_lam, max_iter=options.fw_max_iter, pool=options.pool, reduction="none"
    )
    settings = {"rf_lam": options.rf_lam, "fw_max_iter": options.fw_max_iter}
    return Method("rfy", lambda c_hat, b: _per(fy(c_hat, b.optimal)), [fy], settings=settings)


def _pool_method(
    name: str, loss_type: Any, against: str, oracle: MapOracle, options: MethodOptions
) -> Method:
    """A solution-pool loss, seeded with the training set's optimal states, solving every batch."""
    module = loss_type(oracle, pool=options.pool, reduction="none")

    def loss(c_hat: torch.Tensor, b: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        return _per(module(c_hat, b.optimal if against == "optimal" else b.costs))

    def prepare(train: Any) -> None:
        module.add(train.solutions)  # Γ ← the training set's optimal states (PyEPO's dataset=)

    return Method(name, loss, [module], prepare=prepare)


def nce(oracle: MapOracle, options: MethodOptions = DEFAULT_OPTIONS) -> Method:
    """Noise-contrastive estimation on a solution pool (Mulamba et al. 2021), against z* (PyEPO's NCE).

    Reads ``pool``.
    """
    from ..contrastive import NCELoss

    return _pool_method("nce", NCELoss, "optimal", oracle, options)


def cmap(oracle: MapOracle, options: MethodOptions = DEFAULT_OPTIONS) -> Method:
    """Contrastive MAP on a solution pool (Mulamba et al. 2021), against z* (PyEPO's CMAP).

    Reads ``pool``.
    """
    from ..contrastive import CMAPLoss

    return _pool_method("cmap", CMAPLoss, "optimal", oracle, options)


def ltr_point(oracle: MapOracle, options: MethodOptions = DEFAULT_OPTIONS) -> Method:
    """Pointwise learning to rank on a solution pool (Mandi et al. 2022), against c (PyEPO's ptLTR).

    Reads ``pool``.
    """
    from ..ranking import PointwiseLTRLoss

    return _pool_method("ltr-point", PointwiseLTRLoss, "costs", oracle, options)


def ltr_pair(oracle: MapOracle, options: MethodOptions = DEFAULT_OPTIONS) -> Method:
    """Pairwise learning to rank on a solution pool (Mandi et al. 2022), against c (PyEPO's prLTR).

    Reads ``pool``.
    """
    from ..ranking import PairwiseLTRLoss

    return _pool_method("ltr-pair", PairwiseLTRLoss, "costs", oracle, options)


def ltr_list(oracle: MapOracle, options: MethodOptions = DEFAULT_OPTIONS) -> Method:
    """Listwise learning to rank on a solution pool (Mandi et al. 2022), against c (PyEPO's lsLTR).

    Reads ``pool``.
    """
    from ..ranking import ListwiseLTRLoss

    return _pool_method("ltr-list", ListwiseLTRLoss, "costs", oracle, options)


def _pg(name: str, central: bool, oracle: MapOracle, options: MethodOptions) -> Method:
    from ..perturbation_gradient import PerturbationGradientLoss

    pg_loss = PerturbationGradientLoss(
        oracle, sigma=options.pg_sigma, central=central, pool=options.pool, reduction="none"
    )
    settings = {"pg_sigma": options.pg_sigma, "central": central}
    return Method(name, lambda c_hat, b: _per(pg_loss(c_hat, b.costs)), [pg_loss], settings=settings)


def pg(oracle: MapOracle, options: MethodOptions = DEFAULT_OPTIONS) -> Method:
    """Perturbation gradient, backward difference (Huang & Gupta 2024), σ = 0.1 (PyEPO's PG).

    Reads ``pg_sigma``, ``pool``.
    """
    return _pg("pg", False, oracle, options)


def pg_central(oracle: MapOracle, options: MethodOptions = DEFAULT_OPTIONS) -> Method:
    """Perturbation gradient, central difference (Huang & Gupta 2024), σ = 0.1 (PG with two_sides=True).

    Reads ``pg_sigma``, ``pool``.
    """
    return _pg("pg-central", True, oracle, options)


def cave(oracle: MapOracle, options: MethodOptions = DEFAULT_OPTIONS) -> Method:
    """CaVE+: cosine to the cone of binding constraints at z* (Tang & Khalil 2024), 3 IPM steps (PyEPO's).

    Needs an oracle with a linear form (shortest path, knapsack, TSP, a declared ILP) and Clarabel (extra
    ``cave``). Reads ``cave_max_iter``.
    """
    from ..cave import CaVELoss

    cave_loss = CaVELoss(oracle, max_iter=options.cave_max_iter, reduction="none")
    settings = {"cave_max_iter": options.cave_max_iter}
    return Method("cave", lambda c_hat, b: _per(cave_loss(c_hat, b.optimal)), [cave_loss], settings=settings)


def two_stage(oracle: MapOracle, options: MethodOptions = DEFAULT_OPTIONS) -> Method:
    """Two-stage: least-squares regression of the costs (no solver in training).

    Reads nothing.
    """
    mse = nn.MSELoss()
    return Method("two-stage", lambda c_hat, b: _both(mse(c_hat, b.costs), c_hat), [], uses_solver=False)


METHODS: Registry[MethodFactory] = Registry(
    "training method",
    {
        "imle": imle_default,
        "imle-large-step": imle_large_step,
        "imle-pid": imle_pid,
        "imle-mumu": imle_mumu,
        "imle-mm": imle_mm,
        "aimle": aimle,
        "dbb": dbb,
        "dpo": dpo,
        "pfyl": pfyl,
        "spo+": spo_plus,
        "two-stage": two_stage,
        "nid": nid,
        "dpo-mul": dpo_mul,
        "pfyl-mul": pfyl_mul,
        "rfwo": rfwo,
        "rfy": rfy,
        "nce": nce,
        "cmap": cmap,
        "ltr-point": ltr_point,
        "ltr-pair": ltr_pair,
        "ltr-list": ltr_list,
        "pg": pg,
        "pg-central": pg_central,
        "cave": cave,
    },
)
"""Method name → factory ``(oracle, options) -> Method``, in table order; help from each docstring."""


def build_method(name: str, oracle: MapOracle, **options: Any) -> Method:
    """Build one of [`METHODS`][imle_solvers.training.METHODS] for ``oracle``.

    Parameters
    ----------
    name
        A key of `METHODS`.
    oracle
        The problem's MAP oracle.
    **options
        Fields of [`MethodOptions`][imle_solvers.training.methods.MethodOptions] (``samples``, ``noise``,
        ``lam``, ``bb_lam``, ``bb_loss``, ``sigma``, ``dpo_samples``, ``rf_lam``, ``fw_max_iter``,
        ``pg_sigma``, ``cave_max_iter``, ``pool``); an unknown one is a
        ``TypeError``. Each method reads the ones its factory names.
    """
    if name not in METHODS:
        raise ValueError(f"unknown method {name!r}; choose from {', '.join(METHODS)}")
    return METHODS[name](oracle, MethodOptions(**options))


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
