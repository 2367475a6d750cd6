"""Generated terrain maps: a stand-in for the Warcraft shortest-path data (Vlastelica et al., 2020).

The Warcraft data set cannot be downloaded here, so this module generates maps with the same
structure: a ``K × K`` grid of terrain types, each with a fixed cost, shown to the model only as an
RGB image in which every type has its own colour *and* texture, labelled with the cheapest
8-neighbour path from the top-left to the bottom-right cell (costs on the cells, both corners
counted, as in the paper's sec. 6 experiment).
"""

from __future__ import annotations

import numpy as np
import torch

from .dataset import PTODataset

__all__ = ["TERRAIN_COSTS", "render_terrain", "terrain_maps"]

#: Cost of each terrain type (the five Warcraft II costs used by Vlastelica et al.).
TERRAIN_COSTS = np.array([0.8, 1.2, 5.3, 7.7, 9.2])

#: Base colour (RGB in [0, 1]) of each terrain type: grass, earth, forest, water, mountain.
_COLOURS = np.array([
    [0.35, 0.65, 0.25],
    [0.65, 0.50, 0.30],
    [0.10, 0.40, 0.15],
    [0.20, 0.35, 0.75],
    [0.55, 0.55, 0.55],
])


def _textures(pixels: int) -> np.ndarray:
    """One ``P × P`` texture in [−1, 1] per type: flat, stripes, checks, waves, dots."""
    i, j = np.meshgrid(np.arange(pixels), np.arange(pixels), indexing="ij")
    return np.stack([
        np.zeros((pixels, pixels)),  # grass: noise only
        np.where((i // 2) % 2 == 0, 1.0, -1.0),  # earth: horizontal stripes
        np.where(((i // 2) + (j // 2)) % 2 == 0, 1.0, -1.0),  # forest: checks
        np.sin(2 * np.pi * (i + j) / pixels * 2),  # water: diagonal waves
        np.where((i % 4 == 1) & (j % 4 == 1), 1.0, -0.3),  # mountain: dots
    ])  # [T, P, P]


def render_terrain(types: np.ndarray, pixels: int = 8, noise: float = 0.08,
                   rnd: np.random.RandomState | None = None) -> np.ndarray:
    """RGB images ``(n, 3, K·P, K·P)`` of ``(n, K, K)`` terrain types (colour + texture + pixel noise)."""
    rnd = np.random.RandomState(0) if rnd is None else rnd
    n, k, _ = types.shape
    tex = _textures(pixels)  # [T, P, P]
    colour = _COLOURS[types]  # [n, K, K, 3]
    pattern = tex[types]  # [n, K, K, P, P]
    img = colour[..., None, None] * (1.0 + 0.25 * pattern[..., None, :, :])  # [n, K, K, 3, P, P]
    img = img.transpose(0, 3, 1, 4, 2, 5).reshape(n, 3, k * pixels, k * pixels)
    img = img + noise * rnd.standard_normal(img.shape)  # pixel noise
    return np.clip(img, 0.0, 1.0)


def _terrain_types(n: int, size: int, rnd: np.random.RandomState) -> np.ndarray:
    """``(n, K, K)`` terrain types forming blobs: argmax of smooth random fields, one per type."""
    t = len(TERRAIN_COSTS)
    coarse = max(2, size // 3)
    fields = rnd.standard_normal((n, t, coarse, coarse))
    # bilinear upsampling of the coarse fields to K × K
    grid = np.linspace(0, coarse - 1, size)
    lo = np.floor(grid).astype(int).clip(0, coarse - 2)
    frac = grid - lo
    f_col = frac[None, None, :, None]
    rows = fields[:, :, lo, :] * (1 - f_col) + fields[:, :, lo + 1, :] * f_col  # along rows   [n, T, K, c]
    smooth = rows[..., lo] * (1 - frac) + rows[..., lo + 1] * frac  # [n, T, K, K]
    bias = np.array([0.6, 0.3, 0.0, -0.2, -0.2])  # cheap terrain a bit more common
    smooth = smooth + bias[None, :, None, None] + 0.35 * rnd.standard_normal(smooth.shape)
    return smooth.argmax(axis=1)  # [n, K, K]


def terrain_maps(num_samples: int, size: int = 12, seed: int = 0, pixels: int = 8) -> PTODataset:
    """Terrain maps with optimal paths, the sec. 6 Warcraft task on generated data.

    Parameters
    ----------
    num_samples
        n, the number of maps.
    size
        K, cells per side (the paper's smallest Warcraft maps are 12 × 12).
    seed
        Seed of the generator.
    pixels
        P, pixels per cell side (images are ``K·P`` pixels wide).

    Returns
    -------
    PTODataset
        Features: float32 images ``(n, 3, K·P, K·P)``; costs: the ``(n, K·K)`` cell costs
        (`TERRAIN_COSTS` of each cell's type, row-major); solutions: cheapest 8-neighbour
        top-left → bottom-right paths as cell masks; ``oracle`` is
        [`GridShortestPath`][imle_solvers.GridShortestPath] ``(K, K)``. ``info["types"]`` holds the type maps.
    """
    if int(num_samples) != num_samples or num_samples < 0:
        raise ValueError(f"num_samples must be a non-negative integer, got {num_samples}")
    if int(size) != size or size < 2:
        raise ValueError(f"size must be an integer >= 2, got {size}")
    if int(pixels) != pixels or pixels < 2 or pixels % 2:
        raise ValueError(f"pixels must be an even integer >= 2, got {pixels}")
    from ..adapters.graphs import GridShortestPath

    rnd = np.random.RandomState(seed)
    types = _terrain_types(num_samples, size, rnd)  # [n, K, K]
    costs = TERRAIN_COSTS[types].reshape(num_samples, size * size)  # c   [n, K·K]
    images = render_terrain(types, pixels, rnd=rnd)  # [n, 3, K·P, K·P]
    oracle = GridShortestPath(size, size)
    info = {"problem": "terrain", "size": size, "pixels": pixels, "seed": seed,
            "terrain_costs": TERRAIN_COSTS.tolist(), "types": types}
    return PTODataset(torch.from_numpy(images).float(), torch.from_numpy(costs).float(), oracle, info=info)
