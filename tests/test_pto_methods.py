"""The predict-then-optimize methods of PyEPO's family, on their own terms (PyEPO not needed).

Brute force over small feasible sets (top-k), the math of each loss and gradient, the solution pool, the
binding constraints and their errors.
"""

from __future__ import annotations

import itertools
import pickle

import numpy as np
import pytest
import torch

from imle_solvers import (
    STE,
    CMAPLoss,
    FenchelYoungLoss,
    ImleSolversError,
    ListwiseLTRLoss,
    NCELoss,
    NegativeIdentity,
    NoNoise,
    PairwiseLTRLoss,
    PerturbationGradientLoss,
    PerturbedOptimizer,
    PointwiseLTRLoss,
    RegularizedFenchelYoungLoss,
    RegularizedOptimizer,
    SolutionCache,
    TopK,
)
from imle_solvers.adapters import DAGShortestPath, TorchKnapsack
from imle_solvers.adapters.binding import UnsupportedOracleError, binding_constraints
from imle_solvers.errors import InvalidWeightsError
from imle_solvers.frank_wolfe import frank_wolfe
from imle_solvers.oracle import map_solve

K, M = 2, 5


def _states(k: int = K, m: int = M) -> torch.Tensor:
    rows = []
    for chosen in itertools.combinations(range(m), k):
        z = torch.zeros(m, dtype=torch.float64)
        z[list(chosen)] = 1
        rows.append(z)
    return torch.stack(rows)  # every k-subset   [C, m]


def _weights(seed: int, b: int = 4, m: int = M) -> torch.Tensor:
    return torch.randn(b, m, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


# ---------------------------------------------------------------- negative identity, perturbed optimizer
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_negative_identity_is_ste_without_noise(seed: int) -> None:
    oracle = DAGShortestPath.grid(3, 3)
    w = _weights(seed, 3, oracle.n_vars).abs()
    up = _weights(seed + 10, 3, oracle.n_vars)
    grads = []
    for layer in (NegativeIdentity(oracle), STE(oracle, NoNoise())):
        x = w.clone().requires_grad_(True)
        z = layer(x)
        (z * up).sum().backward()
        grads.append((z.detach(), x.grad))
    torch.testing.assert_close(grads[0], grads[1])
    torch.testing.assert_close(grads[0][1], -up)  # a "min" oracle: ∂z/∂c = −I


def test_negative_identity_refuses_noise_options() -> None:
    layer = NegativeIdentity(TopK(K, M))
    with pytest.raises(AttributeError, match="read-only"):
        layer.samples = 3


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_multiplicative_perturbation_keeps_every_sign_and_averages_to_theta(seed: int) -> None:
    seen = []

    def record(w: torch.Tensor) -> torch.Tensor:
        seen.append(w.clone())
        return torch.nn.functional.one_hot(w.argmax(-1), w.shape[-1]).to(w.dtype)

    from imle_solvers import TorchOracle

    oracle = TorchOracle.from_function(record, M)
    w = _weights(seed, 2)
    layer = PerturbedOptimizer(
        oracle, 0.3, samples=4000, multiplicative=True, generator=torch.Generator().manual_seed(seed)
    )
    layer(w)
    perturbed = seen[0].view(2, 4000, M)
    assert (torch.sign(perturbed) == torch.sign(w)[:, None]).all()
    torch.testing.assert_close(perturbed.mean(1), w, rtol=0.02, atol=0.02)  # E[exp(σZ − σ²/2)] = 1


def test_multiplicative_needs_normal_noise_and_booleans() -> None:
    with pytest.raises(ValueError, match="noise='normal'"):
        PerturbedOptimizer(TopK(K, M), multiplicative=True, noise="gumbel")
    with pytest.raises(TypeError, match="variance_reduction"):
        PerturbedOptimizer(TopK(K, M), variance_reduction=1)  # type: ignore[arg-type]
    from imle_solvers import Gumbel

    with pytest.raises(ValueError, match="Gaussian"):
        FenchelYoungLoss(TopK(K, M), noise=Gumbel(), multiplicative=True)


@pytest.mark.parametrize("multiplicative", [False, True])
def test_variance_reduction_subtracts_the_leave_one_out_mean(multiplicative: bool) -> None:
    """With the same noise, the baseline changes each sample's weight by the mean of the others'."""
    oracle = TopK(K, M)
    w = _weights(3, 3).abs() + 0.5
    up = _weights(4, 3)
    grads = {}
    for vr in (False, True):
        layer = PerturbedOptimizer(
            oracle,
            0.8,
            samples=6,
            multiplicative=multiplicative,
            variance_reduction=vr,
            generator=torch.Generator().manual_seed(7),
        )
        x = w.clone().requires_grad_(True)
        (layer(x) * up).sum().backward()
        grads[vr] = x.grad
    # recompute by hand from the same draws
    z_noise = 0.8 * torch.randn(3, 6, M, generator=torch.Generator().manual_seed(7), dtype=w.dtype)
    theta = w[:, None]
    perturbed = theta * torch.exp(z_noise - 0.32) if multiplicative else theta + z_noise
    z = oracle.solve_torch(perturbed)
    reward = (z * up[:, None]).sum(-1) / 6  # ⟨z_s, g⟩/S   [3, 6]
    centred = (reward - reward.mean(1, keepdim=True)) * 6 / 5
    scale = 0.8 * w if multiplicative else torch.full_like(w, 0.8)
    for vr, r in ((False, reward), (True, centred)):
        expected = (r[..., None] * z_noise / 0.8).sum(1) / scale
        torch.testing.assert_close(grads[vr], expected)


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_multiplicative_fenchel_young_gradient_is_weighted_states_minus_target(reduction: str) -> None:
    oracle = TopK(K, M)
    w = _weights(5, 3).abs() + 0.2
    y = oracle.solve_torch(_weights(6, 3))
    loss = FenchelYoungLoss(
        oracle,
        sigma=0.4,
        samples=5,
        multiplicative=True,
        reduction=reduction,
        generator=torch.Generator().manual_seed(2),
    )
    x = w.clone().requires_grad_(True)
    loss(x, y).backward()
    eps = 0.4 * torch.randn(3, 5, M, generator=torch.Generator().manual_seed(2), dtype=w.dtype)
    factor = torch.exp(eps - 0.08)
    z = oracle.solve_torch(w[:, None] * factor)
    expected = (z * factor).mean(1) - y
    torch.testing.assert_close(x.grad, expected / (3 if reduction == "mean" else 1))


# ---------------------------------------------------------------- Frank-Wolfe
def _capped_simplex_projection(x: torch.Tensor, k: int) -> torch.Tensor:
    """Projection onto {0 ≤ μ ≤ 1, Σμ = k} by bisection on the shift."""
    lo, hi = (x.min(-1, keepdim=True).values - 1), x.max(-1, keepdim=True).values
    for _ in range(200):
        mid = (lo + hi) / 2
        total = (x - mid).clamp(0, 1).sum(-1, keepdim=True)
        lo, hi = torch.where(total > k, mid, lo), torch.where(total > k, hi, mid)
    return (x - (lo + hi) / 2).clamp(0, 1)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("lam", [0.5, 2.0])
def test_regularized_optimizer_is_the_projection_onto_the_hull(seed: int, lam: float) -> None:
    oracle = TopK(K, M)
    w = _weights(seed) * 2
    mu = RegularizedOptimizer(oracle, lam, max_iter=2000, tol=1e-10)(w)
    torch.testing.assert_close(mu, _capped_simplex_projection(w / lam, K), atol=1e-5, rtol=0)


@pytest.mark.parametrize("seed", [0, 1])
def test_regularized_optimizer_jacobian_matches_finite_differences(seed: int) -> None:
    oracle = TopK(K, M)
    w = _weights(seed)
    layer = RegularizedOptimizer(oracle, 1.0, max_iter=2000, tol=1e-12)
    up = _weights(seed + 5)
    x = w.clone().requires_grad_(True)
    (layer(x) * up).sum().backward()
    h = 1e-5
    numeric = torch.zeros_like(w)
    for j in range(M):
        e = torch.zeros_like(w)
        e[:, j] = h
        numeric[:, j] = ((layer(w + e) - layer(w - e)) * up).sum(-1) / (2 * h)
    torch.testing.assert_close(x.grad, numeric, atol=1e-4, rtol=1e-3)


def test_frank_wolfe_stops_converged_rows_and_returns_convex_weights() -> None:
    oracle = TopK(K, M)
    target = torch.stack([_states()[3] * 1.0, torch.full((M,), 0.4, dtype=torch.float64)])
    calls = []

    def solve(theta: torch.Tensor) -> torch.Tensor:
        calls.append(theta.shape[0])
        return map_solve(oracle, theta)

    mu, vertices, weights = frank_wolfe(target, solve, max_iter=500, tol=1e-9)
    torch.testing.assert_close(mu, target)  # both are in the hull: their own projection
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, dtype=torch.float64))
    torch.testing.assert_close((weights[..., None] * vertices).sum(1), mu)
    assert calls[0] == 2 and calls[-1] == 1  # the vertex row stops first


@pytest.mark.parametrize("sense", ["min", "max"])
@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_regularized_fenchel_young_value_and_gradient(sense: str, reduction: str) -> None:
    from imle_solvers import TorchOracle

    oracle = TorchOracle.from_function(
        lambda w: TopK(K, M).solve_torch(w if sense == "max" else -w), M, sense=sense
    )
    w = _weights(8)
    y = _states()[[0, 4, 7, 9]]
    loss = RegularizedFenchelYoungLoss(oracle, 1.5, max_iter=2000, tol=1e-12, reduction=reduction)
    x = w.clone().requires_grad_(True)
    value = loss(x, y)
    value.backward()
    sign = 1.0 if sense == "max" else -1.0
    mu = _capped_simplex_projection(sign * w / 1.5, K)
    per = 0.75 * (y * y).sum(-1) - 0.75 * (mu * mu).sum(-1) + (sign * w * (mu - y)).sum(-1)
    assert (per >= -1e-9).all()  # a Fenchel-Young loss is non-negative
    n = 4 if reduction == "mean" else 1
    torch.testing.assert_close(value, per.sum() / n, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(x.grad, sign * (mu - y) / n, atol=1e-6, rtol=1e-6)


def test_regularized_optimizer_eval_returns_the_map_state() -> None:
    oracle = TopK(K, M)
    w = _weights(1)
    layer = RegularizedOptimizer(oracle).eval()
    torch.testing.assert_close(layer(w), oracle.solve_torch(w))


# ---------------------------------------------------------------- solution pool losses
def test_pool_is_seeded_grows_with_solves_and_deduplicates() -> None:
    oracle = TopK(K, M)
    seeds = _states()[:3]
    loss = NCELoss(oracle, solutions=torch.cat([seeds, seeds]))
    assert loss.cache.size == 3
    w = _weights(0)
    loss(w, oracle.solve_torch(w))
    new = {tuple(z) for z in oracle.solve_torch(w).tolist()} - {tuple(z) for z in seeds.tolist()}
    assert loss.cache.size == 3 + len(new)
    loss(w, oracle.solve_torch(w))  # the same solves: nothing new
    assert loss.cache.size == 3 + len(new)


def test_pool_with_solve_ratio_zero_never_solves_and_empty_pool_is_an_error() -> None:
    oracle = TopK(K, M)
    w = _weights(0)
    loss = CMAPLoss(oracle, solutions=_states()[:2], solve_ratio=0.0)
    loss(w, oracle.solve_torch(w))
    assert loss.cache.size == 2
    with pytest.raises(ImleSolversError, match="empty"):
        CMAPLoss(oracle, solve_ratio=0.0)(w, oracle.solve_torch(w))


def test_pool_solve_ratio_draws_per_call() -> None:
    oracle = TopK(K, M)
    loss = NCELoss(oracle, solutions=_states()[:1], solve_ratio=0.5, seed=0)
    sizes = []
    for seed in range(40):
        w = _weights(seed)
        loss(w, oracle.solve_torch(w))
        sizes.append(loss.cache.size)
    grew = sum(b > a for a, b in itertools.pairwise(sizes))
    assert 0 < grew < 39


def test_pool_loss_uses_a_solution_cache_oracle_as_its_pool_and_pickles() -> None:
    cache = SolutionCache(TopK(K, M), p=0.0)
    loss = PairwiseLTRLoss(cache, solutions=_states()[:4])
    assert loss.cache is cache and cache.size == 4
    w = _weights(2)
    before = loss(w, _weights(3))
    clone = pickle.loads(pickle.dumps(loss))
    torch.testing.assert_close(clone(w, _weights(3)), before)


@pytest.mark.parametrize("sense", ["min", "max"])
@pytest.mark.parametrize("seed", [0, 1])
def test_contrastive_and_ranking_losses_match_their_formulas(sense: str, seed: int) -> None:
    from imle_solvers import TorchOracle

    oracle = TorchOracle.from_function(
        lambda w: TopK(K, M).solve_torch(w if sense == "max" else -w), M, sense=sense
    )
    pool = _states()  # every state: refreshes add nothing
    w, c = _weights(seed), _weights(seed + 1)
    sign = 1.0 if sense == "max" else -1.0
    y = map_solve(oracle, sign * c)
    th, t = sign * w, sign * c  # θ̂, θ
    scores, true_scores = th @ pool.T, t @ pool.T  # [B, C]
    gaps = scores - (th * y).sum(-1, keepdim=True)
    best = scores.gather(1, true_scores.argmax(1, keepdim=True))
    expected = {
        NCELoss: gaps.mean(1),
        CMAPLoss: gaps.amax(1),
        PointwiseLTRLoss: ((t - th) @ pool.T).square().mean(1),
        PairwiseLTRLoss: (scores - best).clamp(min=0).sum(1) / (len(pool) - 1),
        ListwiseLTRLoss: -(torch.log_softmax(scores, 1) * torch.softmax(true_scores, 1).clamp(min=1e-8)).sum(
            1
        ),
    }
    for loss_type, values in expected.items():
        second = y if loss_type in (NCELoss, CMAPLoss) else c
        loss = loss_type(oracle, solutions=pool, reduction="none")
        torch.testing.assert_close(loss(w, second), values)
        total = loss_type(oracle, solutions=pool, reduction="sum")(w, second)
        mean = loss_type(oracle, solutions=pool)(w, second)
        torch.testing.assert_close(total, values.sum())
        torch.testing.assert_close(mean, values.mean())


def test_pool_losses_check_their_inputs() -> None:
    loss = NCELoss(TopK(K, M), solutions=_states())
    w = _weights(0)
    with pytest.raises(ValueError, match="optimal"):
        loss(w, torch.zeros(3, M))
    bad = w.clone()
    bad[2, 1] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        loss(bad, torch.zeros(4, M))
    with pytest.raises(ValueError, match="solve_ratio"):
        NCELoss(TopK(K, M), solve_ratio=1.5)


# ---------------------------------------------------------------- perturbation gradient
@pytest.mark.parametrize("central", [False, True])
@pytest.mark.parametrize("seed", [0, 1])
def test_perturbation_gradient_value_and_gradient(central: bool, seed: int) -> None:
    oracle = DAGShortestPath.grid(3, 3)
    w = _weights(seed, 4, oracle.n_vars).abs()
    c = _weights(seed + 3, 4, oracle.n_vars).abs()
    s = 0.2
    loss = PerturbationGradientLoss(oracle, sigma=s, central=central, reduction="sum")
    x = w.clone().requires_grad_(True)
    loss(x, c).backward()
    ahead, behind = (w + s * c if central else w), w - s * c  # in cost space
    za, zb = oracle.solve_torch(ahead), oracle.solve_torch(behind)
    value = ((ahead * za).sum(-1) - (behind * zb).sum(-1)) / (2 * s if central else s)
    torch.testing.assert_close(loss(w, c), value.sum())
    torch.testing.assert_close(x.grad, (za - zb) / (2 * s if central else s))


def test_perturbation_gradient_approaches_the_decision_cost() -> None:
    oracle = DAGShortestPath.grid(3, 3)
    w, c = _weights(0, 4, oracle.n_vars).abs(), _weights(1, 4, oracle.n_vars).abs()
    loss = PerturbationGradientLoss(oracle, sigma=1e-6, reduction="none")
    torch.testing.assert_close(loss(w, c), (c * oracle.solve_torch(w)).sum(-1), atol=1e-4, rtol=1e-4)


# ---------------------------------------------------------------- binding constraints and CaVE
def test_binding_constraints_of_a_shortest_path_are_flow_rows_and_bounds() -> None:
    oracle = DAGShortestPath.grid(2, 2)  # 4 arcs, 4 nodes
    z = oracle.solve_torch(torch.tensor([1.0, 5.0, 5.0, 1.0]))
    rows = binding_constraints(oracle, z)
    assert rows.shape == (2 * 4 + 4, 4)
    on = z.numpy() == 1
    bounds = rows[8:]
    assert (np.abs(bounds).sum(axis=1) == 1).all()
    assert {tuple(r) for r in bounds} == {tuple(-np.eye(4)[j]) for j in np.flatnonzero(~on)} | {
        tuple(np.eye(4)[j]) for j in np.flatnonzero(on)
    }


def test_binding_constraints_of_a_knapsack_include_a_full_capacity_row() -> None:
    oracle = TorchKnapsack([[2], [3], [4]], [5])
    rows = binding_constraints(oracle, np.array([1.0, 1.0, 0.0]))  # 2 + 3 = 5: binding
    assert rows[0].tolist() == [2.0, 3.0, 4.0]
    rows = binding_constraints(oracle, np.array([0.0, 0.0, 1.0]))  # 4 < 5: not binding
    assert rows.shape == (3, 3)


def test_binding_constraints_of_a_declared_ilp() -> None:
    pytest.importorskip("ortools")
    from imle_solvers import ILP

    ilp = ILP(3, A_ub=[[1, 1, 1]], b_ub=[2], A_eq=[[1, -1, 0]], b_eq=[0], sense="max")
    z = ilp.solve(np.array([1.0, 1.0, -1.0]))  # z = (1, 1, 0)
    rows = binding_constraints(ilp, z)
    expected = [[1, 1, 1], [1, -1, 0], [-1, 1, 0], [0, 0, -1], [1, 0, 0], [0, 1, 0]]
    assert rows.tolist() == expected


def test_binding_constraints_refuse_oracles_without_a_linear_form() -> None:
    with pytest.raises(UnsupportedOracleError, match="TopK"):
        binding_constraints(TopK(K, M), np.array([1.0, 1, 0, 0, 0]))
    pytest.importorskip("pulp")
    from imle_solvers.adapters.graphs.tsp import tsp_ilp

    with pytest.raises(UnsupportedOracleError, match="auxiliary"):
        binding_constraints(tsp_ilp(4), np.ones(6))


def test_cave_is_zero_inside_the_cone_and_positive_outside() -> None:
    pytest.importorskip("clarabel")
    from imle_solvers import CaVELoss

    oracle = DAGShortestPath.grid(3, 3)
    c = torch.rand(3, oracle.n_vars, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    z = oracle.solve_torch(c)
    loss = CaVELoss(oracle, max_iter=50, reduction="none")
    torch.testing.assert_close(loss(c, z), torch.zeros(3, dtype=torch.float64), atol=1e-6, rtol=0)
    away = c.clone()
    away[z == 1] += 10.0  # the optimal path made far too expensive
    assert (loss(away, z) > 1e-3).all()
    x = away.clone().requires_grad_(True)
    loss(x, z).sum().backward()
    assert torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0


def test_cave_hybrid_branch_and_argument_checks() -> None:
    from imle_solvers import CaVELoss

    oracle = DAGShortestPath.grid(3, 3)
    c = torch.rand(2, oracle.n_vars, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    z = oracle.solve_torch(c)
    loss = CaVELoss(oracle, solve_ratio=0.0, inner_ratio=0.0, reduction="none")  # target θ̂/‖θ̂‖ itself
    torch.testing.assert_close(loss(c, z), torch.zeros(2, dtype=torch.float64), atol=1e-12, rtol=0)
    with pytest.raises(ValueError, match="one of them"):
        loss(c)
    with pytest.raises(ValueError, match="constraints"):
        loss(c, constraints=torch.zeros(2, 3))
    with pytest.raises(InvalidWeightsError, match=r"constraints must be a \(N, R, m\)"):
        loss(c, constraints=np.zeros((2, 1, oracle.n_vars)))  # an array, not a tensor: the same error
    bad = c.clone()
    bad[1, 0] = float("nan")
    with pytest.raises(InvalidWeightsError, match="row 1"):
        loss(bad, z)  # before any projection


def test_cave_hybrid_target_is_the_blend_of_the_unit_prediction_and_the_mean_normal() -> None:
    from imle_solvers import CaVELoss
    from imle_solvers.adapters.binding import binding_constraints

    oracle = DAGShortestPath.grid(3, 3)
    gen = torch.Generator().manual_seed(2)
    c = 3.0 * torch.rand(3, oracle.n_vars, generator=gen, dtype=torch.float64)
    c[2] = 0.0  # a zero prediction: its unit vector is 0, not 0/0
    z = oracle.solve_torch(c + torch.rand(3, oracle.n_vars, generator=gen, dtype=torch.float64))
    r = 0.3
    loss = CaVELoss(oracle, solve_ratio=0.0, inner_ratio=r, reduction="none")
    theta = -c  # a "min" oracle
    expected = []
    for t, y in zip(theta, z):
        normals = torch.as_tensor(binding_constraints(oracle, y))
        units = normals / normals.norm(dim=1, keepdim=True)
        norm = t.norm()
        target = (1 - r) * (t / norm if norm > 0 else t) + r * units.mean(0)
        expected.append(1 - torch.nn.functional.cosine_similarity(t, target, dim=0))
    out = loss(c, z)
    torch.testing.assert_close(out, torch.stack(expected))
    assert torch.isfinite(out).all()


# ---------------------------------------------------------------- the command
NEW_METHODS = [
    "nid", "dpo-mul", "pfyl-mul", "rfwo", "rfy", "nce", "cmap",
    "ltr-point", "ltr-pair", "ltr-list", "pg", "pg-central", "cave",
]  # fmt: skip


def _train(problem: str, method: str, out: str, *extra: str) -> dict:
    import json

    from imle_solvers.cli import main

    argv = ["train", "--problem", problem, "--methods", *method.split(), "--epochs", "1", "--n-test", "8"]
    argv += ["--batch-size", "8", "--no-progress", "--out", out, *extra]
    assert main(argv) == 0
    with open(f"{out}/results.json") as fh:
        return json.load(fh)


def test_every_new_method_trains_from_the_command(tmp_path) -> None:
    pytest.importorskip("clarabel")  # cave's projection
    results = _train("shortest-path", " ".join(NEW_METHODS), str(tmp_path), "--n-train", "8")
    assert [r["method"] for r in results["runs"]] == NEW_METHODS
    assert all(np.isfinite(r["regret"]) for r in results["runs"])


@pytest.mark.slow
@pytest.mark.parametrize("problem", ["knapsack", "tsp"])
@pytest.mark.parametrize("method", NEW_METHODS)
def test_every_new_method_trains_on_knapsack_and_tsp(problem: str, method: str, tmp_path) -> None:
    if method == "cave":
        pytest.importorskip("clarabel")
    extra = ("--n-train", "8", "--nodes", "5") if problem == "tsp" else ("--n-train", "16")
    results = _train(problem, method, str(tmp_path), *extra)
    (record,) = results["runs"]
    assert np.isfinite(record["regret"])


def test_the_projection_s_quadratic_term_is_the_upper_triangle_without_zeros() -> None:
    from scipy import sparse

    from imle_solvers.cave import _upper_csc

    rng = np.random.default_rng(3)
    for r in (1, 2, 5, 9):
        dense = rng.normal(size=(r, r)) * (rng.random((r, r)) < 0.5)  # about half the entries zero
        dense = dense + dense.T
        built = _upper_csc(dense)
        expected = sparse.triu(sparse.csc_matrix(dense)).tocsc()
        assert built.nnz == expected.nnz == np.count_nonzero(np.triu(dense))
        assert (built != expected).nnz == 0 and built.has_sorted_indices
