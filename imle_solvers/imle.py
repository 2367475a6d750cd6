"""The I-MLE layer: perturb-and-MAP forward, target MAP backward (paper, Algorithm 1 and eq. 7).

One `torch.autograd.Function`, [`PerturbAndMAP`][imle_solvers.imle.PerturbAndMAP], is defined here
and shared by every estimator of the library (I-MLE, STE, blackbox, perturbed optimizers): they differ
only in the noise drawn in the forward pass and in the *gradient rule* applied in the backward pass.

Forward (per row of θ, S samples)::

    ε ~ ρ(ε)                      [N, S, m]
    z = MAP(θ + ε)                [N, S, m]     one batched oracle / pool call

Backward (gradient rule, e.g. a [`TargetDistribution`][imle_solvers.TargetDistribution])::

    θ' = θ − λ ∇z L               [N, S, m]
    ∇θ L ≈ Σ_S [z − MAP(θ' + ε)] / λ          one batched oracle / pool call

Sample convention (every estimator alike): the S samples are S outputs, and the backward returns the
*sum* of the per-sample estimates, as autograd does for any layer with S outputs. A loss averaged over
the samples therefore averages the estimates; a summed loss adds them.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal, Protocol

import torch
from torch import nn
from torch.autograd.function import once_differentiable

from ._checks import non_negative, one_of
from .errors import ImleSolversError, InvalidWeightsError, NegativeCycleError
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
from .target import RelativeTarget, Solve, TargetDistribution, warn_if_mostly_zero

__all__ = ["IMLE", "GradientRule", "PerturbAndMAP", "PerturbAndMAPLayer", "imle"]

NoiseOn = Literal["theta", "costs"]


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
        """``[N, m]`` gradient w.r.t. θ from θ ``[N,1,m]``, ε, z and ∇zL ``[N,S,m]``, summed over S."""
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
    noise_sign: float = 1.0  # θ-space sign of ε: −1 when the noise is added to costs of a "min" oracle
    target_noise_scale: float = 1.0  # ε of the target MAP = scale · ε of the forward
    warn_state: dict[str, bool] = dataclasses.field(default_factory=dict, compare=False)


def _rows_to_user(err: ImleSolversError, per_row: int, where: str) -> ImleSolversError:
    """Rewrite the flat ``(N·S')`` rows of a solver error as the user's ``(...)`` rows."""
    if isinstance(err, NegativeCycleError):
        where += "; perturbed or target costs went negative: wrap the oracle in ClampedCosts(oracle, 0.0)"
    if err.rows and per_row > 1:
        samples = sorted({r % per_row for r in err.rows})
        err.message = f"{err.message} ({where}, sample {', '.join(map(str, samples[:5]))})"
        err.with_rows(sorted({r // per_row for r in err.rows}))
    elif err.rows:
        err.message = f"{err.message} ({where})"
        err.with_rows(err.rows)
    return err


def _solve_rows(spec: _Spec, theta_batch: torch.Tensor, where: str) -> torch.Tensor:
    """MAP of a ``[N, S', m]`` θ-space batch: all N·S' rows in ONE oracle / pool call."""
    n, per_row, m = theta_batch.shape
    try:
        states = map_solve(spec.oracle, theta_batch.reshape(n * per_row, m), spec.pool)
    except ImleSolversError as err:
        raise _rows_to_user(err, per_row, where) from None
    return states.view(n, per_row, m)


class PerturbAndMAP(torch.autograd.Function):
    """``z = MAP(θ + ε)`` with a pluggable backward rule; weights ``(..., m)`` → z ``(..., S, m)``.

    Returns ``(z, ε)``; ε (θ-space, ``[N, S, m]``) is not differentiable. Works under
    `torch.func.grad` and `torch.func.vmap` (the vmapped dimension becomes one more leading dimension).
    """

    @staticmethod
    def forward(weights: torch.Tensor, spec: _Spec) -> tuple[torch.Tensor, torch.Tensor]:  # type: ignore[override]
        oracle, samples = spec.oracle, spec.samples
        sign = sense_sign(oracle)
        lead, m = weights.shape[:-1], weights.shape[-1]
        theta = (sign * weights.detach()).reshape(-1, 1, m)  # θ = ±weights            [N, 1, m]
        n = theta.shape[0]
        if spec.noise.is_zero:
            eps = theta.new_zeros(()).expand(n, samples, m)  # ε = 0 (no allocation)    [N, S, m]
            z = _solve_rows(spec, theta, "forward pass")  # z = MAP(θ)                   [N, 1, m]
            z = z.expand(n, samples, m)  # the S samples coincide                     [N, S, m]
        else:
            eps = spec.noise.sample(
                (n, samples, m), device=theta.device, dtype=theta.dtype, generator=spec.generator
            )  # ε ~ ρ(ε), drawn on θ's device                                          [N, S, m]
            if spec.noise_sign < 0:
                eps = eps.neg_()  # noise on the costs c + ε of a "min" oracle: θ-space −ε
            z = _solve_rows(spec, theta + eps, "forward pass")  # z = MAP(θ + ε)         [N, S, m]
        return z.reshape(*lead, samples, m), eps

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[torch.Tensor, torch.Tensor]) -> None:
        weights, spec = inputs
        z, eps = output
        ctx.spec, ctx.sign = spec, sense_sign(spec.oracle)
        ctx.lead, ctx.m = weights.shape[:-1], weights.shape[-1]
        ctx.mark_non_differentiable(eps)
        ctx.save_for_backward(weights.detach(), eps, z)

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad_out: torch.Tensor, _grad_eps: Any) -> tuple[torch.Tensor, None]:
        spec: _Spec = ctx.spec
        weights, eps, z = ctx.saved_tensors
        n, samples, m = eps.shape
        theta = (ctx.sign * weights).reshape(n, 1, m)  # θ   [N, 1, m]
        z = z.reshape(n, samples, m)  # z = MAP(θ + ε)   [N, S, m]
        grad_z = grad_out.reshape(n, samples, m).to(theta.dtype)  # ∇z L                    [N, S, m]
        # Rows with a NaN/inf upstream gradient get a NaN gradient (as autograd would propagate it, and
        # as AMP's GradScaler expects); they are solved with ∇zL = 0 so no solver sees NaN.
        finite = torch.isfinite(grad_z).flatten(1).all(dim=1)  # [N]   no host sync
        grad_z = torch.where(finite[:, None, None], grad_z, torch.zeros_like(grad_z))
        eps_target = eps if spec.target_noise_scale == 1.0 else eps * spec.target_noise_scale

        def solve(theta_batch: torch.Tensor) -> torch.Tensor:
            return _solve_rows(spec, theta_batch, "target MAP of the backward pass")

        grad_theta = spec.rule.estimate(theta, eps_target, z, grad_z, solve)  # ∇θ L   [N, m]
        if grad_theta.device.type == "cpu" or not isinstance(spec.oracle, TorchOracle):
            warn_if_mostly_zero(spec.rule, grad_theta, grad_z, spec.warn_state)  # type: ignore[arg-type]
        grad_theta = torch.where(finite[:, None], grad_theta, torch.full_like(grad_theta, float("nan")))
        grad_weights = ctx.sign * grad_theta  # back to the oracle's sense (∇c = −∇θ)
        return grad_weights.reshape(*ctx.lead, m).to(grad_out.dtype), None

    @staticmethod
    def vmap(
        info: Any, in_dims: tuple[int | None, None], weights: torch.Tensor, spec: _Spec
    ) -> tuple[tuple[torch.Tensor, torch.Tensor], tuple[int, int]]:
        """`torch.func.vmap`: the mapped dimension is one more leading dimension of the batch."""
        dim = in_dims[0]
        if dim is None:  # not mapped: one call, broadcast by the caller
            weights = weights.unsqueeze(0).expand(info.batch_size, *weights.shape)
            dim = 0
        z, eps = PerturbAndMAP.apply(weights.movedim(dim, 0), spec)
        return (z, eps.reshape(info.batch_size, -1, *eps.shape[1:])), (0, 0)


def _is_vmapped(tensor: torch.Tensor) -> bool:
    """True for a `torch.func.vmap` batched tensor (no data-dependent control flow allowed)."""
    is_batched = getattr(getattr(torch._C, "_functorch", None), "is_batchedtensor", None)
    return bool(is_batched(tensor)) if is_batched is not None else False


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
        [`TorchOracle`][imle_solvers.TorchOracle] on an accelerator, where the check would cost a host
        synchronisation.
    noise_on
        ``"theta"`` (default): ``MAP(θ + ε)``, the Gumbel-max direction of the paper. ``"costs"``: for a
        ``"min"`` oracle, perturb the costs, ``argmin ⟨c + ε, z⟩`` (PyEPO's and AI-MLE's convention);
        identical to ``"theta"`` for a ``"max"`` oracle.
    target_noise_scale
        Multiplier of ε in the backward's target MAP, ``MAP(θ' + scale·ε)`` (torch-imle's
        ``target_noise_temperature`` divided by its ``noise_temperature``). Default 1: the same ε.
    """

    rule: GradientRule

    def __init__(
        self,
        oracle: MapOracle,
        noise: NoiseDistribution,
        rule: GradientRule,
        *,
        samples: int = 1,
        pool: BatchSolver | None = None,
        generator: torch.Generator | None = None,
        check_finite: bool | None = None,
        noise_on: NoiseOn = "theta",
        target_noise_scale: float = 1.0,
    ) -> None:
        super().__init__()
        check_oracle(oracle)
        check_samples(samples)
        one_of("noise_on", noise_on, ("theta", "costs"))
        non_negative("target_noise_scale", target_noise_scale)
        self.oracle = oracle
        self.noise = noise.resolve(oracle)
        self.__dict__["rule"] = rule  # not registered here: IMLE registers a module target as .target
        self.samples = int(samples)
        self.pool = pool
        self.generator = generator
        self.check_finite = check_finite
        self.noise_on: NoiseOn = noise_on
        self.target_noise_scale = float(target_noise_scale)
        self._warn_state: dict[str, bool] = {}

    def _validate(self, weights: torch.Tensor) -> None:
        if not isinstance(weights, torch.Tensor):
            raise InvalidWeightsError(
                f"{type(self).__name__} takes a torch.Tensor of weights, got {type(weights).__name__}; "
                "convert with torch.as_tensor(...)"
            )
        check = self.check_finite
        if check is None:
            check = not (isinstance(self.oracle, TorchOracle) and weights.device.type != "cpu")
        if _is_vmapped(weights):
            check = False  # no data-dependent check under vmap: host oracles validate each row
        check_weights(weights, self.oracle, check_finite=check)

    def _spec(self, training: bool) -> _Spec:
        if not training:
            return _Spec(self.oracle, NoNoise(), self.rule, 1, self.pool, None)
        noise_sign = -1.0 if self.noise_on == "costs" and self.oracle.sense == "min" else 1.0
        return _Spec(
            self.oracle,
            self.noise,
            self.rule,
            self.samples,
            self.pool,
            self.generator,
            noise_sign,
            self.target_noise_scale,
            self._warn_state,
        )

    def sample_states(self, weights: torch.Tensor) -> torch.Tensor:
        """``(..., m)`` weights → ``(..., S, m)`` perturbed MAP states (noise-free MAP in ``eval()``)."""
        self._validate(weights)
        z, _ = PerturbAndMAP.apply(weights, self._spec(self.training))
        if self.training:
            return z  # type: ignore[no-any-return]
        return z.expand(*z.shape[:-2], self.samples, z.shape[-1])  # z = MAP(θ)   [..., S, m]

    def extra_repr(self) -> str:
        return f"oracle={self.oracle!r}, noise={self.noise!r}, samples={self.samples}"


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
        Target distribution. Default [`RelativeTarget`][imle_solvers.RelativeTarget]: a PID target
        (eq. 8) whose step is relative to θ + ε, so the gradient is *equivariant to the loss scale*:
        ``grad(α·L) = α·grad(L)`` with the same noise, under ``.mean()`` as under ``.sum()``.
        [`PerturbedTarget`][imle_solvers.PerturbedTarget] is the paper's fixed λ (scale-dependent);
        [`OptimalTarget`][imle_solvers.OptimalTarget] is eq. 10;
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
    check_finite, noise_on, target_noise_scale
        See [`PerturbAndMAPLayer`][imle_solvers.imle.PerturbAndMAPLayer].

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
        target = RelativeTarget() if target is None else target
        if not isinstance(target, TargetDistribution):
            raise TypeError(f"target must be a TargetDistribution, got {type(target).__name__}")
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

    Parameters
    ----------
    weights
        ``(..., m)`` weights in the oracle's sense.
    oracle, noise, target, samples, pool, generator, check_finite, noise_on, target_noise_scale
        As for [`IMLE`][imle_solvers.IMLE].

    Returns
    -------
    torch.Tensor
        ``(..., m)`` states for ``S = 1``, ``(..., S, m)`` otherwise; same device and dtype as ``weights``.
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
    return layer(weights)  # type: ignore[no-any-return]
