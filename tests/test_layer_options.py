"""Every option of every estimator: its documented default, its effect (a test fails if it is ignored),
assignment after construction, its checks, and the functional `imle()` against the `IMLE` layer."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from imle_solvers import (
    IMLE,
    STE,
    AdaptiveTarget,
    AutoTarget,
    Blackbox,
    Gumbel,
    InvalidWeightsError,
    MapOracle,
    NoNoise,
    Normal,
    OptimalTarget,
    PerturbedOptimizer,
    PerturbedTarget,
    RelativeTarget,
    SumOfGamma,
    TopK,
    imle,
)
from tests.support.oracles import EnumOracle, k_subsets

M = 6
ROWS = 24  # enough rows that every option changes some state or gradient, whatever the seed
W = torch.randn(ROWS, M, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
W_NAN = W.clone()
W_NAN[3, 2] = float("nan")


def gen(seed: int = 7) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


class CountingPool:
    """A pool that records the batch size of every call (and solves serially)."""

    def __init__(self) -> None:
        self.calls: list[int] = []

    def solve_batch(self, oracle: MapOracle, weights: np.ndarray) -> np.ndarray:
        self.calls.append(len(weights))
        return oracle.solve_batch(weights)


def host(sense: str = "max") -> EnumOracle:
    return EnumOracle(k_subsets(M, 2), sense)


# ----------------------------------------------------------------------------------------- observing
Observation = tuple[Any, ...]


def observe(layer: nn.Module, weights: torch.Tensor) -> Observation:
    """What a user can see of a layer: its states and gradient under a fixed upstream gradient, the
    pool's calls, or the error it raised."""
    x = weights.clone().requires_grad_(True)
    try:
        z = layer(x)
    except InvalidWeightsError as err:
        return ("raised", type(err), str(err))
    upstream = torch.randn(z.shape, generator=gen(99), dtype=z.dtype)
    (z * upstream).sum().backward()
    pool = getattr(layer, "pool", None)
    return (z.detach(), x.grad, None if pool is None else list(pool.calls))


def same(a: Observation, b: Observation) -> bool:
    if len(a) != len(b):
        return False
    for u, v in zip(a, b, strict=True):
        if isinstance(u, torch.Tensor) or isinstance(v, torch.Tensor):
            if not (isinstance(u, torch.Tensor) and isinstance(v, torch.Tensor)):
                return False
            if u.shape != v.shape or not torch.allclose(u, v, equal_nan=True):
                return False
        elif u != v:
            return False
    return True


# ----------------------------------------------------------------------------------------- options
# estimator -> how to build it with its options (a fixed generator where it takes one)
BUILD: dict[str, Callable[..., nn.Module]] = {
    "IMLE": lambda oracle, **kw: IMLE(oracle, **{"generator": gen(), **kw}),
    "STE": lambda oracle, **kw: STE(oracle, **{"generator": gen(), **kw}),
    "Blackbox": lambda oracle, **kw: Blackbox(oracle, **kw),
    "PerturbedOptimizer": lambda oracle, **kw: PerturbedOptimizer(oracle, **{"generator": gen(), **kw}),
}

# (estimator, option, value factory, oracle factory, weights): the option changes what a user sees
CASES: list[tuple[str, str, Callable[[], Any], Callable[[], MapOracle], torch.Tensor]] = [
    ("IMLE", "noise", lambda: Gumbel(2.0), host, W),
    ("IMLE", "target", lambda: PerturbedTarget(0.5), host, W),
    ("IMLE", "target", lambda: OptimalTarget(), host, W),
    ("IMLE", "samples", lambda: 3, host, W),
    ("IMLE", "pool", CountingPool, host, W),
    ("IMLE", "generator", lambda: gen(8), host, W),
    ("IMLE", "check_finite", lambda: False, lambda: TopK(2, M), W_NAN),
    ("IMLE", "noise_on", lambda: "costs", lambda: host("min"), W),
    ("IMLE", "target_noise_scale", lambda: 0.0, host, W),
    ("IMLE", "oracle", lambda: EnumOracle(k_subsets(M, 3)), host, W),
    ("STE", "noise", lambda: Normal(3.0), host, W),
    ("STE", "samples", lambda: 2, host, W),
    ("STE", "pool", CountingPool, host, W),
    ("STE", "generator", lambda: gen(8), host, W),
    ("STE", "check_finite", lambda: False, lambda: TopK(2, M), W_NAN),
    ("STE", "oracle", lambda: host("min"), host, W),
    ("Blackbox", "lam", lambda: 0.5, host, W),
    ("Blackbox", "pool", CountingPool, host, W),
    ("Blackbox", "check_finite", lambda: False, lambda: TopK(2, M), W_NAN),
    ("Blackbox", "oracle", lambda: host("min"), host, W),
    ("PerturbedOptimizer", "sigma", lambda: 3.0, host, W),
    ("PerturbedOptimizer", "samples", lambda: 4, host, W),
    ("PerturbedOptimizer", "noise", lambda: "gumbel", host, W),
    ("PerturbedOptimizer", "pool", CountingPool, host, W),
    ("PerturbedOptimizer", "generator", lambda: gen(8), host, W),
    ("PerturbedOptimizer", "check_finite", lambda: False, lambda: TopK(2, M), W_NAN),
    ("PerturbedOptimizer", "oracle", lambda: EnumOracle(k_subsets(M, 3)), host, W),
    ("PerturbedOptimizer", "noise_on", lambda: "costs", lambda: host("min"), W),
    ("PerturbedOptimizer", "multiplicative", lambda: True, host, W),
    ("PerturbedOptimizer", "variance_reduction", lambda: True, host, W),
]
IDS = [f"{estimator}-{option}-{i}" for i, (estimator, option, *_rest) in enumerate(CASES)]


@pytest.mark.parametrize(("estimator", "option", "value", "oracle", "weights"), CASES, ids=IDS)
def test_every_option_has_an_effect_and_assigning_it_is_the_same_as_passing_it(
    estimator: str,
    option: str,
    value: Callable[[], Any],
    oracle: Callable[[], MapOracle],
    weights: torch.Tensor,
) -> None:
    build = BUILD[estimator]
    if option == "oracle":  # passing another oracle is building on it
        passed = observe(build(value()), weights)
    else:
        passed = observe(build(oracle(), **{option: value()}), weights)
    assigned_layer = build(oracle())
    setattr(assigned_layer, option, value())
    assigned = observe(assigned_layer, weights)
    default = observe(build(oracle()), weights)
    assert same(passed, assigned), f"{estimator}.{option} = ... differs from passing it"
    assert not same(passed, default), f"{estimator} ignores its option {option}"
    if estimator == "IMLE":  # imle(weights, oracle, **options) is IMLE(oracle, **options)(weights)
        options = {"generator": gen(), option: value()}
        solver = options.pop("oracle") if option == "oracle" else oracle()
        assert same(observe(Functional(solver, options), weights), passed)


class Functional(nn.Module):
    """`imle(weights, oracle, **options)` seen through `observe` (which reads ``.pool``)."""

    def __init__(self, oracle: MapOracle, options: dict[str, Any]) -> None:
        super().__init__()
        self.solver, self.options, self.pool = oracle, options, options.get("pool")

    def forward(self, weights: torch.Tensor) -> torch.Tensor:
        return imle(weights, self.solver, **self.options)


def test_the_functional_form_takes_every_keyword_of_the_layer() -> None:
    import inspect

    layer_options = set(inspect.signature(IMLE).parameters) - {"oracle"}
    functional_options = set(inspect.signature(imle).parameters) - {"weights", "oracle"}
    assert layer_options == functional_options
    for option in layer_options:  # the same defaults, the same kinds (positional or keyword-only)
        in_layer = inspect.signature(IMLE).parameters[option]
        in_function = inspect.signature(imle).parameters[option]
        assert (in_layer.default, in_layer.kind) == (in_function.default, in_function.kind), option
    covered = {option for estimator, option, *_ in CASES if estimator == "IMLE"}
    assert layer_options - covered == set(), "every IMLE option needs a case above"
    for name, cls in (("STE", STE), ("Blackbox", Blackbox), ("PerturbedOptimizer", PerturbedOptimizer)):
        options = set(inspect.signature(cls).parameters)
        assert options - {option for estimator, option, *_ in CASES if estimator == name} == set(), name


def test_the_functional_form_takes_noise_and_target_by_position_like_the_layer() -> None:
    options = {"generator": gen()}
    z = imle(W, host(), Gumbel(), PerturbedTarget(2.0), **options)  # type: ignore[arg-type]
    assert torch.equal(z, IMLE(host(), Gumbel(), PerturbedTarget(2.0), generator=gen())(W))
    assert not torch.equal(z, IMLE(host(), generator=gen())(W))


# ----------------------------------------------------------------------------------------- defaults
def test_imle_defaults() -> None:
    oracle = TopK(2, M)
    layer = IMLE(oracle)
    assert layer.noise == SumOfGamma(k=2.0, tau=1.0, s=10)  # k from oracle.expected_nonzeros
    assert type(layer.target) is AutoTarget and layer.target == AutoTarget(near=2.0, far=30.0, cap=3.0)
    assert layer.rule is layer.target
    assert layer.samples == 1 and layer.pool is None and layer.generator is None
    assert layer.check_finite is None and layer.noise_on == "theta" and layer.target_noise_scale == 1.0
    # the default noise, seen in the states: MAP(θ + SoG(k=2, τ=1, s=10))
    z = IMLE(oracle, generator=gen())(W)
    eps = SumOfGamma(k=2).sample((ROWS, 1, M), dtype=torch.float64, generator=gen())
    assert z.shape == (ROWS, M) and torch.equal(z, oracle.solve_torch(W + eps[:, 0]))
    # the default target, seen in the gradient: AutoTarget(2, 30, 10), the same ε (scale 1)
    assert same(
        observe(IMLE(host(), generator=gen()), W),
        observe(IMLE(host(), None, AutoTarget(near=2.0, far=30.0, cap=3.0), generator=gen()), W),
    )
    assert not same(
        observe(IMLE(host(), generator=gen()), W),
        observe(IMLE(host(), None, AutoTarget(near=1.0), generator=gen()), W),
    )
    # one forward call with the B rows of S = 1, one backward call with both MAPs of the central difference
    oracle_calls = host()
    observe(IMLE(oracle_calls, generator=gen()), W)
    assert oracle_calls.batch_calls == [ROWS, 2 * ROWS]


def test_ste_defaults() -> None:
    layer = STE(TopK(2, M), generator=gen())
    assert layer.noise == Gumbel(1.0) and layer.samples == 1 and layer.check_finite is None
    assert layer.noise_on == "theta" and layer.target_noise_scale == 1.0
    z = layer(W)
    eps = Gumbel(1.0).sample((ROWS, 1, M), dtype=torch.float64, generator=gen())
    assert z.shape == (ROWS, M) and torch.equal(z, TopK(2, M).solve_torch(W + eps[:, 0]))


@pytest.mark.parametrize("name", ["STE", "PerturbedOptimizer"])
def test_estimators_perturb_theta_of_a_min_oracle_by_default(name: str) -> None:
    # θ = −c: the default noise direction solves argmin ⟨c − ε, z⟩ (not ⟨c + ε, z⟩)
    costs = host("min")
    z = BUILD[name](costs, samples=2)(W)
    shape = (ROWS, 2, M)
    eps = Gumbel(1.0).sample(shape, dtype=torch.float64, generator=gen()) if name == "STE" else None
    eps = torch.randn(shape, dtype=torch.float64, generator=gen()) if eps is None else eps
    expected = torch.from_numpy(costs.solve_batch((W.unsqueeze(1) - eps).reshape(-1, M).numpy())).view(shape)
    torch.testing.assert_close(z, expected if name == "STE" else expected.mean(1))


@pytest.mark.parametrize("sense", ["max", "min"])
def test_blackbox_default_lambda_is_20(sense: str) -> None:
    oracle = host(sense)
    layer = Blackbox(oracle)
    assert layer.lam == 20.0 and layer.noise == NoNoise() and layer.samples == 1
    x = W.clone().requires_grad_(True)
    z = layer(x)
    rows = torch.arange(1, ROWS + 1).unsqueeze(1)
    upstream = torch.linspace(-0.1, 0.1, M, dtype=torch.float64).expand(ROWS, M) * rows
    (z * upstream).sum().backward()
    w = W.numpy()
    if sense == "max":  # [MAP(θ) − MAP(θ − λ∇zL)]/λ
        manual = (oracle.solve_batch(w) - oracle.solve_batch(w - 20.0 * upstream.numpy())) / 20.0
    else:  # costs: −[y(w) − y(w + λ∇zL)]/λ
        manual = -(oracle.solve_batch(w) - oracle.solve_batch(w + 20.0 * upstream.numpy())) / 20.0
    np.testing.assert_allclose(x.grad.numpy(), manual)
    assert x.grad.abs().sum() > 0
    other = W.clone().requires_grad_(True)  # λ = 10 gives another gradient here: the default is pinned
    (Blackbox(oracle, lam=10.0)(other) * upstream).sum().backward()
    assert not torch.allclose(other.grad, x.grad)


def test_perturbed_optimizer_defaults_are_sigma_1_and_10_normal_samples() -> None:
    oracle = TopK(2, M)
    layer = PerturbedOptimizer(oracle, generator=gen())
    assert layer.sigma == 1.0 and layer.samples == 10 and layer.noise == Normal(1.0)
    assert layer.check_finite is None
    y = layer(W)
    eps = torch.randn((ROWS, 10, M), dtype=torch.float64, generator=gen())  # σ = 1, 10 samples
    torch.testing.assert_close(y, oracle.solve_torch(W.unsqueeze(1) + eps).mean(1))


@pytest.mark.parametrize("name", sorted(BUILD))
def test_check_finite_defaults_to_checking_on_the_cpu(name: str) -> None:
    layer = BUILD[name](TopK(2, M))
    with pytest.raises(InvalidWeightsError, match=r"^batch row 3: weights contain NaN or inf$"):
        layer(W_NAN)
    layer.check_finite = False
    layer(W_NAN)  # TopK takes what it is given


# ----------------------------------------------------------------------------------------- S > 1
# AutoTarget's unit and rule read the samples of a row together (its own unit, whether the samples show a
# linear loss): the central difference with the batch's unit alone is the rule whose gradient of S samples
# is that of S one-sample rows, which is what these tests compare
CENTRAL = AutoTarget(linear=False, floor=0.0)
S_LAYERS: dict[str, Callable[[int], nn.Module]] = {
    "imle-auto-central": lambda s: IMLE(host(), target=CENTRAL, samples=s, generator=gen()),
    "imle-pid": lambda s: IMLE(host(), Gumbel(), PerturbedTarget(1.0), samples=s, generator=gen()),
    "imle-optimal": lambda s: IMLE(host(), Gumbel(), OptimalTarget(), samples=s, generator=gen()),
    "imle-two-sided": lambda s: IMLE(
        TopK(2, M), Gumbel(), RelativeTarget(two_sided=True), samples=s, generator=gen()
    ),
    "imle-costs": lambda s: IMLE(
        host("min"), Gumbel(), CENTRAL, samples=s, generator=gen(), noise_on="costs"
    ),
    "imle-target-scale": lambda s: IMLE(
        host(), Gumbel(), CENTRAL, samples=s, generator=gen(), target_noise_scale=0.5
    ),
    "ste": lambda s: STE(host(), samples=s, generator=gen()),
    "perturbed-optimizer": lambda s: PerturbedOptimizer(host(), samples=s, generator=gen()),
}


@pytest.mark.parametrize("samples", [2, 3])
@pytest.mark.parametrize("name", sorted(S_LAYERS))
def test_s_samples_are_s_rows_of_one_sample_each(name: str, samples: int) -> None:
    # The noise of S samples of row i is drawn where the noise of rows i·S … i·S + S − 1 of a batch
    # repeated S times is drawn: the S-sample layer must give those rows' states, and the sum of their
    # gradients (autograd's rule for S outputs).
    make = S_LAYERS[name]
    x = W.clone().requires_grad_(True)
    z = make(samples)(x)
    repeated = W.repeat_interleave(samples, 0).requires_grad_(True)
    z1 = make(1)(repeated)
    if isinstance(make(1), PerturbedOptimizer):  # outputs the mean over its samples
        upstream = torch.randn(z.shape, generator=gen(3), dtype=z.dtype)
        torch.testing.assert_close(z, z1.view(ROWS, samples, M).mean(1))
        upstream1 = (upstream / samples).repeat_interleave(samples, 0)
    else:
        assert z.shape == (ROWS, samples, M)
        torch.testing.assert_close(z.reshape(-1, M), z1)
        upstream = torch.randn(z.shape, generator=gen(3), dtype=z.dtype)
        upstream1 = upstream.reshape(-1, M)
    (z * upstream).sum().backward()
    (z1 * upstream1).sum().backward()
    torch.testing.assert_close(x.grad, repeated.grad.view(ROWS, samples, M).sum(1))
    assert x.grad.abs().sum() > 0


# ----------------------------------------------------------------------------------------- assignment
def test_assigning_a_target_takes_effect_and_keeps_the_state_dict_right() -> None:
    layer = IMLE(host(), Gumbel(), generator=gen())
    layer.target = AdaptiveTarget(3.0)
    assert isinstance(layer.target, AdaptiveTarget) and layer.rule is layer.target
    assert {"target.beta", "target.nonzeros", "target.last_update"} <= set(layer.state_dict())
    observe(layer, W)
    assert float(layer.target.beta) != 1.0  # the assigned target ran (and adapted)
    clone = copy.deepcopy(layer)
    assert clone.rule is clone.target and clone.target is not layer.target
    layer.target = PerturbedTarget(0.5)  # a module target replaced by a plain one
    layer.generator = gen()
    assert set(layer.state_dict()) == set() and dict(layer.named_children()) == {}
    assert same(observe(layer, W), observe(IMLE(host(), Gumbel(), PerturbedTarget(0.5), generator=gen()), W))


def test_assigning_an_oracle_resolves_the_noise_again() -> None:
    layer = IMLE(TopK(2, M))
    assert layer.noise == SumOfGamma(k=2.0)
    layer.oracle = TopK(4, M)
    assert layer.noise == SumOfGamma(k=4.0)
    fixed = IMLE(TopK(2, M), SumOfGamma(k=5.0))
    fixed.oracle = TopK(4, M)
    assert fixed.noise == SumOfGamma(k=5.0)
    unknown = EnumOracle(k_subsets(M, 2))
    unknown.expected_nonzeros = None  # type: ignore[assignment]
    with pytest.raises(ValueError, match=r"^SumOfGamma\(k=None\) takes k from oracle\.expected_nonzeros"):
        layer.oracle = unknown
    assert isinstance(layer.oracle, TopK) and layer.oracle.k == 4  # unchanged by the failed assignment


def test_perturbed_optimizer_noise_can_be_set_by_name_or_by_distribution() -> None:
    layer = PerturbedOptimizer(TopK(2, M), sigma=0.5)
    layer.noise = "gumbel"
    assert layer.noise == Gumbel(0.5) and layer.sigma == 0.5
    layer.sigma = 2.0
    assert layer.noise == Gumbel(2.0)
    layer.noise = Normal(0.25)
    assert layer.noise == Normal(0.25) and layer.sigma == 0.25
    layer.noise = Gumbel(3.0)
    assert layer.noise == Gumbel(3.0) and layer.sigma == 3.0
    built = PerturbedOptimizer(TopK(2, M), sigma=3.0, noise="gumbel", generator=gen())
    layer.generator = gen()
    layer.samples = 10
    assert same(observe(layer, W), observe(built, W))


@pytest.mark.parametrize(
    ("make", "option"),
    [
        (lambda: Blackbox(TopK(2, M)), "noise"),
        (lambda: Blackbox(TopK(2, M)), "samples"),
        (lambda: Blackbox(TopK(2, M)), "generator"),
        (lambda: Blackbox(TopK(2, M)), "noise_on"),
        (lambda: Blackbox(TopK(2, M)), "target_noise_scale"),
        (lambda: STE(TopK(2, M)), "noise_on"),
        (lambda: STE(TopK(2, M)), "target_noise_scale"),
        (lambda: PerturbedOptimizer(TopK(2, M)), "target_noise_scale"),
        (lambda: IMLE(TopK(2, M)), "rule"),
    ],
)
def test_options_an_estimator_does_not_take_are_read_only(make: Callable[[], nn.Module], option: str) -> None:
    layer = make()
    before = getattr(layer, option)
    name = type(layer).__name__
    with pytest.raises(
        AttributeError, match=rf"^{name}\.{option} is read-only: it is not an option of {name}$"
    ):
        setattr(layer, option, before)
    assert getattr(layer, option) is before


@pytest.mark.parametrize(
    ("make", "option", "value", "error", "message"),
    [
        (lambda: IMLE(TopK(2, M)), "samples", 0, ValueError, r"^samples must be a positive integer, got 0$"),
        (
            lambda: IMLE(TopK(2, M)),
            "samples",
            2.5,
            ValueError,
            r"^samples must be a positive integer, got 2\.5$",
        ),
        (
            lambda: IMLE(TopK(2, M)),
            "noise",
            Gumbel,
            TypeError,
            r"^noise must be a NoiseDistribution instance, got the class Gumbel; pass an instance, e\.g\.",
        ),
        (
            lambda: IMLE(TopK(2, M)),
            "target",
            PerturbedTarget,
            TypeError,
            r"^target must be a TargetDistribution instance, got the class PerturbedTarget; pass an instance",
        ),
        (
            lambda: IMLE(TopK(2, M)),
            "target",
            nn.Linear(2, 2),
            TypeError,
            r"^target must be a TargetDistribution instance, got Linear",
        ),
        (
            lambda: IMLE(TopK(2, M)),
            "oracle",
            TopK,
            TypeError,
            r"^oracle must be a MapOracle instance, got the class TopK",
        ),
        (
            lambda: IMLE(TopK(2, M)),
            "generator",
            3,
            TypeError,
            r"^generator must be a Generator instance or None, got 3 \(int\)$",
        ),
        (
            lambda: IMLE(TopK(2, M)),
            "check_finite",
            "yes",
            TypeError,
            r"^check_finite must be True, False or None, got 'yes'$",
        ),
        (
            lambda: IMLE(TopK(2, M)),
            "pool",
            object(),
            TypeError,
            r"^pool must be a SolverPool \(anything with solve_batch\(oracle, weights\)\) or None, "
            r"got object$",
        ),
        (
            lambda: IMLE(TopK(2, M)),
            "noise_on",
            "both",
            ValueError,
            r"^noise_on must be one of 'theta', 'costs', got 'both'$",
        ),
        (
            lambda: IMLE(TopK(2, M)),
            "target_noise_scale",
            -1.0,
            ValueError,
            r"^target_noise_scale must be a finite number >= 0, got -1\.0$",
        ),
        (
            lambda: Blackbox(TopK(2, M)),
            "lam",
            0.0,
            ValueError,
            r"^lam must be a finite number > 0, got 0\.0$",
        ),
        (
            lambda: PerturbedOptimizer(TopK(2, M)),
            "sigma",
            -1.0,
            ValueError,
            r"^PerturbedOptimizer sigma must be a finite number > 0, got -1\.0$",
        ),
        (
            lambda: PerturbedOptimizer(TopK(2, M)),
            "noise",
            "cauchy",
            ValueError,
            r"^PerturbedOptimizer noise must be one of 'normal', 'gumbel', got 'cauchy'$",
        ),
        (
            lambda: PerturbedOptimizer(TopK(2, M)),
            "noise",
            SumOfGamma(k=2),
            TypeError,
            r"^PerturbedOptimizer noise must be 'normal', 'gumbel', a Normal or a Gumbel instance",
        ),
    ],
)
def test_assignments_are_checked_like_the_constructor_and_leave_the_layer_unchanged(
    make: Callable[[], nn.Module], option: str, value: Any, error: type, message: str
) -> None:
    layer = make()
    before = {name: getattr(layer, name) for name in OPTIONS if hasattr(layer, name)}
    with pytest.raises(error, match=message):
        setattr(layer, option, value)
    assert {name: getattr(layer, name) for name in before} == before  # nothing half-assigned
    with pytest.raises(error, match=message):
        type(layer)(value) if option == "oracle" else type(layer)(TopK(2, M), **{option: value})


OPTIONS = ("oracle", "noise", "target", "samples", "pool", "generator", "check_finite", "noise_on")
OPTIONS += ("target_noise_scale", "lam", "sigma")


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: IMLE(TopK(2, M), Gumbel),
            r"^noise must be a NoiseDistribution instance, got the class Gumbel",
        ),
        (
            lambda: IMLE(TopK(2, M), "gumbel"),
            r"^noise must be a NoiseDistribution instance, got 'gumbel' \(str\)$",
        ),
        (
            lambda: IMLE(TopK(2, M), target=RelativeTarget),
            r"^target must be a TargetDistribution instance, got the class",
        ),
        (lambda: IMLE(TopK), r"^oracle must be a MapOracle instance, got the class TopK; pass an instance"),
        (
            lambda: STE(TopK(2, M), Gumbel),
            r"^noise must be a NoiseDistribution instance, got the class Gumbel",
        ),
        (lambda: Blackbox(TopK), r"^oracle must be a MapOracle instance, got the class TopK"),
        (lambda: PerturbedOptimizer("topk"), r"^oracle must be a MapOracle instance, got 'topk' \(str\)$"),
        (
            lambda: imle(W, TopK(2, M), Gumbel),
            r"^noise must be a NoiseDistribution instance, got the class Gumbel",
        ),
    ],
)
def test_a_class_or_a_wrong_type_gives_a_type_error_with_advice(
    call: Callable[[], object], message: str
) -> None:
    with pytest.raises(TypeError, match=message):
        call()
