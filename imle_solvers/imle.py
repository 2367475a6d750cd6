"""The I-MLE layer: perturb-and-MAP forward, target MAP backward (paper, Algorithm 1 and eq. 7).

One `torch.autograd.Function`, [`PerturbAndMAP`][imle_solvers.imle.PerturbAndMAP], is defined here and shared
by every
estimator of the library (I-MLE, STE, blackbox, perturbed optimizers): they differ only in the noise
drawn in the forward pass and in the *gradient rule* applied in the backward pass.

Forward (per row of θ, S samples)::

    ε ~ ρ(ε)                      [N, S, m]
    z = MAP(θ + ε)                [N, S, m]     one batched oracle / pool call

Backward (gradient rule, e.g. a [`TargetDistribution`][imle_solvers.TargetDistribution])::

    θ' = θ − λ ∇z L               [N, S, m]
    ∇θ L ≈ mean_S [z − MAP(θ' + ε)] / λ       one batched oracle / pool call
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol

import torch
from torch import nn
from torch.autograd.function import once_differentiable

from .noise import NoiseDistribution, NoNoise, SumOfGamma
from .oracle import (
    BatchSolver,
    MapOracle,
    TorchOracle,
    check_oracle,
    check_samples,
    check_weights,
    map_solve,
    sense_sign,
)
from .target import PerturbedTarget, Solve, TargetDistribution

__all__ = ["IMLE", "GradientRule", "PerturbAndMAP", "PerturbAndMAPLayer", "imle"]


class GradientRule(Protocol):
    """What the backward pass asks of an estimator (targets implement it, see ``target.py``)."""

    def estimate(
        self,
        theta: torch.Tensor,
        eps: torch.Tensor,
        z: torch.Tensor,
        grad_z: torch.Tensor,
        solve: Solve,
    ) -> torch.Tensor:
        """``[N, m]`` gradient w.r.t. θ from θ ``[N,1,m]``, ε, z and ∇zL ``[N,S,m]``."""
        ...


@dataclasses.dataclass(frozen=True)
class _Spec:
    """Everything the autograd function needs besides the weights."""

    oracle: MapOracle
    noise: NoiseDistribution
    rule: GradientRule
    samples: int
    pool: BatchSolver | None
    generator: torch.Generator | None


class PerturbAndMAP(torch.autograd.Function):
    """``z = MAP(θ + ε)`` with a pluggable backward rule; weights ``(..., m)`` → z ``(..., S, m)``."""

    @staticmethod
    def forward(ctx: Any, weights: torch.Tensor, spec: _Spec) -> torch.Tensor:
        oracle, samples = spec.oracle, spec.samples
        sign = sense_sign(oracle)
        lead, m = weights.shape[:-1], weights.shape[-1]
        theta = (sign * weights.detach()).reshape(-1, 1, m)  # θ = ±weights            [N, 1, m]
        n = theta.shape[0]
        if spec.noise.is_zero:
            eps = theta.new_zeros(()).expand(n, samples, m)  # ε = 0 (no allocation)    [N, S, m]
            z = map_solve(oracle, theta[:, 0], spec.pool)  # z = MAP(θ)                 [N, m]
            z = z.unsqueeze(1).expand(n, samples, m)  # the S samples coincide         [N, S, m]
        else:
            eps = spec.noise.sample(
                (n, samples, m), device=theta.device, dtype=theta.dtype, generator=spec.generator
            )  # ε ~ ρ(ε), drawn on θ's device                                          [N, S, m]
            z = map_solve(oracle, (theta + eps).reshape(n * samples, m), spec.pool)
            z = z.view(n, samples, m)  # z = MAP(θ + ε)                                  [N, S, m]
        ctx.spec, ctx.sign, ctx.lead = spec, sign, lead
        ctx.save_for_backward(theta, eps, z)
        return z.reshape(*lead, samples, m)

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor, None]:
        spec: _Spec = ctx.spec
        theta, eps, z = ctx.saved_tensors
        n, samples, m = z.shape
        grad_z = grad_out.reshape(n, samples, m).to(theta.dtype)  # ∇z L                   [N, S, m]

        def solve(theta_batch: torch.Tensor) -> torch.Tensor:
            # MAP of a [N, S', m] θ-space batch: all N·S' rows in ONE oracle / pool call.
            return map_solve(spec.oracle, theta_batch.reshape(-1, m), spec.pool).view(theta_batch.shape)

        grad_theta = spec.rule.estimate(theta, eps, z, grad_z, solve)  # ∇θ L         [N, m]
        grad_weights = ctx.sign * grad_theta  # back to the oracle's sense (∇c = −∇θ)
        return grad_weights.reshape(*ctx.lead, m).to(grad_out.dtype), None


class PerturbAndMAPLayer(nn.Module):
    """Shared machinery of every perturb-and-MAP layer (I-MLE, STE, blackbox, perturbed optimizer).

    Parameters
    ----------
    oracle
        The MAP oracle; the layer takes weights in its sense (costs for a ``"min"`` oracle).
    noise
        Perturbation ρ(ε); resolved against the oracle (e.g. ``SumOfGamma(k=None)``).
    rule
        The backward gradient rule.
    samples
        S, the number of perturb-and-MAP samples per row.
    pool
        Optional [`SolverPool`][imle_solvers.pool.SolverPool] for solver-backed oracles.
    generator
        Optional `torch.Generator` (on the weights' device) for reproducible noise.
    check_finite
        Check weights for NaN/inf before solving. ``None``: always, except for a
        [`TorchOracle`][imle_solvers.imle.TorchOracle]
        on an accelerator, where the check would cost a host synchronisation.
    """

    def __init__(
        self,
        oracle: MapOracle,
        noise: NoiseDistribution,
        rule: GradientRule,
        samples: int = 1,
        pool: BatchSolver | None = None,
        generator: torch.Generator | None = None,
        check_finite: bool | None = None,
    ) -> None:
        super().__init__()
        check_oracle(oracle)
        check_samples(samples)
        self.oracle = oracle
        self.noise = noise.resolve(oracle)
        self.rule = rule
        self.samples = int(samples)
        self.pool = pool
        self.generator = generator
        self.check_finite = check_finite

    def _validate(self, weights: torch.Tensor) -> None:
        check = self.check_finite
        if check is None:
            check = not (isinstance(self.oracle, TorchOracle) and weights.device.type != "cpu")
        check_weights(weights, self.oracle, check_finite=check)

    def sample_states(self, weights: torch.Tensor) -> torch.Tensor:
        """``(..., m)`` weights → ``(..., S, m)`` perturbed MAP states (noise-free MAP in ``eval()``)."""
        self._validate(weights)
        if self.training:
            spec = _Spec(self.oracle, self.noise, self.rule, self.samples, self.pool, self.generator)
            return PerturbAndMAP.apply(weights, spec)  # type: ignore[no-any-return]
        spec = _Spec(self.oracle, NoNoise(), self.rule, 1, self.pool, None)
        z = PerturbAndMAP.apply(weights, spec)  # z = MAP(θ)   [..., 1, m]
        return z.expand(*z.shape[:-2], self.samples, z.shape[-1])  # type: ignore[no-any-return]

    def extra_repr(self) -> str:
        return f"oracle={self.oracle!r}, noise={self.noise!r}, samples={self.samples}"


class IMLE(PerturbAndMAPLayer):
    """Implicit Maximum Likelihood Estimation layer (paper, Algorithm 1, eq. 7).

    Forward: ``z = MAP(θ + ε)``; backward: ``∇θ L ≈ mean_i [MAP(θ + ε_i) − MAP(θ' + ε_i)]`` with the
    same ε_i, θ' from the ``target`` (eq. 8 PID by default, divided by λ; eq. 10 optimal; adaptive).

    Parameters
    ----------
    oracle
        The MAP oracle (weights in its sense: costs for a ``"min"`` oracle).
    noise
        ρ(ε); the default ``SumOfGamma()`` takes ``k`` from ``oracle.expected_nonzeros`` (Theorem 1).
    target
        Target distribution, default [`PerturbedTarget`][imle_solvers.PerturbedTarget] with λ = 10.
    samples
        S. Output shape is ``(..., m)`` for ``S = 1`` and ``(..., S, m)`` for ``S > 1``; the backward
        pass averages the S estimates.
    pool
        Optional [`SolverPool`][imle_solvers.pool.SolverPool]: the forward's and the backward's N·S rows each
        go
        out in one call.
    generator
        Optional `torch.Generator` on the weights' device.
    check_finite
        See [`PerturbAndMAPLayer`][imle_solvers.imle.PerturbAndMAPLayer].

    Notes
    -----
    In ``eval()`` mode the layer returns the noise-free ``MAP(θ)`` (expanded to S samples when
    ``S > 1``, so shapes do not change between modes).

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
        samples: int = 1,
        pool: BatchSolver | None = None,
        generator: torch.Generator | None = None,
        check_finite: bool | None = None,
    ) -> None:
        noise = SumOfGamma() if noise is None else noise
        target = PerturbedTarget() if target is None else target
        super().__init__(oracle, noise, target, samples, pool, generator, check_finite)
        self.target = target

    def forward(self, weights: torch.Tensor) -> torch.Tensor:
        """``(..., m)`` weights → ``(..., m)`` states (``(..., S, m)`` when ``samples > 1``)."""
        z = self.sample_states(weights)  # [..., S, m]
        return z.squeeze(-2) if self.samples == 1 else z


def imle(
    weights: torch.Tensor,
    oracle: MapOracle,
    noise: NoiseDistribution | None = None,
    target: TargetDistribution | None = None,
    samples: int = 1,
    pool: BatchSolver | None = None,
    generator: torch.Generator | None = None,
    check_finite: bool | None = None,
) -> torch.Tensor:
    """Functional form of [`IMLE`][imle_solvers.imle.IMLE] (always in training mode: noise is drawn).

    Parameters
    ----------
    weights
        ``(..., m)`` weights in the oracle's sense.
    oracle, noise, target, samples, pool, generator, check_finite
        As for [`IMLE`][imle_solvers.imle.IMLE].

    Returns
    -------
    torch.Tensor
        ``(..., m)`` states for ``S = 1``, ``(..., S, m)`` otherwise; same device and dtype as ``weights``.
    """
    layer = IMLE(oracle, noise, target, samples, pool, generator, check_finite)
    return layer(weights)  # type: ignore[no-any-return]
