"""The L2-regularised optimiser over the oracle's polytope, computed by away-step Frank-Wolfe.

``ŷ_λ(θ) = argmax_{μ ∈ conv(C)} ⟨θ, μ⟩ − (λ/2)‖μ‖²``, the Euclidean projection of ``θ/λ`` onto the convex
hull of the states (Dalle et al. 2022, sec. 2.3; Blondel et al. 2020): unique, inside ``conv(C)``,
continuous in θ. The MAP oracle is the linear minimisation oracle of Frank-Wolfe, so nothing but the
oracle is needed:

```text
μ₀ = MAP(θ/λ)
v  = MAP(θ/λ − μ)                      Frank-Wolfe vertex: one batched solve of the rows not converged
a  = argmax_{active w} ⟨μ − θ/λ, w⟩    away vertex
μ ← μ + γ d,  d = v − μ or μ − a       exact line search, active weights updated
until the Frank-Wolfe gap ⟨μ − θ/λ, μ − v⟩ < tol
```

Its Jacobian is the orthogonal projector onto the affine hull of the final active vertices, divided by λ
([`RegularizedOptimizer`][imle_solvers.RegularizedOptimizer]); its Fenchel-Young loss has the gradient
``ŷ_λ(θ) − y`` ([`RegularizedFenchelYoungLoss`][imle_solvers.RegularizedFenchelYoungLoss]).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from ._checks import non_negative, positive, positive_int
from .errors import ImleSolversError
from .losses import Reduction, _check_reduction, _reduce, _states
from .oracle import BatchSolver, MapOracle, check_oracle, check_weights, map_solve, sense_sign

__all__ = ["RegularizedFenchelYoungLoss", "RegularizedOptimizer", "frank_wolfe"]

Solve = Callable[[torch.Tensor], torch.Tensor]


@torch.no_grad()
def frank_wolfe(
    target: torch.Tensor, solve: Solve, *, max_iter: int = 10_000, tol: float = 1e-6
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Away-step Frank-Wolfe for ``argmin_{μ ∈ conv(C)} ½‖μ − target‖²``, batched over rows.

    Parameters
    ----------
    target
        ``(N, m)`` points to project (θ/λ).
    solve
        ``MAP``: ``(R, m)`` θ-space scores → ``(R, m)`` states (the rows still running, one call per step).
    max_iter
        Most Frank-Wolfe steps.
    tol
        A row stops once its Frank-Wolfe gap is below ``tol``.

    Returns
    -------
    tuple of torch.Tensor
        ``μ`` ``(N, m)``, the active vertices ``(N, W, m)`` and their convex weights ``(N, W)``
        (``W = 2m + 2`` slots; unused slots have weight 0).

    References
    ----------
    Lacoste-Julien & Jaggi, "On the Global Linear Convergence of Frank-Wolfe Optimization Variants",
    NeurIPS 2015, Algorithm 1, <https://arxiv.org/abs/1511.05932>.
    """
    n, m = target.shape
    width = 2 * m + 2  # Carathéodory: the support needs at most m + 1 vertices
    vertices = target.new_zeros(n, width, m)  # active vertices   [N, W, m]
    weights = target.new_zeros(n, width)  # their convex weights   [N, W]
    norms = target.new_zeros(n, width)  # ‖vertex‖²   [N, W]
    v0 = solve(target)  # μ₀ = MAP(θ/λ)   [N, m]
    vertices[:, 0], weights[:, 0], norms[:, 0] = v0, 1.0, (v0 * v0).sum(-1)
    mu = v0.clone()  # [N, m]
    running = torch.arange(n, device=target.device)  # rows whose gap is still ≥ tol
    for _ in range(max_iter):
        if running.numel() == 0:
            break
        t, x, verts, wts = target[running], mu[running], vertices[running], weights[running]
        r = torch.arange(len(running), device=target.device)
        grad = x - t  # ∇ ½‖μ − θ/λ‖²   [R, m]
        v = solve(t - x)  # Frank-Wolfe vertex MAP(θ/λ − μ)   [R, m]
        gap_fw = (grad * (x - v)).sum(-1)  # [R]
        scores = torch.einsum("rwm,rm->rw", verts, grad).masked_fill(wts <= 0, float("-inf"))
        away = scores.argmax(-1)  # the active vertex most against the descent   [R]
        v_away, alpha = verts[r, away], wts[r, away]
        gap_away = (grad * (v_away - x)).sum(-1)  # [R]
        going = gap_fw >= tol
        if not bool(going.any()):
            break
        use_fw = gap_fw >= gap_away
        direction = torch.where(use_fw[:, None], v - x, x - v_away)  # [R, m]
        gap = torch.where(use_fw, gap_fw, gap_away)
        gamma_max = torch.where(use_fw, torch.ones_like(alpha), alpha / (1.0 - alpha).clamp(min=1e-12))
        denom = (direction * direction).sum(-1).clamp(min=1e-12)
        gamma = torch.minimum((gap / denom).clamp(min=0.0), gamma_max) * going.to(x.dtype)  # line search
        x = x + gamma[:, None] * direction
        wts = wts * torch.where(use_fw, 1.0 - gamma, 1.0 + gamma)[:, None]
        gamma_fw, gamma_away = gamma * use_fw, gamma * ~use_fw
        v_norm = (v * v).sum(-1)  # [R]
        dist = norms[running] - 2 * torch.einsum("rwm,rm->rw", verts, v) + v_norm[:, None]  # ‖w − v‖²
        same = (dist < 1e-6) & (wts > 0)  # v is already active   [R, W]
        has_match = same.any(-1)
        match = same.to(x.dtype).argmax(-1)
        free = wts <= 1e-12
        slot = torch.where(free.any(-1), free.to(x.dtype).argmax(-1), wts.argmin(-1))  # free or lightest
        add_new = ~has_match & use_fw & (gamma_fw > 0)
        wts[r, match] = wts[r, match] + gamma_fw * (has_match & use_fw).to(x.dtype)
        verts[r, slot] = torch.where(add_new[:, None], v, verts[r, slot])
        row_norms = norms[running]
        row_norms[r, slot] = torch.where(add_new, v_norm, row_norms[r, slot])
        wts[r, slot] = torch.where(add_new, gamma_fw, wts[r, slot])
        wts[r, away] = wts[r, away] - gamma_away
        wts = wts.clamp(min=0.0)
        wts = torch.where(wts < 1e-12, torch.zeros_like(wts), wts)
        mu[running], vertices[running], weights[running], norms[running] = x, verts, wts, row_norms
        running = running[going]
    return mu, vertices, weights


class _RegularizedFunction(torch.autograd.Function):
    """``μ = ŷ_λ(θ)`` forward; backward: the projector onto the active vertices' affine hull, over λ."""

    @staticmethod
    def forward(ctx: Any, weights: torch.Tensor, layer: RegularizedOptimizer) -> torch.Tensor:
        sign, m = sense_sign(layer.oracle), layer.oracle.n_vars
        scale = sign / layer.lam  # θ/λ = ±weights/λ
        mu, vertices, active = layer._project(scale * weights.detach().reshape(-1, m))
        ctx.save_for_backward(vertices, active)
        ctx.scale, ctx.shape = scale, weights.shape
        return mu.reshape(weights.shape)

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor, None]:
        vertices, active = ctx.saved_tensors
        g = grad_out.reshape(vertices.shape[0], -1)  # [N, m]
        on = (active > 0).to(vertices.dtype)  # active slots   [N, W]
        count = on.sum(-1, keepdim=True).clamp(min=1.0)
        centre = (vertices * on[..., None]).sum(-2) / count  # mean active vertex   [N, m]
        centred = (vertices - centre[:, None]) * on[..., None]  # V − v̄ on active rows   [N, W, m]
        gram = centred @ centred.transpose(-1, -2)  # [N, W, W]
        ridge = gram.diagonal(dim1=-2, dim2=-1).amax(-1, keepdim=True).clamp(min=1.0) * 1e-6
        gram.diagonal(dim1=-2, dim2=-1).add_(ridge)  # rank-deficient Gram: a small ridge
        coef = torch.linalg.solve(gram, centred @ g[..., None])  # [N, W, 1]
        projected = (centred.transpose(-1, -2) @ coef).squeeze(-1)  # P g   [N, m]
        return (ctx.scale * projected).reshape(ctx.shape), None


class _FrankWolfeLayer(nn.Module):
    def __init__(
        self, oracle: MapOracle, lam: float, max_iter: int, tol: float, pool: BatchSolver | None
    ) -> None:
        super().__init__()
        self.oracle = check_oracle(oracle)
        self.lam = float(positive("lam", lam))
        self.max_iter = positive_int("max_iter", max_iter)
        self.tol = float(non_negative("tol", tol))
        self.pool = pool
        self.solves = 0
        """Oracle rows solved so far (every Frank-Wolfe step solves the rows that have not converged)."""

    def _project(self, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        def solve(theta: torch.Tensor) -> torch.Tensor:
            self.solves += theta.shape[0]
            try:
                return map_solve(self.oracle, theta, self.pool)
            except ImleSolversError as err:
                err.message = f"{err.message} (a Frank-Wolfe step)"
                raise

        return frank_wolfe(target, solve, max_iter=self.max_iter, tol=self.tol)

    def extra_repr(self) -> str:
        return f"oracle={self.oracle!r}, lam={self.lam}, max_iter={self.max_iter}, tol={self.tol}"


class RegularizedOptimizer(_FrankWolfeLayer):
    """The L2-regularised optimiser ``ŷ_λ(θ) = argmax_{μ ∈ conv(C)} ⟨θ, μ⟩ − (λ/2)‖μ‖²`` as a layer.

    Computed by away-step Frank-Wolfe with the MAP oracle as linear minimisation oracle
    ([`frank_wolfe`][imle_solvers.frank_wolfe.frank_wolfe]); differentiated by the implicit function
    theorem on the optimal face: ``∂ŷ/∂θ = P / λ``, ``P`` the orthogonal projector onto the affine hull of
    the final active vertices (Dalle et al. 2022, sec. 2.3). Weights in the oracle's sense (``θ = −c`` for
    a ``"min"`` oracle). ``eval()`` returns ``MAP(θ)``, as the perturbed optimizer does.

    Parameters
    ----------
    oracle
        The MAP oracle.
    lam
        λ > 0, the strength of the regulariser (PyEPO's ``lambd``).
    max_iter
        Most Frank-Wolfe steps per call.
    tol
        Frank-Wolfe gap at which a row stops.
    pool
        Optional [`SolverPool`][imle_solvers.pool.SolverPool] for the oracle calls of each step.

    References
    ----------
    Dalle, Baty, Bouvier & Parmentier, "Learning with Combinatorial Optimization Layers: a Probabilistic
    Approach", 2022, sec. 2.3, <https://arxiv.org/abs/2207.13513>.

    Blondel, Martins & Niculae, "Learning with Fenchel-Young Losses", JMLR 21, 2020,
    <https://arxiv.org/abs/1901.02324>.
    """

    def __init__(
        self,
        oracle: MapOracle,
        lam: float = 1.0,
        *,
        max_iter: int = 10_000,
        tol: float = 1e-6,
        pool: BatchSolver | None = None,
    ) -> None:
        super().__init__(oracle, lam, max_iter, tol, pool)

    def forward(self, weights: torch.Tensor) -> torch.Tensor:
        """``(..., m)`` weights → ``(..., m)`` regularised solutions (``MAP`` in ``eval()``)."""
        check_weights(weights, self.oracle)
        if not self.training:
            flat = sense_sign(self.oracle) * weights.detach().reshape(-1, self.oracle.n_vars)
            return map_solve(self.oracle, flat, self.pool).reshape(weights.shape)
        return _RegularizedFunction.apply(weights, self)


class _FenchelYoungFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, weights: torch.Tensor, value: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(grad)
        return value

    @staticmethod
    def backward(ctx: Any, grad_value: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        (grad,) = ctx.saved_tensors
        return grad * grad_value[..., None], None, None


class RegularizedFenchelYoungLoss(_FrankWolfeLayer):
    """The Fenchel-Young loss of the L2 regulariser over ``conv(C)`` (Blondel et al. 2020; Dalle et al.).

    ```text
    ℓ(θ; y) = Ω(y) + Ω*(θ) − ⟨θ, y⟩ = (λ/2)‖y‖² − (λ/2)‖ŷ_λ‖² + ⟨θ, ŷ_λ − y⟩ ≥ 0,
    ∇θ ℓ    = ŷ_λ(θ) − y,
    ```

    ``ŷ_λ`` computed by Frank-Wolfe as for [`RegularizedOptimizer`][imle_solvers.RegularizedOptimizer],
    ``y`` the optimal state ``z*(c)``. For a ``"min"`` oracle the gradient in cost space is ``y − ŷ_λ``.
    Takes PyEPO's call ``rfy(pred_cost, true_sol)``.

    Parameters
    ----------
    oracle
        The MAP oracle.
    lam
        λ > 0 (PyEPO's ``lambd``).
    max_iter
        Most Frank-Wolfe steps per call.
    tol
        Frank-Wolfe gap at which a row stops.
    pool
        Optional [`SolverPool`][imle_solvers.pool.SolverPool].
    reduction
        ``"mean"``, ``"sum"`` or ``"none"`` over instances.

    References
    ----------
    Blondel, Martins & Niculae, "Learning with Fenchel-Young Losses", JMLR 21, 2020,
    <https://arxiv.org/abs/1901.02324>.

    Dalle, Baty, Bouvier & Parmentier, "Learning with Combinatorial Optimization Layers: a Probabilistic
    Approach", 2022, <https://arxiv.org/abs/2207.13513>.
    """

    def __init__(
        self,
        oracle: MapOracle,
        lam: float = 1.0,
        *,
        max_iter: int = 10_000,
        tol: float = 1e-6,
        pool: BatchSolver | None = None,
        reduction: Reduction = "mean",
    ) -> None:
        super().__init__(oracle, lam, max_iter, tol, pool)
        self.reduction: Reduction = _check_reduction(reduction)

    def forward(self, weights_pred: torch.Tensor, optimal: torch.Tensor) -> torch.Tensor:
        """The loss of ``(..., m)`` predicted weights against optimal states of the same shape."""
        check_weights(weights_pred, self.oracle)
        y = _states("optimal", optimal, weights_pred)  # y   [N, m]
        sign, m = sense_sign(self.oracle), self.oracle.n_vars
        theta = sign * weights_pred.detach().reshape(-1, m)  # θ   [N, m]
        mu, _, _ = self._project(theta / self.lam)  # ŷ_λ = proj_conv(C)(θ/λ)   [N, m]
        half = 0.5 * self.lam
        value = half * (y * y).sum(-1) - half * (mu * mu).sum(-1) + (theta * (mu - y)).sum(-1)  # [N]
        out = _FenchelYoungFunction.apply(weights_pred.reshape(-1, m), value, sign * (mu - y))
        return _reduce(out.reshape(weights_pred.shape[:-1]), self.reduction)
