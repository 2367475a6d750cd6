"""Losses on a solution pool: the feasible states seen so far stand in for the whole feasible set.

Mulamba et al. (2021) observed that every state a solver returns during training is feasible, so a pool of
them, ``Γ ⊂ C``, gives contrastive losses (``contrastive.py``) and Mandi et al. (2022) ranking losses
(``ranking.py``) that need no solver in their backward pass. The pool is a
[`SolutionCache`][imle_solvers.SolutionCache] (deduplicated, bounded, picklable): seeded with the training
set's optimal states, it grows with a solve of the predictions in a share ``solve_ratio`` of the calls.

```text
with probability solve_ratio:   Γ ← Γ ∪ {MAP(θ̂_b)}_b          one batched oracle / pool call
loss(θ̂, ·) over the pool's states W = Γ                         [K, m]
```
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from ._checks import in_range, positive_int
from .errors import ImleSolversError
from .losses import Reduction, _check_reduction, _finite_rows, _input_tensor, _reduce
from .oracle import BatchSolver, MapOracle, check_oracle, check_weights, map_solve, sense_sign
from .pool._cache import SolutionCache

__all__ = ["SolutionPoolLoss"]


class SolutionPoolLoss(nn.Module):
    """Base of the losses computed over a pool of feasible states (contrastive and ranking losses).

    Parameters
    ----------
    oracle
        The MAP oracle (weights in its sense). A [`SolutionCache`][imle_solvers.SolutionCache] is used as
        the pool itself (its own ``p`` then answers part of each refresh from the pool, as PyEPO's
        ``solve_ratio`` does row by row); any other oracle gets a new cache of ``max_size`` states.
    solutions
        ``(K, m)`` feasible states to start the pool with (PyEPO seeds it with the training set's optimal
        solutions, ``dataset.sols``); more can be added with `add`.
    solve_ratio
        Probability, per call, that the batch's predictions are solved and their states added to the pool
        (PyEPO's ``solve_ratio``). ``1``: every call; ``0``: never (the pool stays as seeded).
    max_size
        Most states kept in a new pool (oldest replaced first).
    pool
        Optional [`SolverPool`][imle_solvers.pool.SolverPool] for the refresh solves.
    seed
        Seed of the per-call draw against ``solve_ratio``.
    reduction
        ``"mean"``, ``"sum"`` or ``"none"`` over instances.

    Raises
    ------
    ImleSolversError
        At a call, when the pool is empty (no ``solutions`` given and ``solve_ratio`` did not solve).

    References
    ----------
    Mulamba, Mandi, Diligenti, Lombardi, Bucarey & Guns, "Contrastive Losses and Solution Caching for
    Predict-and-Optimize", IJCAI 2021, <https://arxiv.org/abs/2011.05354>.

    Mandi, Bucarey, Mulamba & Guns, "Decision-Focused Learning: Through the Lens of Learning to Rank",
    ICML 2022, <https://arxiv.org/abs/2112.03609>.
    """

    def __init__(
        self,
        oracle: MapOracle,
        *,
        solutions: Any = None,
        solve_ratio: float = 1.0,
        max_size: int = 10_000,
        pool: BatchSolver | None = None,
        seed: int | None = None,
        reduction: Reduction = "mean",
    ) -> None:
        super().__init__()
        self.oracle = check_oracle(oracle)
        self.solve_ratio = float(in_range("solve_ratio", solve_ratio, 0, 1, closed="[]"))
        positive_int("max_size", max_size)
        self.cache = oracle if isinstance(oracle, SolutionCache) else SolutionCache(oracle, 0.0, max_size)
        """The pool of states (a [`SolutionCache`][imle_solvers.SolutionCache])."""
        self.pool = pool
        self.reduction: Reduction = _check_reduction(reduction)
        self._rng = np.random.default_rng(seed)
        self._tensor: tuple[int, torch.Tensor] | None = None  # (cache version, its states)
        if solutions is not None:
            self.add(solutions)

    def add(self, states: Any) -> int:
        """Add ``(K, m)`` feasible states to the pool (duplicates skipped); returns how many were new."""
        if isinstance(states, torch.Tensor):
            states = states.detach().cpu().numpy()
        return self.cache.add(np.asarray(states, dtype=np.float64))

    @property
    def states(self) -> np.ndarray:
        """A copy of the pool's states, ``(K, m)``."""
        return self.cache.states

    def _weights(self, name: str, value: object, like: torch.Tensor) -> torch.Tensor:
        """A second input of the weights' shape (true weights, optimal states), ``(N, m)``, detached."""
        tensor = _input_tensor(name, value, (like.shape,))
        return _finite_rows(name, tensor.reshape(-1, like.shape[-1]).to(like.dtype))

    def _pool_states(self, weights_pred: torch.Tensor) -> torch.Tensor:
        """Refresh the pool (with probability ``solve_ratio``) and return its states ``[K, m]`` on the
        predictions' device and dtype."""
        check_weights(weights_pred, self.oracle)
        pred = weights_pred.detach().reshape(-1, self.oracle.n_vars)  # ĉ   [N, m]
        if pred.shape[0] and self._rng.random() < self.solve_ratio:
            theta = sense_sign(self.oracle) * pred  # θ̂   [N, m]
            solver = self.oracle if isinstance(self.oracle, SolutionCache) else self.cache.oracle
            self.add(map_solve(solver, theta, self.pool))  # Γ ← Γ ∪ {MAP(θ̂)}
        if self.cache.size == 0:
            raise ImleSolversError(
                f"the solution pool of {type(self).__name__} is empty: pass solutions= (e.g. the training "
                "set's optimal states) or a solve_ratio > 0"
            )
        version = self.cache.version
        if self._tensor is None or self._tensor[0] != version:
            self._tensor = (version, torch.from_numpy(self.cache.states))
        return self._tensor[1].to(device=weights_pred.device, dtype=weights_pred.dtype)  # W   [K, m]

    def _finish(self, per_row: torch.Tensor, weights_pred: torch.Tensor) -> torch.Tensor:
        return _reduce(per_row.reshape(weights_pred.shape[:-1]), self.reduction)

    def extra_repr(self) -> str:
        return f"oracle={self.oracle!r}, pool_size={self.cache.size}, solve_ratio={self.solve_ratio}"
