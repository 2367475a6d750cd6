"""The problems of ``imle-solvers train``: data, model and oracles for each ``--problem``."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from torch import nn

from ..adapters.clamp import ClampedCosts
from ..data.dataset import PTODataset
from ..oracle import MapOracle
from .models import TerrainCNN, linear_model

__all__ = ["PROBLEMS", "Problem", "make_problem"]


@dataclasses.dataclass
class Problem:
    """Train / test data, a model factory and the oracle used inside training layers."""

    train: PTODataset
    test: PTODataset
    model: Callable[[], nn.Module]
    train_oracle: MapOracle
    defaults: dict[str, Any]


def make_problem(
    name: str,
    n_train: int,
    n_test: int,
    seed: int,
    deg: int = 1,
    noise_width: float = 0.5,
    num_features: int = 5,
    grid: int = 5,
    size: int = 12,
) -> Problem:
    """Build ``name`` (``shortest-path``, ``knapsack`` or ``terrain``) with data seed ``seed``.

    The train and test sets are the first ``n_train`` and the next ``n_test`` instances of one
    generated data set (same hidden ``B`` / same terrain costs).
    """
    n = n_train + n_test
    if name == "shortest-path":
        from ..data.shortest_path import shortest_path

        data = shortest_path(n, num_features, (grid, grid), deg, noise_width, seed)
        train, test = data.split(n_train)
        m = data.oracle.n_vars
        return Problem(train, test, lambda: linear_model(num_features, m), data.oracle,
                       {"lr": 1e-2, "batch_size": 32, "epochs": 10, "samples": 10})
    if name == "knapsack":
        from ..data.knapsack import knapsack

        data = knapsack(n, num_features, deg=deg, noise_width=noise_width, seed=seed)
        train, test = data.split(n_train)
        m = data.oracle.n_vars
        return Problem(train, test, lambda: linear_model(num_features, m), data.oracle,
                       {"lr": 1e-2, "batch_size": 32, "epochs": 10, "samples": 10})
    if name == "terrain":
        from ..data.terrain import terrain_maps

        data = terrain_maps(n, size=size, seed=seed)
        train, test = data.split(n_train)
        return Problem(train, test, lambda: TerrainCNN(size), ClampedCosts(data.oracle, 0.0),
                       {"lr": 5e-4, "batch_size": 35, "epochs": 10, "samples": 1, "bb_loss": "hamming",
                        "dpo_samples": 10})
    raise ValueError(f"unknown problem {name!r}; choose from {', '.join(PROBLEMS)}")


PROBLEMS: dict[str, str] = {
    "shortest-path": "5×5 grid shortest path, linear model (PyEPO protocol)",
    "knapsack": "2-D knapsack with 32 items, linear model (PyEPO protocol)",
    "terrain": "12×12 terrain maps (Warcraft stand-in), small CNN, 8-neighbour vertex-weighted paths",
}
