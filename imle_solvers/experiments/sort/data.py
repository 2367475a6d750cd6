"""Sequences of handwritten numbers to sort, built from scikit-learn's 8×8 digits.

A *number* of ``d`` digits is the horizontal concatenation of ``d`` digit images (most significant
digit on the left), an ``8 × 8d`` image, as the multi-digit MNIST numbers of Grover et al. (2019)
and Mena et al. (2018). Each digit is drawn uniformly from 0-9 and shown by an image of that digit
drawn at random from a pool; the training and the test pools are disjoint parts of the 1,797
images (split at random, 80 % / 20 %), so every test number is written with images the network
never saw. A *sequence* holds ``n`` numbers with distinct values (so that the sorting permutation
is unique), and its target is the permutation matrix that sorts it in ascending order:

    P[r, i] = 1  ⟺  item i is the r-th smallest of the sequence      (rows: ranks, columns: items)

which is the layout of [`TorchMatching`][imle_solvers.TorchMatching]``(n, n)``: variable ``r · n + i``
is the pair (rank ``r``, item ``i``).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from ..._checks import in_range, positive_int
from ...errors import require

__all__ = [
    "DIGIT_SIZE",
    "DigitPool",
    "Sequences",
    "load_digit_pools",
    "make_sequences",
    "sorting_permutation",
]

DIGIT_SIZE = 8
"""Height and width of one scikit-learn digit image."""


@dataclasses.dataclass(frozen=True)
class DigitPool:
    """Digit images grouped by their label, to draw numbers from.

    Attributes
    ----------
    images
        ``[N, 8, 8]`` float32 images in [0, 1], sorted by label.
    labels
        ``[N]`` int64 labels 0-9, ascending.
    """

    images: torch.Tensor
    labels: torch.Tensor

    def __post_init__(self) -> None:
        counts = torch.bincount(self.labels, minlength=10)
        if self.labels.numel() and bool((self.labels[1:] < self.labels[:-1]).any()):
            raise ValueError("labels must be sorted ascending")
        if counts.numel() != 10 or bool((counts == 0).any()):
            raise ValueError(f"every digit 0-9 needs at least one image, got counts {counts.tolist()}")

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    @property
    def starts(self) -> torch.Tensor:
        """``[10]``: the index of the first image of each digit."""
        counts = torch.bincount(self.labels, minlength=10)
        return torch.cumsum(counts, 0) - counts

    @property
    def counts(self) -> torch.Tensor:
        """``[10]``: the number of images of each digit."""
        return torch.bincount(self.labels, minlength=10)

    @classmethod
    def from_arrays(cls, images: np.ndarray | torch.Tensor, labels: np.ndarray | torch.Tensor) -> DigitPool:
        """A pool from images ``[N, 8, 8]`` (already in [0, 1]) and their labels ``[N]``, in any order."""
        x = torch.as_tensor(np.asarray(images), dtype=torch.float32)
        y = torch.as_tensor(np.asarray(labels), dtype=torch.int64)
        if x.ndim != 3 or x.shape[1:] != (DIGIT_SIZE, DIGIT_SIZE) or y.shape != x.shape[:1]:
            raise ValueError(
                f"need images [N, 8, 8] and labels [N], got {tuple(x.shape)} and {tuple(y.shape)}"
            )
        order = torch.argsort(y, stable=True)
        return cls(x[order].contiguous(), y[order].contiguous())


def load_digit_pools(seed: int = 0, test_fraction: float = 0.2) -> tuple[DigitPool, DigitPool]:
    """scikit-learn's 1,797 digits split at random into a training and a test pool.

    Needs scikit-learn (``pip install 'imle-solvers[experiments]'``).

    Parameters
    ----------
    seed
        Seed of the split.
    test_fraction
        Share of the images in the test pool.
    """
    in_range("test_fraction", test_fraction, 0.0, 1.0, closed="()")
    datasets = require("sklearn.datasets", "experiments")
    digits = datasets.load_digits()  # type: ignore[attr-defined]
    images = np.asarray(digits.images, dtype=np.float32) / 16.0  # grey levels 0-16 → [0, 1]   [1797, 8, 8]
    labels = np.asarray(digits.target, dtype=np.int64)
    order = np.random.default_rng(seed).permutation(len(images))
    n_test = max(1, round(test_fraction * len(images)))
    test, train = order[:n_test], order[n_test:]
    return DigitPool.from_arrays(images[train], labels[train]), DigitPool.from_arrays(
        images[test], labels[test]
    )


@dataclasses.dataclass(frozen=True)
class Sequences:
    """A batch of sequences of numbers and the permutation that sorts each.

    Attributes
    ----------
    images
        ``[B, n, 8, 8·digits]`` float32: the numbers' images.
    values
        ``[B, n]`` int64: the numbers, distinct within a sequence.
    permutation
        ``[B, n · n]`` float32: the sorting permutation matrix, row-major (see the module docstring).
    """

    images: torch.Tensor
    values: torch.Tensor
    permutation: torch.Tensor

    def __len__(self) -> int:
        return int(self.values.shape[0])

    def to(self, device: torch.device | str) -> Sequences:
        """The same sequences on ``device``."""
        return Sequences(self.images.to(device), self.values.to(device), self.permutation.to(device))


def sorting_permutation(values: torch.Tensor) -> torch.Tensor:
    """The ascending sorting permutation matrices of ``values`` ``[..., n]``, flattened ``[..., n · n]``.

    ``P[r, i] = 1`` iff item ``i`` is the ``r``-th smallest; ties (which `make_sequences` never draws)
    keep the items' order.
    """
    n = values.shape[-1]
    order = torch.argsort(values, dim=-1, stable=True)  # order[r]: the item of rank r   [..., n]
    perm = torch.nn.functional.one_hot(order, n).to(torch.float32)  # P[r, i]   [..., n, n]
    return perm.flatten(-2)


_KEY_BUDGET = 2**22
"""Random keys drawn at once by `_distinct_values` (rows × range), to bound its memory."""


def _distinct_values(count: int, n: int, high: int, generator: torch.Generator) -> torch.Tensor:
    """``[count, n]`` values drawn uniformly from the n-subsets of ``range(high)``, in random order.

    Small ranges, and sequences too long for rejection to be quick (``n² > high``), take the first ``n``
    of a random ordering of the range (``argsort`` of uniform keys, rows in chunks of bounded memory);
    otherwise values are drawn independently and the sequences with a repeat drawn again (each try
    succeeds with probability above ``e^{-1/2}``).
    """
    if high <= 4096 or n * n > high:
        rows = max(1, _KEY_BUDGET // high)
        parts = [
            torch.argsort(torch.rand(min(rows, count - start), high, generator=generator), dim=-1)[:, :n]
            for start in range(0, count, rows)
        ]
        return torch.cat(parts)
    values = torch.randint(high, (count, n), generator=generator)
    while True:
        ordered = values.sort(dim=-1).values
        repeat = (ordered[:, 1:] == ordered[:, :-1]).any(dim=-1)  # [count]
        if not bool(repeat.any()):
            return values
        values[repeat] = torch.randint(high, (int(repeat.sum()), n), generator=generator)


def make_sequences(pool: DigitPool, count: int, n: int, digits: int, generator: torch.Generator) -> Sequences:
    """Draw ``count`` sequences of ``n`` distinct ``digits``-digit numbers and their images.

    Values are uniform over the n-subsets of ``[0, 10^digits)`` (leading zeros are written: 7 is
    ``07`` with two digits); each digit's image is drawn uniformly among the pool's images of that
    digit. Deterministic given the generator's state (a CPU generator).

    Parameters
    ----------
    pool
        The images to write the numbers with.
    count
        Number of sequences.
    n
        Numbers per sequence (``2 ≤ n ≤ 10^digits``).
    digits
        Digits per number.
    generator
        A CPU `torch.Generator`.
    """
    count, n, digits = positive_int("count", count), positive_int("n", n), positive_int("digits", digits)
    high = 10**digits
    if not 2 <= n <= high:
        raise ValueError(f"n must be in [2, {high}] (distinct {digits}-digit numbers), got {n}")
    values = _distinct_values(count, n, high, generator)  # [B, n]
    powers = 10 ** torch.arange(digits - 1, -1, -1)  # most significant first   [d]
    place = (values[..., None] // powers) % 10  # the digits of every number   [B, n, d]
    pick = torch.rand(place.shape, generator=generator)  # which image of that digit   [B, n, d]
    index = pool.starts[place] + (pick * pool.counts[place]).long().clamp_max(pool.counts[place] - 1)
    glyphs = pool.images[index]  # [B, n, d, 8, 8]
    images = glyphs.permute(0, 1, 3, 2, 4).reshape(count, n, DIGIT_SIZE, DIGIT_SIZE * digits)  # side by side
    return Sequences(images.contiguous(), values, sorting_permutation(values))
