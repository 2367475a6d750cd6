"""Noise distributions ρ(ε) for perturb-and-MAP (paper, sec. 4 and eq. 9).

``z = MAP(θ + ε)`` with ``ε ~ ρ``. Every distribution samples on the requested device and dtype,
from an optional `torch.Generator`, in one vectorised call.
"""

from __future__ import annotations

import abc
import collections
import dataclasses
import functools
import math
import threading
from typing import TYPE_CHECKING

import numpy as np
import torch

from ._checks import positive, positive_int
from ._device import upload

if TYPE_CHECKING:
    from .oracle import MapOracle

__all__ = ["Gumbel", "NoNoise", "NoiseDistribution", "Normal", "SumOfGamma"]

Shape = tuple[int, ...]


class NoiseDistribution(abc.ABC):
    """A perturbation distribution ρ(ε) over ``R^m`` (paper, eq. 7: ``ε_i ~ ρ(ε)``).

    References
    ----------
    Papandreou & Yuille, "Perturb-and-MAP Random Fields: Using Discrete Optimization to Learn and Sample from
    Energy Models", ICCV 2011.

    Niepert, Minervini & Franceschi, "Implicit MLE", NeurIPS 2021, eq. 7 and Algorithm 1,
    <https://arxiv.org/abs/2106.01798>.
    """

    @abc.abstractmethod
    def sample(
        self,
        shape: Shape,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """Draw i.i.d. noise of ``shape`` on ``device`` in ``dtype`` (default float32)."""

    def resolve(self, oracle: MapOracle) -> NoiseDistribution:
        """Return this distribution with oracle-dependent parameters filled in (default: itself)."""
        return self

    @property
    def is_zero(self) -> bool:
        """True for the Dirac delta at 0 (``NoNoise``): layers may then skip the sampling."""
        return False


def _rand(
    shape: Shape, device: torch.device | str | None, dtype: torch.dtype, generator: torch.Generator | None
) -> torch.Tensor:
    """``torch.rand``, with ``generator=`` passed only when there is one.

    ``torch.rand(shape, generator=None)`` is another overload than ``torch.rand(shape)``, one that
    `torch.compile` cannot trace with a symbolic batch size (it needs concrete sizes): a layer under
    ``torch.compile`` then failed at the second batch size. The default generator is never named.
    """
    if generator is None:
        return torch.rand(shape, device=device, dtype=dtype)
    return torch.rand(shape, device=device, dtype=dtype, generator=generator)


def _uniform_open(
    shape: Shape, device: torch.device | str | None, dtype: torch.dtype, generator: torch.Generator | None
) -> torch.Tensor:
    """U(0, 1) strictly inside the interval, so that ``log`` never sees 0 or 1."""
    u = _rand(shape, device, dtype, generator)
    tiny = torch.finfo(dtype).tiny
    return u.clamp_(min=tiny, max=1.0 - torch.finfo(dtype).eps)


def _work_dtype(dtype: torch.dtype) -> torch.dtype:
    """The precision a draw is computed in: float32 for half precision, else ``dtype`` itself.

    A bfloat16 uniform takes about 500 distinct values in (0, 1) and a float16 one about 15,000: a
    Gumbel computed from them has the wrong mean (bf16: 0.552 instead of γ = 0.5772). Draws are made
    in float32 and cast to the requested dtype at the end.
    """
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


@torch.compiler.disable
def _standard_gamma(
    alpha: float,
    shape: Shape,
    device: torch.device | str | None,
    dtype: torch.dtype,
    generator: torch.Generator | None,
) -> torch.Tensor:
    """Gamma(α, 1) draws of ``shape``: NumPy's sampler on the CPU, ``torch._standard_gamma`` elsewhere.

    On the CPU ``torch._standard_gamma`` costs ~200 ns a draw for α < 1 (single-threaded rejection),
    NumPy's ~30 ns; the NumPy generator is seeded from ``generator`` (or torch's global RNG), so a seeded
    torch generator still gives reproducible noise. On accelerators the torch kernel runs in parallel
    on the device, with no host round trip.
    """
    dev = torch.device(device) if device is not None else torch.device("cpu")
    if dev.type == "cpu":
        if generator is None:  # (the default generator is not named: see `_rand`)
            draw = torch.randint(0, 2**62, (1,))
        else:
            draw = torch.randint(0, 2**62, (1,), generator=generator)
        seed = int(draw.item())
        np_dtype = np.float32 if dtype in (torch.float32, torch.float16, torch.bfloat16) else np.float64
        draws = np.random.default_rng(seed).standard_gamma(alpha, size=shape, dtype=np_dtype)
        return torch.from_numpy(draws).to(dtype)
    concentration = torch.full(shape, alpha, device=dev, dtype=dtype)
    if generator is None:  # (not named: see `_rand`)
        return torch._standard_gamma(concentration)
    return torch._standard_gamma(concentration, generator=generator)


@dataclasses.dataclass(frozen=True)
class Gumbel(NoiseDistribution):
    """Gumbel(0, τ) noise: the perturbation that makes perturb-and-MAP exact for categoricals (Prop. 1).

    ``ε = −τ · log(−log U)``, ``U ~ U(0, 1)``; in half precision the uniforms and the logarithms are
    computed in float32 and the draw is cast at the end (so the mean stays τγ, γ ≈ 0.5772).

    Parameters
    ----------
    tau
        Temperature / scale τ > 0.

    References
    ----------
    Papandreou & Yuille, "Perturb-and-MAP Random Fields", ICCV 2011; Niepert, Minervini & Franceschi,
    "Implicit MLE", NeurIPS 2021, Proposition 1, <https://arxiv.org/abs/2106.01798>.
    """

    tau: float = 1.0

    def __post_init__(self) -> None:
        positive("Gumbel tau", self.tau)

    def sample(
        self,
        shape: Shape,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        dtype = dtype or torch.get_default_dtype()
        u = _uniform_open(shape, device, _work_dtype(dtype), generator)  # U(0, 1), float32 for half
        return (-self.tau * torch.log(-torch.log(u))).to(dtype)  # ε = −τ log(−log U)


_T_MAX = 90.0  # the table covers logit(u) ∈ [−90, 90], i.e. u ∈ [8e-40, 1 − 8e-40]
_T_POINTS = 16385  # grid step 0.011 in logit(u)
_TABLE_MAX_TERMS = 2500  # series length beyond which the exact sampler is used instead (s ≳ 80)
_LOG_W0_MIN = -700.0  # the series' first weight must be a normal double (e^−700 ≈ 1e-304)
_X_FLOOR = 1e-300  # quantiles below it are drawn as 0: a draw is (τ/κ)(X − log s), X ≥ 0
_MEAN_RTOL = 1e-3  # a table whose own mean of X misses H_s by more is not used
_VAR_RTOL = 1e-2  # ... or whose variance misses κ Σ 1/i² by more
_TABLES_PER_DEVICE = 4  # device tables kept per device (least recently used evicted)


def _sog_series(kappa: float, s: int, tol: float = 1e-13) -> tuple[float, float, np.ndarray] | None:
    """Moschopoulos' series of ``X = Σ_{i=1}^{s} Gamma(1/κ, scale κ/i)``: ``(ρ, b, w)`` or ``None``.

    ``P(X ≤ x) = Σ_k w_k P(ρ + k, x/b)`` and ``P(X > x) = Σ_k w_k Q(ρ + k, x/b)`` with ``ρ = s/κ``,
    ``b = κ/s`` (the smallest scale) and positive weights summing to 1 (Moschopoulos 1985, "The
    distribution of the sum of independent gamma random variables"). All terms are positive, so both
    tails have full relative accuracy.

    The weights are the law of ``K = Σ_i K_i`` with ``K_i`` negative binomial (shape α = 1/κ,
    failure probability ``r_i = 1 − b/β_i``): the series is cut ten standard deviations of ``K`` past
    its mean, plus the geometric tail of the slowest ``r_i`` (for small κ the weights peak far out).
    ``None`` when more than ``_TABLE_MAX_TERMS`` terms are needed, when the first weight underflows
    (κ ≲ 0.02 for s = 10), or when the computed weights do not sum to 1.
    """
    alpha = 1.0 / kappa
    scales = kappa / np.arange(1, s + 1)
    b = float(scales.min())
    r = 1.0 - b / scales  # ∈ [0, 1)
    r_max = float(r.max())
    log_w0 = alpha * float(np.sum(np.log(b / scales)))  # log w_0 = α Σ_i log(b/β_i)
    if log_w0 < _LOG_W0_MIN:
        return None
    if r_max == 0:
        terms = 1
    else:
        mean_k = alpha * float(np.sum(r / (1.0 - r)))  # E[K]
        sd_k = math.sqrt(alpha * float(np.sum(r / (1.0 - r) ** 2)))  # sd[K]
        terms = math.ceil(mean_k + 10.0 * sd_k + math.log(tol) / math.log(r_max)) + 2
    if terms > _TABLE_MAX_TERMS:
        return None
    k = np.arange(1, terms + 1)
    gam = (alpha * r[None, :] ** k[:, None]).sum(axis=1) / k  # γ_k = Σ_i α(1 − b/β_i)^k / k
    delta = np.zeros(terms + 1)
    delta[0] = 1.0
    for j in range(terms):  # δ_{j+1} = (1/(j+1)) Σ_{i=1}^{j+1} i γ_i δ_{j+1−i}
        i = np.arange(1, j + 2)
        delta[j + 1] = float(np.dot(i * gam[i - 1], delta[j + 1 - i])) / (j + 1)
    weights = math.exp(log_w0) * delta  # w_k = w_0 δ_k
    if not np.all(np.isfinite(weights)) or abs(float(weights.sum()) - 1.0) > 1e-9:
        return None
    return s * alpha, b, weights


def _sog_logit_cdf(x: np.ndarray, rho: float, b: float, weights: np.ndarray) -> np.ndarray:
    """``logit P(X ≤ x)``, the smaller tail from its own series (no cancellation), the other as 1 − it."""
    from scipy import special

    shapes = rho + np.arange(len(weights))
    y = x[:, None] / b
    left = special.gammainc(shapes, y) @ weights  # P(X ≤ x)
    right = 1.0 - left  # P(X > x): exact enough where P(X ≤ x) ≤ 1/2
    upper = left > 0.5
    if upper.any():
        right[upper] = special.gammaincc(shapes, y[upper]) @ weights  # its own series in the upper tail
    with np.errstate(divide="ignore"):
        return np.log(left) - np.log(right)


def _table_moments_hold(quantiles: np.ndarray, kappa: float, s: int) -> bool:
    """Mean ``H_s`` and variance ``κ Σ 1/i²`` of X, integrated over the table (logistic density of
    ``logit(U)``), within ``_MEAN_RTOL`` and ``_VAR_RTOL``."""
    t = np.linspace(-_T_MAX, _T_MAX, _T_POINTS)
    density = np.exp(-np.abs(t)) / (1.0 + np.exp(-np.abs(t))) ** 2  # logistic density   [_T_POINTS]
    mean = float(np.trapezoid(quantiles * density, t))
    var = float(np.trapezoid((quantiles - mean) ** 2 * density, t))
    inverse_squares = np.arange(1, s + 1, dtype=np.float64) ** -2.0
    harmonic, spread = float(np.sum(1.0 / np.arange(1, s + 1))), kappa * float(inverse_squares.sum())
    return abs(mean - harmonic) <= _MEAN_RTOL * harmonic and abs(var - spread) <= _VAR_RTOL * spread


@functools.lru_cache(maxsize=32)
def _sog_quantile_table(kappa: float, s: int) -> np.ndarray | None:
    """Quantiles of ``X`` at ``logit(u)`` on a uniform grid of ``_T_POINTS`` points in ``[−90, 90]``.

    ``None`` where the table cannot be right: the series cannot be computed (`_sog_series`), the grid
    of ``logit(u)`` is not covered, or the table's own mean and variance miss the formulas. Quantiles
    below ``_X_FLOOR`` (large κ, where X is below 1e-300 with a fair probability) are 0.
    """
    from scipy import interpolate, special

    series = _sog_series(kappa, s)
    if series is None:
        return None
    rho, b, weights = series
    # x range: P(X ≤ lo) ≈ w_0 (lo/b)^ρ / Γ(ρ+1) = e^{−95}; hi doubles until P(X > hi) < e^{−95}
    log_lo = math.log(b) + (-_T_MAX - 5.0 - math.log(weights[0]) + float(special.gammaln(rho + 1))) / rho
    floored = log_lo < math.log(_X_FLOOR)  # the lowest quantiles underflow: they are drawn as 0
    lo = _X_FLOOR if floored else math.exp(log_lo)
    hi = b * 10.0
    while _sog_logit_cdf(np.array([hi]), rho, b, weights)[0] < _T_MAX + 5.0:
        hi *= 2.0
        if hi > 1e300:
            return None
    # geometric points resolve the lower tail, linear ones the upper tail
    x = np.unique(np.concatenate([np.geomspace(lo, hi, 3000), np.linspace(0.0, hi, 3001)[1:]]))
    t = _sog_logit_cdf(x, rho, b, weights)  # logit F(x), increasing
    keep = np.isfinite(t)
    x, t = x[keep], t[keep]
    keep = np.concatenate([[True], np.diff(t) > 0])
    x, t = x[keep], t[keep]
    grid = np.linspace(-_T_MAX, _T_MAX, _T_POINTS)
    if t[-1] < _T_MAX or (t[0] > -_T_MAX and not floored):
        return None  # the upper tail, or a lower tail above the floor, is not covered
    inverse = interpolate.PchipInterpolator(t, np.log(x), extrapolate=False)  # log x(logit F)
    with np.errstate(over="ignore", invalid="ignore"):
        quantiles = np.exp(inverse(grid))  # x(t)   [_T_POINTS]
    quantiles[grid < t[0]] = 0.0  # below 1e-300
    if not np.all(np.isfinite(quantiles)) or np.any(np.diff(quantiles) < 0):
        return None
    return quantiles if _table_moments_hold(quantiles, kappa, s) else None


_T_STEP = (_T_POINTS - 1) / (2 * _T_MAX)  # grid points per unit of logit(u)
_T_LAST = _T_POINTS - 1.5  # the last interpolation cell starts at index _T_POINTS − 2

TableKey = tuple[float, int, str, torch.dtype]
_DEVICE_TABLES: collections.OrderedDict[TableKey, tuple[torch.Tensor, torch.Tensor]] = (
    collections.OrderedDict()
)
"""Device tables by ``(κ, s, device, dtype)``, least recently used first; `_TABLES_PER_DEVICE` per device."""
_DEVICE_TABLES_LOCK = threading.Lock()


def _device_name(device: torch.device) -> str:
    """``str(device)`` with the current CUDA device made explicit (``"cuda"`` → ``"cuda:0"``)."""
    if device.type == "cuda" and device.index is None:
        return f"cuda:{torch.cuda.current_device()}"
    return str(device)


@torch.compiler.disable
def _sog_table(
    kappa: float, s: int, device: torch.device, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """``(v, Δv)`` on ``device``: the SoG draw at τ = 1, ``(x(t) − log s)/κ``, at each grid point of
    ``logit(u)`` and its increment to the next point (``Δv[-1] = 0``); ``None`` where the table cannot be
    right (the caller then draws exactly).

    Cached per device, keyed by what determines the table (κ, s, device, dtype; τ only scales the
    draw), at most `_TABLES_PER_DEVICE` per device: the least recently used one is evicted.
    """
    key = (kappa, s, _device_name(device), dtype)
    with _DEVICE_TABLES_LOCK:
        table = _DEVICE_TABLES.get(key)
        if table is not None:
            _DEVICE_TABLES.move_to_end(key)  # most recently used
            return table
    quantiles = _sog_quantile_table(kappa, s)
    if quantiles is None:
        return None
    values = (quantiles - math.log(s)) / kappa  # SoG at τ = 1: (X − log s)/κ
    slopes = np.append(np.diff(values), 0.0)
    table = (
        upload(torch.from_numpy(values).to(dtype), device),
        upload(torch.from_numpy(slopes).to(dtype), device),
    )
    with _DEVICE_TABLES_LOCK:
        _DEVICE_TABLES[key] = table
        _DEVICE_TABLES.move_to_end(key)
        same_device = [k for k in _DEVICE_TABLES if k[2] == key[2]]  # oldest first
        for old in same_device[: max(0, len(same_device) - _TABLES_PER_DEVICE)]:
            del _DEVICE_TABLES[old]
    return table


@dataclasses.dataclass(frozen=True)
class SumOfGamma(NoiseDistribution):
    """Sum-of-Gamma noise SoG(k, τ, s) (paper, Lemma 1 and eq. 9).

    ``SoG(k, τ, s) = (τ/k) · [Σ_{i=1}^{s} Gamma(1/k, k/i) − log s]`` (shape ``1/k``, scale ``k/i``).
    The sum of ``k`` independent draws is Gumbel(0, τ) as ``s → ∞`` (Lemma 1); for finite ``s`` its
    mean exceeds ``τγ`` by between ``τ/(2(s+1))`` and ``τ/(2s)`` (appendix theorem). Perturbing each
    of the ``m`` weights with SoG(k, τ) makes every k-subset's total perturbation Gumbel (Theorem 1).

    Sampling: the sum has a fixed one-dimensional distribution for given ``(k, s)``. Its quantile
    function is tabulated once per ``(k, s)`` from the exact CDF (Moschopoulos' series of a sum of
    independent Gammas, both tails to full relative accuracy) on a grid of ``logit(u)`` covering
    ``u ∈ [8e-40, 1 − 8e-40]``, and each draw is one uniform, one ``logit`` and one linear
    interpolation — the cost of a Gumbel draw, on the CPU and on accelerators alike; τ only scales
    the draw. The first use of a ``(k, s)`` pair builds its table (a fraction of a second; a second or
    two for κ < 0.1, where the series is long), cached on the host and, for the few pairs used last,
    on each device. A table is used only where it is right: its own mean and variance are checked
    against the formulas when it is built. Where it cannot be (``s`` above about 80, or κ below about
    0.02 for ``s = 10``) the ``s`` Gamma variates are drawn instead, as with ``exact=True``.

    Parameters
    ----------
    k
        κ, the number of nonzeros of a state. ``None`` takes ``oracle.expected_nonzeros`` when the
        layer is built (`resolve`).
    tau
        Temperature τ > 0.
    s
        Number of Gamma terms (the paper uses 10).
    exact
        Draw the ``s`` Gamma variates of every entry (slower) instead of using the quantile table.

    References
    ----------
    Niepert, Minervini & Franceschi, "Implicit MLE", NeurIPS 2021, Lemma 1 and eq. 9,
    <https://arxiv.org/abs/2106.01798>.
    """

    k: float | None = None
    tau: float = 1.0
    s: int = 10
    exact: bool = False

    def __post_init__(self) -> None:
        if self.k is not None:
            positive("SumOfGamma k", self.k)
        positive("SumOfGamma tau", self.tau)
        positive_int("SumOfGamma s", self.s)

    def resolve(self, oracle: MapOracle) -> SumOfGamma:
        if self.k is not None:
            return self
        k = getattr(oracle, "expected_nonzeros", None)
        if k is None or not k > 0:
            raise ValueError(
                f"SumOfGamma(k=None) takes k from oracle.expected_nonzeros, but {type(oracle).__name__} "
                "does not know it. Pass SumOfGamma(k=...) (the number of nonzeros of a typical state) "
                "or use Gumbel()."
            )
        return dataclasses.replace(self, k=float(k))

    def sample(
        self,
        shape: Shape,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        if self.k is None:
            raise ValueError(
                "SumOfGamma(k=None) has no k yet: pass k=... or let a layer resolve it from its oracle"
            )
        dtype = dtype or torch.get_default_dtype()
        dev = torch.device(device) if device is not None else torch.device("cpu")
        k, s = float(self.k), int(self.s)
        # half precision cannot hold a grid position (up to 16,384) exactly: draw in float32, then cast
        work = _work_dtype(dtype)
        table = None if self.exact else _sog_table(k, s, dev, work)
        if table is None:  # exact=True, or a (k, s) whose table cannot be right
            return self._sample_exact(shape, dev, work, generator).to(dtype)
        values, slopes = table
        u = _rand(shape, dev, work, generator)  # U(0, 1)
        pos = torch.logit(u).add_(_T_MAX).mul_(_T_STEP)  # grid position of logit(u) ∈ [−T, T]
        pos = pos.clamp_(0.0, _T_LAST)  # u = 0 gives −inf: the table's first point
        index = pos.to(torch.int32).view(-1)  # i = ⌊pos⌋ (pos ≥ 0)
        low, slope = values.index_select(0, index), slopes.index_select(0, index)
        # (X − log s)/κ = v[i] + (pos − i)·(v[i+1] − v[i]): one interpolation in the quantile table
        draw = torch.addcmul(low, torch.frac(pos).view(-1), slope)
        if self.tau != 1.0:
            draw = draw.mul_(self.tau)  # SoG = (τ/κ)(X − log s)
        return draw.view(shape).to(dtype)

    def _sample_exact(
        self, shape: Shape, device: torch.device, dtype: torch.dtype, generator: torch.Generator | None
    ) -> torch.Tensor:
        k, s = float(self.k or 1.0), int(self.s)
        gammas = _standard_gamma(1.0 / k, (*shape, s), device, dtype, generator)  # Gamma(1/k, 1)  [..., s]
        scale = k / torch.arange(1, s + 1, device=device, dtype=dtype)  # k/i               [s]
        total = gammas @ scale  # Σ_i (k/i)·Gamma(1/k, 1) = Σ_i Gamma(1/k, k/i)        [...]
        return (self.tau / k) * (total - math.log(s))  # (τ/k)(Σ − log s)


@dataclasses.dataclass(frozen=True)
class Normal(NoiseDistribution):
    """Gaussian noise N(0, σ²), the perturbation of Berthet et al.'s perturbed optimizers.

    Parameters
    ----------
    sigma
        Standard deviation σ > 0.

    References
    ----------
    Berthet, Blondel, Teboul, Cuturi, Vert & Bach, "Learning with Differentiable Perturbed Optimizers",
    NeurIPS 2020, <https://arxiv.org/abs/2002.08676>.
    """

    sigma: float = 1.0

    def __post_init__(self) -> None:
        positive("Normal sigma", self.sigma)

    def sample(
        self,
        shape: Shape,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        dtype = dtype or torch.get_default_dtype()
        if generator is None:  # (not named: see `_rand`)
            return self.sigma * torch.randn(shape, device=device, dtype=dtype)
        return self.sigma * torch.randn(shape, device=device, dtype=dtype, generator=generator)


@dataclasses.dataclass(frozen=True)
class NoNoise(NoiseDistribution):
    """The Dirac delta at 0 (``ρ = δ₀``): plain MAP. I-MLE with it is the blackbox estimator (sec. 3.1).

    References
    ----------
    Vlastelica, Paulus, Musil, Martius & Rolínek, "Differentiation of Blackbox Combinatorial Solvers",
    ICLR 2020, <https://arxiv.org/abs/1912.02175>.

    Niepert, Minervini & Franceschi, "Implicit MLE", NeurIPS 2021, sec. 3.1,
    <https://arxiv.org/abs/2106.01798>.
    """

    def sample(
        self,
        shape: Shape,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        return torch.zeros(shape, device=device, dtype=dtype or torch.get_default_dtype())

    @property
    def is_zero(self) -> bool:
        return True
