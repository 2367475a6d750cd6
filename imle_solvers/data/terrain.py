"""Generated terrain maps: a stand-in for the Warcraft shortest-path data (Vlastelica et al., 2020).

The Warcraft data set cannot be downloaded here, so this module generates maps with the same
structure: a ``K × K`` grid of terrain types, each with a fixed cost, shown to the model only as an
RGB image in which every type has its own colour *and* texture, labelled with the cheapest
8-neighbour path from the top-left to the bottom-right cell (costs on the cells, both corners
counted, as in the paper's sec. 6 experiment).
"""

from __future__ import annotations

import os
import shutil
import warnings
from pathlib import Path

import numpy as np
import torch

from .._checks import integer_at_least, non_negative_int, one_of
from .cache import cache_dir
from .dataset import PTODataset

__all__ = ["TERRAIN_COSTS", "render_terrain", "terrain_maps"]

TERRAIN_COSTS = np.array([0.8, 1.2, 5.3, 7.7, 9.2])
"""Cost of each terrain type (the five Warcraft II costs used by Vlastelica et al.)."""

_COLOURS = np.array(
    [
        [0.35, 0.65, 0.25],
        [0.65, 0.50, 0.30],
        [0.10, 0.40, 0.15],
        [0.20, 0.35, 0.75],
        [0.55, 0.55, 0.55],
    ]
)
"""Base colour (RGB in [0, 1]) of each terrain type: grass, earth, forest, water, mountain."""


def _textures(pixels: int) -> np.ndarray:
    """One ``P × P`` texture in [−1, 1] per type: flat, stripes, checks, waves, dots."""
    i, j = np.meshgrid(np.arange(pixels), np.arange(pixels), indexing="ij")
    return np.stack(
        [
            np.zeros((pixels, pixels)),  # grass: noise only
            np.where((i // 2) % 2 == 0, 1.0, -1.0),  # earth: horizontal stripes
            np.where(((i // 2) + (j // 2)) % 2 == 0, 1.0, -1.0),  # forest: checks
            np.sin(2 * np.pi * (i + j) / pixels * 2),  # water: diagonal waves
            np.where((i % 4 == 1) & (j % 4 == 1), 1.0, -0.3),  # mountain: dots
        ]
    )  # [T, P, P]


def render_terrain(
    types: np.ndarray, pixels: int = 8, noise: float = 0.08, generator: torch.Generator | None = None
) -> torch.Tensor:
    """RGB images ``(n, 3, K·P, K·P)``, float32 in [0, 1], of ``(n, K, K)`` terrain types (colour +
    texture + Gaussian pixel noise of standard deviation ``noise`` drawn from ``generator``)."""
    n, k, _ = types.shape
    t = torch.as_tensor(np.asarray(types), dtype=torch.long)  # [n, K, K]
    tex = torch.from_numpy(_textures(pixels)).float()  # [T, P, P]
    colour = torch.from_numpy(_COLOURS).float()  # [T, 3]
    tiles = colour[:, :, None, None] * (1.0 + 0.25 * tex[:, None])  # one tile per type   [T, 3, P, P]
    img = tiles[t].permute(0, 3, 1, 4, 2, 5).reshape(n, 3, k * pixels, k * pixels)  # [n, 3, K·P, K·P]
    img += noise * torch.randn(img.shape, generator=generator)  # pixel noise
    return img.clamp_(0.0, 1.0)


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


def _render_all(types: np.ndarray, pixels: int, seed: int, as_bytes: bool) -> torch.Tensor:
    """`render_terrain` in chunks of ~16 M pixel values (one torch generator seeded with ``seed``),
    stored as float32 or as ``uint8`` (``round(255 · value)``)."""
    n, k, _ = types.shape
    out = torch.empty((n, 3, k * pixels, k * pixels), dtype=torch.uint8 if as_bytes else torch.float32)
    gen = torch.Generator().manual_seed(seed)
    step = max(1, 2**24 // (3 * (k * pixels) ** 2))  # maps per chunk (depends on K and P only)
    for i in range(0, n, step):
        img = render_terrain(types[i : i + step], pixels, generator=gen)  # [chunk, 3, K·P, K·P] in [0, 1]
        out[i : i + step] = img.mul_(255.0).round_() if as_bytes else img
    return out


def terrain_maps(
    num_samples: int,
    size: int = 12,
    seed: int = 0,
    pixels: int = 8,
    *,
    image_dtype: torch.dtype = torch.float32,
    cache: bool = False,
) -> PTODataset:
    """Terrain maps with optimal paths, the sec. 6 Warcraft task on generated data.

    Parameters
    ----------
    num_samples
        n, the number of maps.
    size
        K, cells per side (the paper's Warcraft maps have K ∈ {12, 18, 24, 30}).
    seed
        Seed of the generator.
    pixels
        P, pixels per cell side (images are ``K·P`` pixels wide).
    image_dtype
        ``torch.float32`` (values in [0, 1]) or ``torch.uint8`` (``round(255 · value)``: 4× less memory,
        like the Warcraft PNGs; the training models divide by 255).
    cache
        Keep the maps in the user cache folder (`cache_dir`, ``$IMLE_SOLVERS_CACHE`` or
        ``~/.cache/imle_solvers``) and load them from there next time (10,000 maps of 30 × 30 take
        1.7 GB there). Needs ``image_dtype=torch.uint8``.

    Returns
    -------
    PTODataset
        Features: images ``(n, 3, K·P, K·P)``; costs: the ``(n, K·K)`` cell costs
        (`TERRAIN_COSTS` of each cell's type, row-major); solutions: cheapest 8-neighbour
        top-left → bottom-right paths as cell masks; ``oracle`` is
        [`GridShortestPath`][imle_solvers.GridShortestPath] ``(K, K)``. ``info["types"]`` holds the type maps.

    References
    ----------
    Vlastelica, Paulus, Musil, Martius & Rolínek, "Differentiation of Blackbox Combinatorial Solvers",
    ICLR 2020, <https://arxiv.org/abs/1912.02175>.
    """
    non_negative_int("num_samples", num_samples)
    integer_at_least("size", size, 2)
    if int(pixels) != pixels or pixels < 2 or pixels % 2:  # no helper says "even"
        raise ValueError(f"pixels must be an even integer >= 2, got {pixels}")
    one_of("image_dtype", image_dtype, (torch.float32, torch.uint8))
    if cache and image_dtype != torch.uint8:
        raise ValueError("cache=True stores uint8 images: pass image_dtype=torch.uint8")
    from ..adapters.graphs import GridShortestPath

    oracle = GridShortestPath(size, size)
    info = {
        "problem": "terrain",
        "size": size,
        "pixels": pixels,
        "seed": seed,
        "terrain_costs": TERRAIN_COSTS.tolist(),
    }
    folder = cache_dir() / "terrain" / f"{_CACHE_VERSION}-K{size}-P{pixels}-n{num_samples}-seed{seed}"
    stored = _load(folder, num_samples, size, pixels) if cache else None
    if stored is not None:
        types, stored_images, solutions = stored
        costs = TERRAIN_COSTS[types].reshape(num_samples, size * size)  # c   [n, K·K]
        return PTODataset(
            torch.from_numpy(stored_images),
            torch.from_numpy(costs).float(),
            oracle,
            solutions=torch.from_numpy(solutions).float(),
            info={**info, "types": types},
        )
    types = _terrain_types(num_samples, size, np.random.RandomState(seed))  # [n, K, K]
    costs = TERRAIN_COSTS[types].reshape(num_samples, size * size)  # c   [n, K·K]
    images = _render_all(types, pixels, seed, as_bytes=image_dtype == torch.uint8)  # [n, 3, K·P, K·P]
    data = PTODataset(images, torch.from_numpy(costs).float(), oracle, info={**info, "types": types})
    if cache:
        _store(folder, types.astype(np.uint8), images.numpy(), data.solutions.numpy().astype(np.uint8))
    return data


_CACHE_VERSION = "v2"
"""Bump when the generator changes: cached maps of another version are never read."""
_CACHE_FILES = ("types", "images", "solutions")


def _load(folder: Path, n: int, size: int, pixels: int) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The cached ``(types, images, solutions)``, or ``None`` when there is no cache entry.

    An entry that cannot be read (a zero-length or truncated file, not a NumPy file) or whose arrays have
    the wrong shape, dtype or values for ``(n, K, P)`` is removed with a warning, to be generated again:
    it is never used.
    """
    if not folder.exists():
        return None
    expected = {
        "types": ((n, size, size), np.uint8),
        "images": ((n, 3, size * pixels, size * pixels), np.uint8),
        "solutions": ((n, size * size), np.uint8),
    }
    try:
        arrays = []
        for name in _CACHE_FILES:
            array = np.load(folder / f"{name}.npy", allow_pickle=False)
            shape, dtype = expected[name]
            if array.shape != shape or array.dtype != dtype:
                raise ValueError(
                    f"{name}.npy holds {array.dtype} {array.shape}, expected {np.dtype(dtype)} {shape}"
                )
            arrays.append(array)
        types, images, solutions = arrays
        if types.max(initial=0) >= len(TERRAIN_COSTS) or solutions.max(initial=0) > 1:
            raise ValueError("terrain types or path cells out of range")
    except (OSError, EOFError, ValueError) as exc:
        warnings.warn(
            f"cached terrain maps in {folder} are unusable ({exc}): generating them again",
            RuntimeWarning,
            stacklevel=3,
        )
        shutil.rmtree(folder, ignore_errors=True)
        return None
    return types.astype(np.int64), images, solutions


def _store(folder: Path, *arrays: np.ndarray) -> None:
    """Write the arrays into a temporary folder beside ``folder``, then rename it into place, so that a
    reader sees all of them or none. A failure to write leaves no trace and is not an error."""
    tmp = folder.with_name(f"{folder.name}.tmp-{os.getpid()}")
    try:
        tmp.mkdir(parents=True, exist_ok=True)
        for name, array in zip(_CACHE_FILES, arrays):
            np.save(tmp / f"{name}.npy", array)
        os.replace(tmp, folder)
    except OSError as exc:
        warnings.warn(f"terrain maps not cached in {folder}: {exc}", RuntimeWarning, stacklevel=3)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
