"""Equivalence with PyEPO 2.2.7's ``pyepo.func``: the same loss value and gradient on the same inputs.

Deterministic methods (NID, RFWO, RFY, NCE, CMAP, the LTR losses, PG, CaVE) get the same predictions and
the same pool; the perturbed ones (DPO, DPOMul, PFYMul) the same noise: PyEPO draws ``torch.randn`` from a
generator seeded 135, ours from a ``torch.Generator`` seeded the same way. Shortest path (a ``"min"``
oracle, PyEPO's OR-Tools model against our ``DAGShortestPath`` in the same arc order) and knapsack (a
``"max"`` oracle, PyEPO's methods on an ``optModel`` that calls our oracle) cover both senses.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("pyepo")
ort = pytest.importorskip("pyepo.model.ort")
func = pytest.importorskip("pyepo.func")

from imle_solvers import (  # noqa: E402
    CaVELoss,
    CMAPLoss,
    FenchelYoungLoss,
    ListwiseLTRLoss,
    NCELoss,
    NegativeIdentity,
    PairwiseLTRLoss,
    PerturbationGradientLoss,
    PerturbedOptimizer,
    PointwiseLTRLoss,
    RegularizedFenchelYoungLoss,
    RegularizedOptimizer,
)
from imle_solvers.adapters import DAGShortestPath  # noqa: E402
from imle_solvers.adapters.binding import binding_constraints_batch  # noqa: E402
from imle_solvers.data.knapsack import knapsack  # noqa: E402

B = 6


def _shortest_path() -> tuple[object, object]:
    return DAGShortestPath.grid(5, 5), ort.shortestPathModel(grid=(5, 5))


def _knapsack() -> tuple[object, object]:
    """Our knapsack and PyEPO's methods on it (an ``optModel`` that calls our oracle: PyEPO's SCIP model
    takes seconds where the methods' arithmetic is what is compared)."""
    from imle_solvers.benchmarks.pto_methods import _oracle_model

    oracle = knapsack(2, 5, deg=1, seed=3).oracle
    return oracle, _oracle_model(pytest.importorskip("pyepo"), oracle)


PROBLEMS = {"shortest-path": _shortest_path, "knapsack": _knapsack}


def _inputs(oracle: object, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Predictions (positive: the multiplicative methods keep the sign), true costs, their optima."""
    g = torch.Generator().manual_seed(seed)
    m = oracle.n_vars  # type: ignore[attr-defined]
    pred = torch.rand(B, m, generator=g, dtype=torch.float64) * 2 + 0.1
    true = torch.rand(B, m, generator=g, dtype=torch.float64) * 2 + 0.1
    sign = 1.0 if oracle.sense == "max" else -1.0  # type: ignore[attr-defined]
    from imle_solvers.oracle import map_solve

    return pred, true, map_solve(oracle, sign * true)  # type: ignore[arg-type]


def _grad(fn, pred: torch.Tensor, upstream: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    x = pred.clone().requires_grad_(True)
    out = fn(x)
    (out if upstream is None else (out * upstream).sum()).backward()
    return out.detach(), x.grad


def _close(ours: tuple[torch.Tensor, torch.Tensor], theirs: tuple[torch.Tensor, torch.Tensor], tol=1e-6):
    torch.testing.assert_close(ours[0], theirs[0].to(ours[0].dtype), rtol=tol, atol=tol)
    torch.testing.assert_close(ours[1], theirs[1].to(ours[1].dtype), rtol=tol, atol=tol)


@pytest.mark.parametrize("name", list(PROBLEMS))
@pytest.mark.parametrize("seed", [0, 1])
def test_negative_identity_equals_nid(name: str, seed: int) -> None:
    oracle, optmodel = PROBLEMS[name]()
    pred, _true, _ = _inputs(oracle, seed)
    upstream = torch.randn(B, oracle.n_vars, generator=torch.Generator().manual_seed(seed), dtype=pred.dtype)
    ours = _grad(NegativeIdentity(oracle), pred, upstream)
    theirs = _grad(func.NID(optmodel), pred, upstream)
    _close(ours, theirs)
    assert ours[1].abs().sum() > 0


@pytest.mark.parametrize("name", list(PROBLEMS))
@pytest.mark.parametrize("multiplicative", [False, True])
def test_perturbed_optimizer_equals_dpo_and_dpomul_with_the_same_noise(
    name: str, multiplicative: bool
) -> None:
    oracle, optmodel = PROBLEMS[name]()
    pred, _true, _ = _inputs(oracle, 2)
    upstream = torch.randn(B, oracle.n_vars, generator=torch.Generator().manual_seed(5), dtype=pred.dtype)
    layer = PerturbedOptimizer(
        oracle,
        0.7,
        samples=5,
        multiplicative=multiplicative,
        variance_reduction=True,
        noise_on="costs",
        generator=torch.Generator().manual_seed(135),
    )
    theirs_layer = (func.DPOMul if multiplicative else func.DPO)(optmodel, n_samples=5, sigma=0.7, seed=135)
    _close(_grad(layer, pred, upstream), _grad(theirs_layer, pred, upstream), tol=1e-5)


@pytest.mark.parametrize("name", list(PROBLEMS))
@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_multiplicative_fenchel_young_equals_pfymul_with_the_same_noise(name: str, reduction: str) -> None:
    oracle, optmodel = PROBLEMS[name]()
    pred, _, optimal = _inputs(oracle, 3)
    ours = FenchelYoungLoss(
        oracle,
        sigma=0.5,
        samples=4,
        multiplicative=True,
        generator=torch.Generator().manual_seed(135),
        reduction=reduction,
    )
    theirs = func.PFYMul(optmodel, n_samples=4, sigma=0.5, seed=135, reduction=reduction)
    _close(_grad(lambda x: ours(x, optimal), pred), _grad(lambda x: theirs(x, optimal), pred), tol=1e-5)


@pytest.mark.parametrize("name", list(PROBLEMS))
def test_regularized_optimizer_and_fenchel_young_equal_rfwo_and_rfy(name: str) -> None:
    oracle, optmodel = PROBLEMS[name]()
    pred, _, optimal = _inputs(oracle, 4)
    pred, optimal = pred.float(), optimal.float()  # float32, as a model's outputs are
    upstream = torch.randn(B, oracle.n_vars, generator=torch.Generator().manual_seed(1))
    ours = _grad(RegularizedOptimizer(oracle, 2.0, max_iter=40), pred, upstream)
    theirs = _grad(func.RFWO(optmodel, lambd=2.0, max_iter=40), pred, upstream)
    _close(ours, theirs, tol=1e-4)
    fy = RegularizedFenchelYoungLoss(oracle, 2.0, max_iter=40, reduction="sum")
    theirs_fy = func.RFY(optmodel, lambd=2.0, max_iter=40, reduction="sum")
    _close(_grad(lambda x: fy(x, optimal), pred), _grad(lambda x: theirs_fy(x, optimal), pred), tol=1e-4)


def _seeded(optimal: torch.Tensor) -> object:
    """An ``optDataset`` holding only ``sols``, all PyEPO's solution pool reads from it."""
    from pyepo.data.dataset import optDataset

    data = optDataset.__new__(optDataset)
    data.sols = optimal.clone()
    return data


POOL_LOSSES = [
    (NCELoss, "NCE", "optimal"),
    (CMAPLoss, "CMAP", "optimal"),
    (PointwiseLTRLoss, "ptLTR", "true"),
    (PairwiseLTRLoss, "prLTR", "true"),
    (ListwiseLTRLoss, "lsLTR", "true"),
]


@pytest.mark.parametrize("name", list(PROBLEMS))
@pytest.mark.parametrize(("ours_type", "theirs_name", "against"), POOL_LOSSES)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_pool_losses_equal_pyepo_on_the_same_pool(
    name: str, ours_type: type, theirs_name: str, against: str, reduction: str
) -> None:
    oracle, optmodel = PROBLEMS[name]()
    pred, true, optimal = _inputs(oracle, 5)
    second = optimal if against == "optimal" else true
    ours = ours_type(oracle, solutions=optimal[:3], reduction=reduction)
    theirs = getattr(func, theirs_name)(optmodel, dataset=_seeded(optimal[:3]), reduction=reduction)
    for step in range(2):  # two calls: the pool grows by the solves of the first
        shifted = pred + step
        upstream = torch.rand_like(pred[:, 0]) if reduction == "none" else None
        _close(
            _grad(lambda x: ours(x, second), shifted, upstream),
            _grad(lambda x: theirs(x, second), shifted, upstream),
        )
    assert ours.cache.size == len(theirs.solpool)


@pytest.mark.parametrize("name", list(PROBLEMS))
@pytest.mark.parametrize("central", [False, True])
def test_perturbation_gradient_equals_pg(name: str, central: bool) -> None:
    oracle, optmodel = PROBLEMS[name]()
    pred, true, _ = _inputs(oracle, 6)
    ours = PerturbationGradientLoss(oracle, sigma=0.3, central=central, reduction="sum")
    theirs = func.PG(optmodel, sigma=0.3, two_sides=central, reduction="sum")
    _close(_grad(lambda x: ours(x, true), pred), _grad(lambda x: theirs(x, true), pred), tol=1e-6)


@pytest.mark.parametrize("name", list(PROBLEMS))
@pytest.mark.parametrize("max_iter", [3, 50])
def test_cave_equals_pyepo_on_the_same_binding_constraints(name: str, max_iter: int) -> None:
    pytest.importorskip("clarabel")
    oracle, optmodel = PROBLEMS[name]()
    pred, _, optimal = _inputs(oracle, 7)
    pred = pred - 1.0  # mixed signs: some rows outside the cone
    normals = binding_constraints_batch(oracle, optimal)
    ours = CaVELoss(oracle, max_iter=max_iter, reduction="sum")
    theirs = func.CaVE(optmodel, max_iter=max_iter, reduction="sum")
    expected = _grad(lambda x: theirs(x, normals), pred)
    _close(_grad(lambda x: ours(x, optimal), pred), expected, tol=1e-5)
    _close(_grad(lambda x: ours(x, constraints=normals), pred), expected, tol=1e-5)
