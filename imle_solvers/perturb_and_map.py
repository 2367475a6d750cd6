"""Perturb-and-MAP: the one autograd function and the layer base shared by every estimator.

One `torch.autograd.Function`, [`PerturbAndMAP`][imle_solvers.perturb_and_map.PerturbAndMAP], and one
`nn.Module` base, [`PerturbAndMAPLayer`][imle_solvers.perturb_and_map.PerturbAndMAPLayer], are defined
here and shared by every estimator of the library ([`IMLE`][imle_solvers.IMLE] in ``imle.py``; STE,
blackbox and perturbed optimizers in ``estimators.py``): they differ only in the noise drawn in the
forward pass and in the *gradient rule* applied in the backward pass (paper, Algorithm 1 and eq. 7).

Forward (per row of θ, S samples):

```text
ε ~ ρ(ε)                      [N, S, m]
z = MAP(θ + ε)                [N, S, m]     one batched oracle / pool call
```

Backward (gradient rule, e.g. a [`TargetDistribution`][imle_solvers.TargetDistribution]):

```text
θ' = θ − λ ∇z L               [N, S, m]
∇θ L ≈ Σ_S [z − MAP(θ' + ε)] / λ          one batched oracle / pool call
```

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

from ._checks import instance_of, non_negative, one_of
from .errors import ImleSolversError, InvalidWeightsError, NegativeCycleError
from .noise import NoiseDistribution, NoNoise
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
from .target import Solve, warn_if_mostly_zero

__all__ = ["GradientRule", "NoiseOn", "PerturbAndMAP", "PerturbAndMAPLayer"]

NoiseOn = Literal["theta", "costs"]


class GradientRule(Protocol):
    """What the backward pass asks of an estimator (targets implement it, see ``target.py``).

    References
    ----------
    Niepert, Minervini & Franceschi, "Implicit MLE", NeurIPS 2021, eq. 7, <https://arxiv.org/abs/2106.01798>.
    """

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
    multiplicative_shift: float | None = None  # set: MAP(θ ⊙ exp(ε − shift)) instead of MAP(θ + ε)


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
    flat = theta_batch.reshape(n * per_row, m)  # [N·S', m]
    try:
        if _under_functorch():  # a backward under torch.func: wrapped tensors have no storage to read
            states = _TransformedSolve.apply(flat, spec.oracle, spec.pool)
        else:
            states = map_solve(spec.oracle, flat, spec.pool)
    except ImleSolversError as err:
        raise _rows_to_user(err, per_row, where) from None
    return states.view(n, per_row, m)


class _TransformedSolve(torch.autograd.Function):
    """`map_solve` inside a `torch.func` transform; under vmap, each vmapped dimension becomes more rows
    of ONE solver call.

    The backward pass of a layer runs inside the transform (``grad``; under vmap in ``jacrev`` and
    ``vmap(grad(...))``). A host oracle cannot read a wrapped tensor (it has no storage) and a device
    oracle would be looped by vmap's fallback; as an autograd function this one is handed the unwrapped
    tensors, and its vmap rule solves the rows of every vmapped level together. Not differentiable
    (states are piecewise constant in θ).
    """

    @staticmethod
    def forward(theta: torch.Tensor, oracle: MapOracle, pool: BatchSolver | None) -> torch.Tensor:
        return map_solve(oracle, theta, pool)  # MAP(θ)   [N, m]

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
        ctx.mark_non_differentiable(output)

    @staticmethod
    def vmap(
        info: Any, in_dims: tuple[int, None, None], theta: torch.Tensor, oracle: MapOracle, pool: Any
    ) -> tuple[torch.Tensor, int]:
        # θ is the only tensor input, so vmap calls this rule only when θ is vmapped (in_dims[0] set)
        batch = theta.movedim(in_dims[0], 0)  # [V, N, m]
        states = _TransformedSolve.apply(batch.reshape(-1, batch.shape[-1]), oracle, pool)  # [V·N, m]
        return states.view(batch.shape), 0


class PerturbAndMAP(torch.autograd.Function):
    """``z = MAP(θ + ε)`` with a pluggable backward rule; weights ``(..., m)`` → z ``(..., S, m)``.

    Returns ``(z, ε)``; ε (θ-space, ``[N, S, m]``) is not differentiable. Works under
    `torch.func.grad` and `torch.func.vmap` (the vmapped dimension becomes one more leading dimension).

    References
    ----------
    Papandreou & Yuille, "Perturb-and-MAP Random Fields: Using Discrete Optimization to Learn and Sample from
    Energy Models", ICCV 2011.

    Niepert, Minervini & Franceschi, "Implicit MLE", NeurIPS 2021, Algorithm 1 and eq. 7,
    <https://arxiv.org/abs/2106.01798>.
    """

    @staticmethod
    def forward(weights: torch.Tensor, spec: _Spec) -> tuple[torch.Tensor, torch.Tensor]:
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
            if spec.multiplicative_shift is not None:  # sign-preserving: the same for costs and θ
                factor = torch.exp(eps - spec.multiplicative_shift)  # exp(σZ − σ²/2), E = 1   [N, S, m]
                z = _solve_rows(spec, theta * factor, "forward pass")  # z = MAP(θ ⊙ e^(σZ−σ²/2))
            else:
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
        if n == 0:  # an empty batch: an empty gradient, and stateful targets see no update
            return grad_out.new_zeros(*ctx.lead, m), None
        if _under_vmap():
            _refuse_stateful_rule_under_vmap(spec.rule)
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
        host_read_is_free = grad_theta.device.type == "cpu" or not isinstance(spec.oracle, TorchOracle)
        if host_read_is_free and not _under_vmap():
            warn_if_mostly_zero(spec.rule, theta, eps_target, grad_z, grad_theta, spec.warn_state)  # type: ignore[arg-type]
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


def _interpreters() -> list[Any]:
    """The active `torch.func` transforms, innermost last (empty outside any transform).

    Empty while `torch.compile` traces: Dynamo cannot trace the interpreter stack (a graph break and a
    warning), and the eager checks it guards are what the compiled code ran before.
    """
    functorch = getattr(torch._C, "_functorch", None)
    if functorch is None or torch.compiler.is_compiling():
        return []
    return list(functorch.get_interpreter_stack() or ())


def _under_functorch() -> bool:
    """True inside any `torch.func` transform (grad, vjp, jacrev, vmap…)."""
    return bool(_interpreters())


def _under_vmap() -> bool:
    """True inside a `torch.func.vmap` (also one that `jacrev` or ``vmap(grad(...))`` opened).

    Under vmap no value may be read on the host (``.item()``, ``bool(tensor)``, ``.tolist()``), so the
    finiteness check of the input and the zero-gradient warning are skipped there; a host oracle still
    validates every row it solves.
    """
    vmap = torch._C._functorch.TransformType.Vmap
    return any(level.key() == vmap for level in _interpreters())


def _refuse_stateful_rule_under_vmap(rule: GradientRule) -> None:
    """A target that adapts its state in every backward pass has no per-sample meaning under vmap."""
    from .adaptive import AdaptiveTarget, RowAdaptiveTarget  # here: adaptive imports the targets

    if isinstance(rule, (AdaptiveTarget, RowAdaptiveTarget)):
        raise RuntimeError(
            f"{type(rule).__name__} adapts its state in every backward pass and does not support "
            "torch.func.vmap (per-sample gradients, jacrev); use the default AutoTarget() or "
            "RelativeTarget() there"
        )


class PerturbAndMAPLayer(nn.Module):
    """Shared machinery of every perturb-and-MAP layer (I-MLE, STE, blackbox, perturbed optimizer).

    Every constructor option is an attribute of the same name, and assigning it after construction has
    the effect of passing it to the constructor (it is checked the same way): ``layer.samples = 4``,
    ``layer.noise = Gumbel()``. Options an estimator does not take (a blackbox has no noise) are
    read-only on it.

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
        synchronisation, and inside `torch.func.vmap`, where no value can be read on the host.
    noise_on
        ``"theta"`` (default): ``MAP(θ + ε)``, the Gumbel-max direction of the paper. ``"costs"``: for a
        ``"min"`` oracle, perturb the costs, ``argmin ⟨c + ε, z⟩`` (PyEPO's and AI-MLE's convention);
        identical to ``"theta"`` for a ``"max"`` oracle.
    target_noise_scale
        Multiplier of ε in the backward's target MAP, ``MAP(θ' + scale·ε)`` (torch-imle's
        ``target_noise_temperature`` divided by its ``noise_temperature``). Default 1: the same ε.

    Raises
    ------
    TypeError
        For an option of the wrong type (a class where an instance belongs, e.g. ``Gumbel`` for
        ``Gumbel()``).
    ValueError
        For an option out of its range (``samples=0``, ``noise_on="both"``).

    References
    ----------
    Niepert, Minervini & Franceschi, "Implicit MLE", NeurIPS 2021, Algorithm 1 and eq. 7,
    <https://arxiv.org/abs/2106.01798>.
    """

    _fixed: frozenset[str] = frozenset()
    """Options of the base class that this estimator does not take: read-only once it is built."""

    _oracle: MapOracle
    _noise: NoiseDistribution
    _noise_given: NoiseDistribution
    _samples: int
    _pool: BatchSolver | None
    _generator: torch.Generator | None
    _check_finite: bool | None
    _noise_on: NoiseOn
    _target_noise_scale: float

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
        self.oracle = oracle
        self.noise = noise
        self.__dict__["_rule"] = rule  # not registered here: IMLE registers a module target as .target
        self.samples = samples
        self.pool = pool
        self.generator = generator
        self.check_finite = check_finite
        self.noise_on = noise_on
        self.target_noise_scale = target_noise_scale
        self._warn_state: dict[str, bool] = {}
        self._built = True

    def __setattr__(self, name: str, value: Any) -> None:
        # Options are properties; route every assignment through them, module-valued ones included
        # (nn.Module.__setattr__ would register a module without calling the property's setter).
        option = getattr(type(self), name, None)
        if not isinstance(option, property):
            super().__setattr__(name, value)
            return
        if option.fset is None or (name in self._fixed and self.__dict__.get("_built", False)):
            raise AttributeError(
                f"{type(self).__name__}.{name} is read-only: it is not an option of {type(self).__name__}"
            )
        option.fset(self, value)

    @property
    def oracle(self) -> MapOracle:
        """The MAP oracle. Assigning another one resolves the noise against it again."""
        return self._oracle

    @oracle.setter
    def oracle(self, oracle: MapOracle) -> None:
        check_oracle(oracle)
        given: NoiseDistribution | None = self.__dict__.get("_noise_given")
        if given is not None:
            self._noise = given.resolve(oracle)  # e.g. SumOfGamma(k=None) takes the new k
        self._oracle = oracle

    @property
    def noise(self) -> NoiseDistribution:
        """ρ(ε), resolved against the oracle (``SumOfGamma()`` shows the ``k`` it took)."""
        return self._noise

    @noise.setter
    def noise(self, noise: NoiseDistribution) -> None:
        instance_of("noise", noise, NoiseDistribution)
        self._noise = noise.resolve(self.oracle)
        self._noise_given = noise

    @property
    def rule(self) -> GradientRule:
        """The backward gradient rule (for [`IMLE`][imle_solvers.IMLE], its target)."""
        return self.__dict__["_rule"]

    @property
    def samples(self) -> int:
        """S, the number of perturb-and-MAP samples per row."""
        return self._samples

    @samples.setter
    def samples(self, samples: int) -> None:
        self._samples = check_samples(samples)

    @property
    def pool(self) -> BatchSolver | None:
        """The [`SolverPool`][imle_solvers.pool.SolverPool] (anything with ``solve_batch``) or ``None``."""
        return self._pool

    @pool.setter
    def pool(self, pool: BatchSolver | None) -> None:
        if pool is not None and not callable(getattr(pool, "solve_batch", None)):
            raise TypeError(
                "pool must be a SolverPool (anything with solve_batch(oracle, weights)) or None, "
                f"got {type(pool).__name__}"
            )
        self._pool = pool

    @property
    def generator(self) -> torch.Generator | None:
        """The `torch.Generator` of the noise, or ``None`` for torch's default one."""
        return self._generator

    @generator.setter
    def generator(self, generator: torch.Generator | None) -> None:
        self._generator = instance_of("generator", generator, torch.Generator, optional=True)

    @property
    def check_finite(self) -> bool | None:
        """Whether the weights are checked for NaN/inf (``None``: wherever that costs no host sync)."""
        return self._check_finite

    @check_finite.setter
    def check_finite(self, check: bool | None) -> None:
        if check is not None and not isinstance(check, bool):
            raise TypeError(f"check_finite must be True, False or None, got {check!r}")
        self._check_finite = check

    @property
    def noise_on(self) -> NoiseOn:
        """``"theta"`` or ``"costs"``: where the noise is added for a ``"min"`` oracle."""
        return self._noise_on

    @noise_on.setter
    def noise_on(self, noise_on: NoiseOn) -> None:
        self._noise_on = one_of("noise_on", noise_on, ("theta", "costs"))

    @property
    def target_noise_scale(self) -> float:
        """Multiplier of ε in the backward's target MAP."""
        return self._target_noise_scale

    @target_noise_scale.setter
    def target_noise_scale(self, scale: float) -> None:
        self._target_noise_scale = non_negative("target_noise_scale", scale)

    def _validate(self, weights: torch.Tensor) -> None:
        if not isinstance(weights, torch.Tensor):
            raise InvalidWeightsError(
                f"{type(self).__name__} takes a torch.Tensor of weights, got {type(weights).__name__}; "
                "convert with torch.as_tensor(...)"
            )
        check = self.check_finite
        if check is None:
            check = not (isinstance(self.oracle, TorchOracle) and weights.device.type != "cpu")
        if _under_vmap():
            check = False  # no host read under vmap: host oracles validate each row they solve
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
            self._multiplicative_shift(),
        )

    def _multiplicative_shift(self) -> float | None:
        """``None``: additive noise ``θ + ε``; a number ``s``: multiplicative ``θ ⊙ exp(ε − s)``."""
        return None

    def sample_states(self, weights: torch.Tensor) -> torch.Tensor:
        """``(..., m)`` weights → ``(..., S, m)`` perturbed MAP states (noise-free MAP in ``eval()``)."""
        self._validate(weights)
        if _under_vmap() and self.training:
            _refuse_stateful_rule_under_vmap(self.rule)
        z, _ = PerturbAndMAP.apply(weights, self._spec(self.training))
        if self.training:
            return z
        return z.expand(*z.shape[:-2], self.samples, z.shape[-1])  # z = MAP(θ)   [..., S, m]

    def extra_repr(self) -> str:
        return f"oracle={self.oracle!r}, noise={self.noise!r}, samples={self.samples}"
