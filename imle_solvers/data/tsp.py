"""Synthetic travelling-salesperson data of PyEPO (Tang & Khalil, 2022): Euclidean plus feature costs."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from .._checks import integer_at_least
from ..oracle import MapOracle, map_solve
from .dataset import PTODataset
from .shortest_path import _check

if TYPE_CHECKING:
    from ..oracle import BatchSolver

__all__ = ["tsp", "tsp_costs"]


def tsp_costs(
    num_samples: int,
    num_features: int = 5,
    num_nodes: int = 20,
    deg: int = 1,
    noise_width: float = 0.0,
    seed: int = 135,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """PyEPO's TSP generator: ``(features (n, p), edge costs (n, m) float32, node coordinates (N, 2))``.

    * node coordinates: the first ``⌊N/2⌋`` uniform on ``[−2, 2]²``, the others standard normal;
    * ``B ∈ ℝ^{m×p}``, ``B_ej = b_ej · u_ej``, ``b ~ Bernoulli(0.5)``, ``u ~ U[−2, 2]``; ``x ~ N(0, I_p)``;
    * ``c_e = ‖q_i − q_j‖ + ((B x)_e / √p + 3)^deg / 3^(deg−1) · ε_e``, ``ε_e ~ U[1 − ē, 1 + ē]``, rounded to
      4 decimals, for the edges ``e = (i, j)``, ``i < j``, in the order of
      [`TravellingSalesperson.edges`][imle_solvers.TravellingSalesperson] (``m = N (N − 1) / 2``).

    The draws (coordinates, B, x, ε from ``numpy.random.RandomState(seed)``) follow the order of PyEPO's
    ``pyepo.data.tsp.genData``, so the same arguments give PyEPO's arrays.
    """
    num_samples, num_features, deg, noise_width = _check(num_samples, num_features, deg, noise_width)
    n_nodes = integer_at_least("num_nodes", num_nodes, 3)
    from scipy.spatial.distance import pdist

    rnd = np.random.RandomState(seed)
    half = n_nodes // 2
    coords = np.concatenate((rnd.uniform(-2, 2, (half, 2)), rnd.normal(0, 1, (n_nodes - half, 2))))  # [N, 2]
    distance = pdist(coords, "euclidean")  # ‖q_i − q_j‖, i < j, row-major   [m]
    m = n_nodes * (n_nodes - 1) // 2
    basis = rnd.binomial(1, 0.5, (m, num_features)) * rnd.uniform(-2, 2, (m, num_features))  # B   [m, p]
    x = rnd.normal(0, 1, (num_samples, num_features))  # x   [n, p]
    feature = (x @ basis.T / np.sqrt(num_features) + 3) ** deg / 3 ** (deg - 1)  # [n, m]
    eps = rnd.uniform(1 - noise_width, 1 + noise_width, (num_samples, m))  # ε   [n, m]
    with np.errstate(over="ignore"):
        exact = np.around(distance + feature * eps, decimals=4)  # c   [n, m] float64
    if not (np.isfinite(exact).all() and np.abs(exact).max(initial=0.0) <= np.finfo(np.float32).max):
        raise ValueError(f"deg={deg} gives edge costs beyond float32's range: choose a smaller deg")
    return x, exact.astype(np.float32), coords


def tsp(
    num_samples: int,
    num_features: int = 5,
    num_nodes: int = 20,
    deg: int = 1,
    noise_width: float = 0.0,
    seed: int = 135,
    *,
    oracle: MapOracle | None = None,
    pool: BatchSolver | None = None,
) -> PTODataset:
    """Features and edge costs of the symmetric travelling salesperson (PyEPO's TSP data), solved.

    The costs are PyEPO's (`tsp_costs`: a Euclidean part from fixed node coordinates plus a polynomial of
    the features, with multiplicative noise of half-width ``noise_width``); the decision is a shortest tour
    (``sense="min"``, so the regret is ``⟨c, ẑ⟩ − ⟨c, z*⟩``), solved by
    [`TravellingSalesperson`][imle_solvers.TravellingSalesperson] (CP-SAT) unless ``oracle`` is given. The
    node coordinates are recorded in ``dataset.info``.

    Parameters
    ----------
    num_samples
        n, the number of instances.
    num_features
        p (5 by default, as for the other problems).
    num_nodes
        N ≥ 3 (PyEPO's default 20): ``m = N (N − 1) / 2`` edge costs per instance.
    deg
        Polynomial degree ``deg >= 1`` of the cost model.
    noise_width
        ē in ``[0, 1)``.
    seed
        Seed of the generator (PyEPO's default 135).
    oracle
        The oracle that solves the instances and comes with the data set, in the ``"min"`` sense (the
        costs are costs; default: ``TravellingSalesperson(num_nodes)``).
    pool
        A [`SolverPool`][imle_solvers.SolverPool] that solves the ``n`` optimal tours in parallel.

    References
    ----------
    Tang & Khalil, "PyEPO: A PyTorch-based End-to-End Predict-then-Optimize Library for Linear and Integer
    Programming", 2022, <https://arxiv.org/abs/2206.14234>.
    """
    num_nodes = integer_at_least("num_nodes", num_nodes, 3)
    x, costs, coords = tsp_costs(num_samples, num_features, num_nodes, deg, noise_width, seed)
    if oracle is None:
        from ..adapters.graphs.tsp import TravellingSalesperson

        oracle = TravellingSalesperson(num_nodes)
    c = torch.from_numpy(costs)  # [n, m] float32
    if c.shape[1] != oracle.n_vars:
        raise ValueError(f"oracle has {oracle.n_vars} variables, {num_nodes} nodes have {c.shape[1]} edges")
    if oracle.sense != "min":
        raise ValueError(
            f"the TSP data are edge costs to minimise: the oracle must have sense 'min', got {oracle.sense!r}"
        )
    solutions = map_solve(oracle, -c.to(torch.float64), pool).to(c.dtype)  # z* = MAP(θ = −c)   [n, m]
    info = {
        "problem": "tsp",
        "num_nodes": num_nodes,
        "num_features": num_features,
        "deg": deg,
        "noise_width": noise_width,
        "seed": seed,
        "coordinates": coords.tolist(),
    }
    return PTODataset(torch.from_numpy(x).float(), c, oracle, solutions=solutions, info=info)
