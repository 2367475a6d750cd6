"""regret, SPO+ and Fenchel-Young against brute force; Fact 2 of the paper."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from imle_solvers import IMLE, InvalidWeightsError, MapOracle, NoNoise, OptimalTarget, SumOfGamma
from imle_solvers.adapters import DAGShortestPath
from imle_solvers.losses import FenchelYoungLoss, SPOPlusLoss, hamming_loss, regret
from tests.support.oracles import EnumOracle, k_subsets

STATES = k_subsets(5, 2)  # all 2-subsets of 5 items


def close(actual: torch.Tensor, expected: torch.Tensor) -> None:
    """``np.testing.assert_allclose`` for tensors (``torch.testing`` costs seconds to import)."""
    np.testing.assert_allclose(actual.detach().numpy(), expected.detach().numpy(), rtol=1.3e-6, atol=1e-5)


class CountingPool:
    """A BatchSolver that records the batch size of every call."""

    def __init__(self) -> None:
        self.calls: list[int] = []

    def solve_batch(self, oracle: MapOracle, weights: np.ndarray) -> np.ndarray:
        self.calls.append(len(weights))
        return oracle.solve_batch(weights)


def brute(states: np.ndarray, w: np.ndarray, sense: str) -> np.ndarray:
    scores = w @ states.T  # [N, |C|]
    return states[scores.argmax(1) if sense == "max" else scores.argmin(1)]


weights = st.lists(st.floats(-3, 3, allow_nan=False, width=32), min_size=15, max_size=15).map(
    lambda v: torch.tensor(v, dtype=torch.float64).view(3, 5)
)


@given(weights, weights, st.sampled_from(["min", "max"]))
def test_regret_matches_brute_force(pred: torch.Tensor, true: torch.Tensor, sense: str) -> None:
    oracle = EnumOracle(STATES, sense)
    z_hat = brute(STATES, pred.numpy(), sense)
    z_star = brute(STATES, true.numpy(), sense)
    obj_hat, obj_star = (true.numpy() * z_hat).sum(1), (true.numpy() * z_star).sum(1)
    expected = obj_hat - obj_star if sense == "min" else obj_star - obj_hat
    per = regret(oracle, pred, true, normalized=False)
    np.testing.assert_allclose(per.numpy(), expected, atol=1e-9)
    assert torch.all(per >= -1e-12)
    norm = regret(oracle, pred, true)
    denom = np.abs(obj_star).sum()
    if denom > 1e-9:
        np.testing.assert_allclose(norm.item(), expected.sum() / denom, rtol=1e-9, atol=1e-12)
    # zero for the true weights, and the same with precomputed optimal states
    assert torch.all(regret(oracle, true, true, normalized=False).abs() < 1e-12)
    with_opt = regret(oracle, pred, true, normalized=False, optimal=torch.from_numpy(z_star))
    np.testing.assert_allclose(with_opt.numpy(), expected, atol=1e-9)


def test_regret_one_batched_call_and_shapes() -> None:
    oracle = DAGShortestPath.grid(3, 3)
    pool = CountingPool()
    enum = EnumOracle(STATES, "min")
    c = torch.rand(2, 4, 5, dtype=torch.float64) + 0.1
    per = regret(enum, c + torch.randn_like(c), c, normalized=False, pool=pool)
    assert per.shape == (2, 4) and pool.calls == [16]  # ĉ and c solved together
    true = torch.rand(7, oracle.n_vars)
    assert regret(oracle, true, true).item() == 0.0
    assert regret(oracle, -true, true).item() > 0  # the most expensive decisions have positive regret


def spo_brute(pred: np.ndarray, true: np.ndarray) -> np.ndarray:
    """Closed form of SPO+ for a min problem, over explicit states."""
    z_star = brute(STATES, true, "min")
    worst = ((true - 2 * pred) @ STATES.T).max(1)  # max_z ⟨c − 2ĉ, z⟩
    return worst + 2 * (pred * z_star).sum(1) - (true * z_star).sum(1)


@given(weights, weights)
def test_spo_plus_closed_form_and_subgradient(pred: torch.Tensor, true: torch.Tensor) -> None:
    oracle = EnumOracle(STATES, "min")
    c_hat = pred.clone().requires_grad_(True)
    loss = SPOPlusLoss(oracle, reduction="none")(c_hat, true)
    np.testing.assert_allclose(loss.detach().numpy(), spo_brute(pred.numpy(), true.numpy()), atol=1e-9)
    # SPO+ is an upper bound on the regret
    assert torch.all(loss.detach() >= regret(oracle, pred, true, normalized=False) - 1e-9)
    loss.sum().backward()
    z_star = brute(STATES, true.numpy(), "min")
    z_spo = brute(STATES, (2 * pred - true).numpy(), "min")
    np.testing.assert_allclose(c_hat.grad.numpy(), 2 * (z_star - z_spo), atol=1e-12)  # 2(z*(c) − z*(2ĉ − c))


@given(weights, weights)
def test_spo_plus_max_sense_is_min_on_negated_weights(pred: torch.Tensor, true: torch.Tensor) -> None:
    v_hat = pred.clone().requires_grad_(True)
    loss = SPOPlusLoss(EnumOracle(STATES, "max"), reduction="none")(v_hat, true)
    np.testing.assert_allclose(loss.detach().numpy(), spo_brute(-pred.numpy(), -true.numpy()), atol=1e-9)
    assert torch.all(loss.detach() >= regret(EnumOracle(STATES, "max"), pred, true, normalized=False) - 1e-9)
    loss.sum().backward()
    z_star = brute(STATES, true.numpy(), "max")
    z_spo = brute(STATES, (2 * pred - true).numpy(), "max")
    np.testing.assert_allclose(v_hat.grad.numpy(), 2 * (z_spo - z_star), atol=1e-12)  # 2(z*(2v̂ − v) − z*(v))


def test_spo_plus_reductions_pool_and_optimal() -> None:
    oracle = EnumOracle(STATES, "min")
    pool = CountingPool()
    pred, true = torch.randn(6, 5, dtype=torch.float64), torch.randn(6, 5, dtype=torch.float64)
    per = SPOPlusLoss(oracle, pool=pool, reduction="none")(pred, true)
    assert pool.calls == [12]  # 2ĉ − c and c in one call
    mean = SPOPlusLoss(oracle)(pred, true)
    opt = torch.from_numpy(brute(STATES, true.numpy(), "min"))
    with_opt = SPOPlusLoss(oracle, pool=pool, reduction="sum")(pred, true, optimal=opt)
    assert pool.calls[-1] == 6
    close(mean, per.mean())
    close(with_opt, per.sum())
    with pytest.raises(ValueError, match="differ in shape"):
        SPOPlusLoss(oracle)(pred, true[:3])
    bad = pred.clone()
    bad[4, 0] = float("nan")
    with pytest.raises(InvalidWeightsError) as info:
        SPOPlusLoss(oracle)(bad, true)
    assert info.value.rows == (4,)


@pytest.mark.parametrize("sense", ["min", "max"])
def test_fenchel_young_gradient_is_expected_map_minus_target(sense: str) -> None:
    oracle = EnumOracle(STATES, sense)
    pred = torch.randn(4, 5, dtype=torch.float64, requires_grad=True)
    y = torch.from_numpy(STATES[[0, 3, 5, 9]])
    fy = FenchelYoungLoss(
        oracle, sigma=0.7, samples=6, generator=torch.Generator().manual_seed(3), reduction="sum"
    )
    loss = fy(pred, y)
    loss.backward()
    sign = 1.0 if sense == "max" else -1.0
    theta = sign * pred.detach()
    eps = 0.7 * torch.randn((4, 6, 5), dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    perturbed = (theta.unsqueeze(1) + eps).reshape(-1, 5).numpy()
    z = torch.from_numpy(brute(STATES, perturbed, "max")).view(4, 6, 5)
    expected_grad_theta = z.mean(1) - y  # E[MAP(θ + ε)] − y
    close(pred.grad, sign * expected_grad_theta)
    expected_value = ((theta.unsqueeze(1) + eps) * z).sum(-1).mean(1) - (theta * y).sum(-1)
    close(loss.detach(), expected_value.sum())


def test_fenchel_young_without_noise_is_nonnegative_and_zero_at_target() -> None:
    oracle = EnumOracle(STATES, "max")
    theta = torch.randn(8, 5, dtype=torch.float64)
    y_map = torch.from_numpy(brute(STATES, theta.numpy(), "max"))
    fy = FenchelYoungLoss(oracle, noise=NoNoise(), samples=1, reduction="none")
    assert torch.all(fy(theta, y_map).abs() < 1e-12)  # y = MAP(θ): loss 0
    other = torch.from_numpy(STATES[np.zeros(8, dtype=int)])
    assert torch.all(fy(theta, other) >= -1e-12)
    with pytest.raises(ValueError, match="shape"):
        fy(theta, other[:2])
    pool = CountingPool()
    FenchelYoungLoss(oracle, samples=5, pool=pool)(theta, y_map)
    assert pool.calls == [40]  # all N·S perturbations in one call


def test_fact_2_optimal_target_with_regret_loss() -> None:
    """I-MLE + eq. 10 target + ℓ_R = ⟨c, z⟩ gives ∇θ = Σ_s MAP(θ + ε_s) − MAP(−c + ε_s)."""
    oracle = DAGShortestPath.grid(3, 3)
    m, n, s = oracle.n_vars, 5, 4
    c_hat = (torch.rand(n, m, dtype=torch.float64) + 0.5).requires_grad_(True)
    c = torch.rand(n, m, dtype=torch.float64) + 0.5
    noise = SumOfGamma(k=oracle.expected_nonzeros)
    layer = IMLE(
        oracle, noise=noise, target=OptimalTarget(), samples=s, generator=torch.Generator().manual_seed(0)
    )
    z = layer(c_hat)  # [n, s, m]
    (c.unsqueeze(1) * z).sum().backward()  # ℓ_R summed: ∇z ℓ = c for every sample
    eps = noise.sample((n, s, m), dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    theta = -c_hat.detach()
    z_model = oracle.solve_torch(-(theta.unsqueeze(1) + eps))  # MAP(θ + ε) for a min oracle
    z_target = oracle.solve_torch(-(-c.unsqueeze(1) + eps))  # MAP(−c + ε)
    close(z, z_model)
    grad_theta = (z_model - z_target).sum(1)  # the sum over samples (autograd's rule)
    close(c_hat.grad, -grad_theta)  # ∇ĉ = −∇θ


def test_hamming_loss_unchanged() -> None:
    z = torch.tensor([[1.0, 0.0, 1.0, 0.0]])
    y = torch.tensor([[1.0, 1.0, 0.0, 0.0]])
    assert hamming_loss(z, y).item() == 0.5
    assert hamming_loss(z, y, reduction="none").shape == (1,)
