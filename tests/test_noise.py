"""Statistical tests of the noise distributions (Lemma 1, the finite-s bias theorem, Proposition 1)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats

from imle_solvers import IMLE, Gumbel, NoNoise, Normal, SumOfGamma, TopK
from tests.support.oracles import EnumOracle

EULER_GAMMA = 0.5772156649015329


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_gumbel_moments_and_ks() -> None:
    tau = 2.0
    x = Gumbel(tau).sample((100_000,), dtype=torch.float64, generator=gen()).numpy()
    assert stats.kstest(x, stats.gumbel_r(loc=0, scale=tau).cdf).pvalue > 0.01
    assert abs(x.mean() - tau * EULER_GAMMA) < 0.03
    assert abs(x.var() - math.pi**2 * tau**2 / 6) < 0.15


@pytest.mark.parametrize(("k", "tau", "s"), [(5, 1.0, 400), (3, 2.5, 400), (5, 1.0, 60), (3, 2.5, 60)])
def test_lemma1_sum_of_k_sog_is_gumbel(k: int, tau: float, s: int) -> None:
    # Lemma 1: Σ_{j=1}^{k} SoG(k, τ) ~ Gumbel(0, τ); with large s the finite-s bias (≤ τ/2s) is negligible.
    # s = 400 draws the Gamma variates, s = 60 uses the quantile table.
    eps = SumOfGamma(k=k, tau=tau, s=s).sample((8000, k), dtype=torch.float64, generator=gen(1))
    total = eps.sum(dim=1).numpy()
    # p > 0.001: a test at the 1 % level fails one seed in a hundred; the wrong laws give p < 1e-6
    assert stats.kstest(total, stats.gumbel_r(loc=0, scale=tau).cdf).pvalue > 0.001
    # A single SoG draw is NOT Gumbel(0, τ) (sanity: the test above can fail).
    single = eps[:, 0].numpy()
    assert stats.kstest(single, stats.gumbel_r(loc=0, scale=tau).cdf).pvalue < 1e-6


@pytest.mark.parametrize("s", [1, 2, 3])
def test_finite_s_bias_within_appendix_bound(s: int) -> None:
    # Appendix theorem: τ/(2(s+1)) < E[Σ_j SoG(k, τ, s)] − τγ < τ/(2s).
    k, tau, n = 4, 1.5, 100_000
    total = SumOfGamma(k=k, tau=tau, s=s).sample((n, k), dtype=torch.float64, generator=gen(2)).sum(1)
    bias = float(total.mean()) - tau * EULER_GAMMA
    stderr = float(total.std()) / math.sqrt(n)
    lower, upper = tau / (2 * (s + 1)), tau / (2 * s)
    assert lower - 4 * stderr < bias < upper + 4 * stderr
    # and the exact mean τ(H_s − log s) is where the sampler puts it
    exact = tau * (sum(1 / i for i in range(1, s + 1)) - math.log(s))
    assert abs(float(total.mean()) - exact) < 5 * stderr


def test_sog_mean_for_paper_setting() -> None:
    # SoG(κ=5, τ=1, s=10): E[Σ_5 draws] = H_10 − log 10 ∈ τγ + (1/22, 1/20)
    total = SumOfGamma(k=5, tau=1.0, s=10).sample((200_000, 5), dtype=torch.float64, generator=gen(3)).sum(1)
    exact = sum(1 / i for i in range(1, 11)) - math.log(10)
    assert 1 / 22 < exact - EULER_GAMMA < 1 / 20
    assert abs(float(total.mean()) - exact) < 5 * float(total.std()) / math.sqrt(total.numel())


def test_proposition1_gumbel_max_matches_softmax() -> None:
    # Prop. 1: for a categorical (top-1), argmax(θ + Gumbel(τ)) ~ softmax(θ/τ).
    tau, n = 0.7, 60_000
    theta = torch.tensor([0.5, -1.0, 0.2, 1.3, 0.0], dtype=torch.float64)
    layer = IMLE(TopK(1, 5), noise=Gumbel(tau), generator=gen(4))
    z = layer(theta.expand(n, 5))
    counts = z.sum(0).numpy()
    probs = torch.softmax(theta / tau, 0).numpy()
    assert stats.chisquare(counts, probs * n).pvalue > 0.01
    # the wrong temperature is rejected (the test has power)
    wrong = torch.softmax(theta / (2 * tau), 0).numpy()
    assert stats.chisquare(counts, wrong * n).pvalue < 1e-6


def test_normal_and_nonoise() -> None:
    x = Normal(0.5).sample((50_000,), generator=gen(5))
    assert abs(float(x.mean())) < 0.01 and abs(float(x.std()) - 0.5) < 0.01
    z = NoNoise().sample((3, 4), dtype=torch.float64)
    assert z.dtype == torch.float64 and torch.count_nonzero(z) == 0 and NoNoise().is_zero


@pytest.mark.parametrize("noise", [Gumbel(), SumOfGamma(k=3), Normal(), NoNoise()])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_dtype_shape_and_generator(noise, dtype: torch.dtype) -> None:  # type: ignore[no-untyped-def]
    a = noise.sample((4, 2, 6), device="cpu", dtype=dtype, generator=gen(7))
    b = noise.sample((4, 2, 6), device="cpu", dtype=dtype, generator=gen(7))
    assert a.shape == (4, 2, 6) and a.dtype == dtype and a.device.type == "cpu"
    assert torch.equal(a, b) and torch.isfinite(a).all()
    if not noise.is_zero:
        c = noise.sample((4, 2, 6), dtype=dtype, generator=gen(8))
        assert not torch.equal(a, c)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_gumbel_extreme_uniforms_stay_finite(monkeypatch: pytest.MonkeyPatch, dtype: torch.dtype) -> None:
    # torch.rand returns 0 with probability 2^-24 per float32 draw: −log(−log 0) = −inf unless the
    # uniform is moved into the open interval. Hand the sampler the extreme uniforms themselves.
    def extreme(shape: tuple[int, ...], **kwargs: object) -> torch.Tensor:
        work = kwargs["dtype"]
        assert isinstance(work, torch.dtype)
        top = 1.0 - torch.finfo(work).eps / 2  # the largest value torch.rand returns
        return torch.tensor([0.0, top] * (math.prod(shape) // 2), dtype=work).reshape(shape)

    monkeypatch.setattr(torch, "rand", extreme)
    x = Gumbel(2.0).sample((6,), dtype=dtype)
    assert x.dtype == dtype and torch.isfinite(x).all()
    assert float(x[0]) < -4.0 and float(x[1]) > 30.0  # the extreme draws are kept, only made finite


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_uniforms_of_exactly_0_and_1_are_moved_inside_the_interval(
    monkeypatch: pytest.MonkeyPatch, dtype: torch.dtype
) -> None:
    """The clamp's documented purpose: ``log`` never sees 0 or 1, even if a generator returns exactly
    1.0 (torch.rand promises [0, 1); a backend or a user's generator that breaks it must not turn a
    draw into ±inf). Gumbel maps u = 1 to the draw at 1 − eps, u = 0 to the one at the smallest normal
    number; the SumOfGamma table maps them to its last and first points."""

    def exact_ends(shape: tuple[int, ...], **kwargs: object) -> torch.Tensor:
        work = kwargs["dtype"]
        assert isinstance(work, torch.dtype)
        return torch.tensor([0.0, 1.0] * (math.prod(shape) // 2), dtype=work).reshape(shape)

    monkeypatch.setattr(torch, "rand", exact_ends)
    for generator in (None, torch.Generator().manual_seed(0)):
        x = Gumbel(2.0).sample((6,), dtype=dtype, generator=generator)
        assert x.dtype == dtype and torch.isfinite(x).all()
        work = torch.float64 if dtype == torch.float64 else torch.float32  # half precision: drawn in float32
        ends = torch.tensor([torch.finfo(work).tiny, 1.0 - torch.finfo(work).eps], dtype=work)
        expected = (-2.0 * torch.log(-torch.log(ends))).to(dtype)  # the draws at the clamped uniforms
        assert torch.equal(x[:2], expected) and float(x[1]) > 30.0
        sog = SumOfGamma(k=2.0).sample((6,), dtype=dtype, generator=generator)
        assert torch.isfinite(sog).all() and float(sog[0]) < float(sog[1])


def test_sog_resolves_k_from_oracle() -> None:
    assert SumOfGamma().resolve(TopK(3, 7)).k == 3.0
    assert SumOfGamma(k=2).resolve(TopK(3, 7)).k == 2
    oracle = EnumOracle(np.eye(3))
    for unknown in (None, 0.0, -1.0):  # no usable κ: the message says where k comes from
        oracle.expected_nonzeros = unknown
        with pytest.raises(ValueError, match="expected_nonzeros"):
            SumOfGamma().resolve(oracle)
    oracle.expected_nonzeros = None
    with pytest.raises(ValueError, match="expected_nonzeros"):
        IMLE(oracle)  # default noise is SumOfGamma(k=None)
    with pytest.raises(ValueError, match="no k yet"):
        SumOfGamma().sample((2,))


@pytest.mark.parametrize(
    "make",
    [
        lambda: Gumbel(0),
        lambda: SumOfGamma(k=0),
        lambda: SumOfGamma(tau=-1),
        lambda: SumOfGamma(s=0),
        lambda: SumOfGamma(s=2.5),
        lambda: Normal(0),
    ],
)
def test_invalid_parameters(make) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError):
        make()


# --------------------------------------------------------------------------- the SoG quantile table
def _sog_exact_cdf(x: np.ndarray, k: float, tau: float, s: int) -> np.ndarray:
    """CDF of SoG(k, τ, s) from Moschopoulos' series, independent of the table's interpolation."""
    from imle_solvers.noise import _sog_series

    series = _sog_series(k, s)
    assert series is not None
    rho, b, w = series
    from scipy import special

    total = np.asarray(x) * k / tau + math.log(s)  # X = κ·SoG/τ + log s
    y = np.clip(total, 0, None)[:, None] / b
    return special.gammainc(rho + np.arange(len(w)), y) @ w


@pytest.mark.parametrize("k", [1.0, 5.0, 12.0, 50.0, 8.6])
def test_sog_table_matches_the_exact_distribution(k: float) -> None:
    tau, s = 1.5, 10
    fast = SumOfGamma(k=k, tau=tau, s=s).sample((400_000,), dtype=torch.float64, generator=gen(20)).numpy()
    # KS distance to the exact CDF, read on 2,000 points spread over the sample's quantiles
    grid = np.quantile(fast, np.linspace(0.0005, 0.9995, 2000))
    empirical = np.searchsorted(np.sort(fast), grid, side="right") / fast.size
    distance = np.max(np.abs(empirical - _sog_exact_cdf(grid, k, tau, s)))
    assert distance < 1.63 / math.sqrt(fast.size)  # the 1 % critical value: sampling noise only
    # two-sample KS against the exact (Gamma-sum) sampler
    exact = SumOfGamma(k=k, tau=tau, s=s, exact=True).sample(
        (200_000,), dtype=torch.float64, generator=gen(21)
    )
    assert stats.ks_2samp(fast, exact.numpy()).pvalue > 1e-3
    # k = 1 has a closed form: Σ_i Exp(rate i) = max of s Exp(1) (Rényi), CDF (1 − e^{−x})^s
    if k == 1.0:
        grid = np.linspace(-2, 8, 50)
        np.testing.assert_allclose(
            _sog_exact_cdf(grid, 1.0, tau, s),
            (1 - np.exp(-np.clip(grid / tau + math.log(s), 0, None))) ** s,
            atol=1e-12,
        )


@pytest.mark.parametrize("k", [1.0, 5.0, 12.0, 50.0])
def test_sog_table_moments_match_the_formulas(k: float) -> None:
    # The table's own distribution, integrated over logit(u) (no Monte-Carlo noise):
    # mean (τ/κ)(H_s − log s) and variance (τ/κ)²·κ·Σ 1/i², both within 0.5 %.
    from imle_solvers.noise import _T_MAX, _T_POINTS, _sog_table

    tau, s = 2.0, 10
    table = _sog_table(k, s, torch.device("cpu"), torch.float64)  # the draw at τ = 1
    assert table is not None
    t = np.linspace(-_T_MAX, _T_MAX, _T_POINTS)
    density = np.exp(-np.abs(t)) / (1 + np.exp(-np.abs(t))) ** 2  # logistic density of logit(U)
    values = tau * table[0].numpy()
    mean = np.trapezoid(values * density, t)
    var = np.trapezoid((values - mean) ** 2 * density, t)
    harmonic = sum(1 / i for i in range(1, s + 1))
    assert mean == pytest.approx(tau / k * (harmonic - math.log(s)), rel=5e-3)
    assert var == pytest.approx((tau / k) ** 2 * k * sum(1 / i**2 for i in range(1, s + 1)), rel=5e-3)


def test_sog_table_tails_and_dtypes() -> None:
    x32 = SumOfGamma(k=5).sample((2_000_000,), dtype=torch.float32, generator=gen(22))
    assert torch.isfinite(x32).all() and x32.dtype == torch.float32
    assert float(x32.min()) >= -math.log(10) / 5 - 1e-6  # X ≥ 0: SoG ≥ −(τ/κ) log s
    # the table's far quantile (P(X > x) = 1e-5) against that of 2,000,000 exact draws (20 beyond it;
    # their quantile is within ±5.5 % of the table's over 20 seeds)
    from imle_solvers.noise import _T_MAX, _T_STEP, _sog_table

    table = _sog_table(5.0, 10, torch.device("cpu"), torch.float64)
    assert table is not None
    pos = (math.log((1 - 1e-5) / 1e-5) + _T_MAX) * _T_STEP  # grid position of logit(u)
    i = int(pos)
    q_table = float(table[0][i] + (pos - i) * table[1][i])
    exact = SumOfGamma(k=5, exact=True).sample((2_000_000,), dtype=torch.float64, generator=gen(24))
    q_exact = float(np.quantile(exact.numpy(), 1 - 1e-5))
    assert abs(q_table - q_exact) / q_table < 0.1


@pytest.mark.slow
@pytest.mark.parametrize("k", [1.0, 5.0, 12.0, 50.0])
def test_sog_table_ks_on_ten_million_draws(k: float) -> None:
    fast = SumOfGamma(k=k).sample((10_000_000,), dtype=torch.float64, generator=gen(25)).numpy()
    exact = SumOfGamma(k=k, exact=True).sample((10_000_000,), dtype=torch.float64, generator=gen(26)).numpy()
    assert stats.ks_2samp(fast, exact).statistic < 1e-3
    harmonic = sum(1 / i for i in range(1, 11))
    mean, var = (harmonic - math.log(10)) / k, sum(1 / i**2 for i in range(1, 11)) / k
    assert fast.mean() == pytest.approx(mean, abs=5 * math.sqrt(var / fast.size))
    # the sample variance of a heavy-tailed draw (Gamma shape 1/κ: kurtosis 6κ) is itself noisy: compare
    # within 5 of its standard errors (the table's exact variance is checked to 0.5 % by quadrature above)
    centred = fast - fast.mean()
    stderr_var = math.sqrt(float(np.mean(centred**4) - fast.var() ** 2) / fast.size)
    assert fast.var() == pytest.approx(var, abs=5 * stderr_var)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_sog_table_in_half_precision_keeps_the_distribution(dtype: torch.dtype) -> None:
    half = SumOfGamma(k=5).sample((200_000,), dtype=dtype, generator=gen(27))
    assert half.dtype == dtype and torch.isfinite(half).all()
    full = SumOfGamma(k=5).sample((200_000,), dtype=torch.float64, generator=gen(28))
    assert stats.ks_2samp(half.double().numpy(), full.numpy()).statistic < 0.01
    assert len(torch.unique(half)) > 1000  # not a handful of grid points


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_sog_first_draw_on_cuda_never_syncs() -> None:
    """The quantile table's first upload to the device (a cache miss) must not block the host."""
    from imle_solvers import noise as noise_module

    noise_module._DEVICE_TABLES.clear()
    noise = SumOfGamma(k=3, tau=1.0, s=10)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        gpu = noise.sample((4, 2, 5), device="cuda", generator=torch.Generator("cuda").manual_seed(0))
    finally:
        torch.cuda.set_sync_debug_mode(0)
    table = noise_module._DEVICE_TABLES[(3.0, 10, f"cuda:{torch.cuda.current_device()}", torch.float32)]
    cpu = noise_module._sog_table(3.0, 10, torch.device("cpu"), torch.float32)
    assert cpu is not None and gpu.shape == (4, 2, 5) and torch.isfinite(gpu).all()
    assert torch.equal(table[0].cpu(), cpu[0]) and torch.equal(table[1].cpu(), cpu[1])


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_sog_device_tables_are_bounded_on_cuda_and_follow_the_device() -> None:
    from imle_solvers import noise as noise_module

    noise_module._DEVICE_TABLES.clear()
    for tau in np.linspace(0.5, 5.0, 50):  # annealing τ: one table
        SumOfGamma(k=3, tau=float(tau)).sample((8,), device="cuda")
    for k in range(1, 9):
        SumOfGamma(k=float(k)).sample((8,), device="cuda")
    names = [key[2] for key in noise_module._DEVICE_TABLES]
    assert names.count(f"cuda:{torch.cuda.current_device()}") == noise_module._TABLES_PER_DEVICE
    x = SumOfGamma(k=5).sample((100_000,), device="cuda", dtype=torch.bfloat16)
    assert x.dtype == torch.bfloat16 and x.device.type == "cuda" and torch.isfinite(x).all()


# --------------------------------------------------------------------------- half precision
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_gumbel_in_half_precision_has_the_right_mean(dtype: torch.dtype) -> None:
    # the uniforms are drawn in float32 and the draw cast at the end: a bf16 uniform (≈ 500 values in
    # (0, 1)) gave a mean of 0.552 instead of γ = 0.5772
    n = 1_000_000
    x = Gumbel().sample((n,), dtype=dtype, generator=gen(30))
    assert x.dtype == dtype and torch.isfinite(x).all()
    stderr = math.pi / math.sqrt(6) / math.sqrt(n)
    assert abs(float(x.double().mean()) - EULER_GAMMA) < 6 * stderr + 2e-3  # + the bf16 rounding of a draw
    tau = 3.0
    y = Gumbel(tau).sample((n,), dtype=dtype, generator=gen(31)).double()
    assert abs(float(y.mean()) - tau * EULER_GAMMA) < tau * (6 * stderr + 2e-3)
    assert abs(float(y.var()) - math.pi**2 * tau**2 / 6) < 0.05 * math.pi**2 * tau**2 / 6


def test_gumbel_half_precision_draws_are_the_float32_draws_rounded() -> None:
    full = Gumbel(2.0).sample((1000,), dtype=torch.float32, generator=gen(32))
    half = Gumbel(2.0).sample((1000,), dtype=torch.bfloat16, generator=gen(32))
    assert torch.equal(half, full.to(torch.bfloat16))


# --------------------------------------------------------------------------- the SoG table where it is hard
EXACT_MEAN = sum(1 / i for i in range(1, 11)) - math.log(10)  # E[X] − log s for s = 10, times 1/κ


@pytest.mark.parametrize("k", [pytest.param(0.05, marks=pytest.mark.slow), 0.1, 1000.0, 10_000.0])
def test_sog_table_is_right_for_small_and_large_k(k: float) -> None:
    from imle_solvers.noise import _sog_quantile_table, _sog_series

    assert _sog_quantile_table(k, 10) is not None  # the table is used here
    series = _sog_series(k, 10)
    assert series is not None and abs(float(series[2].sum()) - 1.0) < 1e-9  # the weights sum to 1
    fast = SumOfGamma(k=k).sample((200_000,), dtype=torch.float64, generator=gen(40))
    assert torch.isfinite(fast).all()
    assert float(fast.min()) >= -math.log(10) / k * (1 + 1e-12)  # X ≥ 0
    exact = SumOfGamma(k=k, exact=True).sample((200_000,), dtype=torch.float64, generator=gen(41))
    assert stats.ks_2samp(fast.numpy(), exact.numpy()).pvalue > 1e-3
    # the mean of the draws against the formula (τ/κ)(H_s − log s), within 5 standard errors
    stderr = float(fast.std()) / math.sqrt(fast.numel())
    assert abs(float(fast.mean()) - EXACT_MEAN / k) < 5 * stderr


@pytest.mark.parametrize("k", [pytest.param(0.05, marks=pytest.mark.slow), 0.1])
def test_sog_small_k_mean_is_the_formula(k: float) -> None:
    # k = 0.05 gave a mean of 1.33 where the formula and the exact sampler give 12.5, k = 0.1 one 1.7 %
    # low: the series was cut before most of its weight (the weights of small κ peak hundreds of terms out)
    x = SumOfGamma(k=k).sample((400_000,), dtype=torch.float64, generator=gen(42))
    stderr = float(x.std()) / math.sqrt(x.numel())  # 0.1 % of the mean at k = 0.1: 1.7 % is 17 of them
    assert abs(float(x.mean()) - EXACT_MEAN / k) < 5 * stderr


def test_exact_gamma_variates_are_drawn_in_the_requested_precision() -> None:
    from imle_solvers.noise import _standard_gamma

    # float64 variates, not float32 ones cast up (those would all survive a round trip through float32)
    x = _standard_gamma(0.5, (2000,), "cpu", torch.float64, gen(47))
    assert x.dtype == torch.float64 and bool((x > 0).all())
    assert float((x.float().double() != x).double().mean()) > 0.99
    assert _standard_gamma(0.5, (3,), "cpu", torch.float32, gen(47)).dtype == torch.float32


def test_sog_hands_over_to_the_exact_sampler_where_the_table_cannot_be_right() -> None:
    from imle_solvers.noise import _sog_quantile_table, _sog_series

    for k, s in ((0.01, 10), (3.0, 200)):  # the first weight underflows; the series is too long
        assert _sog_series(k, s) is None and _sog_quantile_table(k, s) is None
        table = SumOfGamma(k=k, s=s).sample((3, 40), dtype=torch.float64, generator=gen(43))
        exact = SumOfGamma(k=k, s=s, exact=True).sample((3, 40), dtype=torch.float64, generator=gen(43))
        assert torch.equal(table, exact)
    x = SumOfGamma(k=0.01).sample((100_000,), dtype=torch.float32, generator=gen(44))
    assert x.dtype == torch.float32 and torch.isfinite(x).all()
    assert float(x.double().mean()) == pytest.approx(EXACT_MEAN / 0.01, rel=5e-3)


def test_sog_rejects_a_table_whose_moments_miss(monkeypatch: pytest.MonkeyPatch) -> None:
    from imle_solvers import noise as noise_module

    noise_module._sog_quantile_table.cache_clear()
    monkeypatch.setattr(noise_module, "_MEAN_RTOL", 0.0)  # no table can be that exact
    try:
        assert noise_module._sog_quantile_table(5.0, 10) is None
    finally:
        noise_module._sog_quantile_table.cache_clear()
    monkeypatch.undo()
    quantiles = noise_module._sog_quantile_table(5.0, 10)
    assert quantiles is not None and noise_module._table_moments_hold(quantiles, 5.0, 10)
    assert not noise_module._table_moments_hold(quantiles * 1.01, 5.0, 10)  # a 1 % error in X is seen
    assert not noise_module._table_moments_hold(quantiles, 5.0, 11)


def test_topk_with_a_huge_k_prefers_the_large_weights() -> None:
    # k = 10,000 (s = 10) gave NaN draws near 1e300 and a layer that preferred θ = −100 over θ = +100
    k = 10_000
    theta = torch.cat([torch.full((k,), 100.0), torch.full((k,), -100.0)])[
        torch.randperm(2 * k, generator=gen(45))
    ]
    z = IMLE(TopK(k, 2 * k), generator=gen(46))(theta.expand(2, -1))
    assert torch.equal(z, (theta > 0).to(z.dtype).expand(2, -1))


# --------------------------------------------------------------------------- the device cache
def test_sog_device_cache_is_keyed_without_tau_and_bounded() -> None:
    from imle_solvers import noise as noise_module

    noise_module._DEVICE_TABLES.clear()
    for tau in np.geomspace(0.01, 100.0, 300):  # annealing τ over 300 values: still one table
        SumOfGamma(k=3, tau=float(tau)).sample((4,), generator=gen(50))
    assert list(noise_module._DEVICE_TABLES) == [(3.0, 10, "cpu", torch.float32)]
    # τ only scales the draw
    a = SumOfGamma(k=3, tau=1.0).sample((1000,), dtype=torch.float64, generator=gen(51))
    b = SumOfGamma(k=3, tau=4.0).sample((1000,), dtype=torch.float64, generator=gen(51))
    assert torch.equal(b, 4.0 * a)


def test_sog_device_cache_evicts_the_least_recently_used_table_per_device(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from imle_solvers import noise as noise_module

    # the cache logic only: a stand-in quantile table instead of building five real ones
    monkeypatch.setattr(
        noise_module, "_sog_quantile_table", lambda k, s: np.linspace(0.0, k, noise_module._T_POINTS)
    )
    limit = noise_module._TABLES_PER_DEVICE
    assert limit == 4
    noise_module._DEVICE_TABLES.clear()
    cpu, meta = torch.device("cpu"), torch.device("meta")
    assert noise_module._sog_table(1.0, 10, meta, torch.float32) is not None  # another device
    for k in (1.0, 2.0, 3.0, 4.0):
        noise_module._sog_table(k, 10, cpu, torch.float32)
    noise_module._sog_table(1.0, 10, cpu, torch.float32)  # k = 1 used again: now the most recent
    noise_module._sog_table(5.0, 10, cpu, torch.float32)  # evicts k = 2, the least recently used
    on_cpu = [key[0] for key in noise_module._DEVICE_TABLES if key[2] == "cpu"]
    assert on_cpu == [3.0, 4.0, 1.0, 5.0]
    assert (1.0, 10, "meta", torch.float32) in noise_module._DEVICE_TABLES  # other devices untouched
    noise_module._sog_table(5.0, 10, cpu, torch.float64)  # the dtype is part of the key
    assert len([key for key in noise_module._DEVICE_TABLES if key[2] == "cpu"]) == limit
    assert (5.0, 10, "cpu", torch.float64) in noise_module._DEVICE_TABLES
    noise_module._DEVICE_TABLES.clear()  # no stand-in table outlives the test


# --------------------------------------------------------------------------- documented defaults
def test_noise_defaults_are_pinned() -> None:
    assert Gumbel().tau == 1.0
    assert (SumOfGamma().k, SumOfGamma().tau, SumOfGamma().s, SumOfGamma().exact) == (None, 1.0, 10, False)
    assert Normal().sigma == 1.0
    shape = (200, 6)

    def draw(noise: object, seed: int = 60) -> torch.Tensor:
        return noise.sample(shape, dtype=torch.float64, generator=gen(seed))  # type: ignore[attr-defined]

    # the defaults are used: the default instance draws what the explicit one draws, and not others
    assert torch.equal(draw(Gumbel()), draw(Gumbel(1.0)))
    assert not torch.equal(draw(Gumbel()), draw(Gumbel(2.0)))
    assert torch.equal(draw(Normal()), draw(Normal(1.0)))
    assert not torch.equal(draw(Normal()), draw(Normal(2.0)))
    default = SumOfGamma(k=3)
    assert torch.equal(draw(default), draw(SumOfGamma(k=3, tau=1.0, s=10, exact=False)))
    for other in (SumOfGamma(k=3, tau=2.0), SumOfGamma(k=3, s=5), SumOfGamma(k=3, exact=True)):
        assert not torch.equal(draw(default), draw(other))
    # a layer's default noise is SumOfGamma with k from the oracle
    assert IMLE(TopK(3, 8)).noise == SumOfGamma(k=3.0)


def test_a_series_cut_before_its_weights_sum_to_one_is_refused() -> None:
    from imle_solvers.noise import _sog_series

    series = _sog_series(1000.0, 10)  # the weights' tail is long (κ = 1000: α = 0.001)
    assert series is not None and float(series[2].sum()) == pytest.approx(1.0, abs=1e-9)
    for kappa, tol in ((1000.0, 0.5), (10.0, 0.5), (1.0, 0.9)):  # a coarse cut leaves mass out
        assert _sog_series(kappa, 10, tol=tol) is None


def test_device_tables_are_keyed_by_the_explicit_device() -> None:
    from imle_solvers.noise import _device_name

    assert _device_name(torch.device("cpu")) == "cpu"
    assert _device_name(torch.device("cuda", 1)) == "cuda:1"  # an index given: no CUDA call
    assert _device_name(torch.device("meta")) == "meta"
