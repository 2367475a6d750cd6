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
    assert stats.kstest(total, stats.gumbel_r(loc=0, scale=tau).cdf).pvalue > 0.01
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


def test_gumbel_extreme_uniforms_stay_finite() -> None:
    x = Gumbel().sample((1_000_000,), dtype=torch.float32, generator=gen(9))
    assert torch.isfinite(x).all()


def test_sog_resolves_k_from_oracle() -> None:
    assert SumOfGamma().resolve(TopK(3, 7)).k == 3.0
    assert SumOfGamma(k=2).resolve(TopK(3, 7)).k == 2
    oracle = EnumOracle(np.eye(3))
    oracle.expected_nonzeros = None
    with pytest.raises(ValueError, match="expected_nonzeros"):
        SumOfGamma().resolve(oracle)
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
    table = _sog_table(k, s, tau, torch.device("cpu"), torch.float64)
    assert table is not None
    t = np.linspace(-_T_MAX, _T_MAX, _T_POINTS)
    density = np.exp(-np.abs(t)) / (1 + np.exp(-np.abs(t))) ** 2  # logistic density of logit(U)
    values = table[0].numpy()
    mean = np.trapezoid(values * density, t)
    var = np.trapezoid((values - mean) ** 2 * density, t)
    harmonic = sum(1 / i for i in range(1, s + 1))
    assert mean == pytest.approx(tau / k * (harmonic - math.log(s)), rel=5e-3)
    assert var == pytest.approx((tau / k) ** 2 * k * sum(1 / i**2 for i in range(1, s + 1)), rel=5e-3)


def test_sog_table_tails_and_dtypes() -> None:
    x32 = SumOfGamma(k=5).sample((2_000_000,), dtype=torch.float32, generator=gen(22))
    assert torch.isfinite(x32).all() and x32.dtype == torch.float32
    assert float(x32.min()) >= -math.log(10) / 5 - 1e-6  # X ≥ 0: SoG ≥ −(τ/κ) log s
    # exact sampler and table agree on a far quantile (P(X > x) ~ 1e-5)
    fast = SumOfGamma(k=5).sample((1_000_000,), dtype=torch.float64, generator=gen(23))
    exact = SumOfGamma(k=5, exact=True).sample((1_000_000,), dtype=torch.float64, generator=gen(24))
    q_fast, q_exact = np.quantile(fast.numpy(), 0.99999), np.quantile(exact.numpy(), 0.99999)
    assert abs(q_fast - q_exact) / q_exact < 0.1


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
    table = noise_module._DEVICE_TABLES[(3.0, 10, 1.0, "cuda", torch.float32)]
    cpu = noise_module._sog_table(3.0, 10, 1.0, torch.device("cpu"), torch.float32)
    assert cpu is not None and gpu.shape == (4, 2, 5) and torch.isfinite(gpu).all()
    assert torch.equal(table[0].cpu(), cpu[0]) and torch.equal(table[1].cpu(), cpu[1])
