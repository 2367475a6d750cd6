"""PyEPO's TSP models (Pyomo back end on HiGHS, the one installable without a commercial solver) through
`PyEPOOracle`, `from_pyepo` and `equivalent_oracle`, against `TravellingSalesperson` and `data.tsp`."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from imle_solvers import TravellingSalesperson
from imle_solvers.data import tsp
from imle_solvers.interop.pyepo import PyEPOOracle, equivalent_oracle, from_pyepo

pyepo = pytest.importorskip("pyepo")
pytest.importorskip("pyomo.environ")
omo = pytest.importorskip("pyepo.model.omo")
pytestmark = pytest.mark.timeout(50)  # PyEPO's Pyomo models solve with HiGHS

SOLVER = "appsi_highs"  # Pyomo's HiGHS interface (highspy)


@pytest.fixture(scope="module", params=["tspGGModel", "tspMTZModel"])
def model(request: pytest.FixtureRequest) -> Any:
    return getattr(omo, request.param)(5, solver=SOLVER)


def test_pyepo_oracle_reads_a_tsp_model(model: Any) -> None:
    oracle = PyEPOOracle(model)
    assert (oracle.sense, oracle.n_vars, oracle.expected_nonzeros) == ("min", 10, 5.0)
    ours = TravellingSalesperson(5)
    highs = TravellingSalesperson(5, "highs")  # HiGHS in the process where Pyomo started it first
    rng = np.random.default_rng(0)
    for c in rng.uniform(-1, 3, size=(4, 10)):  # negative costs included
        z = oracle.solve(c)
        assert z.sum() == 5 and len(ours.tour(z)) == 5  # PyEPO's state is a tour in our edge order
        assert z @ c == pytest.approx(ours.solve(c) @ c, abs=1e-6)
        assert z @ c == pytest.approx(highs.solve(c) @ c, abs=1e-6)


def test_equivalent_oracle_is_ours_with_the_same_edges(model: Any) -> None:
    oracle = equivalent_oracle(model, time_limit=5.0)
    assert isinstance(oracle, TravellingSalesperson) and oracle.n_nodes == 5 and oracle.time_limit == 5.0
    assert oracle.edges == [tuple(e) for e in model.edges]
    assert equivalent_oracle(model, backend="highs").backend == "highs"


def test_equivalent_oracle_refuses_what_it_cannot_reproduce(model: Any) -> None:
    constrained = model.addConstr(np.ones(10), 5)
    with pytest.raises(ValueError, match="addConstr"):
        equivalent_oracle(constrained)
    with pytest.raises(ValueError, match="no equivalent oracle for object"):
        equivalent_oracle(object())


def test_the_dispatching_factory_is_recognised() -> None:
    made = pyepo.model.tspModel(4, backend="pyomo", formulation="GG", solver=SOLVER)
    assert isinstance(equivalent_oracle(made), TravellingSalesperson)
    assert PyEPOOracle(made).expected_nonzeros == 4.0


def test_from_pyepo_reads_pyepos_tsp_data_as_our_data_set(model: Any) -> None:
    """PyEPO's generator and solver, and ours, give the same features, costs and optimal tour lengths."""
    x, c = pyepo.data.tsp.genData(6, 5, 5, deg=2, noise_width=0.5, seed=7)
    dataset = pyepo.data.dataset.optDataset(model, x, c)
    theirs = from_pyepo(dataset, oracle=equivalent_oracle(model))
    ours = tsp(6, 5, 5, deg=2, noise_width=0.5, seed=7)
    assert torch.equal(theirs.features, ours.features) and torch.equal(theirs.costs, ours.costs)
    assert torch.allclose(theirs.objectives, ours.objectives, atol=1e-4)
    assert isinstance(theirs.oracle, TravellingSalesperson)
    default = from_pyepo(dataset)  # PyEPO's own solver by default
    assert isinstance(default.oracle, PyEPOOracle) and default.oracle.expected_nonzeros == 5.0


def test_pyepos_lp_relaxation_has_no_equivalent_integer_oracle(model: Any) -> None:
    relaxed = model.relax()
    assert type(relaxed).__name__.endswith("Rel")
    with pytest.raises(
        ValueError, match=r"is PyEPO's LP relaxation \(optmodel.relax\(\)\): its solutions are fractional"
    ):
        equivalent_oracle(relaxed)
    assert isinstance(equivalent_oracle(model), TravellingSalesperson)  # the integer model still maps


def test_edges_in_another_order_are_refused(model: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(model, "edges", list(reversed(model.edges)))
    with pytest.raises(ValueError, match=r"edges is not in the order \(i, j\), i < j, lexicographic"):
        equivalent_oracle(model)
