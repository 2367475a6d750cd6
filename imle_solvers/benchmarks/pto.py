"""``imle-solvers bench pto``: seconds per training epoch on PyEPO's shortest-path protocol.

1,000 training instances of the 5 × 5 grid (deg 2, noise half-width 0.5), ``nn.Linear(5, 40)``, batch
32, Adam. Every configuration is trained round-robin in one process (evaluation excluded), so that
all see the same machine load, and compared with PyEPO 2.2.7's I-MLE (10 samples, hand-written DP
oracle): 0.65 s per epoch on the same kind of 2-core machine. The host oracle
``graphs.ShortestPath`` (in the DAG's arc order) is timed next to the torch-native
``DAGShortestPath`` to show what the oracle contributes.
"""

from __future__ import annotations

import statistics
from typing import Any

import numpy as np
import torch

from ..noise import Gumbel, SumOfGamma
from ..oracle import MapOracle

__all__ = ["PYEPO_IMLE_S_PER_EPOCH", "run"]

PYEPO_IMLE_S_PER_EPOCH = 0.65
"""PyEPO 2.2.7's I-MLE (λ = 10, SoG κ = 5, 10 samples, DP oracle), s/epoch on a 2-core machine."""


class _HostShortestPath(MapOracle):
    """``graphs.ShortestPath`` on a ``DAGShortestPath``'s graph, weights in the DAG's arc order."""

    sense = "min"

    def __init__(self, dag: Any) -> None:
        import networkx as nx

        from ..adapters.graphs import ShortestPath

        self.inner = ShortestPath(nx.DiGraph(dag.edges), dag.source, dag.target)
        self.order = np.array([self.inner.edges.index(e) for e in dag.edges])  # DAG arc i → host arc
        self.n_vars, self.expected_nonzeros = dag.n_vars, dag.expected_nonzeros

    def solve(self, weights: np.ndarray) -> np.ndarray:
        return self.solve_batch(weights[None])[0]

    def solve_batch(self, weights: np.ndarray) -> np.ndarray:
        weights = self.validate(weights)
        host = np.empty_like(weights)
        host[:, self.order] = weights  # DAG order → host order
        return self.inner.solve_batch(host)[:, self.order]


def run(quick: bool = False) -> list[dict[str, Any]]:
    """Median seconds per epoch of each configuration, and its ratio to PyEPO's I-MLE."""
    from ..data import shortest_path
    from ..training import train_model
    from ..training.models import linear_model

    torch.set_num_threads(1)
    train, test = shortest_path(1100, deg=2, noise_width=0.5, seed=0).split(1000)
    kappa = train.oracle.expected_nonzeros
    configs: list[tuple[str, str, dict[str, Any], MapOracle | None]] = [
        ("I-MLE, SumOfGamma, S=10, DAGShortestPath", "imle", {"samples": 10}, None),
        (
            "I-MLE, SumOfGamma exact (Gamma draws), S=10, DAGShortestPath",
            "imle",
            {"samples": 10, "noise": SumOfGamma(k=kappa, exact=True)},
            None,
        ),
        ("I-MLE, Gumbel, S=10, DAGShortestPath", "imle", {"samples": 10, "noise": Gumbel()}, None),
        ("I-MLE PID λ=10, SumOfGamma, S=10, DAGShortestPath", "imle-pid", {"samples": 10}, None),
        ("I-MLE μ-μ, SumOfGamma, S=10, DAGShortestPath", "imle-mumu", {"samples": 10}, None),
        (
            "I-MLE, SumOfGamma, S=10, graphs.ShortestPath (host)",
            "imle",
            {"samples": 10},
            _HostShortestPath(train.oracle),
        ),
        ("SPO+", "spo+", {}, None),
        ("two-stage", "two-stage", {}, None),
    ]
    times: dict[str, list[float]] = {label: [] for label, *_ in configs}
    for _ in range(1 if quick else 3):
        for label, method, options, oracle in configs:
            torch.manual_seed(0)
            out = train_model(
                linear_model(5, 40),
                method,
                train,
                test,
                epochs=2,
                seed=0,
                train_oracle=oracle,
                method_options=options,
                show_progress=False,
            )
            times[label].extend(out.epoch_times)
    rows = []
    for label, method, *_ in configs:
        per_epoch = statistics.median(times[label])
        row: dict[str, Any] = {"configuration": label, "s_per_epoch": per_epoch, "best_s": min(times[label])}
        if method.startswith("imle"):
            row["speed-up vs PyEPO I-MLE 0.65 s"] = PYEPO_IMLE_S_PER_EPOCH / per_epoch
        rows.append(row)
    return rows
