"""Losses and metrics for training through discrete structures (paper sec. 5; predict-then-optimize).

* [`hamming_loss`][imle_solvers.hamming_loss] — distance between states (paper sec. 5, Fact 1).
* [`regret`][imle_solvers.regret] — the decision quality of predicted weights under the true ones
  (Elmachtoub & Grigas).
* [`SPOPlusLoss`][imle_solvers.SPOPlusLoss] — the convex SPO+ surrogate of the regret (Elmachtoub &
  Grigas 2022).
* [`FenchelYoungLoss`][imle_solvers.FenchelYoungLoss] — the perturbed Fenchel-Young loss (Berthet et
  al. 2020).

All solving goes through `imle_solvers.oracle.map_solve`: one batched oracle (or pool) call per
pass. Weights are in the oracle's sense (costs for a ``"min"`` oracle, values for ``"max"``). Every
input tensor is checked before any solver runs: a wrong shape, dtype or a NaN raises
[`InvalidWeightsError`][imle_solvers.errors.InvalidWeightsError] (a ``ValueError``) naming the tensor and
its rows; nothing is broadcast.
"""

from __future__ import annotations

from typing import Any, Literal

import torch
from torch import nn

from ._checks import instance_of, one_of
from .errors import ImleSolversError, InvalidWeightsError
from .noise import NoiseDistribution, Normal
from .oracle import BatchSolver, MapOracle, check_oracle, check_samples, check_weights, map_solve, sense_sign

__all__ = ["FenchelYoungLoss", "SPOPlusLoss", "hamming_loss", "regret"]

Reduction = Literal["mean", "sum", "none"]


def _check_reduction(reduction: Reduction) -> Reduction:
    return one_of("reduction", reduction, ("mean", "sum", "none"))


def _reduce(values: torch.Tensor, reduction: Reduction) -> torch.Tensor:
    if reduction == "mean":
        return values.mean()
    if reduction == "sum":
        return values.sum()
    return values  # "none"


def hamming_loss(z: torch.Tensor, y: torch.Tensor, reduction: Reduction = "mean") -> torch.Tensor:
    """Hamming loss ``ℓ_H(z, y) = (1/m) Σ_i z_i(1 − y_i) + y_i(1 − z_i)`` (paper sec. 5, Fact 1).

    Parameters
    ----------
    z
        ``(..., m)`` predicted states (``(..., S, m)`` broadcasts against ``y`` of ``(..., 1, m)``).
    y
        ``(..., m)`` target states.
    reduction
        ``"mean"`` over all rows, ``"sum"``, or ``"none"`` for the per-row ``(...)`` values.

    References
    ----------
    Niepert, Minervini & Franceschi, "Implicit MLE", NeurIPS 2021, sec. 5 and Fact 1,
    <https://arxiv.org/abs/2106.01798>.
    """
    _check_reduction(reduction)
    per_row = (z * (1 - y) + y * (1 - z)).mean(dim=-1)  # ℓ_H per row   [...]
    return _reduce(per_row, reduction)


def _flat_pair(
    oracle: MapOracle, weights_pred: torch.Tensor, weights_true: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Validate two same-shape ``(..., m)`` weight tensors and flatten them to ``(N, m)``."""
    for name, w in (("weights_pred", weights_pred), ("weights_true", weights_true)):
        try:
            check_weights(w, oracle)
        except ImleSolversError as err:
            err.message = f"{name}: {err.message}"
            raise err.with_rows(err.rows) from None
    if weights_pred.shape != weights_true.shape:
        raise InvalidWeightsError(
            f"weights_true must have the shape of weights_pred {tuple(weights_pred.shape)}, "
            f"got {tuple(weights_true.shape)}"
        )
    m = oracle.n_vars
    return weights_pred.reshape(-1, m), weights_true.reshape(-1, m)


def _input_tensor(name: str, value: object, shapes: tuple[torch.Size, ...]) -> torch.Tensor:
    """``value``, detached, if it is a real tensor of one of ``shapes``.

    Never broadcast: a ``(m,)`` state against ``(B, m)`` weights is a mistake, not a shortcut.
    """
    if not isinstance(value, torch.Tensor):
        raise InvalidWeightsError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
    if value.shape not in shapes:
        wanted = " or ".join(str(tuple(shape)) for shape in shapes)
        raise InvalidWeightsError(f"{name} must have shape {wanted}, got {tuple(value.shape)}")
    if value.is_complex():
        raise InvalidWeightsError(f"{name} must be real, got {value.dtype}")
    return value.detach()


def _finite_rows(name: str, rows: torch.Tensor) -> torch.Tensor:
    """``rows`` (``(N, ...)``) if every entry is finite, else an error naming the bad rows."""
    finite = torch.isfinite(rows) if rows.dim() == 1 else torch.isfinite(rows).all(dim=1)  # [N]
    if not bool(finite.all()):
        bad = torch.nonzero(~finite).flatten().tolist()
        raise InvalidWeightsError(f"{name} contains NaN or inf", rows=bad)
    return rows


def _states(name: str, value: object, weights: torch.Tensor) -> torch.Tensor:
    """Given states (``optimal``, ``y``) of the weights' exact shape ``(..., m)``, as ``(N, m)`` floats."""
    states = _input_tensor(name, value, (weights.shape,))
    return _finite_rows(name, states.reshape(-1, weights.shape[-1]).to(weights.dtype))  # [N, m]


def _objectives(name: str, value: object, weights: torch.Tensor) -> torch.Tensor:
    """Given objective values of shape ``(...)`` or ``(..., 1)`` for ``(..., m)`` weights, as ``(N,)``."""
    lead = weights.shape[:-1]
    objective = _input_tensor(name, value, (lead, torch.Size((*lead, 1))))
    return _finite_rows(name, objective.reshape(-1).to(weights.dtype))  # [N]


def _solve_pair(
    oracle: MapOracle, first: torch.Tensor, second: torch.Tensor | None, names: tuple[str, str], pool: Any
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """MAP of ``first`` (and ``second``) in θ-space, one call; errors name the user's row and tensor."""
    n = first.shape[0]
    batch = first if second is None else torch.cat([first, second])  # [N or 2N, m]
    try:
        states = map_solve(oracle, batch, pool)
    except ImleSolversError as err:
        if err.rows:
            parts = sorted({r // n for r in err.rows})
            err.message = f"{err.message} (in {' and '.join(names[p] for p in parts)})"
            err.with_rows(sorted({r % n for r in err.rows}))
        raise
    return (states, None) if second is None else (states[:n], states[n:])


def regret(
    oracle: MapOracle,
    weights_pred: torch.Tensor,
    weights_true: torch.Tensor,
    *,
    normalized: bool = True,
    pool: BatchSolver | None = None,
    optimal: torch.Tensor | None = None,
) -> torch.Tensor:
    """Regret of deciding with predicted weights, measured with the true ones (SPO, Elmachtoub & Grigas).

    With ``ẑ = MAP(ĉ)`` and ``z* = MAP(c)`` (solved in the oracle's sense), the regret of an instance
    is ``⟨c, ẑ⟩ − ⟨c, z*⟩`` for a ``"min"`` oracle and ``⟨c, z*⟩ − ⟨c, ẑ⟩`` for ``"max"``: never
    negative. Normalised (PyEPO's ``pyepo.metric.regret``): ``Σ_i regret_i / Σ_i |⟨c_i, z*_i⟩|``.

    Parameters
    ----------
    oracle
        The MAP oracle.
    weights_pred
        ``(..., m)`` predicted weights ``ĉ``, in the oracle's sense.
    weights_true
        ``(..., m)`` true weights ``c``, in the oracle's sense.
    normalized
        Return the normalised total (a 0-dim tensor); otherwise the per-instance regrets ``(...)``.
    pool
        Optional [`SolverPool`][imle_solvers.pool.SolverPool].
    optimal
        Optional optimal states ``z*(c)`` (e.g. from a data set), of the shape of ``weights_true``;
        solved when omitted. Both solves otherwise go out in one batched call.

    Returns
    -------
    torch.Tensor
        Normalised regret (0-dim) or per-instance regrets, without gradient.

    Raises
    ------
    InvalidWeightsError
        Before any solve, for weights or ``optimal`` of a wrong shape or dtype, or with NaN/inf (naming
        the tensor and its rows).

    References
    ----------
    Elmachtoub & Grigas, "Smart 'Predict, then Optimize'", Management Science 68(1), 2022,
    <https://arxiv.org/abs/1710.08005>.
    """
    check_oracle(oracle)
    pred, true = _flat_pair(oracle, weights_pred, weights_true)
    pred, true = pred.detach(), true.detach()  # ĉ, c   [N, m]
    lead = weights_pred.shape[:-1]
    given = None if optimal is None else _states("optimal", optimal, weights_true)  # z*   [N, m]
    sign = sense_sign(oracle)
    names = ("the solve of weights_pred", "the solve of weights_true")
    if given is None:
        z_pred, z_opt = _solve_pair(oracle, sign * pred, sign * true, names, pool)  # ẑ, z*   [N, m] each
        assert z_opt is not None
        z_true = z_opt
    else:
        z_pred, _ = _solve_pair(oracle, sign * pred, None, names, pool)  # ẑ = MAP(ĉ)   [N, m]
        z_true = given
    obj_pred = (true * z_pred).sum(-1)  # ⟨c, ẑ⟩   [N]
    obj_true = (true * z_true).sum(-1)  # ⟨c, z*⟩  [N]
    per_row = -sign * (obj_pred - obj_true)  # min: ⟨c,ẑ⟩ − ⟨c,z*⟩; max: ⟨c,z*⟩ − ⟨c,ẑ⟩   [N]
    if not normalized:
        return per_row.reshape(lead)
    return per_row.sum() / obj_true.abs().sum().clamp_min(torch.finfo(per_row.dtype).tiny)


class _SPOPlusFunction(torch.autograd.Function):
    """SPO+ value and its subgradient in weight space (see [`SPOPlusLoss`][imle_solvers.SPOPlusLoss])."""

    @staticmethod
    def forward(
        ctx: Any,
        weights_pred: torch.Tensor,
        weights_true: torch.Tensor,
        z_true: torch.Tensor,
        z_spo: torch.Tensor,
        objective: torch.Tensor | None,
        sign: float,
    ) -> torch.Tensor:
        theta_hat, theta = sign * weights_pred, sign * weights_true  # θ-space   [N, m]
        # ℓ = ⟨2θ̂ − θ, MAP(2θ̂ − θ)⟩ − 2⟨θ̂, z*⟩ + ⟨θ, z*⟩           [N]
        value = ((2 * theta_hat - theta) * z_spo).sum(-1) - 2 * (theta_hat * z_true).sum(-1)
        # ⟨θ, z*⟩ = ±f*: the given optimal objective where there is one (as PyEPO uses it)
        value = value + ((theta * z_true).sum(-1) if objective is None else sign * objective)
        ctx.save_for_backward(z_true, z_spo)
        ctx.sign = sign
        return value

    @staticmethod
    def backward(ctx: Any, grad_value: torch.Tensor) -> tuple[torch.Tensor, None, None, None, None, None]:
        z_true, z_spo = ctx.saved_tensors
        grad_theta_hat = 2 * (z_spo - z_true)  # ∂ℓ/∂θ̂ = 2(MAP(2θ̂ − θ) − z*)   [N, m]
        grad = ctx.sign * grad_theta_hat * grad_value.unsqueeze(-1)  # ∂ℓ/∂weights = ±∂ℓ/∂θ̂
        return grad, None, None, None, None, None


class SPOPlusLoss(nn.Module):
    """The SPO+ loss of Elmachtoub & Grigas (2022, "Smart 'predict, then optimize'", eq. 7).

    For a ``"min"`` oracle with predicted costs ``ĉ``, true costs ``c`` and ``z*(·)`` the minimiser:

    ```text
    ℓ_SPO+(ĉ, c) = max_z ⟨c − 2ĉ, z⟩ + 2⟨ĉ, z*(c)⟩ − ⟨c, z*(c)⟩,
    ∂ℓ/∂ĉ        = 2 (z*(c) − z*(2ĉ − c)).
    ```

    In θ-space (``θ = ±weights``, maximise ``⟨θ, z⟩``) the same loss reads
    ``ℓ = max_z ⟨2θ̂ − θ, z⟩ − 2⟨θ̂, MAP(θ)⟩ + ⟨θ, MAP(θ)⟩`` with ``∂ℓ/∂θ̂ = 2(MAP(2θ̂ − θ) − MAP(θ))``; for a
    ``"max"`` oracle (values ``v̂``, ``v``; regret ``⟨v, z*⟩ − ⟨v, ẑ⟩``) this gives
    ``ℓ = max_z ⟨2v̂ − v, z⟩ − 2⟨v̂, z*(v)⟩ + ⟨v, z*(v)⟩`` and ``∂ℓ/∂v̂ = 2(z*(2v̂ − v) − z*(v))``. ℓ is
    convex in the prediction, ≥ 0, and an upper bound on the regret.

    Parameters
    ----------
    oracle
        The MAP oracle (weights in its sense).
    pool
        Optional [`SolverPool`][imle_solvers.pool.SolverPool].
    reduction
        ``"mean"``, ``"sum"`` or ``"none"`` over instances.

    Notes
    -----
    PyEPO's call ``spop(pred_cost, true_cost, true_sol, true_obj)`` works unchanged: the third and fourth
    arguments are the optimal states ``z*(c)`` and objectives ``⟨c, z*(c)⟩`` (shape ``(...)`` or
    ``(..., 1)``). Given objectives enter the value as ``⟨c, z*⟩`` does, so the loss equals PyEPO's
    ``SPOPlus`` on the same inputs; they do not change the gradient.

    References
    ----------
    Elmachtoub & Grigas, "Smart 'Predict, then Optimize'", Management Science 68(1), 2022,
    <https://arxiv.org/abs/1710.08005>.

    Tang & Khalil, "PyEPO: A PyTorch-based End-to-End Predict-then-Optimize Library for Linear and Integer
    Programming", 2022, <https://arxiv.org/abs/2206.14234>.
    """

    def __init__(
        self, oracle: MapOracle, *, pool: BatchSolver | None = None, reduction: Reduction = "mean"
    ) -> None:
        super().__init__()
        self.oracle = check_oracle(oracle)
        self.pool = pool
        self.reduction: Reduction = _check_reduction(reduction)

    def forward(
        self,
        weights_pred: torch.Tensor,
        weights_true: torch.Tensor,
        optimal: torch.Tensor | None = None,
        objective: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """SPO+ of ``(..., m)`` predicted vs true weights.

        Parameters
        ----------
        weights_pred
            ``(..., m)`` predicted weights ``ĉ`` (PyEPO's ``pred_cost``).
        weights_true
            ``(..., m)`` true weights ``c`` (PyEPO's ``true_cost``).
        optimal
            ``z*(c)`` of the same shape, if known (PyEPO's ``true_sol``); solved otherwise.
        objective
            ``⟨c, z*(c)⟩``, shape ``(...)`` or ``(..., 1)`` (PyEPO's ``true_obj``); needs ``optimal``.
        """
        if objective is not None and optimal is None:
            raise ValueError("objective (true_obj) needs optimal (true_sol): pass both or neither")
        pred, true = _flat_pair(self.oracle, weights_pred, weights_true)
        lead = weights_pred.shape[:-1]
        given = None if optimal is None else _states("optimal", optimal, weights_true)  # z*   [N, m]
        f_star = None if objective is None else _objectives("objective", objective, weights_true)  # [N]
        sign = sense_sign(self.oracle)
        theta_spo = sign * (2 * pred.detach() - true.detach())  # 2θ̂ − θ   [N, m]
        names = ("the solve of 2·weights_pred − weights_true", "the solve of weights_true")
        if given is None:  # one call: MAP(2θ̂ − θ), MAP(θ)   [N, m] each
            z_spo, z_opt = _solve_pair(self.oracle, theta_spo, sign * true.detach(), names, self.pool)
            assert z_opt is not None
            z_true = z_opt
        else:
            z_spo, _ = _solve_pair(self.oracle, theta_spo, None, names, self.pool)  # MAP(2θ̂ − θ)
            z_true = given
        value = _SPOPlusFunction.apply(pred, true.detach(), z_true, z_spo, f_star, sign)
        return _reduce(value.reshape(lead), self.reduction)

    def extra_repr(self) -> str:
        return f"oracle={self.oracle!r}"


class _FenchelYoungFunction(torch.autograd.Function):
    """Perturbed Fenchel-Young value with gradient ``E[MAP(θ + ε)] − y`` (θ-space)."""

    @staticmethod
    def forward(
        ctx: Any,
        weights_pred: torch.Tensor,
        value: torch.Tensor,
        grad_theta: torch.Tensor,
        sign: float,
    ) -> torch.Tensor:
        ctx.save_for_backward(grad_theta)
        ctx.sign = sign
        return value

    @staticmethod
    def backward(ctx: Any, grad_value: torch.Tensor) -> tuple[torch.Tensor, None, None, None]:
        (grad_theta,) = ctx.saved_tensors
        grad = ctx.sign * grad_theta * grad_value.unsqueeze(-1)
        return grad, None, None, None


class FenchelYoungLoss(nn.Module):
    """The perturbed Fenchel-Young loss of Berthet et al. (2020, sec. 4.1).

    With ``F_ε(θ) = E[max_z ⟨θ + ε, z⟩]`` (ε ~ ``noise``, by default ``σZ`` with ``Z ~ N(0, I)``):

    ```text
    ℓ_FY(θ; y) = F_ε(θ) − ⟨θ, y⟩            (up to the constant Ω(y), omitted)
    ∇θ ℓ_FY    = E[MAP(θ + ε)] − y ,
    ```

    estimated with ``samples`` perturbations (one batched solve). ``y`` is the target state (the
    optimal solution ``z*(c)``). For a ``"min"`` oracle θ = −ĉ, so the gradient in cost space is
    ``y − E[MAP(θ + ε)]``. The reported value is the Monte-Carlo estimate of ``F_ε(θ) − ⟨θ, y⟩``.

    With ``multiplicative=True`` the perturbation is the sign-preserving ``θ ⊙ f``,
    ``f = exp(σZ − σ²/2)`` (Dalle et al. 2022): ``F(θ) = E[max_z ⟨θ ⊙ f, z⟩]`` and
    ``∇θ ℓ = E[f ⊙ MAP(θ ⊙ f)] − y``.

    Parameters
    ----------
    oracle
        The MAP oracle (weights in its sense).
    sigma
        σ of the default Gaussian noise ``Normal(sigma)``, 1 when omitted.
    samples
        Number of perturbations M.
    noise
        Any [`NoiseDistribution`][imle_solvers.NoiseDistribution] instead of ``Normal(sigma)`` (not
        together with ``sigma``: the noise carries its own scale).
    multiplicative
        Perturb multiplicatively, ``θ ⊙ exp(σZ − σ²/2)`` (needs the Gaussian noise).
    pool
        Optional [`SolverPool`][imle_solvers.pool.SolverPool].
    generator
        Optional `torch.Generator` for the noise.
    reduction
        ``"mean"``, ``"sum"`` or ``"none"`` over instances.

    References
    ----------
    Berthet, Blondel, Teboul, Cuturi, Vert & Bach, "Learning with Differentiable Perturbed Optimizers",
    NeurIPS 2020, <https://arxiv.org/abs/2002.08676>.

    Dalle, Baty, Bouvier & Parmentier, "Learning with Combinatorial Optimization Layers: a Probabilistic
    Approach", 2022, sec. 3 (multiplicative perturbation), <https://arxiv.org/abs/2207.13513>.
    """

    def __init__(
        self,
        oracle: MapOracle,
        *,
        sigma: float | None = None,
        samples: int = 10,
        noise: NoiseDistribution | None = None,
        multiplicative: bool = False,
        pool: BatchSolver | None = None,
        generator: torch.Generator | None = None,
        reduction: Reduction = "mean",
    ) -> None:
        super().__init__()
        self.oracle = check_oracle(oracle)
        if noise is not None and sigma is not None:
            raise ValueError(f"pass sigma or noise, not both: the noise {noise!r} carries its own scale")
        if noise is None:
            noise = Normal(1.0 if sigma is None else sigma)  # ε = σZ, Z ~ N(0, I)
        self.noise = instance_of("noise", noise, NoiseDistribution).resolve(oracle)
        if not isinstance(multiplicative, bool):
            raise TypeError(f"multiplicative must be True or False, got {multiplicative!r}")
        if multiplicative and not isinstance(self.noise, Normal):
            raise ValueError(f"multiplicative=True needs Gaussian noise (sigma=), got {self.noise!r}")
        self.multiplicative = multiplicative
        self.samples = check_samples(samples)
        self.pool = pool
        self.generator = instance_of("generator", generator, torch.Generator, optional=True)
        self.reduction: Reduction = _check_reduction(reduction)

    def forward(self, weights_pred: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """FY loss of ``(..., m)`` predicted weights against target states ``y`` of the same shape."""
        check_weights(weights_pred, self.oracle)
        target = _states("y", y, weights_pred)  # y   [N, m]
        lead, m = weights_pred.shape[:-1], self.oracle.n_vars
        sign = sense_sign(self.oracle)
        pred = weights_pred.reshape(-1, m)
        theta = sign * pred.detach()  # θ   [N, m]
        n, s = theta.shape[0], self.samples
        eps = self.noise.sample((n, s, m), device=theta.device, dtype=theta.dtype, generator=self.generator)
        if self.multiplicative:
            assert isinstance(self.noise, Normal)
            factor = torch.exp(eps - 0.5 * self.noise.sigma**2)  # f = exp(σZ − σ²/2)   [N, S, m]
            perturbed = theta.unsqueeze(1) * factor  # θ ⊙ f   [N, S, m]
        else:
            factor = None
            perturbed = theta.unsqueeze(1) + eps  # θ + ε   [N, S, m]
        try:
            z = map_solve(self.oracle, perturbed.reshape(n * s, m), self.pool).view(n, s, m)  # MAP(θ+ε)
        except ImleSolversError as err:
            if err.rows and s > 1:
                err.with_rows(sorted({r // s for r in err.rows}))
            raise
        value = (perturbed * z).sum(-1).mean(1) - (theta * target).sum(-1)  # F̂_ε(θ) − ⟨θ, y⟩   [N]
        expected = z.mean(1) if factor is None else (z * factor).mean(1)  # E[MAP(θ+ε)] or E[f ⊙ MAP(θ⊙f)]
        grad_theta = expected - target  # ∇θ ℓ   [N, m]
        out = _FenchelYoungFunction.apply(pred, value, grad_theta, sign)
        return _reduce(out.reshape(lead), self.reduction)

    def extra_repr(self) -> str:
        extra = ", multiplicative=True" if self.multiplicative else ""
        return f"oracle={self.oracle!r}, noise={self.noise!r}, samples={self.samples}{extra}"
