"""Estimator semantics under ordinary PyTorch use: loss scale, reduction, the S-sample convention,
AI-MLE as published, the fixed-λ warning, NaN upstream gradients, options, torch.func."""

from __future__ import annotations

import copy
import math
import warnings
from collections.abc import Callable

import numpy as np
import pytest
import torch
from torch import nn

from imle_solvers import (
    IMLE,
    STE,
    AdaptiveTarget,
    Blackbox,
    FenchelYoungLoss,
    Gumbel,
    InfeasibleError,
    InvalidWeightsError,
    MapOracle,
    NoiseDistribution,
    NoNoise,
    OptimalTarget,
    PerturbedOptimizer,
    PerturbedTarget,
    RelativeTarget,
    SPOPlusLoss,
    TopK,
    hamming_loss,
    regret,
)
from tests.support.oracles import EnumOracle, k_subsets


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def grad(
    make: Callable[[], nn.Module], w: torch.Tensor, loss: Callable[[torch.Tensor], torch.Tensor]
) -> torch.Tensor:
    """∇w of loss(layer(w)) for a freshly built layer (same generator seed → same noise)."""
    x = w.clone().requires_grad_(True)
    loss(make()(x)).backward()
    assert x.grad is not None
    return x.grad


ORACLE = TopK(3, 8)
W = torch.randn(6, 8, generator=gen(0), dtype=torch.float64)
Y = ORACLE.solve_torch(torch.randn(6, 8, generator=gen(1), dtype=torch.float64))

LINEAR: dict[str, Callable[[], nn.Module]] = {
    "imle-default": lambda: IMLE(ORACLE, Gumbel(), samples=3, generator=gen(2)),
    "imle-default-sog": lambda: IMLE(ORACLE, samples=3, generator=gen(2)),
    "imle-default-two-sided": lambda: IMLE(
        ORACLE, Gumbel(), RelativeTarget(two_sided=True), samples=3, generator=gen(2)
    ),
    "aimle": lambda: IMLE(ORACLE, Gumbel(), AdaptiveTarget(), samples=3, generator=gen(2)),
    "aimle-two-sided": lambda: IMLE(
        ORACLE, Gumbel(), AdaptiveTarget(two_sided=True), samples=3, generator=gen(2)
    ),
    "ste": lambda: STE(ORACLE, samples=3, generator=gen(2)),
    "perturbed-optimizer": lambda: PerturbedOptimizer(ORACLE, samples=3, generator=gen(2)),
    "perturbed-optimizer-gumbel": lambda: PerturbedOptimizer(
        ORACLE, samples=3, noise="gumbel", generator=gen(2)
    ),
}


def squared(z: torch.Tensor) -> torch.Tensor:
    return ((z - Y.unsqueeze(-2) if z.dim() == 3 else z - Y) ** 2).sum()


def near_ties(rows: int = 6) -> torch.Tensor:
    """Weights whose third and fourth items nearly tie in every row (rows scaled 1 … rows): without noise
    a local step changes the top-3 state exactly when their upstream gradients differ, whatever the seed."""
    base = torch.linspace(1.0, -1.0, 8, dtype=torch.float64)
    base[3] = base[2] - 1e-3
    return base * torch.arange(1, rows + 1, dtype=torch.float64).unsqueeze(1)  # [rows, 8]


TIES_TARGET = torch.tensor([0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 0.0], dtype=torch.float64)


def squared_to_ties_target(z: torch.Tensor) -> torch.Tensor:
    """‖z − y‖² with y = items 3-5: ∇zL = 2(z − y) differs between the near-tied items 2 and 3."""
    return ((z - TIES_TARGET) ** 2).sum()


# --------------------------------------------------------------------------- loss-scale equivariance
@pytest.mark.parametrize("name", sorted(LINEAR))
def test_gradient_is_equivariant_to_the_loss_scale(name: str) -> None:
    base = grad(LINEAR[name], W, squared)
    assert base.abs().sum() > 0, "the check needs a nonzero gradient"
    for alpha in (1e-6, 1e-3, 0.1, 7.0, 1e3, 1e6):
        scaled = grad(LINEAR[name], W, lambda z, a=alpha: a * squared(z))  # type: ignore[misc]
        torch.testing.assert_close(scaled, alpha * base, rtol=1e-6, atol=0.0)


def test_fenchel_young_loss_is_linear_in_the_upstream_gradient() -> None:
    def fy_grad(alpha: float) -> torch.Tensor:
        x = W.clone().requires_grad_(True)
        (alpha * FenchelYoungLoss(ORACLE, samples=4, generator=gen(3))(x, Y)).backward()
        assert x.grad is not None
        return x.grad

    base = fy_grad(1.0)
    for alpha in (1e-6, 1e6):
        torch.testing.assert_close(fy_grad(alpha), alpha * base, rtol=1e-9, atol=0.0)


@pytest.mark.parametrize("target", [None, RelativeTarget.large_step()], ids=["default", "large-step"])
def test_default_target_support_does_not_depend_on_reduction_or_batch_size(
    target: RelativeTarget | None,
) -> None:
    big = torch.randn(256, 8, generator=gen(4), dtype=torch.float64)
    y = ORACLE.solve_torch(torch.randn(256, 8, generator=gen(5), dtype=torch.float64))

    def support(rows: int, reduce: str) -> torch.Tensor:
        x = big[:rows].clone().requires_grad_(True)
        z = IMLE(ORACLE, Gumbel(), target, samples=2, generator=gen(6))(x)
        per = hamming_loss(z, y[:rows].unsqueeze(1), reduction="none")
        (per.mean() if reduce == "mean" else per.sum()).backward()
        assert x.grad is not None
        return x.grad.ne(0).any(dim=1)

    full_sum, full_mean = support(256, "sum"), support(256, "mean")
    assert torch.equal(full_sum, full_mean)  # a loss averaged over 512 terms loses no row
    # the large step changes the state of nearly every row; the default's local step, of fewer
    assert full_sum.float().mean() > (0.9 if target is not None else 0.25)
    assert torch.equal(support(4, "mean"), full_mean[:4])  # same noise for the first rows


def test_the_zero_gradient_warning_counts_only_rows_with_an_upstream_gradient() -> None:
    # rows 1-3 are not part of the loss (∇zL = 0): their zero estimates say nothing about the step size
    x = torch.randn(4, 8, generator=gen(7)).requires_grad_(True)
    layer = IMLE(ORACLE, Gumbel(), PerturbedTarget(10.0), generator=gen(8))
    z = layer(x)
    away = 100.0 * (2 * z[0].detach() - 1)  # ∇zL of row 0: its chosen items cost, the others pay
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (z[0] * away).sum().backward()
    assert x.grad is not None and x.grad[0].ne(0).any() and x.grad[1:].eq(0).all()
    # the one row with a gradient gets an all-zero estimate: the warning counts it (1 of 1 rows)
    tiny = IMLE(ORACLE, Gumbel(), PerturbedTarget(10.0), generator=gen(8))
    with pytest.warns(RuntimeWarning, match=r"all-zero gradient for 100% of the rows"):
        (tiny(x)[0] * 1e-9 * (1 - 2 * z[0].detach())).sum().backward()


def test_fixed_lambda_loses_rows_under_mean_and_warns_once() -> None:
    big = torch.randn(256, 8, generator=gen(4))
    y = ORACLE.solve_torch(torch.randn(256, 8, generator=gen(5)))
    layer = IMLE(ORACLE, Gumbel(), PerturbedTarget(10.0), generator=gen(6))
    x = big.clone().requires_grad_(True)
    with pytest.warns(RuntimeWarning, match=r"PerturbedTarget\(lam=10.0\).*all-zero gradient for \d+%"):
        hamming_loss(layer(x), y).backward()  # ∇zL = ±1/(256·8): λ∇zL ≪ the gaps of θ + ε
    assert x.grad is not None and x.grad.ne(0).any(dim=1).float().mean() < 0.5
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per layer
        hamming_loss(layer(x), y).backward()
        # the default target never needs the warning, under the same loss
        hamming_loss(IMLE(ORACLE, Gumbel(), generator=gen(6))(x), y).backward()
        # a summed loss keeps the fixed λ working: no warning
        hamming_loss(
            IMLE(ORACLE, Gumbel(), PerturbedTarget(10.0), generator=gen(6))(x), y, reduction="sum"
        ).backward()


def _fixed_lambda_backward(
    theta: torch.Tensor,
    upstream: Callable[[torch.Tensor], torch.Tensor],
    noise: NoiseDistribution | None = None,
) -> int:
    """Backward of a fixed-λ layer (λ = 1) with the upstream ``upstream(z)``; the number of warnings."""
    layer = IMLE(TopK(3, 8), noise or NoNoise(), PerturbedTarget(1.0), generator=gen(7))
    x = theta.clone().requires_grad_(True)
    z = layer(x)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        z.backward(upstream(z.detach()))
    assert x.grad is not None
    zero_rows = x.grad.eq(0).all(dim=1).float().mean()
    assert zero_rows == 1 or (noise is not None and zero_rows > 0.6)  # the gradients are (mostly) zero
    return sum("PerturbedTarget(lam=1.0) returned an all-zero gradient" in str(w.message) for w in caught)


def test_fixed_lambda_warning_counts_only_rows_whose_step_is_below_a_tenth_of_the_spread() -> None:
    theta = torch.arange(8.0).expand(16, 8)  # std 2.29 per row: the threshold 0.1·s is 0.229; gaps of 1

    def away(a: float) -> Callable[[torch.Tensor], torch.Tensor]:
        return lambda z: (2 * z - 1) * a  # pushes against the state: it moves once 2λa > 1

    assert _fixed_lambda_backward(theta, away(0.2)) == 1  # step 0.2 < 0.229: small, and nothing moved
    assert _fixed_lambda_backward(theta, away(0.25)) == 0  # step 0.25: not small, merely not enough


def test_fixed_lambda_warning_is_silent_where_training_has_converged() -> None:
    """Rows whose step confirms their state (the loss wants what they have) are converged, not lost."""
    theta = torch.randn(64, 8, generator=gen(3))
    assert _fixed_lambda_backward(theta, lambda z: 1 - 2 * z) == 0  # ∇zL of the Hamming loss to z itself
    # a batch where 6 of 10 rows have a tiny step and 4 converged warns (60 %); 4 tiny and 6 converged not
    for tiny, warned in ((6, 1), (4, 0)):
        scale = torch.tensor([1e-6] * tiny + [1.0] * (10 - tiny))[:, None]
        count = _fixed_lambda_backward(
            theta[:10], lambda z, s=scale: torch.where(s < 1, 2 * z - 1, 1 - 2 * z) * s
        )
        assert count == warned, (tiny, count)


def test_fixed_lambda_warning_measures_the_spread_of_theta_plus_the_noise() -> None:
    """θ = 0 with noise of scale 100: a step of 5 is small next to θ + ε (spread ≈ 128), not next to θ."""
    theta = torch.zeros(64, 8)
    count = _fixed_lambda_backward(theta, lambda z: (2 * z - 1) * 5.0, Gumbel(100.0))
    assert count == 1


# --------------------------------------------------------------------------- the S convention
@pytest.mark.parametrize(
    "make",
    [
        lambda s: IMLE(ORACLE, NoNoise(), samples=s),
        lambda s: IMLE(ORACLE, NoNoise(), RelativeTarget(two_sided=True), samples=s),
        lambda s: IMLE(ORACLE, NoNoise(), AdaptiveTarget(), samples=s),
        lambda s: STE(ORACLE, NoNoise(), samples=s),
    ],
    ids=["default", "default-two-sided", "aimle", "ste"],
)
def test_identical_samples_under_a_mean_over_samples_give_the_one_sample_gradient(make: Callable) -> None:
    w, loss = near_ties(), squared_to_ties_target  # no noise: a nonzero gradient needs near ties
    one = grad(lambda: make(1), w, loss)
    assert one.abs().sum() > 0
    for s in (2, 5):
        averaged = grad(lambda s=s: make(s), w, lambda z, s=s: loss(z) / s)  # type: ignore[misc]
        torch.testing.assert_close(averaged, one, rtol=1e-12, atol=1e-15)
        summed = grad(lambda s=s: make(s), w, loss)  # type: ignore[misc]
        torch.testing.assert_close(summed, s * one, rtol=1e-12, atol=1e-15)


def test_fixed_lambda_sums_over_samples_too() -> None:
    one = grad(lambda: IMLE(ORACLE, NoNoise(), PerturbedTarget(5.0)), W, squared)
    three = grad(lambda: IMLE(ORACLE, NoNoise(), PerturbedTarget(5.0), samples=3), W, squared)
    torch.testing.assert_close(three, 3 * one)


def test_estimators_agree_on_what_samples_mean() -> None:
    # STE's per-sample estimate is ∇z L itself; I-MLE's default with a small step approaches a
    # derivative too. Both add their S estimates: a loss on z.mean(-2) gives mean-sized gradients.
    def on_mean(make: Callable[[], nn.Module]) -> torch.Tensor:
        return grad(make, W, lambda z: ((z.mean(-2) - Y) ** 2).sum())

    ste = on_mean(lambda: STE(ORACLE, NoNoise(), samples=4))
    torch.testing.assert_close(ste, grad(lambda: STE(ORACLE, NoNoise()), W, squared))


# --------------------------------------------------------------------------- AI-MLE as published
def _reference_beta_trajectory(
    steps: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]],
    beta: float,
    step: float,
    momentum: float,
    target_norm: float,
    decay: float = 0.9,
) -> list[float]:
    """A transcription of the reference AdaptiveTargetDistribution update (torch-adaptive-imle)."""
    grad_norm, previous, out = 1.0, 0.0, []
    for theta, eps, dy in steps:
        norm_dy = float(torch.linalg.norm(dy))
        theta_2d = theta.expand_as(dy)  # the reference's target step repeats θ over the samples
        pm = 0.0 if norm_dy <= 0.0 else beta * float(torch.linalg.norm(theta_2d)) / norm_dy
        z = ORACLE.solve_torch(theta + eps)
        gradient_3d = z - ORACLE.solve_torch(theta - pm * dy + eps)
        nnz = float(torch.count_nonzero(gradient_3d))
        grad_norm = decay * grad_norm + (1.0 - decay) * nnz / (gradient_3d.shape[0] * gradient_3d.shape[1])
        update = (1.0 if grad_norm < target_norm else -1.0) * step
        update = momentum * previous + update
        beta = max(beta + update, 0.0)
        previous = update
        out.append(beta)
    return out


def test_aimle_beta_trajectory_matches_the_reference_update() -> None:
    g = gen(7)
    steps = []
    for t in range(200):
        theta = torch.randn(16, 1, 8, generator=g, dtype=torch.float64)
        eps = Gumbel().sample((16, 3, 8), dtype=torch.float64, generator=g)
        dy = torch.randn(16, 3, 8, generator=g, dtype=torch.float64) * (10.0 ** (t % 5 - 2))
        steps.append((theta, eps, dy))
    for nonzero_target, momentum in ((2.0, 0.0), (4.0, 0.5)):
        target = AdaptiveTarget(nonzero_target, beta=0.5, step=0.01, momentum=momentum)
        ours = []
        for theta, eps, dy in steps:
            z = ORACLE.solve_torch(theta + eps)
            target.estimate(theta, eps, z, dy, ORACLE.solve_torch)
            ours.append(float(target.beta))
        reference = _reference_beta_trajectory(steps, 0.5, 0.01, momentum, nonzero_target)
        np.testing.assert_allclose(ours, reference, rtol=0.01)
        assert max(reference) - min(reference) > 0.05  # β really moved


def test_aimle_state_is_in_the_state_dict_and_restored() -> None:
    layer = IMLE(ORACLE, Gumbel(), AdaptiveTarget(3.0, step=0.05), samples=2, generator=gen(8))
    for _ in range(5):
        x = W.clone().requires_grad_(True)
        squared(layer(x)).backward()
    state = layer.state_dict()
    assert {"target.beta", "target.nonzeros", "target.last_update"} <= set(state)
    assert float(state["target.beta"]) != 1.0
    fresh = IMLE(ORACLE, Gumbel(), AdaptiveTarget(3.0, step=0.05), samples=2)
    fresh.load_state_dict(state)
    for name in ("beta", "nonzeros", "last_update"):
        assert torch.equal(getattr(fresh.target, name), getattr(layer.target, name))
    clone = copy.deepcopy(layer)
    assert torch.equal(clone.target.beta, layer.target.beta)


def test_aimle_argument_errors() -> None:
    for kwargs in (
        {"nonzero_target": 0.0},
        {"beta": -1.0},
        {"step": -1.0},
        {"momentum": 1.0},
        {"decay": 1.0},
    ):
        with pytest.raises(ValueError):
            AdaptiveTarget(**kwargs)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- options
def test_target_noise_scale_changes_only_the_target_noise() -> None:
    lam, s = 3.0, 2
    x = W.clone().requires_grad_(True)
    layer = IMLE(ORACLE, Gumbel(), PerturbedTarget(lam), samples=s, generator=gen(9), target_noise_scale=0.0)
    z = layer(x)
    upstream = torch.randn(z.shape, generator=gen(10), dtype=torch.float64)
    (z * upstream).sum().backward()
    eps = Gumbel().sample((6, s, 8), dtype=torch.float64, generator=gen(9))
    torch.testing.assert_close(z, ORACLE.solve_torch(W.unsqueeze(1) + eps))
    manual = ((z - ORACLE.solve_torch(W.unsqueeze(1) - lam * upstream)) / lam).sum(1)  # target: no noise
    torch.testing.assert_close(x.grad, manual)
    with pytest.raises(ValueError):
        IMLE(ORACLE, target_noise_scale=-1.0)


def test_noise_on_costs_perturbs_the_costs_of_a_min_oracle() -> None:
    states = k_subsets(6, 2)
    costs = torch.randn(5, 6, generator=gen(11), dtype=torch.float64)
    eps = Gumbel().sample((5, 1, 6), dtype=torch.float64, generator=gen(12))
    on_costs = IMLE(EnumOracle(states, "min"), Gumbel(), generator=gen(12), noise_on="costs")(costs)
    expected = EnumOracle(states, "min").solve_batch((costs + eps[:, 0]).numpy())  # argmin ⟨c + ε, z⟩
    np.testing.assert_array_equal(on_costs.numpy(), expected)
    on_theta = IMLE(EnumOracle(states, "min"), Gumbel(), generator=gen(12))(costs)
    expected_theta = EnumOracle(states, "min").solve_batch((costs - eps[:, 0]).numpy())  # MAP(θ + ε)
    np.testing.assert_array_equal(on_theta.numpy(), expected_theta)
    # for a "max" oracle the two coincide
    up = [
        IMLE(EnumOracle(states), Gumbel(), generator=gen(12), noise_on=on)(costs) for on in ("theta", "costs")
    ]
    assert torch.equal(up[0], up[1])
    with pytest.raises(ValueError):
        IMLE(ORACLE, noise_on="weights")  # type: ignore[arg-type]


@pytest.mark.parametrize("target_cls", [PerturbedTarget, RelativeTarget])
def test_two_sided_is_the_central_difference(target_cls: type) -> None:
    x = W.clone().requires_grad_(True)
    layer = IMLE(ORACLE, NoNoise(), target_cls(lam=2.0, two_sided=True))
    z = layer(x)
    upstream = torch.randn(z.shape, generator=gen(13), dtype=torch.float64)
    (z * upstream).sum().backward()
    if target_cls is PerturbedTarget:
        lam = torch.full((6, 1), 2.0, dtype=torch.float64)
    else:  # λ_eff = λ·std(θ)/‖∇zL‖_∞
        lam = 2.0 * W.std(-1, keepdim=True, unbiased=False) / upstream.abs().amax(-1, keepdim=True)
    manual = (ORACLE.solve_torch(W + lam * upstream) - ORACLE.solve_torch(W - lam * upstream)) / (2 * lam)
    torch.testing.assert_close(x.grad, manual)
    assert x.grad.abs().sum() > 0


def test_relative_target_is_pid_with_a_relative_step() -> None:
    x = W.clone().requires_grad_(True)
    z = IMLE(ORACLE, NoNoise(), RelativeTarget(lam=0.7, two_sided=False))(x)
    upstream = torch.randn(z.shape, generator=gen(14), dtype=torch.float64)
    (z * upstream).sum().backward()
    lam = 0.7 * W.std(-1, keepdim=True, unbiased=False) / upstream.abs().amax(-1, keepdim=True)
    manual = (z - ORACLE.solve_torch(W - lam * upstream)) / lam
    torch.testing.assert_close(x.grad, manual)
    with pytest.raises(ValueError):
        RelativeTarget(lam=0.0)
    with pytest.raises(ValueError):
        RelativeTarget(lam=float("inf"))


@pytest.mark.parametrize(
    "target", [RelativeTarget(), RelativeTarget.large_step()], ids=["default", "large-step"]
)
def test_relative_target_survives_huge_and_zero_weights(target: RelativeTarget) -> None:
    upstream = torch.linspace(-1, 1, 8, dtype=torch.float64)
    # no noise: near ties (items 4 and 5 of the reversed rows, whose upstream gradients differ) for the
    # local step, and a state other than MAP(−upstream) = items 0-2 for the large one
    for scale in (0.0, 1e-300, 1e300):
        x = (scale * near_ties().flip(-1)).clone().requires_grad_(True)
        z = IMLE(ORACLE, NoNoise(), target)(x)
        (z * upstream).sum().backward()
        assert x.grad is not None and torch.isfinite(x.grad).all()
        assert x.grad.abs().sum() > 0
    # float32 weights at the top of the range: λ·s overflows, the estimate must not become 0·∞ or 0
    w32 = torch.linspace(1e38, 3e38, 8)
    w32[4] = w32[5] - 1e36  # a near tie between the third and the fourth item: the local step flips it
    w32 = w32.expand(4, 8).clone().requires_grad_(True)
    z32 = IMLE(ORACLE, NoNoise(), target)(w32)
    (z32 * torch.linspace(-1, 1, 8)).sum().backward()
    assert w32.grad is not None and torch.isfinite(w32.grad).all() and w32.grad.abs().sum() > 0


def test_perturbed_optimizer_gumbel_gradient_is_unbiased() -> None:
    oracle, sigma, n = TopK(1, 3), 1.0, 400_000
    theta = torch.tensor([0.2, -0.3, 0.1], dtype=torch.float64)
    g = torch.tensor([1.0, -0.5, 0.3], dtype=torch.float64)
    w = theta.expand(n, 3).clone().requires_grad_(True)
    layer = PerturbedOptimizer(oracle, sigma=sigma, samples=1, noise="gumbel", generator=gen(15))
    (layer(w) * g).sum().backward()
    assert w.grad is not None
    estimate = w.grad.mean(0)
    # top-1 with Gumbel noise is the softmax: its Jacobian is exact
    mu = torch.softmax(theta / sigma, 0)
    exact = (mu * g - mu * (mu @ g)) / sigma
    torch.testing.assert_close(estimate, exact, atol=0.02, rtol=0.0)
    with pytest.raises(ValueError):
        PerturbedOptimizer(oracle, noise="cauchy")  # type: ignore[arg-type]


# --------------------------------------------------------------------------- NaN in, NaN out
@pytest.mark.parametrize(
    "make",
    [
        lambda: IMLE(ORACLE, Gumbel(), samples=2, generator=gen(16)),
        lambda: IMLE(EnumOracle(k_subsets(8, 3)), Gumbel(), PerturbedTarget(5.0), generator=gen(16)),
        lambda: IMLE(ORACLE, Gumbel(), OptimalTarget(), generator=gen(16)),
        lambda: IMLE(ORACLE, Gumbel(), AdaptiveTarget(), generator=gen(16)),
        lambda: STE(ORACLE, samples=2, generator=gen(16)),
        lambda: Blackbox(ORACLE),
        lambda: PerturbedOptimizer(ORACLE, samples=2, generator=gen(16)),
    ],
    ids=["default", "fixed-lambda-host", "optimal", "aimle", "ste", "blackbox", "perturbed-optimizer"],
)
def test_nan_upstream_gradient_gives_nan_gradient_on_that_row_only(make: Callable[[], nn.Module]) -> None:
    x = W.clone().requires_grad_(True)
    z = make()(x)
    upstream = torch.randn(z.shape, generator=gen(17), dtype=torch.float64)
    upstream[2].view(-1)[3] = float("nan")
    upstream[4].view(-1)[0] = float("inf")
    (z * upstream).sum().backward()
    assert x.grad is not None
    bad = ~torch.isfinite(x.grad).all(dim=1)
    assert bad.tolist() == [False, False, True, False, True, False]
    assert torch.isnan(x.grad[2]).all()


# --------------------------------------------------------------------------- errors name the user's rows
class _Picky(MapOracle):
    """Top-1 over 4 items; 'infeasible' when any weight exceeds 50 (e.g. a far-moved target)."""

    sense = "max"
    n_vars = 4

    def solve(self, weights: np.ndarray) -> np.ndarray:
        if weights.max() > 50:
            raise InfeasibleError("weight above 50")
        z = np.zeros(4)
        z[int(np.argmax(weights))] = 1.0
        return z


def test_backward_errors_name_the_user_row_not_the_flat_sample_row() -> None:
    x = torch.zeros(3, 4, requires_grad=True)
    z = IMLE(_Picky(), Gumbel(), PerturbedTarget(100.0), samples=4, generator=gen(18))(x)
    upstream = torch.zeros(3, 4, 4, dtype=torch.float32)
    upstream[1, 2, 0] = -1.0  # row 1, sample 2: θ' = θ + 100 on item 0
    with pytest.raises(InfeasibleError, match=r"batch row 1: .*backward pass, sample 2") as err:
        (z * upstream).sum().backward()
    assert err.value.rows == (1,)


def test_regret_and_spo_errors_name_the_tensor_and_its_row() -> None:
    pred = torch.zeros(3, 4)
    true = torch.zeros(3, 4)
    true[1, 0] = 60.0
    with pytest.raises(InfeasibleError, match=r"batch row 1: .*weights_true") as err:
        regret(_Picky(), pred, true)
    assert err.value.rows == (1,)
    with pytest.raises(InfeasibleError, match=r"batch row 1: .*weights_true"):
        SPOPlusLoss(_Picky())(pred, true)
    bad = torch.zeros(3, 4)
    bad[2, 1] = float("nan")
    with pytest.raises(InvalidWeightsError, match=r"batch row 2: weights_true"):
        regret(_Picky(), pred, bad)


def test_topk_layer_rejects_a_numpy_array_with_a_typed_error() -> None:
    with pytest.raises(InvalidWeightsError, match=r"torch\.Tensor"):
        IMLE(TopK(2, 5))(np.zeros((3, 5)))  # type: ignore[arg-type]


# --------------------------------------------------------------------------- torch.func
def test_torch_func_grad_equals_autograd() -> None:
    def loss(w: torch.Tensor) -> torch.Tensor:
        return squared(IMLE(ORACLE, Gumbel(), samples=2, generator=gen(19))(w))

    functional = torch.func.grad(loss)(W)
    torch.testing.assert_close(
        functional, grad(lambda: IMLE(ORACLE, Gumbel(), samples=2, generator=gen(19)), W, squared)
    )


def test_torch_func_vmap_maps_a_leading_dimension() -> None:
    layer = IMLE(EnumOracle(k_subsets(8, 3)), Gumbel()).eval()
    stacked = torch.randn(4, 6, 8, generator=gen(20), dtype=torch.float64)
    mapped = torch.func.vmap(layer)(stacked)
    assert torch.equal(mapped, layer(stacked))
    assert math.isclose(float(mapped.sum()), 4 * 6 * 3)


# --------------------------------------------------------------------------- CUDA
@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize(
    "target", [None, AdaptiveTarget(), RelativeTarget(two_sided=True)], ids=["default", "aimle", "two-sided"]
)
def test_cuda_layer_step_makes_no_host_sync(target: object) -> None:  # pragma: no cover - GPU only
    layer = IMLE(
        TopK(10, 100),
        target=target,
        samples=4,  # type: ignore[arg-type]
        generator=torch.Generator("cuda").manual_seed(0),
    ).cuda()
    w = torch.randn(64, 100, device="cuda", requires_grad=True)
    (layer(w) ** 2).mean().backward()  # warm-up: SoG table and target buffers reach the device
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(3):
            w.grad = None
            (layer(w) ** 2).mean().backward()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert w.grad is not None and w.grad.device == w.device and torch.isfinite(w.grad).all()


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_sog_table_matches_the_cpu_distribution() -> None:  # pragma: no cover - GPU only
    from scipy import stats

    from imle_solvers import SumOfGamma

    noise = SumOfGamma(k=5)
    on_gpu = noise.sample((500_000,), device="cuda", generator=torch.Generator("cuda").manual_seed(0))
    on_cpu = noise.sample((500_000,), generator=gen(0))
    assert on_gpu.device.type == "cuda" and on_gpu.dtype == torch.float32
    assert stats.ks_2samp(on_gpu.cpu().numpy(), on_cpu.numpy()).pvalue > 1e-3


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_gradients_match_cpu_with_the_same_noise() -> None:  # pragma: no cover - GPU only
    w = torch.randn(16, 20, generator=gen(0), dtype=torch.float64)
    eps = Gumbel().sample((16, 3, 20), dtype=torch.float64, generator=gen(1))
    grads = []
    for device in ("cpu", "cuda"):
        x = w.to(device).requires_grad_(True)
        target, upstream = RelativeTarget(), torch.randn(16, 3, 20, generator=gen(2), dtype=torch.float64)
        z = TopK(5, 20).solve_torch(x.detach().unsqueeze(1) + eps.to(device))
        g = target.estimate(
            x.detach().unsqueeze(1), eps.to(device), z, upstream.to(device), TopK(5, 20).solve_torch
        )
        grads.append(g.cpu())
    torch.testing.assert_close(grads[0], grads[1])
