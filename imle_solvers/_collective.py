"""Statistics of a batch that several training processes hold in shares, combined exactly.

Under data parallelism (``torchrun``, DistributedDataParallel) every process holds a share of the global
batch. A target whose step depends on the batch ([`AutoTarget`][imle_solvers.AutoTarget],
[`AdaptiveTarget`][imle_solvers.AdaptiveTarget]) combines its statistics over the processes so that every
process uses what one process would on the global batch, to the last bit whatever the shares' sizes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import torch

__all__ = ["FIXED_POINT_BITS", "Sync", "batch_norms", "finite_part", "sync_group"]


def finite_part(x: torch.Tensor) -> torch.Tensor:
    """``x`` with its non-finite entries set to 0 (forbidden ``-inf`` pairs are no part of θ's size)."""
    return torch.where(torch.isfinite(x), x, torch.zeros_like(x))


@dataclasses.dataclass(frozen=True)
class Sync:
    """Combine statistics over the processes of ``group`` (``None``: the default group)."""

    group: Any = None


def sync_group(sync: bool, group: Any) -> Sync | None:
    """How to combine statistics over the processes, or ``None`` (one process, or ``sync=False``)."""
    if not sync:
        return None
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size(group) <= 1:
        return None
    return Sync(group)


FIXED_POINT_BITS = 30
"""Fractional bits of the fixed-point sums behind `batch_norms` (up to 2³² entries a batch)."""


def batch_norms(tensors: Sequence[torch.Tensor], sync: Sync | None = None) -> torch.Tensor:
    """The Frobenius norms of ``tensors`` (rows along the first dimension), ``[k]`` float64, the same bits
    however the rows are cut between processes.

    Each tensor is scaled by its largest entry ``p`` (over every process: no under- or overflow at
    1e±30); each row's sum of squares ``q_r`` is computed on its own, rounded to a multiple of
    ``2^-FIXED_POINT_BITS`` and summed as an integer, which is exact in any order. So one process and
    several processes holding shares of any sizes of the same rows (a global batch of 33 on two
    processes: 17 and 16) get the same norms ``p·√(Σ_r q_r)``, to the last bit; the rounding is
    within ``2^-31`` of the largest entry's square per row. With ``sync``: one all-reduce of the
    largest entries (max) and one of the integer sums, asynchronous to the host on CUDA.
    """
    device = tensors[0].device
    peaks = torch.stack(
        [t.abs().amax().to(torch.float64) if t.numel() else torch.zeros((), device=device) for t in tensors]
    )  # max|x| of each tensor   [k]
    if sync is not None:
        import torch.distributed as dist

        dist.all_reduce(peaks, op=dist.ReduceOp.MAX, group=sync.group)
    safe = torch.where(peaks > 0, peaks, torch.ones_like(peaks))
    unit = float(2**FIXED_POINT_BITS)
    sums = []
    for t, p in zip(tensors, safe):
        x = t.to(torch.float64).reshape(1, -1) if t.dim() < 2 else t.to(torch.float64).flatten(1)  # [n, ·]
        rows = (x / p).square().sum(dim=1)  # q_r ≤ entries per row   [n]
        sums.append(torch.round(rows * unit).to(torch.int64).sum())  # Σ_r q_r in fixed point: exact
    total = torch.stack(sums) if sums else torch.zeros(0, dtype=torch.int64, device=device)  # [k]
    if sync is not None:
        import torch.distributed as dist

        dist.all_reduce(total, group=sync.group)  # integers: the same sum in any order
    return (total.to(torch.float64) / unit).sqrt() * peaks  # ‖x‖ = p·√(Σ_r q_r)   [k]
