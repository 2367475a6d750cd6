"""The I-MLE layer and its functional form (paper, Algorithm 1 and eq. 7).

[`IMLE`][imle_solvers.IMLE] is a [`PerturbAndMAPLayer`][imle_solvers.perturb_and_map.PerturbAndMAPLayer] whose
backward gradient rule is a [`TargetDistribution`][imle_solvers.TargetDistribution]: the forward pass draws
``ε ~ ρ(ε)`` and returns ``z = MAP(θ + ε)``; the backward pass returns ``Σ_S [z − MAP(θ' + ε)] / λ``, with θ'
from the target and the same ε.

[`imle`][imle_solvers.imle] is the functional form. ``imle_solvers.imle`` names one object: this
module, which is callable as that function (``imle_solvers.imle(weights, oracle)``), so that the
package attribute and the module ``imle_solvers.imle`` are never two different things.
"""

from __future__ import annotations

import inspect
import sys
import types
from typing import Any

import torch

from ._checks import instance_of
from .noise import NoiseDistribution, SumOfGamma
from .oracle import BatchSolver, MapOracle
from .perturb_and_map import NoiseOn, PerturbAndMAPLayer
from .target import TargetDistribution, default_target

__all__ = ["IMLE", "imle"]


class IMLE(PerturbAndMAPLayer):
    """Implicit Maximum Likelihood Estimation layer (paper, Algorithm 1, eq. 7).

    Forward: ``z = MAP(θ + ε)``; backward: ``∇θ L ≈ Σ_i [MAP(θ + ε_i) − MAP(θ'_i + ε_i)] / λ_i`` with
    the same ε_i, θ' from the ``target``.

    Parameters
    ----------
    oracle
        The MAP oracle (weights in its sense: costs for a ``"min"`` oracle).
    noise
        ρ(ε); the default ``SumOfGamma()`` takes ``k`` from ``oracle.expected_nonzeros`` (Theorem 1).
    target
        Target distribution. Default ``AutoTarget()`` ([`AutoTarget`][imle_solvers.AutoTarget]): eq. 8
        with the step sized per batch (the spread of θ + ε over the loss gradient's scale), the central
        difference of two such units in general and, where every sample of a row has the same ``∇z L``
        (a loss linear in z, such as a regret), the best state under the loss as the far side. With the
        same noise the gradient is positively homogeneous in the loss (``grad(α·L) = α·grad(L)``, α > 0,
        under ``.mean()`` as under ``.sum()``), unchanged by an offset ``θ + c·1`` where every state has
        the same size, and scaled by ``1/c`` when θ and the noise temperature are scaled by c; it was
        chosen by training every task the library ships against the paper's λ tuned per task.
        [`RelativeTarget`][imle_solvers.RelativeTarget] is the local step (closest to the exact gradient
        on average); [`PerturbedTarget`][imle_solvers.PerturbedTarget] is the paper's fixed λ
        (scale-dependent); [`OptimalTarget`][imle_solvers.OptimalTarget] is eq. 10;
        [`AdaptiveTarget`][imle_solvers.AdaptiveTarget] is AI-MLE.
    samples
        S. Output shape is ``(..., m)`` for ``S = 1`` and ``(..., S, m)`` for ``S > 1``. The backward
        pass returns the sum of the S per-sample estimates (autograd's rule for S outputs): average
        the loss over the samples to average the estimates.
    pool
        Optional [`SolverPool`][imle_solvers.pool.SolverPool]: the forward's and the backward's N·S rows
        each go out in one call.
    generator
        Optional `torch.Generator` on the weights' device.
    check_finite
        Check the weights for NaN/inf before solving; ``None`` (default): wherever the check needs no
        host synchronisation (see [`PerturbAndMAPLayer`][imle_solvers.perturb_and_map.PerturbAndMAPLayer]).
    noise_on
        ``"theta"`` (default): ``MAP(θ + ε)``; ``"costs"``: a ``"min"`` oracle's costs are perturbed,
        ``argmin ⟨c + ε, z⟩`` (see [`PerturbAndMAPLayer`][imle_solvers.perturb_and_map.PerturbAndMAPLayer]).
    target_noise_scale
        Multiplier of ε in the backward's target MAP, ``MAP(θ' + scale·ε)``; default 1, the same ε.

    Notes
    -----
    In ``eval()`` mode the layer returns the noise-free ``MAP(θ)`` (expanded to S samples when
    ``S > 1``, so shapes do not change between modes). A NaN or inf in the upstream gradient of a row
    gives that row a NaN gradient. A target that is an ``nn.Module``
    ([`AdaptiveTarget`][imle_solvers.AdaptiveTarget]) is a submodule: its state is in ``state_dict``.

    References
    ----------
    Niepert, Minervini & Franceschi, "Implicit MLE: Backpropagating Through Discrete Exponential Family
    Distributions", NeurIPS 2021, <https://arxiv.org/abs/2106.01798>.

    Examples
    --------
    >>> import torch
    >>> from imle_solvers import IMLE, TopK
    >>> layer = IMLE(TopK(k=2, n_vars=5))
    >>> z = layer(torch.randn(3, 5, requires_grad=True))
    >>> z.shape, z.sum(-1).tolist()
    (torch.Size([3, 5]), [2.0, 2.0, 2.0])
    """

    def __init__(
        self,
        oracle: MapOracle,
        noise: NoiseDistribution | None = None,
        target: TargetDistribution | None = None,
        *,
        samples: int = 1,
        pool: BatchSolver | None = None,
        generator: torch.Generator | None = None,
        check_finite: bool | None = None,
        noise_on: NoiseOn = "theta",
        target_noise_scale: float = 1.0,
    ) -> None:
        noise = SumOfGamma() if noise is None else noise
        target = default_target() if target is None else instance_of("target", target, TargetDistribution)
        super().__init__(
            oracle,
            noise,
            target,
            samples=samples,
            pool=pool,
            generator=generator,
            check_finite=check_finite,
            noise_on=noise_on,
            target_noise_scale=target_noise_scale,
        )
        self.target = target

    @property
    def target(self) -> TargetDistribution:
        """The target distribution (the backward's gradient rule); assigning one takes effect at once.

        A target that is an ``nn.Module`` ([`AdaptiveTarget`][imle_solvers.AdaptiveTarget]) is registered
        as the submodule ``target``, so its state is in the layer's ``state_dict``.
        """
        return self.__dict__["_rule"]

    @target.setter
    def target(self, target: TargetDistribution) -> None:
        instance_of("target", target, TargetDistribution)
        self._modules.pop("target", None)
        if isinstance(target, torch.nn.Module):
            self._modules["target"] = target  # state_dict keys "target.*"
        self.__dict__["_rule"] = target  # what the backward uses

    def forward(self, weights: torch.Tensor) -> torch.Tensor:
        """``(..., m)`` weights → ``(..., m)`` states (``(..., S, m)`` when ``samples > 1``)."""
        z = self.sample_states(weights)  # [..., S, m]
        return z.squeeze(-2) if self.samples == 1 else z


def imle(
    weights: torch.Tensor,
    oracle: MapOracle,
    noise: NoiseDistribution | None = None,
    target: TargetDistribution | None = None,
    *,
    samples: int = 1,
    pool: BatchSolver | None = None,
    generator: torch.Generator | None = None,
    check_finite: bool | None = None,
    noise_on: NoiseOn = "theta",
    target_noise_scale: float = 1.0,
) -> torch.Tensor:
    """Functional form of [`IMLE`][imle_solvers.IMLE] (always in training mode: noise is drawn).

    Every keyword has the effect it has on [`IMLE`][imle_solvers.IMLE]: ``imle(w, oracle, **options)``
    equals ``IMLE(oracle, **options)(w)`` (with the same generator state, the same noise).

    Parameters
    ----------
    weights
        ``(..., m)`` weights in the oracle's sense.
    oracle
        The MAP oracle.
    noise
        ρ(ε); default ``SumOfGamma()``, as for [`IMLE`][imle_solvers.IMLE].
    target
        The target distribution; default ``AutoTarget()``, as for [`IMLE`][imle_solvers.IMLE].
    samples
        S, the number of perturb-and-MAP samples per row.
    pool
        Optional [`SolverPool`][imle_solvers.pool.SolverPool] for solver-backed oracles.
    generator
        Optional `torch.Generator` on the weights' device.
    check_finite
        Check the weights for NaN/inf before solving, as for [`IMLE`][imle_solvers.IMLE].
    noise_on
        ``"theta"`` or ``"costs"``, as for [`IMLE`][imle_solvers.IMLE].
    target_noise_scale
        Multiplier of ε in the backward's target MAP, as for [`IMLE`][imle_solvers.IMLE].

    Returns
    -------
    torch.Tensor
        ``(..., m)`` states for ``S = 1``, ``(..., S, m)`` otherwise; same device and dtype as ``weights``.

    References
    ----------
    Niepert, Minervini & Franceschi, "Implicit MLE: Backpropagating Through Discrete Exponential Family
    Distributions", NeurIPS 2021, <https://arxiv.org/abs/2106.01798>.
    """
    layer = IMLE(
        oracle,
        noise,
        target,
        samples=samples,
        pool=pool,
        generator=generator,
        check_finite=check_finite,
        noise_on=noise_on,
        target_noise_scale=target_noise_scale,
    )
    return layer(weights)


class _CallableModule(types.ModuleType):
    """The type of the module ``imle_solvers.imle``: calling the module calls [`imle`][imle_solvers.imle]."""

    def __call__(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        return imle(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
__signature__ = inspect.signature(imle)  # inspect.signature(imle_solvers.imle) shows the function's
