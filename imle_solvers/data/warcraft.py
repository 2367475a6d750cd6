"""The Warcraft shortest-path data set of Vlastelica et al. (2020), read from its published files.

The archive ``warcraft_shortest_path_oneskin`` holds one folder per grid size K ∈ {12, 18, 24, 30}:

```text
KxK/{train,val,test}_maps.npy             uint8 [N, H, W, 3]  RGB terrain images (H = W = 8·K)
KxK/{train,val,test}_shortest_paths.npy         [N, K, K]     0/1 cells of the optimal path
KxK/{train,val,test}_vertex_weights.npy         [N, K, K]     the cell costs (≥ 0)
```

with 10,000 training, 1,000 validation and 1,000 test maps per size. The path runs from the top-left to
the bottom-right cell through 8-neighbouring cells and costs the sum of its cells, both corners
included: the problem of [`GridShortestPath`][imle_solvers.GridShortestPath].
[`warcraft_maps`][imle_solvers.data.warcraft.warcraft_maps] reads one split into a
[`PTODataset`][imle_solvers.data.PTODataset];
[`inspect_warcraft`][imle_solvers.data.warcraft.inspect_warcraft] checks a split from the files' headers
alone (no data read), as ``imle-solvers train --data DIR`` does before any work. The command reads
the training and test splits (all their maps unless ``--n-train`` / ``--n-test`` say fewer); it does not
use the validation split (the protocol trains a fixed number of epochs and reports the last, as the
papers do).
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .._checks import integer_at_least, non_negative_int, one_of
from ..errors import DataError
from .dataset import PTODataset

__all__ = [
    "KINDS",
    "SPLITS",
    "WARCRAFT_SIZES",
    "WarcraftSplit",
    "inspect_warcraft",
    "warcraft_folder",
    "warcraft_maps",
]

WARCRAFT_SIZES = (12, 18, 24, 30)
"""The grid sizes K of the published data set."""

SPLITS = ("train", "val", "test")
"""The splits of the published data set (one file of each kind per split)."""

KINDS = ("maps", "shortest_paths", "vertex_weights")
"""The files of a split: ``{split}_{kind}.npy``."""


@dataclasses.dataclass(frozen=True)
class WarcraftSplit:
    """One split of the data set as its file headers describe it (see `inspect_warcraft`).

    Attributes
    ----------
    folder
        The folder that holds the files.
    split
        ``"train"``, ``"val"`` or ``"test"``.
    size
        K, the grid size.
    count
        N, the number of maps.
    height
        Pixel rows of each image.
    width
        Pixel columns of each image.
    """

    folder: Path
    split: str
    size: int
    count: int
    height: int
    width: int

    def path(self, kind: str) -> Path:
        """The file of ``kind`` (one of `KINDS`)."""
        return self.folder / f"{self.split}_{kind}.npy"


def warcraft_folder(root: str | Path, size: int) -> Path:
    """The folder of the K × K files: ``root/KxK`` if it exists, else ``root`` if it holds files of the
    data set (``*_maps.npy``).

    Raises [`DataError`][imle_solvers.errors.DataError] when ``root`` is not a folder or holds neither.
    """
    base = Path(root).expanduser()
    if not base.is_dir():
        raise DataError(f"{str(base)!r} is not a folder (the Warcraft data: DIR or DIR/{size}x{size})")
    nested = base / f"{size}x{size}"
    if nested.is_dir():
        return nested
    if any((base / f"{split}_maps.npy").exists() for split in SPLITS):
        return base
    sizes = sorted(p.name for p in base.iterdir() if p.is_dir() and re.fullmatch(r"\d+x\d+", p.name))
    found = f" (it has {', '.join(sizes)})" if sizes else ""
    raise DataError(
        f"{base} holds no Warcraft data of size {size}: neither {size}x{size}/ nor *_maps.npy{found}"
    )


def _header(path: Path) -> np.ndarray:
    """The array of a ``.npy`` file, memory-mapped (only its header is read)."""
    if not path.is_file():
        raise DataError(f"{path} is missing")
    try:
        array = np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, EOFError, ValueError) as exc:
        raise DataError(f"{path} cannot be read as a NumPy array: {exc}") from None
    if not isinstance(array, np.ndarray):  # an .npz archive
        raise DataError(f"{path} is not a single NumPy array (.npy)")
    return array


def _shape_text(array: np.ndarray) -> str:
    return f"{array.dtype} [{', '.join(str(d) for d in array.shape)}]"


def inspect_warcraft(root: str | Path, size: int, split: str = "train") -> WarcraftSplit:
    """Check one split from the headers of its three files (no data is read).

    Parameters
    ----------
    root
        ``DIR`` or ``DIR/KxK`` (see `warcraft_folder`).
    size
        K, the grid size the files must hold.
    split
        ``"train"``, ``"val"`` or ``"test"``.

    Raises
    ------
    DataError
        A file is missing or unreadable; the maps are not ``uint8 [N, H, W, 3]``; the paths or the
        weights are not ``[N, K, K]`` of a real (or, for the paths, boolean) dtype; the three files hold
        different numbers of maps.
    """
    integer_at_least("size", size, 2)
    one_of("split", split, SPLITS)
    folder = warcraft_folder(root, size)
    maps, paths, weights = (_header(folder / f"{split}_{kind}.npy") for kind in KINDS)
    name = f"{folder / split}_"
    if maps.dtype != np.uint8 or maps.ndim != 4 or maps.shape[-1] != 3:
        raise DataError(f"{name}maps.npy holds {_shape_text(maps)}, expected uint8 [N, H, W, 3] (RGB images)")
    n, height, width, _ = maps.shape
    if height < size or width < size:
        raise DataError(
            f"{name}maps.npy holds {height}×{width} images, fewer pixels than {size}×{size} cells"
        )
    for kind, array, allowed in (
        ("shortest_paths", paths, "bool, integer or float"),
        ("vertex_weights", weights, "integer or float"),
    ):
        real = array.dtype.kind in "iuf" or (kind == "shortest_paths" and array.dtype.kind == "b")
        if not real or array.ndim != 3 or array.shape[1:] != (size, size):
            raise DataError(
                f"{name}{kind}.npy holds {_shape_text(array)}, expected {allowed} [N, {size}, {size}]"
            )
        if array.shape[0] != n:
            raise DataError(f"{name}{kind}.npy holds {array.shape[0]} maps, {name}maps.npy {n}")
    return WarcraftSplit(folder, split, size, n, height, width)


def warcraft_maps(root: str | Path, size: int, split: str = "train", n: int | None = None) -> PTODataset:
    """One split of the Warcraft data set, as a predict-then-optimize data set.

    Parameters
    ----------
    root
        ``DIR`` or ``DIR/KxK``: the folder of the published files (see the module docstring).
    size
        K ∈ {12, 18, 24, 30} for the published data (any K ≥ 2 is read).
    split
        ``"train"``, ``"val"`` or ``"test"``.
    n
        Read only the first ``n`` maps (``None``: all of them).

    Returns
    -------
    PTODataset
        Features: the images, ``uint8 (N, 3, H, W)`` (a channels-last view of the file's
        ``[N, H, W, 3]``: no copy; the training models divide by 255); costs: the vertex weights
        ``(N, K·K)`` float32, row-major; solutions: the published shortest paths ``(N, K·K)``; objectives
        ``⟨c, z*⟩``; ``oracle``: [`GridShortestPath`][imle_solvers.GridShortestPath] ``(K, K)`` (8
        neighbours).

    Raises
    ------
    DataError
        As `inspect_warcraft`; ``n`` larger than the split; or values out of range, naming the file and
        the maps: a path cell other than 0 or 1, a path without the top-left or bottom-right cell, a
        "path" that is not one path of 8-neighbour steps from corner to corner (every cell, the two
        corners alone, a detour, a second piece), a NaN, infinite or negative weight, or a weight beyond
        float32's range (the weights are checked in the file's own dtype, before the cast to float32).

    References
    ----------
    Vlastelica, Paulus, Musil, Martius & Rolínek, "Differentiation of Blackbox Combinatorial Solvers",
    ICLR 2020, <https://arxiv.org/abs/1912.02175> (the data set: <https://doi.org/10.17617/3.YJCQ5S>).
    """
    meta = inspect_warcraft(root, size, split)
    count = meta.count if n is None else non_negative_int("n", n)
    if count > meta.count:
        raise DataError(f"{meta.path('maps')} holds {meta.count} maps, {count} were asked for")
    maps = np.array(np.load(meta.path("maps"), mmap_mode="r")[:count])  # read into memory   [n, H, W, 3]
    paths = np.asarray(np.load(meta.path("shortest_paths"), mmap_mode="r")[:count])  # [n, K, K]
    weights = np.asarray(np.load(meta.path("vertex_weights"), mmap_mode="r")[:count])  # [n, K, K]
    flat_paths = paths.reshape(count, size * size)
    path_file, weight_file = meta.path("shortest_paths"), meta.path("vertex_weights")
    not_binary = ((flat_paths != 0) & (flat_paths != 1)).any(axis=1)
    _refuse(path_file, not_binary, "have path cells other than 0 and 1")
    ends = (flat_paths[:, 0] != 1) | (flat_paths[:, -1] != 1)  # the path holds both corners
    _refuse(path_file, ends, "miss the top-left or the bottom-right cell")
    _refuse(path_file, ~_corner_to_corner(paths != 0), f"are not {_PATH}")
    flat_weights = weights.reshape(count, size * size)  # checked in the file's own dtype, then cast
    if flat_weights.dtype.kind == "f":
        _refuse(weight_file, ~np.isfinite(flat_weights).all(axis=1), "have NaN or infinite weights")
    _refuse(weight_file, (flat_weights < 0).any(axis=1), "have negative weights")
    with np.errstate(over="ignore"):
        single = flat_weights.astype(np.float32)  # c   [n, K·K]
    _refuse(
        weight_file,
        ~np.isfinite(single).all(axis=1),
        f"have weights beyond float32's range (at most {float(np.finfo(np.float32).max):.4g})",
    )
    from ..adapters.graphs import GridShortestPath

    images = torch.from_numpy(maps).permute(0, 3, 1, 2)  # channels-last view   [n, 3, H, W]
    costs = torch.from_numpy(single)  # c   [n, K·K]
    solutions = torch.from_numpy(flat_paths.astype(np.float32))  # z*   [n, K·K]
    info = {
        "problem": "warcraft",
        "folder": str(meta.folder),
        "split": split,
        "size": size,
        "image": [meta.height, meta.width],
    }
    return PTODataset(images, costs, GridShortestPath(size, size), solutions=solutions, info=info)


_PATH = "paths from the top-left to the bottom-right cell (8-neighbour steps, each cell once, no shortcut)"
"""What a published shortest path is: an induced path of the 8-neighbour grid between the two corners."""


def _corner_to_corner(cells: np.ndarray) -> np.ndarray:
    """Which of the ``[n, K, K]`` boolean cell masks are a path from the top-left to the bottom-right cell:
    one 8-connected set of cells in which the two corners have exactly one marked neighbour and every
    other cell two (an optimal path under positive weights has no shortcut, so no other cell is
    adjacent). Every cell, or the two corners alone (for K > 2), are not.   [n]"""
    from scipy import ndimage

    n, k, _ = cells.shape
    padded = np.pad(cells, ((0, 0), (1, 1), (1, 1))).astype(np.int8)
    neighbours = sum(  # marked 8-neighbours of each cell   [n, K, K]
        padded[:, 1 + dr : 1 + dr + k, 1 + dc : 1 + dc + k]
        for dr in (-1, 0, 1)
        for dc in (-1, 0, 1)
        if dr or dc
    )
    corner = np.zeros((k, k), dtype=bool)
    corner[0, 0] = corner[-1, -1] = True
    wanted = np.where(corner, 1, 2)  # the corners end the path, every other cell continues it
    degrees_ok = ((neighbours == wanted) | ~cells).reshape(n, k * k).all(axis=1)
    structure = np.zeros((3, 3, 3), dtype=bool)
    structure[1] = True  # 8-connectivity within a map, never across maps
    labels, _ = ndimage.label(cells, structure=structure)  # labelled map by map, in order   [n, K, K]
    flat = labels.reshape(n, k * k)
    first = np.where(flat > 0, flat, np.iinfo(flat.dtype).max).min(axis=1, initial=np.iinfo(flat.dtype).max)
    one_piece = flat.max(axis=1, initial=0) == first  # a map's labels are consecutive: one per component
    return degrees_ok & one_piece


def _refuse(path: Path, bad: Any, what: str) -> None:
    """Raise [`DataError`][imle_solvers.errors.DataError] naming the maps where ``bad`` holds."""
    rows = np.flatnonzero(bad)
    if rows.size:
        raise DataError(f"{path}: {rows.size} map(s) {what}", rows=rows.tolist())
