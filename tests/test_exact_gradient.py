"""The exact-gradient harness (`imle_solvers.benchmarks.exact`): its exact gradient, its problems, its
measurement, and the default target against it at small sizes (the full table: `imle-solvers bench exact`)."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from imle_solvers import IMLE, STE, Gumbel, NoNoise, RelativeTarget, TopK
from imle_solvers.benchmarks import SUITES
from imle_solvers.benchmarks import exact as harness


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("problem", sorted(harness.PROBLEMS))
@pytest.mark.parametrize("loss", sorted(harness.LOSSES))
def test_exact_gradient_is_the_derivative_of_the_expected_loss(problem: str, loss: str) -> None:
    p = harness.PROBLEMS[problem]()
    for tau, offset in ((0.5, 0.0), (2.0, 3.0)):
        theta = (torch.randn(p.n_vars, generator=gen(0), dtype=torch.float64) + offset).requires_grad_(True)
        f = harness.LOSSES[loss](gen(1), p.n_vars).scaled(1.7)
        expected = torch.softmax(p.states @ theta / tau, 0) @ f(p.states)  # E_p[L] by enumeration
        (autograd,) = torch.autograd.grad(expected, theta)
        torch.testing.assert_close(harness.exact_gradient(p.states, theta.detach(), f, tau), autograd)


def test_problems_list_their_states() -> None:
    subsets, paths = harness.PROBLEMS["subsets"](), harness.PROBLEMS["paths"]()
    knapsack = harness.PROBLEMS["knapsack"]()
    assert subsets.states.shape == (math.comb(8, 3), 8) and subsets.constant_size
    assert paths.states.shape == (25, 12) and not paths.constant_size  # Delannoy D(2, 3) = 25 paths
    assert set(paths.states.sum(1).tolist()) == {4.0, 5.0, 6.0}
    assert bool((paths.states[:, 0] == 1).all() and (paths.states[:, -1] == 1).all())  # corner to corner
    weights = [3, 4, 5, 6, 7, 8, 9, 10]
    feasible = sum(
        1 for mask in itertools.product((0, 1), repeat=8) if sum(w * b for w, b in zip(weights, mask)) <= 20
    )
    assert knapsack.states.shape == (feasible, 8) and not knapsack.constant_size
    assert bool((knapsack.states @ torch.tensor(weights, dtype=torch.float64) <= 20).all())
    for problem in (subsets, paths, knapsack):
        assert len({tuple(z.tolist()) for z in problem.states}) == len(problem.states)  # distinct
        assert set(problem.states.unique().tolist()) <= {0.0, 1.0}


@pytest.mark.parametrize("problem", sorted(harness.PROBLEMS))
def test_each_oracle_is_the_argmax_over_its_states(problem: str) -> None:
    p = harness.PROBLEMS[problem]()
    weights = torch.randn(64, p.n_vars, generator=gen(2), dtype=torch.float64)
    states = (
        p.oracle.solve_torch(weights) if isinstance(p.oracle, (TopK, harness.EnumerationOracle)) else None
    )
    assert states is not None
    best = (weights @ p.states.T).max(-1).values
    torch.testing.assert_close((states * weights).sum(-1), best)
    assert p.oracle.expected_nonzeros == pytest.approx(float(p.states.sum(1).mean()))
    assert p.noise(0.5).tau == 0.5 and p.noise(0.5).k == pytest.approx(float(p.states.sum(1).mean()))


def test_mean_estimate_and_the_comparison() -> None:
    p = harness.k_subsets(6, 2)
    theta = torch.randn(6, generator=gen(3), dtype=torch.float64)
    loss = harness.Loss("quadratic", torch.rand(6, generator=gen(4), dtype=torch.float64), alpha=3.0)
    mean, stderr = harness.mean_estimate(STE(p.oracle, NoNoise()), theta, loss, rows=10)
    z = p.oracle.solve_torch(theta)
    torch.testing.assert_close(mean, 3.0 * 2 * (z - loss.target))  # STE passes ∇zL = 2α(z − b) through
    assert torch.equal(stderr, torch.zeros(6, dtype=torch.float64))
    x = torch.tensor([1.0, 0.0], dtype=torch.float64)
    assert harness.cosine_and_bias(x, x) == (1.0, 0.0)
    assert harness.cosine_and_bias(torch.tensor([0.0, 2.0], dtype=torch.float64), x) == (0.0, math.sqrt(5))
    assert harness.cosine_and_bias(torch.zeros(2, dtype=torch.float64), x) == (0.0, 1.0)
    assert harness.cosine_and_bias(-x, x)[0] == -1.0


def test_the_harness_agrees_with_an_exact_sampler() -> None:
    # top-1 with Gumbel(τ) noise samples p exactly (Proposition 1): for a linear loss the small central
    # difference of RelativeTarget() must give the exact gradient, sign and scale included
    p = harness.k_subsets(5, 1)
    tau = 0.7
    theta = torch.randn(5, generator=gen(5), dtype=torch.float64)
    loss = harness.Loss("linear", torch.randn(5, generator=gen(6), dtype=torch.float64), alpha=2.0)
    layer = IMLE(p.oracle, Gumbel(tau), RelativeTarget(), generator=gen(7))
    mean, _ = harness.mean_estimate(layer, theta, loss, rows=100_000)
    cosine, bias = harness.cosine_and_bias(mean, harness.exact_gradient(p.states, theta, loss, tau))
    assert cosine > 0.99 and bias < 0.1


def test_run_returns_a_summary_and_detailed_rows() -> None:
    rows = harness.run(
        estimators=["IMLE default", "STE"],
        problems=["subsets"],
        rows=200,
        instances=2,
        taus=(1.0,),
        alphas=(1.0, 10.0),
        offsets=(0.0,),
    )
    summary = [r for r in rows if r["suite"] == "summary"]
    detail = [r for r in rows if r["suite"] == "exact"]
    assert len(summary) == 2 * 2 and len(detail) == 2 * 2 * 2  # estimators × α (× losses)
    assert rows[: len(summary)] == summary  # the summary comes first
    for row in rows:
        assert -1.0 <= row["cosine"] <= 1.0 and row["min_cosine"] <= row["cosine"] + 1e-12
        assert row["rel_bias"] >= 0 and row["mc_noise"] >= 0
    assert {r["problem"] for r in detail} == {"3-of-8 subsets"} and {r["loss"] for r in detail} == {
        "quadratic",
        "linear",
    }
    assert SUITES["exact"][0] == "imle_solvers.benchmarks.exact"


def test_the_local_relative_target_is_close_to_the_exact_gradient_at_small_size() -> None:
    # k-subsets and knapsacks, 4,000 rows, τ = 1: the local RelativeTarget() is close to the exact
    # gradient at every loss scale and offset, and far closer than the large step and the fixed λ
    estimators = ["RelativeTarget()", "RelativeTarget.large_step()", "PerturbedTarget(lam=10)"]
    rows = harness.run(
        estimators=estimators,
        problems=["subsets", "knapsack"],
        rows=4000,
        instances=2,
        taus=(1.0,),
        alphas=(1e-3, 1e3),
    )
    summary = {
        (r["estimator"], r["alpha"], r["offset"]): r["cosine"] for r in rows if r["suite"] == "summary"
    }
    for alpha, offset in itertools.product((1e-3, 1e3), (0.0, 10.0)):
        local = summary["RelativeTarget()", alpha, offset]
        assert local >= 0.8, (alpha, offset, local)
        assert local > summary["RelativeTarget.large_step()", alpha, offset] + 0.2
    # scale-equivariant: the same cosine at every loss scale (same noise)
    assert summary["RelativeTarget()", 1e-3, 0.0] == pytest.approx(summary["RelativeTarget()", 1e3, 0.0])
    # the fixed λ is not: a small step at α = 1e-3, eq. 10's large one at α = 1e3
    fixed_small, fixed_large = (
        summary["PerturbedTarget(lam=10)", 1e-3, 0.0],
        summary["PerturbedTarget(lam=10)", 1e3, 0.0],
    )
    assert fixed_small > fixed_large + 0.2 and summary["RelativeTarget()", 1e3, 0.0] > fixed_large + 0.2


@pytest.mark.slow
def test_the_local_target_meets_its_goal_on_the_full_harness() -> None:
    # a mean cosine ≥ 0.75 at every loss scale and offset, over the three problems, both losses,
    # τ ∈ {0.5, 1, 2} and four instances, 20,000 rows each (as `imle-solvers bench exact`)
    rows = harness.run(estimators=["RelativeTarget()"], alphas=(1e-3, 1.0, 1e3))
    for row in rows:
        if row["suite"] == "summary":
            assert row["cosine"] >= 0.75, row


def test_the_default_target_moves_most_rows_in_a_single_draw() -> None:
    # the default's single draws on the 3-subsets of 8: a nonzero gradient for at least 90 % of the rows
    # (the local RelativeTarget(), the previous default: 12 %), at every loss scale and offset
    rows = harness.run(
        estimators=["IMLE default", "RelativeTarget()"],
        problems=["subsets"],
        rows=2000,
        instances=1,
        taus=(1.0,),
        alphas=(1e-3, 1e3),
    )
    zero = {
        (r["estimator"], r["alpha"], r["offset"]): r["zero_share"] for r in rows if r["suite"] == "summary"
    }
    for (name, alpha, offset), share in zero.items():
        if name == "IMLE default":
            assert share <= 0.1, (alpha, offset, share)
            assert zero["RelativeTarget()", alpha, offset] > 0.5  # the test has power


def test_the_standard_error_shrinks_with_the_square_root_of_the_rows() -> None:
    # the error bar of the mean of `rows` one-sample estimates: std / √rows
    theta = torch.randn(8, generator=gen(0), dtype=torch.float64)
    target = torch.rand(8, generator=gen(1), dtype=torch.float64)

    def loss(z: torch.Tensor) -> torch.Tensor:
        return ((z - target) ** 2).sum(-1)

    errors = []
    for rows in (500, 2000):
        layer = IMLE(TopK(3, 8), noise=Gumbel(), generator=gen(rows))
        _, error = harness.mean_estimate(layer, theta, loss, rows)
        errors.append(float(error.mean()))
    assert 0.4 < errors[1] / errors[0] < 0.6  # 1/√4, up to the spread of a sample standard deviation


def test_per_draw_figures_average_groups_of_draws() -> None:
    exact = torch.tensor([1.0, 0.0], dtype=torch.float64)
    # four one-sample estimates: two zero, one along the exact gradient, one against it
    per_row = torch.tensor([[0.0, 0.0], [0.0, 0.0], [2.0, 0.0], [-1.0, 1.0]], dtype=torch.float64)
    cos_1, mse_1 = harness.per_draw(per_row, exact, 1)
    assert cos_1 == pytest.approx((0 + 0 + 1 - 1 / math.sqrt(2)) / 4)  # a zero draw has cosine 0
    assert mse_1 == pytest.approx((1 + 1 + 1 + 5) / 4)  # ‖g − ∇‖² / ‖∇‖² per draw
    cos_2, mse_2 = harness.per_draw(per_row, exact, 2)  # averages (0, 0) and (0.5, 0.5)
    assert cos_2 == pytest.approx((0 + 1 / math.sqrt(2)) / 2)
    assert mse_2 == pytest.approx((1 + 0.5) / 2)
    cos_4, _ = harness.per_draw(per_row, exact, 4)  # one average (0.25, 0.25)
    assert cos_4 == pytest.approx(1 / math.sqrt(2))
    partial = harness.per_draw(per_row[:3], exact, 2)  # the third draw makes no full group: dropped
    assert partial == harness.per_draw(per_row[:2], exact, 2)


def test_the_harness_reports_what_single_draws_give() -> None:
    rows = harness.run(
        estimators=["IMLE default", "PerturbedTarget(lam=0.1)", "STE"],
        problems=["subsets"],
        rows=640,
        instances=1,
        taus=(1.0,),
        alphas=(1.0,),
        offsets=(0.0,),
    )
    summary = {r["estimator"]: r for r in rows if r["suite"] == "summary"}
    for row in summary.values():
        assert {f"cos_{n}" for n in harness.DRAWS} <= row.keys() and 0 <= row["zero_share"] <= 1
        # averaging more draws cannot move further from the exact gradient on average
        assert row["rel_mse_1"] >= row["rel_mse_8"] >= row["rel_mse_32"] - 1e-9
        assert row["cos_32"] >= row["cos_1"] - 1e-9
    # a small fixed step rarely moves the state: most single draws are exactly zero; STE never is
    assert summary["PerturbedTarget(lam=0.1)"]["zero_share"] > 0.5
    assert summary["STE"]["zero_share"] == 0.0


def test_a_draw_with_samples_is_one_layer_call_with_the_loss_averaged_over_them() -> None:
    # measure(samples=S): each row's estimate comes from one call of an S-sample layer whose loss is the
    # mean over the samples (what training sees at S samples), not from S one-sample draws
    problem = harness.PROBLEMS["subsets"]()
    theta = torch.randn(8, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    loss = harness.Loss(
        "linear", torch.randn(8, generator=torch.Generator().manual_seed(6), dtype=torch.float64)
    )
    factory = harness.ESTIMATORS["IMLE default"]
    got = harness.measure(factory, problem, theta, loss, 1.0, rows=300, seed=2, samples=3)
    layer = factory(problem.oracle, problem.noise(1.0), torch.Generator().manual_seed(2))
    layer.samples = 3
    x = theta.expand(300, -1).clone().requires_grad_(True)
    loss(layer(x)).mean(dim=1).sum().backward()  # [300, 3] losses, averaged over the samples
    assert x.grad is not None
    exact = harness.exact_gradient(problem.states, theta, loss, 1.0)
    assert (got.cosine, got.bias) == harness.cosine_and_bias(x.grad.mean(0), exact)
    assert got.zero == float(x.grad.eq(0).all(-1).double().mean())
    one = harness.measure(factory, problem, theta, loss, 1.0, rows=300, seed=2)
    assert one.cosine != got.cosine  # S = 3 is not S = 1


def test_run_measures_every_sample_count_and_the_blackbox_at_one_only() -> None:
    rows = harness.run(
        estimators=["IMLE default", "Blackbox(lam=20)"],
        problems=["subsets"],
        rows=64,
        instances=1,
        taus=(1.0,),
        alphas=(1.0,),
        offsets=(0.0,),
        samples=(1, 4),
    )
    summary = {(r["estimator"], r["samples"]) for r in rows if r["suite"] == "summary"}
    assert summary == {("IMLE default", 1), ("IMLE default", 4), ("Blackbox(lam=20)", 1)}
    assert harness.FIXED_SAMPLES == frozenset({"Blackbox(lam=20)"})
    assert {r["samples"] for r in rows if r["suite"] == "exact"} == {1, 4}
