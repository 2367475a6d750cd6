"""Noise distributions ρ(ε) for perturb-and-MAP (paper, sec. 4 and eq. 9).

``z = MAP(θ + ε)`` with ``ε ~ ρ``. Every distribution samples on the requested device and dtype,
from an optional `torch.Generator`, in one vectorised call.
"""

from __future__ import annotations

import abc
import dataclasses
import math
from typing import TYPE_CHECKING

import numpy as np
import torch

if TYPE_CHECKING:
    from .oracle import MapOracle

__all__ = ["Gumbel", "NoNoise", "NoiseDistribution", "Normal", "SumOfGamma"]

Shape = tuple[int, ...]


class NoiseDistribution(abc.ABC):
    """A perturbation distribution ρ(ε) over ``R^m`` (paper, eq. 7: ``ε_i ~ ρ(ε)``)."""

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
    """

    tau: float = 1.0

    def __post_init__(self) -> None:
        if not self.tau > 0:
            raise ValueError(f"Gumbel tau must be > 0, got {self.tau}")

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


@dataclasses.dataclass(frozen=True)
class SumOfGamma(NoiseDistribution):
    """Sum-of-Gamma noise SoG(k, τ, s) (paper, Lemma 1 and eq. 9).

    ``SoG(k, τ, s) = (τ/k) · [Σ_{i=1}^{s} Gamma(1/k, k/i) − log s]`` (shape ``1/k``, scale ``k/i``).
    The sum of ``k`` independent draws is Gumbel(0, τ) as ``s → ∞`` (Lemma 1); for finite ``s`` its
    mean exceeds ``τγ`` by between ``τ/(2(s+1))`` and ``τ/(2s)`` (appendix theorem). Perturbing each
    of the ``m`` weights with SoG(k, τ) makes every k-subset's total perturbation Gumbel (Theorem 1).

    Parameters
    ----------
    k
        κ, the number of nonzeros of a state. ``None`` takes ``oracle.expected_nonzeros`` when the
        layer is built (`resolve`).
    tau
        Temperature τ > 0.
    s
        Number of Gamma terms (the paper uses 10).
    """

    k: float | None = None
    tau: float = 1.0
    s: int = 10

    def __post_init__(self) -> None:
        if self.k is not None and not self.k > 0:
            raise ValueError(f"SumOfGamma k must be > 0, got {self.k}")
        if not self.tau > 0:
            raise ValueError(f"SumOfGamma tau must be > 0, got {self.tau}")
        if int(self.s) != self.s or self.s < 1:
            raise ValueError(f"SumOfGamma s must be a positive integer, got {self.s}")

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
        k, s = float(self.k), int(self.s)
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
    """

    sigma: float = 1.0

    def __post_init__(self) -> None:
        if not self.sigma > 0:
            raise ValueError(f"Normal sigma must be > 0, got {self.sigma}")

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
    """The Dirac delta at 0 (``ρ = δ₀``): plain MAP. I-MLE with it is the blackbox estimator (sec. 3.1)."""

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
