"""Small Warcraft data sets written in exactly the published format (``{split}_{kind}.npy``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

COUNTS = {"train": 28, "val": 7, "test": 14}
"""Maps per split of `write_warcraft`'s default data set."""


def warcraft_arrays(n: int, size: int, seed: int) -> dict[str, np.ndarray]:
    """``maps`` uint8 ``[n, 8K, 8K, 3]``, ``shortest_paths`` uint8 and ``vertex_weights`` float32
    ``[n, K, K]`` of generated terrain (the published layout; the paths are optimal 8-neighbour paths)."""
    import torch

    from imle_solvers.data import terrain_maps

    data = terrain_maps(n, size, seed, image_dtype=torch.uint8)
    maps = data.features.permute(0, 2, 3, 1).numpy()  # [n, 8K, 8K, 3]
    return {
        "maps": np.ascontiguousarray(maps),
        "shortest_paths": data.solutions.numpy().reshape(n, size, size).astype(np.uint8),
        "vertex_weights": data.costs.numpy().reshape(n, size, size).astype(np.float32),
    }


def write_warcraft(root: Path, size: int = 4, *, nested: bool = True, seed: int = 0) -> Path:
    """Write the three splits of a ``size × size`` data set to ``root/KxK`` (or ``root``); → that folder."""
    folder = root / f"{size}x{size}" if nested else root
    folder.mkdir(parents=True, exist_ok=True)
    for i, (split, n) in enumerate(COUNTS.items()):
        for kind, array in warcraft_arrays(n, size, seed + i).items():
            np.save(folder / f"{split}_{kind}.npy", array)
    return folder
