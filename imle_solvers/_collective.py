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

__all__ = ["LIMB_BITS", "Sync", "batch_norms", "finite_part", "sync_group"]


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


LIMB_BITS = 31
"""The fixed-point sums of `batch_norms` are kept in two int64 limbs of this many low bits each."""


def batch_norms(tensors: Sequence[torch.Tensor], sync: Sync | None = None) -> torch.Tensor:
    """The Frobenius norms of ``tensors`` (rows along the first dimension), ``[k]`` float64, the same bits
    however the rows are cut between processes.

    Each tensor is scaled by its largest entry ``p`` (over every process: no under- or overflow at
    1e±30); each row's sum of squares ``q_r ≤ e`` (its ``e`` entries) is computed on its own, rounded to
    a multiple of ``2^-F`` with ``F = 62 − bit_length(e)`` and summed as an integer in two int64 limbs,
    which is exact in any order. So one process and several processes holding shares of any sizes of the
    same rows (a global batch of 33 on two processes: 17 and 16) get the same norms ``p·√(Σ_r q_r)`` to the
    last bit, and the rounding (``2^-F`` of the largest entry's square per row, below 10⁻¹³ up to 2¹⁰
    entries a row) keeps the norms within float64's precision of the exact ones for up to 2³¹ rows. With
    ``sync``: one all-reduce of the largest entries (max) and one of the integer sums, asynchronous to the
    host on CUDA.
    """
    device = tensors[0].device
    peaks = torch.stack(
        [t.abs().amax().to(torch.float64) if t.numel() else torch.zeros((), device=device) for t in tensors]
    )  # max|x| of each tensor   [k]
    if sync is not None:
        import torch.distributed as dist

        dist.all_reduce(peaks, op=dist.ReduceOp.MAX, group=sync.group)
    safe = torch.where(peaks > 0, peaks, torch.ones_like(peaks))
    limbs, units = [], []
    for t, p in zip(tensors, safe):
        x = t.to(torch.float64).reshape(1, -1) if t.dim() < 2 else t.to(torch.float64).flatten(1)  # [n, e]
        unit = float(2 ** (62 - max(x.shape[1], 1).bit_length()))  # 2^F: e·2^F < 2^62
        fixed = torch.round((x / p).square().sum(dim=1) * unit).to(torch.int64)  # q_r in fixed point   [n]
        high, low = fixed >> LIMB_BITS, fixed & (2**LIMB_BITS - 1)  # two limbs, each < 2^31
        limbs.append(torch.stack([high.sum(), low.sum()]))  # exact for up to 2^32 rows
        units.append(unit)
    total = torch.stack(limbs) if limbs else torch.zeros(0, 2, dtype=torch.int64, device=device)  # [k, 2]
    if sync is not None:
        import torch.distributed as dist

        dist.all_reduce(total, group=sync.group)  # integers: the same sum in any order
    high, low = total[:, 0].to(torch.float64), total[:, 1].to(torch.float64)
    summed = high * float(2**LIMB_BITS) + low  # Σ_r q_r·2^F   [k]
    if not units:
        return summed
    norms = [(summed[i] / unit).sqrt() for i, unit in enumerate(units)]  # √(Σ_r q_r), no host copy
    return torch.stack(norms) * peaks  # ‖x‖ = p·√(Σ_r q_r)   [k]
