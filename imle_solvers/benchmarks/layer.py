"""``imle-solvers bench layer``: what the I-MLE layer adds on top of the raw oracle calls it makes.

An I-MLE training step (forward + backward) makes exactly two batched MAP calls of ``B·S`` rows. The
suite times the step and the two raw oracle calls on the same inputs, in one run, and reports the
ratio (1.0 = no overhead). Rows: the device-native ``TopK`` and a NumPy oracle through ``solve_batch``,
with SumOfGamma noise (10 Gamma draws per entry: for microsecond oracles the noise, not the layer,
dominates) and with Gumbel noise.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..imle import IMLE
from ..noise import Gumbel, NoiseDistribution, SumOfGamma
from ..oracle import MapOracle
from ..target import PerturbedTarget
from ..topk import TopK
from . import time_per_call

__all__ = ["NumpyTopK", "run"]


class NumpyTopK(MapOracle):
    """Top-k on the host with NumPy: a stand-in for a fast solver-backed oracle (≈ µs per row)."""

    def __init__(self, k: int, n_vars: int) -> None:
        self.k, self.n_vars, self.expected_nonzeros = k, n_vars, float(k)

    def solve(self, weights: np.ndarray) -> np.ndarray:
        return self.solve_batch(weights[None])[0]

    def solve_batch(self, weights: np.ndarray) -> np.ndarray:
        weights = self.validate(weights)
        idx = np.argpartition(-weights, self.k - 1, axis=1)[:, : self.k]  # the k best   [B, k]
        out = np.zeros_like(weights)
        np.put_along_axis(out, idx, 1.0, axis=1)
        return out


def _row(
    name: str, oracle: MapOracle, noise: NoiseDistribution, batch: int, samples: int, quick: bool
) -> dict[str, Any]:
    gen = torch.Generator().manual_seed(0)
    m = oracle.n_vars
    theta = torch.randn(batch, m, generator=gen)
    upstream = torch.randn(batch, samples, m, generator=gen)
    layer = IMLE(oracle, noise, PerturbedTarget(10.0), samples=samples, generator=gen)

    def step() -> None:
        w = theta.clone().requires_grad_(True)
        (layer(w) * upstream).sum().backward()

    flat = (theta.unsqueeze(1) + torch.randn(batch, samples, m, generator=gen)).reshape(-1, m)
    if hasattr(oracle, "solve_torch"):
        def raw() -> None:
            oracle.solve_torch(flat)  # type: ignore[attr-defined]
            oracle.solve_torch(flat)  # type: ignore[attr-defined]
    else:
        host = flat.numpy().astype(np.float64)

        def raw() -> None:
            oracle.solve_batch(host)
            oracle.solve_batch(host)

    repeat = 3 if quick else 7
    step_s, raw_s = time_per_call(step, repeat=repeat), time_per_call(raw, repeat=repeat)
    return {
        "oracle": name,
        "noise": type(noise).__name__,
        "rows/call": batch * samples,
        "layer_step_ms": step_s * 1e3,
        "two_raw_calls_ms": raw_s * 1e3,
        "ratio": step_s / raw_s,
    }


def run(quick: bool = False) -> list[dict[str, Any]]:
    """Time the layer step against its raw oracle calls for a few batch sizes."""
    torch.set_num_threads(1)
    rows = []
    for batch, samples, m in [(32, 10, 40), (256, 10, 100)]:
        for noise in (SumOfGamma(), Gumbel()):
            rows.append(_row(f"TopK(k=8, m={m}) torch", TopK(8, m), noise, batch, samples, quick))
            rows.append(_row(f"TopK(k=8, m={m}) numpy", NumpyTopK(8, m), noise, batch, samples, quick))
    return rows
