"""``imle-solvers bench coupling``: how a row's gradient depends on the losses of the other rows of its batch.

A target that sizes its step from the whole batch ([`AutoTarget`][imle_solvers.AutoTarget]'s unit,
AI-MLE's λ) couples the rows: when the other rows' losses are larger, one row's step shrinks. A user who
weights instances (importance weights, a curriculum) meets it. This suite fixes one row of a batch and
scales the losses of the others by α ∈ `ALPHAS`; for each target it reports that row's

* ``zero``: share of its single draws whose gradient is exactly zero (a draw that teaches nothing);
* ``norm``: norm of its mean gradient over the draws, relative to the mean at α = 1;
* ``cosine``: cosine of its mean gradient to the mean at α = 1.

A row that does not depend on its neighbours reads 0 / 1.00 / 1.00 at every α (up to the Monte-Carlo
noise of the means). The batch is 32 rows of θ ~ N(0, I) on the 5-subsets of 20 items with the default
noise, losses ``⟨c, z⟩`` (linear) and ``‖z − b‖²`` (quadratic), each averaged over the samples.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import torch

from ..adaptive import AdaptiveTarget
from ..imle import IMLE
from ..target import AutoTarget, PerturbedTarget, RelativeTarget, TargetDistribution
from ..topk import TopK

__all__ = ["ALPHAS", "TARGETS", "Response", "response", "row_draws", "run"]

ALPHAS: tuple[float, ...] = (0.01, 0.1, 1.0, 10.0, 100.0)
"""The scales of the other rows' losses."""

TARGETS: dict[str, Callable[[], TargetDistribution | None]] = {
    "IMLE default": lambda: None,
    "AutoTarget(floor=0)": lambda: AutoTarget(floor=0.0),
    "RelativeTarget(1)": lambda: RelativeTarget(1.0),
    "AdaptiveTarget()": lambda: AdaptiveTarget(),
    "PerturbedTarget(10)": lambda: PerturbedTarget(10.0),
}
"""Label → a fresh target (``None``: the layer's default)."""


@dataclasses.dataclass(frozen=True)
class Response:
    """The fixed row's figures at one α (see the module's docstring)."""

    alpha: float
    zero: float
    norm: float
    cosine: float


def row_draws(
    target: TargetDistribution | None,
    alpha: float,
    *,
    loss: str = "linear",
    samples: int = 1,
    rows: int = 32,
    draws: int = 400,
    seed: int = 0,
) -> torch.Tensor:
    """``[draws, m]``: the gradient of row 0 in ``draws`` independent backward passes of a batch whose
    other rows' losses are scaled by ``alpha`` (row 0's loss is not). Each pass is one layer call on the
    whole batch, as in training; the draws differ in their noise only."""
    oracle = TopK(5, 20)
    data = torch.Generator().manual_seed(seed)
    theta = torch.randn(rows, 20, generator=data, dtype=torch.float64)  # θ   [B, m]
    costs = torch.randn(rows, 20, generator=data, dtype=torch.float64)  # c   [B, m]
    goal = torch.rand(rows, 20, generator=data, dtype=torch.float64)  # b   [B, m]
    weight = torch.full((rows,), float(alpha), dtype=torch.float64)
    weight[0] = 1.0  # row 0 keeps its loss
    layer = IMLE(oracle, target=target, samples=samples, generator=torch.Generator().manual_seed(seed + 1))
    out = []
    for _ in range(draws):
        x = theta.clone().requires_grad_(True)
        z = layer(x).reshape(rows, samples, 20)  # z = MAP(θ + ε)   [B, S, m]
        if loss == "linear":
            per_row = (costs[:, None] * z).sum(-1).mean(-1)  # ⟨c, z⟩ averaged over S   [B]
        else:
            per_row = (z - goal[:, None]).square().sum(-1).mean(-1)  # ‖z − b‖²   [B]
        (weight * per_row).mean().backward()  # the batch's loss, .mean()
        assert x.grad is not None
        out.append(x.grad[0])
    return torch.stack(out)  # [draws, m]


def response(draws_at: dict[float, torch.Tensor]) -> list[Response]:
    """The figures of `Response` from row 0's draws at each α (α = 1 among them)."""
    reference = draws_at[1.0].mean(0)  # mean gradient at α = 1   [m]
    out = []
    for alpha, draws in draws_at.items():
        mean = draws.mean(0)
        zero = float(draws.eq(0).all(dim=-1).double().mean())
        norm = float(mean.norm() / reference.norm()) if reference.norm() > 0 else float("nan")
        denominator = float(mean.norm() * reference.norm())
        cosine = float(mean @ reference) / denominator if denominator > 0 else 0.0
        out.append(Response(alpha, zero, norm, cosine))
    return out


def run(
    quick: bool = False,
    *,
    targets: Sequence[str] | None = None,
    alphas: Sequence[float] = ALPHAS,
    losses: Sequence[str] = ("linear", "quadratic"),
    samples: Sequence[int] = (1, 10),
) -> list[dict[str, Any]]:
    """One row per target, loss, S and α: the fixed row's `Response` (``quick``: 40 draws)."""
    if 1.0 not in alphas:
        raise ValueError("alphas must include 1.0, the reference")
    draws = 40 if quick else 400
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small tensors: threads only add synchronisation
    rows: list[dict[str, Any]] = []
    try:
        for label in targets or TARGETS:
            for loss in losses:
                for s in samples:
                    got = {
                        a: row_draws(TARGETS[label](), a, loss=loss, samples=s, draws=draws) for a in alphas
                    }
                    for r in response(got):
                        rows.append(
                            {"suite": "coupling", "target": label, "loss": loss, "samples": s}
                            | dataclasses.asdict(r)
                        )
    finally:
        torch.set_num_threads(threads)
    return rows
