"""``imle-solvers bench pto``: seconds per training epoch on PyEPO's shortest-path protocol.

1,000 training instances of the 5 × 5 grid (deg 2, noise half-width 0.5; 100 with ``quick``),
``nn.Linear(5, 40)``, batch 32, Adam. Every configuration is trained round-robin in one process
(evaluation excluded), so that all see the same machine load. Where PyEPO is installed (extra
``pyepo``), PyEPO's own I-MLE (``pyepo.func.implicitMLE``, 10 samples, λ = 10, its OR-Tools
``shortestPathModel``, L1 loss to the optimal path) is trained in the same rounds on the same data,
and each I-MLE row gives its speed-up over it: the median over rounds of the per-round ratio, with the
lowest and highest ratio of the rounds (the spread over repeats). The host oracle ``graphs.ShortestPath``
(in the DAG's arc order) is timed next to the torch-native ``DAGShortestPath`` to show what the oracle
contributes.

``--problem tsp`` runs PyEPO's travelling salesperson instead, side by side with PyEPO's own methods
(see [`pto_tsp`][imle_solvers.benchmarks.pto_tsp]).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from ..noise import Gumbel, SumOfGamma
from ..oracle import MapOracle

__all__ = ["PYEPO_LABEL", "run"]

PYEPO_LABEL = "PyEPO implicitMLE, S=10, λ=10, OR-Tools shortestPathModel"
"""The row of PyEPO's I-MLE (timed in the same run where PyEPO is installed)."""


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


def _pyepo_epoch(train: Any) -> Callable[[int], float] | None:
    """A function ``seed -> seconds`` of one epoch of PyEPO's I-MLE on ``train``; ``None`` without PyEPO."""
    try:
        import pyepo
        from pyepo.model.ort import shortestPathModel
    except ImportError:
        return None
    from torch.utils.data import DataLoader

    optmodel = shortestPathModel(grid=(5, 5))
    data = pyepo.data.dataset.optDataset(optmodel, train.features.numpy(), train.costs.numpy())

    def epoch(seed: int) -> float:
        torch.manual_seed(seed)
        model = torch.nn.Linear(5, 40)
        ptb = pyepo.func.implicitMLE(optmodel, n_samples=10, sigma=1.0, lambd=10, processes=1)
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        l1 = torch.nn.L1Loss()
        start = time.perf_counter()
        for x, _c, w, _z in DataLoader(data, batch_size=32, shuffle=True):
            loss = l1(ptb(model(x)), w)
            opt.zero_grad()
            loss.backward()
            opt.step()
        return time.perf_counter() - start

    return epoch


def run(quick: bool = False, problem: str = "shortest-path") -> list[dict[str, Any]]:
    """Median seconds per epoch of each configuration and, with PyEPO, the speed-up over its I-MLE
    (``problem="tsp"``: [`pto_tsp.run`][imle_solvers.benchmarks.pto_tsp.run])."""
    if problem == "tsp":
        from .pto_tsp import run as run_tsp

        return run_tsp(quick)
    import dataclasses

    from ..training import TrainConfig, make_problem, train_model
    from ..training.models import linear_model

    torch.set_num_threads(1)
    n_train = 100 if quick else 1000
    config = TrainConfig(
        problem="shortest-path", deg=2, noise_width=0.5, n_train=n_train, n_test=100, epochs=2
    )
    plan = dataclasses.replace(config.plan(), show_progress=False)
    paths = make_problem(plan, 0)  # shortest_path(n_train + 100, deg=2, noise_width=0.5, seed=0)
    train = paths.train
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

    def variant(options: dict[str, Any], oracle: MapOracle | None, epochs: int) -> Any:
        """The plan and problem of one configuration: its options, its training oracle."""
        schedule = dataclasses.replace(plan.schedule, epochs=epochs)
        mine = dataclasses.replace(
            plan, options=dataclasses.replace(plan.options, **options), schedule=schedule
        )
        return mine, paths if oracle is None else dataclasses.replace(paths, train_oracle=oracle)

    pyepo_epoch = _pyepo_epoch(train)
    for _, method, options, oracle in configs:  # warm-up, not timed: first calls pay for caches and imports
        mine, inner = variant(options, oracle, epochs=1)
        small = dataclasses.replace(inner, train=train.split(32)[0])
        train_model(mine, small, method, 0, model=linear_model(5, 40))
    rounds = 1 if quick else 3
    times: dict[str, list[float]] = {label: [] for label, *_ in configs}
    pyepo_times: list[float] = []
    for r in range(rounds):
        for label, method, options, oracle in configs:
            mine, inner = variant(options, oracle, epochs=2)
            out = train_model(mine, inner, method, 0)  # torch.manual_seed(0), then the linear model
            times[label].append(statistics.median(out.epoch_times))
        if pyepo_epoch is not None:
            pyepo_times.append(pyepo_epoch(r))
    rows = []
    for label, method, *_ in configs:
        row: dict[str, Any] = {
            "configuration": label,
            "s_per_epoch": statistics.median(times[label]),
            "best_s": min(times[label]),
        }
        if pyepo_times and method.startswith("imle"):
            ratios = [p / t for p, t in zip(pyepo_times, times[label])]  # per round: both in that round
            row["speed-up vs PyEPO I-MLE"] = statistics.median(ratios)
            row["speed-up min"] = min(ratios)
            row["speed-up max"] = max(ratios)
        rows.append(row)
    if pyepo_times:
        rows.append(
            {
                "configuration": PYEPO_LABEL,
                "s_per_epoch": statistics.median(pyepo_times),
                "best_s": min(pyepo_times),
            }
        )
    return rows
