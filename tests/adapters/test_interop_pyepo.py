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
pytestmark = pytest.mark.timeout(30)  # PyEPO's models solve with OR-Tools


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
    untrained, model = _train(ds, lambda c_hat, c, z: spo(c_hat, c, optimal=z), epochs=3)
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


def _pyepo_batch(data: Any, n: int = 16) -> tuple[torch.Tensor, ...]:
    """The first PyEPO batch ``(x, c, w, z)`` (``z`` of shape ``(n, 1)``, as PyEPO's loaders give)."""
    x, c, w, z = next(iter(torch.utils.data.DataLoader(data, batch_size=n)))
    return x, c, w, z


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_spo_plus_takes_pyepo_call_and_matches_pyepo(
    data: tuple[Any, Any], grid: Any, reduction: str
) -> None:
    _x, c, w, z = _pyepo_batch(data[0])
    assert z.shape == (16, 1)
    noise = torch.randn(c.shape, generator=torch.Generator().manual_seed(1))
    pred = c + 3 * noise  # negative predictions too: 2ĉ − c < 0 on some arcs
    mine, theirs = pred.clone().requires_grad_(True), pred.clone().requires_grad_(True)
    ours = SPOPlusLoss(PyEPOOracle(grid), reduction=reduction)(mine, c, w, z)  # type: ignore[arg-type]
    ref = pyepo.func.SPOPlus(grid, processes=1, reduction=reduction)(theirs, c, w, z)
    assert ours.shape == ref.shape
    torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-4)
    upstream = torch.linspace(0.5, 2.0, 16) if reduction == "none" else torch.tensor(1.5)
    (ours * upstream).sum().backward()
    (ref * upstream).sum().backward()
    torch.testing.assert_close(mine.grad, theirs.grad)
    assert mine.grad is not None and mine.grad.abs().sum() > 0


def test_spo_plus_matches_pyepo_on_a_max_problem() -> None:
    rng = np.random.default_rng(0)
    item_weights = rng.integers(1, 6, size=(2, 8)).astype(float)
    knap = ort.knapsackModel(weights=item_weights, capacity=[10, 12])
    values = torch.from_numpy(rng.uniform(0.5, 2.0, size=(6, 8))).float()
    sols, objs = [], []
    for v in values:
        knap.setObj(v.numpy())
        sol, obj = knap.solve()
        sols.append(np.asarray(sol, dtype=np.float32))
        objs.append([obj])
    w, z = torch.tensor(np.stack(sols)), torch.tensor(objs, dtype=torch.float32)
    pred = values + torch.from_numpy(rng.normal(0, 1, size=(6, 8))).float()
    mine, theirs = pred.clone().requires_grad_(True), pred.clone().requires_grad_(True)
    ours = SPOPlusLoss(PyEPOOracle(knap), reduction="none")(mine, values, w, z)
    ref = pyepo.func.SPOPlus(knap, processes=1, reduction="none")(theirs, values, w, z)
    torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-4)
    assert bool((ours > 1e-6).any())  # not a trivial comparison of zeros
    ours.sum().backward()
    ref.sum().backward()
    torch.testing.assert_close(mine.grad, theirs.grad)


def test_spo_plus_uses_the_given_objective_as_pyepo_does(grid: Any, data: tuple[Any, Any]) -> None:
    _x, c, w, z = _pyepo_batch(data[0], 4)
    spo = SPOPlusLoss(PyEPOOracle(grid), reduction="none")
    pred = c + 0.3
    without = spo(pred, c, w)
    torch.testing.assert_close(spo(pred, c, w, z), without, rtol=1e-5, atol=1e-4)  # f* = ⟨c, z*⟩
    shifted = spo(pred, c, w, z + 1.0)  # the value moves with f* (PyEPO's formula), the gradient does not
    torch.testing.assert_close(shifted, without - 1.0, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(spo(pred, c, w, z.squeeze(-1)), spo(pred, c, w, z))  # (N,) or (N, 1)
    with pytest.raises(ValueError, match=r"objective \(true_obj\) needs optimal \(true_sol\)"):
        spo(pred, c, objective=z)
    with pytest.raises(
        InvalidWeightsError, match=r"objective must have shape \(4,\) or \(4, 1\), got \(4, 2\)"
    ):
        spo(pred, c, w, z.expand(4, 2))
    bad = z.clone()
    bad[2, 0] = float("nan")
    with pytest.raises(InvalidWeightsError, match="objective contains NaN") as err:
        spo(pred, c, w, bad)
    assert err.value.rows == (2,)


class _ModelWithOddSense:
    """A stand-in optModel whose modelSense is neither EPO.MINIMIZE nor EPO.MAXIMIZE."""

    modelSense = 7
    num_cost = 3


def test_unknown_model_sense_is_a_value_error_not_a_weights_error() -> None:
    with pytest.raises(
        ValueError, match=r"^optmodel\.modelSense must be EPO\.MINIMIZE or EPO\.MAXIMIZE, got 7$"
    ) as err:
        PyEPOOracle(_ModelWithOddSense())
    assert not isinstance(err.value, InvalidWeightsError)


class _ModelWithoutSense:
    """A model object of PyEPO's interface that does not set modelSense (PyEPO then minimises)."""

    num_cost = 3


def test_a_model_without_a_sense_minimises_as_pyepo_does() -> None:
    model = _ModelWithoutSense()
    assert not hasattr(model, "modelSense")
    assert PyEPOOracle(model).sense == "min"


def _dataset(**changes: Any) -> Any:
    import types

    base = {
        "feats": np.zeros((3, 2)),
        "costs": np.ones((3, 4)),
        "sols": np.eye(4)[:3],
        "model": None,
    }
    return types.SimpleNamespace(**{**base, **changes})


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"costs": np.where(np.eye(3, 4) > 0, np.nan, 1.0)},
            r"costs are not finite \(NaN or inf\) \(instances 0, 1, 2\)",
        ),
        (
            {"costs": np.array([[1.0, 2.0, np.inf, 1.0], [1.0] * 4, [1.0] * 4])},
            r"not finite .* \(instance 0\)",
        ),
        (
            {"feats": np.array([[0.0, np.nan], [0.0, 0.0], [0.0, 0.0]])},
            r"features are not finite .* \(instance 0\)",
        ),
        ({"sols": np.zeros((3, 5))}, r"solutions of shape \(3, 5\) for costs of shape \(3, 4\)"),
        ({"sols": np.zeros((2, 4))}, r"solutions of shape \(2, 4\)"),
        ({"feats": np.zeros((2, 2))}, r"features of shape \(2, 2\) for 3 instances"),
        ({"feats": np.array([[1, "a"]] * 3, dtype=object)}, "features are not an array of numbers"),
        ({"costs": [[1.0, 2.0], [1.0]]}, "costs are not an array of numbers"),
        ({"costs": None}, "has no costs"),
    ],
)
def test_from_pyepo_checks_the_data_it_copies(changes: dict[str, Any], message: str) -> None:
    from imle_solvers import TopK
    from imle_solvers.errors import DataError

    with pytest.raises(DataError, match=message):
        from_pyepo(_dataset(**changes), oracle=TopK(1, 4))
    with pytest.raises(DataError, match=r"has no model \(optdataset.model is None\): pass oracle="):
        from_pyepo(_dataset())
    good = from_pyepo(_dataset(sols=np.eye(4)[:3].reshape(3, 2, 2)), oracle=TopK(1, 4))  # PyEPO's (n, m, 1)…
    assert good.solutions.shape == (3, 4) and good.features.dtype == torch.float32
