"""regret, SPO+ and Fenchel-Young against brute force; Fact 2 of the paper."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from imle_solvers import (
    IMLE,
    Gumbel,
    InvalidWeightsError,
    MapOracle,
    NoNoise,
    Normal,
    OptimalTarget,
    SumOfGamma,
)
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
    with pytest.raises(
        InvalidWeightsError, match=r"weights_true must have the shape of weights_pred \(6, 5\)"
    ):
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
    with pytest.raises(InvalidWeightsError, match=r"^y must have shape \(8, 5\), got \(2, 5\)$"):
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


# --------------------------------------------------------------------------- argument checks
def test_reductions_are_checked_at_construction() -> None:
    oracle = EnumOracle(STATES, "min")
    for make in (SPOPlusLoss, FenchelYoungLoss):
        with pytest.raises(ValueError, match=r"^reduction must be one of 'mean', 'sum', 'none', got 'avg'$"):
            make(oracle, reduction="avg")  # type: ignore[arg-type, operator]
    assert oracle.solve_calls == 0
    with pytest.raises(ValueError, match=r"^reduction must be one of .*got 'avg'$"):
        hamming_loss(torch.zeros(2, 5), torch.zeros(2, 5), reduction="avg")  # type: ignore[arg-type]


def test_losses_refuse_a_class_or_a_wrong_type_with_advice() -> None:
    with pytest.raises(
        TypeError, match=r"^oracle must be a MapOracle instance, got the class EnumOracle; pass"
    ):
        SPOPlusLoss(EnumOracle)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^oracle must be a MapOracle instance, got 'x' \(str\)$"):
        regret("x", torch.zeros(1, 5), torch.zeros(1, 5))  # type: ignore[arg-type]
    with pytest.raises(
        TypeError, match=r"^noise must be a NoiseDistribution instance, got the class NoNoise"
    ):
        FenchelYoungLoss(EnumOracle(STATES), noise=NoNoise)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^generator must be a Generator instance or None, got 3 \(int\)$"):
        FenchelYoungLoss(EnumOracle(STATES), generator=3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^samples must be a positive integer, got 0$"):
        FenchelYoungLoss(EnumOracle(STATES), samples=0)


BROADCASTABLE = [
    torch.zeros(5),  # one state for every row: broadcasting would hide the mistake
    torch.zeros(1, 5),
    torch.zeros(6, 1),
    torch.zeros(3, 2, 5),
]


@pytest.mark.parametrize("optimal", BROADCASTABLE, ids=["m", "1xm", "Bx1", "reshaped"])
def test_optimal_states_of_another_shape_are_refused_not_broadcast(optimal: torch.Tensor) -> None:
    oracle = EnumOracle(STATES, "min")
    pred, true = torch.randn(6, 5, dtype=torch.float64), torch.randn(6, 5, dtype=torch.float64)
    message = rf"^optimal must have shape \(6, 5\), got {re.escape(str(tuple(optimal.shape)))}$"
    with pytest.raises(InvalidWeightsError, match=message):
        regret(oracle, pred, true, optimal=optimal)
    with pytest.raises(InvalidWeightsError, match=message):
        SPOPlusLoss(oracle)(pred, true, optimal=optimal)
    with pytest.raises(InvalidWeightsError, match=r"^y must have shape \(6, 5\)"):
        FenchelYoungLoss(oracle)(pred, optimal)
    assert oracle.batch_calls == [] and oracle.solve_calls == 0  # refused before any solve


def test_optimal_states_with_nan_or_of_another_type_are_refused() -> None:
    oracle = EnumOracle(STATES, "min")
    pred, true = torch.randn(4, 5, dtype=torch.float64), torch.randn(4, 5, dtype=torch.float64)
    optimal = torch.from_numpy(brute(STATES, true.numpy(), "min"))
    optimal[1, 2] = float("nan")
    optimal[3, 0] = float("inf")
    for call in (
        lambda: regret(oracle, pred, true, optimal=optimal),
        lambda: SPOPlusLoss(oracle)(pred, true, optimal),
        lambda: FenchelYoungLoss(oracle)(pred, optimal),
    ):
        with pytest.raises(InvalidWeightsError, match=r"^batch rows 1, 3: (optimal|y) contains NaN or inf$"):
            call()
    with pytest.raises(InvalidWeightsError, match=r"^optimal must be a torch\.Tensor, got ndarray$"):
        regret(oracle, pred, true, optimal=optimal.numpy())  # type: ignore[arg-type]
    with pytest.raises(InvalidWeightsError, match=r"^optimal must be real, got torch\.complex128$"):
        regret(oracle, pred, true, optimal=torch.zeros(4, 5, dtype=torch.complex128))
    assert oracle.batch_calls == []


def test_integer_optimal_states_are_accepted_as_floats() -> None:
    oracle = EnumOracle(STATES, "min")
    pred, true = torch.randn(4, 5, dtype=torch.float64), torch.randn(4, 5, dtype=torch.float64)
    optimal = torch.from_numpy(brute(STATES, true.numpy(), "min"))
    expected = regret(oracle, pred, true, normalized=False)
    close(regret(oracle, pred, true, normalized=False, optimal=optimal.long()), expected)
    close(SPOPlusLoss(oracle)(pred, true, optimal.bool()), SPOPlusLoss(oracle)(pred, true))


def test_fenchel_young_sigma_and_noise_are_not_both_taken() -> None:
    with pytest.raises(ValueError, match=r"^pass sigma or noise, not both"):
        FenchelYoungLoss(EnumOracle(STATES), sigma=2.0, noise=Gumbel())
    with pytest.raises(ValueError, match=r"^Normal sigma must be a finite number > 0, got 0"):
        FenchelYoungLoss(EnumOracle(STATES), sigma=0.0)


# --------------------------------------------------------------------------- defaults and options
def test_loss_defaults() -> None:
    oracle = EnumOracle(STATES, "min")
    fy = FenchelYoungLoss(oracle)
    assert fy.noise == Normal(1.0) and fy.samples == 10 and fy.reduction == "mean"
    assert fy.pool is None and fy.generator is None
    assert SPOPlusLoss(oracle).reduction == "mean" and SPOPlusLoss(oracle).pool is None
    pred, true = torch.randn(6, 5, dtype=torch.float64), torch.randn(6, 5, dtype=torch.float64)
    close(regret(oracle, pred, true), regret(oracle, pred, true, normalized=True))
    per = regret(oracle, pred, true, normalized=False)
    assert per.shape == (6,)
    z_star = torch.from_numpy(brute(STATES, true.numpy(), "min"))
    close(regret(oracle, pred, true), per.sum() / (true * z_star).sum(-1).abs().sum())
    z = torch.zeros(3, 5)
    assert hamming_loss(z, torch.ones(3, 5)).shape == ()  # "mean" over rows by default


def test_hamming_loss_default_reduction_is_the_mean_over_rows() -> None:
    z = torch.tensor([[1.0, 0.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, 1.0]])
    y = torch.tensor([[1.0, 1.0, 0.0, 0.0]]).expand(3, 4)
    per = hamming_loss(z, y, reduction="none")
    assert per.tolist() == [0.5, 0.0, 1.0]
    assert hamming_loss(z, y).item() == pytest.approx(0.5)
    assert hamming_loss(z, y, reduction="sum").item() == 1.5


class _FailsOnRow(MapOracle):
    """Solves 2-subsets; raises, naming the row, where the first weight is exactly 99."""

    sense = "min"
    n_vars = 5
    expected_nonzeros = 2.0

    def solve(self, weights: np.ndarray) -> np.ndarray:
        return brute(STATES, np.asarray(weights)[None], "min")[0]

    def solve_batch(self, weights: np.ndarray) -> np.ndarray:
        bad = np.flatnonzero(weights[:, 0] == 99.0)
        if bad.size:
            raise InvalidWeightsError("weight 99 refused", rows=bad.tolist())
        return brute(STATES, weights, "min")


def test_solver_errors_name_the_users_row_and_tensor() -> None:
    pred, true = torch.zeros(4, 5, dtype=torch.float64), torch.zeros(4, 5, dtype=torch.float64)
    true[2, 0] = 99.0  # row 2 of weights_true: row 4 + 2 = 6 of the one batched call
    message = r"^batch row 2: weight 99 refused \(in the solve of weights_true\)$"
    with pytest.raises(InvalidWeightsError, match=message):
        regret(_FailsOnRow(), pred, true)
    pred[1, 0] = 49.5  # SPO+ solves 2·pred − true (= 99 in row 1) and true (= 99 in row 2) in one call
    with pytest.raises(
        InvalidWeightsError,
        match=r"^batch rows 1, 2: weight 99 refused \(in the solve of 2·weights_pred − weights_true and "
        r"the solve of weights_true\)$",
    ):
        SPOPlusLoss(_FailsOnRow())(pred, true)


def test_fenchel_young_solver_errors_name_the_instance_not_the_sample() -> None:
    oracle = _FailsOnRow()
    pred = torch.zeros(3, 5, dtype=torch.float64)
    pred[2, 0] = 99.0  # every one of row 2's samples: rows 8 … 11 of the (N·S, m) batch
    fy = FenchelYoungLoss(oracle, noise=NoNoise(), samples=4)
    with pytest.raises(InvalidWeightsError, match=r"^batch row 2: weight 99 refused$"):
        fy(pred, torch.from_numpy(STATES[:3]))


def test_fenchel_young_default_noise_is_ten_standard_normal_draws() -> None:
    oracle = EnumOracle(STATES, "max")
    theta = torch.randn(3, 5, dtype=torch.float64)
    y = torch.from_numpy(STATES[[1, 2, 3]])
    value = FenchelYoungLoss(oracle, generator=torch.Generator().manual_seed(5), reduction="none")(theta, y)
    eps = torch.randn((3, 10, 5), dtype=torch.float64, generator=torch.Generator().manual_seed(5))  # σ = 1
    perturbed = theta.unsqueeze(1) + eps  # [3, 10, 5]
    z = torch.from_numpy(brute(STATES, perturbed.reshape(-1, 5).numpy(), "max")).view(3, 10, 5)
    close(value, (perturbed * z).sum(-1).mean(1) - (theta * y).sum(-1))


@pytest.mark.parametrize("sigma", [0.3, 2.0])
def test_fenchel_young_sigma_is_the_noise_scale(sigma: float) -> None:
    oracle = EnumOracle(STATES, "max")
    theta, y = torch.randn(4, 5, dtype=torch.float64), torch.from_numpy(STATES[[0, 1, 2, 3]])

    def loss(**options: object) -> torch.Tensor:
        fy = FenchelYoungLoss(oracle, generator=torch.Generator().manual_seed(1), reduction="none", **options)
        return fy(theta, y)

    close(loss(sigma=sigma), loss(noise=Normal(sigma)))
    assert not torch.allclose(loss(sigma=sigma), loss())


def test_losses_on_an_empty_batch() -> None:
    oracle = EnumOracle(STATES, "min")
    empty = torch.zeros(0, 5, dtype=torch.float64, requires_grad=True)
    assert regret(oracle, empty, empty).item() == 0.0 and regret(
        oracle, empty, empty, normalized=False
    ).shape == (0,)
    SPOPlusLoss(oracle, reduction="sum")(empty, empty.detach()).backward()
    FenchelYoungLoss(oracle, reduction="sum")(empty, empty.detach()).backward()
    assert empty.grad is not None and empty.grad.shape == (0, 5)
    assert oracle.batch_calls == []
