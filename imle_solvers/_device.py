"""Small host → device uploads that never block the host (lookup tables, index offsets)."""

from __future__ import annotations

import torch


def upload(host: torch.Tensor, device: torch.device | str) -> torch.Tensor:
    """``host`` (a CPU tensor) on ``device``; a CUDA upload goes through pinned memory, asynchronously on
    the current stream (a copy from pageable memory would synchronise the host)."""
    if torch.device(device).type != "cuda":
        return host.to(device)
    return host.pin_memory().to(device, non_blocking=True)
