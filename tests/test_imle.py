"""The I-MLE layer: equivalences (Blackbox, Fact 1), exact marginals (eq. 11), shapes, devices, errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from imle_solvers import (
    IMLE,
    STE,
    AdaptiveTarget,
    Blackbox,
    Gumbel,
    InvalidWeightsError,
    NoNoise,
    OptimalTarget,
    PerturbedOptimizer,
    PerturbedTarget,
    RelativeTarget,
    RowAdaptiveTarget,
    SumOfGamma,
    TopK,
    hamming_loss,
    imle,
)
from tests.support.oracles import EnumOracle, k_subsets


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def grad_of(layer: torch.nn.Module, theta: torch.Tensor, upstream: torch.Tensor) -> tuple[torch.Tensor, ...]:
    w = theta.clone().requires_grad_(True)
    z = layer(w)
    (z * upstream).sum().backward()
    assert w.grad is not None
    return z.detach(), w.grad


# --------------------------------------------------------------------------- equivalences
@pytest.mark.parametrize("sense", ["max", "min"])
@pytest.mark.parametrize("lam", [0.5, 3.0, 20.0])
def test_imle_without_noise_is_blackbox(sense: str, lam: float) -> None:
    oracle = EnumOracle(k_subsets(6, 3), sense=sense)
    theta = torch.randn(5, 6, generator=gen(1), dtype=torch.float64)
    state = torch.from_numpy(oracle.solve_batch(theta.numpy()))  # MAP in the oracle's sense
    # a random upstream gradient plus one against the current state, large enough to move every row
    upstream = 2 * torch.randn(5, 6, generator=gen(2), dtype=torch.float64) + 12 * (2 * state - 1)
    z1, g1 = grad_of(IMLE(oracle, NoNoise(), PerturbedTarget(lam)), theta, upstream)
    z2, g2 = grad_of(Blackbox(oracle, lam=lam), theta, upstream)
    assert torch.equal(z1, z2) and torch.equal(g1, g2)
    assert g1.ne(0).any(dim=1).all()
    # and both equal the published blackbox rule, computed by hand in the oracle's own sense
    w = theta.numpy()
    if sense == "min":  # Vlastelica et al.: w' = w + λ∇L, ∇w = −[y(w) − y(w')]/λ
        manual = -(oracle.solve_batch(w) - oracle.solve_batch(w + lam * upstream.numpy())) / lam
    else:  # θ' = θ − λ∇L, ∇θ = [MAP(θ) − MAP(θ')]/λ
        manual = (oracle.solve_batch(w) - oracle.solve_batch(w - lam * upstream.numpy())) / lam
    np.testing.assert_allclose(g1.numpy(), manual)


def test_fact1_optimal_target_with_hamming_is_perceptron_rule() -> None:
    # Fact 1: OptimalTarget + Hamming loss + no noise gives MAP(θ) − y.
    oracle = TopK(3, 8)
    theta = torch.randn(6, 8, generator=gen(3), requires_grad=True)
    y = oracle.solve_torch(torch.randn(6, 8, generator=gen(4)))
    z = IMLE(oracle, NoNoise(), OptimalTarget())(theta)
    hamming_loss(z, y, reduction="none").sum().backward()
    assert theta.grad is not None
    assert torch.equal(theta.grad, oracle.solve_torch(theta.detach()) - y)


def test_min_oracle_takes_costs() -> None:
    states = k_subsets(5, 2)
    up, down = EnumOracle(states, "max"), EnumOracle(states, "min")
    theta = torch.randn(4, 5, generator=gen(5), dtype=torch.float64)
    z0 = IMLE(up, Gumbel(), PerturbedTarget(2.0), generator=gen(7))(theta)  # the states both layers draw
    # a random upstream gradient plus one against those states, large enough to move every row
    upstream = torch.randn(4, 5, generator=gen(6), dtype=torch.float64) + 8 * (2 * z0 - 1)
    z1, g1 = grad_of(IMLE(up, Gumbel(), PerturbedTarget(2.0), generator=gen(7)), theta, upstream)
    z2, g2 = grad_of(IMLE(down, Gumbel(), PerturbedTarget(2.0), generator=gen(7)), -theta, upstream)
    assert torch.equal(z1, z0) and torch.equal(z1, z2)
    assert torch.equal(g1, -g2) and g1.ne(0).any(dim=1).all()  # ∇c = −∇θ, in every row


# --------------------------------------------------------------------------- exact marginals
def test_mean_gradient_matches_marginal_finite_difference() -> None:
    # k = 1 with Gumbel noise: perturb-and-MAP samples exactly from softmax, so the mean I-MLE gradient
    # for a linear loss ⟨g, z⟩ is (μ(θ) − μ(θ − λg))/λ (eq. 11), and → J_μ g as λ → 0.
    m, n, lam = 4, 200_000, 0.5
    theta = torch.tensor([0.3, -0.4, 1.0, 0.1], dtype=torch.float64)
    g = torch.tensor([0.8, -0.5, 0.2, -0.1], dtype=torch.float64)
    layer = IMLE(TopK(1, m), Gumbel(1.0), PerturbedTarget(lam), generator=gen(8))
    w = theta.expand(n, m).clone().requires_grad_(True)
    # most single samples do not move under a step of 0.5·g, the local step of a finite difference
    # (not one lost to the loss scale: a third of the spread of θ + ε): no warning
    (layer(w) * g).sum().backward()
    assert w.grad is not None
    estimate = w.grad.mean(0)
    mu = torch.softmax(theta, 0)
    finite_difference = (mu - torch.softmax(theta - lam * g, 0)) / lam
    assert torch.allclose(estimate, finite_difference, atol=0.01), (estimate, finite_difference)
    jacobian_g = mu * g - mu * (mu @ g)  # J_μ g for the softmax
    assert torch.allclose(finite_difference, jacobian_g, atol=0.03)


# --------------------------------------------------------------------------- shapes, devices, modes
@pytest.mark.parametrize("lead", [(), (3,), (2, 3)])
@pytest.mark.parametrize("samples", [1, 4])
def test_shapes(lead: tuple[int, ...], samples: int) -> None:
    layer = IMLE(TopK(2, 7), samples=samples)
    w = torch.randn(*lead, 7, requires_grad=True)
    z = layer(w)
    expected = (*lead, 7) if samples == 1 else (*lead, samples, 7)
    assert z.shape == expected
    assert torch.all(z.sum(-1) == 2)
    z.sum().backward()
    assert w.grad is not None and w.grad.shape == w.shape


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("torch_oracle", [True, False])
def test_dtype_and_device_follow_input(dtype: torch.dtype, torch_oracle: bool) -> None:
    oracle = TopK(2, 5) if torch_oracle else EnumOracle(k_subsets(5, 2))
    w = torch.randn(3, 5, dtype=dtype, requires_grad=True)
    z = IMLE(oracle, samples=2)(w)
    assert z.dtype == dtype and z.device == w.device
    z.sum().backward()
    assert w.grad is not None and w.grad.dtype == dtype


def test_eval_mode_returns_noise_free_map() -> None:
    oracle = TopK(3, 9)
    w = torch.randn(5, 9, generator=gen(9))
    layer = IMLE(oracle, samples=3).eval()
    z = layer(w)
    assert z.shape == (5, 3, 9)
    assert torch.equal(z, oracle.solve_torch(w).unsqueeze(1).expand(5, 3, 9))
    assert torch.equal(layer(w), z)  # deterministic
    assert torch.equal(STE(oracle).eval()(w), oracle.solve_torch(w))
    assert torch.equal(PerturbedOptimizer(oracle).eval()(w), oracle.solve_torch(w))
    layer.train()
    assert not torch.equal(layer(w), z)


def test_generator_reproducibility() -> None:
    w = torch.randn(8, 10, generator=gen(10))
    upstream = torch.randn(8, 3, 10, generator=gen(11))
    runs = [grad_of(IMLE(TopK(4, 10), samples=3, generator=gen(s)), w, upstream) for s in (12, 12, 13)]
    assert torch.equal(runs[0][0], runs[1][0]) and torch.equal(runs[0][1], runs[1][1])
    assert not torch.equal(runs[0][0], runs[2][0])


def test_functional_form_matches_module() -> None:
    w = torch.randn(4, 6, generator=gen(14))
    z1 = imle(w, TopK(2, 6), noise=Gumbel(), samples=2, generator=gen(15))
    z2 = IMLE(TopK(2, 6), noise=Gumbel(), samples=2, generator=gen(15))(w)
    assert torch.equal(z1, z2)


# --------------------------------------------------------------------------- oracle calls
def test_one_batched_solver_call_per_pass() -> None:
    oracle = EnumOracle(k_subsets(6, 2))
    w = torch.randn(5, 6, requires_grad=True)
    z = IMLE(oracle, SumOfGamma(), samples=4)(w)
    assert oracle.batch_calls == [20]  # forward: all B·S rows at once
    z.sum().backward()
    assert oracle.batch_calls == [20, 40]  # backward (two-sided default): one call, both MAPs of B·S rows
    one_sided = EnumOracle(k_subsets(6, 2))
    IMLE(one_sided, SumOfGamma(), RelativeTarget.large_step(), samples=4)(w).sum().backward()
    assert one_sided.batch_calls == [20, 20]  # one-sided: one more call with B·S rows


def test_two_sided_adaptive_target_is_one_call() -> None:
    oracle = EnumOracle(k_subsets(6, 2))
    w = torch.randn(5, 6, requires_grad=True)
    z = IMLE(oracle, Gumbel(), AdaptiveTarget(two_sided=True), samples=3)(w)
    z.sum().backward()
    assert oracle.batch_calls == [15, 30]


# --------------------------------------------------------------------------- targets and estimators
def test_perturbed_target_divides_by_lambda() -> None:
    oracle = TopK(2, 6)
    w = torch.randn(4, 6, generator=gen(16), dtype=torch.float64)
    upstream = torch.randn(4, 6, generator=gen(17), dtype=torch.float64)
    _, g = grad_of(IMLE(oracle, NoNoise(), PerturbedTarget(4.0)), w, upstream)
    manual = (oracle.solve_torch(w) - oracle.solve_torch(w - 4.0 * upstream)) / 4.0
    assert torch.equal(g, manual)


def test_optimal_target_params() -> None:
    theta = torch.tensor([1.0, 2.0, 3.0])
    grad = torch.tensor([0.0, -0.5, 2.0])
    assert torch.equal(OptimalTarget().params(theta, grad), torch.tensor([1.0, 0.5, -2.0]))


def test_row_adaptive_target_lambda_and_update() -> None:
    target = RowAdaptiveTarget(nonzero_target=0.5, alpha=1.0, step=0.1)
    theta = torch.tensor([[[3.0, 4.0]]])
    grad = torch.tensor([[[0.0, 2.0]], [[0.0, 0.0]]]).reshape(1, 2, 2)
    lam = target.lam(theta, grad)
    assert torch.allclose(lam.flatten(), torch.tensor([2.5, 0.0]))  # α‖θ‖/‖g‖, 0 where g = 0
    target._update(torch.zeros(4, 2))  # sparser than the target → α grows
    assert target.alpha > 1.0
    target._update(torch.ones(4, 2))  # denser → α shrinks
    assert abs(target.alpha - 1.0) < 1e-12
    with pytest.raises(ValueError):
        RowAdaptiveTarget(nonzero_target=0)


def test_row_adaptive_target_trains_and_adapts() -> None:
    oracle = TopK(3, 10)
    target = RowAdaptiveTarget(nonzero_target=0.3)
    y = oracle.solve_torch(torch.randn(16, 10, generator=gen(18)))
    theta = torch.zeros(16, 10, requires_grad=True)
    opt = torch.optim.SGD([theta], lr=0.5)
    layer = IMLE(oracle, Gumbel(0.5), target, generator=gen(19))
    for _ in range(60):
        opt.zero_grad()
        hamming_loss(layer(theta), y).backward()
        opt.step()
    assert target.alpha != 1.0
    assert float(hamming_loss(oracle.solve_torch(theta.detach()), y)) < 0.05


def test_ste_passes_gradient_through() -> None:
    w = torch.randn(3, 5, dtype=torch.float64)
    upstream = torch.randn(3, 5, dtype=torch.float64)
    _, g = grad_of(STE(TopK(2, 5)), w, upstream)
    assert torch.equal(g, upstream)
    _, g_min = grad_of(STE(EnumOracle(k_subsets(5, 2), "min")), w, upstream)
    assert torch.equal(g_min, -upstream)


def test_perturbed_optimizer_forward_and_score_gradient() -> None:
    oracle = TopK(1, 3)
    sigma, samples = 0.5, 7
    w = torch.randn(2, 3, generator=gen(20), dtype=torch.float64)
    upstream = torch.randn(2, 3, generator=gen(21), dtype=torch.float64)
    y, g = grad_of(PerturbedOptimizer(oracle, sigma=sigma, samples=samples, generator=gen(22)), w, upstream)
    eps = sigma * torch.randn((2, samples, 3), generator=gen(22), dtype=torch.float64)
    z = oracle.solve_torch(w.unsqueeze(1) + eps)
    assert torch.allclose(y, z.mean(1))
    manual = ((z * upstream.unsqueeze(1)).sum(-1, keepdim=True) * eps).mean(1) / sigma**2
    assert torch.allclose(g, manual)


def test_perturbed_optimizer_gradient_is_unbiased_for_categorical() -> None:
    # For top-1 with Gaussian noise, the Jacobian of E[MAP(θ+σZ)] can be checked by finite differences
    # of a common-random-numbers estimate of the expectation.
    oracle, sigma, n = TopK(1, 3), 1.0, 400_000
    theta = torch.tensor([0.2, -0.3, 0.1], dtype=torch.float64)
    g = torch.tensor([1.0, -0.5, 0.3], dtype=torch.float64)
    w = theta.expand(n, 3).clone().requires_grad_(True)
    (PerturbedOptimizer(oracle, sigma=sigma, samples=1, generator=gen(23))(w) * g).sum().backward()
    assert w.grad is not None
    estimate = w.grad.mean(0)
    z = sigma * torch.randn(n, 3, generator=gen(24), dtype=torch.float64)
    h = 0.05
    fd = torch.stack(
        [
            (oracle.solve_torch(theta + h * e + z) - oracle.solve_torch(theta - h * e + z)).mean(0)
            @ g
            / (2 * h)
            for e in torch.eye(3, dtype=torch.float64)
        ]
    )
    assert torch.allclose(estimate, fd, atol=0.03), (estimate, fd)


# --------------------------------------------------------------------------- validation
def test_validation_errors_name_rows_before_any_solve() -> None:
    oracle = EnumOracle(k_subsets(4, 2))
    layer = IMLE(oracle, Gumbel())
    w = torch.randn(5, 4)
    w[1, 2] = float("nan")
    w[3, 0] = float("inf")
    with pytest.raises(InvalidWeightsError, match=r"batch rows 1, 3") as info:
        layer(w)
    assert info.value.rows == (1, 3)
    with pytest.raises(InvalidWeightsError, match=r"\(\.\.\., 4\)"):
        layer(torch.randn(5, 3))
    with pytest.raises(InvalidWeightsError, match="floating dtype"):
        layer(torch.ones(5, 4, dtype=torch.long))
    with pytest.raises(InvalidWeightsError, match=r"torch\.Tensor"):
        layer(np.zeros((5, 4)))
    with pytest.raises(InvalidWeightsError):
        layer(torch.tensor(1.0))
    assert oracle.batch_calls == [] and oracle.solve_calls == 0


def test_nan_rows_named_over_leading_dims() -> None:
    w = torch.zeros(2, 3, 4)
    w[1, 1, 0] = float("nan")  # flat row 4
    with pytest.raises(InvalidWeightsError) as info:
        IMLE(TopK(1, 4), Gumbel())(w)
    assert info.value.rows == (4,)


def test_layer_argument_errors() -> None:
    with pytest.raises(TypeError):
        IMLE("not an oracle")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        IMLE(TopK(1, 3), samples=0)
    with pytest.raises(ValueError):
        PerturbedTarget(0.0)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_topk_stays_on_device_without_sync() -> None:  # pragma: no cover - GPU only
    w = torch.randn(64, 100, device="cuda", requires_grad=True)
    layer = IMLE(TopK(10, 100), generator=torch.Generator("cuda").manual_seed(0))
    torch.cuda.set_sync_debug_mode("error")
    try:
        z = layer(w)
        z.sum().backward()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert z.device == w.device and w.grad is not None and w.grad.device == w.device


# --------------------------------------------------------------------------- one name, one object
def test_imle_solvers_imle_is_the_module_and_calls_the_function() -> None:
    import importlib
    import inspect
    import sys
    from unittest import mock

    import imle_solvers

    module = importlib.import_module("imle_solvers.imle")
    assert imle_solvers.imle is module is sys.modules["imle_solvers.imle"]  # no shadowing
    assert module.IMLE is IMLE and callable(module)
    w = torch.randn(3, 6, generator=gen(30))
    called = imle_solvers.imle(w, TopK(2, 6), Gumbel(), samples=2, generator=gen(31))
    assert torch.equal(called, module.imle(w, TopK(2, 6), Gumbel(), samples=2, generator=gen(31)))
    assert list(inspect.signature(imle_solvers.imle).parameters)[:2] == ["weights", "oracle"]
    with mock.patch("imle_solvers.imle.IMLE") as patched:  # dotted paths resolve to the module
        imle_solvers.imle(w, TopK(2, 6))
    assert patched.called
    assert imle is module  # what `from imle_solvers import imle` gives


def test_each_public_name_has_one_home() -> None:
    import importlib
    import inspect

    from imle_solvers import imle as imle_module

    assert imle_module.__all__ == ["IMLE", "imle"]  # PerturbAndMAP & co. live in perturb_and_map only
    for name in (
        "perturb_and_map",
        "imle",
        "estimators",
        "losses",
        "oracle",
        "testing",
        "errors",
        "_checks",
        "_lazy",
        "interop.pyepo",
    ):
        module = importlib.import_module(f"imle_solvers.{name}")
        for public in module.__all__:
            obj = getattr(module, public)
            if isinstance(obj, type) or inspect.isfunction(obj):  # classes and functions say where they live
                assert obj.__module__ == module.__name__, (name, public)
