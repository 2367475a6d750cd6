"""Generated terrain maps: a stand-in for the Warcraft shortest-path data (Vlastelica et al., 2020).

The Warcraft data set cannot be downloaded here, so this module generates maps with the same
structure: a ``K × K`` grid of terrain types, each with a fixed cost, shown to the model only as an
RGB image in which every type has its own colour *and* texture, labelled with the cheapest
8-neighbour path from the top-left to the bottom-right cell (costs on the cells, both corners
counted, as in the paper's sec. 6 experiment).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import warnings
from pathlib import Path

import numpy as np
import torch

from .._checks import integer_at_least, non_negative_int, one_of
from ..adapters.graphs import GridShortestPath, TorchGridShortestPath
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


def _tiles(pixels: int) -> torch.Tensor:
    """One ``P × P`` RGB tile per terrain type: its colour modulated by its texture   [T, 3, P, P]."""
    tex = torch.from_numpy(_textures(pixels)).float()  # [T, P, P]
    colour = torch.from_numpy(_COLOURS).float()  # [T, 3]
    return colour[:, :, None, None] * (1.0 + 0.25 * tex[:, None])


def render_terrain(
    types: np.ndarray, pixels: int = 8, noise: float = 0.08, generator: torch.Generator | None = None
) -> torch.Tensor:
    """RGB images ``(n, 3, K·P, K·P)``, float32 in [0, 1], of ``(n, K, K)`` terrain types (colour +
    texture + Gaussian pixel noise of standard deviation ``noise`` drawn from ``generator``)."""
    n, k, _ = types.shape
    t = torch.as_tensor(np.asarray(types), dtype=torch.long)  # [n, K, K]
    img = _tiles(pixels)[t].permute(0, 3, 1, 4, 2, 5).reshape(n, 3, k * pixels, k * pixels)  # [n, 3, KP, KP]
    img += noise * torch.randn(img.shape, generator=generator)  # pixel noise
    return img.clamp_(0.0, 1.0)


_BIAS = (0.6, 0.3, 0.0, -0.2, -0.2)
"""Added to each type's smooth field: cheap terrain a bit more common."""
_CELL_NOISE = 0.35
"""Standard deviation of the per-cell noise added to the smooth fields (ragged borders)."""
_PIXEL_NOISE = 0.08
"""Standard deviation of the pixel noise of the images."""
_POOL = 1 << 20
"""Pixel noise is read from a pool of this many (plus one image's) draws, at a random offset per map."""


@dataclasses.dataclass
class _Draws:
    """Every random number of a data set, drawn on the CPU from one ``torch.Generator(seed)`` in a fixed
    order (so the same whatever device then makes the maps): first the pixel noise ``pool`` (×
    `_PIXEL_NOISE`) and each map's window ``offsets`` ``[n]`` into it, then, only when the types are not
    read from the cache, the coarse random ``fields`` ``[n, T, c, c]`` and the per-cell noise ``cells``
    ``[n, T, K, K]`` (× `_CELL_NOISE`)."""

    n: int
    size: int
    generator: torch.Generator
    pool: torch.Tensor
    offsets: torch.Tensor
    fields: torch.Tensor | None = None
    cells: torch.Tensor | None = None

    @classmethod
    def start(cls, n: int, size: int, pixels: int, seed: int) -> _Draws:
        gen = torch.Generator().manual_seed(seed)
        window = 3 * (size * pixels) ** 2  # one image's values
        pool = torch.randn(_POOL + window, generator=gen).mul_(_PIXEL_NOISE)
        offsets = torch.randint(0, _POOL + 1, (n,), generator=gen)
        return cls(n, size, gen, pool, offsets)

    def type_fields(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(fields, cells)``, drawn on first use."""
        if self.fields is None or self.cells is None:
            t, coarse = len(TERRAIN_COSTS), max(2, self.size // 3)
            self.fields = torch.randn((self.n, t, coarse, coarse), generator=self.generator)
            self.cells = torch.randn((self.n, t, self.size, self.size), generator=self.generator)
            self.cells.mul_(_CELL_NOISE)
        return self.fields, self.cells


def _bilinear_weights(coarse: int, size: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(lo, w_lo, w_hi)``: cell ``i`` of the ``K`` fine cells interpolates coarse cells ``lo_i`` and
    ``lo_i + 1`` with weights ``w_lo``, ``w_hi`` (float32, computed on the CPU)."""
    grid = np.linspace(0, coarse - 1, size)
    lo = np.floor(grid).astype(np.int64).clip(0, coarse - 2)
    frac = grid - lo
    return torch.from_numpy(lo), torch.from_numpy(1.0 - frac).float(), torch.from_numpy(frac).float()


def _terrain_types(draws: _Draws, rows: slice, size: int, device: torch.device) -> torch.Tensor:
    """The ``(n, K, K)`` terrain types (``uint8``) of maps ``rows``: the argmax over types of smooth
    random fields (coarse fields, bilinearly upsampled) plus a bias and per-cell noise.

    Every operation is one IEEE-rounded float32 operation (no fused multiply-add, no reduction but the
    argmax), on inputs drawn on the CPU: the types are identical on every device.
    """
    fields, cells = draws.type_fields()
    lo, w_lo, w_hi = (x.to(device) for x in _bilinear_weights(fields.shape[-1], size))
    hi = lo + 1
    f = fields[rows].to(device)  # [c, T, q, q]
    up = f.index_select(2, lo) * w_lo[:, None]  # along rows   [c, T, K, q]
    up = up + f.index_select(2, hi) * w_hi[:, None]
    smooth = up.index_select(3, lo) * w_lo  # along columns   [c, T, K, K]
    smooth = smooth + up.index_select(3, hi) * w_hi
    smooth = smooth + torch.tensor(_BIAS, dtype=torch.float32, device=device)[:, None, None]
    smooth = smooth + cells[rows].to(device)
    return smooth.argmax(dim=1).to(torch.uint8)  # [c, K, K]


def _render(
    types: torch.Tensor, draws: _Draws, rows: slice, pixels: int, pool: torch.Tensor, as_bytes: bool
) -> torch.Tensor:
    """Images ``(c, 3, K·P, K·P)`` of ``types`` (maps ``rows``): each cell's tile plus the map's window of
    pixel noise, clamped to [0, 1] (as bytes: ``round(255 · value)``). One IEEE-rounded operation each:
    the same values on every device."""
    c, k, _ = types.shape
    tiles = _tiles(pixels).to(types.device)
    img = tiles[types.long()].permute(0, 3, 1, 4, 2, 5).reshape(c, 3, k * pixels, k * pixels)  # a copy
    flat = img.view(c, -1)  # [c, 3·KP·KP]
    window = flat.shape[1]
    for i, start in enumerate(draws.offsets[rows].tolist()):  # offsets live on the CPU: no device read
        flat[i].add_(pool[start : start + window])  # the map's window of pixel noise, in place
    img.clamp_(0.0, 1.0)
    return img.mul_(255.0).round_().to(torch.uint8) if as_bytes else img


def _chunk(size: int, pixels: int) -> int:
    """Maps made at once: about 16 M pixel values (the maps do not depend on it)."""
    return max(1, 2**24 // (3 * (size * pixels) ** 2))


def terrain_maps(
    num_samples: int,
    size: int = 12,
    seed: int = 0,
    pixels: int = 8,
    *,
    image_dtype: torch.dtype = torch.float32,
    cache: bool = False,
    device: str | torch.device = "cpu",
) -> PTODataset:
    """Terrain maps with optimal paths, the sec. 6 Warcraft task on generated data.

    The maps are made on ``device``: every random number is drawn on the CPU from one generator seeded
    with ``seed``, and the rest (smooth fields, types, images, the optimal paths) are operations that give
    the same result on every device (IEEE-rounded float32 operations; the paths of
    [`TorchGridShortestPath`][imle_solvers.TorchGridShortestPath], whose ties are broken the same way on
    every device): a data set is the same whatever device made it, and so is the cache entry.

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
        Keep the maps' terrain types and optimal paths in the user cache folder (`cache_dir`,
        ``$IMLE_SOLVERS_CACHE`` or ``~/.cache/imle_solvers``; 10,000 maps of 30 × 30 take 18 MB) and
        read them from there next time; the images are rendered from the types (milliseconds on a GPU).
        Needs ``image_dtype=torch.uint8``.
    device
        Where the maps are made and returned (a GPU makes 11,000 maps of 30 × 30 in about a second).

    Returns
    -------
    PTODataset
        On ``device``. Features: images ``(n, 3, K·P, K·P)``; costs: the ``(n, K·K)`` cell costs
        (`TERRAIN_COSTS` of each cell's type, row-major); solutions: cheapest 8-neighbour
        top-left → bottom-right paths as cell masks; ``oracle`` is
        [`GridShortestPath`][imle_solvers.GridShortestPath] ``(K, K)``. ``info["types"]`` holds the type
        maps (a NumPy array).

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
    dev = torch.device(device)
    n = num_samples
    draws = _Draws.start(n, size, pixels, seed)
    folder = cache_dir() / "terrain" / f"{_CACHE_VERSION}-K{size}-n{n}-seed{seed}"
    stored = _load(folder, n, size) if cache else None
    chunk = _chunk(size, pixels)
    if stored is not None:
        types = torch.from_numpy(stored[0]).to(dev)  # [n, K, K]
        solutions = torch.from_numpy(stored[1]).to(dev).float()  # z*   [n, K·K]
    else:
        types = torch.empty((n, size, size), dtype=torch.uint8, device=dev)
        for i in range(0, n, chunk):
            rows = slice(i, min(i + chunk, n))
            types[rows] = _terrain_types(draws, rows, size, dev)
    costs = torch.tensor(TERRAIN_COSTS, dtype=torch.float32, device=dev)[types.long()].reshape(n, size * size)
    if stored is None:
        paths = TorchGridShortestPath(size, size)  # the same paths, ties included, on every device
        solutions = paths.solve_torch(costs) if n else costs.new_zeros(costs.shape)  # z*   [n, K·K]
        if cache:
            _store(folder, types.cpu().numpy(), solutions.to(torch.uint8).cpu().numpy())
    as_bytes = image_dtype == torch.uint8
    images = torch.empty(
        (n, 3, size * pixels, size * pixels), dtype=torch.uint8 if as_bytes else torch.float32, device=dev
    )
    pool = draws.pool.to(dev)
    for i in range(0, n, chunk):
        rows = slice(i, min(i + chunk, n))
        images[rows] = _render(types[rows], draws, rows, pixels, pool, as_bytes)
    info = {
        "problem": "terrain",
        "size": size,
        "pixels": pixels,
        "seed": seed,
        "terrain_costs": TERRAIN_COSTS.tolist(),
        "types": types.cpu().numpy().astype(np.int64),
    }
    return PTODataset(images, costs, GridShortestPath(size, size), solutions=solutions, info=info)


_CACHE_VERSION = "v3"
"""Bump when the generator changes: cached maps of another version are never read."""
_CACHE_FILES = ("types", "solutions")


def _load(folder: Path, n: int, size: int) -> tuple[np.ndarray, np.ndarray] | None:
    """The cached ``(types, solutions)`` (``uint8`` ``[n, K, K]`` and ``[n, K·K]``), or ``None`` when
    there is no cache entry.

    An entry that cannot be read (a zero-length or truncated file, not a NumPy file) or whose arrays have
    the wrong shape, dtype or values for ``(n, K)`` is removed with a warning, to be generated again:
    it is never used.
    """
    if not folder.exists():
        return None
    expected = {"types": (n, size, size), "solutions": (n, size * size)}
    try:
        arrays = []
        for name in _CACHE_FILES:
            array = np.load(folder / f"{name}.npy", allow_pickle=False)
            shape = expected[name]
            if array.shape != shape or array.dtype != np.uint8:
                raise ValueError(f"{name}.npy holds {array.dtype} {array.shape}, expected uint8 {shape}")
            arrays.append(array)
        types, solutions = arrays
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
    return types, solutions


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
