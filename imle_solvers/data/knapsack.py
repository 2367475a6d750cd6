"""Synthetic multi-dimensional knapsack data of PyEPO (Tang & Khalil, 2022)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from .._checks import non_negative, one_of, positive_int
from ..adapters.knapsack import TorchKnapsack
from ..oracle import MapOracle
from .dataset import PTODataset, spo_costs
from .shortest_path import _check

__all__ = ["knapsack"]


def knapsack(
    num_samples: int,
    num_features: int = 5,
    num_items: int = 32,
    dim: int = 2,
    capacity: float | Sequence[float] = 20.0,
    deg: int = 1,
    noise_width: float = 0.0,
    seed: int = 135,
    backend: str = "torch",
) -> PTODataset:
    """Features and item values for the 0/1 knapsack with ``dim`` resource constraints (PyEPO).

    * item weights ``W ∈ {3.00, 3.01, …, 7.99}^{dim×m}``, uniform, fixed for the data set;
    * ``B ∈ {0, 1}^{m×p}``, ``B_ij ~ Bernoulli(0.5)``; ``x ~ N(0, I_p)``;
    * values ``v_j = ⌈5 · [((B x)_j / √p + 3)^deg + 1] / 3.5^deg · ε_j⌉``, ``ε_j ~ U[1 − ē, 1 + ē]``.

    The decision maximises ``⟨v, z⟩`` subject to ``W z ≤ capacity``, ``z ∈ {0, 1}^m`` (``sense="max"``, so the
    regret is ``⟨v, z*⟩ − ⟨v, ẑ⟩``). By default the oracle is
    [`TorchKnapsack`][imle_solvers.adapters.TorchKnapsack] on ``100·W`` and ``⌊100 · capacity⌋`` (the same
    feasible sets: W is given to 0.01), exact and on the values' device; ``backend`` may instead name an
    [`ILP`][imle_solvers.ILP] back end. The draws (W, B, x, ε from ``numpy.random.RandomState(seed)``) follow
    the order of PyEPO's ``pyepo.data.knapsack.genData``; W and B are recorded in ``dataset.info``. The
    oracle's ``expected_nonzeros`` (κ of [`SumOfGamma`][imle_solvers.SumOfGamma]) is set to the mean number of
    items of the optimal solutions.

    Parameters
    ----------
    num_samples
        n, the number of instances.
    num_features
        p.
    num_items
        m.
    dim
        Number of resource constraints.
    capacity
        Right-hand side(s) ``≥ 0``, a scalar or ``dim`` values.
    deg
        Polynomial degree ``deg >= 1`` of the cost model (as for
        [`shortest_path`][imle_solvers.data.shortest_path.shortest_path]).
    noise_width
        ē in ``[0, 1)``, the half-width of the multiplicative noise.
    seed
        Seed of the generator.
    backend
        ``"torch"`` ([`TorchKnapsack`][imle_solvers.adapters.TorchKnapsack], the default) or an ILP back
        end (``"cpsat"``, ``"cbc"`` or ``"highs"``).

    References
    ----------
    Tang & Khalil, "PyEPO: A PyTorch-based End-to-End Predict-then-Optimize Library for Linear and Integer
    Programming", 2022, <https://arxiv.org/abs/2206.14234>.
    """
    num_samples, num_features, deg, noise_width = _check(num_samples, num_features, deg, noise_width)
    num_items = positive_int("num_items", num_items)
    dim = positive_int("dim", dim)
    given = np.ravel(np.asarray(capacity, dtype=object)).tolist()
    caps = np.asarray([non_negative("capacity", c) for c in given], dtype=float)  # [dim] or [1]
    if caps.size not in (1, dim):
        raise ValueError(f"capacity must be a scalar or dim={dim} values, got {caps.size} values")
    caps = np.broadcast_to(caps, (dim,)).copy()  # b   [dim]
    one_of("backend", backend, ("torch", "cpsat", "cbc", "highs"))
    rnd = np.random.RandomState(seed)
    weights = rnd.choice(range(300, 800), size=(dim, num_items)) / 100  # W ∈ [3, 8)   [dim, m]
    basis = rnd.binomial(1, 0.5, (num_items, num_features))  # B   [m, p]
    x = rnd.normal(0.0, 1.0, (num_samples, num_features))  # x   [n, p]
    eps = rnd.uniform(1.0 - noise_width, 1.0 + noise_width, (num_samples, num_items))  # ε   [n, m]
    values = np.ceil(5.0 * spo_costs(x, basis, deg, eps))  # v = ⌈5 · c⌉   [n, m]
    oracle: MapOracle
    if backend == "torch":  # W z ≤ b  ⟺  (100 W) z ≤ ⌊100 b⌋ for W on a 0.01 grid
        oracle = TorchKnapsack.from_decimal(weights.T, caps, decimals=2)
    else:
        from ..adapters.ilp import ILP

        oracle = ILP(num_items, A_ub=weights, b_ub=caps, sense="max", backend=backend)  # type: ignore[arg-type]
    info = {
        "problem": "knapsack",
        "num_items": num_items,
        "dim": dim,
        "capacity": caps.tolist(),
        "num_features": num_features,
        "deg": deg,
        "noise_width": noise_width,
        "seed": seed,
        "item_weights": weights.tolist(),
        "basis": basis.tolist(),
    }
    data = PTODataset(torch.from_numpy(x).float(), torch.from_numpy(values).float(), oracle, info=info)
    if oracle.expected_nonzeros is None and num_samples > 0:
        # SumOfGamma's κ (Theorem 1): the empirical mean number of chosen items, as the paper takes the
        # empirical mean path length for Warcraft (sec. 6)
        oracle.expected_nonzeros = float(data.solutions.sum(1).mean())
    return data
