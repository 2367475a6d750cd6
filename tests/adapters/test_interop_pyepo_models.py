"""`equivalent_oracle` for PyEPO's shortest-path, knapsack and portfolio models: the same variable order,
sense and optimum as PyEPO's own solver, on every back end PyEPO has here."""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np
import pytest

from imle_solvers import ILP, DAGShortestPath, TorchKnapsack
from imle_solvers.interop.pyepo import PyEPOOracle, equivalent_oracle

pyepo = pytest.importorskip("pyepo")
ort = pytest.importorskip("pyepo.model.ort")


def _same_optimum(optmodel: Any, ours: Any, costs: np.ndarray) -> None:
    """Our oracle's state has PyEPO's optimal objective on every cost row (states may differ on ties)."""
    theirs = PyEPOOracle(optmodel)
    assert (ours.sense, ours.n_vars) == (theirs.sense, theirs.n_vars)
    for c in costs:
        mine, pyepos = ours.solve(c), theirs.solve(c)
        assert abs(float(mine @ c) - float(pyepos @ c)) <= 1e-6 * max(1.0, abs(float(pyepos @ c)))


@pytest.mark.parametrize("grid", [(5, 5), (3, 4), (4, 2)])
def test_a_grid_shortest_path_becomes_the_dag_oracle_with_pyepos_arcs(grid: tuple[int, int]) -> None:
    model = ort.shortestPathModel(grid=grid)
    oracle = equivalent_oracle(model)
    assert isinstance(oracle, DAGShortestPath) and oracle.sense == "min"
    assert list(oracle.edges) == [tuple(a) for a in model.arcs]
    _same_optimum(model, oracle, np.random.default_rng(sum(grid)).uniform(0.1, 2.0, (6, len(model.arcs))))
    pickle.loads(pickle.dumps(oracle))  # ships to a pool, unlike the OR-Tools model
    with pytest.raises(ValueError, match="takes no options, got time_limit"):
        equivalent_oracle(model, time_limit=1.0)


def test_the_shortest_path_of_pyomo_is_recognised_too() -> None:
    omo = pytest.importorskip("pyepo.model.omo")
    model = omo.shortestPathModel(grid=(3, 3), solver="appsi_highs")
    assert isinstance(equivalent_oracle(model), DAGShortestPath)


def _knapsack_model(decimals: int) -> Any:
    rng = np.random.default_rng(decimals)
    weights = np.round(rng.uniform(3.0, 8.0, (2, 12)), decimals)  # PyEPO's (dims, items)
    return ort.knapsackModel(weights=weights, capacity=np.array([20.0, 25.0]))


def test_pyepos_knapsack_becomes_the_torch_knapsack_with_its_weights() -> None:
    model = _knapsack_model(2)  # PyEPO's weights have two decimals
    oracle = equivalent_oracle(model)
    assert isinstance(oracle, TorchKnapsack) and oracle.sense == "max"
    values = np.random.default_rng(1).uniform(0.0, 5.0, (6, 12))
    _same_optimum(model, oracle, values)


def test_a_knapsack_with_finer_weights_or_a_backend_is_an_ilp() -> None:
    fine = _knapsack_model(4)
    oracle = equivalent_oracle(fine)
    assert isinstance(oracle, ILP) and oracle.backend == "cpsat" and oracle.sense == "max"
    values = np.random.default_rng(2).uniform(0.0, 5.0, (4, 12))
    _same_optimum(fine, oracle, values)
    on_highs = equivalent_oracle(_knapsack_model(2), backend="highs")
    assert isinstance(on_highs, ILP) and on_highs.backend == "highs"
    _same_optimum(_knapsack_model(2), on_highs, values)


def test_the_portfolio_model_is_refused_with_what_to_use() -> None:
    cov, _, _ = pyepo.data.portfolio.genData(8, 3, 6, deg=1, noise_level=0.5, seed=1)  # (6, 6) first
    try:
        model = pyepo.model.omo.portfolioModel(6, cov, solver="ipopt")
    except Exception as err:  # the Pyomo solver is missing here: the class alone is enough to check
        pytest.skip(f"no portfolio model on this machine: {err}")
    with pytest.raises(ValueError, match="continuous quadratic programme"):
        equivalent_oracle(model)


def test_relaxations_and_added_constraints_are_refused() -> None:
    model = _knapsack_model(2)
    with pytest.raises(ValueError, match="LP relaxation"):
        equivalent_oracle(model.relax())
    with pytest.raises(ValueError, match="addConstr"):
        equivalent_oracle(model.addConstr(np.ones(12), 5))


def test_a_shortest_path_whose_arcs_are_in_another_order_is_refused() -> None:
    model = ort.shortestPathModel(grid=(3, 3))
    model.arcs = list(reversed(model.arcs))  # a grid of PyEPO's class, its variables in another order
    with pytest.raises(ValueError, match=r"arcs is not the order of DAGShortestPath.grid\(3, 3\)"):
        equivalent_oracle(model)
