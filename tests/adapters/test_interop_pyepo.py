"""PyEPO bridges: `PyEPOOracle` agrees with our own oracle; `from_pyepo` data train a model."""

from __future__ import annotations

import pickle
import sys
from typing import Any

import numpy as np
import pytest
import torch

from imle_solvers import IMLE, PerturbedTarget, SPOPlusLoss, SumOfGamma, regret
from imle_solvers.adapters import DAGShortestPath
from imle_solvers.errors import InvalidWeightsError, MissingExtraError
from imle_solvers.interop.pyepo import PyEPOOracle, from_pyepo

pyepo = pytest.importorskip("pyepo")
ort = pytest.importorskip("pyepo.model.ort")


@pytest.fixture(scope="module")
def grid() -> Any:
    return ort.shortestPathModel(grid=(5, 5))


@pytest.fixture(scope="module")
def data(grid: Any) -> tuple[Any, Any]:
    x, c = pyepo.data.shortestpath.genData(136, 5, (5, 5), deg=4, noise_width=0.5, seed=135)
    train = pyepo.data.dataset.optDataset(grid, x[:96], c[:96])
    test = pyepo.data.dataset.optDataset(grid, x[96:], c[96:])
    return train, test


def test_oracle_reads_sense_and_size(grid: Any) -> None:
    oracle = PyEPOOracle(grid, expected_nonzeros=8)
    assert (oracle.sense, oracle.n_vars, oracle.expected_nonzeros) == ("min", 40, 8)
    assert "PyEPOOracle" in repr(oracle)


def test_max_sense_model() -> None:
    knap = ort.knapsackModel(weights=np.array([[3.0, 4.0, 5.0, 1.0]]), capacity=[5])
    oracle = PyEPOOracle(knap)
    assert oracle.sense == "max" and oracle.n_vars == 4
    z = oracle.solve(np.array([3.0, 4.0, 5.0, 1.0]))
    assert z.tolist() == [0.0, 1.0, 0.0, 1.0]  # value 5 with weight 5


def test_states_and_objectives_agree_with_our_oracle(grid: Any) -> None:
    ours = DAGShortestPath.grid(5, 5)
    theirs = PyEPOOracle(grid)
    rng = np.random.default_rng(0)
    costs = rng.uniform(0.0, 2.0, size=(40, 40))
    costs[:10] -= 0.5  # negative arc costs too (perturbations produce them)
    z_theirs = theirs.solve_batch(costs)
    z_ours = ours.solve_batch(costs)
    np.testing.assert_allclose((costs * z_theirs).sum(1), (costs * z_ours).sum(1), atol=1e-9)
    assert (z_theirs == z_ours).mean() > 0.99  # ties aside, the same paths
    assert set(np.unique(z_theirs)) <= {0.0, 1.0} and not np.signbit(z_theirs).any()


def test_invalid_weights_name_the_row(grid: Any) -> None:
    oracle = PyEPOOracle(grid)
    weights = np.ones((3, 40))
    weights[2, 5] = np.nan
    with pytest.raises(InvalidWeightsError) as err:
        oracle.solve_batch(weights)
    assert err.value.rows == (2,)
    with pytest.raises(InvalidWeightsError):
        oracle.solve(np.ones(39))


def test_pickles_without_its_lock(grid: Any) -> None:
    oracle = PyEPOOracle(grid)
    state = oracle.__getstate__()
    assert "_lock" not in state and state["optmodel"] is grid
    clone = object.__new__(PyEPOOracle)
    clone.__setstate__(state)
    np.testing.assert_array_equal(clone.solve(np.ones(40)), oracle.solve(np.ones(40)))
    with pytest.raises((TypeError, pickle.PicklingError, AttributeError)):
        pickle.dumps(oracle._lock)


def test_from_pyepo_keeps_pyepo_solutions(data: tuple[Any, Any]) -> None:
    train, _ = data
    ds = from_pyepo(train)
    assert len(ds) == 96 and isinstance(ds.oracle, PyEPOOracle)
    x, c, z, f = ds[3]
    assert x.dtype == torch.float32 and x.shape == (5,) and c.shape == z.shape == (40,)
    np.testing.assert_allclose(z.numpy(), np.asarray(train.sols[3]), atol=1e-6)
    np.testing.assert_allclose(float(f), float(np.asarray(train.objs[3]).reshape(-1)[0]), rtol=1e-5)
    fast = from_pyepo(train, oracle=DAGShortestPath.grid(5, 5))
    assert isinstance(fast.oracle, DAGShortestPath)
    with pytest.raises(ValueError, match="n_vars=24"):
        from_pyepo(train, oracle=DAGShortestPath.grid(4, 4))


def _train(data: Any, loss_fn: Any, epochs: int) -> tuple[torch.nn.Module, torch.nn.Module]:
    torch.manual_seed(0)
    model = torch.nn.Linear(5, 40)
    untrained = torch.nn.Linear(5, 40)
    untrained.load_state_dict(model.state_dict())
    opt = torch.optim.Adam(model.parameters(), lr=2e-2)
    loader = torch.utils.data.DataLoader(
        data, batch_size=16, shuffle=True, generator=torch.Generator().manual_seed(0)
    )
    for _ in range(epochs):
        for x, c, z, _f in loader:
            loss = loss_fn(model(x), c, z)
            opt.zero_grad()
            loss.backward()
            opt.step()
    return untrained, model


def test_training_through_pyepo_oracle_reduces_regret(data: tuple[Any, Any]) -> None:
    train, test = data
    ds, ts = from_pyepo(train), from_pyepo(test)
    spo = SPOPlusLoss(ds.oracle)
    untrained, model = _train(ds, lambda c_hat, c, z: spo(c_hat, c, optimal=z), epochs=2)
    with torch.no_grad():
        before = regret(ts.oracle, untrained(ts.features), ts.costs, optimal=ts.solutions)
        after = regret(ts.oracle, model(ts.features), ts.costs, optimal=ts.solutions)
    assert float(after) < 0.5 * float(before)
    # PyEPO's own metric on its own data agrees with ours
    loader = torch.utils.data.DataLoader(test, batch_size=40)
    theirs = float(pyepo.metric.regret(model, ts.oracle.optmodel, loader))
    assert theirs == pytest.approx(float(after), rel=1e-4)


def test_imle_layer_on_pyepo_oracle(data: tuple[Any, Any]) -> None:
    train, _ = data
    ds = from_pyepo(train)
    layer = IMLE(ds.oracle, noise=SumOfGamma(k=8), target=PerturbedTarget(lam=10.0), samples=2)
    x, c, _z, _f = ds[:8]
    theta = torch.nn.Linear(5, 40)(x)
    z = layer(theta)  # [8, 2, 40] paths
    assert z.shape == (8, 2, 40) and bool((z.sum(-1) == 8).all())
    (z * c[:, None]).sum().backward()


def test_missing_pyepo_names_the_extra(monkeypatch: pytest.MonkeyPatch, grid: Any) -> None:
    monkeypatch.setitem(sys.modules, "pyepo", None)  # as if not installed
    with pytest.raises(MissingExtraError, match=r"imle-solvers\[pyepo\]"):
        PyEPOOracle(grid)
