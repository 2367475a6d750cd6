"""``imle-solvers bench layer``: noise sampling cost, and what the I-MLE layer adds to its oracle calls.

Two tables, each measured in one run:

* noise: seconds per ``sample`` of Gumbel, SumOfGamma (quantile table) and SumOfGamma with
  ``exact=True`` (10 Gamma draws per entry) for shapes from ``(32, 10, 40)`` to ``(256, 10, 1000)``,
  and the ratio SoG / Gumbel, on the CPU and, when one is present, on CUDA;
* layer: an I-MLE training step (forward + backward, exactly two batched MAP calls of ``B·S`` rows)
  against the two raw oracle calls on the same inputs (1.0 = no overhead), for the device-native
  ``TopK`` and a NumPy oracle through ``solve_batch``, with each noise.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..imle import IMLE
from ..noise import Gumbel, NoiseDistribution, SumOfGamma
from ..oracle import MapOracle
from ..target import RelativeTarget
from ..topk import TopK
from ._timing import time_per_call

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


def _noise_rows(device: str, quick: bool) -> list[dict[str, Any]]:
    """Sample time of each noise, and SoG's ratio to Gumbel, per shape."""
    rows = []
    shapes = [(32, 10, 40), (256, 10, 1000)] if quick else [(32, 10, 40), (256, 10, 100), (256, 10, 1000)]
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    for shape in shapes:
        gen = torch.Generator(device).manual_seed(0)
        times: dict[str, float] = {}
        for label, noise in (
            ("Gumbel", Gumbel()),
            ("SoG table", SumOfGamma(k=5)),
            ("SoG exact", SumOfGamma(k=5, exact=True)),
        ):

            def draw(
                noise: NoiseDistribution = noise,
                shape: tuple[int, int, int] = shape,
                gen: torch.Generator = gen,
            ) -> None:
                noise.sample(shape, device=device, generator=gen)
                sync()

            times[label] = time_per_call(draw, repeat=3 if quick else 7)
        n = shape[0] * shape[1] * shape[2]
        rows.append(
            {
                "suite": "noise",
                "device": device,
                "shape": "x".join(map(str, shape)),
                "gumbel_ns_per_entry": times["Gumbel"] / n * 1e9,
                "sog_ns_per_entry": times["SoG table"] / n * 1e9,
                "sog_exact_ns_per_entry": times["SoG exact"] / n * 1e9,
                "sog/gumbel": times["SoG table"] / times["Gumbel"],
                "sog_exact/gumbel": times["SoG exact"] / times["Gumbel"],
            }
        )
    return rows


def _row(
    name: str, oracle: MapOracle, noise: NoiseDistribution, batch: int, samples: int, quick: bool
) -> dict[str, Any]:
    gen = torch.Generator().manual_seed(0)
    m = oracle.n_vars
    theta = torch.randn(batch, m, generator=gen)
    upstream = torch.randn(batch, samples, m, generator=gen)
    # one-sided: the step makes exactly two oracle calls (the default target's backward solves 2·B·S rows)
    layer = IMLE(oracle, noise, RelativeTarget(two_sided=False), samples=samples, generator=gen)

    def step() -> None:
        w = theta.clone().requires_grad_(True)
        (layer(w) * upstream).sum().backward()

    flat = (theta.unsqueeze(1) + torch.randn(batch, samples, m, generator=gen)).reshape(-1, m)
    if hasattr(oracle, "solve_torch"):

        def raw() -> None:
            oracle.solve_torch(flat)
            oracle.solve_torch(flat)
    else:
        host = flat.numpy().astype(np.float64)

        def raw() -> None:
            oracle.solve_batch(host)
            oracle.solve_batch(host)

    repeat = 3 if quick else 7
    step_s, raw_s = time_per_call(step, repeat=repeat), time_per_call(raw, repeat=repeat)
    label = type(noise).__name__ + (" exact" if getattr(noise, "exact", False) else "")
    return {
        "suite": "layer",
        "oracle": name,
        "noise": label,
        "rows/call": batch * samples,
        "layer_step_ms": step_s * 1e3,
        "two_raw_calls_ms": raw_s * 1e3,
        "ratio": step_s / raw_s,
    }


def run(quick: bool = False) -> list[dict[str, Any]]:
    """Noise sample times (CPU, and CUDA when present), then the layer step against its raw calls."""
    torch.set_num_threads(1)
    rows = _noise_rows("cpu", quick)
    if torch.cuda.is_available():
        rows += _noise_rows("cuda", quick)
    for batch, samples, m in [(32, 10, 40), (256, 10, 100)]:
        for noise in (SumOfGamma(), SumOfGamma(exact=True), Gumbel()):
            rows.append(_row(f"TopK(k=8, m={m}) torch", TopK(8, m), noise, batch, samples, quick))
            rows.append(_row(f"TopK(k=8, m={m}) numpy", NumpyTopK(8, m), noise, batch, samples, quick))
    return rows
