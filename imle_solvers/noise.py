"""Noise distributions ρ(ε) for perturb-and-MAP (paper, sec. 4 and eq. 9).

``z = MAP(θ + ε)`` with ``ε ~ ρ``. Every distribution samples on the requested device and dtype,
from an optional `torch.Generator`, in one vectorised call.
"""

from __future__ import annotations

import abc
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


def _uniform_open(
    shape: Shape, device: torch.device | str | None, dtype: torch.dtype, generator: torch.Generator | None
) -> torch.Tensor:
    """U(0, 1) strictly inside the interval, so that ``log`` never sees 0 or 1."""
    u = torch.rand(shape, device=device, dtype=dtype, generator=generator)
    tiny = torch.finfo(dtype).tiny
    return u.clamp_(min=tiny, max=1.0 - torch.finfo(dtype).eps)


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
        seed = int(torch.randint(0, 2**62, (1,), generator=generator).item())
        np_dtype = np.float32 if dtype in (torch.float32, torch.float16, torch.bfloat16) else np.float64
        draws = np.random.default_rng(seed).standard_gamma(alpha, size=shape, dtype=np_dtype)
        return torch.from_numpy(draws).to(dtype)
    concentration = torch.full(shape, alpha, device=dev, dtype=dtype)
    return torch._standard_gamma(concentration, generator=generator)


@dataclasses.dataclass(frozen=True)
class Gumbel(NoiseDistribution):
    """Gumbel(0, τ) noise: the perturbation that makes perturb-and-MAP exact for categoricals (Prop. 1).

    ``ε = −τ · log(−log U)``, ``U ~ U(0, 1)``.

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
        u = _uniform_open(shape, device, dtype, generator)
        return -self.tau * torch.log(-torch.log(u))  # ε = −τ log(−log U)


_T_MAX = 90.0  # the table covers logit(u) ∈ [−90, 90], i.e. u ∈ [8e-40, 1 − 8e-40]
_T_POINTS = 16385  # grid step 0.011 in logit(u)
_TABLE_MAX_TERMS = 2500  # series length beyond which the exact sampler is used instead (s ≳ 80)


def _sog_series(kappa: float, s: int, tol: float = 1e-13) -> tuple[float, float, np.ndarray] | None:
    """Moschopoulos' series of ``X = Σ_{i=1}^{s} Gamma(1/κ, scale κ/i)``: ``(ρ, b, w)`` or ``None``.

    ``P(X ≤ x) = Σ_k w_k P(ρ + k, x/b)`` and ``P(X > x) = Σ_k w_k Q(ρ + k, x/b)`` with ``ρ = s/κ``,
    ``b = κ/s`` (the smallest scale) and positive weights summing to 1 (Moschopoulos 1985, "The
    distribution of the sum of independent gamma random variables"). All terms are positive, so both
    tails have full relative accuracy. ``None`` when more than ``_TABLE_MAX_TERMS`` terms are needed.
    """
    alpha = 1.0 / kappa
    scales = kappa / np.arange(1, s + 1)
    b = float(scales.min())
    r = 1.0 - b / scales  # ∈ [0, 1)
    r_max = float(r.max())
    terms = 1 if r_max == 0 else math.ceil(math.log(tol) / math.log(r_max)) + 2
    if terms > _TABLE_MAX_TERMS:
        return None
    k = np.arange(1, terms + 1)
    gam = (alpha * r[None, :] ** k[:, None]).sum(axis=1) / k  # γ_k = Σ_i α(1 − b/β_i)^k / k
    delta = np.zeros(terms + 1)
    delta[0] = 1.0
    for j in range(terms):  # δ_{j+1} = (1/(j+1)) Σ_{i=1}^{j+1} i γ_i δ_{j+1−i}
        i = np.arange(1, j + 2)
        delta[j + 1] = float(np.dot(i * gam[i - 1], delta[j + 1 - i])) / (j + 1)
    weights = math.exp(alpha * float(np.sum(np.log(b / scales)))) * delta
    return s * alpha, b, weights


def _sog_logit_cdf(x: np.ndarray, rho: float, b: float, weights: np.ndarray) -> np.ndarray:
    """``logit P(X ≤ x)``, each tail from its own series (no cancellation)."""
    from scipy import special

    shapes = rho + np.arange(len(weights))
    y = x[:, None] / b
    left = special.gammainc(shapes, y) @ weights  # P(X ≤ x)
    right = special.gammaincc(shapes, y) @ weights  # P(X > x)
    with np.errstate(divide="ignore"):
        return np.log(left) - np.log(right)


@functools.lru_cache(maxsize=64)
def _sog_quantile_table(kappa: float, s: int) -> np.ndarray | None:
    """Quantiles of ``X`` at ``logit(u)`` on a uniform grid of ``_T_POINTS`` points in ``[−90, 90]``."""
    from scipy import interpolate, special

    series = _sog_series(kappa, s)
    if series is None:
        return None
    rho, b, weights = series
    # x range: P(X ≤ lo) ≈ w_0 (lo/b)^ρ / Γ(ρ+1) = e^{−95}; hi doubles until P(X > hi) < e^{−95}
    lo = b * math.exp((-_T_MAX - 5.0 - math.log(weights[0]) + float(special.gammaln(rho + 1))) / rho)
    hi = b * 10.0
    while _sog_logit_cdf(np.array([hi]), rho, b, weights)[0] < _T_MAX + 5.0:
        hi *= 2.0
    x = np.geomspace(max(lo, 1e-300), hi, 3000)
    t = _sog_logit_cdf(x, rho, b, weights)  # logit F(x), increasing   [3000]
    keep = np.isfinite(t)
    x, t = x[keep], t[keep]
    keep = np.concatenate([[True], np.diff(t) > 0])
    inverse = interpolate.PchipInterpolator(t[keep], np.log(x[keep]))  # log x as a function of logit F
    return np.exp(inverse(np.linspace(-_T_MAX, _T_MAX, _T_POINTS)))  # x(t)   [_T_POINTS]


_T_STEP = (_T_POINTS - 1) / (2 * _T_MAX)  # grid points per unit of logit(u)
_T_LAST = _T_POINTS - 1.5  # the last interpolation cell starts at index _T_POINTS − 2

_DEVICE_TABLES: dict[tuple[float, int, float, str, torch.dtype], tuple[torch.Tensor, torch.Tensor]] = {}
_DEVICE_TABLES_LOCK = threading.Lock()


def _sog_table(
    kappa: float, s: int, tau: float, device: torch.device, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """``(v, Δv)`` on ``device``: the SoG draw ``(τ/κ)(x(t) − log s)`` at each grid point of
    ``logit(u)`` and its increment to the next point (``Δv[-1] = 0``)."""
    key = (kappa, s, tau, str(device), dtype)
    table = _DEVICE_TABLES.get(key)
    if table is None:
        quantiles = _sog_quantile_table(kappa, s)
        if quantiles is None:
            return None
        values = (tau / kappa) * (quantiles - math.log(s))  # SoG = (τ/κ)(X − log s)
        slopes = np.append(np.diff(values), 0.0)
        table = (
            upload(torch.from_numpy(values).to(dtype), device),
            upload(torch.from_numpy(slopes).to(dtype), device),
        )
        with _DEVICE_TABLES_LOCK:
            _DEVICE_TABLES[key] = table
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
    interpolation — the cost of a Gumbel draw, on the CPU and on accelerators alike. The first use of
    a ``(k, s)`` pair builds its table (a fraction of a second, cached). ``exact=True`` draws the
    ``s`` Gamma variates instead; so does ``s`` above about 80, where the series gets long.

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
        work = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
        table = None if self.exact else _sog_table(k, s, float(self.tau), dev, work)
        if table is None:
            return self._sample_exact(shape, dev, dtype, generator)
        values, slopes = table
        u = torch.rand(shape, device=dev, dtype=work, generator=generator)  # U(0, 1)
        pos = torch.logit(u).add_(_T_MAX).mul_(_T_STEP)  # grid position of logit(u) ∈ [−T, T]
        pos = pos.clamp_(0.0, _T_LAST)  # u = 0 gives −inf: the table's first point
        index = pos.to(torch.int32).view(-1)  # i = ⌊pos⌋ (pos ≥ 0)
        low, slope = values.index_select(0, index), slopes.index_select(0, index)
        # SoG = v[i] + (pos − i)·(v[i+1] − v[i]): one interpolation in the quantile table
        return torch.addcmul(low, torch.frac(pos).view(-1), slope).view(shape).to(dtype)

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
