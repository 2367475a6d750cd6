"""CaVE: align the predicted weights with the cone of the binding constraints at the true optimum.

For a 0/1 linear programme, ``y = z*(c)`` is optimal for every θ in the normal cone
``K(y) = {Σ_r λ_r a_r : λ ≥ 0}`` of the constraints ``a_r`` binding at ``y``
([`binding_constraints`][imle_solvers.adapters.binding.binding_constraints]). CaVE (Tang & Khalil 2024)
trains θ̂ (θ-space: ``−ĉ`` for a ``"min"`` oracle) towards that cone instead of towards ``y``:

```text
p   = argmin_{p ∈ K(y)} ‖p − θ̂‖²         a non-negative least squares in λ, solved per instance
ℓ   = 1 − cos(θ̂, p)                       (p fixed: the gradient flows through θ̂ only)
```

The projection is PyEPO's: Clarabel's interior-point method stopped after ``max_iter`` iterations (3, the
paper's CaVE+, keeps ``p`` inside the cone); with probability ``1 − solve_ratio`` per call, the paper's
CaVE-Hybrid replaces it by ``(1 − r) θ̂/‖θ̂‖ + r · mean_r a_r/‖a_r‖``.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from ._checks import in_range, positive_int
from .errors import InvalidWeightsError, require
from .losses import Reduction, _check_reduction, _reduce, _states
from .oracle import MapOracle, check_oracle, check_weights, sense_sign

__all__ = ["CaVELoss", "cone_projection"]


def cone_projection(theta: np.ndarray, normals: np.ndarray, max_iter: int = 3) -> np.ndarray:
    """``Σ λ_r a_r`` for ``λ ≈ argmin_{λ ≥ 0} ‖Σ λ_r a_r − θ‖²``, Clarabel stopped after ``max_iter``
    iterations (PyEPO's projection, extra ``cave``).

    Parameters
    ----------
    theta
        ``(m,)`` the point to project.
    normals
        ``(R, m)`` the cone's generators; zero rows (padding) are ignored. No generator: ``theta`` itself.
    max_iter
        Interior-point iterations (3: CaVE+; a few dozen: the converged projection).
    """
    rows = normals[np.abs(normals).sum(axis=1) > 1e-7]  # [R, m] without padding
    if len(rows) == 0:
        return np.asarray(theta, dtype=np.float64)
    r = rows.shape[0]
    clarabel: Any = require("clarabel", "cave")
    quad = _upper_csc(2.0 * (rows @ rows.T))  # ½λᵀPλ, P = 2AAᵀ (upper triangle)   [R, R]
    linear = -2.0 * (rows @ theta)  # q = −2Aθ   [R]
    minus_eye, zeros, cone = _nonnegative(r)
    solver = clarabel.DefaultSolver(quad, linear, minus_eye, zeros, cone, _settings(int(max_iter)))
    lam = np.asarray(solver.solve().x)  # λ ≥ 0 (−λ + s = 0, s ≥ 0)   [R]
    return lam @ rows  # p = Σ λ_r a_r   [m]


@functools.cache
def _settings(max_iter: int) -> Any:
    """Clarabel's settings of the projection (one object per ``max_iter``, never changed)."""
    clarabel: Any = require("clarabel", "cave")
    settings = clarabel.DefaultSettings()
    settings.max_iter, settings.verbose, settings.max_threads = max_iter, False, 1
    settings.presolve_enable, settings.equilibrate_enable = False, False
    return settings


@functools.cache
def _nonnegative(r: int) -> tuple[Any, np.ndarray, list[Any]]:
    """``λ ≥ 0`` in Clarabel's form ``Aλ + s = b, s ≥ 0``: ``A = −I``, ``b = 0``, the cone; per ``R``."""
    from scipy import sparse

    clarabel: Any = require("clarabel", "cave")
    return -sparse.eye(r, format="csc"), np.zeros(r), [clarabel.NonnegativeConeT(r)]


def _upper_csc(matrix: np.ndarray) -> Any:
    """The upper triangle of a dense ``(R, R)`` matrix as a CSC matrix without its zeros (a sparse
    ``AAᵀ`` keeps a sparse factorisation), built from its index arrays."""
    from scipy import sparse

    r = matrix.shape[0]
    cols, rows = np.nonzero(np.triu(matrix).T)  # column-major order: CSC   [nnz]
    indptr = np.searchsorted(cols, np.arange(r + 1))  # where each column starts
    return sparse.csc_matrix((matrix[rows, cols], rows, indptr), shape=(r, r))


class CaVELoss(nn.Module):
    """Cone-aligned vector estimation (Tang & Khalil, CPAIOR 2024): ``1 − cos(θ̂, proj_{K(y)} θ̂)``.

    ``K(y)`` is the cone of the normals of the constraints binding at the optimal state ``y`` (see the
    module). Defined for 0/1 linear programmes; the oracle must have a linear form
    ([`binding_constraints`][imle_solvers.adapters.binding.binding_constraints] names those that do), or
    the normals are passed in (``constraints=``, PyEPO's ``tight_ctrs``).

    Parameters
    ----------
    oracle
        The MAP oracle (weights in its sense).
    max_iter
        Interior-point iterations of the projection (3: CaVE+, the paper's and PyEPO's default).
    solve_ratio
        Probability per call of the projection; otherwise the CaVE-Hybrid heuristic (no solve).
    inner_ratio
        ``r``, the weight of the mean binding normal in the heuristic.
    seed
        Seed of the per-call draw against ``solve_ratio``.
    reduction
        ``"mean"``, ``"sum"`` or ``"none"`` over instances.

    Raises
    ------
    MissingExtraError
        At the first projection, when Clarabel is not installed (extra ``cave``).

    References
    ----------
    Tang & Khalil, "CaVE: A Cone-Aligned Approach for Fast Predict-then-optimize with Binary Linear
    Programs", CPAIOR 2024, <https://arxiv.org/abs/2312.07718>.
    """

    def __init__(
        self,
        oracle: MapOracle,
        *,
        max_iter: int = 3,
        solve_ratio: float = 1.0,
        inner_ratio: float = 0.2,
        seed: int | None = None,
        reduction: Reduction = "mean",
    ) -> None:
        super().__init__()
        self.oracle = check_oracle(oracle)
        self.max_iter = positive_int("max_iter", max_iter)
        self.solve_ratio = float(in_range("solve_ratio", solve_ratio, 0, 1, closed="[]"))
        self.inner_ratio = float(in_range("inner_ratio", inner_ratio, 0, 1, closed="[]"))
        self.reduction: Reduction = _check_reduction(reduction)
        self._rng = np.random.default_rng(seed)
        self._normals: dict[bytes, np.ndarray] = {}  # state → its binding normals (the oracle's are fixed)

    def forward(
        self,
        weights_pred: torch.Tensor,
        optimal: torch.Tensor | None = None,
        *,
        constraints: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """CaVE of ``(N, m)`` predictions against the optimal states ``(N, m)`` or their binding normals.

        Parameters
        ----------
        weights_pred
            ``(N, m)`` predicted weights.
        optimal
            ``(N, m)`` optimal states ``y``; their binding normals are read from the oracle.
        constraints
            ``(N, R, m)`` binding normals instead, zero-padded (PyEPO's ``tight_ctrs``).
        """
        check_weights(weights_pred, self.oracle)
        m = self.oracle.n_vars
        if weights_pred.dim() != 2:
            raise InvalidWeightsError(f"CaVELoss takes (N, {m}) weights, got {tuple(weights_pred.shape)}")
        if (optimal is None) == (constraints is None):
            raise ValueError("pass the optimal states or constraints= (their binding normals), one of them")
        n = weights_pred.shape[0]
        if constraints is not None:
            normals = constraints
            if not isinstance(normals, torch.Tensor) or normals.dim() != 3 or normals.shape[::2] != (n, m):
                raise InvalidWeightsError(
                    f"constraints must be a (N, R, m) = ({n}, R, {m}) tensor, "
                    f"got {tuple(getattr(normals, 'shape', ()))}"
                )
            per_row = [a for a in normals.detach().cpu().double().numpy()]
        else:
            y = _states("optimal", optimal, weights_pred).cpu().numpy()  # [N, m]
            per_row = [self._binding(z) for z in y]
        theta = sense_sign(self.oracle) * weights_pred  # θ̂ (differentiable)   [N, m]
        with torch.no_grad():
            target = self._targets(theta.detach(), per_row)  # p   [N, m]
        per = 1.0 - F.cosine_similarity(theta, target, dim=1)  # [N]
        return _reduce(per, self.reduction)

    def _binding(self, z: np.ndarray) -> np.ndarray:
        from .adapters.binding import binding_constraints

        key = (z + 0.0).tobytes()
        if key not in self._normals:
            self._normals[key] = binding_constraints(self.oracle, z)
        return self._normals[key]

    def _targets(self, theta: torch.Tensor, per_row: list[np.ndarray]) -> torch.Tensor:
        """The projection targets ``p`` of every row (or the hybrid heuristic's)."""
        if self._rng.random() < self.solve_ratio:
            host = theta.cpu().double().numpy()
            projections = [cone_projection(t, a, self.max_iter) for t, a in zip(host, per_row)]
            return torch.as_tensor(np.stack(projections)).to(theta.device, theta.dtype)  # [N, m]
        unit = theta / theta.norm(dim=1, keepdim=True).clamp(min=1e-8)  # θ̂/‖θ̂‖   [N, m]
        mean = np.stack([_mean_normal(a, theta.shape[1]) for a in per_row])  # [N, m]
        mean_t = torch.as_tensor(mean).to(theta.device, theta.dtype)
        return (1 - self.inner_ratio) * unit + self.inner_ratio * mean_t

    def extra_repr(self) -> str:
        return f"oracle={self.oracle!r}, max_iter={self.max_iter}, solve_ratio={self.solve_ratio}"


def _mean_normal(normals: np.ndarray, m: int) -> np.ndarray:
    """Mean of the unit binding normals (zero rows skipped; none: the zero vector)."""
    norms = np.linalg.norm(normals, axis=1) if len(normals) else np.zeros(0)
    valid = norms > 1e-7
    if not valid.any():
        return np.zeros(m)
    return (normals[valid] / norms[valid, None]).mean(axis=0)
