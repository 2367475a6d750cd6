"""Image data for the discrete VAE: scikit-learn's bundled digits, or MNIST from disk (IDX or ``.npz``).

The paper's VAE (sec. 6, "Discrete Variational Auto-Encoder") trains on MNIST, a download. The default
stand-in is scikit-learn's `load_digits` (1,797 grey-level 8×8 digits, shipped inside the package, no
network). A user with MNIST on disk points [`load_images`][imle_solvers.experiments.vae.images.load_images] at
it: the standard IDX files (``train-images-idx3-ubyte[.gz]``, ``t10k-images-idx3-ubyte[.gz]`` in one
directory), a single IDX image file, or a Keras-style ``mnist.npz`` (``x_train``/``x_test``).

Pixels are scaled to [0, 1] and used both as the encoder input and as Bernoulli targets of the
binary cross-entropy (as the paper's Keras code does with ``x / 255``).
"""

from __future__ import annotations

import dataclasses
import gzip
import struct
from pathlib import Path

import numpy as np
import torch

from ..._checks import in_range
from ...errors import require

__all__ = ["ImageData", "load_digits", "load_idx", "load_images", "load_mnist"]

_IDX_DTYPES: dict[int, str] = {0x08: "u1", 0x09: "i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
"""IDX element types (the third byte of the magic number) → numpy dtype (big-endian)."""


@dataclasses.dataclass(frozen=True)
class ImageData:
    """Train and test images, flattened and scaled to [0, 1].

    Attributes
    ----------
    train
        ``[N, H·W]`` float32 training images.
    test
        ``[N, H·W]`` float32 test images.
    shape
        ``(H, W)`` of one image (for plotting).
    name
        Where the data came from.
    """

    train: torch.Tensor
    test: torch.Tensor
    shape: tuple[int, int]
    name: str

    @property
    def n_pixels(self) -> int:
        """``H·W``, the input and output size of the VAE."""
        return int(self.shape[0] * self.shape[1])


def _split(images: np.ndarray, test_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    in_range("test_fraction", test_fraction, 0.0, 1.0, closed="()")
    order = np.random.default_rng(seed).permutation(len(images))
    n_test = max(1, round(test_fraction * len(images)))
    return images[order[n_test:]], images[order[:n_test]]


def _as_data(train: np.ndarray, test: np.ndarray, scale: float, name: str) -> ImageData:
    shape = (int(train.shape[1]), int(train.shape[2]))
    flat = [
        torch.from_numpy(np.asarray(a, dtype=np.float32).reshape(len(a), -1) / scale) for a in (train, test)
    ]
    return ImageData(train=flat[0], test=flat[1], shape=shape, name=name)


def load_digits(test_fraction: float = 0.2, seed: int = 0) -> ImageData:
    """scikit-learn's bundled 8×8 digits (1,797 images, grey levels 0-16), split at random.

    Needs scikit-learn (``pip install 'imle-solvers[experiments]'``).

    Parameters
    ----------
    test_fraction
        Share of the images held out as the test set (default 20 %: 1,437 / 360).
    seed
        Seed of the split.
    """
    datasets = require("sklearn.datasets", "experiments")
    images = np.asarray(datasets.load_digits().images)  # type: ignore[attr-defined]  # [1797, 8, 8]
    train, test = _split(images, test_fraction, seed)
    return _as_data(train, test, 16.0, "scikit-learn digits (8×8)")


def load_idx(path: str | Path) -> np.ndarray:
    """Read one IDX file (the MNIST format; gzip-compressed when the name ends in ``.gz``).

    Raises `ValueError` when the magic number, the element type or the size does not match.
    """
    path = Path(path)
    raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _IDX_DTYPES:
        raise ValueError(f"{path} is not an IDX file (bad magic number {raw[:4].hex()})")
    ndim = raw[3]
    header = 4 + 4 * ndim
    if ndim == 0 or len(raw) < header:
        raise ValueError(f"{path}: truncated IDX header")
    dims = struct.unpack(f">{ndim}I", raw[4:header])  # big-endian uint32 sizes
    dtype = np.dtype(_IDX_DTYPES[raw[2]])
    expected = int(np.prod(dims)) * dtype.itemsize
    if len(raw) - header != expected:
        raise ValueError(f"{path}: IDX header promises {expected} bytes of data, found {len(raw) - header}")
    return np.frombuffer(raw, dtype=dtype, offset=header).reshape(dims)


def _find(directory: Path, stem: str) -> Path | None:
    for name in (stem, stem + ".gz", stem.replace("-idx", ".idx"), stem.replace("-idx", ".idx") + ".gz"):
        if (directory / name).exists():
            return directory / name
    return None


def load_mnist(path: str | Path, test_fraction: float = 0.2, seed: int = 0) -> ImageData:
    """MNIST (or any 8-bit image set) from disk.

    Parameters
    ----------
    path
        A directory with ``train-images-idx3-ubyte`` and ``t10k-images-idx3-ubyte`` (optionally
        ``.gz``); a single IDX image file (split at random); or an ``.npz`` with ``x_train`` and
        ``x_test`` (Keras' ``mnist.npz``) or a single ``x`` / ``images`` array (split at random).
    test_fraction
        Share of the images held out for testing when the source has no test set of its own.
    seed
        Seed of that random split.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no image data at {path}")
    if path.is_dir():
        train_file = _find(path, "train-images-idx3-ubyte")
        test_file = _find(path, "t10k-images-idx3-ubyte")
        if train_file is None or test_file is None:
            raise FileNotFoundError(f"{path} has no train-images-idx3-ubyte / t10k-images-idx3-ubyte files")
        train, test = load_idx(train_file), load_idx(test_file)
    elif path.suffix == ".npz":
        with np.load(path) as npz:
            if "x_train" in npz and "x_test" in npz:
                train, test = npz["x_train"], npz["x_test"]
            else:
                key = next((k for k in ("x", "images") if k in npz), None)
                if key is None:
                    raise ValueError(f"{path} has none of the arrays x_train/x_test, x, images: {list(npz)}")
                train, test = _split(npz[key], test_fraction, seed)
    else:
        train, test = _split(load_idx(path), test_fraction, seed)
    for label, array in (("train", train), ("test", test)):
        if array.ndim != 3:
            raise ValueError(f"{path}: {label} images must be [N, H, W], got shape {array.shape}")
    if train.shape[1:] != test.shape[1:]:
        raise ValueError(
            f"{path}: train images are {train.shape[1:]}, test images {test.shape[1:]}: they must match"
        )
    scale = 255.0 if max(float(train.max()), float(test.max())) > 1.0 else 1.0
    return _as_data(train, test, scale, f"images from {path}")


def load_images(path: str | Path | None = None, test_fraction: float = 0.2, seed: int = 0) -> ImageData:
    """[`load_mnist`][imle_solvers.experiments.vae.images.load_mnist] when ``path`` is given, else
    [`load_digits`][imle_solvers.experiments.vae.images.load_digits]."""
    if path is None:
        return load_digits(test_fraction, seed)
    return load_mnist(path, test_fraction, seed)
