"""The targets' documented properties, each tested exactly (same noise): the default's invariances
(loss scale, offsets of θ, scaling of θ with the temperature), its local step, the large-step preset,
positive homogeneity, what a mean over samples gives for each estimator, degenerate inputs, the
adaptive target's state under module casts and extreme loss scales, and every documented default."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import pytest
import torch
from torch import nn

from imle_solvers import (
    IMLE,
    STE,
    AdaptiveTarget,
    AutoTarget,
    Gumbel,
    NoiseDistribution,
    NoNoise,
    OptimalTarget,
    PerturbedTarget,
    RelativeTarget,
    RowAdaptiveTarget,
    SumOfGamma,
    TargetDistribution,
    TopK,
)
from imle_solvers.target import LINEAR_BAND, _finite_std, _spread


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


ORACLE = TopK(3, 8)
PRIOR = AutoTarget().prior  # the weight of the linear rule at one sample (pinned below)
THETA = torch.randn(32, 8, generator=gen(0), dtype=torch.float64)
B = torch.rand(8, generator=gen(1), dtype=torch.float64)


def quadratic(z: torch.Tensor) -> torch.Tensor:
    return (z - B).square().sum()  # Σ ‖z − b‖², ∇zL = 2(z − b)


def grad(
    layer: nn.Module, theta: torch.Tensor, loss: Callable[[torch.Tensor], torch.Tensor] = quadratic
) -> torch.Tensor:
    x = theta.clone().requires_grad_(True)
    loss(layer(x)).backward()
    assert x.grad is not None
    return x.grad


TARGETS: dict[str, Callable[[], TargetDistribution]] = {
    "default": AutoTarget,
    "relative": RelativeTarget,
    "one-sided": lambda: RelativeTarget(lam=0.1, two_sided=False),
    "large-step": RelativeTarget.large_step,
}
NOISES: dict[str, Callable[[float], NoiseDistribution]] = {
    "gumbel": lambda tau: Gumbel(tau),
    "sog": lambda tau: SumOfGamma(k=3, tau=tau),
}


# --------------------------------------------------------------------------- the invariances, exactly
@pytest.mark.parametrize("target", sorted(TARGETS))
@pytest.mark.parametrize("noise", sorted(NOISES))
def test_loss_scale_multiplies_the_gradient(target: str, noise: str) -> None:
    def layer() -> nn.Module:
        return IMLE(ORACLE, NOISES[noise](1.0), TARGETS[target](), samples=3, generator=gen(2))

    base = grad(layer(), THETA)
    assert base.abs().sum() > 0
    for alpha in (1e-30, 1e-6, 0.37, 1e6, 1e30):
        scaled = grad(layer(), THETA, lambda z, a=alpha: a * quadratic(z))  # type: ignore[misc]
        torch.testing.assert_close(scaled, alpha * base, rtol=1e-12, atol=0.0)


@pytest.mark.parametrize("target", sorted(TARGETS))
@pytest.mark.parametrize("noise", sorted(NOISES))
def test_an_offset_of_theta_does_not_change_the_estimate_of_constant_size_states(
    target: str, noise: str
) -> None:
    # p(z; θ + c·1) = p(z; θ) for k-subsets: the same noise must give the same estimate
    def estimate(offset: float) -> torch.Tensor:
        layer = IMLE(ORACLE, NOISES[noise](1.0), TARGETS[target](), samples=4, generator=gen(3))
        return grad(layer, THETA + offset)

    base = estimate(0.0)
    assert base.abs().sum() > 0
    for offset in (-7.0, 10.0, 100.0, 1e4):
        torch.testing.assert_close(estimate(offset), base, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("target", sorted(TARGETS))
@pytest.mark.parametrize("noise", sorted(NOISES))
def test_scaling_theta_with_the_temperature_scales_the_estimate_by_its_inverse(
    target: str, noise: str
) -> None:
    # (θ, τ) → (cθ, cτ) leaves p(z; θ) ∝ exp(⟨z, θ⟩/τ) unchanged; ∇θ scales by 1/c
    def estimate(c: float) -> torch.Tensor:
        layer = IMLE(ORACLE, NOISES[noise](0.7 * c), TARGETS[target](), samples=3, generator=gen(4))
        return grad(layer, c * THETA)

    base = estimate(1.0)
    assert base.abs().sum() > 0
    for c in (0.25, 4.0, 1024.0):  # powers of two: every product is exact
        assert torch.equal(estimate(c), base / c)
    for c in (3.0, 0.1):
        torch.testing.assert_close(estimate(c), base / c, rtol=1e-9, atol=0.0)


def test_the_old_rms_step_was_not_offset_invariant() -> None:
    # the test above has power: a step sized by RMS(θ + ε) (the former default) changes with the offset
    class Rms(RelativeTarget):
        def _step(self, perturbed: torch.Tensor, grad_z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            rms = perturbed.square().mean(-1, keepdim=True).sqrt()
            g_max = grad_z.abs().amax(-1, keepdim=True)
            return self.lam * rms * grad_z / g_max, g_max / (self.lam * rms)

    def estimate(offset: float) -> torch.Tensor:
        return grad(IMLE(ORACLE, Gumbel(), Rms(lam=0.1), samples=4, generator=gen(3)), THETA + offset)

    assert not torch.allclose(estimate(10.0), estimate(0.0), rtol=0.1)


# --------------------------------------------------------------------------- the step itself
def test_relative_is_the_two_sided_difference_with_a_step_of_a_tenth_of_the_spread() -> None:
    s = 3
    layer = IMLE(ORACLE, Gumbel(), RelativeTarget(), samples=s, generator=gen(5))
    x = THETA.clone().requires_grad_(True)
    z = layer(x)
    upstream = torch.randn(z.shape, generator=gen(6), dtype=torch.float64)
    (z * upstream).sum().backward()
    eps = Gumbel().sample((32, s, 8), dtype=torch.float64, generator=gen(5))
    perturbed = THETA.unsqueeze(1) + eps  # θ + ε   [N, S, m]
    spread = perturbed.std(-1, keepdim=True, unbiased=False)
    lam_eff = 0.1 * spread / upstream.abs().amax(-1, keepdim=True)  # λ_eff = λ·std(θ + ε)/‖∇zL‖_∞
    plus = ORACLE.solve_torch(perturbed + lam_eff * upstream)
    minus = ORACLE.solve_torch(perturbed - lam_eff * upstream)
    torch.testing.assert_close(x.grad, ((plus - minus) / (2 * lam_eff)).sum(1))
    # the largest target move is a tenth of the spread: a local step
    step = THETA.unsqueeze(1) - RelativeTarget().params(THETA.unsqueeze(1), upstream)  # [N, S, m]
    torch.testing.assert_close(
        step.abs().amax(-1), 0.1 * THETA.std(-1, unbiased=False).unsqueeze(1).expand(-1, s)
    )


def test_one_sided_and_large_step_are_the_difference_of_eq_7() -> None:
    for target, lam in ((RelativeTarget(lam=0.1, two_sided=False), 0.1), (RelativeTarget.large_step(), 10.0)):
        layer = IMLE(ORACLE, NoNoise(), target)
        x = THETA.clone().requires_grad_(True)
        z = layer(x)
        upstream = torch.randn(z.shape, generator=gen(7), dtype=torch.float64)
        (z * upstream).sum().backward()
        lam_eff = lam * THETA.std(-1, keepdim=True, unbiased=False) / upstream.abs().amax(-1, keepdim=True)
        manual = (z - ORACLE.solve_torch(THETA - lam_eff * upstream)) / lam_eff
        torch.testing.assert_close(x.grad, manual)


def test_the_large_step_reaches_the_loss_optimum_and_the_local_step_stays_local() -> None:
    # How often the target state MAP(θ' + ε) is the loss optimum MAP(−∇zL): mostly for the large step,
    # rarely for the local RelativeTarget()
    n = 4000
    theta = torch.randn(n, 1, 10, generator=gen(8), dtype=torch.float64)
    eps = SumOfGamma(k=3).sample((n, 1, 10), dtype=torch.float64, generator=gen(9))
    g = torch.randn(n, 1, 10, generator=gen(10), dtype=torch.float64)
    oracle = TopK(3, 10)
    best = oracle.solve_torch(-g)

    def reached(target: RelativeTarget) -> float:
        return float(
            (oracle.solve_torch(target.params(theta + eps, g) + 0 * eps) == best).all(-1).double().mean()
        )

    assert reached(RelativeTarget.large_step()) > 0.5
    assert reached(RelativeTarget()) < 0.1


def test_without_noise_the_local_step_rarely_moves_and_the_large_step_does() -> None:
    # a point mass: the documented reason to use large_step() (the blackbox regime) with NoNoise
    def moved(target: TargetDistribution) -> float:
        x = THETA.clone().requires_grad_(True)
        quadratic(IMLE(ORACLE, NoNoise(), target)(x)).backward()
        assert x.grad is not None
        return float(x.grad.ne(0).any(-1).double().mean())  # share of rows with a nonzero gradient

    assert moved(RelativeTarget()) < 0.5  # only rows whose weights nearly tie
    assert moved(RelativeTarget.large_step()) > 0.9


def test_large_step_preset() -> None:
    assert RelativeTarget.large_step() == RelativeTarget(lam=10.0, two_sided=False)
    assert RelativeTarget.large_step(3.0) == RelativeTarget(lam=3.0, two_sided=False)
    with pytest.raises(ValueError, match="RelativeTarget lam must be"):
        RelativeTarget.large_step(0.0)


# --------------------------------------------------------------------------- degenerate weights
def test_spread_is_the_standard_deviation_with_fallbacks() -> None:
    x = torch.tensor(
        [[1.0, 2.0, 4.0], [5.0, 5.0, 5.0], [0.0, 0.0, 0.0], [1e-310, 0.0, -1e-310]], dtype=torch.float64
    )
    torch.testing.assert_close(
        _spread(x).squeeze(-1), torch.tensor([x[0].std(unbiased=False), 5.0, 1.0, 1.0], dtype=torch.float64)
    )
    huge = torch.tensor([[1e308, -1e308, 0.0]], dtype=torch.float64)
    assert torch.isfinite(_spread(huge)).all() and float(_spread(huge)) > 1e307
    one = torch.tensor([[3.0]], dtype=torch.float64)  # m = 1: no spread, the magnitude
    assert float(_spread(one)) == 3.0


def test_spread_of_a_row_without_finite_entries_is_the_fallback() -> None:
    x = torch.tensor([[-math.inf, -math.inf, math.inf], [-math.inf, 2.0, 6.0]], dtype=torch.float64)
    std, peak = _finite_std(x)
    assert std.squeeze(-1).tolist() == [0.0, 2.0] and peak.squeeze(-1).tolist() == [0.0, 6.0]  # no NaN
    assert _spread(x).squeeze(-1).tolist() == [1.0, 2.0]


@pytest.mark.parametrize("target", sorted(TARGETS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_no_noise_and_degenerate_theta_give_finite_nonzero_gradients(target: str, dtype: torch.dtype) -> None:
    tiny = torch.finfo(dtype).tiny
    cases = {
        "subnormal": THETA.to(dtype) * (tiny / 4),  # θ + ε subnormal: no inf/NaN
        "zero": torch.zeros(32, 8, dtype=dtype),  # std = max = 0: the fallback step of 1
        "constant": torch.full((32, 8), 3.0, dtype=dtype),  # std = 0: the step is sized by max|θ|
        "huge": THETA.to(dtype) * (torch.finfo(dtype).max / 8),
        "tiny-normal": THETA.to(dtype) * (tiny * 64),
    }
    for name, theta in cases.items():
        x = theta.clone().requires_grad_(True)
        z = IMLE(ORACLE, NoNoise(), TARGETS[target]())(x)
        (z * torch.linspace(-1, 1, 8, dtype=dtype)).sum().backward()
        assert x.grad is not None and torch.isfinite(x.grad).all(), name
        assert x.grad.abs().sum() > 0, name


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_a_huge_inverse_step_is_clamped_not_infinite(target: str) -> None:
    # std(θ + ε) of 1e-36 and ∇zL of 1e30 in float32: 1/λ_eff overflows; clamped, the estimate is finite
    theta = torch.tensor([[3.0, 2.0, 1.001, 1.0, 0.0, 0.0, 0.0, 0.0]]) * 1e-36
    x = theta.clone().requires_grad_(True)
    z = IMLE(ORACLE, NoNoise(), TARGETS[target]())(x)
    (z * torch.tensor([0.0, 0.0, 1e30, -1e30, 0.0, 0.0, 0.0, 0.0])).sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0


def test_zero_upstream_gradient_gives_a_zero_estimate() -> None:
    theta = THETA.clone()
    theta[2] = torch.tensor([3.0, 2.0, 1.001, 1.0, 0.0, 0.0, 0.0, 0.0], dtype=torch.float64)  # a near tie
    for target in TARGETS.values():
        x = theta.clone().requires_grad_(True)
        z = IMLE(ORACLE, NoNoise(), target(), samples=2)(x)
        upstream = torch.zeros(z.shape, dtype=torch.float64)
        upstream[2, 1, 2], upstream[2, 1, 3] = 1.0, -1.0  # one row, one sample: swap items 2 and 3
        (z * upstream).sum().backward()
        assert x.grad is not None
        others = torch.ones(32, dtype=torch.bool)
        others[2] = False
        assert x.grad[others].abs().sum() == 0
        assert x.grad[2, 2] > 0 and x.grad[2, 3] < 0


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_samples_without_a_gradient_keep_theta_and_the_oracle_sees_finite_weights(target: str) -> None:
    # "Rows (and samples) with ∇zL = 0 get a zero gradient": their target is θ itself, and every weight
    # the oracle is asked to solve is finite (an oracle that checks its weights refuses NaN)
    theta, eps, z, g = _auto_case(6, 330)
    g[::2] = 0.0  # rows 0, 2, 4: no gradient in either sample
    g[1, 1] = 0.0  # row 1: none in its second sample
    seen: list[torch.Tensor] = []

    def solve(weights: torch.Tensor) -> torch.Tensor:
        seen.append(weights)
        return ORACLE.solve_torch(weights)

    rule = TARGETS[target]()
    got = rule.estimate(theta, eps, z, g, solve)
    assert seen and all(bool(torch.isfinite(w).all()) for w in seen)
    assert torch.isfinite(got).all() and got[::2].abs().sum() == 0
    params = rule.params(theta, g)  # θ' = θ − (a step proportional to ∇zL)   [6, 2, 8]
    assert torch.equal(params[::2], theta[::2].expand(3, 2, 8)) and torch.equal(params[1, 1], theta[1, 0])
    assert torch.isfinite(params).all() and not torch.equal(params[1::2, 0], theta[1::2, 0])


# --------------------------------------------------------------------------- homogeneity, not linearity
HOMOGENEOUS: dict[str, Callable[[], TargetDistribution]] = {
    **TARGETS,
    "adaptive": lambda: AdaptiveTarget(step=0.0),
    "adaptive-two-sided": lambda: AdaptiveTarget(step=0.0, two_sided=True),
    "central": lambda: AutoTarget(linear=False),
}


@pytest.mark.parametrize("target", sorted(HOMOGENEOUS))
def test_estimates_are_positively_homogeneous_not_additive(target: str) -> None:
    def estimate(upstream: torch.Tensor) -> torch.Tensor:
        x = THETA.clone().requires_grad_(True)
        (IMLE(ORACLE, Gumbel(), HOMOGENEOUS[target](), generator=gen(12))(x) * upstream).sum().backward()
        assert x.grad is not None
        return x.grad

    g = torch.randn(32, 8, generator=gen(13), dtype=torch.float64)
    h = torch.randn(32, 8, generator=gen(14), dtype=torch.float64)
    torch.testing.assert_close(estimate(2.5 * g), 2.5 * estimate(g), rtol=1e-12, atol=0.0)
    assert not torch.allclose(estimate(g + h), estimate(g) + estimate(h))  # not additive
    made = HOMOGENEOUS[target]()
    # AutoTarget at one sample: the prior's blend (one-sided in part); with linear=False: central
    two_sided = made.linear is False if isinstance(made, AutoTarget) else getattr(made, "two_sided", True)
    if two_sided:  # the central difference is odd: ∇zL → −∇zL swaps its two MAPs
        torch.testing.assert_close(estimate(-g), -estimate(g), rtol=0.0, atol=0.0)
    else:  # the one-sided difference is not
        assert not torch.allclose(estimate(-g), -estimate(g))


# --------------------------------------------------------------------------- a mean over samples
def per_sample_estimates(make: Callable[[], nn.Module], s: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(gradient of the loss averaged over the S samples, mean of the S one-sample estimates)``."""
    upstream = torch.randn(32, s, 8, generator=gen(15), dtype=torch.float64)

    def run(weights: torch.Tensor) -> torch.Tensor:
        x = THETA.clone().requires_grad_(True)
        (make()(x) * weights).sum().backward()
        assert x.grad is not None
        return x.grad

    averaged = run(upstream / s)  # ∇zL of a loss averaged over the samples
    singles = []
    for k in range(s):  # the estimate with only sample k's (unscaled) ∇zL
        mask = torch.zeros(1, s, 1, dtype=torch.float64)
        mask[0, k] = 1.0
        singles.append(run(upstream * mask))
    return averaged, torch.stack(singles).mean(0)


MEAN_OF_ESTIMATES: dict[str, Callable[[], nn.Module]] = {
    "relative": lambda: IMLE(ORACLE, Gumbel(), RelativeTarget(), samples=3, generator=gen(16)),
    "one-sided": lambda: IMLE(ORACLE, Gumbel(), TARGETS["one-sided"](), samples=3, generator=gen(16)),
    "large-step": lambda: IMLE(ORACLE, Gumbel(), RelativeTarget.large_step(), samples=3, generator=gen(16)),
    "ste": lambda: STE(ORACLE, samples=3, generator=gen(16)),
}
NOT_MEAN_OF_ESTIMATES: dict[str, Callable[[], nn.Module]] = {
    # the unit is measured over every sample of the batch: a sample's term depends on the others
    "default": lambda: IMLE(ORACLE, Gumbel(), samples=3, generator=gen(16)),
    "perturbed-target": lambda: IMLE(ORACLE, Gumbel(), PerturbedTarget(1.0), samples=3, generator=gen(16)),
    "optimal-target": lambda: IMLE(ORACLE, Gumbel(), OptimalTarget(), samples=3, generator=gen(16)),
    "blackbox-rule": lambda: IMLE(ORACLE, NoNoise(), PerturbedTarget(1.0), samples=3),
}


@pytest.mark.parametrize("name", sorted(MEAN_OF_ESTIMATES))
def test_a_mean_over_samples_gives_the_mean_of_the_estimates(name: str) -> None:
    averaged, mean = per_sample_estimates(MEAN_OF_ESTIMATES[name], 3)
    assert mean.abs().sum() > 0
    torch.testing.assert_close(averaged, mean, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("name", sorted(NOT_MEAN_OF_ESTIMATES))
def test_fixed_lambda_and_optimal_targets_do_not_average_under_a_mean(name: str) -> None:
    averaged, mean = per_sample_estimates(NOT_MEAN_OF_ESTIMATES[name], 3)
    assert not torch.allclose(averaged, mean, rtol=0.05)


def test_adaptive_target_uses_one_lambda_for_all_samples() -> None:
    # homogeneous (a mean over samples divides the summed-loss gradient by S), but its λ comes from
    # every sample's ∇zL: a sample's estimate depends on the others
    def make() -> nn.Module:
        return IMLE(ORACLE, Gumbel(), AdaptiveTarget(step=0.0), samples=3, generator=gen(16))

    averaged, mean = per_sample_estimates(make, 3)
    upstream = torch.randn(32, 3, 8, generator=gen(15), dtype=torch.float64)
    x = THETA.clone().requires_grad_(True)
    (make()(x) * upstream).sum().backward()
    assert x.grad is not None
    torch.testing.assert_close(averaged, x.grad / 3, rtol=1e-12, atol=0.0)
    assert not torch.allclose(averaged, mean, rtol=0.05)


# --------------------------------------------------------------------------- AdaptiveTarget
def test_adaptive_target_state_stays_float64_under_module_casts() -> None:
    layer = IMLE(
        ORACLE, Gumbel(), AdaptiveTarget(nonzero_target=8.0, step=1e-4), samples=2, generator=gen(17)
    )
    for cast in (
        lambda m: m.to(torch.bfloat16),
        lambda m: m.half(),
        lambda m: m.float(),
        lambda m: m.to("cpu"),
    ):
        cast(layer)
        for name in ("beta", "nonzeros", "last_update"):
            assert getattr(layer.target, name).dtype == torch.float64, name
    layer.to(torch.bfloat16)
    x = THETA.to(torch.bfloat16).requires_grad_(True)
    for _ in range(5):
        quadratic(layer(x)).backward()  # few nonzeros per sample (< 8): β grows by 1e-4 a step
    beta = layer.target.beta  # type: ignore[attr-defined]
    assert float(beta) == pytest.approx(1.0 + 5e-4, abs=1e-12)  # bf16 would round it to 1.0
    assert layer.state_dict()["target.beta"].dtype == torch.float64
    assert float(beta.to(torch.bfloat16)) == 1.0  # what the cast would have kept


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_adaptive_targets_survive_extreme_loss_scales(dtype: torch.dtype) -> None:
    theta = THETA.to(dtype)
    for target in (lambda: AdaptiveTarget(step=0.0), lambda: RowAdaptiveTarget(step=0.0)):
        base = grad(IMLE(ORACLE, Gumbel(), target(), samples=2, generator=gen(18)), theta)
        assert base.abs().sum() > 0
        for alpha in (1e-30, 1e30):
            scaled = grad(
                IMLE(ORACLE, Gumbel(), target(), samples=2, generator=gen(18)),
                theta,
                lambda z, a=alpha: a * quadratic(z),  # type: ignore[misc]
            )
            assert torch.isfinite(scaled).all() and scaled.abs().sum() > 0
            torch.testing.assert_close(scaled / alpha, base, rtol=1e-4, atol=0.0)


def test_adaptive_beta_never_goes_below_zero() -> None:
    # far more nonzeros than the target of 0.01 per sample: every update lowers β by 0.4, from 1.0
    target = AdaptiveTarget(nonzero_target=0.01, beta=1.0, step=0.4)
    layer = IMLE(ORACLE, Gumbel(), target, samples=2, generator=gen(19))
    betas = []
    for _ in range(5):
        grad(layer, THETA)
        betas.append(float(target.beta))
    assert betas[:2] == pytest.approx([0.6, 0.2]) and betas[2:] == [0.0, 0.0, 0.0]  # β ← max(β + u, 0)
    assert float(target.last_update) == pytest.approx(-0.4)


def test_row_adaptive_alpha_stays_within_its_bounds() -> None:
    # α ← α·exp(±step), kept in [1e-6, 1e6]: a run of updates in one direction stops at the bound
    up = RowAdaptiveTarget(nonzero_target=1.0, alpha=2e5, step=1.0)  # the nonzero fraction is below 1
    layer = IMLE(ORACLE, Gumbel(), up, generator=gen(20))
    for _ in range(4):
        grad(layer, THETA)
    assert up.alpha == pytest.approx(1e6)
    # downwards (a tiny α leaves the gradient at zero, which pushes α up again): the update on its own
    down = RowAdaptiveTarget(nonzero_target=0.1, alpha=5e-6, step=1.0)
    for _ in range(4):
        down._update(torch.ones(3, 8))  # every entry nonzero: above the target
    assert down.alpha == pytest.approx(1e-6)


def test_adaptive_options_are_checked() -> None:
    for make in (
        lambda: AdaptiveTarget(beta=-1.0),
        lambda: AdaptiveTarget(nonzero_target=0.0),
        lambda: AdaptiveTarget(step=-1e-4),
        lambda: RowAdaptiveTarget(min_norm=0.0),
        lambda: RowAdaptiveTarget(alpha=0.0),
        lambda: RowAdaptiveTarget(nonzero_target=1.5),
    ):
        with pytest.raises(ValueError, match="AdaptiveTarget"):
            make()
    AdaptiveTarget(beta=0.0)  # β = 0 is allowed: the update raises it again


def test_adaptive_lambda_is_beta_times_the_norm_of_theta_over_s_samples_over_the_gradient_s() -> None:
    theta = THETA[:6].unsqueeze(1)  # [N, 1, m]
    g = torch.randn(6, 3, 8, generator=gen(330), dtype=torch.float64)
    lam = AdaptiveTarget(beta=2.0).lam(theta, g)
    want = 2.0 * math.sqrt(3) * theta.norm() / g.norm()  # ‖θ‖ repeated over the S = 3 samples
    torch.testing.assert_close(lam, want, rtol=1e-14, atol=0.0)
    assert float(AdaptiveTarget().lam(theta, torch.zeros_like(g))) == 0.0
    # θ given per sample already (θ repeated over S) is the same θ; rows without a sample axis, one each
    torch.testing.assert_close(AdaptiveTarget(beta=2.0).lam(theta.expand_as(g), g), lam, rtol=1e-14, atol=0.0)
    flat = AdaptiveTarget(beta=2.0).lam(theta[:, 0], g[:, 0])
    torch.testing.assert_close(flat, 2.0 * theta.norm() / g[:, 0].norm(), rtol=1e-14, atol=0.0)


def test_s_identical_samples_under_a_mean_give_the_one_sample_adaptive_gradient() -> None:
    # ‖θ‖ is repeated over the samples so that S copies of one sample, averaged, are that sample
    def gradient(samples: int) -> torch.Tensor:
        layer = IMLE(ORACLE, NoNoise(), AdaptiveTarget(step=0.0), samples=samples)
        return grad(layer, THETA, lambda z: quadratic(z) / samples if samples > 1 else quadratic(z))

    one = gradient(1)
    assert one.abs().sum() > 0
    torch.testing.assert_close(gradient(3), one, rtol=1e-12, atol=0.0)


@pytest.mark.parametrize("make", [lambda: AdaptiveTarget(step=0.0), lambda: RowAdaptiveTarget(step=0.0)])
def test_adaptive_huge_inverse_step_is_clamped_not_infinite(make: Callable[[], TargetDistribution]) -> None:
    # ‖θ‖ of 1e-36 and ∇zL of 1e30 in float32: 1/λ overflows; clamped, the estimate is finite
    theta = torch.tensor([[3.0, 2.0, 1.001, 1.0, 0.0, 0.0, 0.0, 0.0]]) * 1e-36
    x = theta.clone().requires_grad_(True)
    z = IMLE(ORACLE, NoNoise(), make())(x)
    (z * torch.tensor([0.0, 0.0, 1e30, -1e30, 0.0, 0.0, 0.0, 0.0])).sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0


def test_row_adaptive_target_params_and_its_update_at_the_target() -> None:
    theta = THETA[:4].unsqueeze(1)
    g = torch.randn(4, 2, 8, generator=gen(350), dtype=torch.float64)
    target = RowAdaptiveTarget(alpha=0.7)
    torch.testing.assert_close(target.params(theta, g), theta - target.lam(theta, g) * g)  # θ' = θ − λ∇zL
    at = RowAdaptiveTarget(nonzero_target=0.25, alpha=1.0, step=0.5)
    grad_theta = torch.zeros(2, 8)
    grad_theta[:, :2] = 1.0  # a nonzero fraction of exactly 0.25: not below the target, α shrinks
    at._update(grad_theta)
    assert at.alpha == pytest.approx(math.exp(-0.5))
    grad_theta[0, 0] = 0.0  # 3 of 16: below, α grows back
    at._update(grad_theta)
    assert at.alpha == pytest.approx(1.0)


def test_row_adaptive_lambda_is_per_row_at_any_scale() -> None:
    # λ = α·max(‖θ‖, min_norm)/‖∇zL‖ for each row, in float32 with rows of 1e-30 and 1e30 side by side
    theta = torch.randn(4, 1, 8, generator=gen(340), dtype=torch.float64) * 3.0
    g = -torch.rand(4, 2, 8, generator=gen(341), dtype=torch.float64)  # negative entries
    g[:, :, 0] = 0.0
    g[0] *= 1e-30
    g[1] *= 1e30
    lam = RowAdaptiveTarget(alpha=0.5, min_norm=2.0).lam(theta.float(), g.float())
    want = 0.5 * theta.norm(dim=-1, keepdim=True).clamp_min(2.0) / g.norm(dim=-1, keepdim=True)
    assert lam.shape == (4, 2, 1) and torch.isfinite(lam).all()
    torch.testing.assert_close(lam.double(), want, rtol=1e-5, atol=0.0)


def test_adaptive_state_follows_the_device_of_the_gradients_it_adapts_to() -> None:
    # a target not moved with its model: its state goes where the gradients are (here the meta device,
    # whose tensors have no values) and stays float64
    target = AdaptiveTarget()
    target._update(torch.zeros(2, 3, 4, device="meta"))
    for name in ("beta", "nonzeros", "last_update"):
        buffer = getattr(target, name)
        assert buffer.device.type == "meta" and buffer.dtype == torch.float64, name


def test_adaptive_target_on_an_empty_batch() -> None:
    target = AdaptiveTarget()
    empty = torch.zeros(0, 2, 8, dtype=torch.float64)
    assert float(target.lam(torch.zeros(0, 1, 8, dtype=torch.float64), empty)) == 0.0
    out = target.estimate(torch.zeros(0, 1, 8, dtype=torch.float64), empty, empty, empty, ORACLE.solve_torch)
    assert out.shape == (0, 8)


# --------------------------------------------------------------------------- documented defaults
def test_target_defaults_are_pinned() -> None:
    assert (RelativeTarget().lam, RelativeTarget().two_sided) == (0.1, True)
    assert (PerturbedTarget().lam, PerturbedTarget().two_sided) == (10.0, False)
    adaptive = AdaptiveTarget()
    assert (adaptive.nonzero_target, float(adaptive.beta), adaptive.step, adaptive.momentum) == (
        1.0,
        1.0,
        1e-4,
        0.0,
    )
    assert (adaptive.decay, float(adaptive.nonzeros), adaptive.two_sided) == (0.9, 1.0, False)
    row = RowAdaptiveTarget()
    assert (row.nonzero_target, row.alpha, row.step, row.two_sided, row.min_norm) == (
        0.1,
        1.0,
        0.05,
        False,
        1.0,
    )
    auto = AutoTarget()
    assert (auto.near, auto.far, auto.cap, auto.floor, auto.linear, auto.prior) == (
        2.0,
        30.0,
        3.0,
        0.5,
        None,
        0.4,
    )
    assert (auto.sync, auto.process_group) == (True, None)
    assert IMLE(ORACLE).target == AutoTarget()


def test_the_training_methods_use_the_documented_targets() -> None:
    from imle_solvers.training.methods import build_method

    def target_of(name: str) -> object:
        return build_method(name, ORACLE).modules[0].target  # type: ignore[union-attr]

    assert target_of("imle") == AutoTarget(linear=True)  # the default, told that the regret is linear
    assert target_of("imle-large-step") == RelativeTarget.large_step()
    assert target_of("imle-pid") == PerturbedTarget(10.0)
    assert isinstance(target_of("imle-mumu"), OptimalTarget)
    assert isinstance(target_of("aimle"), AdaptiveTarget)


def test_the_default_target_is_used_and_each_option_matters() -> None:
    def estimate(target: TargetDistribution | None) -> torch.Tensor:
        return grad(IMLE(ORACLE, Gumbel(), target, samples=2, generator=gen(19)), THETA)

    default = estimate(None)
    torch.testing.assert_close(default, estimate(AutoTarget(near=2.0, far=30.0)), rtol=0.0, atol=0.0)
    for other in (AutoTarget(near=1.0), RelativeTarget(), RelativeTarget.large_step()):
        assert not torch.allclose(default, estimate(other))

    # the far step matters where the loss is linear in z (the same upstream gradient for every sample)
    def linear(target: TargetDistribution | None) -> torch.Tensor:
        layer = IMLE(ORACLE, Gumbel(), target, samples=2, generator=gen(19))
        return grad(layer, THETA, lambda z: (z * (B - 0.5)).sum())

    torch.testing.assert_close(linear(None), linear(AutoTarget(far=30.0)), rtol=0.0, atol=0.0)
    assert not torch.allclose(linear(None), linear(AutoTarget(far=3.0)))
    fixed = estimate(PerturbedTarget())
    torch.testing.assert_close(fixed, estimate(PerturbedTarget(10.0, two_sided=False)), rtol=0.0, atol=0.0)
    assert not torch.allclose(fixed, estimate(PerturbedTarget(1.0)))
    assert not torch.allclose(fixed, estimate(PerturbedTarget(two_sided=True)))


# --------------------------------------------------------------------------- CUDA
@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_targets_keep_their_invariances_and_state() -> None:  # pragma: no cover - GPU only
    theta = THETA.cuda()

    def on_device(z: torch.Tensor) -> torch.Tensor:
        return (z - B.to(z.device, z.dtype)).square().sum()  # quadratic() with b on z's device

    def estimate(target: TargetDistribution, c: float, offset: float) -> torch.Tensor:
        layer = IMLE(ORACLE, Gumbel(c), target, samples=3, generator=torch.Generator("cuda").manual_seed(0))
        x = (c * theta + offset).requires_grad_(True)
        on_device(layer(x)).backward()
        assert x.grad is not None and x.grad.device.type == "cuda"
        return x.grad

    for target in (RelativeTarget(), RelativeTarget.large_step()):
        base = estimate(target, 1.0, 0.0)
        assert base.abs().sum() > 0
        torch.testing.assert_close(estimate(target, 1.0, 10.0), base, rtol=1e-9, atol=1e-9)
        assert torch.equal(estimate(target, 4.0, 0.0), base / 4)
    layer = IMLE(ORACLE, Gumbel(), AdaptiveTarget(nonzero_target=8.0, step=1e-4), samples=2).cuda()
    layer.to(torch.bfloat16)
    beta = layer.target.beta  # type: ignore[attr-defined]
    assert beta.dtype == torch.float64 and beta.device.type == "cuda"
    x = theta.to(torch.bfloat16).requires_grad_(True)
    for _ in range(5):
        on_device(layer(x)).backward()
    assert float(layer.target.beta) == pytest.approx(1.0 + 5e-4, abs=1e-12)  # type: ignore[attr-defined]


# --------------------------------------------------------------------------- forbidden pairs (-inf)
FORBIDDEN_TARGETS: dict[str, tuple[Callable[[], TargetDistribution], float]] = {
    # the target and the share of rows its step moves at the least (a local step of 0.1: ~0.1)
    "default": (lambda: IMLE(TopK(1, 2)).target, 0.5),
    "relative-0.1": (lambda: RelativeTarget(0.1), 0.03),
    "large-step": (RelativeTarget.large_step, 0.5),
    "adaptive": (AdaptiveTarget, 0.3),
    "row-adaptive": (RowAdaptiveTarget, 0.3),
}


@pytest.mark.parametrize("target", sorted(FORBIDDEN_TARGETS))
@pytest.mark.parametrize("seed", range(3))
def test_rows_with_forbidden_pairs_keep_a_finite_nonzero_gradient(target: str, seed: int) -> None:
    from imle_solvers import TorchMatching

    n = 5
    weights = torch.randn(64, n, n, generator=gen(seed), dtype=torch.float64)
    forbidden = torch.rand(64, n, n, generator=gen(seed + 10)) < 0.3
    forbidden &= ~torch.eye(n, dtype=torch.bool)  # the identity stays feasible in every row
    weights = weights.masked_fill(forbidden, -math.inf).reshape(64, n * n)
    make, least = FORBIDDEN_TARGETS[target]
    layer = IMLE(TorchMatching(n, n), Gumbel(), make(), check_finite=False, generator=gen(seed + 20))
    x = weights.clone().requires_grad_(True)
    upstream = torch.randn(64, n * n, generator=gen(seed + 30), dtype=torch.float64)
    (layer(x) * upstream).sum().backward()
    assert x.grad is not None
    assert torch.isfinite(x.grad).all()
    assert (x.grad[forbidden.reshape(64, -1)] == 0).all()  # a forbidden pair is never chosen
    moving = x.grad.ne(0).any(dim=1)  # rows with a nonzero gradient (before: none with a -inf pair)
    assert moving[forbidden.flatten(1).any(dim=1)].float().mean() > least


# --------------------------------------------------------------------------- the default, AutoTarget
def _units(
    perturbed: torch.Tensor, g: torch.Tensor, eps: torch.Tensor, cap: float = 3.0, floor: float = 0.5
) -> torch.Tensor:
    """u_n = max(u, floor · u_row), u = ‖min(s, c·σ)‖₂ / ‖‖g‖_∞‖₂ over the samples with g ≠ 0 of the batch,
    u_row the same over the row's samples alone; written out.  [N, 1, 1]"""
    g_max = g.abs().amax(-1)  # [N, S]
    active = g_max > 0
    sigma = eps.std(-1, unbiased=False)
    spread = torch.minimum(perturbed.std(-1, unbiased=False), cap * sigma)
    spread = torch.where(sigma > 0, spread, perturbed.std(-1, unbiased=False))  # no noise: no cap
    spread = torch.where(active, spread, torch.zeros_like(spread))
    batch = spread.norm() / g_max.norm()
    row = spread.norm(dim=1) / g_max.norm(dim=1)  # [N]
    return torch.maximum(batch, floor * torch.nan_to_num(row)).view(-1, 1, 1)


def _blend(
    perturbed: torch.Tensor, g: torch.Tensor, u: torch.Tensor, w: torch.Tensor | float
) -> torch.Tensor:
    """The estimate of weight w written out: plus w + 2(1 − w), minus 30w + 2(1 − w), divisor w + 2(1 − w)."""
    w = torch.as_tensor(w, dtype=torch.float64).reshape(-1, 1, 1)
    plus, minus, divisor = w + 2 * (1 - w), 30 * w + 2 * (1 - w), w + 2 * (1 - w)
    diff = ORACLE.solve_torch(perturbed + plus * u * g) - ORACLE.solve_torch(perturbed - minus * u * g)
    return (diff / (divisor * u)).sum(1)


@pytest.mark.parametrize("seed", range(3))
def test_auto_target_is_the_central_difference_of_two_units_on_a_curved_loss(seed: int) -> None:
    s = 3
    layer = IMLE(ORACLE, Gumbel(), AutoTarget(), samples=s, generator=gen(40 + seed))
    x = THETA.clone().requires_grad_(True)
    z = layer(x)
    upstream = torch.randn(z.shape, generator=gen(50 + seed), dtype=torch.float64)  # differs by sample
    upstream[:4] *= 0.01  # four rows with a much smaller loss: the floor holds their step
    (z * upstream).sum().backward()
    eps = Gumbel().sample((32, s, 8), dtype=torch.float64, generator=gen(40 + seed))
    perturbed = THETA.unsqueeze(1) + eps  # θ + ε   [N, S, m]
    u = _units(perturbed, upstream, eps)
    floored = (u > _units(perturbed, upstream, eps, floor=0.0)).flatten()
    assert floored[:4].all() and not floored[4:].any()
    plus, minus = (
        ORACLE.solve_torch(perturbed + 2 * u * upstream),
        ORACLE.solve_torch(perturbed - 2 * u * upstream),
    )
    central = ((plus - minus) / (2 * u)).sum(1)  # a = 2 units, divided by 2u, not by 2a·u
    seen = (z != z[:, :1]).flatten(1).any(1)  # rows whose samples are one state take the prior's blend
    torch.testing.assert_close(
        x.grad, torch.where(seen[:, None], central, _blend(perturbed, upstream, u, PRIOR))
    )
    assert seen.double().mean() > 0.5


@pytest.mark.parametrize("seed", range(3))
def test_auto_target_takes_the_far_step_where_the_loss_is_linear_in_z(seed: int) -> None:
    s = 4
    layer = IMLE(ORACLE, Gumbel(), AutoTarget(), samples=s, generator=gen(60 + seed))
    x = THETA.clone().requires_grad_(True)
    z = layer(x)
    c = torch.randn(32, 1, 8, generator=gen(70 + seed), dtype=torch.float64)
    (z * c).sum().backward()  # ⟨c, z⟩: every sample of a row has ∇zL = c
    eps = Gumbel().sample((32, s, 8), dtype=torch.float64, generator=gen(60 + seed))
    perturbed = THETA.unsqueeze(1) + eps
    g = c.expand(-1, s, -1)
    u = _units(perturbed, g, eps)
    near, far = ORACLE.solve_torch(perturbed + u * g), ORACLE.solve_torch(perturbed - 30.0 * u * g)
    seen = (z != z[:, :1]).flatten(1).any(1)  # rows whose samples are not all one state
    want = torch.where(seen[:, None], ((near - far) / u).sum(1), _blend(perturbed, g, u, PRIOR))
    torch.testing.assert_close(x.grad, want)
    assert seen.double().mean() > 0.5  # most rows show that the loss is linear
    # the far side is the best state under the loss for most samples (eq. 10's target)
    assert (far == ORACLE.solve_torch(-g)).all(-1).double().mean() > 0.75


@pytest.mark.parametrize("prior", [0.0, 0.4, 1.0])
@pytest.mark.parametrize("loss", ["quadratic", "linear"])
def test_one_sample_blends_the_two_rules_by_the_prior(prior: float, loss: str) -> None:
    layer = IMLE(ORACLE, Gumbel(), AutoTarget(prior=prior), generator=gen(400))
    x = THETA.clone().requires_grad_(True)
    z = layer(x)  # [N, m]: one sample
    upstream = (2 * (z - B) if loss == "quadratic" else (B - 0.5).expand_as(z)).detach()  # ∇zL
    (z * upstream).sum().backward()
    eps = Gumbel().sample((32, 1, 8), dtype=torch.float64, generator=gen(400))
    perturbed = THETA.unsqueeze(1) + eps
    g = upstream.unsqueeze(1)
    torch.testing.assert_close(x.grad, _blend(perturbed, g, _units(perturbed, g, eps), prior))


def test_a_declared_linear_loss_takes_the_far_step_at_one_sample_and_false_never_does() -> None:
    def estimate(target: AutoTarget, s: int) -> torch.Tensor:
        layer = IMLE(ORACLE, Gumbel(), target, samples=s, generator=gen(410))
        return grad(layer, THETA, lambda z: (z * (B - 0.5)).sum())

    eps = Gumbel().sample((32, 1, 8), dtype=torch.float64, generator=gen(410))
    perturbed = THETA.unsqueeze(1) + eps
    g = (B - 0.5).expand(32, 1, 8)
    u = _units(perturbed, g, eps)
    torch.testing.assert_close(estimate(AutoTarget(linear=True), 1), _blend(perturbed, g, u, 1.0))
    torch.testing.assert_close(estimate(AutoTarget(linear=False), 1), _blend(perturbed, g, u, 0.0))
    # with samples the declaration wins over what the samples show
    eps = Gumbel().sample((32, 3, 8), dtype=torch.float64, generator=gen(410))
    perturbed, g = THETA.unsqueeze(1) + eps, (B - 0.5).expand(32, 3, 8)
    torch.testing.assert_close(
        estimate(AutoTarget(linear=False), 3), _blend(perturbed, g, _units(perturbed, g, eps), 0.0)
    )


def test_auto_target_reads_the_weight_from_the_directions_of_the_samples() -> None:
    target = AutoTarget()
    g = torch.randn(7, 3, 5, generator=gen(80), dtype=torch.float64)
    z = torch.zeros(7, 3, 5, dtype=torch.float64)
    z[:, 1, 0] = 1.0  # the samples of every row differ
    g[1] = g[1, :1]  # every sample the same gradient
    g[2] = g[2, :1] * torch.tensor([1.0, 3.0, 0.2], dtype=torch.float64)[:, None]  # same way, other sizes
    g[3] = 0.0  # no gradient at all: nothing to tell from
    g[4] = g[4, :1]
    z[4] = 0.0  # the same gradient, but one state: no evidence
    g[5, 1:] = 0.0  # one sample with a gradient: nothing to compare
    g[6] = g[6, :1]
    g[6, 2] = 0.0  # two samples alike, the third without a gradient: they agree
    assert target.linear_weight(z, g).tolist() == [0.0, 1.0, 1.0, PRIOR, PRIOR, PRIOR, 1.0]
    assert target.linear_weight(z[:, :1], g[:, :1]).tolist() == [PRIOR] * 7  # one sample
    assert target.linear_weight(z[:, 0], g[:, 0]).tolist() == [PRIOR] * 7  # no sample axis
    assert AutoTarget(linear=True).linear_weight(z, g).tolist() == [1.0] * 7
    assert AutoTarget(linear=False).linear_weight(z, g).tolist() == [0.0] * 7
    assert AutoTarget(prior=0.0).linear_weight(z, g).tolist() == [0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0]


def test_the_weight_falls_continuously_with_the_spread_of_the_directions() -> None:
    # two samples ĝ = (cos φ, ±sin φ): ν = sin φ; weight 1 up to 0.01, 0 from 0.1, log-linear between
    low, high = LINEAR_BAND
    assert (low, high) == (0.01, 0.1)
    z = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]], dtype=torch.float64)
    for nu, want in [(0.0, 1.0), (0.005, 1.0), (0.01, 1.0), (0.1**1.5, 0.5), (0.1, 0.0), (0.5, 0.0)]:
        phi = math.asin(nu)
        g = torch.tensor(
            [[[math.cos(phi), math.sin(phi)], [math.cos(phi), -math.sin(phi)]]], dtype=torch.float64
        )
        got = float(AutoTarget().linear_weight(z, g)[0])
        assert got == pytest.approx(want, abs=1e-9), nu
    weights = []
    for nu in torch.linspace(0.0, 0.2, 81).tolist():
        phi = math.asin(nu)
        g = torch.tensor([[[math.cos(phi), math.sin(phi)], [math.cos(phi), -math.sin(phi)]]])
        weights.append(float(AutoTarget().linear_weight(z, g.double())[0]))
    steps = [a - b for a, b in itertools.pairwise(weights)]
    assert min(steps) >= 0 and max(steps) < 0.25  # never rises, never jumps


@pytest.mark.parametrize("seed", range(3))
def test_a_tiny_change_of_a_linear_loss_does_not_change_the_gradient(seed: int) -> None:
    # the regret with its samples weighted 1 and 1 + 1e-6: the same rule, the gradient scaled by ~1
    c = torch.randn(32, 1, 8, generator=gen(420 + seed), dtype=torch.float64)

    def estimate(tilt: float) -> torch.Tensor:
        layer = IMLE(ORACLE, Gumbel(), samples=2, generator=gen(430 + seed))
        weights = torch.tensor([1.0, 1.0 + tilt], dtype=torch.float64).view(1, 2, 1)
        return grad(layer, THETA, lambda z: (z * c * weights).sum())

    plain, tilted = estimate(0.0), estimate(1e-6)
    torch.testing.assert_close(tilted, plain, rtol=1e-5, atol=1e-9)
    assert plain.abs().sum() > 0


@pytest.mark.parametrize("seed", range(3))
def test_a_term_constant_on_the_assignments_leaves_the_regret_s_gradient_close(seed: int) -> None:
    # every assignment of 5 × 5 has ‖z‖² = 5: adding 1e-3·‖z‖² to the regret changes no decision, and the
    # gradient stays that of the regret (the directions of ∇zL differ by ~1e-3 between samples)
    from imle_solvers import TorchMatching

    oracle = TorchMatching(5, 5)
    theta = torch.randn(16, 25, generator=gen(440 + seed), dtype=torch.float64)
    c = torch.rand(16, 1, 25, generator=gen(450 + seed), dtype=torch.float64)

    def estimate(bump: float) -> torch.Tensor:
        layer = IMLE(oracle, Gumbel(), samples=4, generator=gen(460 + seed))
        return grad(layer, theta, lambda z: -(z * c).sum() + bump * z.square().sum())

    plain, bumped = estimate(0.0), estimate(1e-3)
    cosine = float((plain * bumped).sum() / (plain.norm() * bumped.norm()))
    assert cosine > 0.97
    assert float(bumped.norm() / plain.norm()) == pytest.approx(1.0, abs=0.05)


def test_a_row_keeps_its_step_when_its_neighbours_losses_are_much_larger() -> None:
    from imle_solvers.benchmarks.coupling import response, row_draws

    def zero_share(target: AutoTarget | None) -> float:
        draws = {a: row_draws(target, a, draws=60) for a in (1.0, 100.0)}
        return response(draws)[1].zero

    assert zero_share(None) <= 0.1  # the default's floor: a step of half the row's own unit
    assert (
        zero_share(AutoTarget(floor=0.0)) >= 0.5
    )  # the batch's unit alone: mostly zero (the test has power)


@pytest.mark.parametrize("loss", ["quadratic", "linear"])
def test_auto_target_sizes_its_step_over_the_batch(loss: str) -> None:
    # a row's gradient twice as large takes a step twice as long (as θ − λ∇zL): rows are not normalised
    # one by one, and scaling every row together changes nothing (the unit follows the batch)
    def estimate(scale_row: float, scale_all: float) -> torch.Tensor:
        layer = IMLE(ORACLE, Gumbel(), AutoTarget(), samples=2, generator=gen(90))
        x = THETA.clone().requires_grad_(True)
        z = layer(x)
        weights = torch.ones(32, 1, 1, dtype=torch.float64)
        weights[0] = scale_row
        if loss == "quadratic":
            value = ((z - B).square() * weights).sum()
        else:
            value = (z * (B - 0.5) * weights).sum()
        (scale_all * value).backward()
        assert x.grad is not None
        return x.grad

    base = estimate(1.0, 1.0)
    torch.testing.assert_close(estimate(1.0, 7.0), 7.0 * base, rtol=1e-12, atol=0.0)
    assert not torch.allclose(estimate(1e3, 1.0)[1:], base[1:])  # one row's scale moves the others' unit


def test_auto_target_under_a_mean_over_samples_divides_the_summed_gradient_by_s() -> None:
    def linear(z: torch.Tensor) -> torch.Tensor:
        return (z * (B - 0.5)).sum()

    for loss in (quadratic, linear):
        summed = grad(IMLE(ORACLE, Gumbel(), samples=3, generator=gen(95)), THETA, loss)
        mean = grad(IMLE(ORACLE, Gumbel(), samples=3, generator=gen(95)), THETA, lambda z, f=loss: f(z) / 3)
        torch.testing.assert_close(mean, summed / 3, rtol=1e-12, atol=0.0)


def test_auto_target_sync_off_and_options_checked() -> None:
    assert AutoTarget(sync=False) == AutoTarget(sync=False)
    bad_values: list[dict[str, object]] = [
        {"near": 0.0},
        {"far": -1.0},
        {"near": math.nan},
        {"cap": 0.0},
        {"cap": -2.0},
        {"floor": -0.1},
        {"floor": math.nan},
        {"prior": 1.5},
        {"prior": -0.1},
        {"prior": math.nan},
    ]
    for bad in bad_values:
        with pytest.raises(ValueError, match="AutoTarget"):
            AutoTarget(**bad)  # type: ignore[arg-type]
    for wrong in ("yes", 1, 0.5):
        with pytest.raises(TypeError, match="AutoTarget linear"):
            AutoTarget(linear=wrong)  # type: ignore[arg-type]


def test_auto_target_caps_the_spread_at_three_spreads_of_the_noise() -> None:
    # confident weights (a spread far beyond the noise's): the step stops growing with them
    theta = 100.0 * THETA  # std(θ) ≈ 100, Gumbel(0.1) noise std ≈ 0.13
    s = 2
    x = theta.clone().requires_grad_(True)
    z = IMLE(ORACLE, Gumbel(0.1), samples=s, generator=gen(96))(x)
    upstream = torch.randn(z.shape, generator=gen(97), dtype=torch.float64)
    (z * upstream).sum().backward()
    eps = Gumbel(0.1).sample((32, s, 8), dtype=torch.float64, generator=gen(96))
    perturbed = theta.unsqueeze(1) + eps
    u = _units(perturbed, upstream, eps)
    assert (u < 0.1 * _units(perturbed, upstream, eps, cap=math.inf)).all()  # the cap sized the unit
    plus, minus = (
        ORACLE.solve_torch(perturbed + 2 * u * upstream),
        ORACLE.solve_torch(perturbed - 2 * u * upstream),
    )
    seen = (z != z[:, :1]).flatten(1).any(1)  # confident weights: many rows draw one state twice (prior)
    central = ((plus - minus) / (2 * u)).sum(1)
    torch.testing.assert_close(
        x.grad, torch.where(seen[:, None], central, _blend(perturbed, upstream, u, PRIOR))
    )


def _auto_case(rows: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """θ ``[N, 1, m]``, Gumbel ε and ``z = MAP(θ + ε)`` ``[N, 2, m]``, a random ∇zL ``[N, 2, m]``."""
    theta = THETA[:rows].unsqueeze(1)
    eps = Gumbel().sample((rows, 2, 8), dtype=torch.float64, generator=gen(seed))
    upstream = torch.randn(rows, 2, 8, generator=gen(seed + 1), dtype=torch.float64)
    return theta, eps, ORACLE.solve_torch(theta + eps), upstream


def test_auto_target_sizes_its_unit_over_the_samples_with_a_gradient_only() -> None:
    # u = ‖r‖ / ‖‖g‖_∞‖ over the samples with g ≠ 0: rows without a gradient change nothing
    theta, eps, z, g = _auto_case(8, 310)
    g[2] = 0.0  # a row outside the loss
    g[5] = 0.0
    both = AutoTarget().estimate(theta, eps, z, g, ORACLE.solve_torch)
    keep = [0, 1, 3, 4, 6, 7]
    alone = AutoTarget().estimate(theta[keep], eps[keep], z[keep], g[keep], ORACLE.solve_torch)
    torch.testing.assert_close(both[keep], alone, rtol=0.0, atol=0.0)
    assert both[[2, 5]].abs().sum() == 0 and alone.abs().sum() > 0


def test_auto_target_without_any_gradient_gives_zeros_not_nan() -> None:
    theta, eps, z, g = _auto_case(4, 320)
    for target in (AutoTarget(), AutoTarget(near=0.5, far=3.0), AutoTarget(linear=True, floor=0.0)):
        got = target.estimate(theta, eps, z, torch.zeros_like(g), ORACLE.solve_torch)
        assert torch.equal(got, torch.zeros(4, 8, dtype=torch.float64))
        params = target.params(theta, torch.zeros_like(g))
        assert torch.equal(params, theta.expand_as(g))  # θ' = θ − minus·u·0


def test_auto_target_params_is_the_minus_side_of_its_rule() -> None:
    # no noise and no samples to read: the unit from θ alone, the weight declared or the prior
    theta, _, _, g = _auto_case(6, 330)
    zero = torch.zeros_like(g)
    for target, w in ((AutoTarget(), PRIOR), (AutoTarget(linear=True), 1.0), (AutoTarget(prior=0.0), 0.0)):
        u = _units(theta.expand_as(g), g, zero, floor=target.floor)
        minus = 30 * w + 2 * (1 - w)
        torch.testing.assert_close(target.params(theta, g), theta - minus * u * g)


@pytest.mark.parametrize("seed", range(3))
def test_most_rows_of_a_large_batch_get_a_gradient_under_a_mean(seed: int) -> None:
    # B = 1,024 rows of TopK(5, 20), a loss averaged over the batch: the default moves at least half of
    # the rows in one draw; the local RelativeTarget() moves about a quarter
    theta = torch.randn(1024, 20, generator=gen(200 + seed), dtype=torch.float64)
    b = torch.rand(20, generator=gen(210 + seed), dtype=torch.float64)

    def moved(target: TargetDistribution | None) -> float:
        x = theta.clone().requires_grad_(True)
        z = IMLE(TopK(5, 20), None, target, generator=gen(220 + seed))(x)
        (z - b).square().sum(-1).mean().backward()
        assert x.grad is not None
        return float(x.grad.ne(0).any(-1).double().mean())

    assert moved(None) >= 0.5
    assert moved(RelativeTarget()) < 0.5  # the test has power


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_default_target_needs_no_host_synchronisation() -> None:  # pragma: no cover - GPU only
    # the default's backward on a device-native oracle reads nothing on the host (a recorded CUDA-graph
    # step can hold it), in the general regime and in the linear one
    import warnings

    def backward(device: str, linear: bool) -> torch.Tensor:
        layer = IMLE(ORACLE, Gumbel(), samples=3, generator=torch.Generator(device).manual_seed(0))
        x = THETA.to(device).requires_grad_(True)
        z = layer(x)
        upstream = (B - 0.5).to(device).expand_as(z) if linear else torch.randn_like(z)
        if device == "cuda":
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message="Synchronization debug mode is a prototype")
                torch.cuda.set_sync_debug_mode("error")
        try:
            (z * upstream).sum().backward()
        finally:
            if device == "cuda":
                torch.cuda.set_sync_debug_mode("default")
        assert x.grad is not None
        return x.grad

    for linear in (False, True):
        grad_cuda = backward("cuda", linear)
        assert grad_cuda.abs().sum() > 0


def test_norms_are_exact_for_zero_negative_huge_and_tiny_rows() -> None:
    from imle_solvers.target import _norms

    x = torch.tensor(
        [
            [0.0, 0.0, 0.0],  # zero: 0, not 0/0
            [-3.0, -4.0, 0.0],  # every entry negative: the largest magnitude scales, not the largest entry
            [3e300, 4e300, 0.0],  # the squares would overflow
            [3e-300, -4e-300, 0.0],  # and underflow
            [-1.0, 0.5, 0.25],
        ],
        dtype=torch.float64,
    )
    want = torch.tensor([0.0, 5.0, 5e300, 5e-300, (1.0 + 0.25 + 0.0625) ** 0.5], dtype=torch.float64)
    torch.testing.assert_close(_norms(x), want, rtol=1e-15, atol=0.0)
    assert _norms(x.reshape(5, 3, 1), keep=1).tolist() == _norms(x).tolist()  # over every trailing axis
    assert _norms(torch.zeros(4, 0)).tolist() == [0.0] * 4
